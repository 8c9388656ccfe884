"""What BAN's tasks (tasks/vqa.py, tasks/grounding.py) share: building the network by task from the registry,
starting its word embedding from the word vectors, and the region proposals' boxes of a split's images."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from .. import paths
from ..config import build
from ..data.regions import RegionFeatures
from ..models.registry import model_class


def build_network(task, kind: str, words: Sequence[str], *sizes: int) -> nn.Module:
    """`task`'s network for the task `kind` (`MODELS[kind]` of its model's module) from its model_args: a vocabulary
    of `words` plus the padding and unknown ids, `sizes` (the answers, say), then the feature sizes (`task.dims`);
    BAN-Glove's embedding starts from the word vectors."""
    where = task.cfg.where(task.cfg.model_name(task.name))
    cls = model_class(task.model_system.model, kind)
    args = build(cls.Args, task.model_system.model_args, f"{where}.model_args")
    model = cls(args, len(words) + 2, *sizes, task.dims)
    if args.word_vectors:  # BAN-Glove: the stage word_vectors' file, rows in the tasks' id order (padding, unknown,
        # then `words`); a word without a vector starts at zero, as the official `create_glove_embedding_init` leaves it
        from ..features.word_vectors import start_embedding

        start_embedding(model, task.root / paths.WORD_VECTORS, ["<pad>", "<unk>", *words], args.embed_dim, "zeros")
    return model


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
