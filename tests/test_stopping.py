"""The early-stopping rule (stopping.py) of the trainer and the feature networks, against a direct reading of it."""
import math

import pytest

from crossmodal.stopping import EarlyStopping


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
    rule = EarlyStopping(2, 0.01)
    for epoch, value in enumerate([0.5, 0.8, 0.805], 1):
        rule.update(value, epoch)
    resumed = EarlyStopping(2, 0.01)
    resumed.load(rule.state())
    assert (resumed.value, resumed.epoch, resumed.top_epoch) == (0.8, 2, 3) and not resumed.spent(3)
    resumed.update(0.79, 4)
    assert resumed.spent(4)


def test_early_stopping_never_ends_a_run_on_a_new_best():
    rule, stopped = EarlyStopping(3, 0.01), None
    curve = [0.5, 0.8, 0.802, 0.804, 0.806, 0.808, 0.807]  # hairline gains after epoch 2, then a dip
    for epoch, value in enumerate(curve, 1):
        rule.update(value, epoch)
        if rule.spent(epoch):
            stopped = epoch
            break
    assert stopped == 7 == _stop_by_loop(curve, 3, 0.01)  # epochs 5 and 6 were spent by the margin, but new bests
