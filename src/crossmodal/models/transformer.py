"""Transformer and X-Transformer captioners (the X-LAN paper's Table 1 pair: Pan et al., CVPR 2020).

The paper says only that "Transformer denotes our implementation of Transformer-based encoder-decoder structure
as in [Vaswani et al. 2017]" and that X-Transformer plugs X-Linear attention blocks into that structure; the
X-Transformer below follows the official code (Panda-Peter/image-captioning, models/xtransformer.py,
layers/low_rank.py, layers/sc_att.py, blocks/feedforward_block.py, experiments/xtransformer/config.yml).

`Transformer` (Vaswani et al.): regions -> Linear + ReLU + Dropout; encoder layers x = LN(x + Drop(SelfAtt(x))),
x = LN(x + Drop(FFN(x))) (post-LN, padded regions masked as keys); decoder layers with causal self-attention,
cross-attention to the encoder output and the FFN, same post-LN residuals; words embedded * sqrt(D) plus sinusoidal
positions, then Dropout; Linear -> log_softmax. Multi-head scaled dot-product attention with output projection W^O.
Defaults: the base model (D 512, 8 heads, 6 + 6 layers, FFN 2048, dropout 0.1).

`XTransformer`, official-code facts used (config.yml: D 768, 8 heads, 6 + 6 layers, CELU alpha 1.3, mid dims
[96, 48, 96] = per-head dim 96 -> W_B -> 48 -> w_b (1) / W_e (96), i.e. the mid dim is half the head dim):
- Regions: Linear -> CELU -> LayerNorm -> Dropout(0.5) (ATT_FEATS_EMBED_ACT, ATT_FEATS_NORM, DROPOUT_ATT_EMBED).
- Encoder: g^0 = masked mean of the regions; layer m: g^m = Drop(XLinear(query g^(m-1), keys = values = X)),
  X = LN(Drop(ReLU(W [g^m; x_i])) + x_i) (tied keys/values, eqs. 7-8), then X = FFN(X) with
  FFN(x) = LN(x + Drop(W_2 Drop(ReLU(W_1 x)))), hidden 4D. The global feature is
  g = LN(W_g [g^0; ...; g^M]) (Encoder.proj_norm); the regions after the last FFN are the encoder output.
- Decoder input: x_t = Drop_0.1(LN(sqrt(D) E w_t + PE_t)), PE Vaswani's sinusoids (layers/positional_encoding.py
  with PE_MAX_LEN 5000 gives the 10000 base). The first query is
  g^0_t = Drop(CELU-LN(W_1 g) * CELU-LN(W_2 mean_{s<=t} x_s)) (wbil1, wbil2, wbi_drop): the image's global
  feature gated by the running mean of the word inputs.
- Decoder layer l (word stream x, query stream g):
  h = x + Drop(XLinear(query = value1 = g^(l-1), keys = value2 = x_{<=t}))   (causal word attention)
  g^l = LN(h + Drop(XLinear(query = value1 = LN(h), keys = value2 = encoder regions)))   (cross attention)
  x <- FFN(LN(Drop_0.3(ReLU(W [g^l; x])) + x))   (not in the last layer, whose word stream is unused).
- Output: log_softmax(W_o Drop_0.5(LN(GLU(W_p [g^0; ...; g^L])))) (Decoder.proj_norm, DROPOUT_LM).
- X-Linear projections: Linear -> CELU -> GroupNorm(heads groups); the decoder caches each layer's projected word
  keys/values (LowRank.buffer_keys/buffer_value2) and the projected encoder keys/values (precompute).
Dropouts as in config.yml: 0.5 attention outputs / first query / FFN, 0.3 update branch, 0.1 inside the block.

Deviations:
- Transformer: no weight tying between the word embedding and the output layer (Vaswani sec. 3.4 ties them);
  no dropout on attention weights (the paper has only residual and embedding dropout).
- Both: pad words after a caption's end are ordinary inputs rather than masked keys (the official X-Transformer
  masks them); they are inputs only after the position that predicts <eos>, so under the causal mask they reach
  no position the loss counts, and the parallel forward stays equal to step-by-step decoding. BOS is id 1 here
  (the official code uses 0).
- X-Transformer: the image-side factor W_1 g of the first query and the encoder keys/values are computed once in
  `encode` rather than at every step (same values). Padded regions/words get weight exactly 0 (-inf before the
  softmax; the code fills -1e9). The X-Linear mid dim is fixed at head dim / 2 by `modules.xlinear` (the official
  48 at D 768, 8 heads), so it is no argument. Label smoothing, RAdam and the Noam schedule belong to training.
"""
from __future__ import annotations

