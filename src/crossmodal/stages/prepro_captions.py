"""Stage `prepro_captions`: tokenise the split file's captions once per vocabulary convention, write the
val/test references in COCO layout, and set the qualitative examples aside (the first
`evaluation.qualitative_examples` test images; copies of the synthetic world's, a list only under the real
profile, whose images are not downloaded)."""
from __future__ import annotations

import json
from pathlib import Path

from .. import paths
from ..data.captions import preprocess
from ..data.coco import read_coco_captions
from ..data.karpathy import read_karpathy
from ..pipeline import manifests
from ..stage_common import real, split_file


def run(cfg, root: Path, args) -> None:
    if not real(cfg):
        manifests.check(root / paths.WORLD)  # the world this stage reads, as its manifest lists it
    sources = paths.COCO_CAPTION_FILES if real(cfg) else [paths.world_annotations(s) for s in ("val", "test")]
    references: dict[int, list[str]] = {}
    for source in sources:
        references.update(read_coco_captions(root / source))
    images = read_karpathy(root / split_file(cfg))
    vocabularies = {name: v for name, v in cfg.vocabularies.items() if v.corpus == "images"}  # (video: prepro_video)
    print(json.dumps(preprocess(vocabularies, images, references, root / paths.CAPTIONS,
                                cfg.evaluation.qualitative_examples, None if real(cfg) else root / paths.WORLD)))
