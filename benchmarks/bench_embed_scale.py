"""The word embedding's initial scale in the Transformer (issue 62): one default run's curve under each init.

The Transformer (`models/transformer.py`) multiplies its word embedding by sqrt(D). Under PyTorch's default
N(0, 1) init the decoder's first input had std sqrt(D) (8 at the default profile's D 64) against sinusoidal
positions within ±1; the fix draws the same numbers scaled by D^-1/2 (`scaled_word_embedding`, N(0, 1/D), as
tensor2tensor and fairseq do), so sqrt(D) E w starts at unit scale. Since the fix consumes the random stream exactly
as nn.Embedding does (tests/models/test_transformer.py checks it), the two runs below start from the same weights
except that the `n01` run's embedding is `unit`'s times sqrt(D): the curve differs only by the init.

It trains the `transformer` system as params.yaml states it (the default world and profile, its schedule and early
stopping) twice, once per init, in a temporary copy of the repository (`bench_pipeline.copy_repo`; the workspace is
untouched) whose features and captions it builds first (`dvc repro prepro_captions extract_regions`). The `n01` run
builds the model with `scaled_word_embedding` replaced by a plain nn.Embedding in its own process, i.e. the code as
it was before the fix. One torch thread (`runtime.threads: 1`: the machine is shared); no MLflow run.

Reports, per init: the validation CIDEr-D (x100) and training loss per epoch, the best epoch and its validation
CIDEr-D, the test metrics at the best epoch, and the minutes. Run from an activated .venv:
`python benchmarks/bench_embed_scale.py [--max-epochs N]`. Writes benchmarks/results/embed_scale.{json,md}.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench_pipeline import RESULTS, ROOT, copy_repo

SYSTEM = "transformer"
INITS = {"n01": "PyTorch's N(0, 1) (before the fix)", "unit": "N(0, 1/D): sqrt(D) E w at unit scale (the fix)"}
SHOWN = ("BLEU-4", "METEOR", "CIDEr")


def cpu() -> dict:
    """The CPU's model name, family and model, from /proc/cpuinfo (results are facts about one CPU type)."""
    fields = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "cpu family", "model") and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    return {"model_name": fields.get("model name"), "family": fields.get("cpu family"), "model": fields.get("model"),
            "cores": os.cpu_count()}


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def worker(init: str, repo: Path, max_epochs: int | None) -> None:
    """Train SYSTEM in `repo` with the embedding init `init`; prints the run's summary as one JSON line."""
    import torch
    from torch import nn

    import crossmodal.models.transformer as transformer
    from crossmodal.config.loader import load
    from crossmodal.stage_common import set_threads
    from crossmodal.training.trainer import Trainer

    if init == "n01":  # the code before the fix: nn.Embedding's own N(0, 1), same draws (see the module docstring)
        transformer.scaled_word_embedding = lambda vocab_size, dim: nn.Embedding(vocab_size, dim)
    cfg = load(repo / "params.yaml")
    set_threads(cfg)
    start = time.perf_counter()
    trainer = Trainer(cfg, SYSTEM, repo, progress=False)
    embed = trainer.model.word_embed.weight
    scale = (embed * embed.size(1) ** 0.5).std().item()
    if max_epochs is not None:
        trainer.train_cfg = dataclasses.replace(trainer.train_cfg, max_epochs=max_epochs)
    try:
        result = trainer.run(None)
    finally:
        trainer.checkpoint.unlink(missing_ok=True)
    history = result["history"]
    print(json.dumps({
        "initial_sqrtD_embedding_std": round(scale, 3), "threads": torch.get_num_threads(),
        "val_CIDEr": [round(100 * row["val_CIDEr"], 1) for row in history],
        "train_loss": [round(row["train_loss"], 4) for row in history],
        "best_epoch": result["best_epoch"], "best_val_CIDEr": round(100 * result["best_val_CIDEr"], 1),
        "epochs": len(history), "stopped_by": result["stopped_by"],
        "test": {k: round(100 * result["test"][k], 1) for k in SHOWN},
        "minutes": round((time.perf_counter() - start) / 60, 2)}))


