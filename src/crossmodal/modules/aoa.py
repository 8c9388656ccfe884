"""Attention on Attention (Huang et al., ICCV 2019): multi-head dot-product attention, the AoA gate, the refiner.

- Eqs. 3-5: f_mh-att(Q, K, V) = Concat(head_1..head_H), head_h = softmax(Q_h K_h^T / sqrt(d)) V_h, d = D / H
  (`aoa_attention`, the shared `multihead.MultiHeadAttention`). There is no output projection: AoA takes its
  place (as in the official code).
- Eq. 1: AoA(f_att, Q, K, V) = sigmoid(W_q^g Q + W_v^g V^ + b^g) * (W_q^i Q + W_v^i V^ + b^i), V^ = f_att(Q, K, V),
  computed as GLU(Linear(2D -> 2D)([V^; Q])); see `AttentionOnAttention` for which weight slice is which.
- Eq. 2, one refiner layer: A' = LayerNorm(A + AoA(f_mh-att, W^Q A, W^K A, W^V A)); no feed-forward sublayer.

Choices:
- The Q fed to the AoA gate is the layer input A (in the decoder h_t), as in the official code; eqs. 2 and 8 read
  literally would feed the projected W^Q A. Same function class while W^Q is invertible (W_q^g W^Q is a D x D map).
- Post-LN (eq. 2) by default; `pre_norm=True` is the official code's A + AoA(LN(A)) with a LayerNorm after the last
  layer. nn.LayerNorm (eps inside the sqrt) replaces the code's (x - mean) / (std + 1e-6).
- Dropout where the official code has it: on the attention weights, on the AoA input [V^; Q] (refiner only) and on
  the residual branch.
- Padded regions (mask False) get exactly zero weight as keys; padded query rows give finite values no real row reads.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .multihead import MultiHeadAttention


def aoa_attention(dim: int, heads: int, dropout: float = 0.0) -> MultiHeadAttention:
    """f_mh-att of eqs. 3-5: scaled dot-product attention with `heads` heads and no output projection, its
    W^Q and [W^K; W^V] (rows [:D] W^K, rows [D:] W^V) named query_proj and kv_proj, as trained AoANet files have them.

    Keys and values are projected by `project_kv`, apart from `forward`, so the decoder projects the refined
    regions once per image (W^K_d A, W^V_d A) and reuses them at every step.
    """
    return MultiHeadAttention(dim, heads, dropout, projections=("query_proj", "kv_proj"))


class AttentionOnAttention(nn.Module):
    """Eq. 1 as GLU(Linear(2D -> 2D)([V^; Q])).

    F.glu returns first half * sigmoid(second half), so with W = linear.weight, b = linear.bias:

    information I = W[:D, :D] V^ + W[:D, D:] Q + b[:D]   (W_v^i, W_q^i, b^i)
    gate        G = sigmoid(W[D:, :D] V^ + W[D:, D:] Q + b[D:])   (W_v^g, W_q^g, b^g)
    output      G * I
    """

    def __init__(self, dim: int, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(2 * dim, 2 * dim)

    def forward(self, attended: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        return F.glu(self.linear(self.dropout(torch.cat([attended, query], -1))), dim=-1)


class AoARefiner(nn.Module):
    """The encoder's refining module: `layers` x (multi-head self-attention over regions -> AoA -> residual + LN)."""

    def __init__(self, dim: int, heads: int, layers: int, pre_norm: bool = False, attention_dropout: float = 0.0,
                 aoa_dropout: float = 0.0, residual_dropout: float = 0.0):
        super().__init__()
        self.pre_norm = pre_norm
        self.attentions = nn.ModuleList(aoa_attention(dim, heads, attention_dropout) for _ in range(layers))
        self.aoas = nn.ModuleList(AttentionOnAttention(dim, aoa_dropout) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.final_norm = nn.LayerNorm(dim) if pre_norm else nn.Identity()
        self.dropout = nn.Dropout(residual_dropout)

    def forward(self, regions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """regions [B, N, D], mask [B, N] -> refined regions [B, N, D]."""
        x = regions
        for attention, aoa, norm in zip(self.attentions, self.aoas, self.norms):
            a = norm(x) if self.pre_norm else x
            update = self.dropout(aoa(attention(a, *attention.project_kv(a), mask)[0], a))
            x = x + update if self.pre_norm else norm(x + update)
        return self.final_norm(x)
