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
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .. import paths
from ..config import Config, ScstConfig, to_dict
from ..data.captions import EOS, PAD, CaptionLabels, decode, load_labels, load_vocabulary
from ..data.coco import read_coco_captions
from ..data.regions import RegionFeatures
from ..decoding.search import beam_search, greedy_decode
from ..io import InputError, save_torch
from ..metrics.captions import cider_only, evaluate_captions
from ..models.base import Captioner
from ..models.registry import build_model
from .schedules import base_lr, make_scheduler, scheduled_sampling_prob


@dataclass
class Split:
    """Padded region features of one split, aligned with its caption labels."""

    image_ids: np.ndarray
    feats: torch.Tensor
    mask: torch.Tensor
    labels: CaptionLabels


def load_split(regions: RegionFeatures, labels: CaptionLabels) -> Split:
    feats, mask, _ = regions.load_padded(labels.image_ids.tolist())
    return Split(labels.image_ids, feats, mask, labels)


def fingerprint(cfg: Config, name: str, start: str = "") -> str:
    """Hash of every param a trained system depends on (its recipe, the variant it starts from, upstream) and
    of its starting weights (`start`, a digest; empty when training from scratch)."""
    upstream = {k: to_dict(getattr(cfg, k)) for k in ("world", "backbone", "regions", "captions", "evaluation")}
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
    out = []
    for i in rows:
        refs = labels.labels[labels.start[i]:labels.end[i]]
        if len(refs) == 0:
            raise InputError(f"image {labels.image_ids[i]} has no reference captions")
        out.append(refs[np.arange(seq_per_img) % len(refs)])
    return torch.from_numpy(np.concatenate(out)).long()


def sequence_loss(logprobs: torch.Tensor, targets: torch.Tensor, smoothing: float) -> torch.Tensor:
    """Masked token-level cross-entropy of `targets` + <eos>; the mask covers words and the one <eos>."""
    n, steps = targets.shape
    lengths = (targets != PAD).sum(1)
    full = torch.cat([targets, targets.new_zeros(n, 1)], 1)
    full[torch.arange(n), lengths] = EOS
    mask = torch.arange(steps + 1).unsqueeze(0) <= lengths.unsqueeze(1)
    nll = -logprobs.gather(2, full.unsqueeze(2)).squeeze(2)
    if smoothing > 0:
        nll = (1 - smoothing) * nll - smoothing * logprobs.mean(-1)
    return (nll * mask).sum() / mask.sum()


@torch.no_grad()
def decode_split(model: Captioner, split: Split, words: list[str], beam_size: int, max_length: int,
                 batch_size: int) -> dict[int, str]:
    model.eval()
    out = {}
    for start in range(0, len(split.image_ids), batch_size):
        sl = slice(start, start + batch_size)
        if beam_size > 1:
            seqs, _ = beam_search(model, split.feats[sl], split.mask[sl], beam_size, max_length)
        else:
            seqs, _ = greedy_decode(model, split.feats[sl], split.mask[sl], max_length)
        for image_id, seq in zip(split.image_ids[sl].tolist(), seqs):
            out[int(image_id)] = decode(seq.tolist(), words)
    return out


