"""Region features: proposal boxes per image, fc7 features from the pretrained backbone, one HDF5 file.

Bottom-up attention keeps 10-100 detections per image, depending on confidence: some boxes are objects,
some are parts or background, and their number varies. The synthetic proposals imitate that: every
ground-truth object appears with some box jitter (a detector is never exact), plus a random number of
distractors (boxes half on an object, boxes on background), in shuffled order so a box's position in the
list says nothing about it. The output layout is `crossmodal.data.regions` (shared with real features).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..config.features import RegionsConfig
from ..data.regions import write_region_file
from ..io import InputError
from .backbone import ATTRIBUTE_GROUPS, BACKGROUND, load_backbone, load_images, read_scene_graphs

DISTRACTOR_SIDE = (0.1, 0.45)  # distractor side lengths, as fractions of the image side
MIN_SIDE = 2.0  # pixels
EXTRACT_BATCH = 64  # images per forward pass
SOURCE = "synthetic backbone"


def _clip(boxes: np.ndarray, width: int, height: int) -> np.ndarray:
    """Clip boxes [n, 4] to the image and keep each at least MIN_SIDE pixels wide and high."""
    limit = np.array([width, height], dtype=np.float64)
    lo = np.clip(boxes[:, :2], 0, limit - MIN_SIDE)
    hi = np.clip(boxes[:, 2:], lo + MIN_SIDE, limit)
    return np.concatenate([lo, hi], axis=1)


def propose_boxes(objects_boxes, width: int, height: int, rng: np.random.Generator, cfg: RegionsConfig) -> np.ndarray:
    """Proposals [n, 4] (x1, y1, x2, y2 float32 pixels) for one image with ground-truth boxes [m, 4].

    n = m + d with d uniform in [min_distractors, max_distractors]. Ground-truth boxes move each side by
    up to `jitter` of the box's width/height. About half of the distractors overlap a random object
    partially (shifted by 30-80% of its size, scaled by 0.6-1.4); the rest lie anywhere, with sides of
    10-45% of the image. All boxes are clipped to the image; the result is shuffled.
    """
    gt = np.asarray(objects_boxes, dtype=np.float64).reshape(-1, 4)
    m = len(gt)
    gt_wh = gt[:, 2:] - gt[:, :2]
    jittered = gt + rng.uniform(-cfg.jitter, cfg.jitter, size=(m, 4)) * np.tile(gt_wh, 2)

    d = int(rng.integers(cfg.min_distractors, cfg.max_distractors + 1))
    image_wh = np.array([width, height], dtype=np.float64)
    # anywhere: a random size and a position that keeps the box inside the image
    wh = rng.uniform(*DISTRACTOR_SIDE, size=(d, 2)) * image_wh
    centre = wh / 2 + rng.uniform(size=(d, 2)) * (image_wh - wh)
    if m:
        # partial overlap: a box near a random object, off-centre by 30-80% of its size in a random direction
        anchor = rng.integers(0, m, size=d)
        a_wh = gt_wh[anchor]
        shift = rng.uniform(0.3, 0.8, size=(d, 2)) * rng.choice([-1.0, 1.0], size=(d, 2)) * a_wh
        near_centre = (gt[anchor, :2] + gt[anchor, 2:]) / 2 + shift
        near_wh = a_wh * rng.uniform(0.6, 1.4, size=(d, 1))
        near = rng.uniform(size=d) < 0.5
        centre = np.where(near[:, None], near_centre, centre)
        wh = np.where(near[:, None], near_wh, wh)
    distractors = np.concatenate([centre - wh / 2, centre + wh / 2], axis=1)

    boxes = _clip(np.concatenate([jittered, distractors]), width, height)
    return boxes[rng.permutation(len(boxes))].astype(np.float32)


def extract(cfg: RegionsConfig, backbone_path: Path, world_dir: Path, out_path: Path, progress: bool = True) -> dict:
    """Region features for every image of every split -> one HDF5 file (`crossmodal.data.regions` layout).

    Proposals are drawn image by image, in scene-graph order, from one generator seeded with cfg.seed;
    the backbone runs in eval mode over batches of images. Returns a summary with the number of images,
    the total and min/mean/max boxes per image, the feature dimension and the seconds taken.
    """
    start = time.perf_counter()
    if not 0 <= cfg.min_distractors <= cfg.max_distractors:
        raise InputError("params.yaml: 'regions' needs 0 <= min_distractors <= max_distractors")
    if not 0 <= cfg.jitter < 0.5:
        raise InputError("params.yaml: 'regions.jitter' must be in [0, 0.5)")
    world_dir = Path(world_dir)
    sg = read_scene_graphs(world_dir)
    model, meta = load_backbone(backbone_path)
    vocab = sg["attributes"]
    if meta["classes"] != [BACKGROUND] + list(vocab["shapes"]) or any(meta["attributes"][g] != list(vocab[g + "s"]) for g in ATTRIBUTE_GROUPS):
        raise InputError(f"{backbone_path}: backbone was trained on other classes or attributes than the world in {world_dir}")
    entries = sg["images"]
    if not entries:
        raise InputError(f"{world_dir / 'scene_graphs.json'}: no images")

    rng = np.random.default_rng(cfg.seed)
    proposals = []
    for e in entries:
        gt = np.array([o["box"] for o in e["objects"]], dtype=np.float64).reshape(-1, 4)
        proposals.append(propose_boxes(gt, int(e["width"]), int(e["height"]), rng, cfg))

    features = []
    with torch.inference_mode(), tqdm(total=len(entries), desc="regions", disable=not progress, leave=False) as bar:
        for lo in range(0, len(entries), EXTRACT_BATCH):
            batch = proposals[lo:lo + EXTRACT_BATCH]
            images = load_images(world_dir, entries[lo:lo + EXTRACT_BATCH])
            counts = [len(b) for b in batch]
            padded = torch.zeros(len(batch), max(counts), 4)
            for i, b in enumerate(batch):
                padded[i, :len(b)] = torch.from_numpy(b)
            feats = model.region_features(images, padded).numpy()
            features.extend(feats[i, :c] for i, c in enumerate(counts))
            bar.update(len(batch))

    write_region_file(
        out_path, [int(e["image_id"]) for e in entries], proposals, features,
        [(int(e["width"]), int(e["height"])) for e in entries], SOURCE,
    )
    counts = np.array([len(b) for b in proposals])
    return {
        "images": len(entries),
        "total_boxes": int(counts.sum()),
        "boxes_per_image": {"min": int(counts.min()), "mean": float(counts.mean()), "max": int(counts.max())},
        "feature_dim": int(features[0].shape[1]),
        "seconds": time.perf_counter() - start,
    }
