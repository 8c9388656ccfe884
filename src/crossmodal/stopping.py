"""The early-stopping rule, shared by the trainer (training/trainer.py, whose docstring states it) and the feature
networks' own loops (the attribute detector's, features/attributes.py, and the video extractors', features/video.py,
through `BestWeights`): a run stops once `patience` epochs in a row have not beaten the best validation value by more
than `min_delta` (patience 0: never), and never on an epoch that is itself a new best. Pure logic on values and a
model's weights, it sits at the package root, below both of its users' layers (features/ sits below training/)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EarlyStopping:
    """The early-stopping rule (training/trainer.py's docstring): `epoch` is the last epoch whose validation value
    beat the best before it by more than `min_delta`, `value` that best; `top_epoch` the epoch of the best value by
    any margin."""

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


class BestWeights:
    """The rule over a loop's epochs, keeping a copy of the model's weights at its best epoch (`rule.top_epoch`):
    `done(value, epoch, model)` after each validated epoch says whether the run ends; `restore(model)` loads the best
    epoch's weights and returns that epoch. (The trainer keeps its own copy: it saves it in checkpoints.)"""

    def __init__(self, patience: int, min_delta: float):
        self.rule, self.weights = EarlyStopping(patience, min_delta), None

    def done(self, value: float, epoch: int, model) -> bool:
        self.rule.update(value, epoch)
        if self.rule.top_epoch == epoch:
            self.weights = {k: v.clone() for k, v in model.state_dict().items()}
        return self.rule.spent(epoch)

    def restore(self, model) -> int:
        model.load_state_dict(self.weights)
        return self.rule.top_epoch
