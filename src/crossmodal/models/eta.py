"""ETA-Transformer captioner (Li, Zhu, Liu & Yang, "Entangled Transformer for Image Captioning", ICCV 2019, §4):
a visual sub-encoder over the regions, a semantic sub-encoder over the detected attribute words, and a multimodal
decoder whose layers attend to both through EnTangled Attention and the Gated Bilateral Controller
(`modules/entangled.py`, which holds eqs. 2-13).

- V^0 (§4.1): "the n_v visual features are mapped into V^0 by a linear transformation" (`region_embed`, then
  dropout); the visual sub-encoder is N encoder layers over V^0 with padded regions masked (eqs. 4-5).
- S^0 (§4.1): "the n_s one-hot semantic attributes are projected into S^0 by an embedding layer", and "we share the
  word embeddings between the semantic encoder and the decoder": `word_embed` serves both. The attributes are an
  unordered set: no positional encoding. The semantic sub-encoder is N encoder layers over S^0, padded attribute
  slots masked.
- Decoder (§4.2, eq. 6): w_t = sqrt(d) E w + PE_t (Vaswani), dropout, then N `EntangledDecoderLayer`s (eqs. 7-12,
  h_t = FFN(e_t)), then Linear -> log_softmax. The k-th decoder layer attends to the last layer of each
  sub-encoder (V^N, S^N), as Vaswani's decoder does to its encoder's output.
- Paper size (§5.1): N = 6, d = 512, d_ff = 2048, 8 heads; GBC's f the identity (`activation`, Table 6's rows).

Named inputs: `regions` (float features [B, n_v, D]) and `attributes` (caption-vocabulary word ids [B, n_s], long
or integral floats, the detector's top-k words; the oracle row gives the ground-truth caption words instead).

Choices where the paper is silent (ours): S^0 is scaled by sqrt(d) like the decoder's words, since the two share
the embedding; dropout (Vaswani's 0.1) on V^0 and S^0; no weight tying between the embedding and the classifier,
as in this repository's Transformer (`models/transformer.py`). Not here: Table 5's Stacked and Parallel
ablations, and the single-modality Transformer_v / Transformer_s rows (each a plain Transformer).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from ..modules.entangled import GBC_ACTIVATIONS, EntangledDecoderLayer, SubEncoderLayer
from .transformer import CachedDecoder


@dataclass(frozen=True)
class ETAArgs:
    dim: int = 512
    heads: int = 8
    encoder_layers: int = 6  # N, each sub-encoder
    decoder_layers: int = 6  # N
    ffn_dim: int = 2048
    dropout: float = 0.1
    activation: str = "identity"  # GBC's f: identity (the paper's) | sigmoid | tanh | relu (Table 6)

    def __post_init__(self) -> None:
        if self.dim % self.heads:
            raise ValueError(f"dim {self.dim} must be divisible by heads {self.heads}")
        if min(self.encoder_layers, self.decoder_layers) < 1:
            raise ValueError("encoder_layers and decoder_layers must be >= 1")
        if self.activation not in GBC_ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(GBC_ACTIVATIONS)}, not {self.activation!r}")


class ETATransformer(CachedDecoder):
    INPUTS = ("regions", "attributes")
    Args = ETAArgs

    def __init__(self, args: ETAArgs, vocab_size: int, input_dims: Mapping[str, int]):
        super().__init__()
        self.args = args
        self.vocab_size = vocab_size
        d = args.dim
        self.region_embed = nn.Sequential(nn.Linear(input_dims["regions"], d), nn.Dropout(args.dropout))
        self.word_embed = nn.Embedding(vocab_size, d)  # S^0 and the decoder's words
        self.attribute_dropout = nn.Dropout(args.dropout)

        def encoder() -> nn.ModuleList:
            return nn.ModuleList(SubEncoderLayer(d, args.heads, args.ffn_dim, args.dropout)
                                 for _ in range(args.encoder_layers))

        self.visual_encoder, self.semantic_encoder = encoder(), encoder()
        self.dropout = nn.Dropout(args.dropout)
        self.decoder = nn.ModuleList(EntangledDecoderLayer(d, args.heads, args.ffn_dim, args.dropout, args.activation)
                                     for _ in range(args.decoder_layers))
        self.logits = nn.Linear(d, vocab_size)

    def encode(self, inputs):
        regions, region_mask = inputs["regions"]
        attributes, attribute_mask = inputs["attributes"]
        visual = self.region_embed(regions)
        for layer in self.visual_encoder:
            visual = layer(visual, region_mask)
        semantic = self.attribute_dropout(self.word_embed(attributes.long()) * math.sqrt(self.args.dim))
        for layer in self.semantic_encoder:
            semantic = layer(semantic, attribute_mask)
        return region_mask, attribute_mask, tuple(layer.project_memory(visual, semantic) for layer in self.decoder)

    def init_state(self, encoded, batch_size):
        keys = encoded[2][0].visual.target[0]
        return self._empty_cache(keys, batch_size, len(self.decoder))  # per layer: past keys, values

    def _decode(self, words, state, encoded):
        region_mask, attribute_mask, memories = encoded
        x, _, causal = self._word_inputs(words, state[0][0].size(2))
        x = self.dropout(x)
        caches = []
        for layer, cache, memory in zip(self.decoder, state, memories):
            x, cache = layer(x, cache, memory, region_mask, attribute_mask, causal)
            caches.append(cache)
        return torch.log_softmax(self.logits(x), -1), tuple(caches)


MODEL = ETATransformer
