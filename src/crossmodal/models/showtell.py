"""Show and Tell (Vinyals et al., CVPR 2015): the "LSTM" rows of the AoANet, X-LAN and ETA tables.

x_{-1} = W_I I is fed once, at the step before <bos>, then x_t = W_e S_t; p_{t+1} = softmax(W_s Dropout(m_t))
(paper eqs. 10-12). `init_state` runs that image step, so the image enters the LSTM there and nowhere else.
As in self-critical.pytorch's ShowTellModel (the code behind these table rows): one LSTM layer, a plain
linear image embedding and plain word embedding, dropout 0.5 only on the LSTM output, sizes 512.
Deviations: I is the masked mean of the region features (we have no global CNN feature; the paper used
GoogLeNet/Inception), and the LSTM keeps PyTorch's default biases (that code builds it with bias=False).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from ..modules.additive import masked_mean
from .base import Captioner


@dataclass(frozen=True)
class ShowTellArgs:
    embed_dim: int = 512
    hidden_dim: int = 512
    dropout: float = 0.5


class ShowTell(Captioner):
    Args = ShowTellArgs
    INPUTS = ("regions",)

    def __init__(self, args: ShowTellArgs, vocab_size: int, input_dims: Mapping[str, int]):
        super().__init__()
        self.args = args
        self.vocab_size = vocab_size
        self.image_embed = nn.Linear(input_dims["regions"], args.embed_dim)
        self.word_embed = nn.Embedding(vocab_size, args.embed_dim)
        self.lstm = nn.LSTMCell(args.embed_dim, args.hidden_dim)
        self.dropout = nn.Dropout(args.dropout)
        self.logits = nn.Linear(args.hidden_dim, vocab_size)

    def encode(self, inputs):
        """The embedded image x_{-1} [B, E]."""
        feats, mask = inputs["regions"]
        return self.image_embed(masked_mean(feats, mask))

    def init_state(self, encoded, batch_size):
        """(h, c) after the image step from a zero state; its output word distribution is not used."""
        zeros = encoded.new_zeros(batch_size, self.args.hidden_dim)
        return self.lstm(encoded, (zeros, zeros))

    def step(self, words, state, encoded):
        h, c = self.lstm(self.word_embed(words), state)
        return torch.log_softmax(self.logits(self.dropout(h)), dim=-1), (h, c)


MODEL = ShowTell
