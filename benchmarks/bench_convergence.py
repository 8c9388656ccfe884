"""Do the default schedules converge? Trains systems for more epochs than params.yaml gives them and reports
where their validation CIDEr-D peaks, against the committed run of the default schedule.

The pipeline's rule (the platform issue): a default schedule is long enough only where the best epoch comes
before the last. Each system here runs as a derived entry, `{of: <system>, train: {max_epochs: --epochs}}`, with
everything else as the pipeline trains it (params, data, seed, the stage's torch threads), in its own process, with no
MLflow run and no output in the workspace (its resume checkpoint is removed). Its first epochs therefore repeat
the committed run's epochs exactly on the machine that made them (same CPU type, same thread count); the
step schedule continues past the default's last epoch.

Reports, per system: the validation curve (CIDEr-D x100 per epoch), the best epoch, the best epoch's test
metrics, and the committed default run's (reports/metrics/<system>.json). Needs the workspace's built features
and captions (`dvc repro` first). Run from an activated .venv:
`python benchmarks/bench_convergence.py [--systems xlan xlan_dec transformer xtransformer] [--epochs 30]`.
Writes benchmarks/results/convergence.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench_budget import RESULTS, ROOT, derived_params, machine

SHOWN = ("BLEU-4", "METEOR", "CIDEr")


def worker(system: str, params: Path) -> None:
    """Train `system` from `params` in this process; prints its result as one JSON line."""
    from crossmodal.config.loader import load
    from crossmodal.stage_common import set_threads
    from crossmodal.training.trainer import Trainer

    start, cfg = time.perf_counter(), load(params)
    set_threads(cfg)  # as the stage sets them
    trainer = Trainer(cfg, system, ROOT, progress=False)
    try:
        result = trainer.run(None)
    finally:
        trainer.checkpoint.unlink(missing_ok=True)
        if trainer.checkpoint.parent.exists() and not any(trainer.checkpoint.parent.iterdir()):
            trainer.checkpoint.parent.rmdir()
    print(json.dumps({**summary(result), "seconds": time.perf_counter() - start}))


def summary(metrics: dict) -> dict:
    """A run's curve, best epoch and test metrics (x100), from the trainer's result or a metrics JSON."""
    return {"val_CIDEr": [round(100 * row["val_CIDEr"], 1) for row in metrics["history"]],
            "best_epoch": metrics["best_epoch"], "epochs": len(metrics["history"]),
            "test": {k: round(100 * metrics["test"][k], 1) for k in SHOWN}}


def run_longer(system: str, epochs: int, tmp: Path, train: dict | None = None) -> dict:
    name, params = derived_params(ROOT / "params.yaml", system, {"train": {"max_epochs": epochs, **(train or {})}},
                                  tmp / f"{system}.yaml")
    cmd = [sys.executable, __file__, "--worker", name, "--params", str(params)]
    env = {**os.environ, "CROSSMODAL_PROGRESS": "0"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{system} failed (status {proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def committed(system: str) -> dict:
    metrics = json.loads((ROOT / "reports" / "metrics" / f"{system}.json").read_text())
    return summary(metrics)


def write(report: dict, stem: str = "convergence") -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n")
    changed = ", ".join(f"`{k}: {v}`" for k, v in report.get("train", {}).items())
    lines = ["# Do the default schedules converge? (default profile, synthetic data)", "",
             f"Machine: {report['machine']}. Each system trained for up to {report['epochs']} epochs instead of its "
             f"default{' with ' + changed if changed else ''}, everything else as the pipeline runs it (2 threads); "
             "best epoch = highest validation "
             "CIDEr-D; test metrics x100 at the best epoch. `default`: the committed run (reports/metrics).", "",
             "| system | default: best / epochs | default test CIDEr-D | longer: best / epochs | longer test "
             "CIDEr-D | longer test BLEU-4 | longer test METEOR | minutes |", "|---|---|---:|---|---:|---:|---:|---:|"]
    for system, r in report["systems"].items():
        d, x = r["default"], r["longer"]
        lines.append(f"| {system} | {d['best_epoch']} / {d['epochs']} | {d['test']['CIDEr']} | "
                     f"{x['best_epoch']} / {x['epochs']} | {x['test']['CIDEr']} | {x['test']['BLEU-4']} | "
                     f"{x['test']['METEOR']} | {x['seconds'] / 60:.1f} |")
    lines += ["", "Validation CIDEr-D (x100) by epoch, longer run (the default run's epochs are its first ones):", ""]
    lines += [f"- {system}: " + " ".join(str(v) for v in r["longer"]["val_CIDEr"])
              for system, r in report["systems"].items()]
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", nargs="+", default=["xlan", "xlan_dec", "transformer", "xtransformer"])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--train", nargs="*", default=[], metavar="KEY=VALUE",
                        help="train params changed in every run, e.g. patience=3 batch_size=25 (YAML values)")
    parser.add_argument("--name", default="convergence", help="results file stem under benchmarks/results/")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--params", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.params)
    train = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.train)}
    report = {"machine": machine(), "epochs": args.epochs, "train": train, "systems": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for system in args.systems:
            report["systems"][system] = {"default": committed(system),
                                         "longer": run_longer(system, args.epochs, Path(tmp), train)}
            print(system, json.dumps(report["systems"][system]), flush=True)
            write(report, args.name)
    print((RESULTS / f"{args.name}.md").read_text())


if __name__ == "__main__":
    main()
