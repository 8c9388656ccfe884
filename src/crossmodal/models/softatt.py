"""Soft-attention LSTM (Xu et al., "Show, Attend and Tell", ICML 2015, §3.1.2 and §4.2): ETA Table 4's "LSTM" row.

ETA §5.4.1 compares its Transformer with "LSTM [41]" (Xu et al.), "equipped with visual attention", over the 7x7
conv5 grid of VGG-16 (Table 4 itself labels the row "LSTM [18]", which the reference list resolves to Karpathy &
Fei-Fei, a model without attention; we follow §5.4.1). The grid reaches the model as its `regions` input.

With a_i (i = 1..L) the annotation vectors, m the embedding size, n the LSTM size:
  h_0 = f_init,h(ā), c_0 = f_init,c(ā),  ā = (1/L) Σ_i a_i over the real cells (masked mean)
  e_ti = f_att(a_i, h_{t-1}) = w^T tanh(W_a a_i + W_h h_{t-1} + b) + c   (the additive MLP, `modules.additive`)
  α_t = softmax_i(e_ti) over the real cells (padded cells get exactly 0)
  β_t = σ(f_β(h_{t-1})) (a scalar),  ẑ_t = β_t Σ_i α_ti a_i
  i, f, o, g from T[E y_{t-1}; h_{t-1}; ẑ_t] (`nn.LSTMCell` on [E y_{t-1}; ẑ_t])
  p(y_t) ∝ exp(L_o Dropout(E y_{t-1} + L_h h_t + L_z ẑ_t))   (the deep output, §3.1.2)

Args -> symbols: embed_dim = m (E, L_o ∈ R^{K×m}, L_h ∈ R^{m×n}, L_z ∈ R^{m×D}); hidden_dim = n; att_hidden_dim =
the hidden size of f_att; annotation_dim = D (0: the input features are the a_i themselves); dropout on the
deep-output vector. Paper: a_i from VGG's 14x14x512 feature map before max pooling (L = 196, D = 512); ETA: the
7x7 conv5 grid of VGG-16 (L = 49, D = 512).

Ours (deviations / choices where the paper is silent):
- annotation_dim > 0 replaces the features by a linear projection a_i = W v_i + b before everything else.
- f_init,h and f_init,c are one tanh layer each ("MLPs" in the paper; their depth is ours); f_β is one linear layer.
- No doubly stochastic attention regulariser λ Σ_i (1 − Σ_t α_ti)² (§4.2.1): it is an extra loss term over the
  whole caption's attention weights, which the shared trainer (cross-entropy on the log-probabilities) has not.
- Dropout placement (only on the deep-output vector) and all default sizes are ours.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from ..modules.additive import AdditiveAttention, masked_mean
from .base import Captioner


@dataclass(frozen=True)
class SoftAttentionArgs:
    embed_dim: int = 512  # m: word embedding E y, deep-output vector
    hidden_dim: int = 512  # n: LSTM
    att_hidden_dim: int = 512  # hidden units of f_att
    annotation_dim: int = 0  # D: 0 = the input features are the a_i (paper); > 0 = linear projection (ours)
    dropout: float = 0.5  # on E y_{t-1} + L_h h_t + L_z ẑ_t, before L_o

    def __post_init__(self) -> None:
        if min(self.embed_dim, self.hidden_dim, self.att_hidden_dim) < 1:
            raise ValueError("embed_dim, hidden_dim and att_hidden_dim must be >= 1")
        if self.annotation_dim < 0:
            raise ValueError(f"annotation_dim must be >= 0 (0: no projection), not {self.annotation_dim}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), not {self.dropout}")


class SoftAttention(Captioner):
    Args = SoftAttentionArgs
    INPUTS = ("regions",)

    def __init__(self, args: SoftAttentionArgs, vocab_size: int, input_dims: Mapping[str, int]):
        super().__init__()
        self.args = args
        self.vocab_size = vocab_size
        m, n = args.embed_dim, args.hidden_dim
        d = args.annotation_dim or input_dims["regions"]
        self.annotate = nn.Linear(input_dims["regions"], d) if args.annotation_dim else nn.Identity()
        self.init_h = nn.Sequential(nn.Linear(d, n), nn.Tanh())  # f_init,h
        self.init_c = nn.Sequential(nn.Linear(d, n), nn.Tanh())  # f_init,c
        self.attention = AdditiveAttention(n, d, args.att_hidden_dim)  # f_att
        self.gate = nn.Linear(n, 1)  # f_β
        self.word_embed = nn.Embedding(vocab_size, m)  # E
        self.lstm = nn.LSTMCell(m + d, n)
        self.out_h = nn.Linear(n, m)  # L_h (its bias is the deep output's)
        self.out_z = nn.Linear(d, m, bias=False)  # L_z
        self.dropout = nn.Dropout(args.dropout)
        self.logits = nn.Linear(m, vocab_size)  # L_o

    def encode(self, inputs):
        """(a [B, L, D], mask [B, L], ā [B, D], W_a a [B, L, H])."""
        feats, mask = inputs["regions"]
        annotations = self.annotate(feats)
        return annotations, mask, masked_mean(annotations, mask), self.attention.project_keys(annotations)

    def init_state(self, encoded, batch_size):
        mean = encoded[2]
        return self.init_h(mean), self.init_c(mean)

    def attend(self, h, encoded):
        """(ẑ_t [B, D], α_t [B, L], β_t [B, 1]) from h_{t-1}."""
        annotations, mask, _, keys = encoded
        context, alpha = self.attention(h, annotations, mask, keys)
        beta = torch.sigmoid(self.gate(h))
        return beta * context, alpha, beta

    def step(self, words, state, encoded):
        h, c = state
        z, _, _ = self.attend(h, encoded)
        embedded = self.word_embed(words)
        h, c = self.lstm(torch.cat([embedded, z], 1), (h, c))
        deep = self.dropout(embedded + self.out_h(h) + self.out_z(z))
        return torch.log_softmax(self.logits(deep), dim=-1), (h, c)


MODEL = SoftAttention
