"""Multi-head attention written once: one head split/merge helper, and one attention class with injected scores.

- Vaswani et al. 2017, eqs. 1-2: MultiHead(Q, K, V) = Concat(head_1..head_H) W^O,
  head_h = softmax(s(Q W^Q_h, K W^K_h)) V W^V_h, d = D / H, with the scaled dot product s(q, k) = q k^T / sqrt(d).
- AoANet (Huang et al. 2019) eqs. 3-5 are the same without W^O (its AoA gate takes that place).
- Heads run vectorised as [B, H, N, d]; the scores s are a parameter (`scores`): any callable or module mapping
  queries [B, H, Nq, d] and keys [B, H, N, d] to scores [B, H, Nq, N] (an unscaled or additive score, say).
- Masked keys (mask False) get exactly zero weight; a query row whose keys are all masked gets NaN weights
  (softmax of -inf) and must not be read.

X-Linear attention (`xlinear.py`) scores with a bilinear pooling and gates its values, so it only shares the
head split/merge and mask helpers below.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from .additive import masked_softmax

Scores = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def check_heads(dim: int, heads: int) -> None:
    if dim % heads:
        raise ValueError(f"dim {dim} is not divisible by heads {heads}")


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """[B, N, D] -> [B, H, N, d], d = D / H (head h holds channels h*d .. h*d + d - 1)."""
    return x.unflatten(-1, (heads, -1)).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, H, N, d] -> [B, N, D]: the heads concatenated, the inverse of `split_heads`."""
    return x.transpose(1, 2).flatten(2)


def head_mask(mask: torch.Tensor) -> torch.Tensor:
    """mask [B, N] (per key) or [B, Nq, N] (per query, e.g. causal) -> [B, 1, 1 or Nq, N], broadcast over heads."""
    return mask[:, None, None, :] if mask.dim() == 2 else mask[:, None]


def scaled_dot_product(q: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """q [B, H, Nq, d], keys [B, H, N, d] -> q k^T / sqrt(d) [B, H, Nq, N] (Vaswani eq. 1)."""
    return q @ keys.transpose(-1, -2) / math.sqrt(q.size(-1))


class MultiHeadAttention(nn.Module):
    """Multi-head attention with W^Q, the fused [W^K; W^V] and optionally the output projection W^O.

    `projections` names the parameters (the state_dict keys): two names give W^Q and [W^K; W^V] with no W^O
    (AoANet), a third adds W^O (Vaswani, the default). Keys and values are projected by `project_kv`, apart from
    `forward`, so a decoder projects an image's regions (or its past words) once and reuses them at every step.
    `dropout` is the dropout on the attention weights; None (Vaswani's paper has none there) adds no Dropout
    module, which keeps the submodule layout, and so the saved state_dict's bytes, of the Transformer's files.
    """

    def __init__(self, dim: int, heads: int, dropout: float | None = None, scores: Scores = scaled_dot_product,
                 projections: tuple[str, ...] = ("query", "kv", "out")):
        super().__init__()
        check_heads(dim, heads)
        if len(projections) not in (2, 3):
            raise ValueError(f"projections names W^Q, [W^K; W^V] and optionally W^O, got {projections}")
        self.heads = heads
        self.projections = projections
        for name, out_dim in zip(projections, (dim, 2 * dim, dim)):
            self.add_module(name, nn.Linear(dim, out_dim))
        self.dropout = None if dropout is None else nn.Dropout(dropout)
        self.scores = scores

    def project_kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, N, D] -> (keys, values), each [B, H, N, d]."""
        keys, values = getattr(self, self.projections[1])(x).chunk(2, dim=-1)
        return split_heads(keys, self.heads), split_heads(values, self.heads)

    def forward(self, query, keys, values, mask):
        """query [B, Nq, D], keys/values from `project_kv`, mask [B, N] or [B, Nq, N] (True = visible)
        -> (output [B, Nq, D], weights [B, H, Nq, N])."""
        q = split_heads(getattr(self, self.projections[0])(query), self.heads)
        weights = masked_softmax(self.scores(q, keys), head_mask(mask))
        out = merge_heads((weights if self.dropout is None else self.dropout(weights)) @ values)
        return (getattr(self, self.projections[2])(out) if len(self.projections) == 3 else out), weights