import abc
import math
from dataclasses import dataclass

import torch
from torch import nn

from ..data.captions import BOS
from ..decoding.search import repeat_rows
from ..modules.additive import masked_mean, masked_softmax
from ..modules.xlinear import ACTIVATIONS, XLinearAttention, XLinearEncoderLayer
from .base import Captioner


def sinusoid(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """PE(p, 2i) = sin(p / 10000^(2i/D)), PE(p, 2i+1) = cos(p / 10000^(2i/D)) (Vaswani sec. 3.5) -> [T, D]."""
    freq = torch.exp(torch.arange(0, dim, 2, device=positions.device) * (-math.log(10000.0) / dim))
    angles = positions.float().unsqueeze(1) * freq
    return torch.stack([angles.sin(), angles.cos()], -1).flatten(1)[:, :dim]


def causal_mask(new: int, past: int, device) -> torch.Tensor:
    """[new, past + new] bool: query i (at position past + i) sees keys 0 .. past + i."""
    return torch.arange(past + new, device=device) <= (past + torch.arange(new, device=device)).unsqueeze(1)


class FeedForward(nn.Module):
    """LN(x + Drop(W_2 Drop_inner(ReLU(W_1 x)))): the post-LN FFN sublayer (official FeedForwardBlock)."""

    def __init__(self, dim: int, hidden: int, dropout: float, inner_dropout: float = 0.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(inner_dropout),
                                 nn.Linear(hidden, dim), nn.Dropout(dropout))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return self.norm(x + self.net(x))


class Attention(nn.Module):
    """Multi-head scaled dot-product attention with output projection W^O (Vaswani eqs. 1-2), [B, H, N, d] heads."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def _split(self, x):
        return x.unflatten(-1, (self.heads, -1)).transpose(1, 2)

    def project_kv(self, x):
        """x [B, N, D] -> keys, values [B, H, N, d], kept by the decoder (cache / encoder memory)."""
        keys, values = self.kv(x).chunk(2, -1)
        return self._split(keys), self._split(values)

    def forward(self, x, keys, values, mask):
        """x [B, Nq, D]; mask broadcastable to [B, H, Nq, N] (True = visible) -> [B, Nq, D]."""
        q = self._split(self.query(x))
        weights = masked_softmax(q @ keys.transpose(-1, -2) / math.sqrt(q.size(-1)), mask)
        return self.out((weights @ values).transpose(1, 2).flatten(2))


class _CachedDecoder(Captioner):
    """`step` is `_decode` on one word; `forward` runs `_decode` on all teacher-forced inputs at once (causal mask)."""

    @abc.abstractmethod
    def _decode(self, words, state, encoded):
        """words [B, T] following the cached ones -> (log-probs [B, T, V], state with the T words appended)."""

    def step(self, words, state, encoded):
        logprobs, state = self._decode(words.unsqueeze(1), state, encoded)
        return logprobs.squeeze(1), state

    def forward(self, feats, mask, targets, seq_per_img: int = 1, ss_prob: float = 0.0, generator=None):
        if ss_prob > 0 and self.training:  # scheduled sampling feeds back the model's own words: step by step
            return super().forward(feats, mask, targets, seq_per_img, ss_prob, generator)
        encoded = repeat_rows(self.encode(feats, mask), seq_per_img)
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


class _EncoderLayer(nn.Module):
    def __init__(self, args: TransformerArgs):
        super().__init__()
        self.attention = Attention(args.dim, args.heads)
        self.norm = nn.LayerNorm(args.dim)
        self.dropout = nn.Dropout(args.dropout)
        self.ffn = FeedForward(args.dim, args.ffn_dim, args.dropout)

    def forward(self, x, mask):
        x = self.norm(x + self.dropout(self.attention(x, *self.attention.project_kv(x), mask[:, None, None, :])))
        return self.ffn(x)


class _DecoderLayer(nn.Module):
    def __init__(self, args: TransformerArgs):
        super().__init__()
        self.self_attention = Attention(args.dim, args.heads)
        self.cross_attention = Attention(args.dim, args.heads)
        self.self_norm, self.cross_norm = nn.LayerNorm(args.dim), nn.LayerNorm(args.dim)
        self.dropout = nn.Dropout(args.dropout)
        self.ffn = FeedForward(args.dim, args.ffn_dim, args.dropout)

    def forward(self, x, cache, memory, region_mask, causal):
        keys, values = (torch.cat([old, new], 2) for old, new in zip(cache, self.self_attention.project_kv(x)))
        x = self.self_norm(x + self.dropout(self.self_attention(x, keys, values, causal)))
        x = self.cross_norm(x + self.dropout(self.cross_attention(x, *memory, region_mask[:, None, None, :])))
        return self.ffn(x), (keys, values)


class Transformer(_CachedDecoder):
    Args = TransformerArgs

    def __init__(self, args: TransformerArgs, vocab_size: int, feature_dim: int):
        super().__init__()
        self.args = args
        self.vocab_size = vocab_size
        d = args.dim
        self.feature_embed = nn.Sequential(nn.Linear(feature_dim, d), nn.ReLU(), nn.Dropout(args.dropout))
        self.encoder = nn.ModuleList(_EncoderLayer(args) for _ in range(args.encoder_layers))
        self.word_embed = nn.Embedding(vocab_size, d)
        self.dropout = nn.Dropout(args.dropout)
        self.decoder = nn.ModuleList(_DecoderLayer(args) for _ in range(args.decoder_layers))
        self.logits = nn.Linear(d, vocab_size)

    def encode(self, feats, mask):
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


@dataclass(frozen=True)
class XTransformerArgs:
    dim: int = 768
    heads: int = 8  # also the GroupNorm groups; the X-Linear mid dim is dim / heads / 2 (official 96 -> 48)
    encoder_layers: int = 6
    decoder_layers: int = 6
    ffn_dim: int = 3072  # 4 D
    activation: str = "celu"  # X-Linear projections, region embedding, first-query embeddings (CELU alpha 1.3)
    feature_dropout: float = 0.5  # DROPOUT_ATT_EMBED
    word_dropout: float = 0.1  # DROPOUT_WORD_EMBED
    dropout: float = 0.5  # ENCODE/DECODE_DROPOUT: attention outputs, the decoder's first query
    attention_dropout: float = 0.1  # ENCODE/DECODE_ATT_MID_DROPOUT, inside the block
    update_dropout: float = 0.3  # ENCODE/DECODE_BIFEAT_EMB_DROPOUT
    ffn_dropout: float = 0.5  # ENCODE/DECODE_FF_DROPOUT
    output_dropout: float = 0.5  # DROPOUT_LM

    def __post_init__(self) -> None:
        if self.dim % self.heads:
            raise ValueError(f"dim {self.dim} must be divisible by heads {self.heads}")
        if min(self.encoder_layers, self.decoder_layers) < 1:
            raise ValueError("encoder_layers and decoder_layers must be >= 1")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, not {self.activation!r}")


def _embed(args: XTransformerArgs, in_dim: int) -> nn.Sequential:
    """Linear -> activation -> LayerNorm (official wbil1 / wbil2 and, with dropout, att_embed)."""
    return nn.Sequential(nn.Linear(in_dim, args.dim), ACTIVATIONS[args.activation](), nn.LayerNorm(args.dim))


def _xlinear(args: XTransformerArgs) -> XLinearAttention:
    return XLinearAttention(args.dim, args.heads, activation=args.activation, groups=args.heads,
                            dropout=args.attention_dropout)


class XDecoderLayer(nn.Module):
    """One official X-Transformer decoder layer (see the module docstring); `last` has no word-stream update."""

    def __init__(self, args: XTransformerArgs, last: bool):
        super().__init__()
        self.word_attention, self.cross_attention = _xlinear(args), _xlinear(args)
        self.dropout = nn.Dropout(args.dropout)
        self.cross_norm, self.query_norm = nn.LayerNorm(args.dim), nn.LayerNorm(args.dim)
        self.last = last
        if not last:
            self.word_update = nn.Sequential(nn.Linear(2 * args.dim, args.dim), nn.ReLU(),
                                             nn.Dropout(args.update_dropout))
            self.word_norm = nn.LayerNorm(args.dim)
            self.ffn = FeedForward(args.dim, args.ffn_dim, args.ffn_dropout, args.ffn_dropout)

    def forward(self, query, x, cache, memory, region_mask, causal):
        """query, x [B, T, D] (new positions), cache: past projected word keys/values -> (query, x, cache)."""
        keys, values = (torch.cat([old, new], 2) for old, new in zip(cache, self.word_attention.project_kv(x, x)))
        h = x + self.dropout(self.word_attention.attend(query, keys, values, causal.unsqueeze(0))[0])
        attended = self.cross_attention.attend(self.cross_norm(h), *memory, region_mask)[0]
        query = self.query_norm(h + self.dropout(attended))
        if not self.last:
            x = self.ffn(self.word_norm(self.word_update(torch.cat([query, x], -1)) + x))
        return query, x, (keys, values)


class XTransformer(_CachedDecoder):
    Args = XTransformerArgs

    def __init__(self, args: XTransformerArgs, vocab_size: int, feature_dim: int):
        super().__init__()
        self.args = args
        self.vocab_size = vocab_size
        d, layers = args.dim, args.decoder_layers
        self.feature_embed = nn.Sequential(_embed(args, feature_dim), nn.Dropout(args.feature_dropout))
        self.encoder = nn.ModuleList(
            XLinearEncoderLayer(d, args.heads, args.activation, args.heads, args.attention_dropout, args.dropout,
                                separate_values=False, update_dropout=args.update_dropout)
            for _ in range(args.encoder_layers))
        self.encoder_ffns = nn.ModuleList(FeedForward(d, args.ffn_dim, args.ffn_dropout, args.ffn_dropout)
                                          for _ in range(args.encoder_layers))
        self.global_proj = nn.Sequential(nn.Linear(d * (args.encoder_layers + 1), d), nn.LayerNorm(d))
        self.word_embed = nn.Embedding(vocab_size, d)
        self.word_norm = nn.LayerNorm(d)
        self.word_dropout = nn.Dropout(args.word_dropout)
        self.image_gate, self.word_gate = _embed(args, d), _embed(args, d)  # wbil1 (global feature), wbil2 (words)
        self.query_dropout = nn.Dropout(args.dropout)
        self.decoder = nn.ModuleList(XDecoderLayer(args, i == layers - 1) for i in range(layers))
        self.output_proj = nn.Sequential(nn.Linear(d * (layers + 1), 2 * d), nn.GLU(), nn.LayerNorm(d))
        self.output_dropout = nn.Dropout(args.output_dropout)
        self.logits = nn.Linear(d, vocab_size)

    def encode(self, feats, mask):
        x = self.feature_embed(feats)
        query = masked_mean(x, mask)
        queries = [query]
        for layer, ffn in zip(self.encoder, self.encoder_ffns):
            query, x, _ = layer(query, x, x, mask)
            x = ffn(x)
            queries.append(query)
        image = self.image_gate(self.global_proj(torch.cat(queries, -1)))
        return mask, image, tuple(layer.cross_attention.project_kv(x, x) for layer in self.decoder)

    def init_state(self, encoded, batch_size):
        image = encoded[1]
        return image.new_zeros(batch_size, self.args.dim), self._empty_cache(image, batch_size, len(self.decoder))

    def _decode(self, words, state, encoded):
        mask, image, memories = encoded
        word_sum, caches = state
        x, positions, causal = self._word_inputs(words, caches[0][0].size(2))
        x = self.word_dropout(self.word_norm(x))
        sums = word_sum.unsqueeze(1) + x.cumsum(1)  # running sums of the word inputs up to each position
        query = self.query_dropout(image.unsqueeze(1) * self.word_gate(sums / (positions + 1).unsqueeze(1)))
        queries, new_caches = [query], []
        for layer, cache, memory in zip(self.decoder, caches, memories):
            query, x, cache = layer(query, x, cache, memory, mask, causal)
            queries.append(query)
            new_caches.append(cache)
        out = self.output_dropout(self.output_proj(torch.cat(queries, -1)))
        return torch.log_softmax(self.logits(out), -1), (sums[:, -1], tuple(new_caches))