def prepare(repo: Path, env: dict) -> float:
    """Copy the repository, run one torch thread, build the features and captions; the minutes it took."""
    start = time.perf_counter()
    copy_repo(repo)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["runtime"]["threads"] = 1
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run(["dvc", "repro", "prepro_captions", "extract_regions"], cwd=repo, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return (time.perf_counter() - start) / 60


def train(init: str, repo: Path, env: dict, max_epochs: int | None) -> dict:
    cmd = [sys.executable, __file__, "--worker", init, "--repo", str(repo)]
    if max_epochs is not None:
        cmd += ["--max-epochs", str(max_epochs)]
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{init} failed (status {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write(report: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_atomic(RESULTS / "embed_scale.json", json.dumps(report, indent=1) + "\n")
    c = report["machine"]["cpu"]
    lines = ["# The Transformer's word-embedding init: one default run per init", "",
             f"Machine: {c['model_name']} (CPU family {c['family']}, model {c['model']}), {c['cores']} cores, "
             f"1 torch thread, torch {report['machine']['torch']}, Python {report['machine']['python']}; "
             f"{report['date']}; code: the working tree at {report['commit']}.", "",
             f"System `{SYSTEM}` as params.yaml states it (default world and profile, D 64, its schedule and early "
             f"stopping{'' if report['max_epochs'] is None else ', capped at ' + str(report['max_epochs'])}), "
             "trained once per init in a temporary copy of the repository; the two runs start from the same weights "
             "except the embedding's scale. Validation CIDEr-D x100 (greedy); test metrics x100 at the best epoch "
             "(beam search, as the pipeline tests). One run (seed 0) per init: no seed spread is measured here, so "
             "small differences in the best or test CIDEr-D may be seed noise.", "",
             "| init | initial std of sqrt(D) E w | best epoch / epochs | best val CIDEr-D | test CIDEr-D | "
             "test BLEU-4 | test METEOR | minutes |", "|---|---:|---|---:|---:|---:|---:|---:|"]
    for init, r in report["runs"].items():
        lines.append(f"| {INITS[init]} | {r['initial_sqrtD_embedding_std']} | {r['best_epoch']} / {r['epochs']} | "
                     f"{r['best_val_CIDEr']} | {r['test']['CIDEr']} | {r['test']['BLEU-4']} | "
                     f"{r['test']['METEOR']} | {r['minutes']} |")
    runs = report["runs"]
    width = max(len(r["val_CIDEr"]) for r in runs.values())
    lines += ["", "Per epoch (validation CIDEr-D x100; training loss):", "",
              "| epoch | " + " | ".join(f"{i} val | {i} loss" for i in runs) + " |",
              "|---:|" + "---:|---:|" * len(runs)]
    for e in range(width):
        cells = []
        for r in runs.values():
            have = e < len(r["val_CIDEr"])
            cells += [str(r["val_CIDEr"][e]) if have else "", f"{r['train_loss'][e]:.3f}" if have else ""]
        lines.append(f"| {e + 1} | " + " | ".join(cells) + " |")
    write_atomic(RESULTS / "embed_scale.md", "\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-epochs", type=int, help="cap the schedule's epochs (default: params.yaml's)")
    parser.add_argument("--worker", choices=sorted(INITS), help=argparse.SUPPRESS)
    parser.add_argument("--repo", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.repo, args.max_epochs)
    import torch

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    report = {"machine": {"cpu": cpu(), "torch": torch.__version__, "python": platform.python_version()},
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "commit": commit.strip(), "system": SYSTEM, "max_epochs": args.max_epochs, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        env = {**os.environ, "CROSSMODAL_PROGRESS": "0", "PYTHONPATH": str(repo / "src"),
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        env.pop("DVC_ROOT", None)
        report["prepare_minutes"] = round(prepare(repo, env), 2)
        print(f"data built in {report['prepare_minutes']} min", flush=True)
        for init in INITS:
            report["runs"][init] = train(init, repo, env, args.max_epochs)
            print(init, json.dumps(report["runs"][init]), flush=True)
            write(report)
    print((RESULTS / "embed_scale.md").read_text())


if __name__ == "__main__":
    main()
