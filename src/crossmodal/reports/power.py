"""How large a difference the seeds can detect: the reason `seeds` of an undecided claim (reports/claims.py).

1. The minimum detectable effect (MDE) of a two-sided test at confidence 1 - α with power 1 - β, for n1 and n2 runs
   a side whose spread is the standard deviation s with df degrees of freedom (the normal approximation's form, with
   t quantiles for the estimated spread):

       MDE = (t_{1-α/2, df} + t_{1-β, df}) · s · sqrt(1/n1 + 1/n2)

2. The runs a side needs for the paper's gap: the smallest n with MDE(n, n) <= |gap| at df = 2n - 2 (the spread of
   the two sides' own n runs each), searched up to `cap`.

tests/reports/test_claims.py checks both against the exact power of the t-test (the noncentral t distribution).
"""
from __future__ import annotations

import math

POWER = 0.80  # the chance that the test decides a true difference of the MDE
N_CAP = 1000  # the most runs a side that `runs_to_decide` looks for


def mde(std: float, n1: int, n2: int, df: int, confidence: float, power: float = POWER) -> float:
    """1. The minimum detectable effect, in the units of `std`."""
    from scipy import stats  # here, not at the top: the stages that only plan skip its import

    quantiles = stats.t.ppf(0.5 + confidence / 2, df) + stats.t.ppf(power, df)
    return float(quantiles * std * math.sqrt(1 / n1 + 1 / n2))


def runs_to_decide(gap: float, std: float, confidence: float, power: float = POWER, cap: int = N_CAP) -> int | None:
    """2. The runs a side that detect `gap` (None: more than `cap`, or no gap at all)."""
    if gap == 0:
        return None
    if std == 0:
        return 2
    low, high = 2, cap  # MDE(n, n) falls as n grows: bisect for the first n that reaches the gap
    if mde(std, high, high, 2 * high - 2, confidence, power) > abs(gap):
        return None
    while low < high:
        mid = (low + high) // 2
        if mde(std, mid, mid, 2 * mid - 2, confidence, power) <= abs(gap):
            high = mid
        else:
            low = mid + 1
    return low
