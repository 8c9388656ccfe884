"""Stage `reference_points`: the best constant caption (chosen on val) and the leave-one-out human ceiling on
test, the floor and ceiling every captioning table is read against."""
from __future__ import annotations

from pathlib import Path

from .. import paths
from ..data.coco import read_coco_captions
from ..data.karpathy import read_karpathy
from ..io import write_json
from ..metrics.captions import evaluate_captions
from ..metrics.reference_points import best_constant_caption, human_ceiling
from ..pipeline import manifests
from ..stage_common import real, record_environment, split_file


def run(cfg, root: Path, args) -> None:
    if not real(cfg):
        manifests.check(root / paths.WORLD)  # the world this stage reads, as its manifest lists it
    images = read_karpathy(root / split_file(cfg))
    candidates = sorted({" ".join(s.tokens) for img in images if img.split == "train" for s in img.sentences})
    val_refs = read_coco_captions(root / paths.references("val"))
    test_refs = read_coco_captions(root / paths.references("test"))
    caption, val_cider = best_constant_caption(candidates, val_refs)
    constant = evaluate_captions({i: caption for i in test_refs}, test_refs)
    write_json(root / paths.METRICS / "reference_points.json", {
        "constant_caption": {"caption": caption, "chosen_on": "val", "val_CIDEr": val_cider, "test": constant},
        "human_ceiling": {"test": human_ceiling(test_refs)},
        "environment": record_environment(),
    })
