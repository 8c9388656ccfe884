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

Variants (`ETAArgs.mode`, the decoder layer's `DECODER_MODES`, whose docstring states the readings):
"entangled" (the ETA-Transformer), "parallel" (Table 5's Parallel, PA), "stacked_visual" / "stacked_semantic"
(Stacked_v / Stacked_s, SA), "visual" / "semantic" (Tables 2, 4, 5's Transformer_v / Transformer_s: the standard
single-modality Transformer). A mode builds only the sub-encoders its decoder reads: Transformer_v has no semantic
sub-encoder and reads no attributes, Transformer_s no region projection or visual sub-encoder and reads no regions;
every other mode reads both. `encoder_layers: 0` gives Table 4's "- Encoder" rows: no sub-encoder layers, the
decoder attends to V^0 / S^0 directly. Table 5's "T_v & T_s fuse" (two models trained apart, late-fused) is an
ensemble of a visual and a semantic model (`models/ensemble.py`), not a mode.

Named inputs, per instance (`self.INPUTS`, also `consumes(args)`): `regions` (float features [B, n_v, D]) and/or
`attributes`: the feature set's float rows [B, n_s, 2] = (caption-vocabulary word id, detector probability) per
attribute, padded, with a [B, n_s] mask; also accepted as ids [B, n_s] (long or integral floats). The model embeds
the ids (column 0, `.long()`) and does not use the probability: the paper feeds one-hot attributes to an
embedding layer. The oracle row gives the ground-truth caption words instead.

Choices where the paper is silent (ours): S^0 is scaled by sqrt(d) like the decoder's words, since the two share
the embedding, and that embedding starts at N(0, 1/d) (`transformer.scaled_word_embedding`, the init of
tensor2tensor and fairseq, whose sources `transformer.py` names), so that both sqrt(d) E w and S^0 start at unit
scale rather than PyTorch's N(0, 1) times sqrt(d) (8 at d 64, against positions within ±1). It draws what
nn.Embedding draws and scales it: every other parameter starts where it did with the N(0, 1) init. Dropout
(Vaswani's 0.1) on V^0 and S^0; no weight tying between the embedding and the classifier, as in this repository's
Transformer (`models/transformer.py`). Transformer_v/s keep ETA's input side (V^0 a plain linear map, S^0 the
shared, scaled embedding), so the variants differ only in their decoder layers and in which sub-encoders exist;
with `encoder_layers: 0` V^0 and S^0 keep their dropout and get no layer norm.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from ..modules.entangled import (
    DECODER_MODES, GBC_ACTIVATIONS, EntangledDecoderLayer, SubEncoderLayer, check_mode,
)
from .transformer import CachedDecoder, scaled_word_embedding

INPUT_NAMES = {"visual": "regions", "semantic": "attributes"}  # each modality's named input


@dataclass(frozen=True)
class ETAArgs:
    dim: int = 512
    heads: int = 8
    encoder_layers: int = 6  # N, each sub-encoder
    decoder_layers: int = 6  # N
    ffn_dim: int = 2048
    dropout: float = 0.1
    activation: str = "identity"  # GBC's f: identity (the paper's) | sigmoid | tanh | relu (Table 6); GBC modes only
    mode: str = "entangled"  # entangled | parallel | stacked_visual | stacked_semantic | visual | semantic

    def __post_init__(self) -> None:
        if self.dim % self.heads:
            raise ValueError(f"dim {self.dim} must be divisible by heads {self.heads}")
        if self.encoder_layers < 0 or self.decoder_layers < 1:
            raise ValueError("encoder_layers must be >= 0 (0: Table 4's '- Encoder') and decoder_layers >= 1")
        if self.activation not in GBC_ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(GBC_ACTIVATIONS)}, not {self.activation!r}")
        check_mode(self.mode)


class ETATransformer(CachedDecoder):
    INPUTS = ("regions", "attributes")  # what the default mode reads; an instance sets its own (`consumes`)
    Args = ETAArgs

    @classmethod
    def consumes(cls, args: ETAArgs) -> tuple[str, ...]:
        """The named inputs the mode reads: ("regions",) for "visual", ("attributes",) for "semantic", both else."""
        return tuple(INPUT_NAMES[modality] for modality in DECODER_MODES[args.mode].modalities)

    def __init__(self, args: ETAArgs, vocab_size: int, input_dims: Mapping[str, int]):
        super().__init__()
        self.args = args
        self.vocab_size = vocab_size
        self.INPUTS = self.consumes(args)
        d = args.dim

        def encoder() -> nn.ModuleList:
            return nn.ModuleList(SubEncoderLayer(d, args.heads, args.ffn_dim, args.dropout)
                                 for _ in range(args.encoder_layers))

        reads_regions, reads_attributes = "regions" in self.INPUTS, "attributes" in self.INPUTS
        self.region_embed = (nn.Sequential(nn.Linear(input_dims["regions"], d), nn.Dropout(args.dropout))
                             if reads_regions else None)
        self.visual_encoder = encoder() if reads_regions else None
        self.word_embed = scaled_word_embedding(vocab_size, d)  # S^0 and the decoder's words
        self.attribute_dropout = nn.Dropout(args.dropout) if reads_attributes else None
        self.semantic_encoder = encoder() if reads_attributes else None
        self.dropout = nn.Dropout(args.dropout)
        self.decoder = nn.ModuleList(
            EntangledDecoderLayer(d, args.heads, args.ffn_dim, args.dropout, args.activation, args.mode)
            for _ in range(args.decoder_layers))
        self.logits = nn.Linear(d, vocab_size)

    def encode(self, inputs):
        visual = semantic = region_mask = attribute_mask = None
        if self.visual_encoder is not None:
            regions, region_mask = inputs["regions"]
            visual = self.region_embed(regions)  # V^0
            for layer in self.visual_encoder:
                visual = layer(visual, region_mask)
        if self.semantic_encoder is not None:
            attributes, attribute_mask = inputs["attributes"]
            ids = (attributes[..., 0] if attributes.dim() == 3 else attributes).long()  # the probability unused
            semantic = self.attribute_dropout(self.word_embed(ids) * math.sqrt(self.args.dim))  # S^0
            for layer in self.semantic_encoder:
                semantic = layer(semantic, attribute_mask)
        return region_mask, attribute_mask, tuple(layer.project_memory(visual, semantic) for layer in self.decoder)

    def init_state(self, encoded, batch_size):
        memory = encoded[2][0]
        keys = (memory.visual or memory.semantic).target[0]
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
