"""The README's second command (set-up and tests, the line CI runs) from a fresh clone, timed in reference minutes.

Run from an activated .venv: `python benchmarks/bench_test_command.py [--repo DIR]`. It clones the repository's
committed HEAD into a temporary folder, runs `.ci/run` there (which reads the command from the README, as CI does)
and times it whole: the set-up (a fresh `.venv`, from the package caches of this machine) and the test suite.
Before it, `--setup` times the set-up alone (`bash scripts/setup.sh`) in another fresh clone, which is also the
README's first command's set-up (benchmarks/retrain_time.py adds it to the stages' time).
Writes `benchmarks/results/test_command.{json,md}`: the machine, the seconds, pytest's closing line, and the minutes
in reference minutes by the machine's calibration (benchmarks/calibration.py). The limit is 10 reference minutes.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import calibration as calib  # noqa: E402
from crossmodal.io import write_json, write_text  # noqa: E402
from crossmodal.machine import describe  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
LIMIT = 10.0  # reference minutes
CLOSING = re.compile(r"^=*\s*(\d+ (passed|failed).*) in [\d.]+s")


def _timed_in_clone(repo: Path, command: list[str]) -> tuple[str, subprocess.CompletedProcess, float]:
    """(commit, process, seconds) of `command` run in a fresh clone of `repo`'s HEAD."""
    with tempfile.TemporaryDirectory(prefix="test-command-") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "--quiet", str(repo), str(clone)], check=True)
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, check=True, capture_output=True,
                                text=True).stdout.strip()
        start = time.perf_counter()
        proc = subprocess.run(command, cwd=clone, capture_output=True, text=True)
        return commit, proc, time.perf_counter() - start


def measure(repo: Path, setup: bool = False) -> dict:
    setup_seconds = None
    if setup:
        _, proc, setup_seconds = _timed_in_clone(repo, ["bash", "scripts/setup.sh"])
        if proc.returncode:
            raise SystemExit(f"error: the set-up failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    commit, proc, seconds = _timed_in_clone(repo, ["bash", ".ci/run"])
    closing = [m.group(1) for line in proc.stdout.splitlines() if (m := CLOSING.match(line.strip()))]
    return {"commit": commit, "exit": proc.returncode, "seconds": round(seconds, 1),
            **({"setup_seconds": round(setup_seconds, 1)} if setup else {}),
            "pytest": closing[-1] if closing else None, "tail": proc.stdout[-2000:] if proc.returncode else ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--setup", action="store_true", help="also time the set-up alone, in a clone of its own")
    args = parser.parse_args()
    stamp = calib.stamp(calib.load())
    result = measure(args.repo.resolve(), args.setup)
    minutes = result["seconds"] / 60
    reference = minutes / stamp["factor"]
    report = {**result, **stamp, "minutes": round(minutes, 2), "reference_minutes": round(reference, 2),
              "limit_reference_minutes": LIMIT,
              "within_limit": result["exit"] == 0 and reference <= LIMIT}
    write_json(args.out / "test_command.json", report, indent=1)
    write_text(args.out / "test_command.md", "\n".join([
        "# The README's second command from a fresh clone", "",
        f"Machine: {describe(report['machine'])}; calibration factor {report['factor']:.3f}; {report['date']}; "
        f"commit {report['commit'][:7]} (benchmarks/bench_test_command.py).", "",
        f"- `.ci/run` (set-up and tests): {report['minutes']:.1f} min here, **{report['reference_minutes']:.1f} "
        f"reference minutes** (limit {LIMIT:g}); exit {report['exit']}",
        f"- pytest: {report['pytest']}",
        *([f"- the set-up alone (`bash scripts/setup.sh`, a fresh clone): {report['setup_seconds']:.0f} s here, "
           f"{report['setup_seconds'] / 60 / stamp['factor']:.1f} reference minutes"] if args.setup else []), ""]))
    print(f"{report['minutes']:.1f} min, {report['reference_minutes']:.1f} reference min; {report['pytest']}")
    return 0 if result["exit"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
