"""Up-Down captioner (Anderson et al., CVPR 2018): attention LSTM + language LSTM with additive attention.

This is also the "LSTM + conventional attention" base of X-LAN Table 3.
- Attention LSTM input: [h_lang(t-1); mean region feature; word embedding]; language LSTM input:
  [attended feature; h_att(t)]; word distribution from h_lang(t).
- As in the official X-LAN base model, region features are first embedded (Linear + ReLU + Dropout);
  the paper feeds the raw 2048-d features. Padded regions are masked in the attention softmax and the mean.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from ..modules.additive import AdditiveAttention, masked_mean
from .base import Captioner


@dataclass(frozen=True)
class UpDownArgs:
    embed_dim: int = 256
    hidden_dim: int = 256
    att_hidden_dim: int = 256
    dropout: float = 0.3
    feature_dropout: float = 0.1


class UpDown(Captioner):
    Args = UpDownArgs
    INPUTS = ("regions",)

    def __init__(self, args: UpDownArgs, vocab_size: int, input_dims: Mapping[str, int]):
        super().__init__()
        self.args = args
        self.vocab_size = vocab_size
        self.feature_embed = nn.Sequential(
            nn.Linear(input_dims["regions"], args.hidden_dim), nn.ReLU(), nn.Dropout(args.feature_dropout)
        )
        self.word_embed = nn.Sequential(nn.Embedding(vocab_size, args.embed_dim), nn.ReLU(), nn.Dropout(args.dropout))
        self.att_lstm = nn.LSTMCell(args.hidden_dim * 2 + args.embed_dim, args.hidden_dim)
        self.lang_lstm = nn.LSTMCell(args.hidden_dim * 2, args.hidden_dim)
        self.attention = AdditiveAttention(args.hidden_dim, args.hidden_dim, args.att_hidden_dim)
        self.dropout = nn.Dropout(args.dropout)
        self.logits = nn.Linear(args.hidden_dim, vocab_size)

    def encode(self, inputs):
        feats, mask = inputs["regions"]
        regions = self.feature_embed(feats)
        return regions, mask, masked_mean(regions, mask), self.attention.project_keys(regions)

    def init_state(self, encoded, batch_size):
        zeros = encoded[0].new_zeros(batch_size, self.args.hidden_dim)
        return zeros, zeros, zeros, zeros

    def step(self, words, state, encoded):
        regions, mask, mean, keys = encoded
        h_att, c_att, h_lang, c_lang = state
        h_att, c_att = self.att_lstm(torch.cat([h_lang, mean, self.word_embed(words)], 1), (h_att, c_att))
        context, _ = self.attention(h_att, regions, mask, keys)
        h_lang, c_lang = self.lang_lstm(torch.cat([context, h_att], 1), (h_lang, c_lang))
        logprobs = torch.log_softmax(self.logits(self.dropout(h_lang)), dim=-1)
        return logprobs, (h_att, c_att, h_lang, c_lang)


MODEL = UpDown
