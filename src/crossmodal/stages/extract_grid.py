"""Stage `extract_grid`: grid features of every image into data/features/grid.h5 (ETA Table 4's input), from the
pretrained backbone's last convolutional map. Under the real profile the paper's VGG-16 conv5 grid of the COCO
images is not built yet: the stage stops with one line saying so (docs/real-data.md)."""
from __future__ import annotations

import json
from pathlib import Path

from .. import paths
from ..io import InputError
from .common import progress, real, set_threads


def run(cfg, root: Path, args) -> None:
    if real(cfg):
        raise InputError("grid features under profile real (VGG-16 conv5 of the COCO images) are not built yet; "
                         "the ETA pipeline runs on the synthetic profile only (docs/real-data.md)")
    from ..features.grid import extract

    set_threads(cfg)
    summary = extract(cfg.grid, root / paths.BACKBONE, root / paths.WORLD, root / paths.features("grid"),
                      progress=progress(cfg))
    print(json.dumps(summary))
