"""Step levers side by side: what each makes of a training epoch, whether it keeps same-CPU determinism, and
what it changes in the numbers, measured in one run on this CPU.

Levers (each against `default`: 2 torch threads, fp32, the trainer's own Adam, as the pipeline trains):
- `foreach`: Adam with `foreach=True` (one multi-tensor kernel per update instead of one per parameter);
- `fused`: Adam with `fused=True` (PyTorch's fused CPU kernel);
- `compile`: the model's forward through `torch.compile` (inductor on the CPU); its compile time is the warm-up
  epoch's extra seconds over `default`'s, and a whole stage pays it once;
- `bf16`: `compute.amp: true`, the switch that runs the training forward under bf16 autocast on the CPU (this CPU
  has native bf16);
- `ddp`: a whole two-epoch training stage (`{of: <system>, train: {max_epochs: 2, patience: 0}}`, validation
  included, no MLflow run, no output) in two DDP processes of one thread each (`compute.processes: 2`, launched by
  torchrun as the stage launches itself) against the same stage in one two-thread process; its ratio is of wall
  times, start-up included. (`bench_budget.py`'s `two_procs` is the upper bound without the all-reduce.)

For each system and lever, in a fresh process: a warm-up epoch, then a timed epoch (steady state), then the
training losses of the first 20 steps of a second, re-seeded model, compared bit for bit with the first model's
first 20 (`deterministic`), and with `default`'s (`same_numbers`). `--curve N` also trains each system N epochs
under `default` and `bf16` and reports the validation CIDEr-D after each epoch (the effect on the curve).

A whole stage's projected time is `epochs x epoch + compile`; the decision rule adopts a lever at >= 1.15x on a
whole stage that keeps determinism, and one that changes numbers only behind a `compute` switch.
Run from an activated .venv in a built workspace (`dvc repro` first):
`python benchmarks/bench_levers.py [--systems xlan transformer aoanet updown] [--levers ...] [--curve 3]`.
Writes benchmarks/results/levers.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
LEVERS = ("default", "foreach", "fused", "compile", "bf16", "ddp")
STEPS_COMPARED = 20


def build(system: str, lever: str):
    """A trainer for `system` with `lever` applied, and the context its forward passes run in."""
    import torch

    import yaml

    from crossmodal.config.loader import from_data
    from crossmodal.training.trainer import Trainer
    from crossmodal.training.schedules import make_scheduler

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["compute"]["amp"] = lever == "bf16"
    trainer = Trainer(from_data(raw), system, ROOT, progress=False)
    if lever in ("foreach", "fused"):
        cfg = trainer.train_cfg
        trainer.optimizer = torch.optim.Adam(trainer.model.parameters(), lr=trainer.optimizer.param_groups[0]["lr"],
                                             betas=cfg.betas, weight_decay=cfg.weight_decay, **{lever: True})
        trainer.scheduler = make_scheduler(trainer.optimizer, cfg, trainer.steps_per_epoch)
    if lever == "compile":
        trainer.net = trainer.dist.wrap(torch.compile(trainer.model))
    return trainer, trainer.precision.autocast


def epoch(trainer, context, limit: int | None = None) -> tuple[float, list[float]]:
    """One training epoch (or its first `limit` steps): seconds and each step's loss."""
    trainer.model.train()
    trainer.task.start_epoch(0)
    order, size = trainer.epoch_order(0), trainer.train_cfg.batch_size
    batches = [order[s:s + size] for s in range(0, len(order), size)][:limit]
    losses, start = [], time.perf_counter()
    for rows, inputs in trainer.task.train_batches(batches):
        with context():
            loss, _ = trainer.task.loss(trainer.net, trainer.model, rows, inputs, trainer.dist.share)
        trainer.optimise(loss)
        losses.append(loss.item())
    return time.perf_counter() - start, losses


def worker(system: str, lever: str, curve: int) -> dict:
    import torch

    torch.set_num_threads(2)
    trainer, context = build(system, lever)
    warm_s, first = epoch(trainer, context)
    steady_s, _ = epoch(trainer, context)
    again, _ = build(system, lever)
    _, repeat = epoch(again, context, STEPS_COMPARED)
    out = {"warmup_s": warm_s, "epoch_s": steady_s, "losses": first[:STEPS_COMPARED],
           "deterministic": repeat == first[:STEPS_COMPARED], "max_epochs": trainer.train_cfg.max_epochs}
    if curve:
        fresh, context = build(system, lever)
        out["val_curve"] = []
        for _ in range(curve):
            epoch(fresh, context)
            out["val_curve"].append(round(100 * fresh.validate(), 2))
    return out


def ddp_worker(params: Path) -> None:
    """Train `bench_variant` from `params` as the stage would (one process, or this rank of a torchrun group)."""
    from bench_budget import VARIANT
    from crossmodal.config.loader import load
    from crossmodal.stage_common import set_threads
    from crossmodal.training import distributed
    from crossmodal.training.trainer import Trainer

    cfg = load(params)
    with distributed.process_group(cfg.compute) as group:
        set_threads(cfg)
        trainer = Trainer(cfg, VARIANT, ROOT, progress=False)
        result = trainer.run(None)
        if group.main:
            trainer.checkpoint.unlink(missing_ok=True)
            print(json.dumps({"val_CIDEr": [round(100 * r["val_CIDEr"], 2) for r in result["history"]]}))


