"""The Bottom-Up VQA model of Teney, Anderson, He & van den Hengel ("Tips and Tricks for Visual Question Answering:
Learnings from the 2017 Challenge", CVPR 2018; the 2017 challenge winner), the "Bottom-Up (Teney et al., 2017)" row
of BAN's glimpse table: one question vector, one top-down (unitary) attention map over the detected objects, a
joint embedding by element-wise product, and a classifier over the answers.

Its equations (the paper's section on the proposed model), with this module's layers:
- gated tanh layer f_a(x) = tanh(W x + b) ∘ σ(W' x + b') (`GatedTanh`), the paper's non-linearity everywhere;
- question: words embedded (`word_embed`, 300-d GloVe in the paper; `word_vectors: true` loads the stage
  word_vectors' file as BAN-Glove does), a GRU (`question`, 512 units in the paper); q is its state after the last
  real word (the question's length from its mask; the paper pads and cuts to 14 words);
- image features v_i, each L2-normalised, as the paper does before the attention;
- top-down attention: a_i = w_aᵀ f_a([v_i, q]) (`attention`, `attention_score`), α = softmax over the objects,
  padded objects masked; v̂ = Σ_i α_i v_i;
- joint embedding: h = f_q(q) ∘ f_v(v̂) (`question_proj`, `image_proj`);
- output: s = σ(W_o f_o(h)) (`output`, `classifier`); the logits are returned and the VQA task's binary
  cross-entropy against the soft scores applies σ, as the paper's loss does.

Where we differ from the paper, and why:
- The paper's output sums two branches, a text one and an image one, whose weights start from the answers' GloVe
  vectors and from image features of the answers (its pretrained output embeddings); ours is one branch that
  starts as nn.Linear does (the synthetic world has no answer images).
- The paper trains with AdaDelta; its system here derives from BAN's recipe (the official ban-vqa Adamax warm-up
  and grad clip), so that the glimpse table compares architectures under one optimiser, and stops by the shared
  early-stopping rule. It states a patience of 10 and no decay below the cap: it answers with the prior for ~10
  epochs before it learns (params.yaml, `ban.systems.bottom_up`).
- Sizes: `hidden_dim` is the GRU's and every gated layer's width (512 in the paper, `paper:` block of its system).

Named inputs: `question` (word ids [B, ρ], back-padded, masked) and `regions` (features [B, φ, M], masked); the
boxes are not read (the model has no counter).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from ..features.word_vectors import initialise_embedding
from ..modules.additive import masked_softmax


@dataclass(frozen=True)
class BottomUpArgs:
    embed_dim: int = 300
    hidden_dim: int = 512  # the GRU and every gated tanh layer
    dropout: float = 0.0  # before the classifier's gated layer (the paper names none; 0 keeps it)
    word_vectors: bool = False  # the embedding starts from the word vectors (the task loads them)

    def __post_init__(self) -> None:
        if min(self.embed_dim, self.hidden_dim) < 1 or not 0.0 <= self.dropout < 1.0:
            raise ValueError("embed_dim and hidden_dim must be >= 1 and dropout in [0, 1)")


class GatedTanh(nn.Module):
    """f(x) = tanh(W x + b) ∘ σ(W' x + b'): [..., in_dim] -> [..., out_dim]."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.value = nn.Linear(in_dim, out_dim)  # W, b
        self.gate = nn.Linear(in_dim, out_dim)  # W', b'

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.value(x)) * torch.sigmoid(self.gate(x))


class BottomUpVqa(nn.Module):
    INPUTS = ("question", "regions")
    Args = BottomUpArgs

    def __init__(self, args: BottomUpArgs, vocab_size: int, answers: int, input_dims: Mapping[str, int]):
        super().__init__()
        self.args = args
        n, m = args.hidden_dim, input_dims["regions"]
        self.word_embed = nn.Embedding(vocab_size, args.embed_dim, padding_idx=0)
        self.question = nn.GRU(args.embed_dim, n, batch_first=True)
        self.attention = GatedTanh(m + n, n)  # f_a over [v_i, q]
        self.attention_score = nn.Linear(n, 1, bias=False)  # w_a (a bias would cancel in the softmax)
        self.question_proj = GatedTanh(n, n)  # f_q
        self.image_proj = GatedTanh(m, n)  # f_v
        self.output = GatedTanh(n, n)  # f_o
        self.dropout = nn.Dropout(args.dropout)
        self.classifier = nn.Linear(n, answers)  # W_o

    def load_word_vectors(self, matrix) -> None:
        """Initialise the word embedding ([V, embed_dim]); the padding row stays zero."""
        initialise_embedding(self.word_embed, matrix, padding_row=0)

    def attend(self, inputs) -> tuple[torch.Tensor, torch.Tensor]:
        """(answer logits [B, A], attention weights α [B, φ])."""
        words, word_mask = inputs["question"]
        regions, region_mask = inputs["regions"]
        steps, _ = self.question(self.word_embed(words.long()))  # back-padded: real steps never see padding
        last = word_mask.long().sum(1).clamp(min=1) - 1
        q = steps[torch.arange(len(steps), device=steps.device), last]  # the state after the last real word
        v = nn.functional.normalize(regions, dim=-1)
        joint = torch.cat([v, q.unsqueeze(1).expand(-1, v.size(1), -1)], -1)
        alpha = masked_softmax(self.attention_score(self.attention(joint)).squeeze(-1), region_mask)
        attended = torch.bmm(alpha.unsqueeze(1), v).squeeze(1)  # v̂
        h = self.question_proj(q) * self.image_proj(attended)
        return self.classifier(self.output(self.dropout(h))), alpha

    def forward(self, inputs) -> torch.Tensor:
        return self.attend(inputs)[0]


MODELS = {"vqa": BottomUpVqa}
