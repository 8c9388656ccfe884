"""Cross-entropy training of one captioning variant, with checkpoint/resume and best-by-validation-CIDEr.

Recipe (the Up-Down / X-LAN / AoANet codes): every reference caption of an image is a training sequence
(`seq_per_img` = references per image, features encoded once per image); optional label smoothing and
scheduled sampling; gradient clipping by value or norm; schedule per step (see `schedules`).

Resume: after every epoch `data/checkpoints/<variant>/<fingerprint>.pt` holds model, optimizer, scheduler,
RNG states and history; the fingerprint hashes every param the run depends on (and the starting weights),
so a rerun with the same params continues where a killed run stopped and reaches the same final metrics,
and a changed param starts afresh. The stage deletes the checkpoint once its outputs are written, so a
later rerun (after a code change, say) trains anew instead of resuming a finished run. The epoch's data
order comes from a generator seeded by (seed, epoch), so it does not depend on whether the run was resumed.

Compute (`compute` in params.yaml; training/distributed.py): the trainer runs on `compute.device`, optionally
under autocast, and in each of several DDP processes when launched so; checkpoints and the final model are
CPU tensors. Features reach training, SCST and decoding through one reader per split: in memory (the padded
tensors of the whole split; the default) or read per batch from the HDF5 file (`compute.lazy_features`, for
COCO), both giving the same batches.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .. import paths
from ..config import ComputeConfig, Config, ScstConfig, to_dict
from ..data.captions import EOS, PAD, CaptionLabels, decode, load_labels, load_vocabulary
from ..data.coco import read_coco_captions
from ..data.region_loader import RegionBatchLoader
from ..data.regions import RegionFeatures
from ..decoding.search import beam_search, greedy_decode
from ..io import InputError, save_torch
from ..metrics.captions import cider_only, evaluate_captions
from ..models.base import Captioner
from ..models.registry import build_model
from . import distributed
from .schedules import base_lr, make_scheduler, scheduled_sampling_prob

Batch = tuple[np.ndarray, torch.Tensor, torch.Tensor]  # rows of the split, features [B, N, D], mask [B, N]


@dataclass
class Split:
    """One split: its caption labels and where its images' region features are (read by `read_features`)."""

    image_ids: np.ndarray
    labels: CaptionLabels
    regions: Path  # the region-feature file
    width: int  # most boxes of any image here: every batch is padded to it, however it is read


def load_split(regions: RegionFeatures, labels: CaptionLabels) -> Split:
    counts = regions.num_boxes[[regions.index_of(i) for i in labels.image_ids]]
    return Split(labels.image_ids, labels, regions.path, int(counts.max(initial=0)))


class MemoryFeatures:
    """The whole split as padded tensors in memory (the small default); a batch is a selection of rows."""

    def __init__(self, split: Split):
        self.image_ids = split.image_ids
        with RegionFeatures(split.regions) as regions:
            self.feats, self.mask, _ = regions.load_padded(split.image_ids.tolist())

    def batches(self, row_lists: Iterable[np.ndarray]) -> Iterator[Batch]:
        for rows in row_lists:
            yield rows, self.feats[rows], self.mask[rows]


class LazyFeatures:
    """Each batch read from the HDF5 file by `RegionBatchLoader`, whose worker processes prefetch ahead (COCO
    scale), and padded to the split's width, so batches equal those of `MemoryFeatures` exactly."""

    def __init__(self, split: Split, workers: int):
        self.image_ids, self.width = split.image_ids, split.width
        self.loader = RegionBatchLoader(split.regions, split.image_ids, workers=workers, max_boxes=None)

    def batches(self, row_lists: Iterable[np.ndarray]) -> Iterator[Batch]:
        row_lists = list(row_lists)
        loaded = self.loader.batches([rows for rows in row_lists if len(rows)])
        with torch.random.fork_rng(devices=[]):  # a starting DataLoader draws a seed from the global random
            first = next(loaded, None)  # stream, which would shift dropout against the in-memory path
        loaded = itertools.chain([first] if first is not None else [], loaded)
        empty = torch.zeros(0, 0, self.loader.dataset.feature_dim), torch.zeros(0, 0, dtype=torch.bool)
        for rows in row_lists:  # an empty row list (a rank's share of a short last batch) reads nothing
            _, feats, mask = next(loaded) if len(rows) else (rows, *empty)
            pad = self.width - feats.size(1)
            yield rows, F.pad(feats, (0, 0, 0, pad)), F.pad(mask, (0, pad))


