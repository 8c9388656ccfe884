"""The Transformer's (Vaswani et al. 2017) building blocks that several systems share: sinusoidal positions
(sec. 3.5), the causal mask, the post-LN position-wise FFN sublayer (sec. 3.3) and the post-LN encoder layer
(sec. 3.1). The X-LAN paper's Transformer and X-Transformer (`models/transformer.py`, `models/xtransformer.py`) and
the ETA-Transformer's sub-encoders (`modules/entangled.py`) build on them.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .multihead import MultiHeadAttention


def sinusoid(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """PE(p, 2i) = sin(p / 10000^(2i/D)), PE(p, 2i+1) = cos(p / 10000^(2i/D)) (Vaswani sec. 3.5) -> [T, D]."""
    freq = torch.exp(torch.arange(0, dim, 2, device=positions.device) * (-math.log(10000.0) / dim))
    angles = positions.float().unsqueeze(1) * freq
    return torch.stack([angles.sin(), angles.cos()], -1).flatten(1)[:, :dim]


def causal_mask(new: int, past: int, device) -> torch.Tensor:
    """[new, past + new] bool: query i (at position past + i) sees keys 0 .. past + i."""
    return torch.arange(past + new, device=device) <= (past + torch.arange(new, device=device)).unsqueeze(1)


class FeedForward(nn.Module):
    """LN(x + Drop(W_2 Drop_inner(ReLU(W_1 x)))): the post-LN FFN sublayer (official FeedForwardBlock)."""

    def __init__(self, dim: int, hidden: int, dropout: float, inner_dropout: float = 0.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(inner_dropout),
                                 nn.Linear(hidden, dim), nn.Dropout(dropout))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return self.norm(x + self.net(x))


class EncoderLayer(nn.Module):
    """x = LN(x + Drop(SelfAtt(x))), then the FFN sublayer; padded rows (mask False) masked as keys.
    `forward(x [B, N, D], mask [B, N] or broadcastable)`."""

    def __init__(self, dim: int, heads: int, ffn_dim: int, dropout: float):
        super().__init__()
        self.attention = MultiHeadAttention(dim, heads)  # W^Q, W^K|W^V, W^O named query, kv, out
        self.norm = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)
        self.ffn = FeedForward(dim, ffn_dim, dropout)

    def forward(self, x, mask):
        x = self.norm(x + self.dropout(self.attention(x, *self.attention.project_kv(x), mask)[0]))
        return self.ffn(x)