class Trainer:
    """Trains one system by cross-entropy; `run()` returns the final metrics dict (written by the caller).

    Subclasses change the objective (`train_epoch`) and the starting weights (`initialise`); data,
    validation, best-epoch choice, checkpoint/resume and the final beam-search test are shared.
    """

    def __init__(self, cfg: Config, name: str, root: Path, progress: bool = True):
        self.cfg, self.name, self.root, self.progress = cfg, name, root, progress
        trained = cfg.trained()
        run = trained[name]
        self.model_name = run.init if isinstance(run, ScstConfig) else name
        self.vcfg = trained[self.model_name]  # model and model_args (SCST: those of its init variant)
        self.train_cfg = run.train
        self.words = load_vocabulary(root / paths.CAPTIONS / "vocab.json")
        with RegionFeatures(root / paths.REGIONS) as regions:
            label_file = root / paths.CAPTIONS / "labels.h5"
            self.train = load_split(regions, load_labels(label_file, "train"))
            self.val = load_split(regions, load_labels(label_file, "val"))
            self.test = load_split(regions, load_labels(label_file, "test"))
            feature_dim = regions.feature_dim
        self.val_refs = read_coco_captions(root / paths.annotations("val"))
        self.test_refs = read_coco_captions(root / paths.annotations("test"))
        seed_everything(self.train_cfg.seed)
        self.model = build_model(self.model_name, self.vcfg, len(self.words), feature_dim)
        self.start_digest = ""
        self.initialise()
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
        """One update: backward, clip (by value or norm), optimizer and per-step schedule."""
        cfg = self.train_cfg
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip > 0:
            if cfg.grad_clip_mode == "norm":
                nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
            else:
                nn.utils.clip_grad_value_(self.model.parameters(), cfg.grad_clip)
        self.optimizer.step()
        if not self.per_epoch_schedule:
            self.scheduler.step()

    def batches(self, epoch: int):
        """Rows of the training split per step, with a progress bar."""
        from tqdm import tqdm

        order, size = self.epoch_order(epoch), self.train_cfg.batch_size
        starts = range(0, len(order), size)
        for start in tqdm(starts, desc=f"{self.name} epoch {epoch + 1}/{self.train_cfg.epochs}",
                          disable=not self.progress, leave=False):
            yield order[start:start + size]

    # ---- checkpointing

    def save_checkpoint(self, epoch: int) -> None:
        state = {
            "epoch": epoch,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "history": self.history,
            "best": self.best,
            "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
        }
        save_torch(state, self.checkpoint)

    def resume(self) -> int:
        """Load the checkpoint if one exists for these exact params; returns the next epoch to run."""
        if not self.checkpoint.is_file():
            return 0
        try:
            state = torch.load(self.checkpoint, weights_only=False)
        except (RuntimeError, EOFError, KeyError):  # unreadable: start afresh rather than fail the stage
            return 0
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.history, self.best = state["history"], state["best"]
        torch.set_rng_state(state["rng"]["torch"])
        np.random.set_state(state["rng"]["numpy"])
        random.setstate(state["rng"]["python"])
        return state["epoch"] + 1

    # ---- training

    def train_epoch(self, epoch: int) -> dict[str, float]:
        """One epoch of teacher-forced cross-entropy; returns the epoch's training metrics."""
        cfg = self.train_cfg
        self.model.train()
        ss_prob = scheduled_sampling_prob(cfg, epoch)
        losses = []
        for rows in self.batches(epoch):
            targets = caption_batch(self.train.labels, rows, self.seq_per_img)
            logprobs = self.model(self.train.feats[rows], self.train.mask[rows], targets, self.seq_per_img, ss_prob)
            loss = sequence_loss(logprobs, targets, cfg.label_smoothing)
            self.optimise(loss)
            losses.append(loss.item())
        return {"train_loss": float(np.mean(losses))}

    def run(self, tracker=None) -> dict:
        cfg, ev = self.train_cfg, self.cfg.evaluation
        first = self.resume()
        if tracker is not None:
            if first:
                tracker.set_tag("resumed_from_epoch", str(first))
            for row in self.history:  # a resumed run still carries the whole curve
                tracker.log_metrics({k: v for k, v in row.items() if k != "epoch"}, step=row["epoch"])
        for epoch in range(first, cfg.epochs):
            lr = self.optimizer.param_groups[0]["lr"]
            train_metrics = self.train_epoch(epoch)
            val_pred = decode_split(self.model, self.val, self.words, 1, ev.max_length, ev.batch_size)
            val_cider = cider_only(val_pred, self.val_refs)
            row = {"epoch": epoch + 1, **train_metrics, "lr": lr, "val_CIDEr": val_cider}
            self.history.append(row)
            if self.per_epoch_schedule:
                self.scheduler.step(val_cider)
            if val_cider > self.best["val_CIDEr"]:
                self.best = {"val_CIDEr": val_cider, "epoch": epoch + 1,
                             "state": {k: v.clone() for k, v in self.model.state_dict().items()}}
            self.save_checkpoint(epoch)
            if tracker is not None:
                tracker.log_metrics({k: v for k, v in row.items() if k != "epoch"}, step=epoch + 1)
            if self.progress:
                shown = " ".join(f"{k} {v:.3f}" for k, v in train_metrics.items())
                print(f"{self.name} epoch {epoch + 1}: {shown} val CIDEr-D {val_cider:.3f}", flush=True)
        self.model.load_state_dict(self.best["state"])
        predictions = decode_split(self.model, self.test, self.words, ev.beam_size, ev.max_length, ev.batch_size)
        return {
            "predictions": predictions,
            "test": evaluate_captions(predictions, self.test_refs),
            "best_epoch": self.best["epoch"],
            "best_val_CIDEr": self.best["val_CIDEr"],
            "history": self.history,
        }