def read_features(split: Split, compute: ComputeConfig) -> MemoryFeatures | LazyFeatures:
    return LazyFeatures(split, compute.loader_workers) if compute.lazy_features else MemoryFeatures(split)


def fingerprint(cfg: Config, name: str, start: str = "") -> str:
    """Hash of every param a trained system depends on (its recipe, the variant it starts from, upstream) and
    of its starting weights (`start`, a digest; empty when training from scratch)."""
    upstream = {k: to_dict(getattr(cfg, k)) for k in ("profile", "world", "backbone", "regions", "vocabularies", "evaluation")}
    run = cfg.trained()[name]
    blob = {"variant": to_dict(run), "upstream": upstream, "start": start}
    if isinstance(run, ScstConfig):
        blob["init"] = to_dict(cfg.trained()[run.init])
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_optimizer(model: nn.Module, cfg) -> torch.optim.Optimizer:
    lr = base_lr(cfg)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=cfg.weight_decay)
    cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    return cls(model.parameters(), lr=lr, betas=cfg.betas, weight_decay=cfg.weight_decay)


def caption_batch(labels: CaptionLabels, rows: np.ndarray, seq_per_img: int) -> torch.Tensor:
    """[len(rows) * seq_per_img, T] targets; images with fewer references repeat theirs (as the official code)."""
    start, counts = labels.start[rows], labels.end[rows] - labels.start[rows]
    if np.any(counts == 0):
        raise InputError(f"image {labels.image_ids[rows][counts == 0][0]} has no reference captions")
    picks = start[:, None] + np.arange(seq_per_img)[None, :] % counts[:, None]
    return torch.from_numpy(labels.labels[picks.reshape(-1)]).long()


