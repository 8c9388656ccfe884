"""A no-op `dvc repro` in a built workspace (every stage up to date), timed: the README's 3-second limit.

Run from an activated .venv after a whole `dvc repro` (a retrain's clone, say):
`python benchmarks/bench_noop_workspace.py --repo DIR [--runs 5]`. Each run is `dvc repro` on the whole pipeline,
which checks every stage's dependencies and outputs and runs none; the runs must say so ("Data and pipelines are up
to date"), or the measurement stops. Writes `benchmarks/results/noop_workspace.{json,md}` with the machine and its
calibration factor (benchmarks/calibration.py): seconds here and reference seconds. bench_noop.py measures the same
check on fresh clones without the training outputs, to compare two commits.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import calibration as calib  # noqa: E402
from crossmodal.io import write_json, write_text  # noqa: E402
from crossmodal.machine import describe  # noqa: E402

LIMIT = 3.0  # reference seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args()
    dvc = str(Path(sys.executable).parent / "dvc")
    seconds = []
    for _ in range(args.runs):
        start = time.perf_counter()
        proc = subprocess.run([dvc, "repro"], cwd=args.repo, capture_output=True, text=True)
        seconds.append(round(time.perf_counter() - start, 2))
        if proc.returncode or "Running stage" in proc.stdout:
            print(f"not a no-op: `dvc repro` in {args.repo} ran a stage or failed:\n{proc.stdout}{proc.stderr}")
            return 1
    stamp = calib.stamp(calib.load())
    factor, median = stamp["factor"], statistics.median(seconds)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=args.repo, capture_output=True, text=True).stdout
    report = {**stamp, "commit": commit.strip(), "runs": seconds, "median_seconds": median,
              "reference_seconds": round(median / factor, 2), "limit": LIMIT, "within_limit": median / factor <= LIMIT}
    write_json(args.out / "noop_workspace.json", report, indent=1)
    write_text(args.out / "noop_workspace.md", "\n".join([
        "# A no-op `dvc repro` in a built workspace", "",
        f"Machine: {describe(report['machine'])}; calibration factor {factor:.3f}; {report['date']}; the retrain's "
        f"clone at {report['commit'][:7]} (benchmarks/bench_noop_workspace.py).", "",
        f"- {args.runs} runs: {', '.join(f'{s:.2f}' for s in seconds)} s; median {median:.2f} s here, "
        f"**{report['reference_seconds']:.2f} reference seconds** (limit {LIMIT:g})", ""]))
    print(f"median {median:.2f} s, {report['reference_seconds']:.2f} reference s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