def measure_ddp(system: str) -> dict:
    """Wall seconds of a two-epoch stage in one two-thread process and in two one-thread DDP processes."""
    import tempfile

    import yaml

    from bench_budget import derived_params

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for processes in (1, 2):
            _, params = derived_params(ROOT / "params.yaml", system, {"train": {"max_epochs": 2, "patience": 0}},
                                       Path(tmp) / f"p{processes}.yaml")
            raw = yaml.safe_load(params.read_text())
            raw["compute"]["processes"] = processes
            params.write_text(yaml.safe_dump(raw, sort_keys=False))
            worker_cmd = [__file__, "--ddp-worker", str(params)]
            cmd = ([sys.executable, *worker_cmd] if processes == 1 else
                   [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *worker_cmd])
            env = {**os.environ, "CROSSMODAL_PROGRESS": "0"}
            start = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            seconds = time.perf_counter() - start
            if proc.returncode:
                return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
            out[f"processes{processes}"] = {"seconds": seconds,
                                            **json.loads(proc.stdout.strip().splitlines()[-1])}
    return out


def measure(system: str, lever: str, curve: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", system, lever, str(curve)]
    env = {**os.environ, "CROSSMODAL_PROGRESS": "0", "OMP_NUM_THREADS": "2"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write(report: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "levers.json").write_text(json.dumps(report, indent=1) + "\n")
    lines = ["# Step levers, side by side (default profile, synthetic data)", "",
             f"Machine: {report['machine']}; {report['date']}. Seconds per training epoch in steady state (an epoch "
             "after a warm-up epoch, one process each, 2 threads); in brackets the speed-up over `default`. "
             "Compile: the warm-up epoch's extra seconds over `default`'s. Stage: the projected speed-up of a whole "
             "training stage (`max_epochs` epochs, plus compile). Deterministic: a re-seeded second model gives the "
             f"first {STEPS_COMPARED} step losses bit for bit; same numbers: equal to `default`'s.", "",
             "| system | lever | s/epoch | compile (s) | stage | deterministic | same numbers |",
             "|---|---|---:|---:|---:|---|---|"]
    for system, levers in report["systems"].items():
        base = levers["default"]
        for lever, r in levers.items():
            if lever == "ddp":
                continue
            if "error" in r:
                lines.append(f"| {system} | {lever} | failed: {r['error'][:80]} | | | | |")
                continue
            compile_s = max(0.0, (r["warmup_s"] - r["epoch_s"]) - (base["warmup_s"] - base["epoch_s"]))
            stage = base["epoch_s"] * base["max_epochs"] / (r["epoch_s"] * r["max_epochs"] + compile_s)
            same = r["losses"] == base["losses"]
            lines.append(f"| {system} | {lever} | {r['epoch_s']:.2f} ({base['epoch_s'] / r['epoch_s']:.2f}x) | "
                         f"{compile_s:.0f} | {stage:.2f}x | {'yes' if r['deterministic'] else 'no'} | "
                         f"{'yes' if same else 'no'} |")
    ddp = {s: levers["ddp"] for s, levers in report["systems"].items() if "ddp" in levers}
    if ddp:
        lines += ["", "Two DDP processes of one thread each against one two-thread process: wall seconds of a whole "
                  "two-epoch training stage (start-up and validation included); same numbers: the validation "
                  "CIDEr-D of both epochs equal.", "",
                  "| system | 1 process x 2 threads (s) | 2 processes x 1 thread (s) | speed-up | same numbers |",
                  "|---|---:|---:|---:|---|"]
        for system, r in ddp.items():
            if "error" in r:
                lines.append(f"| {system} | failed: {r['error'][:80]} | | | |")
                continue
            one, two = r["processes1"], r["processes2"]
            lines.append(f"| {system} | {one['seconds']:.1f} | {two['seconds']:.1f} | "
                         f"{one['seconds'] / two['seconds']:.2f}x | "
                         f"{'yes' if one['val_CIDEr'] == two['val_CIDEr'] else 'no'} |")
    curves = [(s, lv, r["val_curve"]) for s, levers in report["systems"].items() for lv, r in levers.items()
              if "val_curve" in r]
    if curves:
        lines += ["", "Validation CIDEr-D (greedy) after each epoch, from the same start:", ""]
        lines += [f"- {s}, {lv}: " + " ".join(f"{v:.1f}" for v in c) for s, lv, c in curves]
    (RESULTS / "levers.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", nargs="+", default=["xlan", "transformer", "aoanet", "updown"])
    parser.add_argument("--levers", nargs="+", default=list(LEVERS), choices=LEVERS)
    parser.add_argument("--curve", type=int, default=0, help="also train this many epochs for default and bf16")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--ddp-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ddp_worker:
        ddp_worker(args.ddp_worker)
        return
    if args.worker:
        system, lever, curve = args.worker
        print(json.dumps(worker(system, lever, int(curve))))
        return
    from bench_budget import machine

    report = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "systems": {}}
    levers = ["default", *(lever for lever in args.levers if lever != "default")]  # the others' reference
    for system in args.systems:
        report["systems"][system] = {}
        for lever in levers:
            curve = args.curve if lever in ("default", "bf16") else 0
            report["systems"][system][lever] = r = measure_ddp(system) if lever == "ddp" else \
                measure(system, lever, curve)
            print(system, lever, json.dumps({k: v for k, v in r.items() if k != "losses"}), flush=True)
    write(report)
    print((RESULTS / "levers.md").read_text())


if __name__ == "__main__":
    main()
