"""What a stage process spends before its work: the libraries' imports, and a training stage's command run as a
fresh process against the same command forked from a process that has imported them already. Writes
benchmarks/results/stage_startup.{json,md}.

Run: PYTHONPATH=src python benchmarks/bench_stage_startup.py --repo <built repository> [--systems att2in ...]
     [--runs 2] [--work /tmp/bench_stage_startup] [--out-dir benchmarks/results]

`--repo` is a repository whose stages are built, such as the tests' tiny pipeline (tests/tiny_pipeline.py; a pytest
session leaves it in /tmp/pytest-of-<user>/pytest-current/tiny-pipeline/repo). It is copied to `--work` first: the
commands rewrite their outputs there, with the same bits, running this checkout's code on the copy's data. Each system's `python -m crossmodal train --system <name>` runs
`--runs` times each way, alternating, with one shared METEOR scorer (as under
`python -m crossmodal.pipeline.repro`), and every run's outputs must be byte-identical (the forked run computes the same
thing). CPU time is the process's user and system time (its children included). This measurement led to the stage
server of `python -m crossmodal.pipeline.repro` (crossmodal/pipeline/stage_server.py), which forks the stages' commands
in that way.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_budget import machine

from crossmodal.environment import describe
from crossmodal.io import write_json, write_text

IMPORTS = {  # what a training stage imports that costs most; the optimiser's constructor imports torch._dynamo
    "torch": "import torch",
    "torch + an optimiser": "import torch; torch.optim.Adam([torch.zeros(1, requires_grad=True)])",
    "mlflow": "import mlflow",
    "torch + an optimiser + mlflow": "import torch, mlflow; torch.optim.Adam([torch.zeros(1, requires_grad=True)])",
}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), _children_cpu()
    fn()
    return time.perf_counter() - wall, _children_cpu() - cpu


def import_costs(runs: int) -> dict:
    out = {}
    for name, code in IMPORTS.items():
        times = [_timed(lambda: subprocess.run([sys.executable, "-c", code], check=True)) for _ in range(runs)]
        out[name] = {"wall_s": statistics.median(t[0] for t in times), "cpu_s": statistics.median(t[1] for t in times)}
        print(f"{name}: {out[name]['cpu_s']:.2f} CPU-s", flush=True)
    return out


def _outputs(repo: Path, system: str) -> str:
    digest = hashlib.sha256()
    for folder in (repo / "data/models" / system, repo / "data/predictions" / system):
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(repo)).encode() + path.read_bytes())
    return digest.hexdigest()


def _fresh(argv: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "crossmodal", *argv], check=True, capture_output=True)


def _forked(argv: list[str]) -> None:
    pid = os.fork()
    if pid == 0:  # the child: this process's imports, the command's own code
        code = 1
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1), os.dup2(devnull, 2)
            from crossmodal.cli import main

            code = main(argv)
            sys.stdout.flush(), sys.stderr.flush()
        finally:
            os._exit(code)
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0:
        raise SystemExit(f"the forked `{' '.join(argv)}` failed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--systems", nargs="+", default=["att2in", "ban_8_glove_counter"])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_stage_startup"))
    parser.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    out_dir = args.out_dir.resolve()
    if args.work.exists():
        shutil.rmtree(args.work)
    shutil.copytree(args.repo, args.work, symlinks=True)
    os.chdir(args.work)
    src = Path(sys.modules["crossmodal"].__file__).resolve().parents[1]  # both ways run this checkout's code
    os.environ.update({"PYTHONPATH": str(src), "CROSSMODAL_PROGRESS": "0"})

    imports = import_costs(args.runs)
    from crossmodal.metrics.meteor_server import SharedMeteor

    rows = {}
    with SharedMeteor() as meteor:
        os.environ.update(meteor.env)
        preload_wall, preload_cpu = time.perf_counter(), time.process_time()
        import mlflow  # noqa: F401
        import torch

        torch.optim.Adam([torch.zeros(1, requires_grad=True)])
        preload = {"wall_s": time.perf_counter() - preload_wall, "cpu_s": time.process_time() - preload_cpu}
        for system in args.systems:
            argv = ["train", "--system", system]
            times, digests = {"fresh": [], "forked": []}, set()
            for _ in range(args.runs):
                for mode, fn in (("fresh", _fresh), ("forked", _forked)):
                    times[mode].append(_timed(lambda: fn(argv)))
                    digests.add(_outputs(args.work, system))
            if len(digests) != 1:
                raise SystemExit(f"{system}: the runs' outputs differ ({len(digests)} versions)")
            rows[system] = {mode: {"wall_s": statistics.median(t[0] for t in ts),
                                   "cpu_s": statistics.median(t[1] for t in ts)} for mode, ts in times.items()}
            print(f"{system}: {rows[system]}", flush=True)

    result = {"machine": machine(), "environment": describe(), "runs": args.runs, "imports": imports,
              "preload": preload, "systems": rows, "outputs_identical": True}
    write_json(out_dir / "stage_startup.json", result)
    lines = ["# What a stage process spends before its work", "",
             f"Machine: {machine()}; {time.strftime('%Y-%m-%d')}. Medians of {args.runs} runs "
             "(benchmarks/bench_stage_startup.py).", "",
             "## Imports in a fresh process", "", "| imports | wall (s) | CPU (s) |", "|---|---:|---:|"]
    lines += [f"| {name} | {v['wall_s']:.2f} | {v['cpu_s']:.2f} |" for name, v in imports.items()]
    lines += ["", "## A training stage's command: fresh, or forked after those imports", "",
              f"The imports before the forks took {preload['cpu_s']:.1f} CPU-s, once. Every run's outputs were "
              "byte-identical.", "",
              "| system | fresh wall (s) | fresh CPU (s) | forked wall (s) | forked CPU (s) | CPU saved |",
              "|---|---:|---:|---:|---:|---:|"]
    for system, r in rows.items():
        fresh, forked = r["fresh"], r["forked"]
        lines.append(f"| {system} | {fresh['wall_s']:.1f} | {fresh['cpu_s']:.1f} | {forked['wall_s']:.1f} | "
                     f"{forked['cpu_s']:.1f} | {1 - forked['cpu_s'] / fresh['cpu_s']:.0%} |")
    write_text(out_dir / "stage_startup.md", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
