"""Toy pool, the toy paper's model (docs/adding-a-paper.md): the mean of the region features enters the LSTM with
every word, h_t = LSTM([W_e w_t; W_v v̄], h_{t-1}), p_{t+1} = softmax(W_s h_t), v̄ the masked mean of the regions.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from ..modules.additive import masked_mean
from .base import Captioner


@dataclass(frozen=True)
class ToyPoolArgs:
    embed_dim: int = 32
    hidden_dim: int = 32


class ToyPool(Captioner):
    Args = ToyPoolArgs
    INPUTS = ("regions",)

    def __init__(self, args: ToyPoolArgs, vocab_size: int, input_dims: Mapping[str, int]):
        super().__init__()
        self.args = args
        self.image_embed = nn.Linear(input_dims["regions"], args.embed_dim)  # W_v
        self.word_embed = nn.Embedding(vocab_size, args.embed_dim)  # W_e
        self.lstm = nn.LSTMCell(2 * args.embed_dim, args.hidden_dim)
        self.logits = nn.Linear(args.hidden_dim, vocab_size)  # W_s

    def encode(self, inputs):
        """W_v v̄ [B, E]."""
        feats, mask = inputs["regions"]
        return self.image_embed(masked_mean(feats, mask))

    def init_state(self, encoded, batch_size):
        zeros = encoded.new_zeros(batch_size, self.args.hidden_dim)
        return zeros, zeros

    def step(self, words, state, encoded):
        h, c = self.lstm(torch.cat([self.word_embed(words), encoded], dim=-1), state)
        return torch.log_softmax(self.logits(h), dim=-1), (h, c)


MODEL = ToyPool
