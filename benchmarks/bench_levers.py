"""Step levers side by side: what each makes of a training epoch, whether it keeps same-CPU determinism, and
what it changes in the numbers, measured in one run on this CPU.

Levers (each against `default`: 2 torch threads, fp32, the trainer's own Adam, as the pipeline trains):
- `foreach`: Adam with `foreach=True` (one multi-tensor kernel per update instead of one per parameter);
- `fused`: Adam with `fused=True` (PyTorch's fused CPU kernel);
- `compile`: the model's forward through `torch.compile` (inductor on the CPU); its compile time is the warm-up
  epoch's extra seconds over `default`'s, and a whole stage pays it once;
- `bf16`: the training forward under `torch.autocast("cpu", torch.bfloat16)` (this CPU has native bf16);
- two data-parallel processes: measured by `bench_budget.py` (`two_procs`, an upper bound: no all-reduce).

For each system and lever, in a fresh process: a warm-up epoch, then a timed epoch (steady state), then the
training losses of the first 20 steps of a second, re-seeded model, compared bit for bit with the first model's
first 20 (`deterministic`), and with `default`'s (`same_numbers`). `--curve N` also trains each system N epochs
under `default` and `bf16` and reports the validation CIDEr-D after each epoch (the effect on the curve).

A whole stage's projected time is `epochs x epoch + compile`; the decision rule adopts a lever at >= 1.15x on a
whole stage that keeps determinism, and one that changes numbers only behind a `compute` switch.
Run from an activated .venv in a built workspace (`dvc repro` first):
`python benchmarks/bench_levers.py [--systems xlan transformer aoanet updown] [--curve 3]`.
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
LEVERS = ("default", "foreach", "fused", "compile", "bf16")
STEPS_COMPARED = 20


def build(system: str, lever: str):
    """A trainer for `system` with `lever` applied, and the context its forward passes run in."""
    import contextlib

    import torch

    from crossmodal.config import load
    from crossmodal.training.trainer import Trainer
    from crossmodal.training.schedules import make_scheduler

    trainer = Trainer(load(ROOT / "params.yaml"), system, ROOT, progress=False)
    if lever in ("foreach", "fused"):
        cfg = trainer.train_cfg
        trainer.optimizer = torch.optim.Adam(trainer.model.parameters(), lr=trainer.optimizer.param_groups[0]["lr"],
                                             betas=cfg.betas, weight_decay=cfg.weight_decay, **{lever: True})
        trainer.scheduler = make_scheduler(trainer.optimizer, cfg, trainer.steps_per_epoch)
    if lever == "compile":
        trainer.net = trainer.dist.wrap(torch.compile(trainer.model))
    context = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if lever == "bf16" else contextlib.nullcontext
    return trainer, context


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
            if "error" in r:
                lines.append(f"| {system} | {lever} | failed: {r['error'][:80]} | | | | |")
                continue
            compile_s = max(0.0, (r["warmup_s"] - r["epoch_s"]) - (base["warmup_s"] - base["epoch_s"]))
            stage = base["epoch_s"] * base["max_epochs"] / (r["epoch_s"] * r["max_epochs"] + compile_s)
            same = r["losses"] == base["losses"]
            lines.append(f"| {system} | {lever} | {r['epoch_s']:.2f} ({base['epoch_s'] / r['epoch_s']:.2f}x) | "
                         f"{compile_s:.0f} | {stage:.2f}x | {'yes' if r['deterministic'] else 'no'} | "
                         f"{'yes' if same else 'no'} |")
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
    args = parser.parse_args()
    if args.worker:
        system, lever, curve = args.worker
        print(json.dumps(worker(system, lever, int(curve))))
        return
    from bench_budget import machine

    report = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "systems": {}}
    for system in args.systems:
        report["systems"][system] = {}
        for lever in args.levers:
            curve = args.curve if lever in ("default", "bf16") else 0
            report["systems"][system][lever] = r = measure(system, lever, curve)
            print(system, lever, json.dumps({k: v for k, v in r.items() if k != "losses"}), flush=True)
    write(report)
    print((RESULTS / "levers.md").read_text())


if __name__ == "__main__":
    main()
