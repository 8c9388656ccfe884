"""Named model inputs: what a batch hands a captioner, one padded tensor per input name.

A model declares the names it consumes (`Captioner.INPUTS`, e.g. ("regions",), or ("regions", "grid") or the
video modalities ("frames", "motion", "audio")); a batch is a mapping from each name to a `Padded` pair. Every
input is padded to the longest item of the batch and carries its own mask, so inputs of one image may have
different lengths (36 regions, 49 grid cells, 5 attribute words).

This module depends on torch only: the loaders that build inputs and the models and decoders that read them all
import it, and it imports none of them.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

import torch


class Padded(NamedTuple):
    """One named input of a batch: `values` [B, N, ...] padded along N, and `mask` [B, N] bool.

    values: float features ([B, N, D] regions, grid cells, frames) or long token ids ([B, N] attribute words,
    question tokens); rows past an item's length are padding and may hold anything.
    mask: True where values[b, i] is a real element, False on padding; models give padding no weight.
    """

    values: torch.Tensor
    mask: torch.Tensor


Inputs = Mapping[str, Padded]


def batch_size(inputs: Inputs) -> int:
    """B, the leading dim every input shares (read from the first input; `check_inputs` checks they agree)."""
    for item in inputs.values():
        return item.mask.size(0)
    raise ValueError("no inputs: a batch needs at least one named input")


def check_inputs(inputs: Inputs, required: Iterable[str]) -> None:
    """ValueError unless every `required` name is present and every input is a `Padded` with a [B, N] bool mask
    matching its values' first two dims, with one B across inputs."""
    missing = [name for name in required if name not in inputs]
    if missing:
        raise ValueError(f"missing input(s) {', '.join(map(repr, missing))}; got {sorted(inputs) or 'none'}")
    sizes = {}
    for name, item in inputs.items():
        if not isinstance(item, Padded):
            raise ValueError(f"input {name!r} must be a Padded(values, mask), got {type(item).__name__}")
        values, mask = item
        if mask.dtype != torch.bool or mask.dim() != 2 or values.dim() < 2 or mask.shape != values.shape[:2]:
            raise ValueError(f"input {name!r}: mask must be [B, N] bool matching values [B, N, ...]; got mask "
                             f"{tuple(mask.shape)} {mask.dtype} for values {tuple(values.shape)}")
        sizes[name] = mask.size(0)
    if len(set(sizes.values())) > 1:
        raise ValueError(f"inputs differ in batch size: {', '.join(f'{n} {b}' for n, b in sizes.items())}")
