"""X-Linear attention block (Pan et al., CVPR 2020, eqs. 2-6), multi-head as in the official X-LAN code.

For a query Q and keys/values {k_i}, {v_i} of the real regions:
  B_k,i = q ⊙ k_i              bilinear query-key representation        q = P_q(Q), k_i = P_k(k_i)
  B'_k,i = Dropout(ReLU(W_B B_k,i))   the shared low-dimensional embedding (eq. 3)
  β^s = softmax_i(w_b B'_k,i)  spatial attention over the real regions (eq. 4)
  β^c = sigmoid(W_e mean_i B'_k,i)   channel attention, squeeze-excitation on the masked mean (eq. 5)
  out = β^c ⊙ Σ_i β^s_i (u ⊙ v_i)   = β^c ⊙ u ⊙ Σ_i β^s_i v_i     u = P_v1(Q), v_i = P_v2(v_i) (eqs. 2, 6)
Each projection P is Linear -> activation -> GroupNorm(groups), per the official code; the activation is a
parameter: ReLU for the plain block, CELU (α = 1.3, the official "+ELU" block) for the infinity-order one.
All of it runs per head on D / heads channels; heads are concatenated, with no output projection and no
1/sqrt(d) scaling (the official code has neither). Vectorised over heads, queries and regions.
"""
from __future__ import annotations

import torch
from torch import nn

from .additive import masked_softmax
from .multihead import check_heads, head_mask, merge_heads, split_heads

ACTIVATIONS = {"relu": lambda: nn.ReLU(), "celu": lambda: nn.CELU(alpha=1.3), "elu": lambda: nn.ELU()}


class _Projection(nn.Module):
    """Linear -> activation -> GroupNorm over the last dim (rows of any leading shape)."""

    def __init__(self, in_dim: int, out_dim: int, activation: str, groups: int):
        super().__init__()
        self.linear = nn.Linear(in_dim, out_dim)
        self.activation = ACTIVATIONS[activation]()
        self.norm = nn.GroupNorm(groups, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.activation(self.linear(x))
        return self.norm(y.reshape(-1, y.size(-1))).view_as(y)


class XLinearAttention(nn.Module):
    """One X-Linear attention block.

    `forward(query [B, Nq, Dq] or [B, Dq], keys [B, N, D], values [B, N, D], mask)` returns the attended
    features of the query's shape with `dim` channels, and the spatial weights [B, H, Nq, N]. mask is
    [B, N] (True = real region) or [B, Nq, N] per query (a causal mask over words, say).
    """

    def __init__(self, dim: int, heads: int = 8, query_dim: int | None = None, mid_dim: int | None = None,
                 activation: str = "celu", groups: int = 8, dropout: float = 0.1):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, not {activation!r}")
        check_heads(dim, heads)
        query_dim = query_dim or dim
        self.heads, head_dim = heads, dim // heads
        mid_dim = mid_dim or head_dim // 2  # the official 64 for 128-d heads
        self.query_key = _Projection(query_dim, dim, activation, groups)
        self.key = _Projection(dim, dim, activation, groups)
        self.query_value = _Projection(query_dim, dim, activation, groups)
        self.value = _Projection(dim, dim, activation, groups)
        self.embed = nn.Sequential(nn.Linear(head_dim, mid_dim), nn.ReLU(), nn.Dropout(dropout))  # W_B
        self.spatial = nn.Linear(mid_dim, 1)  # w_b
        self.channel = nn.Linear(mid_dim, head_dim)  # W_e

    def project_kv(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [B, N, D] -> P_k(k), P_v2(v) split into heads [B, H, N, d]; a decoder computes
        them once per image and passes them to `attend` at every step."""
        return split_heads(self.key(keys), self.heads), split_heads(self.value(values), self.heads)

    def attend(self, query, keys, values, mask):
        """`forward` on keys/values from `project_kv`."""
        single = query.dim() == 2
        if single:
            query = query.unsqueeze(1)
        q = split_heads(self.query_key(query), self.heads).unsqueeze(3)  # [B, H, Nq, 1, d]
        u = split_heads(self.query_value(query), self.heads)  # [B, H, Nq, d]
        embedded = self.embed(q * keys.unsqueeze(2))  # B'_k [B, H, Nq, N, m]
        region_mask = head_mask(mask)  # [B, 1, 1 or Nq, N]
        weights = masked_softmax(self.spatial(embedded).squeeze(-1), region_mask)  # β^s [B, H, Nq, N]
        keep = region_mask.unsqueeze(-1).to(embedded.dtype)
        pooled = (embedded * keep).sum(3) / keep.sum(3).clamp(min=1.0)  # masked mean [B, H, Nq, m]
        gate = torch.sigmoid(self.channel(pooled))  # β^c [B, H, Nq, d]
        attended = gate * u * (weights @ values)  # [B, H, Nq, d]
        out = merge_heads(attended)  # [B, Nq, D]
        return (out.squeeze(1) if single else out), weights

    def forward(self, query, keys, values, mask):
        return self.attend(query, *self.project_kv(keys, values), mask)


class XLinearEncoderLayer(nn.Module):
    """One stacked layer (eqs. 7-8): the attended feature becomes the next query, keys and values are updated.

    v^(m) = X-Linear(K^(m-1), V^(m-1), v^(m-1));
    k_i^(m) = LayerNorm(ReLU(W_m^k [v^(m); k_i^(m-1)]) + k_i^(m-1)), likewise v_i^(m) with W_m^v.
    `separate_values=True` is the paper's eq. 8 (own W^k, W^v); False is the official code, where keys and
    values are one tensor updated once (its X-Transformer encoder). Dropout on the block output (the code's
    0.5 wrapper) and on the update branch (`update_dropout`, by default the same). Padded rows are updated
    too but never read by a real one.
    """

    def __init__(self, dim: int, heads: int = 8, activation: str = "celu", groups: int = 8,
                 attention_dropout: float = 0.1, dropout: float = 0.5, separate_values: bool = True,
                 update_dropout: float | None = None):
        super().__init__()
        update_dropout = dropout if update_dropout is None else update_dropout
        self.attention = XLinearAttention(dim, heads, activation=activation, groups=groups, dropout=attention_dropout)
        self.dropout = nn.Dropout(dropout)
        self.separate_values = separate_values
        self.key_update = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU(), nn.Dropout(update_dropout))
        self.key_norm = nn.LayerNorm(dim)
        if separate_values:
            self.value_update = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU(), nn.Dropout(update_dropout))
            self.value_norm = nn.LayerNorm(dim)

    @staticmethod
    def _update(update: nn.Module, norm: nn.Module, attended: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return norm(update(torch.cat([attended.unsqueeze(1).expand_as(rows), rows], -1)) + rows)

    def forward(self, query, keys, values, mask):
        """query [B, D], keys/values [B, N, D] -> (attended [B, D], new keys, new values)."""
        attended = self.dropout(self.attention(query, keys, values, mask)[0])
        new_keys = self._update(self.key_update, self.key_norm, attended, keys)
        if not self.separate_values:
            return attended, new_keys, new_keys
        return attended, new_keys, self._update(self.value_update, self.value_norm, attended, values)
