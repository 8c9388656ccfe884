"""X-Transformer captioner (the X-LAN paper's Table 1 "X-Transformer": Pan et al., CVPR 2020).

X-Linear attention blocks plugged into the Transformer's encoder-decoder structure (`transformer.py`, whose
positions, FFN sublayer and cached decoding it shares). It follows the official code (Panda-Peter/image-captioning,
models/xtransformer.py, layers/low_rank.py, layers/sc_att.py, blocks/feedforward_block.py,
experiments/xtransformer/config.yml).

Official-code facts used (config.yml: D 768, 8 heads, 6 + 6 layers, CELU alpha 1.3, mid dims
[96, 48, 96] = per-head dim 96 -> W_B -> 48 -> w_b (1) / W_e (96), i.e. the mid dim is half the head dim):
- Regions: Linear -> CELU -> LayerNorm -> Dropout(0.5) (ATT_FEATS_EMBED_ACT, ATT_FEATS_NORM, DROPOUT_ATT_EMBED).
- Encoder: g^0 = masked mean of the regions; layer m: g^m = Drop(XLinear(query g^(m-1), keys = values = X)),
  X = LN(Drop(ReLU(W [g^m; x_i])) + x_i) (tied keys/values, eqs. 7-8), then X = FFN(X) with
  FFN(x) = LN(x + Drop(W_2 Drop(ReLU(W_1 x)))), hidden 4D. The global feature is
  g = LN(W_g [g^0; ...; g^M]) (Encoder.proj_norm); the regions after the last FFN are the encoder output.
- Decoder input: x_t = Drop_0.1(LN(sqrt(D) E w_t + PE_t)), PE Vaswani's sinusoids (layers/positional_encoding.py
  with PE_MAX_LEN 5000 gives the 10000 base). E keeps PyTorch's N(0, 1) (Decoder.embed_tokens, a plain nn.Embedding;
  the official repository initialises no weight itself), so sqrt(D) E w dwarfs PE before the LayerNorm brings the
  sum to unit scale; kept, unlike the Transformer's N(0, 1/D) (`transformer.scaled_word_embedding`), which has no
  LayerNorm there. The first query is
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
- Pad words after a caption's end are ordinary inputs rather than masked keys (the official code masks them);
  see `transformer.py`: under the causal mask they reach no position the loss counts. BOS is id 1 here (the
  official code uses 0).
- The image-side factor W_1 g of the first query and the encoder keys/values are computed once in `encode`
  rather than at every step (same values). Padded regions/words get weight exactly 0 (-inf before the softmax;
  the code fills -1e9). The X-Linear mid dim is fixed at head dim / 2 by `modules.xlinear` (the official 48 at
  D 768, 8 heads), so it is no argument. Label smoothing, RAdam and the Noam schedule belong to training.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from ..modules.additive import masked_mean
from ..modules.xlinear import ACTIVATIONS, XLinearAttention, XLinearEncoderLayer
from ..modules.sublayers import FeedForward
from .transformer import CachedDecoder


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


class XTransformer(CachedDecoder):
    Args = XTransformerArgs
    INPUTS = ("regions",)

    def __init__(self, args: XTransformerArgs, vocab_size: int, input_dims: Mapping[str, int]):
        super().__init__()
        self.args = args
        self.vocab_size = vocab_size
        d, layers = args.dim, args.decoder_layers
        self.feature_embed = nn.Sequential(_embed(args, input_dims["regions"]), nn.Dropout(args.feature_dropout))
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

    def encode(self, inputs):
        feats, mask = inputs["regions"]
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


MODEL = XTransformer
