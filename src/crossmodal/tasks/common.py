"""What BAN's tasks (tasks/vqa.py, tasks/grounding.py) share: building the network by task from the registry, and
starting its word embedding from the word vectors."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from torch import nn

from .. import paths
from ..config import build
from ..models.registry import model_class


def build_network(task, kind: str, words: Sequence[str], *sizes: int) -> nn.Module:
    """`task`'s network for the task `kind` (`MODELS[kind]` of its model's module) from its model_args: a vocabulary
    of `words` plus the padding and unknown ids, `sizes` (the answers, say), then the feature sizes (`task.dims`);
    BAN-Glove's embedding starts from the word vectors."""
    where = task.cfg.where(task.cfg.model_name(task.name))
    cls = model_class(task.model_system.model, kind)
    args = build(cls.Args, task.model_system.model_args, f"{where}.model_args")
    model = cls(args, len(words) + 2, *sizes, task.dims)
    if args.word_vectors:
        load_word_vectors(model, task.root, words, args.embed_dim)
    return model


def load_word_vectors(model: nn.Module, root: Path, words: Sequence[str], embed_dim: int) -> None:
    """BAN-Glove: initialise `model`'s word embedding (`load_word_vectors`) from the stage word_vectors' file, rows
    in the tasks' id order (padding, unknown, then `words`); a word without a vector starts at zero, as the official
    `create_glove_embedding_init` leaves it."""
    from ..features.word_vectors import embedding_matrix, read_word_vectors

    vocabulary = ["<pad>", "<unk>", *words]
    vectors = read_word_vectors(root / paths.WORD_VECTORS, vocabulary)
    matrix, _ = embedding_matrix(vocabulary, vectors, embed_dim, missing="zeros")
    model.load_word_vectors(matrix)
