"""Additive (Bahdanau-style) attention over regions, as in Up-Down: a_i = w^T tanh(W_v v_i + W_h h).

Padded regions are masked before the softmax (the official X-LAN Up-Down omits the mask, which lets
padding rows take attention weight; we do not reproduce that bug).
"""
from __future__ import annotations

import torch
from torch import nn


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim where `mask` is True; masked entries get exactly zero weight."""
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of values [B, N, D] over the real regions (mask [B, N])."""
    weights = mask.to(values.dtype).unsqueeze(-1)
    return (values * weights).sum(1) / weights.sum(1).clamp(min=1.0)


class AdditiveAttention(nn.Module):
    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int):
        super().__init__()
        self.query_proj = nn.Linear(query_dim, hidden_dim)
        self.key_proj = nn.Linear(key_dim, hidden_dim, bias=False)
        self.score = nn.Linear(hidden_dim, 1)

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """W_v v_i, computed once per image and reused at every decoding step."""
        return self.key_proj(keys)

    def forward(self, query, values, mask, projected_keys):
        """query [B, Dq], values [B, N, Dv], mask [B, N], projected_keys [B, N, H] -> (context [B, Dv], weights [B, N])."""
        hidden = torch.tanh(projected_keys + self.query_proj(query).unsqueeze(1))
        weights = masked_softmax(self.score(hidden).squeeze(-1), mask)
        return torch.bmm(weights.unsqueeze(1), values).squeeze(1), weights