def sequence_loss(logprobs: torch.Tensor, targets: torch.Tensor, smoothing: float,
                  share: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """Masked token-level cross-entropy of `targets` + <eos>; the mask covers words and the one <eos>.

    The summed loss is divided by the number of tokens, or by `share(number of tokens)` (distributed.Context.share).
    """
    n, steps = targets.shape
    lengths = (targets != PAD).sum(1)
    full = torch.cat([targets, targets.new_zeros(n, 1)], 1)
    full[torch.arange(n, device=targets.device), lengths] = EOS
    mask = torch.arange(steps + 1, device=targets.device).unsqueeze(0) <= lengths.unsqueeze(1)
    nll = -logprobs.gather(2, full.unsqueeze(2)).squeeze(2)
    if smoothing > 0:
        nll = (1 - smoothing) * nll - smoothing * logprobs.mean(-1)
    return (nll * mask).sum() / (mask.sum() if share is None else share(mask.sum()))


@torch.no_grad()
def decode_split(model: Captioner, features: MemoryFeatures | LazyFeatures, words: list[str], beam_size: int,
                 max_length: int, batch_size: int) -> dict[int, str]:
    """Captions of every image of a split, decoded on the model's device (fp32)."""
    model.eval()
    device, count = next(model.parameters()).device, len(features.image_ids)
    out = {}
    row_lists = [np.arange(start, min(start + batch_size, count)) for start in range(0, count, batch_size)]
    for rows, feats, mask in features.batches(row_lists):
        feats, mask = feats.to(device), mask.to(device)
        if beam_size > 1:
            seqs, _ = beam_search(model, feats, mask, beam_size, max_length)
        else:
            seqs, _ = greedy_decode(model, feats, mask, max_length)
        for image_id, seq in zip(features.image_ids[rows].tolist(), seqs.tolist()):
            out[int(image_id)] = decode(seq, words)
    return out


def on_cpu(obj):
    """A copy of nested dicts/lists/tuples with every tensor on the CPU (tensors already there are kept)."""
    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        return {k: on_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(on_cpu(v) for v in obj)
    return obj


class Trainer:
    """Trains one system by cross-entropy; `run()` returns the final metrics dict (written by the caller).

    Subclasses change the objective (`train_epoch`) and the starting weights (`initialise`); data,
    validation, best-epoch choice, checkpoint/resume and the final beam-search test are shared.
    In a multi-process run (`distributed.process_group`) every process builds one; see training/distributed.py.
    """

    def __init__(self, cfg: Config, name: str, root: Path, progress: bool = True):
        self.dist = distributed.current(cfg.compute)
        self.device = self.dist.device
        self.cfg, self.name, self.root, self.progress = cfg, name, root, progress and self.dist.main
        trained = cfg.trained()
        run = trained[name]
        self.model_name = run.init if isinstance(run, ScstConfig) else name
        self.vcfg = trained[self.model_name]  # model and model_args (SCST: those of its init variant)
        self.train_cfg = run.train
        self.words = load_vocabulary(root / paths.vocabulary(self.vcfg.vocabulary) / "vocab.json")
        with RegionFeatures(root / paths.REGIONS) as regions:
            label_file = root / paths.vocabulary(self.vcfg.vocabulary) / "labels.h5"
            self.train = load_split(regions, load_labels(label_file, "train"))
            self.val = load_split(regions, load_labels(label_file, "val"))
            self.test = load_split(regions, load_labels(label_file, "test"))
            feature_dim = regions.feature_dim
        self.val_refs = read_coco_captions(root / paths.references("val"))
        self.test_refs = read_coco_captions(root / paths.references("test"))
        self.train_features, self.val_features, self.test_features = (
            read_features(split, cfg.compute) for split in (self.train, self.val, self.test))
        seed_everything(self.train_cfg.seed)
        self.model = build_model(self.model_name, self.vcfg, len(self.words), feature_dim)
        self.start_digest = ""
        self.initialise()
        self.model.to(self.device)
        self.net = self.dist.wrap(self.model)  # training computations run through it: net(fn, *args)
        self.precision = distributed.Precision(cfg.compute, self.device)
        self.seq_per_img = int(np.max(self.train.labels.end - self.train.labels.start))
        self.steps_per_epoch = -(-len(self.train.image_ids) // self.train_cfg.batch_size)
        self.optimizer = make_optimizer(self.model, self.train_cfg)
        self.scheduler = make_scheduler(self.optimizer, self.train_cfg, self.steps_per_epoch)
        self.per_epoch_schedule = isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
        self.checkpoint = root / paths.CHECKPOINTS / name / f"{fingerprint(cfg, name, self.start_digest)}.pt"
        self.history: list[dict] = []
        self.best = {"val_CIDEr": -1.0, "epoch": -1, "state": None}

    def initialise(self) -> None:
        """Starting weights beyond the seeded initialisation (none for cross-entropy from scratch); sets
        `start_digest` to a digest of them, so a checkpoint never resumes from other starting weights."""

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The training images' order in this epoch, from (seed, epoch) alone so that resuming keeps it."""
        order_gen = torch.Generator().manual_seed(self.train_cfg.seed * 100003 + epoch)
        return torch.randperm(len(self.train.image_ids), generator=order_gen).numpy()

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

    def batches(self, epoch: int) -> Iterator[Batch]:
        """This process's share of each step's batch (all of it in one process) on the device, with a progress bar."""
        from tqdm import tqdm

        order, size, dist = self.epoch_order(epoch), self.train_cfg.batch_size, self.dist
        shares = [order[start:start + size][dist.rank::dist.world] for start in range(0, len(order), size)]
        for rows, feats, mask in tqdm(self.train_features.batches(shares), total=len(shares), leave=False,
                                      desc=f"{self.name} epoch {epoch + 1}/{self.train_cfg.epochs}",
                                      disable=not self.progress):
            yield rows, feats.to(self.device, non_blocking=True), mask.to(self.device, non_blocking=True)

    def seed_rank_stream(self, epoch: int) -> None:
        """Ranks other than 0 draw dropout and scheduled-sampling noise from their own stream in each epoch
        (rank 0 continues the single-process stream)."""
        if not self.dist.main:
            torch.manual_seed(self.dist.stream_seed(self.train_cfg.seed * 100003 + epoch))

    # ---- checkpointing

    def save_checkpoint(self, epoch: int) -> None:
        rng = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        state = {
            "epoch": epoch,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.precision.scaler.state_dict(),
            "history": self.history,
            "best": self.best,
            "rng": rng,
        }
        save_torch(on_cpu(state), self.checkpoint)

    def resume(self) -> int:
        """Load the checkpoint if one exists for these exact params; returns the next epoch to run."""
        if not self.checkpoint.is_file():
            return 0
        try:
            state = torch.load(self.checkpoint, map_location="cpu", weights_only=False)
        except (RuntimeError, EOFError, KeyError):  # unreadable: start afresh rather than fail the stage
            return 0
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])  # moves its state to the parameters' device
        self.scheduler.load_state_dict(state["scheduler"])
        if state.get("scaler"):
            self.precision.scaler.load_state_dict(state["scaler"])
        self.history, self.best = state["history"], state["best"]
        torch.set_rng_state(state["rng"]["torch"])
        np.random.set_state(state["rng"]["numpy"])
        random.setstate(state["rng"]["python"])
        if "cuda" in state["rng"] and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)
        return state["epoch"] + 1

    # ---- training

    def train_epoch(self, epoch: int) -> dict[str, float]:
        """One epoch of teacher-forced cross-entropy; returns the epoch's training metrics."""
        cfg = self.train_cfg
        self.model.train()
        ss_prob = scheduled_sampling_prob(cfg, epoch)
        losses = []
        for rows, feats, mask in self.batches(epoch):
            targets = caption_batch(self.train.labels, rows, self.seq_per_img).to(self.device)
            with self.precision.autocast():
                logprobs = self.net(lambda model: model(feats, mask, targets, self.seq_per_img, ss_prob))
                loss = sequence_loss(logprobs, targets, cfg.label_smoothing, self.dist.share)
            self.optimise(loss)
            losses.append((loss.item(), 1.0))  # summed over ranks: (world x the batch's loss, world)
        return self.dist.epoch_means({"train_loss": losses})

    def validate(self) -> float:
        """Validation CIDEr-D of greedy captions: decoded by rank 0, broadcast to the others."""
        ev = self.cfg.evaluation
        if not self.dist.main:
            return self.dist.broadcast(0.0)
        predictions = decode_split(self.model, self.val_features, self.words, 1, ev.max_length, ev.batch_size)
        return self.dist.broadcast(cider_only(predictions, self.val_refs))

    def run(self, tracker=None) -> dict | None:
        """Train, then decode the test split with the best state; the final metrics, or None on ranks other
        than 0. The model is left on the CPU with its best weights."""
        cfg, ev = self.train_cfg, self.cfg.evaluation
        first = self.resume()
        if tracker is not None:
            if first:
                tracker.set_tag("resumed_from_epoch", str(first))
            for row in self.history:  # a resumed run still carries the whole curve
                tracker.log_metrics({k: v for k, v in row.items() if k != "epoch"}, step=row["epoch"])
        for epoch in range(first, cfg.epochs):
            lr = self.optimizer.param_groups[0]["lr"]
            self.seed_rank_stream(epoch)
            train_metrics = self.train_epoch(epoch)
            val_cider = self.validate()
            row = {"epoch": epoch + 1, **train_metrics, "lr": lr, "val_CIDEr": val_cider}
            self.history.append(row)
            if self.per_epoch_schedule:
                self.scheduler.step(val_cider)
            if not self.dist.main:
                continue
            if val_cider > self.best["val_CIDEr"]:
                self.best = {"val_CIDEr": val_cider, "epoch": epoch + 1,
                             "state": {k: v.to("cpu", copy=True) for k, v in self.model.state_dict().items()}}
            self.save_checkpoint(epoch)
            if tracker is not None:
                tracker.log_metrics({k: v for k, v in row.items() if k != "epoch"}, step=epoch + 1)
            if self.progress:
                shown = " ".join(f"{k} {v:.3f}" for k, v in train_metrics.items())
                print(f"{self.name} epoch {epoch + 1}: {shown} val CIDEr-D {val_cider:.3f}", flush=True)
        if not self.dist.main:
            return None
        self.model.load_state_dict(self.best["state"])
        predictions = decode_split(self.model, self.test_features, self.words, ev.beam_size, ev.max_length,
                                   ev.batch_size)
        self.model.cpu()
        return {
            "predictions": predictions,
            "test": evaluate_captions(predictions, self.test_refs),
            "best_epoch": self.best["epoch"],
            "best_val_CIDEr": self.best["val_CIDEr"],
            "history": self.history,
        }
