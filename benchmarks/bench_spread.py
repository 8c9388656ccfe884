"""How far one machine's numbers carry to another: the backbone and Up-Down rebuilt under several kernel paths
and thread counts on this machine, and the spread of what they score.

A float32 run's last bits depend on the kernels that sum it (environment.py): ATen's CPU capability, MKL's code
branch, oneDNN's ISA, and the thread count. Another CPU picks other kernels, so it gives other numbers from the
same commit and params; training amplifies last-bit differences into visibly different models. Rebuilding under
forced kernel paths on one machine shows the size of that effect without a second machine.

Each configuration runs, in a temporary copy of the repository with the workspace's world and captions, the
chain a fresh clone runs: `pretrain-backbone`, `extract-regions` (its features), `train --system updown`. It
records the backbone's four validation accuracies, Up-Down's test BLEU-4, METEOR and CIDEr-D (x100), the model
files' md5 and the stage times. The spread (max - min over configurations) is the floor below which two systems'
orderings cannot be told apart by one run each (docs/reproducibility.md).

Run on demand from an activated .venv, after `dvc repro prepro_captions` (the world and captions are copied):
`python benchmarks/bench_spread.py [--configs default,threads1,...]`. Writes `benchmarks/results/spread.{json,md}`.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench_pipeline import copy_repo

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "src"))
from crossmodal.environment import PORTABLE  # noqa: E402

DATA = ("data/raw/image_world", "data/processed", "reports/metrics/data_profile.json")
# name -> (description, kernel variables set by hand, threads, compute.portable)
CONFIGS = {
    "default": ("default kernels, 2 threads", {}, 2, False),
    "threads1": ("default kernels, 1 thread", {}, 1, False),
    "aten_avx2": ("ATen AVX2, 2 threads", {"ATEN_CPU_CAPABILITY": "avx2"}, 2, False),
    "portable": ("portable mode (compute.portable: true), 2 threads", {}, 2, True),
    "baseline": ("ATen default, MKL COMPATIBLE, oneDNN SSE4.1, 2 threads",
                 {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41"}, 2,
                 False),
}
STAGES = (["pretrain-backbone"], ["extract-regions"], ["train", "--system", "updown"])


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def run_config(repo: Path, name: str) -> dict:
    _, variables, threads, portable = CONFIGS[name]
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["runtime"]["threads"] = threads
    params["compute"]["portable"] = portable
    params_file = repo / f"params_{name}.yaml"
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k not in PORTABLE}
    env.update(variables, CROSSMODAL_PROGRESS="0", PYTHONPATH=str(repo / "src"))
    seconds = {}
    for argv in STAGES:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "crossmodal", "--params", str(params_file), *argv], cwd=repo, env=env,
                       check=True)
        seconds[argv[0]] = round(time.perf_counter() - start, 1)
    backbone = json.loads((repo / "reports/metrics/backbone.json").read_text())
    updown = json.loads((repo / "reports/metrics/updown.json").read_text())
    return {"config": name, "kernels": variables, "threads": threads, "portable": portable, "seconds": seconds,
            "environment": updown["environment"], "backbone_accuracy": backbone["accuracy"],
            "updown_test": {k: 100 * updown["test"][k] for k in ("BLEU-4", "METEOR", "CIDEr")},
            "updown_best_epoch": updown["best_epoch"],
            "md5": {"backbone": md5(repo / "data/models/backbone.pt"),
                    "updown": md5(repo / "data/models/updown/model.pt")}}


def spread(rows: list[dict], field: str) -> dict[str, list[float]]:
    """{metric: [min, max, max - min]} over the rows."""
    keys = rows[0][field]
    return {k: [min(r[field][k] for r in rows), max(r[field][k] for r in rows),
                max(r[field][k] for r in rows) - min(r[field][k] for r in rows)] for k in keys}


def report(rows: list[dict]) -> str:
    acc_keys, test_keys = list(rows[0]["backbone_accuracy"]), list(rows[0]["updown_test"])
    lines = ["# Spread of results across kernel paths and threads (synthetic profile)", "",
             f"Machine: {rows[0]['environment']['cpu']}, default capability "
             f"{rows[0]['environment']['cpu_capability']}; {platform.python_version()}, torch "
             f"{rows[0]['environment']['versions']['torch']}. Same commit, params and data in every row.", "",
             "| Configuration | Reported capability | " + " | ".join(f"backbone {k}" for k in acc_keys) + " | "
             + " | ".join(f"Up-Down {k}" for k in test_keys) + " | best epoch | backbone md5 | Up-Down md5 | "
             "seconds (backbone, regions, Up-Down) |",
             "|---" * (6 + len(acc_keys) + len(test_keys)) + "|"]
    for r in rows:
        secs = ", ".join(str(s) for s in r["seconds"].values())
        lines.append(f"| {CONFIGS[r['config']][0]} | {r['environment']['cpu_capability']} | "
                     + " | ".join(f"{r['backbone_accuracy'][k]:.3f}" for k in acc_keys) + " | "
                     + " | ".join(f"{r['updown_test'][k]:.1f}" for k in test_keys)
                     + f" | {r['updown_best_epoch']} | `{r['md5']['backbone'][:8]}` | `{r['md5']['updown'][:8]}` "
                     f"| {secs} |")
    lines += ["", "Spread (max - min over the rows):", ""]
    for k, (lo, hi, width) in spread(rows, "backbone_accuracy").items():
        lines.append(f"- backbone {k} accuracy: {lo:.3f}–{hi:.3f} (spread {width:.3f})")
    for k, (lo, hi, width) in spread(rows, "updown_test").items():
        lines.append(f"- Up-Down test {k} (x100): {lo:.1f}–{hi:.1f} (spread {width:.1f})")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="default,threads1,aten_avx2,portable",
                        help=f"comma-separated, of: {', '.join(CONFIGS)}")
    args = parser.parse_args()
    names = args.configs.split(",")
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s) {', '.join(unknown)}; known: {', '.join(CONFIGS)}")
    missing = [d for d in DATA if not (ROOT / d).exists()]
    if missing:
        sys.exit(f"missing {', '.join(missing)}: run `dvc repro prepro_captions` first")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        copy_repo(repo)
        for d in DATA:
            (repo / d).parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if (ROOT / d).is_dir() else shutil.copy)(ROOT / d, repo / d)
        for name in names:
            print(f"{name}: {CONFIGS[name][0]}", flush=True)
            rows.append(run_config(repo, name))
            print(json.dumps(rows[-1]), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "spread.json").write_text(json.dumps(rows, indent=1) + "\n")
    (RESULTS / "spread.md").write_text(report(rows))
    print(report(rows))


if __name__ == "__main__":
    main()
