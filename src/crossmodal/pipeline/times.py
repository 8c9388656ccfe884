"""The durable record of how long `python -m crossmodal.pipeline.repro` took: one JSON line per stage and per run.

The scheduler's printed seconds are gone once the terminal is; a retrain that is stopped and started again spans
several runs, and its time is their sum. So each run appends to one log (`.dvc/tmp/repro/times.jsonl` under the
repository's root, or the file CROSSMODAL_REPRO_TIMES names):
- a `stage` line per stage that ended: the run's id, the stage's address, its status (`ran`; `unchanged`, when DVC
  found it up to date; `failed`; `interrupted`, by Ctrl-C or SIGTERM), its seconds, its wall-clock start and end,
  the run's jobs and the CPU's identity (machine.py);
- a `run` line when the scheduler ends, however it ends: start, end, wall seconds, the stages it planned, its
  exit status, targets, jobs, CPU. Two stages run at once, so the stages' seconds add up to more than the wall's.
`benchmarks/retrain_time.py` sums the log into minutes per paper, in reference minutes.

Each line is written with one `write` on a file opened for appending: POSIX appends it whole at the end, so a
log shared by two schedulers (or killed mid-run) holds whole lines; a log has no temporary-and-rename step, since
rewriting the whole file each time could lose another writer's line. The log is never a stage's dep or out, and
writing it changes nothing any stage computes.
"""
from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

from ..machine import cpu_identity

ENV = "CROSSMODAL_REPRO_TIMES"
DEFAULT = Path(".dvc") / "tmp" / "repro" / "times.jsonl"  # under the repository's root
STATUSES = ("ran", "unchanged", "failed", "interrupted")


def wall_clock(epoch: float) -> str:
    """An epoch time as ISO 8601 in UTC, to the millisecond."""
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds")


def log_path(root: Path) -> Path:
    """Where the runs of the repository at `root` log their times: CROSSMODAL_REPRO_TIMES, when set and not empty,
    else DEFAULT under the root."""
    return Path(os.environ.get(ENV) or root / DEFAULT)


class TimesLog:
    """The log of one scheduler run, which starts now, with `jobs` stages at a time; its id is its start time and
    process id (unique on one machine, and sorted by start)."""

    def __init__(self, path: Path, jobs: int, targets: list[str]):
        self.path, self.jobs, self.targets = path, jobs, list(targets)
        self.start, self._began = time.time(), time.perf_counter()
        self.run = f"{wall_clock(self.start)}-{os.getpid()}"
        self.cpu = cpu_identity()
        path.parent.mkdir(parents=True, exist_ok=True)  # a path that cannot be written fails before any stage runs

    def _append(self, record: dict) -> None:
        line = json.dumps({**record, "jobs": self.jobs, "cpu": self.cpu}) + "\n"
        with open(self.path, "a", encoding="utf-8") as log:
            log.write(line)

    def stage(self, address: str, status: str, start: float, end: float, seconds: float) -> None:
        """A stage that ended with `status`; `start` and `end` in epoch seconds, `seconds` from a monotonic
        clock."""
        if status not in STATUSES:
            raise ValueError(f"status {status!r} is none of {STATUSES}")
        self._append({"kind": "stage", "run": self.run, "stage": address, "status": status,
                      "seconds": round(seconds, 3), "start": wall_clock(start), "end": wall_clock(end)})

    def finish(self, stages: int, exit_status: int) -> None:
        """The run's own line, as it ends now: it planned `stages` stages and exits with `exit_status`."""
        self._append({"kind": "run", "run": self.run, "start": wall_clock(self.start), "end": wall_clock(time.time()),
                      "seconds": round(time.perf_counter() - self._began, 3), "stages": stages, "exit": exit_status,
                      "targets": self.targets})
