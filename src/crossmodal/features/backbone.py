"""The region backbone: a small CNN + RoI head pretrained on the world's objects (Faster R-CNN analogue).

Bottom-up attention features come from a Faster R-CNN trained on Visual Genome to predict object classes
and attributes for each box; its fc7 layer is the region feature. Here the same recipe at toy scale:

* trunk: RGB plus two CoordConv channels (normalised x and y of every pixel, in [-1, 1]) through three
  3x3 conv + BatchNorm + ReLU blocks, two of them with stride 2, giving a map at 1/4 resolution with
  2 * `channels` channels. The coordinate channels make the features carry absolute position: a plain
  conv net is translation-equivariant and RoI-align then normalises each box to a fixed grid, so without
  them a region feature could say neither where the object is (needed by "left of", "above") nor how big
  its box is (the "size" attribute).
* RoI-align (`roi_align`) with `torch.nn.functional.grid_sample`: bilinear samples on a regular grid inside
  each box (aligned: no half-pixel shift, sampling_ratio x sampling_ratio points per bin, averaged), giving
  `roi_size` x `roi_size` cells per box.
* head: flatten -> Linear -> ReLU -> Linear(feature_dim) -> ReLU = the "fc7" region feature (non-negative
  like the real fc7/pool5 features); classifiers on top: object class (shapes + background, index 0) and
  one per attribute group (colour, size, texture; not trained on background boxes).

`pretrain` trains it on ground-truth boxes of the train split (slightly jittered) plus random background
boxes and reports per-head accuracy on the val split's ground-truth boxes.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from tqdm import tqdm

from ..config.features import BackboneConfig
from ..config.loader import to_dict
from ..io import InputError, load_torch, read_json, save_torch

BACKGROUND = "__background__"
ATTRIBUTE_GROUPS = ("color", "size", "texture")  # object keys; the vocabularies are "<group>s" in the file
HEADS = ("class",) + ATTRIBUTE_GROUPS
IGNORE = -100  # label of padded boxes (all heads) and of background boxes (attribute heads)
TRAIN_JITTER = 0.05  # ground-truth boxes move by up to this fraction of their size while pretraining
BACKGROUND_MAX_IOU = 0.3


# --------------------------------------------------------------------------------------------------
# the world on disk


def read_scene_graphs(world_dir: Path) -> dict[str, Any]:
    """`<world>/scene_graphs.json`, checked for the keys the feature stages use."""
    path = Path(world_dir) / "scene_graphs.json"
    data = read_json(path)
    try:
        attrs = data["attributes"]
        for key in ("shapes", "colors", "sizes", "textures"):
            if not isinstance(attrs[key], list) or not attrs[key]:
                raise InputError(f"{path}: attributes.{key} must be a non-empty list")
        for img in data["images"]:
            for key in ("image_id", "split", "file_name", "width", "height", "objects"):
                if key not in img:
                    raise InputError(f"{path}: image {img.get('image_id', '?')} lacks '{key}'")
    except (KeyError, TypeError) as err:
        raise InputError(f"{path}: not a scene-graph file (missing {err})") from None
    return data


def load_images(world_dir: Path, entries: list[dict]) -> torch.Tensor:
    """All images of `entries` as one uint8 tensor [N, 3, H, W] (they must share one size)."""
    world_dir = Path(world_dir)
    arrays = []
    for e in entries:
        path = world_dir / e["file_name"]
        if not path.is_file():
            raise InputError(f"missing image file: {path}")
        try:
            with Image.open(path) as im:
                arr = np.asarray(im.convert("RGB"))
        except (OSError, Image.DecompressionBombError) as err:  # the latter: far more pixels than PIL's limit
            raise InputError(f"{path}: cannot read image ({' '.join(str(err).split())})") from None
        if arr.shape[:2] != (e["height"], e["width"]):
            raise InputError(f"{path}: image is {arr.shape[1]}x{arr.shape[0]} but the scene graph says {e['width']}x{e['height']}")
        if arrays and arr.shape != arrays[0].shape:
            raise InputError(f"{path}: image size {arr.shape[1]}x{arr.shape[0]} differs from the others ({arrays[0].shape[1]}x{arrays[0].shape[0]})")
        arrays.append(arr)
    if not arrays:
        return torch.zeros(0, 3, 1, 1, dtype=torch.uint8)
    return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).contiguous()


def ground_truth(entries: list[dict], vocab: dict[str, list[str]], where: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded ground truth: boxes [N, Omax, 4] and labels [N, Omax, 4 heads] (IGNORE on padding).

    Class labels are 1 + shape index (0 is background); attribute labels index their vocabularies.
    """
    omax = max((len(e["objects"]) for e in entries), default=0)
    boxes = torch.zeros(len(entries), max(omax, 1), 4)
    labels = torch.full((len(entries), max(omax, 1), len(HEADS)), IGNORE, dtype=torch.long)
    lookup = {"class": {s: i + 1 for i, s in enumerate(vocab["shapes"])}}
    lookup.update({g: {v: i for i, v in enumerate(vocab[g + "s"])} for g in ATTRIBUTE_GROUPS})
    keys = ("shape",) + ATTRIBUTE_GROUPS
    for i, e in enumerate(entries):
        for j, obj in enumerate(e["objects"]):
            try:
                boxes[i, j] = torch.tensor([float(v) for v in obj["box"]])
                labels[i, j] = torch.tensor([lookup[h][obj[k]] for h, k in zip(HEADS, keys)])
            except (KeyError, ValueError, TypeError, RuntimeError) as err:
                raise InputError(f"{where}: image {e['image_id']} object {j}: bad or unknown value ({err})") from None
    return boxes, labels


