"""Model registry: the `model:` name of a variant in params.yaml -> captioner class.

Each class carries its own frozen `Args` dataclass, so `model_args` are validated (unknown keys, types)
with the same strict loader as the rest of params.yaml.
"""
from __future__ import annotations

import io
import pickle
from pathlib import Path

import torch

from ..config import VariantConfig, build
from ..io import InputError
from .aoanet import AoANet
from .att2in import Att2in
from .base import Captioner
from .showtell import ShowTell
from .transformer import Transformer, XTransformer
from .updown import UpDown
from .xlan import XLAN

MODELS: dict[str, type[Captioner]] = {"showtell": ShowTell, "att2in": Att2in, "updown": UpDown, "aoanet": AoANet,
                                     "xlan": XLAN, "transformer": Transformer, "xtransformer": XTransformer}


def build_model(name: str, variant: VariantConfig, vocab_size: int, feature_dim: int) -> Captioner:
    if variant.model not in MODELS:
        raise InputError(
            f"params.yaml: 'variants.{name}.model' is {variant.model!r}; registered models: {', '.join(sorted(MODELS))}"
        )
    cls = MODELS[variant.model]
    args = build(cls.Args, variant.model_args, f"variants.{name}.model_args")
    return cls(args, vocab_size, feature_dim)


def read_model_file(path: Path, stage: str) -> tuple[bytes, dict]:
    """The bytes and contents of a trained system's model.pt, or a one-line error naming the stage that makes it."""
    if not path.is_file():
        raise InputError(f"missing file: {path} (run `dvc repro {stage}` first)")
    data = path.read_bytes()
    try:
        return data, torch.load(io.BytesIO(data), weights_only=False)
    except (RuntimeError, EOFError, pickle.UnpicklingError) as err:
        raise InputError(f"{path}: not a readable model file ({err})") from None


def load_state(model: Captioner, state_dict: dict, path: Path, name: str) -> Captioner:
    try:
        model.load_state_dict(state_dict)
    except RuntimeError as err:
        raise InputError(f"{path}: not a model of {name!r} ({str(err).splitlines()[0]})") from None
    return model
