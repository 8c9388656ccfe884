"""The captioner interface shared by every captioning model, and teacher-forced training through it.

A model implements `encode(feats, mask)`, `init_state(encoded, batch_size)` and
`step(words, state, encoded) -> (log-probabilities, state)` (the `StepModel` protocol of
`decoding.search`); training, greedy/beam/sampled decoding and ensembles are all written once against it.
"""
from __future__ import annotations

import abc
from typing import Any

import torch
from torch import nn

from ..data.captions import BOS
from ..decoding.search import repeat_rows


class Captioner(nn.Module, abc.ABC):
    @abc.abstractmethod
    def encode(self, feats: torch.Tensor, mask: torch.Tensor) -> Any:
        """Per-image tensors reused at every step (batch dim first)."""

    @abc.abstractmethod
    def init_state(self, encoded: Any, batch_size: int) -> Any:
        """The decoder state before the first word (batch dim first)."""

    @abc.abstractmethod
    def step(self, words: torch.Tensor, state: Any, encoded: Any) -> tuple[torch.Tensor, Any]:
        """Log-probabilities [B, V] of the next word given the current one, and the new state."""

    def forward(self, feats, mask, targets, seq_per_img: int = 1, ss_prob: float = 0.0, generator=None):
        """Teacher-forced log-probabilities [B*seq_per_img, T+1, V] for predicting targets followed by <eos>.

        targets [B*seq_per_img, T] are word ids (0-padded); the input at t is <bos> then targets[:, t-1].
        With scheduled sampling (ss_prob > 0) each input word is replaced, with that probability, by a word
        sampled from the model's own previous distribution (Bengio et al. 2015, as in the official codes).
        """
        encoded = self.encode(feats, mask)
        if seq_per_img > 1:
            encoded = repeat_rows(encoded, seq_per_img)
        n, steps = targets.shape
        state = self.init_state(encoded, n)
        words = targets.new_full((n,), BOS)
        outputs = []
        for t in range(steps + 1):
            if t > 0:
                words = targets[:, t - 1]
                if ss_prob > 0 and self.training:
                    swap = torch.rand(n, generator=generator, device=targets.device) < ss_prob
                    if swap.any():
                        sampled = torch.multinomial(outputs[-1].detach().exp(), 1, generator=generator).squeeze(1)
                        words = torch.where(swap, sampled, words)
            logprobs, state = self.step(words, state, encoded)
            outputs.append(logprobs)
        return torch.stack(outputs, 1)
