"""What DVC's checks of a no-op repro cost, at two commits side by side; writes benchmarks/results/noop.{json,md}.

Run: PYTHONPATH=src python benchmarks/bench_noop.py --base <commit> [--head HEAD] [--runs 10] [--whole]
     [--work /tmp/bench_noop] [--out-dir benchmarks/results]

Each commit gets a fresh clone of this repository with its `code` and `params` stages and its synthetic worlds built
(every stage whose command is `python -m crossmodal synthesize*`: a few minutes). Then `dvc status` runs `--runs`
times in each clone, alternating between the two, so that both see the same load. `dvc status` makes the checks of
a no-op `dvc repro` (every stage's dependencies and outputs, the worlds' folders among them) without the training
outputs, which only a whole repro builds; that whole no-op is measured by bench_pipeline.py after its full repro.

`--whole` times the whole no-op `dvc repro` without that repro: every dependency and output still missing after the
worlds (models, features, predictions, ...) is made a placeholder (a file, or a folder of one file where the lock
records a folder), and `dvc commit -f` records them all, so that DVC finds every stage up to date. It then checks
exactly what a no-op after a real repro checks (163 stages, the worlds' files), but the placeholders' few bytes
where the real outputs hold megabytes (their hashes are cached by DVC's state database either way). Writes
noop_whole.{json,md}.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml
from bench_budget import machine

from crossmodal.io import write_json, write_text

BIN = Path(sys.executable).parent  # this environment's dvc


def _env(clone: Path) -> dict:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(clone / "src"),
            "CROSSMODAL_PROGRESS": "0"}


def prepare(source: Path, commit: str, clone: Path) -> str:
    """A fresh clone of `commit` with `code`, `params` and the world stages built; returns the commit's short id."""
    if clone.exists():
        shutil.rmtree(clone)
    subprocess.run(["git", "clone", "-q", str(source), str(clone)], check=True)
    subprocess.run(["git", "checkout", "-q", commit], cwd=clone, check=True)
    stages = yaml.safe_load((clone / "dvc.yaml").read_text())["stages"]
    worlds = [n for n, s in stages.items() if s["cmd"].startswith("python -m crossmodal synthesize")]
    subprocess.run(["dvc", "repro", "--single-item", "code", "params", *worlds], cwd=clone, env=_env(clone),
                   check=True, capture_output=True, text=True)
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, check=True, capture_output=True,
                          text=True).stdout.strip()


def fill_placeholders(clone: Path) -> int:
    """Every dependency and output of the locks that is missing, as a placeholder, committed (`--whole`)."""
    made = 0
    for lock in [clone / "dvc.lock", *clone.glob("pipelines/*/dvc.lock")]:  # their paths: from the root (wdir)
        for name, stage in yaml.safe_load(lock.read_text())["stages"].items():
            for item in [*stage.get("deps", []), *stage.get("outs", [])]:
                path = clone / item["path"]
                if path.exists():
                    continue
                made += 1
                if str(item.get("md5", "")).endswith(".dir"):  # a folder: of one file
                    path = path / "placeholder"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(f"placeholder for stage {name}\n")
    subprocess.run(["dvc", "commit", "-f", "-q"], cwd=clone, env=_env(clone), check=True)
    return made


def command_seconds(clone: Path, command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=clone, env=_env(clone), capture_output=True)  # `dvc status`'s exit 1: changes
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--head", default="HEAD")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--whole", action="store_true", help="time a whole no-op `dvc repro` (placeholders)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_noop"))
    parser.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    source = Path.cwd()
    clones = {name: args.work / name for name in ("base", "head")}
    ids = {name: prepare(source, getattr(args, name), clone) for name, clone in clones.items()}
    placeholders = {name: fill_placeholders(clone) for name, clone in clones.items()} if args.whole else {}
    command = ["dvc", "repro"] if args.whole else ["dvc", "status", "-q"]
    for clone in clones.values():
        command_seconds(clone, command)  # DVC's state database learns the worlds' files once
    times: dict[str, list[float]] = {name: [] for name in clones}
    for _ in range(args.runs):
        for name, clone in clones.items():
            times[name].append(command_seconds(clone, command))
    stages = {name: sum(len(yaml.safe_load(f.read_text())["stages"]) for f in [clone / "dvc.yaml",
                                                                              *clone.glob("pipelines/*/dvc.yaml")])
              for name, clone in clones.items()}

    result = {"machine": machine(), "date": time.strftime("%Y-%m-%d"),
              "runs": args.runs, "command": " ".join(command),
              **{name: {"commit": ids[name], "stages": stages[name], "seconds": times[name],
                        **({"placeholders": placeholders[name]} if args.whole else {})} for name in clones}}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = "noop_whole" if args.whole else "noop"
    write_json(args.out_dir / f"{stem}.json", result)
    rows = [f"| {ids[n]} ({n}) | {stages[n]} | {statistics.median(t):.2f} | {min(t):.2f} | {max(t):.2f} |"
            for n, t in times.items()]
    built = ("every other dependency and output a committed placeholder" if args.whole else "nothing else")
    write_text(args.out_dir / f"{stem}.md", "\n".join([
        f"# {'A whole no-op `dvc repro`' if args.whole else 'The checks of a no-op repro: `dvc status`'} at two "
        "commits", "",
        f"Machine: {result['machine']}; {result['date']}. Fresh clones with `code`, `params` and the synthetic "
        f"worlds built, {built}; `{result['command']}`, {args.runs} runs each, alternating "
        "(benchmarks/bench_noop.py).", "",
        "| commit | stages | median (s) | min (s) | max (s) |", "|---|---:|---:|---:|---:|", *rows, ""]))
    print((args.out_dir / f"{stem}.md").read_text())


if __name__ == "__main__":
    main()
