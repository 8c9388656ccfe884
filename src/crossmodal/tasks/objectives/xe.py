"""The cross-entropy objective of the captioning task (`objective: xe`; tasks/captioning.py loads it by name).

Recipe (the Up-Down / X-LAN / AoANet codes): every reference caption of an image is a training sequence
(`seq_per_img` = references per image, inputs encoded once per image). With `train.caption_rows: repeat` (the
official codes) every image gives as many rows as the image with the most references, its own repeated in turn;
with `once` each reference is one row, so an item with fewer references gives fewer rows (MSVD's clips have some
40 captions each, unevenly; the MSVD-like world's 15-30): a clip with half the most references has none computed
twice, and a reference weighs the same in the loss whatever its clip's count. Optional label smoothing and
scheduled sampling (Bengio et al. 2015: an input word replaced, with a probability rising over epochs, by a word
sampled from the model's previous distribution).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ...config.training import TrainConfig
from ...data.captions import EOS, PAD, CaptionLabels
from ...io import InputError


def _references(labels: CaptionLabels, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first reference row, number of references) of each image in `rows`; an image without one is an error."""
    start, counts = labels.start[rows], labels.end[rows] - labels.start[rows]
    if np.any(counts == 0):
        raise InputError(f"image {labels.image_ids[rows][counts == 0][0]} has no reference captions")
    return start, counts


def caption_batch(labels: CaptionLabels, rows: np.ndarray, seq_per_img: int) -> torch.Tensor:
    """[len(rows) * seq_per_img, T] targets; images with fewer references repeat theirs (as the official code)."""
    start, counts = _references(labels, rows)
    picks = start[:, None] + np.arange(seq_per_img)[None, :] % counts[:, None]
    return torch.from_numpy(labels.labels[picks.reshape(-1)]).long()


def caption_rows_once(labels: CaptionLabels, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(targets [sum of counts, T], counts [len(rows)]): every reference of each image once, image by image."""
    start, counts = _references(labels, rows)
    picks = np.repeat(start - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())  # start_i + 0..c_i-1
    return torch.from_numpy(labels.labels[picks]).long(), torch.from_numpy(counts.astype(np.int64))


def with_eos(targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """targets [N, T] (0-padded words) -> (each row followed by <eos> [N, T+1], mask [N, T+1] True for the words
    and the one <eos>): what a teacher-forced pass predicts at each position."""
    n, steps = targets.shape
    lengths = (targets != PAD).sum(1)
    full = torch.cat([targets, targets.new_zeros(n, 1)], 1)
    full[torch.arange(n, device=targets.device), lengths] = EOS
    return full, torch.arange(steps + 1, device=targets.device).unsqueeze(0) <= lengths.unsqueeze(1)


def sequence_loss(logprobs: torch.Tensor, targets: torch.Tensor, smoothing: float,
                  share: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """Masked token-level cross-entropy of `targets` + <eos>; the mask covers words and the one <eos>.

    The summed loss is divided by the number of tokens, or by `share(number of tokens)` (training/distributed.py's
    Context.share).
    """
    full, mask = with_eos(targets)
    nll = -logprobs.gather(2, full.unsqueeze(2)).squeeze(2)
    if smoothing > 0:
        nll = (1 - smoothing) * nll - smoothing * logprobs.mean(-1)
    return (nll * mask).sum() / (mask.sum() if share is None else share(mask.sum()))


def scheduled_sampling_prob(cfg: TrainConfig, epoch: int) -> float:
    """Probability of feeding the model's own sample instead of the ground-truth word at this epoch."""
    ss = cfg.scheduled_sampling
    if ss.start_epoch < 0 or epoch < ss.start_epoch:
        return 0.0
    return min(ss.increase_prob * ((epoch - ss.start_epoch) // ss.increase_every), ss.max_prob)


class Objective:
    """Teacher-forced cross-entropy over every reference of each image in the batch."""

    def __init__(self, task):
        self.task, self.train = task, task.system.train
        labels = task.train_labels
        self.seq_per_img = int(np.max(labels.end - labels.start))

    def start_epoch(self, epoch: int) -> None:
        self.ss_prob = scheduled_sampling_prob(self.train, epoch)

    def loss(self, net, model, rows, inputs, share):
        if self.train.caption_rows == "once":
            targets, per_image = caption_rows_once(self.task.train_labels, rows)
            targets = targets.to(self.task.device)
        else:
            targets = caption_batch(self.task.train_labels, rows, self.seq_per_img).to(self.task.device)
            per_image = self.seq_per_img
        logprobs = net(lambda m: m(inputs, targets, per_image, self.ss_prob))
        loss = sequence_loss(logprobs, targets, self.train.label_smoothing, share)
        return loss, {"train_loss": (loss.item(), 1.0)}  # summed over ranks: (world x the batch's loss, world)
