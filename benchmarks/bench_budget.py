"""Where the default profile's training time could shrink without changing a recipe: seconds per epoch of
default-profile systems under alternatives that keep their params, on this CPU.

Training steps are 83% of a full `dvc repro` (benchmarks/results/pipeline.md). This measures what one epoch of
a system costs, and what it would cost
- `default`: as the pipeline runs it (2 torch threads), an epoch after a warm-up epoch (steady state);
- `threads1`: with 1 torch thread;
- `two_procs`: as two concurrent 1-thread processes, each taking half of every batch: what two DDP processes
  (`compute.processes: 2`) could gain at best, since it leaves out the gradient all-reduce;
- `batch2x`: with twice the batch, per image seen (the step's fixed costs shared by more images);
- `half_dims`: with every width in `model_args` halved (embed_dim, hidden_dim, att_hidden_dim, dim, ffn_dim);
and the first 10 steps' seconds in a fresh process (`cold`) and in one whose second core was first kept busy
for 8 s by two-thread matrix products (`cold_after_spin`): on this VM the first seconds of two-thread work run
about 3x slower than later ones, which a one-thread process does not show. It also times the imports every
training stage pays: torch, mlflow, and `torch._dynamo`, which constructing `torch.optim.Adam` imports.

Every measurement runs in its own process, on the workspace's built features and captions (`dvc repro` first);
epoch times are the median of `--repeats` processes (one epoch on this shared VM varies by up to ~20%).
Run from an activated .venv: `python benchmarks/bench_budget.py [--systems xlan updown showtell] [--repeats 3]`.
Writes benchmarks/results/budget.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "src"))
WIDTHS = ("embed_dim", "hidden_dim", "att_hidden_dim", "dim", "ffn_dim")
VARIANT = "bench_variant"
CONFIGS = ("default", "threads1", "two_procs", "batch2x", "half_dims")


def machine() -> str:
    """The report's machine line: cores, CPU model with ATen's kernel capability (two AMD EPYC machines of this
    project differ: AVX512 with native bf16, and a Zen 3 with AVX2 only), Python."""
    import torch

    from crossmodal.environment import describe

    return (f"{os.cpu_count()} CPUs ({describe()['cpu']}, ATen capability {torch.backends.cpu.get_cpu_capability()}),"
            f" Python {platform.python_version()}")


def derived_params(params: Path, system: str, entry: dict, out: Path) -> tuple[str, Path]:
    """A copy of params.yaml, `out`, whose section of `system` also declares `VARIANT`: `{of: system, **entry}`."""
    raw = yaml.safe_load(params.read_text())
    section = next(k for k, v in raw.items() if isinstance(v, dict) and system in v.get("systems", {}))
    raw[section]["systems"][VARIANT] = {"of": system, **entry}
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return VARIANT, out


def variant_params(params: Path, system: str, config: str, out: Path) -> tuple[str, Path]:
    """The system and its params file, or a derived entry (`of: system`) and the copy of params.yaml, `out`,
    that holds it."""
    if config not in ("batch2x", "half_dims"):
        return system, params
    from crossmodal.config.loader import load

    resolved = load(params).systems()[system]
    if config == "batch2x":
        entry = {"train": {"batch_size": 2 * resolved.train.batch_size}}
    else:
        entry = {"model_args": {k: v // 2 for k, v in resolved.model_args.items() if k in WIDTHS}}
    return derived_params(params, system, entry, out)


def worker(args) -> None:
    """One measurement in this process: prints a JSON line."""
    import torch

    torch.set_num_threads(args.threads)
    from crossmodal.config.loader import load
    from crossmodal.training.trainer import Trainer

    cfg = load(args.params)
    trainer = Trainer(cfg, args.system, ROOT, progress=False)
    order, size = trainer.epoch_order(0), trainer.train_cfg.batch_size
    batches = [order[s:s + size][args.part::args.parts] for s in range(0, len(order), size)]

    def steps(batches):
        trainer.model.train()
        trainer.task.start_epoch(0)
        times, last = [], time.perf_counter()
        for rows, inputs in trainer.task.train_batches(batches):
            loss, _ = trainer.task.loss(trainer.net, trainer.model, rows, inputs, trainer.dist.share)
            trainer.optimise(loss)
            now = time.perf_counter()
            times.append(now - last)
            last = now
        return times

    if args.spin:
        a, start = torch.randn(1000, 1000), time.perf_counter()
        while time.perf_counter() - start < args.spin:
            a @ a
    if args.cold:
        print(json.dumps({"first_steps": steps(batches[:10])}))
        return
    steps(batches)  # warm-up epoch
    start = time.perf_counter()
    steps(batches)
    print(json.dumps({"epoch_s": time.perf_counter() - start, "images": int(len(order)),
                      "batch": size, "steps": len(batches)}))


def run_worker(system: str, params: Path, threads: int = 2, part: int = 0, parts: int = 1, cold: bool = False,
               spin: float = 0.0) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--worker", "--system", system, "--params", str(params), "--threads",
           str(threads), "--part", str(part), "--parts", str(parts), "--spin", str(spin)] + (["--cold"] if cold else [])
    env = {**os.environ, "CROSSMODAL_PROGRESS": "0", "OMP_NUM_THREADS": str(threads)}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def result(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"a measurement failed (status {proc.returncode}); run it by hand: {proc.args}")
    return json.loads(out.strip().splitlines()[-1])


def median_of(repeats: int, fn) -> dict:
    """The run with the median `epoch_s` of `repeats` runs of `fn`, with every run's seconds."""
    runs = sorted((fn() for _ in range(repeats)), key=lambda r: r["epoch_s"])
    return {**runs[len(runs) // 2], "runs_s": [r["epoch_s"] for r in runs]}


def measure(system: str, config: str, tmp: Path) -> dict:
    name, params = variant_params(ROOT / "params.yaml", system, config, tmp / f"{system}-{config}.yaml")
    if config == "two_procs":
        start = time.perf_counter()
        halves = [result(p) for p in [run_worker(name, params, 1, part, 2) for part in range(2)]]
        wall = time.perf_counter() - start
        return {"epoch_s": max(h["epoch_s"] for h in halves), "images": halves[0]["images"],
                "batch": halves[0]["batch"], "note": f"two processes, {wall:.1f} s wall for both"}
    return result(run_worker(name, params, 1 if config == "threads1" else 2))


def import_seconds() -> dict:
    code = {"torch": "import torch", "mlflow": "import mlflow",
            "torch._dynamo (Adam's constructor)": "import torch; import time; m = torch.nn.Linear(2, 2); "
                                                  "t = time.perf_counter(); torch.optim.Adam(m.parameters()); "
                                                  "print(time.perf_counter() - t)"}
    seconds = {}
    for name, line in code.items():
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", line], capture_output=True, text=True, check=True).stdout
        seconds[name] = float(out) if out.strip() else time.perf_counter() - start
    return seconds


def write(report: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "budget.json").write_text(json.dumps(report, indent=1) + "\n")
    lines = ["# Training time per epoch under alternatives that keep the recipe (default profile, synthetic data)",
             "", f"Machine: {report['machine']}. Steady state: an epoch after a warm-up epoch, median of "
             f"{report['repeats']} processes (every run's seconds in budget.json). In brackets: relative to `default` "
             "(2 threads, as the pipeline runs). The cold columns: the first 10 steps' seconds in all.", "",
             "| system | default s/epoch | 1 thread | two 1-thread processes (DDP bound) | batch x2 "
             "| widths halved | first 10 steps cold (s) | after an 8 s spin (s) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for system, r in report["systems"].items():
        base = r["default"]["epoch_s"]

        def rel(config):
            return f"{r[config]['epoch_s']:.2f} ({r[config]['epoch_s'] / base:.2f}x)"

        lines.append(f"| {system} | {base:.2f} | {rel('threads1')} | {rel('two_procs')} | "
                     f"{rel('batch2x')} | {rel('half_dims')} | "
                     f"{sum(r['cold']['first_steps']):.2f} | {sum(r['cold_after_spin']['first_steps']):.2f} |")
    lines += ["", "First 10 steps, seconds each (fresh process / after the spin):", ""]
    for system, r in report["systems"].items():
        for key in ("cold", "cold_after_spin"):
            lines.append(f"- {system}, {key}: " + " ".join(f"{s:.2f}" for s in r[key]["first_steps"]))
    lines += ["", "Imports each training stage pays (s, fresh process): " +
              ", ".join(f"{k} {v:.2f}" for k, v in report["imports"].items()), ""]
    (RESULTS / "budget.md").write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", nargs="+", default=["xlan", "updown", "showtell"])
    parser.add_argument("--repeats", type=int, default=3, help="processes per epoch time (the median is kept)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--system", help=argparse.SUPPRESS)
    parser.add_argument("--params", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--part", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--parts", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--spin", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--cold", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    report = {"machine": machine(), "repeats": args.repeats, "systems": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for system in args.systems:
            r = {config: median_of(args.repeats, lambda: measure(system, config, Path(tmp))) for config in CONFIGS}
            r["cold"] = result(run_worker(system, ROOT / "params.yaml", cold=True))
            r["cold_after_spin"] = result(run_worker(system, ROOT / "params.yaml", cold=True, spin=8.0))
            report["systems"][system] = r
            print(system, json.dumps(r), flush=True)
    report["imports"] = import_seconds()
    write(report)
    print((RESULTS / "budget.md").read_text())


if __name__ == "__main__":
    main()
