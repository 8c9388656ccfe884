"""Model registry: the `model:` name of a variant in params.yaml -> captioner class.

Each class carries its own frozen `Args` dataclass, so `model_args` are validated (unknown keys, types)
with the same strict loader as the rest of params.yaml.
"""
from __future__ import annotations

from ..config import VariantConfig, build
from ..io import InputError
from .aoanet import AoANet
from .att2in import Att2in
from .base import Captioner
from .showtell import ShowTell
from .updown import UpDown

MODELS: dict[str, type[Captioner]] = {"showtell": ShowTell, "att2in": Att2in, "updown": UpDown, "aoanet": AoANet}


def build_model(name: str, variant: VariantConfig, vocab_size: int, feature_dim: int) -> Captioner:
    if variant.model not in MODELS:
        raise InputError(
            f"params.yaml: 'variants.{name}.model' is {variant.model!r}; registered models: {', '.join(sorted(MODELS))}"
        )
    cls = MODELS[variant.model]
    args = build(cls.Args, variant.model_args, f"variants.{name}.model_args")
    return cls(args, vocab_size, feature_dim)
