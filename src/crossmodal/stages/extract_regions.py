"""Stage `extract_regions`: region features of every image into data/features/regions.h5 — from the pretrained
backbone on the synthetic world, or converted from the published bottom-up-attention TSVs (profile real)."""
from __future__ import annotations

import json
from pathlib import Path

from .. import paths
from .common import progress, real, set_threads


def run(cfg, root: Path, args) -> None:
    if real(cfg):
        from ..data.butd_tsv import convert_butd_tsv, find_tsv_files

        raw = root / paths.raw(cfg.regions.published)
        summary = convert_butd_tsv(find_tsv_files(raw), root / paths.REGIONS, expected_boxes=cfg.regions.box_range,
                                   progress=progress(cfg))
    else:
        from ..features.regions import extract

        set_threads(cfg)
        summary = extract(cfg.regions, root / paths.BACKBONE, root / paths.WORLD, root / paths.REGIONS,
                          progress=progress(cfg))
    print(json.dumps(summary))
