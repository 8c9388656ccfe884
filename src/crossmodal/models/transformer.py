"""Transformer captioner (the X-LAN paper's Table 1 "Transformer": Pan et al., CVPR 2020), and the pieces the
X-Transformer (`xtransformer.py`) shares with it: cached decoding (positions, causal mask, FFN sublayer and
encoder layer: `modules/sublayers.py`).

The paper says only that "Transformer denotes our implementation of Transformer-based encoder-decoder structure
as in [Vaswani et al. 2017]" and that X-Transformer plugs X-Linear attention blocks into that structure.

`Transformer` (Vaswani et al.): regions -> Linear + ReLU + Dropout; encoder layers x = LN(x + Drop(SelfAtt(x))),
x = LN(x + Drop(FFN(x))) (post-LN, padded regions masked as keys); decoder layers with causal self-attention,
cross-attention to the encoder output and the FFN, same post-LN residuals; words embedded * sqrt(D) plus sinusoidal
positions, then Dropout; Linear -> log_softmax. Multi-head scaled dot-product attention with output projection W^O
(`modules.multihead.MultiHeadAttention`). Defaults: the base model (D 512, 8 heads, 6 + 6 layers, FFN 2048,
dropout 0.1).

Word embedding scale: the word embedding starts at N(0, 1/D) (`scaled_word_embedding`), so that sqrt(D) E w has
unit scale, the sinusoids' order, when it enters the first decoder layer; PyTorch's default N(0, 1) gave sqrt(D)-sized
words (8 at the default profile's D 64) that drowned the positions (within ±1). This is what the references that
multiply by sqrt(D) draw: tensor2tensor (tensor2tensor/layers/modalities.py, SymbolModality._get_weights:
random_normal_initializer(0, hidden_dim^-0.5), then bottom_simple multiplies by hidden_size^0.5 under
multiply_embedding_mode "sqrt_depth") and fairseq (fairseq/models/transformer/transformer_base.py, `Embedding`:
normal(0, embed_dim^-0.5) with the padding row zeroed; the decoder's embed_scale is sqrt(embed_dim) unless
no_scale_embedding). The Annotated Transformer (harvardnlp/annotated-transformer, the_annotated_transformer.py)
scales by sqrt(d_model) too, but make_model re-initialises every parameter of dim > 1 with Xavier uniform,
embeddings included (std sqrt(2 / (V + d)): below unit scale, and shrinking with the vocabulary). Neither Vaswani
et al. (sec. 3.4: the embedding weights are multiplied by sqrt(d_model)) nor the X-LAN paper states the init; the
official X-Transformer keeps N(0, 1) and puts a LayerNorm after the sum (`xtransformer.py`, which does so too). The
weights are drawn as nn.Embedding draws them and then scaled by D^-1/2: the random stream is consumed exactly as
before, so every other parameter's initial value is unchanged by this choice, and the embedding itself is the old
one times D^-1/2. No padding row is zeroed: pads are ordinary inputs here (below).

Deviations:
- No weight tying between the word embedding and the output layer (Vaswani sec. 3.4 ties them); no dropout on
  attention weights (the paper has only residual and embedding dropout).
- Pad words after a caption's end are ordinary inputs rather than masked keys (the official X-Transformer masks
  them); they are inputs only after the position that predicts <eos>, so under the causal mask they reach no
  position the loss counts, and the parallel forward stays equal to step-by-step decoding (`CachedDecoder`, which
  the X-Transformer shares). BOS is id 1 here (the official code uses 0).
"""
from __future__ import annotations

import abc
import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from ..data.captions import BOS
from ..modules.multihead import MultiHeadAttention
from ..modules.sublayers import EncoderLayer, FeedForward, causal_mask, sinusoid
from .base import Captioner


def scaled_word_embedding(vocab_size: int, dim: int) -> nn.Embedding:
    """The word embedding of a decoder that multiplies its words by sqrt(dim) (`CachedDecoder._word_inputs`):
    N(0, 1/dim), so that sqrt(dim) E w starts at unit scale (tensor2tensor's and fairseq's init; module docstring).
    Drawn as nn.Embedding draws, N(0, 1), then scaled, so that later parameters start from the same random stream."""
    embedding = nn.Embedding(vocab_size, dim)
    with torch.no_grad():
        embedding.weight.mul_(dim ** -0.5)
    return embedding


