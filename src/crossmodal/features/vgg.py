"""ETA's grid features under the real profile (ETA §5.2, Table 4): VGG-16's conv5 map of every COCO image of the
Karpathy split, adaptively average-pooled to `grid.size` x `grid.size` cells (7 x 7 in the paper), one row per
cell in the region layout (features/grid.py's cells and boxes), as the synthetic profile's backbone grid.

The network is VGG-16's convolutional part (Simonyan & Zisserman 2015, configuration D: blocks of 2, 2, 3, 3 and 3
3x3 convolutions, each followed by a ReLU, a 2x2 max-pooling after each of the first four blocks). Its output is
conv5_3 after its ReLU, before pool5: 512 channels at 1/16 of the input side (14 x 14 at 224). The weights are
ImageNet's, read from torchvision's file (`vgg16-397923af.pth`: `features.<i>.weight` and `.bias`, i the index in
torchvision's `features` sequence, which this module's layers keep; the classifier is not read). The widths are
read from the file, so a narrow network with the same layout (the tests' stand-in) loads the same way.

Each image is converted to RGB, resized to 224 x 224 (VGG-16's ImageNet input, bilinear, the aspect ratio not
kept: the grid covers the whole image, as the paper's 7 x 7 grid does) and normalised by ImageNet's mean and
standard deviation; the cell boxes are in the original image's pixels.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn
from tqdm import tqdm

from ..data.karpathy import KarpathyImage
from ..data.regions import write_region_file
from ..io import InputError
from .grid import cell_boxes, grid_features

BLOCKS = (2, 2, 3, 3, 3)  # 3x3 convolutions per block (configuration D)
IMAGE_SIZE = 224
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # ImageNet's, as torchvision's weights expect
BATCH = 16  # images per forward pass
SOURCE = "VGG-16 conv5 grid"
WEIGHTS_FILE = "vgg16-397923af.pth"  # torchvision's name (its hash prefix), in data/raw/vgg16/


def conv_indices() -> list[int]:
    """The index of each convolution in torchvision's `features` sequence (0, 2, 5, 7, 10, ..., 28)."""
    indices, k = [], 0
    for block, count in enumerate(BLOCKS):
        for _ in range(count):
            indices.append(k)
            k += 2  # the convolution and its ReLU
        k += 1 if block < len(BLOCKS) - 1 else 0  # the max-pooling
    return indices


class Vgg16Conv(nn.Module):
    """VGG-16's convolutions up to conv5_3's ReLU; `widths` are the five blocks' channels (64, 128, 256, 512, 512)."""

    def __init__(self, widths: tuple[int, ...]):
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for block, (count, width) in enumerate(zip(BLOCKS, widths)):
            for _ in range(count):
                layers += [nn.Conv2d(channels, width, 3, padding=1), nn.ReLU(inplace=True)]
                channels = width
            if block < len(BLOCKS) - 1:
                layers.append(nn.MaxPool2d(2, 2))
        self.features, self.channels = nn.Sequential(*layers), widths[-1]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """[N, 3, 224, 224] normalised images -> conv5_3 [N, C, 14, 14]."""
        return self.features(images)

    feature_map = forward  # the name the attribute detector calls its trunk by (features/backbone.py's)


def load_vgg16(path: Path) -> Vgg16Conv:
    """The network with the weights of torchvision's file at `path` (tensors only: no code is unpickled)."""
    if not path.is_file():
        raise InputError(f"missing VGG-16 weights: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises pickle, zip and runtime errors for a damaged or hostile file
        raise InputError(f"{path}: not a PyTorch weights file ({' '.join(str(err).split())[:200]})") from None
    convs = conv_indices()
    names = [f"features.{i}.{p}" for i in convs for p in ("weight", "bias")]
    missing = [n for n in names if not isinstance(state, dict) or not isinstance(state.get(n), torch.Tensor)]
    if missing:
        raise InputError(f"{path}: not VGG-16's weights (no tensor {missing[0]})")
    last = [convs[sum(BLOCKS[:b + 1]) - 1] for b in range(len(BLOCKS))]  # each block's last convolution
    model = Vgg16Conv(tuple(int(state[f"features.{i}.weight"].shape[0]) for i in last))
    try:
        model.load_state_dict({n: state[n] for n in names})
    except RuntimeError as err:
        raise InputError(f"{path}: VGG-16's layers do not fit ({' '.join(str(err).split())[:200]})") from None
    return model.eval()


def image_size(path: Path) -> tuple[int, int]:
    """An image's (width, height), from its header."""
    if not path.is_file():
        raise InputError(f"missing image file: {path}")
    try:
        with Image.open(path) as im:
            return im.size
    except OSError as err:
        raise InputError(f"{path}: cannot read image ({' '.join(str(err).split())})") from None


def load_image(path: Path) -> tuple[torch.Tensor, tuple[int, int]]:
    """[3, 224, 224] the normalised image, and its original (width, height)."""
    if not path.is_file():
        raise InputError(f"missing image file: {path}")
    try:
        with Image.open(path) as im:
            size = im.size
            pixels = np.asarray(im.convert("RGB").resize((IMAGE_SIZE, IMAGE_SIZE), Image.BILINEAR), np.float32)
    except (OSError, Image.DecompressionBombError) as err:
        raise InputError(f"{path}: cannot read image ({' '.join(str(err).split())})") from None
    image = torch.from_numpy(pixels / 255.0).permute(2, 0, 1)
    return (image - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None], size


def extract(size: int, weights: Path, image_root: Path, images: list[KarpathyImage], out_path: Path,
            progress: bool = True) -> dict:
    """Grid features of `images` (each at `image_root / image.path`) -> one HDF5 feature set. Returns a summary."""
    start = time.perf_counter()
    model = load_vgg16(weights)
    features, sizes = [], []
    with torch.inference_mode(), tqdm(total=len(images), desc="VGG-16 grid", disable=not progress,
                                      leave=False) as bar:
        for lo in range(0, len(images), BATCH):
            loaded = [load_image(image_root / image.path) for image in images[lo:lo + BATCH]]
            batch = torch.stack([image for image, _ in loaded])
            features.extend(grid_features(model(batch), size).numpy())
            sizes += [image_size for _, image_size in loaded]
            bar.update(len(loaded))
    write_region_file(out_path, [image.image_id for image in images], [cell_boxes(size, w, h) for w, h in sizes],
                      features, sizes, SOURCE)
    return {"images": len(images), "cells": size * size, "feature_dim": int(features[0].shape[1]) if features else 0,
            "seconds": time.perf_counter() - start}
