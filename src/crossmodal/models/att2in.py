"""Att2in (Rennie et al., CVPR 2017, "Self-critical sequence training", sec. 4.2): the "SCST" table rows.

The word embedding x_t is the LSTM input; the attended feature I_t (additive attention from h_{t-1},
softmax over the real regions) enters only the cell candidate:
  i, f, o = sigmoid(W_.x x_t + W_.h h_{t-1} + b_.)
  c_t = i * maxout(W_zx x_t + W_zI I_t + W_zh h_{t-1} + b_z) + f * c_{t-1},  h_t = o * tanh(c_t)
  s_t = softmax(W_s Dropout(h_t))
maxout takes the larger of two pre-activations per unit (first vs second half of the 2H candidate rows).
Sizes 512 and dropout 0.5 are self-critical.pytorch's defaults (rnn_size, input_encoding_size,
att_hid_size, drop_prob_lm), the code behind these rows.
Deviations: we attend over region features, not the paper's 7x7 ResNet grid, and embed them first with
Linear + ReLU + Dropout (as that code's Att2in2 and our Up-Down do; its Att2in attends the raw features).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from ..modules.additive import AdditiveAttention
from .base import Captioner


@dataclass(frozen=True)
class Att2inArgs:
    embed_dim: int = 512
    hidden_dim: int = 512
    att_hidden_dim: int = 512
    dropout: float = 0.5
    feature_dropout: float = 0.5


class Att2in(Captioner):
    Args = Att2inArgs
    INPUTS = ("regions",)

    def __init__(self, args: Att2inArgs, vocab_size: int, input_dims: Mapping[str, int]):
        super().__init__()
        self.args = args
        self.vocab_size = vocab_size
        hidden = args.hidden_dim
        self.feature_embed = nn.Sequential(
            nn.Linear(input_dims["regions"], hidden), nn.ReLU(), nn.Dropout(args.feature_dropout)
        )
        self.word_embed = nn.Embedding(vocab_size, args.embed_dim)
        self.attention = AdditiveAttention(hidden, hidden, args.att_hidden_dim)
        # rows: input, forget, output gates (H each), then the 2H maxout candidate; b_z lives here
        self.gates = nn.Linear(args.embed_dim + hidden, 5 * hidden)
        self.context_to_candidate = nn.Linear(hidden, 2 * hidden, bias=False)
        self.dropout = nn.Dropout(args.dropout)
        self.logits = nn.Linear(hidden, vocab_size)

    def encode(self, inputs):
        feats, mask = inputs["regions"]
        regions = self.feature_embed(feats)
        return regions, mask, self.attention.project_keys(regions)

    def init_state(self, encoded, batch_size):
        zeros = encoded[0].new_zeros(batch_size, self.args.hidden_dim)
        return zeros, zeros

    def step(self, words, state, encoded):
        regions, mask, keys = encoded
        h, c = state
        context, _ = self.attention(h, regions, mask, keys)
        sums = self.gates(torch.cat([self.word_embed(words), h], 1))
        in_gate, forget_gate, out_gate = torch.sigmoid(sums[:, : 3 * self.args.hidden_dim]).chunk(3, 1)
        candidate = sums[:, 3 * self.args.hidden_dim:] + self.context_to_candidate(context)
        c = in_gate * torch.maximum(*candidate.chunk(2, 1)) + forget_gate * c
        h = out_gate * torch.tanh(c)
        return torch.log_softmax(self.logits(self.dropout(h)), dim=-1), (h, c)


MODEL = Att2in
