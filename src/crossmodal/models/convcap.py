"""Convolutional captioner (Aneja, Deshpande & Schwing, "Convolutional Image Captioning", CVPR 2018): ETA Table 4's
"Convolution [3]" row, a ConvS2S-style decoder (Gehring et al., ICML 2017) with attention over the image grid.

ETA §5.4.1 runs it, like the paper, with attention over the 7x7 conv5 grid of VGG-16; the grid reaches the model as
its `regions` input v_j (j over the real cells). With d the embedding size, k the kernel width:
  g_t = W_w E y_t + b_w  (word embedding, then a linear layer);  i = ReLU(W_I v̄ + b_I), v̄ the masked mean of the grid
  x^0_t = [g_t; i]  (2d channels);  u_j = W_v v_j + b_v  (the projected cells, shared by the layers)
  layer l = 1..L:  h_t = GLU(Conv_k(Dropout(x^{l-1}))_t), causal: position t sees x^{l-1}_{t-k+1..t} (zeros before
                   the caption's start);
                   q_t = (W_q h_t + b_q + g_t) sqrt(0.5);  α_tj = softmax_j(q_t · u_j) over the real cells;
                   c_t = sqrt(m) Σ_j α_tj u_j  (m real cells: ConvS2S's m sqrt(1/m) scaling);
                   a_t = (W_o c_t + b_o + h_t) sqrt(0.5)  (the attended vector added back);
                   x^l_t = (a_t + r_t) sqrt(0.5),  r = x^{l-1} (l > 1) or W_r x^0 (l = 1, 2d -> d channels)
  p(y_{t+1}) = softmax(W_2 Dropout(W_1 x^L_t))  (the classifier, d -> d/2 -> V)
Args -> symbols: embed_dim = d (paper: 512), layers = L (paper: 3), kernel_size = k (paper: 5), dropout.

Decoding step by step keeps, per layer, the last k-1 (dropped-out) inputs x^{l-1}: one step costs O(k), not O(t),
and equals the teacher-forced pass over the whole caption (`CachedDecoder`: `forward` runs all positions at once).

Ours (deviations / choices where the paper is silent):
- The image embedding i comes from the masked mean of the grid (the paper embeds VGG-16's fc7 feature); the cells
  are projected (u_j) to d because our grid features need not have d channels.
- No weight normalization (ConvS2S uses it); PyTorch's default initialization.
- The classifier's hidden size d/2 and the dropout 0.1 (before each convolution and in the classifier).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from ..modules.additive import masked_mean, masked_softmax
from .transformer import CachedDecoder

SQRT_HALF = math.sqrt(0.5)


@dataclass(frozen=True)
class ConvCapArgs:
    embed_dim: int = 512  # d (paper: 512): word and image embeddings, channels of every layer, attention
    layers: int = 3  # L (paper: 3)
    kernel_size: int = 5  # k (paper: 5), causal
    dropout: float = 0.1  # before each convolution and between the classifier's layers

    def __post_init__(self) -> None:
        if self.embed_dim < 2:
            raise ValueError(f"embed_dim must be >= 2 (the classifier has embed_dim // 2 units), not {self.embed_dim}")
        if min(self.layers, self.kernel_size) < 1:
            raise ValueError("layers and kernel_size must be >= 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), not {self.dropout}")


class ConvAttentionLayer(nn.Module):
    """One causal GLU convolution with attention over the cells (the residual around it is the caller's)."""

    def __init__(self, in_dim: int, dim: int, kernel_size: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.conv = nn.Conv1d(in_dim, 2 * dim, kernel_size)  # no padding: the cache is the left context
        self.query = nn.Linear(dim, dim)  # W_q
        self.out = nn.Linear(dim, dim)  # W_o

    def attend(self, h, g, cells, mask, scale):
        """h, g [B, T, d], cells u [B, N, d], mask [B, N], scale sqrt(m) [B] -> (a [B, T, d], α [B, T, N])."""
        query = (self.query(h) + g) * SQRT_HALF
        alpha = masked_softmax(torch.bmm(query, cells.transpose(1, 2)), mask.unsqueeze(1))
        context = torch.bmm(alpha, cells) * scale[:, None, None]
        return (self.out(context) + h) * SQRT_HALF, alpha

    def forward(self, x, cache, g, cells, mask, scale):
        """x [B, T, C] after the cached [B, k-1, C] -> (a [B, T, d], α [B, T, N], the new cache)."""
        window = torch.cat([cache, self.dropout(x)], 1)
        h = F.glu(self.conv(window.transpose(1, 2)).transpose(1, 2), dim=-1)
        a, alpha = self.attend(h, g, cells, mask, scale)
        return a, alpha, window[:, window.size(1) - cache.size(1):]


class ConvCap(CachedDecoder):
    Args = ConvCapArgs
    INPUTS = ("regions",)

    def __init__(self, args: ConvCapArgs, vocab_size: int, input_dims: Mapping[str, int]):
        super().__init__()
        self.args = args
        self.vocab_size = vocab_size
        d, feat = args.embed_dim, input_dims["regions"]
        self.word_embed = nn.Embedding(vocab_size, d)  # E
        self.word_proj = nn.Linear(d, d)  # W_w
        self.image_embed = nn.Linear(feat, d)  # W_I
        self.cell_proj = nn.Linear(feat, d)  # W_v
        self.res_proj = nn.Linear(2 * d, d)  # W_r
        self.layers = nn.ModuleList(ConvAttentionLayer(2 * d if i == 0 else d, d, args.kernel_size, args.dropout)
                                    for i in range(args.layers))
        self.classifier = nn.Sequential(nn.Linear(d, d // 2), nn.Dropout(args.dropout), nn.Linear(d // 2, vocab_size))

    def encode(self, inputs):
        """(i [B, d], u [B, N, d], mask [B, N], sqrt(m) [B])."""
        feats, mask = inputs["regions"]
        image = torch.relu(self.image_embed(masked_mean(feats, mask)))
        scale = mask.sum(1).to(feats.dtype).sqrt()
        return image, self.cell_proj(feats), mask, scale

    def init_state(self, encoded, batch_size):
        """Per layer, k-1 zero inputs: the left padding before <bos>."""
        image, past = encoded[0], self.args.kernel_size - 1
        return tuple(image.new_zeros(batch_size, past, layer.conv.in_channels) for layer in self.layers)

    def _decode(self, words, state, encoded, weights=None):
        """words [B, T] after the cached ones -> (log-probs [B, T, V], new caches); each layer's α [B, T, N] is
        appended to `weights` when it is a list."""
        image, cells, mask, scale = encoded
        g = self.word_proj(self.word_embed(words))
        x = torch.cat([g, image.unsqueeze(1).expand_as(g)], -1)
        residual = self.res_proj(x)
        caches = []
        for layer, cache in zip(self.layers, state):
            a, alpha, cache = layer(x, cache, g, cells, mask, scale)
            x = residual = (a + residual) * SQRT_HALF
            caches.append(cache)
            if weights is not None:
                weights.append(alpha)
        return torch.log_softmax(self.classifier(x), -1), tuple(caches)


MODEL = ConvCap
