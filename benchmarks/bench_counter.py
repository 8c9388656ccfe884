"""The counter's piecewise-linear maps (modules/counter.py, eq. 12): the lookup form the module computes, against
eq. 12 written as its sum, side by side.

Run: PYTHONPATH=src python benchmarks/bench_counter.py [--batch 64] [--calls 50] [--repeats 3]
Writes benchmarks/results/counter.{json,md}.

Eq. 12 as written, f(x) = Σ_i w_i · clamp(d·x − i, 0, 1), is a product of every input with all d = 16 pieces'
coverage (`Coverage` here, the module's form until BAN's retrain), so on the counter's [B, K, K, K] tensor of eq. 4
it makes 16 times the elements. `PiecewiseLinear` reads the same function from the cumulative sum of the weights at
the piece x falls in, plus that piece's fraction: equal in exact arithmetic, with other float32 rounding (the sums
run in another order). Workload: one `Counter` call forward and backward (K = 10 objects, random boxes, logits and
positive piece weights, seeded), the two forms alternating, the median of `--repeats` runs of `--calls` calls after
a warm-up run, the machine's threads; and the largest differences of the output and the gradients.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def coverage_class():
    from crossmodal.modules.counter import PiecewiseLinear

    class Coverage(PiecewiseLinear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            w = self.weight.abs()
            w = w / w.sum()
            starts = torch.arange(w.numel(), dtype=x.dtype, device=x.device)
            return (w.numel() * x.unsqueeze(-1) - starts).clamp(0, 1) @ w  # each piece's coverage, weighted

    return Coverage


def build(form: type, batch: int, objects: int = 10) -> tuple:
    from crossmodal.modules.counter import Counter

    torch.manual_seed(0)
    counter = Counter(objects)
    for k in range(len(counter.f)):
        counter.f[k] = form(16)
        counter.f[k].weight.data = torch.rand(16) + 0.1
    boxes = torch.rand(batch, objects, 4)
    boxes[..., 2:] += boxes[..., :2]
    return counter, boxes, torch.randn(batch, objects, requires_grad=True)


def call(counter, boxes, logits) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    counter.zero_grad(set_to_none=True)
    logits.grad = None
    out = counter(boxes, logits)
    out.sum().backward()
    return out.detach(), logits.grad, [f.weight.grad for f in counter.f]


def measure(batch: int, calls: int, repeats: int) -> dict:
    from crossmodal.modules.counter import PiecewiseLinear

    forms = {"coverage": coverage_class(), "lookup": PiecewiseLinear}
    setups = {name: build(form, batch) for name, form in forms.items()}
    times = {name: [] for name in forms}
    for name in list(forms) * (repeats + 1):
        start = time.perf_counter()
        for _ in range(calls):
            call(*setups[name])
        times[name].append((time.perf_counter() - start) / calls * 1000)
    ms = {name: statistics.median(t[1:]) for name, t in times.items()}  # the first run of each warms up
    (out_a, grad_a, w_a), (out_b, grad_b, w_b) = (call(*setups[name]) for name in forms)
    from bench_budget import machine

    return {"batch": batch, "objects": 10, "pieces": 16, "calls": calls, "repeats": repeats,
            "ms_per_call": ms, "runs_ms": times, "speed_up": ms["coverage"] / ms["lookup"],
            "max_abs_difference": {"output": float((out_a - out_b).abs().max()),
                                   "logits_gradient": float((grad_a - grad_b).abs().max()),
                                   "weights_gradient": max(float((a - b).abs().max()) for a, b in zip(w_a, w_b))},
            "threads": torch.get_num_threads(), "torch": torch.__version__, "machine": machine(),
            "date": time.strftime("%Y-%m-%d")}


def markdown(r: dict) -> str:
    d = r["max_abs_difference"]
    return "\n".join([
        "# The counter's piecewise-linear maps: coverage product against lookup", "",
        f"One `Counter` call forward and backward, batch {r['batch']}, K = {r['objects']}, {r['pieces']} pieces, "
        f"median of {r['repeats']} runs of {r['calls']} calls after a warm-up, alternating; torch {r['torch']}, "
        f"{r['threads']} threads. Machine: {r['machine']}; {r['date']} (benchmarks/bench_counter.py).", "",
        "| form | ms a call |", "|---|---:|",
        *(f"| {name} | {ms:.2f} |" for name, ms in r["ms_per_call"].items()), "",
        f"Speed-up of the lookup: {r['speed_up']:.2f}x. Largest differences: output {d['output']:.1e}, logits' "
        f"gradient {d['logits_gradient']:.1e}, weights' gradient {d['weights_gradient']:.1e}.", ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    from crossmodal.io import write_json, write_text

    report = measure(args.batch, args.calls, args.repeats)
    write_json(args.out_dir / "counter.json", report, indent=1)
    write_text(args.out_dir / "counter.md", markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    sys.exit(main())
