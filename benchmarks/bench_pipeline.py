"""Benchmark of the default pipeline: per-stage wall time and peak memory of a fresh `dvc repro`, the no-op
`dvc repro`, the fixed start-up cost of a stage, and Up-Down training steps per second.

Run on demand (from an activated .venv): `python benchmarks/bench_pipeline.py`. It works in a temporary copy
of the repository (so the workspace and its MLflow database are untouched) and writes
`benchmarks/results/pipeline.{json,md}`. Targets on a 2-core machine: the spine (data, features, Up-Down,
tables) < 5 min, no-op repro < 3 s, start-up < 3 s per stage.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
XLAN_PAPER_STAGES = ("train@xlan", "train@transformer", "train@xtransformer", "scst@xlan", "scst@transformer",
                     "scst@xtransformer", "reseed@", "reseed_scst@", "ensemble@")


def copy_repo(dst: Path) -> None:
    for name in ("src", "dvc.yaml", "params.yaml", ".dvcignore", ".gitignore", ".dvc/config", ".dvc/.gitignore"):
        src = ROOT / name
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst / name)
    subprocess.run(["git", "init", "-q"], cwd=dst, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dst, check=True)
    subprocess.run(["git", "-c", "user.email=b@b", "-c", "user.name=b", "commit", "-qm", "bench"], cwd=dst, check=True)


def stage_peak_rss(cmd: list[str], cwd: Path, env: dict) -> tuple[float, float]:
    """Run one command in a fresh child Python so RUSAGE_CHILDREN covers only it."""
    probe = (
        "import resource, subprocess, sys, time, json;"
        "t = time.perf_counter(); r = subprocess.run(sys.argv[1:]);"
        "print(json.dumps([time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,"
        " r.returncode]))"
    )
    proc = subprocess.run([sys.executable, "-c", probe, *cmd], cwd=cwd, env=env, capture_output=True, text=True)
    wall, peak, code = json.loads(proc.stdout.strip().splitlines()[-1])
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return wall, peak


def main() -> None:
    env = dict(os.environ, CROSSMODAL_PROGRESS="0")
    env.pop("DVC_ROOT", None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    report: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "stages": []}
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        repo = Path(tmp)
        copy_repo(repo)
        env["PYTHONPATH"] = str(repo / "src")
        stages = subprocess.run(["dvc", "stage", "list", "--name-only"], cwd=repo, env=env, capture_output=True,
                                text=True, check=True).stdout.split()
        total = 0.0
        for stage in stages:
            wall, peak = stage_peak_rss(["dvc", "repro", "--single-item", stage], repo, env)
            total += wall
            report["stages"].append({"stage": stage, "wall_s": round(wall, 2), "peak_rss_mib": round(peak, 1)})
            print(f"{stage}: {wall:.1f} s, {peak:.0f} MiB", flush=True)
        report["full_repro_s"] = round(total, 1)
        noop = [stage_peak_rss(["dvc", "repro"], repo, env)[0] for _ in range(3)]
        report["noop_repro_s"] = round(min(noop), 2)
        startup_probe = (
            "from crossmodal.tracking import Run; r = Run('bench-startup', {});"
            "import torch; from crossmodal import config; cfg = config.load(); r.run_id; r.__exit__(None, None, None)"
        )
        startup = [stage_peak_rss([sys.executable, "-c", startup_probe], repo, env)[0] for _ in range(3)]
        report["stage_startup_s"] = round(min(startup), 2)
        cli_only = [stage_peak_rss([sys.executable, "-m", "crossmodal", "--help"], repo, env)[0] for _ in range(3)]
        report["cli_startup_s"] = round(min(cli_only), 2)
        report["updown_train_steps_per_s"] = round(updown_steps_per_second(repo), 2)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "pipeline.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "pipeline.md").write_text(markdown(report))
    print(markdown(report))


def updown_steps_per_second(repo: Path, steps: int = 20) -> float:
    sys.path.insert(0, str(repo / "src"))
    import numpy as np
    import torch

    from crossmodal import config
    from crossmodal.training.xe import Trainer, caption_batch, sequence_loss

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    cfg = config.load(repo / "params.yaml")
    trainer = Trainer(cfg, "updown", repo, progress=False)
    batch = cfg.variants["updown"].train.batch_size
    rows, feats, mask = next(trainer.train_features.batches([np.arange(batch)]))
    targets = caption_batch(trainer.train.labels, rows, trainer.seq_per_img)
    trainer.model.train()
    start = None
    for i in range(steps + 3):
        if i == 3:
            start = time.perf_counter()
        logprobs = trainer.model(feats, mask, targets, trainer.seq_per_img)
        loss = sequence_loss(logprobs, targets, 0.0)
        trainer.optimizer.zero_grad()
        loss.backward()
        trainer.optimizer.step()
    return steps / (time.perf_counter() - start)


def markdown(report: dict) -> str:
    lines = ["# Pipeline benchmark (default profile, synthetic image world)", "",
             f"Machine: {report['machine']['cpus']} CPUs, Python {report['machine']['python']}.", "",
             "| stage | wall (s) | peak RSS (MiB) |", "|---|---:|---:|"]
    lines += [f"| {s['stage']} | {s['wall_s']} | {s['peak_rss_mib']} |" for s in report["stages"]]
    walls = {s["stage"]: s["wall_s"] for s in report["stages"]}
    spine = sum(w for stage, w in walls.items() if not stage.startswith(("train@", "scst@")) or stage == "train@updown")
    training = sum(w for stage, w in walls.items() if stage.startswith(("train@", "scst@")))
    xlan_paper = sum(w for stage, w in walls.items() if stage.startswith(XLAN_PAPER_STAGES))
    lines += ["", f"- full default `dvc repro` (sum of stages): **{report['full_repro_s']} s**, of which training "
              f"and SCST stages {training:.1f} s",
              f"- the X-LAN paper's stages (ladder, Transformer pair, SCST, reseeded members, ensembles): "
              f"**{xlan_paper:.1f} s**",
              f"- the spine alone (data, features, Up-Down, tables): {spine:.1f} s (target < 300 s)",
              f"- no-op `dvc repro`: **{report['noop_repro_s']} s** (target < 3 s)",
              f"- stage start-up (torch import + params + MLflow run set-up in its worker): "
              f"**{report['stage_startup_s']} s**"
              " (target < 3 s)",
              f"- CLI start-up alone (`python -m crossmodal --help`): {report['cli_startup_s']} s",
              f"- Up-Down training: **{report['updown_train_steps_per_s']} steps/s**", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
