"""The trainer every task shares: seeding, optimiser and schedule, epochs, best epoch by the task's validation
metric, early stopping, checkpoint/resume, distribution and MLflow logging. The task (tasks/) supplies data, model,
loss, validation metric and outputs.

Early stopping: a run stops once `train.patience` epochs in a row have not beaten the best validation value by
more than `train.min_delta` (0: never), and never trains more than `train.max_epochs`. The margin keeps a noisy
plateau, where a new best by a hair turns up now and then, from extending a run for ever (Keras' `min_delta`).
An epoch that is itself a new best, by any margin, never ends a run: the run goes on until an epoch that does
not beat every earlier one (or the cap), so no run that patience stops ends while still improving. Either way the
chosen model is the best validation epoch's, however small its lead;
test is never looked at. The decision depends only on the validation curve, which the checkpoint keeps, so a run
killed inside a patience window and resumed stops at the same epoch.

Starting weights: a system with `init` (self-critical training, say) starts from that system's saved model.

Resume: after every epoch `data/checkpoints/<system>/<fingerprint>.pt` holds model, optimizer, scheduler, RNG
states and history; the fingerprint hashes the system's resolved params, the evaluation and compute params,
the identity of every input file (path, size, modification time) and the starting weights, so a rerun with the
same params and inputs continues where a killed run stopped and reaches the same final metrics, and any change
starts afresh. The stage deletes the checkpoint once its outputs are written, so a later rerun (after a code
change, say) trains anew instead of resuming a finished run. The epoch's data order comes from a generator
seeded by (seed, epoch), so it does not depend on whether the run was resumed.

Compute (`compute` in params.yaml; training/distributed.py): the trainer runs on `compute.device`, optionally
under autocast, and in each of several DDP processes when launched so; checkpoints and the final model are CPU
tensors.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import random
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .. import paths
from ..config.loader import Config, to_dict
from ..data.feature_sets import to_device
from ..io import InputError, RefusedFile, load_torch, save_torch
from ..models.registry import load_state, read_model_file
from ..stopping import EarlyStopping
from ..tasks.base import Task
from . import distributed
from .schedules import base_lr, make_scheduler

# 2: RNG states as tensors and plain numbers (`rng_states`); a checkpoint of format 1 held numpy's ndarray, which
# `weights_only` refuses, so the format keys the fingerprint and an old checkpoint is never picked up
CHECKPOINT_FORMAT = 2


def fingerprint(cfg: Config, name: str, files: list[Path], start: str = "") -> str:
    """Hash of what a trained system depends on: its params (and its model's, for a continued system), the
    evaluation and compute params, its input files' identities and its starting weights (`start`, a digest)."""
    identities = [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files]
    blob = {"system": to_dict(cfg.systems()[name]), "model": to_dict(cfg.model_of(name)), "profile": cfg.profile,
            "evaluation": to_dict(cfg.evaluation), "compute": to_dict(cfg.compute), "files": identities,
            "start": start, "checkpoint_format": CHECKPOINT_FORMAT}
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_states() -> dict:
    """The torch, numpy and python RNG states as tensors and plain numbers, which a checkpoint loaded with
    `weights_only` accepts (numpy's own state holds an ndarray: its MT19937 key is kept as an int64 tensor)."""
    kind, key, pos, has_gauss, gauss = np.random.get_state()
    numpy_state = {"kind": kind, "key": torch.from_numpy(key.astype(np.int64)), "pos": int(pos),
                   "has_gauss": int(has_gauss), "gauss": float(gauss)}
    return {"torch": torch.get_rng_state(), "numpy": numpy_state, "python": random.getstate()}


def set_rng_states(rng: dict) -> None:
    """Restore exactly the states `rng_states` returned."""
    n = rng["numpy"]
    torch.set_rng_state(rng["torch"])
    np.random.set_state((n["kind"], n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    random.setstate(rng["python"])


def make_optimizer(model: nn.Module, cfg) -> torch.optim.Optimizer:
    lr = base_lr(cfg)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamax":  # BAN's (betas 0.9, 0.999 by default, as the official code)
        return torch.optim.Adamax(model.parameters(), lr=lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    return cls(model.parameters(), lr=lr, betas=cfg.betas, weight_decay=cfg.weight_decay)


def on_cpu(obj):
    """A copy of nested dicts/lists/tuples with every tensor on the CPU (tensors already there are kept)."""
    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        return {k: on_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(on_cpu(v) for v in obj)
    return obj


def make_task(cfg: Config, name: str, root: Path, dist) -> Task:
    """The system's task: module `crossmodal.tasks.<task>` (its `TASK` class), imported by name so that a
    stage's code closure holds only its own task."""
    module = importlib.import_module(f"crossmodal.tasks.{cfg.systems()[name].task}")
    return module.TASK(cfg, name, root, dist)


class Trainer:
    """Trains one system; `run()` returns the final metrics dict (written by the task). In a multi-process run
    (`distributed.process_group`) every process builds one; see training/distributed.py."""

    def __init__(self, cfg: Config, name: str, root: Path, progress: bool = True):
        self.dist = distributed.current(cfg.compute)
        self.device = self.dist.device
        if self.device.type == "cuda":
            distributed.deterministic_cuda()
        self.cfg, self.name, self.root, self.progress = cfg, name, root, progress and self.dist.main
        self.task = make_task(cfg, name, root, self.dist)
        self.system = cfg.systems()[name]
        self.train_cfg = self.system.train
        seed_everything(self.train_cfg.seed)
        self.model = self.task.build_model()
        self.start_digest = ""
        if self.system.init is not None:
            self.start_from(self.system.init)
        self.model.to(self.device)
        self.net = self.dist.wrap(self.model)  # training computations run through it: net(fn, *args)
        self.precision = distributed.Precision(cfg.compute, self.device)
        self.steps_per_epoch = -(-self.task.train_size() // self.train_cfg.batch_size)
        self.optimizer = make_optimizer(self.model, self.train_cfg)
        self.scheduler = make_scheduler(self.optimizer, self.train_cfg, self.steps_per_epoch)
        self.per_epoch_schedule = isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
        digest = fingerprint(cfg, name, self.task.data_files(), self.start_digest)
        self.checkpoint = root / paths.CHECKPOINTS / name / f"{digest}.pt"
        self.history: list[dict] = []
        self.best = {"value": -float("inf"), "epoch": -1, "state": None}
        self.stopping = EarlyStopping(self.train_cfg.patience, self.train_cfg.min_delta)

    def start_from(self, init: str) -> None:
        """The best saved model of system `init`; `start_digest` keys the checkpoint to exactly these weights."""
        path = self.root / paths.MODELS / init / "model.pt"
        data, saved = read_model_file(path, self.cfg.stage(init))
        self.start_digest = hashlib.sha256(data).hexdigest()
        load_state(self.model, saved.get("state_dict", {}), path, init)

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The training items' order in this epoch, from (seed, epoch) alone so that resuming keeps it."""
        order_gen = torch.Generator().manual_seed(self.train_cfg.seed * 100003 + epoch)
        return torch.randperm(self.task.train_size(), generator=order_gen).numpy()

    def optimise(self, loss: torch.Tensor) -> None:
        """One update: backward, clip (by value or norm), optimizer and per-step schedule (with fp16 autocast,
        through the gradient scaler; otherwise the scaler is disabled and passes everything through)."""
        cfg, scaler = self.train_cfg, self.precision.scaler
        self.optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        if cfg.grad_clip > 0:
            scaler.unscale_(self.optimizer)
            if cfg.grad_clip_mode == "norm":
                nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
            else:
                nn.utils.clip_grad_value_(self.model.parameters(), cfg.grad_clip)
        scaler.step(self.optimizer)
        scaler.update()
        if not self.per_epoch_schedule:
            self.scheduler.step()

    def train_epoch(self, epoch: int) -> dict[str, float]:
        """One epoch: this process's share of each step's batch (all of it in one process), the task's loss, one
        update per step; returns the epoch's means of what the task logs."""
        from tqdm import tqdm

        self.model.train()
        self.task.start_epoch(epoch)
        order, size, dist = self.epoch_order(epoch), self.train_cfg.batch_size, self.dist
        shares = [order[start:start + size][dist.rank::dist.world] for start in range(0, len(order), size)]
        logged: dict[str, list[tuple[float, float]]] = {}
        for rows, inputs in tqdm(self.task.train_batches(shares), total=len(shares), leave=False,
                                 desc=f"{self.name} epoch {epoch + 1}/{self.train_cfg.max_epochs}",
                                 disable=not self.progress):
            inputs = to_device(inputs, self.device)
            with self.precision.autocast():
                loss, values = self.task.loss(self.net, self.model, rows, inputs, dist.share)
            self.optimise(loss)
            for key, pair in values.items():
                logged.setdefault(key, []).append(pair)
        return dist.epoch_means(logged)

    def seed_rank_stream(self, epoch: int) -> None:
        """Ranks other than 0 draw dropout and scheduled-sampling noise from their own stream in each epoch
        (rank 0 continues the single-process stream)."""
        if not self.dist.main:
            torch.manual_seed(self.dist.stream_seed(self.train_cfg.seed * 100003 + epoch))

    def validate(self) -> float:
        """The task's validation metric: computed by rank 0, broadcast to the others."""
        if not self.dist.main:
            return self.dist.broadcast(0.0)
        return self.dist.broadcast(self.task.validate(self.model))

    # ---- checkpointing

    def save_checkpoint(self, epoch: int) -> None:
        rng = rng_states()
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        state = {"epoch": epoch, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "scheduler": self.scheduler.state_dict(), "scaler": self.precision.scaler.state_dict(),
                 "history": self.history, "best": self.best, "stopping": self.stopping.state(), "rng": rng}
        save_torch(on_cpu(state), self.checkpoint)

    def resume(self) -> int:
        """Load the checkpoint if one exists for these exact params; returns the next epoch to run. An unreadable
        one (truncated, say) starts afresh; one that asks for more than tensors and plain data is refused
        (`RefusedFile`, one line) rather than overwritten."""
        if not self.checkpoint.is_file():
            return 0
        try:
            state = load_torch(self.checkpoint, self.cfg.stage(self.name), "checkpoint")
        except RefusedFile:
            raise
        except InputError:  # unreadable: start afresh rather than fail the stage
            return 0
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])  # moves its state to the parameters' device
        self.scheduler.load_state_dict(state["scheduler"])
        if state.get("scaler"):
            self.precision.scaler.load_state_dict(state["scaler"])
        self.history, self.best = state["history"], state["best"]
        self.stopping.load(state["stopping"])
        set_rng_states(state["rng"])
        if "cuda" in state["rng"] and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)
        return state["epoch"] + 1

    # ---- training

    def run(self, tracker=None) -> dict | None:
        """Train, then run the task's test with the best state; the final metrics, or None on ranks other than 0.
        The model is left on the CPU with its best weights. The MLflow `tracker` gets each epoch's row (step = the
        epoch), then `best_epoch` and `best_<metric>`, the task's metrics on the tables' scale (`Task.for_tracking`);
        the returned metrics keep the task's own scale."""
        metric, seconds = self.task.metric, {"train": 0.0, "validate": 0.0}
        first = self.resume()
        if tracker is not None:
            if first:
                tracker.set_tag("resumed_from_epoch", str(first))
            for row in self.history:  # a resumed run still carries the whole curve
                tracker.log_metrics(self.tracked(row), step=row["epoch"])
        for epoch in range(first, self.train_cfg.max_epochs):
            if self.patience_spent(epoch):
                break
            lr = self.optimizer.param_groups[0]["lr"]
            self.seed_rank_stream(epoch)
            start = time.perf_counter()
            train_metrics = self.train_epoch(epoch)
            middle = time.perf_counter()
            value = self.validate()
            seconds["train"] += middle - start
            seconds["validate"] += time.perf_counter() - middle
            row = {"epoch": epoch + 1, **train_metrics, "lr": lr, metric: value}
            self.history.append(row)
            if self.per_epoch_schedule:
                self.scheduler.step(value)
            if value > self.best["value"]:  # every rank (the value is broadcast); the weights only where kept
                state = {k: v.to("cpu", copy=True) for k, v in self.model.state_dict().items()} \
                    if self.dist.main else None
                self.best = {"value": value, "epoch": epoch + 1, "state": state}
            self.stopping.update(value, epoch + 1)
            if not self.dist.main:
                continue
            self.save_checkpoint(epoch)
            if tracker is not None:
                tracker.log_metrics(self.tracked(row), step=epoch + 1)
            if self.progress:
                shown = " ".join(f"{k} {v:.3f}" for k, v in train_metrics.items())
                print(f"{self.name} epoch {epoch + 1}: {shown} {metric} {value:.3f}", flush=True)
        if not self.dist.main:
            return None
        stopped = "patience" if self.patience_spent(len(self.history)) else "max_epochs"
        self.model.load_state_dict(self.best["state"])
        start = time.perf_counter()
        result = self.task.test(self.model)
        seconds["test"] = time.perf_counter() - start
        self.model.cpu()
        if tracker is not None:
            # the chosen epoch and its value, for the runs table (a curve's column shows its last epoch), and where
            # the stage's time went (bench_pipeline.py); the seconds are kept out of the DVC metrics
            best = self.task.for_tracking({metric: self.best["value"]})[metric]
            tracker.log_metrics({"best_epoch": self.best["epoch"], f"best_{metric}": best,
                                 **{f"seconds_{k}": v for k, v in seconds.items()}})
            tracker.set_tag("stopped_by", stopped)
        return {**result, "best_epoch": self.best["epoch"], f"best_{metric}": self.best["value"],
                "stopped_by": stopped, "history": self.history}

    def patience_spent(self, epochs_done: int) -> bool:
        return self.stopping.spent(epochs_done)

    def tracked(self, row: dict) -> dict:
        """An epoch's row as MLflow gets it (step = the epoch): the task's metrics on the tables' scale."""
        return self.task.for_tracking({k: v for k, v in row.items() if k != "epoch"})

    def save_model(self) -> None:
        """The chosen weights and what rebuilds their network, as data/models/<system>/model.pt."""
        save_torch({"system": self.name, "model": to_dict(self.task.model_system), **self.task.model_file_extra(),
                    "state_dict": self.model.state_dict()}, self.root / paths.MODELS / self.name / "model.pt")
