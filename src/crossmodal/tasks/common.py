"""What BAN's tasks (tasks/vqa.py, tasks/grounding.py) share: starting the network's word embedding from the word
vectors (BAN-Glove), and the region proposals' boxes of a split's images."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from .. import paths
from ..data.regions import RegionFeatures
from ..features.word_vectors import start_embedding
from .base import Task


def start_word_vectors(task: Task, model: nn.Module, words: Sequence[str]) -> None:
    """Where the system asks (`word_vectors: true`, BAN-Glove), start `model`'s word embedding (built by
    models/registry.build_model for a vocabulary of `words` plus the padding and unknown ids) from the stage
    word_vectors' file, rows in the tasks' id order (padding, unknown, then `words`); a word without a vector starts
    at zero, as the official `create_glove_embedding_init` leaves it."""
    args = model.args  # the model_args the network was built from (BANArgs, BottomUpArgs)
    if args.word_vectors:
        start_embedding(model, task.root / paths.WORD_VECTORS, ["<pad>", "<unk>", *words], args.embed_dim, "zeros")


def padded_boxes(path: Path, image_ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Each image's region boxes in pixels [N, φ, 4] (padding rows zero), their mask [N, φ], φ the images' largest
    count (the width of the split's `regions` batches, data/feature_sets.py), and the images' (width, height)
    [N, 2]. Reads the boxes only, not the features."""
    with RegionFeatures(path) as reader:
        every = torch.from_numpy(reader._read("boxes").astype(np.float32))
        rows = [reader.index_of(i) for i in image_ids]
        spans = [(int(reader.offsets[k]), int(reader.offsets[k + 1])) for k in rows]
        sizes = reader._read("image_size")[rows].astype(np.float32)
    width = max((hi - lo for lo, hi in spans), default=0)
    boxes, mask = torch.zeros(len(spans), width, 4), torch.zeros(len(spans), width, dtype=torch.bool)
    for row, (lo, hi) in enumerate(spans):
        boxes[row, :hi - lo], mask[row, :hi - lo] = every[lo:hi], True
    return boxes, mask, sizes
