"""Learning-rate schedules of the papers: per-step multipliers for `LambdaLR`, or a per-epoch plateau decay.

- step: lr * gamma ^ floor(epoch / step_size) (Up-Down, AoANet: x0.8 every 3 epochs).
- noam: factor * model_size^-0.5 * min(s^-0.5, s * warmup^-1.5) with s = step + 1 (Vaswani et al.; X-LAN's
  NoamOpt). The optimizer's base lr is set to 1 for this schedule, so `lr` in params is not used.
- plateau: lr * gamma each time validation CIDEr-D has not improved for more than `plateau_patience` epochs (the SCST
  recipes of AoANet and X-LAN); stepped once per epoch by the trainer, not per step.
- constant: lr.
- warmup_step: BAN's (the official ban-vqa train.py, per epoch e): lr x 0.5 (e + 1) over the first 4 epochs
  (0.5, 1, 1.5, 2 x lr), then 2 x lr, times gamma at epoch `decay_start` and every `step_size` epochs after it
  (VQA: lr 1e-3, decay from epoch 10 by 0.25 every 2). Deviation: the official list of decay epochs ends at 20,
  beyond its 13 epochs; here the decay goes on, which matters only to a run capped past 20 epochs.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..config.training import TrainConfig


def base_lr(cfg: TrainConfig) -> float:
    return 1.0 if cfg.schedule == "noam" else cfg.lr


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig, steps_per_epoch: int):
    """ReduceLROnPlateau (stepped per epoch with val CIDEr-D) for `plateau`, else a per-step LambdaLR."""
    if cfg.schedule == "plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=cfg.gamma,
                                                          patience=cfg.plateau_patience)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_multiplier(cfg, steps_per_epoch))


def lr_multiplier(cfg: TrainConfig, steps_per_epoch: int) -> Callable[[int], float]:
    if cfg.schedule == "step":
        period = max(1, steps_per_epoch * cfg.step_size)
        return lambda step: cfg.gamma ** (step // period)
    if cfg.schedule == "noam":
        scale = cfg.noam_factor * cfg.noam_model_size ** -0.5
        return lambda step: scale * min((step + 1) ** -0.5, (step + 1) * cfg.warmup_steps ** -1.5)
    if cfg.schedule == "warmup_step":
        return lambda step: warmup_step(cfg, step // max(1, steps_per_epoch))
    return lambda step: 1.0


WARMUP_EPOCHS = 4  # warmup_step: 0.5, 1, 1.5, 2 x lr


def warmup_step(cfg: TrainConfig, epoch: int) -> float:
    """BAN's multiplier of `lr` in `epoch` (0-based; module docstring)."""
    if epoch < WARMUP_EPOCHS:
        return 0.5 * (epoch + 1)
    decays = 0 if epoch < cfg.decay_start else 1 + (epoch - cfg.decay_start) // max(1, cfg.step_size)
    return 0.5 * WARMUP_EPOCHS * cfg.gamma ** decays
