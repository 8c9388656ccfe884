"""BAN (Kim, Jun & Zhang, NeurIPS 2018) for VQA (`BanVqa`): a GRU question encoder that keeps every step, the
bilinear attention network over the question words and the detected objects (`modules/bilinear.py`: maps, pooling,
residual learning, the counter), and a classifier over the answers; and for phrase grounding on Flickr30k Entities
(`BanGrounding`, the official `BanModel_flickr`): the GRU's states at each phrase's last word and one bilinear
attention map's logits between them and the objects, a score for every (phrase, object) pair.

Layers and the official code's names (jnhwkim/ban-vqa `base_model.py`), so that its weights can be mapped:
- `word_embed`: `w_emb` (300-d; GloVe-initialised for BAN-Glove, `load_word_vectors`; the official code also
  concatenates a tf-idf-weighted copy, op "c", which we leave out);
- `question`: `q_emb`, a one-layer unidirectional GRU of `hidden_dim` units (1280), every step kept;
- `ban.attention`: `v_att` (the G maps); `ban.pool[g]`: `b_net[g]` (its U'_g, V'_g) with `q_prj[g]` (P_g, its
  `project`); `ban.count_projection[g]`: `c_prj[g]`; `ban.counter`: `counter`;
- `classifier`: `classifier`, weight-normed Linear(N, 2N) -> ReLU -> Dropout(0.5) -> weight-normed Linear(2N, A)
  (the official SimpleClassifier; the paper's "two-layer perceptron").
The logits score every answer of the vocabulary; training minimises binary cross-entropy against the soft scores
(the task's part).

Named inputs: `question` (word ids [B, ρ], back-padded, masked), `regions` (features [B, φ, M]) and `boxes`
([B, φ, 4] x1, y1, x2, y2 in the image's fraction, the regions' boxes, read by the counter only).

Grounding (official `BanModel_flickr`, one glimpse): the logits are not normalised; training applies binary
cross-entropy to every (phrase, object) pair against "IoU >= 0.5 with a box of the phrase's entity", evaluation
ranks a phrase's objects by logit (Recall@k: the grounding task's part). Padded objects and padded phrases get
-inf (the official code writes -99). Left out: the official option "s", which appends the boxes' coordinates to the
object features.

Not a `Captioner`: the registry finds the networks by task (`MODELS`: `vqa`, `grounding`). `word_vectors: true`
(BAN-Glove) has the VQA task initialise the word embedding from the stage word_vectors' file.

Sizes: the paper's BAN-8 is 1280 hidden units, 8 glimpses, rank 3 in the maps; dropout 0.2 before every
weight-normed layer and 0.5 on the objects in the maps and in the classifier, as the official code.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from ..features.word_vectors import initialise_embedding
from ..modules.bilinear import (ATTENTIONS, FUSIONS, BANOutput, BilinearAttentionMap, BilinearAttentionNetwork,
                                WeightNormLinear)
from ..modules.counter import Counter


@dataclass(frozen=True)
class BANArgs:
    embed_dim: int = 300
    hidden_dim: int = 1280  # the GRU, the maps' and the pooling's K, the classifier's N
    glimpses: int = 8
    attention_rank: int = 3
    fusion: str = "residual"  # residual (eq. 10) | sum | concat: the residual-learning table's rows
    attention: str = "bilinear"  # bilinear | coattention | unitary: the co-attention table's rows (modules/bilinear.py)
    counter: bool = False
    count_objects: int = 10  # the counter's top-K objects
    dropout: float = 0.2
    map_dropout: float = 0.5
    classifier_dropout: float = 0.5
    word_vectors: bool = False  # BAN-Glove: the embedding starts from the word vectors (the task loads them)

    def __post_init__(self) -> None:
        if min(self.embed_dim, self.hidden_dim, self.glimpses, self.attention_rank, self.count_objects) < 1:
            raise ValueError("embed_dim, hidden_dim, glimpses, attention_rank and count_objects must be >= 1")
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {', '.join(FUSIONS)}, not {self.fusion!r}")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTIONS)}, not {self.attention!r}")


class BanVqa(nn.Module):
    INPUTS = ("question", "regions", "boxes")
    Args = BANArgs

    def __init__(self, args: BANArgs, vocab_size: int, answers: int, input_dims: Mapping[str, int]):
        super().__init__()
        self.args = args
        n = args.hidden_dim
        self.word_embed = nn.Embedding(vocab_size, args.embed_dim, padding_idx=0)
        self.question = nn.GRU(args.embed_dim, n, batch_first=True)
        counter = Counter(objects=args.count_objects) if args.counter else None
        self.ban = BilinearAttentionNetwork(n, input_dims["regions"], n, args.glimpses, counter, args.attention_rank,
                                            args.dropout, args.map_dropout, args.fusion, args.attention)
        width = n * args.glimpses if args.fusion == "concat" else n
        self.classifier = nn.Sequential(WeightNormLinear(width, 2 * n), nn.ReLU(), nn.Dropout(args.classifier_dropout),
                                        WeightNormLinear(2 * n, answers))

    def load_word_vectors(self, matrix) -> None:
        """Initialise the word embedding ([V, embed_dim], e.g. `features.word_vectors.embedding_matrix`); the
        padding row stays zero."""
        initialise_embedding(self.word_embed, matrix, padding_row=0)

    def attend(self, inputs) -> tuple[torch.Tensor, BANOutput]:
        """(answer logits [B, A], the attention network's output: maps, logits, counts)."""
        words, word_mask = inputs["question"]
        regions, region_mask = inputs["regions"]
        steps, _ = self.question(self.word_embed(words.long()))  # back-padded: real steps never see padding
        out = self.ban(steps, regions, word_mask, region_mask, inputs["boxes"].values if self.args.counter else None)
        return self.classifier(out.pooled), out

    def forward(self, inputs) -> torch.Tensor:
        return self.attend(inputs)[0]


class BanGrounding(nn.Module):
    """Phrase grounding: `forward(inputs)` -> logits [B, E, φ] of every phrase against every object (-inf where
    either is padding). Inputs: `sentence` (word ids [B, ρ], back-padded), `phrases` (each phrase's last-word
    position [B, E], masked), `regions` ([B, φ, M]). Uses `embed_dim`, `hidden_dim`, `attention_rank`, `dropout`
    and `map_dropout` of `BANArgs` (one glimpse)."""

    INPUTS = ("sentence", "phrases", "regions")
    Args = BANArgs

    def __init__(self, args: BANArgs, vocab_size: int, input_dims: Mapping[str, int]):
        super().__init__()
        self.args = args
        n = args.hidden_dim
        self.word_embed = nn.Embedding(vocab_size, args.embed_dim, padding_idx=0)
        self.question = nn.GRU(args.embed_dim, n, batch_first=True)  # official q_emb
        self.attention = BilinearAttentionMap(n, input_dims["regions"], n, 1, args.attention_rank, args.dropout,
                                              args.map_dropout)  # official v_att, one glimpse

    load_word_vectors = BanVqa.load_word_vectors

    def phrase_states(self, inputs) -> torch.Tensor:
        """The GRU's state at each phrase's last word: [B, E, N]."""
        words, _ = inputs["sentence"]
        positions, _ = inputs["phrases"]
        steps, _ = self.question(self.word_embed(words.long()))
        return steps.gather(1, positions.long().unsqueeze(-1).expand(-1, -1, steps.size(-1)))

    def forward(self, inputs) -> torch.Tensor:
        regions, region_mask = inputs["regions"]
        phrase_mask = inputs["phrases"].mask
        _, logits = self.attention(self.phrase_states(inputs), regions, phrase_mask, region_mask)  # [B, 1, φ, E]
        return logits[:, 0].transpose(1, 2)


MODELS = {"vqa": BanVqa, "grounding": BanGrounding}
