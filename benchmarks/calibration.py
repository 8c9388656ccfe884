"""Minutes on this machine as reference minutes, from the calibration that bench_calibrate.py recorded.

A factor holds for the CPU type it was measured on and no other: converting a Zen 3's minutes with a Zen 5's
factor would state a time wrong by twice or more, silently. So every conversion names the CPU the minutes were
measured on (by default the one at hand) and refuses one whose vendor, model name, CPU family or model differ
from the calibration's (machine.same_type); the model name alone does not tell two EPYC generations apart.

No torch import: the retrain report (retrain_time.py) and the tests use it in a bare process.
"""
from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from crossmodal.machine import cpu_identity, describe, same_type  # noqa: E402

CALIBRATION = ROOT / "benchmarks" / "results" / "calibration.json"


class CalibrationError(Exception):
    """No calibration for the CPU the minutes were measured on."""


def load(path: Path = CALIBRATION) -> dict:
    """The calibration bench_calibrate.py wrote (its machine and factor are all a conversion needs)."""
    try:
        calibration = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise CalibrationError(f"no calibration at {path}: run `python benchmarks/bench_calibrate.py` on this "
                               "machine first") from None
    if not calibration.get("factor", 0) > 0 or "machine" not in calibration:
        raise CalibrationError(f"{path} has no positive factor and machine: not a calibration")
    return calibration


def factor(calibration: dict, cpu: dict | None = None) -> float:
    """The calibration's factor, for minutes measured on `cpu` (default: this machine's CPU); a CalibrationError
    when the calibration was measured on another CPU type."""
    cpu = cpu_identity() if cpu is None else cpu
    if not same_type(calibration["machine"], cpu):
        raise CalibrationError(f"the calibration was measured on {describe(calibration['machine'])}, the minutes "
                               f"on {describe(cpu)}: run `python benchmarks/bench_calibrate.py` on the latter")
    return calibration["factor"]


def reference_minutes(minutes: float, calibration: dict, cpu: dict | None = None) -> float:
    """Minutes measured on `cpu` (default: this machine's) as minutes on the reference machine."""
    return minutes / factor(calibration, cpu)


def stamp(calibration: dict) -> dict:
    """What every timed result records beside its numbers: this machine's CPU, the calibration's factor for it (a
    CalibrationError when the calibration was measured on another CPU) and the time of the measurement."""
    return {"machine": cpu_identity(), "factor": factor(calibration),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}
