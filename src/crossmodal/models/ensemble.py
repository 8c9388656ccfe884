"""Several trained captioners decoded as one (the papers' Σ rows): log p(w) = mean_k log p_k(w).

The average of log-probabilities (a normalised product of experts up to a constant) is what the beam search
scores; each member keeps its own encoding and decoder state, so members may differ in everything but the
vocabulary. The ensemble consumes the union of its members' named inputs, and every member reads its own from the
same mapping.
"""
from __future__ import annotations

import torch
from torch import nn

from .base import Captioner


class Ensemble(Captioner):
    def __init__(self, members: list[Captioner]):
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one member")
        self.members = nn.ModuleList(members)

    @property
    def INPUTS(self) -> tuple[str, ...]:  # a class attribute on single models
        """The members' INPUTS, united in order of first appearance."""
        return tuple(dict.fromkeys(name for m in self.members for name in m.INPUTS))

    def encode(self, inputs):
        return tuple(m.encode(inputs) for m in self.members)

    def init_state(self, encoded, batch_size):
        return tuple(m.init_state(e, batch_size) for m, e in zip(self.members, encoded))

    def step(self, words, state, encoded):
        outputs = [m.step(words, s, e) for m, s, e in zip(self.members, state, encoded)]
        return torch.stack([logprobs for logprobs, _ in outputs]).mean(0), tuple(s for _, s in outputs)
