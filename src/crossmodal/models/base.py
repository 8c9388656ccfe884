"""The captioner interface shared by every captioning model, and teacher-forced training through it.

A model names the inputs it consumes in `INPUTS` (keys of the batch's `data.inputs.Inputs` mapping), is built as
`Model(args, vocab_size, input_dims)` with `input_dims` the feature size of each input name, and implements
`encode(inputs)`, `init_state(encoded, batch_size)` and `step(words, state, encoded) -> (log-probabilities, state)`
(the `StepModel` protocol of `decoding.search`); training, greedy/beam/sampled decoding and ensembles are all
written once against it. A model module of this package defines `MODEL = <its class>` (see `registry`).
"""
from __future__ import annotations

import abc
from typing import Any, ClassVar

import torch
from torch import nn

from ..data.captions import BOS
from ..data.inputs import Inputs, check_inputs
from ..decoding.search import repeat_rows


class Captioner(nn.Module, abc.ABC):
    INPUTS: ClassVar[tuple[str, ...]]  # the named inputs `encode` reads, e.g. ("regions",)

    @classmethod
    def consumes(cls, args: Any) -> tuple[str, ...]:
        """The named inputs a model built from `args` reads: `INPUTS`, unless its arguments choose (a model whose
        variants read different inputs sets `self.INPUTS` in `__init__` to match)."""
        return cls.INPUTS

    @abc.abstractmethod
    def encode(self, inputs: Inputs) -> Any:
        """Per-image tensors reused at every step (batch dim first), from the inputs named in INPUTS."""

    @abc.abstractmethod
    def init_state(self, encoded: Any, batch_size: int) -> Any:
        """The decoder state before the first word (batch dim first)."""

    @abc.abstractmethod
    def step(self, words: torch.Tensor, state: Any, encoded: Any) -> tuple[torch.Tensor, Any]:
        """Log-probabilities [B, V] of the next word given the current one, and the new state."""

    def _encode_rows(self, inputs: Inputs, seq_per_img: int | torch.Tensor) -> Any:
        """`encode` of the checked inputs, each image's rows repeated `seq_per_img` times (one per caption; a tensor
        [B]: image i's `seq_per_img[i]` times)."""
        check_inputs(inputs, self.INPUTS)
        return repeat_rows(self.encode(inputs), seq_per_img)

    def forward(self, inputs: Inputs, targets, seq_per_img: int | torch.Tensor = 1, ss_prob: float = 0.0,
                generator=None):
        """Teacher-forced log-probabilities [B*seq_per_img, T+1, V] for predicting targets followed by <eos>.

        inputs: the batch's named inputs (B images); targets [B*seq_per_img, T] are word ids (0-padded), each
        image's rows together (`seq_per_img` a tensor [B]: image i has seq_per_img[i] rows); the input at t is
        <bos> then targets[:, t-1].
        With scheduled sampling (ss_prob > 0) each input word is replaced, with that probability, by a word
        sampled from the model's own previous distribution (Bengio et al. 2015, as in the official codes).
        """
        encoded = self._encode_rows(inputs, seq_per_img)
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
