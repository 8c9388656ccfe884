"""A no-op `dvc repro` in a built workspace (every stage up to date), timed: the README's 3-second limit.

Run from an activated .venv after a whole `dvc repro` (a retrain's clone, say):
`python benchmarks/bench_noop_workspace.py --repo DIR [--runs 5]`. Each run is `dvc repro` on the whole pipeline,
which checks every stage's dependencies and outputs and runs none; the runs must say so ("Data and pipelines are up
to date"), or the measurement stops. Writes `benchmarks/results/noop_workspace.{json,md}` with the machine and its
calibration factor (benchmarks/calibration.py): seconds here and reference seconds. `--compare-lock` also times the
same runs with DVC's lock file on the disk (the set-up links it to memory, scripts/dvc_lock_in_memory.sh), putting
the link back afterwards. bench_noop.py measures the same check on fresh clones without the training outputs, to
compare two commits.
"""
from __future__ import annotations

import argparse
import os
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


class NotANoop(Exception):
    pass


def timed(repo: Path, runs: int) -> list[float]:
    """Seconds of `runs` whole `dvc repro` runs in `repo`, each of which must run nothing."""
    dvc = str(Path(sys.executable).parent / "dvc")
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run([dvc, "repro"], cwd=repo, capture_output=True, text=True)
        seconds.append(round(time.perf_counter() - start, 2))
        if proc.returncode or "Running stage" in proc.stdout:
            raise NotANoop(f"not a no-op: `dvc repro` in {repo} ran a stage or failed:\n{proc.stdout}{proc.stderr}")
    return seconds


def timed_on_disk(repo: Path, runs: int) -> list[float]:
    """`timed` with the lock file a plain file in .dvc/tmp, then the set-up's link put back."""
    link = repo / ".dvc" / "tmp" / "rwlock"
    target = os.readlink(link)
    link.unlink()
    link.write_text("{}")
    try:
        return timed(repo, runs)
    finally:
        link.unlink()
        link.symlink_to(target)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--compare-lock", action="store_true", help="also time the runs with the lock file on disk")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args()
    lock = args.repo / ".dvc" / "tmp" / "rwlock"
    in_memory = lock.is_symlink()
    if args.compare_lock and not in_memory:
        print("error: --compare-lock needs the set-up's link (.dvc/tmp/rwlock); run scripts/setup.sh first")
        return 2
    try:
        seconds = timed(args.repo, args.runs)
        on_disk = timed_on_disk(args.repo, args.runs) if args.compare_lock else []
    except NotANoop as error:
        print(error)
        return 1
    stamp = calib.stamp(calib.load())
    factor, median = stamp["factor"], statistics.median(seconds)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=args.repo, capture_output=True, text=True).stdout
    report = {**stamp, "commit": commit.strip(), "runs": seconds, "median_seconds": median,
              "reference_seconds": round(median / factor, 2), "limit": LIMIT, "within_limit": median / factor <= LIMIT,
              "lock_in_memory": in_memory,
              **({"runs_lock_on_disk": on_disk, "median_seconds_lock_on_disk": statistics.median(on_disk)}
                 if on_disk else {})}
    write_json(args.out / "noop_workspace.json", report, indent=1)
    write_text(args.out / "noop_workspace.md", "\n".join([
        "# A no-op `dvc repro` in a built workspace", "",
        f"Machine: {describe(report['machine'])}; calibration factor {factor:.3f}; {report['date']}; the retrain's "
        f"clone at {report['commit'][:7]} (benchmarks/bench_noop_workspace.py).", "",
        f"- {args.runs} runs, DVC's lock file {'in memory' if in_memory else 'on disk'}: "
        f"{', '.join(f'{s:.2f}' for s in seconds)} s; median {median:.2f} s here, "
        f"**{report['reference_seconds']:.2f} reference seconds** (limit {LIMIT:g})",
        *([f"- the same runs with the lock file on disk: {', '.join(f'{s:.2f}' for s in on_disk)} s; median "
           f"{report['median_seconds_lock_on_disk']:.2f} s here, "
           f"{report['median_seconds_lock_on_disk'] / factor:.2f} reference seconds"] if on_disk else []), ""]))
    print(f"median {median:.2f} s, {report['reference_seconds']:.2f} reference s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
