"""The set-up script's Java check and bytecode, and the learning-rate / scheduled-sampling schedules."""
import importlib
import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from crossmodal.config.training import ScheduledSamplingConfig, TrainConfig
from crossmodal.tasks.objectives.xe import scheduled_sampling_prob
from crossmodal.training.schedules import base_lr, lr_multiplier, make_scheduler

ROOT = Path(__file__).resolve().parents[1]


def test_setup_stops_at_once_without_java(tmp_path):
    proc = subprocess.run(["/bin/bash", str(ROOT / "scripts/setup.sh")], env={"PATH": str(tmp_path)},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert "Java not found" in proc.stderr and "METEOR" in proc.stderr and "PTB tokenizer" in proc.stderr


def test_the_setup_compiled_what_a_training_process_imports_from_packages_pip_installed():
    """pip installs torch and the packages it pulls in without bytecode, and where PYTHONDONTWRITEBYTECODE is set
    every process would compile them again: sympy, which every training process's first optimiser step imports
    (through torch._dynamo), cost it some 4 s on a 2-core machine. The bytecode must predate the set-up's stamp,
    so that it was written by the set-up, not by an import of this test session."""
    venv = ROOT / ".venv"
    stamps = sorted(venv.glob(".installed-*"))
    if Path(sys.prefix).resolve() != venv.resolve() or not stamps:
        pytest.skip("not running in the environment scripts/setup.sh made")
    for name in ("sympy", "sympy.core.expr", "mpmath", "networkx", "jinja2", "torch._dynamo.symbolic_convert"):
        source = importlib.import_module(name).__file__
        cached = Path(importlib.util.cache_from_source(source))
        assert cached.exists(), f"{name}: no bytecode at {cached}"
        assert cached.stat().st_mtime <= stamps[-1].stat().st_mtime, f"{name}: compiled after the set-up ended"


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


def _stop_by_loop(curve: list[float], patience: int, min_delta: float) -> int:
    """Epochs a run with this validation curve trains, by a direct reading of the rule: after each epoch, stop when
    none of the last `patience` epochs beat every earlier epoch's best mark by more than min_delta, unless this epoch
    beats every earlier one."""
    mark_value, mark_epoch = -math.inf, 0
    for epoch, value in enumerate(curve, 1):
        if value > mark_value + min_delta:
            mark_value, mark_epoch = value, epoch
        if patience and epoch - mark_epoch >= patience and value <= max(curve[:epoch - 1], default=-math.inf):
            return epoch
    return len(curve)


@pytest.mark.parametrize("patience, min_delta", [(0, 0.0), (1, 0.0), (3, 0.0), (3, 0.01), (4, 0.02)])
def test_early_stopping_ends_a_noisy_plateau_as_a_direct_loop_does(patience, min_delta):
    from crossmodal.stopping import EarlyStopping

    rising = [0.1 * k for k in range(1, 16)]
    plateau = [1.5 + 0.001 * k if k % 3 == 1 else 1.49 for k in range(25)]  # a new best by a hair every 3 epochs
    curve = rising + plateau
    rule, stopped = EarlyStopping(patience, min_delta), len(curve)
    for epoch, value in enumerate(curve, 1):
        rule.update(value, epoch)
        if rule.spent(epoch):
            stopped = epoch
            break
    assert stopped == _stop_by_loop(curve, patience, min_delta)
    if patience in (0, 3) and min_delta == 0:
        assert stopped == len(curve)
    elif min_delta > 0:
        assert stopped < len(curve)  # the margin ends the plateau that hairline bests would extend


def test_early_stopping_state_round_trips_so_a_resumed_run_stops_at_the_same_epoch():
    from crossmodal.stopping import EarlyStopping

    rule = EarlyStopping(2, 0.01)
    for epoch, value in enumerate([0.5, 0.8, 0.805], 1):
        rule.update(value, epoch)
    resumed = EarlyStopping(2, 0.01)
    resumed.load(rule.state())
    assert (resumed.value, resumed.epoch, resumed.top_epoch) == (0.8, 2, 3) and not resumed.spent(3)
    resumed.update(0.79, 4)
    assert resumed.spent(4)


def test_early_stopping_never_ends_a_run_on_a_new_best():
    from crossmodal.stopping import EarlyStopping

    rule, stopped = EarlyStopping(3, 0.01), None
    curve = [0.5, 0.8, 0.802, 0.804, 0.806, 0.808, 0.807]  # hairline gains after epoch 2, then a dip
    for epoch, value in enumerate(curve, 1):
        rule.update(value, epoch)
        if rule.spent(epoch):
            stopped = epoch
            break
    assert stopped == 7 == _stop_by_loop(curve, 3, 0.01)  # epochs 5 and 6 were spent by the margin, but new bests
