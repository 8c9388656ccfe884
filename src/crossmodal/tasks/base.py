"""What a task supplies to the shared trainer (training/trainer.py): its data, model, loss, validation metric
and outputs. A task is a module of this package (captioning.py, vqa.py, grounding.py) whose `TASK` is its `Task`
class; the trainer imports the system's own by name (`make_task`), so a stage's code closure holds only its task.

The trainer owns everything else (seeding, optimiser and schedule, epochs, early stopping and the best-epoch choice by
the validation metric, checkpoint/resume, distribution, MLflow), so a new task needs no copy of it, of the CLI or of
tracking.
"""
from __future__ import annotations

import abc
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import nn

from ..config.loader import Config
from ..config.training import SystemConfig
from ..data.feature_sets import Batch


def on_scale(value: float, scale: float) -> float:
    """`value` times `scale` as MLflow gets it: rounded to 4 decimals when scaled (for a readable runs table)."""
    return value if scale == 1 else round(value * scale, 4)


class Task(abc.ABC):
    """One trained system's task. `metric` names the validation metric the best epoch maximises.

    MLflow shows the metric (its curve and its best value) and the logged values named in `scaled_values` times
    `metric_scale`: the scale the tables print (×100 for the caption metrics, the VQA score and the grounding
    recalls). The metrics files and what the trainer returns keep the task's own scale."""

    metric: str
    metric_scale: float = 1.0
    scaled_values: tuple[str, ...] = ()

    def for_tracking(self, values: dict[str, float]) -> dict[str, float]:
        """`values` (an epoch's row, the best value) as MLflow gets them: the metric and `scaled_values` on the
        tables' scale, the rest (losses, learning rate) as they are."""
        scaled = {self.metric, *self.scaled_values}
        return {k: on_scale(v, self.metric_scale) if k in scaled else v for k, v in values.items()}

    def __init__(self, cfg: Config, name: str, root: Path, dist):
        self.cfg, self.name, self.root, self.dist, self.device = cfg, name, root, dist, dist.device
        self.system: SystemConfig = cfg.systems()[name]
        self.model_system: SystemConfig = cfg.model_of(name)  # model, inputs, model_args (scst: its init's)

    @abc.abstractmethod
    def build_model(self) -> nn.Module:
        """The system's network, freshly initialised (the trainer seeds torch first): models/registry.build_model,
        then the word embedding from word vectors where the system asks."""

    @abc.abstractmethod
    def train_size(self) -> int:
        """Number of training items (an epoch is a permutation of them, cut into batches)."""

    @abc.abstractmethod
    def train_batches(self, row_lists: list[np.ndarray]) -> Iterator[Batch]:
        """(rows, named inputs) of each list of training rows, in order, on the CPU."""

    @abc.abstractmethod
    def loss(self, net, model: nn.Module, rows: np.ndarray, inputs, share
             ) -> tuple[torch.Tensor, dict[str, tuple[float, float]]]:
        """The batch's loss (run the forward pass as `net(fn)`, fn(model) -> outputs, for DDP) and the values to
        log as (sum, count) pairs; `share(count)` is the divisor of the summed loss (`count` itself in one
        process; in several, the count over every rank / their number: training/distributed.py)."""

    @abc.abstractmethod
    def start_epoch(self, epoch: int) -> None:
        """Per-epoch state before its first `loss` (the epoch's schedules, sampling generators)."""

    @abc.abstractmethod
    def validate(self, model: nn.Module) -> float:
        """The validation metric of `model` (rank 0 only)."""

    @abc.abstractmethod
    def test(self, model: nn.Module) -> dict:
        """Test-split outputs and metrics of the chosen model: {"predictions": ..., "test": {...}}, and whatever
        else the task's metrics file holds (VQA: its question types; grounding: the proposals' upper bound)."""

    @abc.abstractmethod
    def write_outputs(self, run, result: dict) -> dict:
        """Write the test outputs (predictions, submission files, examples), log them to the MLflow `run`, and
        return the metrics-file body (the caller adds the run id)."""

    @abc.abstractmethod
    def data_files(self) -> list[Path]:
        """The input files the run reads; their identity keys the resume checkpoint."""

    def model_file_extra(self) -> dict:
        """What the saved model file records besides weights and config (the vocabulary size, say)."""
        return {}