# --------------------------------------------------------------------------------------------------
# the model


def coord_channels(n: int, height: int, width: int, device=None) -> torch.Tensor:
    """Normalised pixel-centre coordinates [n, 2, H, W]: channel 0 is x, channel 1 is y, both in (-1, 1)."""
    xs = (torch.arange(width, device=device, dtype=torch.float32) + 0.5) / width * 2 - 1
    ys = (torch.arange(height, device=device, dtype=torch.float32) + 0.5) / height * 2 - 1
    grid = torch.stack(torch.broadcast_tensors(xs[None, :], ys[:, None]))
    return grid.expand(n, 2, height, width)


def roi_align(
    fmap: torch.Tensor, boxes: torch.Tensor, stride: float, out_size: int, sampling_ratio: int = 2, offset: float | None = None
) -> torch.Tensor:
    """Bilinear RoI-align of boxes [N, K, 4] (x1, y1, x2, y2 in image pixels) on fmap [N, C, h, w] -> [N, K, C, R, R].

    Each box is split into R x R bins; each bin is sampled at the centres of sampling_ratio^2 equal
    sub-cells and the samples are averaged (aligned RoI-align with a fixed sampling ratio). Feature cell j
    is centred at image coordinate `stride * j + offset` (default stride / 2, i.e. cell j covers pixels
    [stride j, stride (j + 1))). Points past the outer cell centres take the border value. All boxes
    of an image go through one grid_sample call, stacked along the grid's height.
    """
    n, c, h, w = fmap.shape
    k = boxes.shape[1]
    s = out_size * sampling_ratio
    offset = stride / 2 if offset is None else offset
    t = (torch.arange(s, dtype=fmap.dtype, device=fmap.device) + 0.5) / s
    x1, y1, x2, y2 = boxes.to(fmap.dtype).unbind(-1)
    xs = x1[..., None] + (x2 - x1)[..., None] * t  # [N, K, s]
    ys = y1[..., None] + (y2 - y1)[..., None] * t
    # image pixels -> feature index u -> grid_sample's normalised coordinate (align_corners=False: (2u + 1) / w - 1)
    gx = (2 * (xs - offset) / stride + 1) / w - 1
    gy = (2 * (ys - offset) / stride + 1) / h - 1
    grid = torch.stack(torch.broadcast_tensors(gx[:, :, None, :], gy[:, :, :, None]), dim=-1)  # [N, K, s, s, 2]
    out = F.grid_sample(fmap, grid.reshape(n, k * s, s, 2), mode="bilinear", padding_mode="border", align_corners=False)
    out = out.view(n, c, k, out_size, sampling_ratio, out_size, sampling_ratio).mean(dim=(4, 6))
    return out.permute(0, 2, 1, 3, 4)


