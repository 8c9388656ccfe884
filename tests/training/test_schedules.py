"""The learning-rate schedules (training/schedules.py: step, plateau, Noam) and the scheduled-sampling ramp."""
import math

import pytest
import torch

from crossmodal.config.training import ScheduledSamplingConfig, TrainConfig
from crossmodal.tasks.objectives.xe import scheduled_sampling_prob
from crossmodal.training.schedules import base_lr, lr_multiplier, make_scheduler


def test_step_schedule_decays_every_step_size_epochs():
    cfg = TrainConfig(schedule="step", lr=5e-4, step_size=3, gamma=0.8)
    f = lr_multiplier(cfg, steps_per_epoch=10)
    assert base_lr(cfg) == 5e-4
    assert [f(s) for s in (0, 29, 30, 59, 60)] == pytest.approx([1, 1, 0.8, 0.8, 0.64])


def test_plateau_schedule_halves_lr_after_patience_epochs_without_a_better_val_score():
    cfg = TrainConfig(schedule="plateau", lr=2e-5, gamma=0.5, plateau_patience=2)
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=base_lr(cfg))
    scheduler = make_scheduler(optimizer, cfg, steps_per_epoch=10)
    lrs = []
    for val_cider in (1.0, 1.1, 1.1, 1.05, 1.08, 1.2, 1.0, 1.0, 1.0):
        scheduler.step(val_cider)
        lrs.append(optimizer.param_groups[0]["lr"])
    assert lrs == pytest.approx([2e-5] * 4 + [1e-5] * 3 + [1e-5, 5e-6])


def test_noam_schedule_warms_up_linearly_then_decays_as_inverse_sqrt():
    cfg = TrainConfig(schedule="noam", warmup_steps=100, noam_factor=1.0, noam_model_size=1024)
    f = lr_multiplier(cfg, steps_per_epoch=10)
    assert base_lr(cfg) == 1.0
    peak = f(99)
    assert peak == pytest.approx(1024 ** -0.5 * 100 ** -0.5)
    assert f(49) == pytest.approx(peak * 50 / 100)
    assert f(399) == pytest.approx(peak * math.sqrt(100 / 400))
    assert max(f(s) for s in range(1000)) == pytest.approx(peak)


def test_scheduled_sampling_ramps_to_its_cap():
    cfg = TrainConfig(scheduled_sampling=ScheduledSamplingConfig(start_epoch=6, increase_every=3,
                                                                increase_prob=0.05, max_prob=0.12))
    assert [scheduled_sampling_prob(cfg, e) for e in (0, 5, 6, 8, 9, 12, 30)] == pytest.approx(
        [0, 0, 0, 0, 0.05, 0.10, 0.12])
    assert scheduled_sampling_prob(TrainConfig(), 50) == 0.0
