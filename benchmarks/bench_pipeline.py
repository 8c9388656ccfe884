"""Benchmark of the default pipeline: one full `dvc repro` as a user runs it, and where its time goes.

Run on demand (from an activated .venv): `python benchmarks/bench_pipeline.py` works in a temporary copy of the
repository (the workspace and its MLflow database are untouched); `--repo DIR` works in a fresh clone instead and
leaves its outputs there. It runs `dvc repro` (`--jobs N`: the README's first command,
`python -m crossmodal.pipeline.repro --jobs N`, which runs `dvc repro` per stage, N at once) with a `python` shim first
on PATH that records the wall time and peak memory of every stage command, and then reports:

- the full repro's wall time, and per stage its command's wall time and peak RSS;
- the breakdown of the whole: training steps, validation (greedy decoding and scoring, whose PTB tokenizer starts
  Java once per epoch), testing (beam search and evaluation, whose tokenizer and METEOR start Java), the rest of
  each stage (process and MLflow start-up, data loading, writing outputs), and DVC's own time (the repro's wall
  time minus its stage commands': hashing, lock-file rewrites, its own start-up; with N > 1 the stages overlap and
  this part is not separable, so it is left out and the shares are of the stage commands' summed time). The
  training stages' parts come from the `seconds_*` metrics the trainer logs to MLflow; the Java start-up cost is
  measured alone here;
- the no-op `dvc repro` time, and the validation curves' best epochs (a shortened schedule must keep the best
  epoch before the last).

Writes `benchmarks/results/pipeline.{json,md}`. Budgets on a 2-core machine, from a fresh clone with set-up and
every run converged (the convergence issue): the spine, the baselines, X-LAN and AoANet <= 55 min, every paper
<= 120 min (ETA 25, HOCA 20, BAN 15); no-op <= 3 s; DVC's own time < 5 % of the repro.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
COPIED = ("src", "dvc.yaml", "pipelines", "params.yaml", ".dvcignore", ".gitignore", ".dvc/config", ".dvc/.gitignore",
          "benchmarks/results/spread.json")
SHIM = '''#!{python}
import json, resource, subprocess, sys, time
start = time.time()
code = subprocess.call([{real!r}, *sys.argv[1:]])
with open({log!r}, "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "start": start, "end": time.time(),
                          "peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}}) + "\\n")
sys.exit(code)
'''


def copy_repo(dst: Path) -> None:
    for name in COPIED:
        src = ROOT / name
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst / name)
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.email=b@b", "-c", "user.name=b", "commit", "-qm", "b"]):
        subprocess.run(["git", *args], cwd=dst, check=True)


def stage_names(repo: Path) -> dict[str, str]:
    """Stage address by command line."""
    out = {}
    for path in [repo / "dvc.yaml", *sorted((repo / "pipelines").glob("*/dvc.yaml"))]:
        prefix = "" if path.parent == repo else f"{path.relative_to(repo).as_posix()}:"
        for name, stage in yaml.safe_load(path.read_text())["stages"].items():
            out[stage["cmd"]] = prefix + name
    return out


def trainer_seconds(repo: Path) -> dict[str, dict[str, float]]:
    """The `seconds_*` metrics of every MLflow run, by its DVC stage tag."""
    with sqlite3.connect(repo / "mlflow.db") as db:
        rows = db.execute("SELECT t.value, m.key, m.value FROM metrics m JOIN tags t ON t.run_uuid = m.run_uuid "
                          "WHERE t.key = 'dvc.stage' AND m.key LIKE 'seconds_%'").fetchall()
    out: dict[str, dict[str, float]] = {}
    for stage, key, value in rows:
        out.setdefault(stage, {})[key.removeprefix("seconds_")] = value
    return out


def java_startups(env: dict) -> dict[str, float]:
    """Seconds of one PTB tokenizer run and one METEOR run on a single caption (JVM start-up dominates)."""
    code = ("import time, json; from crossmodal.metrics.captions import ptb_tokenize, evaluate_captions;"
            "t = time.perf_counter(); ptb_tokenize({1: ['a red circle']}); tok = time.perf_counter() - t;"
            "t = time.perf_counter(); evaluate_captions({1: 'a red circle'}, {1: ['a red circle', 'a circle']});"
            "full = time.perf_counter() - t; print(json.dumps({'tokenizer_s': tok, 'evaluation_s': full}))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def curves(repo: Path) -> dict[str, dict]:
    out = {}
    for path in sorted((repo / "reports" / "metrics").glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "history" in data:
            out[path.stem] = {"best_epoch": data["best_epoch"], "epochs": len(data["history"]),
                              "stopped_by": data.get("stopped_by", "max_epochs"),
                              "val": [round(row["val_CIDEr"], 3) for row in data["history"]]}
    return out


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=None,
                        help="run in this fresh clone (its outputs stay there) instead of a temporary copy")
    parser.add_argument("--jobs", type=int, default=1,
                        help="stages at once: 1 is plain `dvc repro`, N > 1 the README's first command")
    parser.add_argument("--rewrite", action="store_true",
                        help="only rewrite pipeline.md from pipeline.json (after a change to this report's layout)")
    args = parser.parse_args()
    if args.rewrite:
        (RESULTS / "pipeline.md").write_text(markdown(json.loads((RESULTS / "pipeline.json").read_text())))
        return
    env = dict(os.environ, CROSSMODAL_PROGRESS="0")
    env.pop("DVC_ROOT", None)
    report: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                "cpu": _cpu_model()}}
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        repo, shim_dir, log = args.repo or Path(tmp) / "repo", Path(tmp) / "shim", Path(tmp) / "stages.jsonl"
        if args.repo is None:
            repo.mkdir()
            copy_repo(repo)
        repo = repo.resolve()
        shim_dir.mkdir()
        (shim_dir / "python").write_text(SHIM.format(python=sys.executable, real=sys.executable, log=str(log)))
        (shim_dir / "python").chmod(0o755)
        env["PYTHONPATH"] = str(repo / "src")
        env["PATH"] = f"{shim_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
        command = (["dvc", "repro"] if args.jobs == 1 else
                   ["python", "-m", "crossmodal.pipeline.repro", "--jobs", str(args.jobs)])
        start = time.time()
        subprocess.run(command, cwd=repo, env=env, check=True, stdout=subprocess.DEVNULL)
        total = time.time() - start
        names = stage_names(repo)
        stages = []
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            if rec["argv"][:2] == ["-m", "crossmodal"]:
                stages.append({"stage": names["python " + " ".join(rec["argv"])],
                               "wall_s": round(rec["end"] - rec["start"], 2),
                               "peak_rss_mib": round(rec["peak_rss_mib"], 1)})
        noop = []
        for _ in range(3):
            t = time.perf_counter()
            subprocess.run(["dvc", "repro"], cwd=repo, env=env, check=True, stdout=subprocess.DEVNULL)
            noop.append(time.perf_counter() - t)
        report.update(jobs=args.jobs, full_repro_s=round(total, 1), noop_repro_s=round(min(noop), 2), stages=stages,
                      trainer_seconds=trainer_seconds(repo), java=java_startups(env), curves=curves(repo))
    report["breakdown"] = breakdown(report)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "pipeline.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "pipeline.md").write_text(markdown(report))
    print(markdown(report))


def _cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def breakdown(report: dict) -> dict[str, float]:
    parts = {"training steps": 0.0, "validation (greedy decoding + scoring)": 0.0,
             "test (beam search + evaluation)": 0.0, "rest of the stages (start-up, loading, outputs)": 0.0}
    for stage in report["stages"]:
        seconds = report["trainer_seconds"].get(stage["stage"], {})
        parts["training steps"] += seconds.get("train", 0.0)
        parts["validation (greedy decoding + scoring)"] += seconds.get("validate", 0.0)
        parts["test (beam search + evaluation)"] += seconds.get("test", 0.0)
        parts["rest of the stages (start-up, loading, outputs)"] += stage["wall_s"] - sum(seconds.values())
    if report.get("jobs", 1) == 1:  # stages one after the other: the rest of the wall time is DVC's
        parts["DVC's own time"] = report["full_repro_s"] - sum(s["wall_s"] for s in report["stages"])
    return {k: round(v, 1) for k, v in parts.items()}


def markdown(report: dict) -> str:
    total, jobs = report["full_repro_s"], report.get("jobs", 1)
    how = ("`dvc repro`" if jobs == 1 else
           f"`python -m crossmodal.pipeline.repro --jobs {jobs}` (`dvc repro` per stage)")
    summed = sum(s["wall_s"] for s in report["stages"])
    lines = ["# Pipeline benchmark (default profile, synthetic data)", "",
             f"Machine: {report['machine']['cpus']} CPUs ({report['machine']['cpu']}), Python "
             f"{report['machine']['python']}. One {how} from scratch in a fresh copy (no set-up).", "",
             f"- full repro: **{total} s** ({total / 60:.1f} min)"
             + ("" if jobs == 1 else
                f"; the stage commands' times sum to {summed:.0f} s ({summed / total:.2f} at once on average)"),
             f"- no-op `dvc repro`: **{report['noop_repro_s']} s** (target <= 3 s)",
             f"- Java start-up, measured alone: PTB tokenizer {report['java']['tokenizer_s']:.2f} s per run (once per "
             f"validation and test), tokenizer + METEOR + the other scorers on one caption "
             f"{report['java']['evaluation_s']:.2f} s (once per test)", "",
             "| part | seconds | share |", "|---|---:|---:|"]
    whole = total if jobs == 1 else summed
    lines += [f"| {k} | {v} | {100 * v / whole:.1f}% |" for k, v in report["breakdown"].items()]
    groups: dict[str, list[float]] = {}
    for s in report["stages"]:
        group = s["stage"].split("/")[1] if s["stage"].startswith("pipelines/") else "shared stages (the spine)"
        groups.setdefault(group, []).append(s["wall_s"])
    lines += ["", "Stage commands' wall time by pipeline (a paper's own stages; DVC's time is not split):", "",
              "| pipeline | stages | minutes |", "|---|---:|---:|"]
    lines += [f"| {g} | {len(v)} | {sum(v) / 60:.1f} |" for g, v in groups.items()]
    lines += ["", "| stage | wall (s) | peak RSS (MiB) | train / validate / test (s) | best epoch / epochs (stopped by) |",
              "|---|---:|---:|---|---|"]
    for s in report["stages"]:
        sec = report["trainer_seconds"].get(s["stage"], {})
        parts = " / ".join(f"{sec[k]:.1f}" for k in ("train", "validate", "test")) if sec else ""
        curve = report["curves"].get(s["stage"].split(":")[-1])
        best = f"{curve['best_epoch']} / {curve['epochs']} ({curve.get('stopped_by', 'max_epochs')})" if curve else ""
        lines.append(f"| {s['stage']} | {s['wall_s']} | {s['peak_rss_mib']} | {parts} | {best} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