def _block(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Backbone(nn.Module):
    """CoordConv trunk at 1/4 resolution + RoI-align + fc6/fc7 head + class/attribute classifiers."""

    stride = 4
    # 3x3 convs with padding 1 and stride 2 centre output j on input index 2j, so after two of them
    # feature cell j sits on pixel 4j, whose centre is at image coordinate 4j + 0.5
    offset = 0.5

    def __init__(self, num_classes: int, attribute_sizes: dict[str, int], channels: int = 32, feature_dim: int = 128, roi_size: int = 7):
        super().__init__()
        self.roi_size = roi_size
        self.feature_dim = feature_dim
        self.trunk = nn.Sequential(_block(5, channels, 2), _block(channels, 2 * channels, 2), _block(2 * channels, 2 * channels, 1))
        hidden = 2 * feature_dim
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(2 * channels * roi_size * roi_size, hidden), nn.ReLU(inplace=True),
            nn.Linear(hidden, feature_dim), nn.ReLU(inplace=True),
        )
        self.classifiers = nn.ModuleDict({"class": nn.Linear(feature_dim, num_classes)})
        self.classifiers.update({g: nn.Linear(feature_dim, attribute_sizes[g]) for g in ATTRIBUTE_GROUPS})

    def feature_map(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 images [N, 3, H, W] -> feature map [N, 2C, H/4, W/4]."""
        x = images.float() / 255.0 - 0.5
        x = torch.cat([x, coord_channels(x.shape[0], x.shape[2], x.shape[3], x.device)], dim=1)
        return self.trunk(x)

    def region_features(self, images: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        """fc7 features [N, K, D] of boxes [N, K, 4] (pixels) in images [N, 3, H, W]."""
        fmap = self.feature_map(images)
        rois = roi_align(fmap, boxes, self.stride, self.roi_size, sampling_ratio=2, offset=self.offset)
        n, k = boxes.shape[:2]
        return self.head(rois.reshape(n * k, *rois.shape[2:])).view(n, k, -1)

    def forward(self, images: torch.Tensor, boxes: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        feats = self.region_features(images, boxes)
        return feats, {name: clf(feats) for name, clf in self.classifiers.items()}


def load_backbone(path: Path, map_location: str | torch.device = "cpu",
                  stage: str = "pretrain_backbone") -> tuple[Backbone, dict]:
    """A pretrained backbone (eval mode) and its checkpoint metadata (config, classes, attributes); the file
    is read by `load_torch` (tensors and plain data only), errors name it and `stage`, which makes it."""
    path = Path(path)
    ckpt = load_torch(path, stage, "backbone checkpoint")
    try:
        cfg = ckpt["config"]
        model = Backbone(
            len(ckpt["classes"]), {g: len(ckpt["attributes"][g]) for g in ATTRIBUTE_GROUPS},
            cfg["channels"], cfg["feature_dim"], cfg["roi_size"],
        )
        model.load_state_dict(ckpt["state_dict"])
    except (RuntimeError, KeyError, TypeError, ValueError) as err:
        raise InputError(f"{path}: not a backbone checkpoint ({' '.join(str(err).split())[:200]}) "
                         f"(made by `dvc repro {stage}`)") from None
    model.to(map_location).eval()
    return model, {k: v for k, v in ckpt.items() if k != "state_dict"}


# --------------------------------------------------------------------------------------------------
# pretraining


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of boxes a [..., M, 4] against b [..., O, 4] -> [..., M, O]."""
    lt = torch.maximum(a[..., :, None, :2], b[..., None, :, :2])
    rb = torch.minimum(a[..., :, None, 2:], b[..., None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area_a = (a[..., 2:] - a[..., :2]).clamp(min=0).prod(-1)
    area_b = (b[..., 2:] - b[..., :2]).clamp(min=0).prod(-1)
    return inter / (area_a[..., :, None] + area_b[..., None, :] - inter).clamp(min=1e-6)


def jitter_boxes(boxes: torch.Tensor, frac: float, width: int, height: int, gen: torch.Generator) -> torch.Tensor:
    """Move every coordinate by up to `frac` of the box's width/height; clip to the image, keep >= 2 px."""
    size = (boxes[..., 2:] - boxes[..., :2]).repeat(*([1] * (boxes.dim() - 1)), 2)
    noise = (torch.rand(boxes.shape, generator=gen) * 2 - 1) * frac * size
    out = boxes + noise
    limit = torch.tensor([width, height, width, height], dtype=boxes.dtype)
    out = torch.minimum(out.clamp(min=0), limit)
    lo = torch.minimum(out[..., :2], limit[:2] - 2)
    hi = torch.maximum(out[..., 2:], lo + 2)
    return torch.cat([lo, hi], dim=-1)


def background_boxes(
    gt_boxes: torch.Tensor, gt_valid: torch.Tensor, count: int, width: int, height: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` random boxes per image with IoU < 0.3 against every object -> (boxes [N, count, 4], found [N, count]).

    Candidates of 12-50% of the image side are drawn for all images at once and the first valid ones
    kept; an image where fewer than `count` qualify gets its remaining slots marked not found.
    """
    n, candidates = gt_boxes.shape[0], max(32, 4 * count)
    wh = torch.rand(n, candidates, 2, generator=gen) * 0.38 + 0.12
    wh = wh * torch.tensor([width, height], dtype=torch.float32)
    xy = torch.rand(n, candidates, 2, generator=gen) * (torch.tensor([width, height], dtype=torch.float32) - wh)
    cand = torch.cat([xy, xy + wh], dim=-1)
    iou = box_iou(cand, gt_boxes).masked_fill(~gt_valid[:, None, :], 0)
    ok = iou.max(dim=-1).values < BACKGROUND_MAX_IOU
    order = torch.argsort((~ok).float() + torch.arange(candidates) / candidates, dim=1)[:, :count]  # valid ones first, in draw order
    return torch.gather(cand, 1, order[..., None].expand(-1, -1, 4)), torch.gather(ok, 1, order)


def _loss(logits: dict[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
    return sum(F.cross_entropy(logits[h].flatten(0, 1), labels[..., i].flatten(), ignore_index=IGNORE) for i, h in enumerate(HEADS))


@torch.no_grad()
def evaluate(model: Backbone, images: torch.Tensor, boxes: torch.Tensor, labels: torch.Tensor, batch_size: int) -> dict[str, float]:
    """Accuracy of every head on the given (ground-truth) boxes; padded boxes are skipped."""
    model.eval()
    correct = torch.zeros(len(HEADS))
    total = torch.zeros(len(HEADS))
    for lo in range(0, len(images), batch_size):
        _, logits = model(images[lo:lo + batch_size], boxes[lo:lo + batch_size])
        lab = labels[lo:lo + batch_size]
        pred = torch.stack([logits[h].argmax(-1) for h in HEADS], dim=-1)
        valid = lab != IGNORE
        correct += ((pred == lab) & valid).flatten(0, 1).sum(0)
        total += valid.flatten(0, 1).sum(0)
    return {h: float(c / t) if t > 0 else float("nan") for h, c, t in zip(HEADS, correct, total)}


def pretrain(cfg: BackboneConfig, world_dir: Path, out_path: Path, progress: bool = True) -> dict:
    """Train the backbone on the world's train split, evaluate on val, save a checkpoint at `out_path`.

    Returns {"accuracy": {head: val accuracy}, "chance": {head: 1 / classes}, "train_loss": [per epoch],
    "seconds", "train_images", "val_images", "parameters"}.
    """
    start = time.perf_counter()
    world_dir = Path(world_dir)
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    sg = read_scene_graphs(world_dir)
    vocab = sg["attributes"]
    where = str(world_dir / "scene_graphs.json")
    splits = {s: [e for e in sg["images"] if e["split"] == s] for s in ("train", "val")}
    for s, entries in splits.items():
        if not entries:
            raise InputError(f"{where}: the {s} split has no images")
    train_img, val_img = load_images(world_dir, splits["train"]), load_images(world_dir, splits["val"])
    train_box, train_lab = ground_truth(splits["train"], vocab, where)
    val_box, val_lab = ground_truth(splits["val"], vocab, where)
    height, width = train_img.shape[2:]
    gt_valid = train_lab[..., 0] != IGNORE

    classes = [BACKGROUND] + list(vocab["shapes"])
    attributes = {g: list(vocab[g + "s"]) for g in ATTRIBUTE_GROUPS}
    model = Backbone(len(classes), {g: len(v) for g, v in attributes.items()}, cfg.channels, cfg.feature_dim, cfg.roi_size)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)

    n = len(train_img)
    steps = (n + cfg.batch_size - 1) // cfg.batch_size
    bg_labels = torch.full((n, cfg.background_boxes, len(HEADS)), IGNORE, dtype=torch.long)
    losses = []
    bar = tqdm(total=cfg.epochs * steps, desc="backbone", disable=not progress, leave=False)
    for _epoch in range(cfg.epochs):
        model.train()
        # fresh jitter and background boxes every epoch, for all images at once
        boxes = jitter_boxes(train_box, TRAIN_JITTER, width, height, gen)
        bg, found = background_boxes(train_box, gt_valid, cfg.background_boxes, width, height, gen)
        bg_labels[..., 0] = torch.where(found, 0, IGNORE)
        all_boxes, all_labels = torch.cat([boxes, bg], dim=1), torch.cat([train_lab, bg_labels], dim=1)
        order = torch.randperm(n, generator=gen)
        total = 0.0
        for b in range(steps):
            idx = order[b * cfg.batch_size:(b + 1) * cfg.batch_size]
            _, logits = model(train_img[idx], all_boxes[idx])
            loss = _loss(logits, all_labels[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}")
        losses.append(total / n)
    bar.close()

    accuracy = evaluate(model, val_img, val_box, val_lab, max(cfg.batch_size, 64))
    ckpt = {"state_dict": model.state_dict(), "config": to_dict(cfg), "classes": classes, "attributes": attributes,
            "stride": Backbone.stride, "image_size": [int(width), int(height)]}
    save_torch(ckpt, out_path)
    return {
        "accuracy": accuracy,
        "chance": {"class": 1 / len(vocab["shapes"]), **{g: 1 / len(v) for g, v in attributes.items()}},
        "train_loss": losses,
        "seconds": time.perf_counter() - start,
        "train_images": n,
        "val_images": len(val_img),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
