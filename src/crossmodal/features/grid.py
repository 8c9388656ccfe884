"""Grid features (ETA §5.2, Table 4): the whole image encoded by the backbone's last convolutional map, adaptively
average-pooled to size x size cells; one feature row per cell, row-major (top-left first), each with its cell's
box in pixels. The paper takes VGG-16's conv5 pooled to 7 x 7 for the rows it compares with Show, Attend and Tell
and the convolutional captioner; here the synthetic world's pretrained backbone (features/backbone.py) stands in
for VGG-16, and its map (1/4 of the image side, 2 x `backbone.channels` channels) is pooled the same way.

The file is a feature set in the region layout (data/regions.py), read as a named input like the regions.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F
from tqdm import tqdm

from ..config.features import GridConfig
from ..data.regions import write_region_file
from .backbone import load_backbone, load_images, read_scene_graphs

EXTRACT_BATCH = 64  # images per forward pass
SOURCE = "synthetic backbone grid"


def cell_boxes(size: int, width: int, height: int) -> np.ndarray:
    """Pixel boxes [size * size, 4] (x1, y1, x2, y2) of adaptive pooling's cells, row-major: cell (i, j) covers
    rows floor(i H / s) .. ceil((i + 1) H / s) and likewise columns, as `adaptive_avg_pool2d` bins them."""
    def edges(n: int) -> tuple[np.ndarray, np.ndarray]:
        k = np.arange(size)
        return np.floor(k * n / size), np.ceil((k + 1) * n / size)

    (y1, y2), (x1, x2) = edges(height), edges(width)
    boxes = [(x1[j], y1[i], x2[j], y2[i]) for i in range(size) for j in range(size)]
    return np.asarray(boxes, dtype=np.float32)


def grid_features(feature_map: torch.Tensor, size: int) -> torch.Tensor:
    """[N, C, H, W] -> [N, size * size, C]: adaptive average pooling, cells row-major."""
    return F.adaptive_avg_pool2d(feature_map, size).flatten(2).transpose(1, 2)


def extract(cfg: GridConfig, backbone_path: Path, world_dir: Path, out_path: Path, progress: bool = True) -> dict:
    """Grid features of every image of the world -> one HDF5 feature set. Returns a summary."""
    start = time.perf_counter()
    entries = read_scene_graphs(world_dir)["images"]
    model, _ = load_backbone(backbone_path)
    features = []
    with torch.inference_mode(), tqdm(total=len(entries), desc="grid", disable=not progress, leave=False) as bar:
        for lo in range(0, len(entries), EXTRACT_BATCH):
            images = load_images(world_dir, entries[lo:lo + EXTRACT_BATCH])
            features.extend(grid_features(model.feature_map(images), cfg.size).numpy())
            bar.update(len(images))
    sizes = [(int(e["width"]), int(e["height"])) for e in entries]
    write_region_file(out_path, [int(e["image_id"]) for e in entries],
                      [cell_boxes(cfg.size, w, h) for w, h in sizes], features, sizes, SOURCE)
    return {"images": len(entries), "cells": cfg.size * cfg.size, "feature_dim": int(features[0].shape[1]),
            "seconds": time.perf_counter() - start}