class CachedDecoder(Captioner):
    """`step` is `_decode` on one word; `forward` runs `_decode` on all teacher-forced inputs at once (causal mask)."""

    @abc.abstractmethod
    def _decode(self, words, state, encoded):
        """words [B, T] following the cached ones -> (log-probs [B, T, V], state with the T words appended)."""

    def step(self, words, state, encoded):
        logprobs, state = self._decode(words.unsqueeze(1), state, encoded)
        return logprobs.squeeze(1), state

    def forward(self, inputs, targets, seq_per_img: int | torch.Tensor = 1, ss_prob: float = 0.0, generator=None):
        if ss_prob > 0 and self.training:  # scheduled sampling feeds back the model's own words: step by step
            return super().forward(inputs, targets, seq_per_img, ss_prob, generator)
        encoded = self._encode_rows(inputs, seq_per_img)
        words = torch.cat([targets.new_full((targets.size(0), 1), BOS), targets], 1)  # <bos>, then every target
        return self._decode(words, self.init_state(encoded, targets.size(0)), encoded)[0]

    def _word_inputs(self, words, past: int):
        """sqrt(D) E w + PE for words at positions past, past + 1, ..., those positions, and their causal mask."""
        positions = torch.arange(past, past + words.size(1), device=words.device)
        x = self.word_embed(words) * math.sqrt(self.args.dim) + sinusoid(positions, self.args.dim)
        return x, positions, causal_mask(words.size(1), past, words.device)

    def _empty_cache(self, like: torch.Tensor, batch_size: int, layers: int):
        empty = like.new_zeros(batch_size, self.args.heads, 0, self.args.dim // self.args.heads)
        return tuple((empty, empty) for _ in range(layers))


@dataclass(frozen=True)
class TransformerArgs:
    dim: int = 512
    heads: int = 8
    encoder_layers: int = 6
    decoder_layers: int = 6
    ffn_dim: int = 2048
    dropout: float = 0.1  # region and word embeddings, every sublayer output

    def __post_init__(self) -> None:
        if self.dim % self.heads:
            raise ValueError(f"dim {self.dim} must be divisible by heads {self.heads}")
        if min(self.encoder_layers, self.decoder_layers) < 1:
            raise ValueError("encoder_layers and decoder_layers must be >= 1")


class _DecoderLayer(nn.Module):
    def __init__(self, args: TransformerArgs):
        super().__init__()
        self.self_attention = MultiHeadAttention(args.dim, args.heads)
        self.cross_attention = MultiHeadAttention(args.dim, args.heads)
        self.self_norm, self.cross_norm = nn.LayerNorm(args.dim), nn.LayerNorm(args.dim)
        self.dropout = nn.Dropout(args.dropout)
        self.ffn = FeedForward(args.dim, args.ffn_dim, args.dropout)

    def forward(self, x, cache, memory, region_mask, causal):
        keys, values = (torch.cat([old, new], 2) for old, new in zip(cache, self.self_attention.project_kv(x)))
        x = self.self_norm(x + self.dropout(self.self_attention(x, keys, values, causal.unsqueeze(0))[0]))
        x = self.cross_norm(x + self.dropout(self.cross_attention(x, *memory, region_mask)[0]))
        return self.ffn(x), (keys, values)


class Transformer(CachedDecoder):
    Args = TransformerArgs
    INPUTS = ("regions",)

    def __init__(self, args: TransformerArgs, vocab_size: int, input_dims: Mapping[str, int]):
        super().__init__()
        self.args = args
        self.vocab_size = vocab_size
        d = args.dim
        self.feature_embed = nn.Sequential(nn.Linear(input_dims["regions"], d), nn.ReLU(), nn.Dropout(args.dropout))
        self.encoder = nn.ModuleList(EncoderLayer(args.dim, args.heads, args.ffn_dim, args.dropout) for _ in range(args.encoder_layers))
        self.word_embed = scaled_word_embedding(vocab_size, d)
        self.dropout = nn.Dropout(args.dropout)
        self.decoder = nn.ModuleList(_DecoderLayer(args) for _ in range(args.decoder_layers))
        self.logits = nn.Linear(d, vocab_size)

    def encode(self, inputs):
        feats, mask = inputs["regions"]
        x = self.feature_embed(feats)
        for layer in self.encoder:
            x = layer(x, mask)
        return mask, tuple(layer.cross_attention.project_kv(x) for layer in self.decoder)

    def init_state(self, encoded, batch_size):
        return self._empty_cache(encoded[1][0][0], batch_size, len(self.decoder))  # per layer: past keys, values

    def _decode(self, words, state, encoded):
        mask, memories = encoded
        x, _, causal = self._word_inputs(words, state[0][0].size(2))
        x = self.dropout(x)
        caches = []
        for layer, cache, memory in zip(self.decoder, state, memories):
            x, cache = layer(x, cache, memory, mask, causal)
            caches.append(cache)
        return torch.log_softmax(self.logits(x), -1), tuple(caches)


MODEL = Transformer
