"""The early-stopping rule, shared by the trainer (trainer.py, whose docstring states it) and the attribute
detector's own loop (features/attributes.py): a run stops once `patience` epochs in a row have not beaten the best
validation value by more than `min_delta` (patience 0: never), and never on an epoch that is itself a new best."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EarlyStopping:
    """The early-stopping rule (trainer.py's docstring): `epoch` is the last epoch whose validation value beat the best
    before it by more than `min_delta`, `value` that best; `top_epoch` the epoch of the best value by any margin."""

    patience: int
    min_delta: float
    value: float = -float("inf")
    epoch: int = 0
    top: float = -float("inf")
    top_epoch: int = 0

    def update(self, value: float, epoch: int) -> None:
        if value > self.value + self.min_delta:
            self.value, self.epoch = value, epoch
        if value > self.top:
            self.top, self.top_epoch = value, epoch

    def spent(self, epochs_done: int) -> bool:
        """Whether the run ends after `epochs_done` epochs: `patience` of them since `epoch`, the last not a new
        best."""
        return self.patience > 0 and epochs_done - self.epoch >= self.patience and epochs_done != self.top_epoch

    def state(self) -> dict:
        return {"value": self.value, "epoch": self.epoch, "top": self.top, "top_epoch": self.top_epoch}

    def load(self, state: dict) -> None:
        self.value, self.epoch, self.top, self.top_epoch = (state["value"], state["epoch"], state["top"],
                                                            state["top_epoch"])
