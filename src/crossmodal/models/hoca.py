"""Low-Rank HOCA video captioner (Jin et al., EMNLP 2019, §3, §4.4, Fig. 3(a)): a Bi-LSTM per modality, an LSTM
decoder on the words, and per step the MAF attention (HOCA or Low-Rank HOCA) with the hierarchical fusion.

Inputs: `frames` (image, F), `motion` (M), `audio` (S): Padded(values [B, T_l, d_l], mask [B, T_l]).

- §3.1, encoder: each modality's features go through its own one-layer Bi-LSTM (`encoders[name]`); its outputs, both
  directions concatenated ([B, T_l, 2 * hidden_dim]), are the I_l the attention reads and eq. 5 sums ("the output of
  Bi-LSTM is kept"). The sequences are packed by the mask's lengths (pack_padded_sequence), so a padded step enters
  neither direction; padded outputs are 0 and the batch is cut to its longest clip.
- Eq. 1: h_t = LSTM(h_{t-1}, y_t) (`decoder`, an LSTMCell) on the word embedding y_t alone.
- Eqs. 2-5, 7-23 (`modules.hoca.HOCAAttentionFusion`, `attention`): Ĩ_l = tanh(W h_t + U I_l + b), the heads of
  `variant` (eq. 18: unary = eqs. 2-3, binary and ternary = HOCA eq. 9 or, with `low_rank`, Low-Rank HOCA eqs. 14-17
  of rank `rank`), eq. 19's θ-weighted fusion of each modality's weights, φ(I_l) (eqs. 4-5), β (eqs. 20-21) and eq.
  22's logits W_p^h h_t + Σ_k β^k W_p^k φ(k) + b_p (eq. 23). The U I_l products are computed once per clip in
  `encode` (`precompute`).
- Eq. 22's softmax: the step returns log_softmax of the logits; eq. 24 is the shared trainer's cross-entropy.
- §5.2, dropout 0.5 "for the input and output of LSTM decoder": on the word embedding before the LSTM (input), and on
  h_t where it leaves the LSTM for the attention and the output layer (the query of eqs. 3, 21 and the W_p^h h_t of
  eq. 22: `HOCAAttentionFusion` reads one query). The recurrent h_t, c_t carried to the next step are not dropped.
- `variant`: Table 1's rows "U", "B", "T", "UB", "UBT"; `low_rank` false is HOCA-*, true L-HOCA-*. "U" has no
  binary or ternary head, so HOCA-U and L-HOCA-U are one model (Bahdanau attention per modality with eq. 22).

Paper sizes (§5.2), the defaults here: every LSTM has hidden size 512 (the decoder and each direction of each
Bi-LSTM, so I_l is 1024-d), attention size d = 512, word vectors 300-d, rank 1, dropout 0.5; t = 80 sampled steps per
modality. The recipe (the trainer's keys, not model_args): Adam, learning rate 1e-4, beam width 5.

`steps`: the fixed t_l of each modality, a mapping {frames: t, motion: t, audio: t} (the HOCA weight tensors W^{I_l}
and the low-rank factors w_j^{I_i} have t_l entries). A clip may have fewer steps (masked, as the modules allow: equal
to zero padding); a batch whose longest clip of a modality exceeds its t_l is a ValueError naming the modality.

Choices where the paper is silent, and deviations:
- The decoder's initial state is zeros (h_0 = c_0 = 0). Eq. 1 gives the decoder the words only, the video enters
  through the attention; the paper initialises the state only on MSR-VTT, from the GloVe vector of the video's
  category label (§5.2), which is out of scope here (the category is not a model input).
- The word embedding starts from nn.Embedding's N(0, 1) unless `word_vectors` is set: the captioning task then
  loads the stage word2vec's vectors through `load_word_vectors` (the paper's pre-trained 300-d word2vec vectors,
  U(-0.1, 0.1) for words outside word2vec: `features.word_vectors.embedding_matrix`). No activation on it.
- `modalities`: the inputs read, all three by default; one alone (with variant "U") is the single-modality model
  that measures what each modality carries by itself (not a row of the paper's tables). Binary heads need two
  modalities and the ternary head three.
- One layer per Bi-LSTM, each direction of hidden_dim units; no dropout in the encoder (the paper names dropout
  around the decoder LSTM only).
- A mask must be a prefix (the real steps first, as `data.inputs` pads), with at least one real step per clip and
  modality: anything else is a ValueError.
- The attention modules' own choices (per-head projections, per-modality unary parameters, shared low-rank factors,
  learned eq. 17 readouts, θ initialised to 1, eq. 19 without softmax for a single term, the hierarchical fusion's
  sharing) are those of `modules.hoca`, at its defaults.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..features.word_vectors import initialise_embedding
from ..modules.hoca import TABLE1_VARIANTS, HOCAAttentionFusion
from .base import Captioner

MODALITIES = ("frames", "motion", "audio")  # F, M, S of the paper, in eq. 19's order


@dataclass(frozen=True)
class HOCAArgs:
    embed_dim: int = 300  # word vectors (word2vec's 300 in the paper; learned here)
    hidden_dim: int = 512  # every LSTM: the decoder and each direction of each Bi-LSTM
    att_dim: int = 512  # d, the common space of the attention and the fusion's hidden size
    variant: str = "UBT"  # Table 1's rows: U, B, T, UB, UBT
    low_rank: bool = True  # L-HOCA-* (eqs. 14-17) or HOCA-* (eq. 9)
    rank: int = 1  # k of Low-Rank HOCA
    steps: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODALITIES, 80))  # t_l per modality
    dropout: float = 0.5  # input and output of the decoder LSTM
    modalities: tuple[str, ...] = MODALITIES  # the inputs read: all three, or one for a single-modality model
    word_vectors: bool = False  # start the word embedding from the stage word2vec's vectors (tasks/captioning.py)

    def __post_init__(self) -> None:
        if self.variant not in TABLE1_VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(TABLE1_VARIANTS)} (Table 1), not {self.variant!r}")
        if not self.modalities or tuple(m for m in MODALITIES if m in self.modalities) != tuple(self.modalities):
            raise ValueError(f"modalities must be some of {', '.join(MODALITIES)}, in that order, not {self.modalities}")
        needs = {"U": 1, "B": 2, "T": 3}
        if len(self.modalities) < max(needs[kind] for kind in self.variant):
            raise ValueError(f"variant {self.variant} needs at least {max(needs[k] for k in self.variant)} modalities")
        if sorted(self.steps) != sorted(MODALITIES) or any(t < 1 for t in self.steps.values()):
            raise ValueError(f"steps must give each of {', '.join(MODALITIES)} a number of time steps >= 1, "
                             f"got {self.steps}")
        if min(self.embed_dim, self.hidden_dim, self.att_dim, self.rank) < 1:
            raise ValueError("embed_dim, hidden_dim, att_dim and rank must be at least 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), not {self.dropout}")


def _lengths(name: str, mask: torch.Tensor) -> torch.Tensor:
    """The number of real steps of each clip, from a prefix mask [B, N]."""
    lengths = mask.sum(1)
    prefix = torch.arange(mask.size(1), device=mask.device).unsqueeze(0) < lengths.unsqueeze(1)
    if not torch.equal(prefix, mask):
        raise ValueError(f"input {name!r}: the mask must mark a prefix of real steps (padding at the end)")
    if bool((lengths == 0).any()):
        raise ValueError(f"input {name!r}: every clip needs at least one real step")
    return lengths


class LowRankHOCACaptioner(Captioner):
    Args = HOCAArgs
    INPUTS = MODALITIES  # the default; an instance reads its `modalities` (`consumes`)

    @classmethod
    def consumes(cls, args: HOCAArgs) -> tuple[str, ...]:
        return tuple(args.modalities)

    def __init__(self, args: HOCAArgs, vocab_size: int, input_dims: Mapping[str, int]):
        super().__init__()
        self.args = args
        self.vocab_size = vocab_size
        self.INPUTS = modalities = self.consumes(args)
        h = args.hidden_dim
        self.encoders = nn.ModuleDict({name: nn.LSTM(input_dims[name], h, batch_first=True, bidirectional=True)
                                       for name in modalities})
        self.word_embed = nn.Embedding(vocab_size, args.embed_dim)
        self.decoder = nn.LSTMCell(args.embed_dim, h)  # eq. 1
        self.input_dropout = nn.Dropout(args.dropout)
        self.output_dropout = nn.Dropout(args.dropout)
        self.attention = HOCAAttentionFusion(h, [2 * h] * len(modalities), [args.steps[m] for m in modalities],
                                             vocab_size, args.att_dim, args.variant, args.low_rank, args.rank)

    def load_word_vectors(self, matrix) -> None:
        """Initialise the word embedding from word vectors ([V, embed_dim])."""
        initialise_embedding(self.word_embed, matrix)

    def _encode_modality(self, name: str, values: torch.Tensor, mask: torch.Tensor):
        """§3.1: the Bi-LSTM outputs [B, T, 2h] of one modality over its real steps, and the mask cut to T."""
        lengths = _lengths(name, mask)
        longest = int(lengths.max())
        if longest > self.args.steps[name]:
            raise ValueError(f"input {name!r}: a clip has {longest} steps, more than steps.{name} = "
                             f"{self.args.steps[name]}")
        packed = pack_padded_sequence(values, lengths.cpu(), batch_first=True, enforce_sorted=False)
        outputs, _ = pad_packed_sequence(self.encoders[name](packed)[0], batch_first=True, total_length=longest)
        return outputs, mask[:, :longest]

    def encode(self, inputs):
        features, masks = zip(*(self._encode_modality(name, *inputs[name]) for name in self.INPUTS))
        return tuple(features), tuple(masks), tuple(self.attention.precompute(features))

    def init_state(self, encoded, batch_size):
        zeros = encoded[0][0].new_zeros(batch_size, self.args.hidden_dim)
        return zeros, zeros  # h_0, c_0

    def step(self, words, state, encoded):
        features, masks, keys = encoded
        h, c = self.decoder(self.input_dropout(self.word_embed(words)), state)  # eq. 1
        logits, _, _ = self.attention(self.output_dropout(h), features, masks, keys)  # eqs. 2-23
        return torch.log_softmax(logits, dim=-1), (h, c)


MODEL = LowRankHOCACaptioner
