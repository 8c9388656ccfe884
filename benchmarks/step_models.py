"""A captioner seen through a change of its step distribution, for the benchmarks' decoding probes."""
from __future__ import annotations


class AdjustedSteps:
    """Decodes like `model` (its `encode`, `init_state`, `INPUTS`) with `adjust(log-probabilities)` applied to
    every step's output."""

    def __init__(self, model):
        self.model = model
        self.INPUTS = model.INPUTS

    def adjust(self, logprobs):
        return logprobs

    def encode(self, inputs):
        return self.model.encode(inputs)

    def init_state(self, encoded, batch_size):
        return self.model.init_state(encoded, batch_size)

    def step(self, words, state, encoded):
        logprobs, state = self.model.step(words, state, encoded)
        return self.adjust(logprobs), state
