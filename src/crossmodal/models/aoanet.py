"""AoANet captioner (Huang et al., ICCV 2019): AoA refiner over the regions, LSTM + multi-head attention + AoA decoder.

- Encoder: regions embedded by Linear + ReLU + Dropout (the official code's att_embed), then the AoA refiner (eq. 2).
- Decoder: x_t = [W_e w_t; mean(A) + c_{t-1}] (eq. 6), h_t, m_t = LSTM(x_t, h_{t-1}, m_{t-1}) (eq. 7),
  c_t = AoA(f_mh-att, W^Q_d h_t, W^K_d A, W^V_d A) (eq. 8), log p(y_t) = log_softmax(W_p Dropout(c_t)).
- As in the official code: the attention query is LayerNorm(h_t) before W^Q_d (its norm_q), the AoA gate reads the
  raw h_t, c_{t-1} enters the LSTM through a dropout (its --ctx_drop 1), and W^K_d A, W^V_d A are computed once in
  `encode`. Padded regions are masked in the attention and the mean.

Default dropouts are those of the official train.sh: drop_prob_lm 0.5 on the word embedding, the region embedding,
c_{t-1} and the output; 0.1 on the attention weights and the refiner's residual branch; 0.3 on the refiner's AoA input.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from ..modules.additive import masked_mean
from ..modules.aoa import AoARefiner, AttentionOnAttention, aoa_attention
from .base import Captioner


@dataclass(frozen=True)
class AoANetArgs:
    embed_dim: int = 1024
    hidden_dim: int = 1024  # D: region embedding, refiner, LSTM and context size
    heads: int = 8
    refiner_layers: int = 6
    pre_norm: bool = False  # False: the paper's post-LN (eq. 2); True: the official code's pre-LN + final LN
    dropout: float = 0.5  # word embedding and output (drop_prob_lm)
    feature_dropout: float = 0.5  # region embedding (att_embed uses drop_prob_lm)
    ctx_dropout: float = 0.5  # c_{t-1} in the LSTM input
    attention_dropout: float = 0.1  # attention weights, refiner and decoder
    aoa_dropout: float = 0.3  # refiner AoA input (--dropout_aoa)
    residual_dropout: float = 0.1  # refiner residual branch

    def __post_init__(self) -> None:
        if self.hidden_dim % self.heads:
            raise ValueError(f"hidden_dim {self.hidden_dim} must be divisible by heads {self.heads}")


class AoANet(Captioner):
    Args = AoANetArgs
    INPUTS = ("regions",)

    def __init__(self, args: AoANetArgs, vocab_size: int, input_dims: Mapping[str, int]):
        super().__init__()
        self.args = args
        self.vocab_size = vocab_size
        d = args.hidden_dim
        self.feature_embed = nn.Sequential(nn.Linear(input_dims["regions"], d), nn.ReLU(),
                                           nn.Dropout(args.feature_dropout))
        self.refiner = AoARefiner(d, args.heads, args.refiner_layers, args.pre_norm, args.attention_dropout,
                                  args.aoa_dropout, args.residual_dropout)
        self.word_embed = nn.Sequential(nn.Embedding(vocab_size, args.embed_dim), nn.ReLU(), nn.Dropout(args.dropout))
        self.lstm = nn.LSTMCell(args.embed_dim + d, d)
        self.ctx_dropout = nn.Dropout(args.ctx_dropout)
        self.query_norm = nn.LayerNorm(d)
        self.attention = aoa_attention(d, args.heads, args.attention_dropout)
        self.aoa = AttentionOnAttention(d)
        self.dropout = nn.Dropout(args.dropout)
        self.logits = nn.Linear(d, vocab_size)

    def encode(self, inputs):
        feats, mask = inputs["regions"]
        regions = self.refiner(self.feature_embed(feats), mask)
        return (mask, masked_mean(regions, mask), *self.attention.project_kv(regions))

    def init_state(self, encoded, batch_size):
        zeros = encoded[1].new_zeros(batch_size, self.args.hidden_dim)
        return zeros, zeros, zeros  # h, LSTM memory m, context c_{t-1}

    def step(self, words, state, encoded):
        mask, mean, keys, values = encoded
        h, m, ctx = state
        h, m = self.lstm(torch.cat([self.word_embed(words), mean + self.ctx_dropout(ctx)], 1), (h, m))
        attended, _ = self.attention(self.query_norm(h).unsqueeze(1), keys, values, mask)
        ctx = self.aoa(attended.squeeze(1), h)
        logprobs = torch.log_softmax(self.logits(self.dropout(ctx)), dim=-1)
        return logprobs, (h, m, ctx)


MODEL = AoANet
