"""Region proposals made by hand from a world's scene graphs, for the BAN tasks' tests (VQA and grounding): each
object's box with its attributes one-hot, so that a small network can learn the task from them quickly."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from crossmodal import paths
from crossmodal.data.regions import write_region_file


def scene_regions(root: Path, graphs: list[dict], cfg) -> None:
    """The regions file of the images of `graphs`: each object's box (one pixel off) with its attributes one-hot, the
    whole image with a scene flag, and two small distractors with noise only."""
    world = cfg.world
    names = [*world.colors, *world.shapes, *world.sizes, *world.textures, "scene"]
    rng = np.random.default_rng(0)
    ids, boxes, features, sizes = [], [], [], []
    for graph in graphs:
        w, h = graph["width"], graph["height"]
        rows, feats = [], []
        for obj in graph["objects"]:
            rows.append(np.asarray(obj["box"]) + rng.uniform(-1, 1, 4))
            feats.append([float(n in (obj["color"], obj["shape"], obj["size"], obj["texture"])) for n in names])
        rows.append([0, 0, w, h])
        feats.append([float(n == "scene") for n in names])
        for _ in range(2):
            x, y = rng.uniform(0, w - 8), rng.uniform(0, h - 8)
            rows.append([x, y, x + 6, y + 6])
            feats.append([0.0] * len(names))
        feats = np.asarray(feats) + 0.1 * rng.standard_normal((len(feats), len(names)))
        ids.append(graph["image_id"])
        boxes.append(np.clip(np.asarray(rows, np.float32), 0, w))
        features.append(feats.astype(np.float32))
        sizes.append((w, h))
    write_region_file(root / paths.REGIONS, ids, boxes, features, sizes, "hand-made (test)")
