"""Stage `extract_regions`: region features of every image into data/features/regions.h5 — from the pretrained
backbone on the synthetic world, or converted from the published bottom-up-attention TSVs (profile real): COCO's
(`regions.published`) and, where phrase grounding is trained (`--grounding`, the stage files say so), those of the
Flickr30k images (dataset `flickr30k_features`, placed by hand, with the boxes per image of `regions.published`).
COCO's and Flickr's image ids do not meet (an id seen twice is an error)."""
from __future__ import annotations

import json
from pathlib import Path

from .. import paths
from ..pipeline import manifests
from ..stage_common import progress, real, set_threads

ARGUMENTS = {"--grounding": "the dataset whose TSVs (Flickr30k's images) join COCO's under profile real"}
OPTIONAL = ("--grounding",)


def run(cfg, root: Path, args) -> None:
    if not real(cfg):
        manifests.check(root / paths.WORLD)  # the world this stage reads, as its manifest lists it
    if real(cfg):
        from ..data.butd_tsv import convert_butd_tsv, find_tsv_files

        datasets = [cfg.regions.published, *([args.grounding] if args.grounding else [])]
        files = [f for name in datasets for f in find_tsv_files(root / paths.raw(name))]
        summary = convert_butd_tsv(files, root / paths.REGIONS, expected_boxes=cfg.regions.box_range,
                                   progress=progress(cfg))
    else:
        from ..features.regions import extract

        set_threads(cfg)
        summary = extract(cfg.regions, root / paths.BACKBONE, root / paths.WORLD, root / paths.REGIONS,
                          progress=progress(cfg))
    print(json.dumps(summary))
