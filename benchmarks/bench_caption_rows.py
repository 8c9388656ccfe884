"""Cross-entropy steps of a captioner under `train.caption_rows: repeat` against `once`, side by side.

Run: PYTHONPATH=src python benchmarks/bench_caption_rows.py [--system l_hoca_ubt_msvd] [--steps 20] [--repeats 3]
Writes benchmarks/results/caption_rows.{json,md}.

Workload: the system's model at the default profile's sizes (params.yaml), its objective (`tasks/objectives/xe.py`, the
code path of the trainer), batches of `train.batch_size` items whose reference counts follow the world's: the
MSVD-like clips have 15-30 captions each (`video.world.captions_per_clip`), so `repeat` gives every clip as many
rows as the clip with the most and `once` each caption once (about three quarters of the rows). Captions of 9
words, random features and words (the cost does not depend on their values); Adam steps with the recipe's
learning rate. Seconds per step: the median over `--repeats` runs of `--steps` steps each, after a warm-up run,
the two settings alternating, one process, the machine's threads (2 here).
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
WORDS, VOCAB = 9, 60


def _inputs(model, dims: dict[str, int], batch: int, gen: torch.Generator) -> dict:
    from crossmodal.data.inputs import Padded

    steps = model.args.steps
    return {name: Padded(torch.randn(batch, steps[name], dims[name], generator=gen),
                         torch.ones(batch, steps[name], dtype=torch.bool)) for name in model.consumes(model.args)}


def measure(system: str, steps: int, repeats: int) -> dict:
    from crossmodal.config.loader import load
    from crossmodal.data.captions import CaptionLabels
    from crossmodal.models.registry import build_model
    from crossmodal.tasks.objectives.xe import Objective

    cfg = load(ROOT / "params.yaml")
    entry = cfg.systems()[system]
    dims = dict(cfg.video.features.dims)
    low, high = cfg.video.world.captions_per_clip["msvd"] // 2, cfg.video.world.captions_per_clip["msvd"]
    gen = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    batch = entry.train.batch_size
    counts = rng.integers(low, high + 1, size=batch * steps)
    ends = np.cumsum(counts)
    labels = CaptionLabels(np.arange(len(counts)), rng.integers(4, VOCAB, (int(ends[-1]), WORDS)).astype(np.int32),
                           ends - counts, ends)
    results = {}
    for setting in ("repeat", "once") * (repeats + 1):
        torch.manual_seed(0)
        model = build_model(system, entry, VOCAB, dims)
        model.train()
        optimizer = torch.optim.Adam(model.parameters(), lr=entry.train.lr)
        train = dataclasses.replace(entry.train, caption_rows=setting)
        task = SimpleNamespace(train_labels=labels, device=torch.device("cpu"), system=SimpleNamespace(train=train))
        objective = Objective(task)
        objective.start_epoch(1)
        inputs = _inputs(model, dims, batch, gen)
        start, rows = time.perf_counter(), 0
        for k in range(steps):
            loss, _ = objective.loss(lambda f: f(model), model, np.arange(k * batch, (k + 1) * batch), inputs, None)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            rows += int(counts[k * batch:(k + 1) * batch].sum()) if setting == "once" else batch * objective.seq_per_img
        results.setdefault(setting, []).append(((time.perf_counter() - start) / steps, rows / steps))
    from bench_budget import machine

    report = {"system": system, "batch": batch, "captions_per_clip": [int(low), int(high)], "steps": steps,
              "repeats": repeats, "threads": torch.get_num_threads(), "torch": torch.__version__,
              "machine": machine(), "date": time.strftime("%Y-%m-%d")}
    for setting, runs in results.items():
        timed = runs[1:]  # the first run of each setting warms up
        report[setting] = {"seconds_per_step": statistics.median(t for t, _ in timed), "rows_per_step": timed[0][1]}
    report["speed_up"] = report["repeat"]["seconds_per_step"] / report["once"]["seconds_per_step"]
    return report


def markdown(r: dict) -> str:
    return "\n".join([
        "# Cross-entropy steps: `train.caption_rows` repeat against once", "",
        f"System `{r['system']}` at the default sizes, batch {r['batch']} clips of {r['captions_per_clip'][0]}-"
        f"{r['captions_per_clip'][1]} captions (the MSVD-like world's), {r['steps']} steps per run, median of "
        f"{r['repeats']} runs after a warm-up, alternating; torch {r['torch']}, {r['threads']} threads. Machine: "
        f"{r['machine']}; {r['date']} (benchmarks/bench_caption_rows.py).", "",
        "| caption_rows | caption rows per step | seconds per step |", "|---|---:|---:|",
        *(f"| {s} | {r[s]['rows_per_step']:.0f} | {r[s]['seconds_per_step']:.3f} |" for s in ("repeat", "once")),
        "", f"Speed-up of `once`: {r['speed_up']:.2f}x.", ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", default="l_hoca_ubt_msvd")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    from crossmodal.io import write_json, write_text

    report = measure(args.system, args.steps, args.repeats)
    write_json(args.out_dir / "caption_rows.json", report, indent=1)  # atomic, as every other results file
    write_text(args.out_dir / "caption_rows.md", markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    sys.exit(main())
