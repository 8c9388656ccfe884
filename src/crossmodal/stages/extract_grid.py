"""Stage `extract_grid`: grid features of every image into data/features/grid.h5 (ETA Table 4's input): from the
pretrained backbone's last convolutional map on the synthetic world, or under the real profile VGG-16's conv5 of
the COCO images of the Karpathy split (features/vgg.py; the `coco_images` and `vgg16` downloads)."""
from __future__ import annotations

import json
from pathlib import Path

from .. import paths
from ..pipeline import manifests
from ..stage_common import progress, real, set_threads, split_file


def run(cfg, root: Path, args) -> None:
    if not real(cfg):
        manifests.check(root / paths.WORLD)  # the world this stage reads, as its manifest lists it
    set_threads(cfg)
    if real(cfg):
        from ..data.karpathy import read_karpathy
        from ..features.vgg import WEIGHTS_FILE, extract as extract_vgg

        summary = extract_vgg(cfg.grid.size, root / paths.raw("vgg16") / WEIGHTS_FILE, root / paths.raw("coco_images"),
                              read_karpathy(root / split_file(cfg)), root / paths.features("grid"),
                              progress=progress(cfg))
    else:
        from ..features.grid import extract

        summary = extract(cfg.grid, root / paths.BACKBONE, root / paths.WORLD, root / paths.features("grid"),
                          progress=progress(cfg))
    print(json.dumps(summary))
