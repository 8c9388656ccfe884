"""HOCA's extractors loading their clips with and without `one_thread` (stages/extract_video.py), side by side.

Run: PYTHONPATH=src python benchmarks/bench_extract_decode.py --repo <a workspace with data/raw/video_world>
         [--clips 100] [--repeats 3]
Writes benchmarks/results/extract_decode.{json,md}.

Workload: what an extractor stage does before it trains, for each modality: decode a clip file of the video world
(`data/video_files.read_clip`) and compute the network's inputs (`features/video.clip_inputs`), over the first
`--clips` clips of each dataset, with the stage's torch threads (`runtime.threads`, 2 here). `plain` runs that
loop as the stage did before; `one_thread` inside the stage's context (torch and numpy's BLAS on one thread).
Milliseconds per clip: the median over `--repeats` runs after a warm-up run, the two settings alternating, one
process. Every run's inputs are compared with the first run's, so a setting that changed a number would show.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
SETTINGS = ("plain", "one_thread")


def measure(repo: Path, clips: int, repeats: int) -> dict:
    from crossmodal.config.data import VIDEO_DATASETS
    from crossmodal.config.features import VIDEO_MODALITIES
    from crossmodal.config.loader import load
    from crossmodal.data.video_files import read_clip
    from crossmodal.features.video import clip_inputs
    from crossmodal.stage_common import set_threads
    from crossmodal.stages.extract_video import clip_files, one_thread

    cfg = load(repo / "params.yaml")
    set_threads(cfg)
    files = [f for d in VIDEO_DATASETS for f in list(clip_files(repo, d).values())[:clips]]
    report = {"clips": len(files), "repeats": repeats, "threads": torch.get_num_threads(), "modalities": {}}
    for modality in VIDEO_MODALITIES:
        times, first, same = {s: [] for s in SETTINGS}, None, True
        for setting in SETTINGS * (repeats + 1):
            with one_thread() if setting == "one_thread" else contextlib.nullcontext():
                start = time.perf_counter()
                inputs = [clip_inputs(read_clip(f), cfg.video.features, (modality,))[modality] for f in files]
                times[setting].append((time.perf_counter() - start) / len(files) * 1000)
            first = inputs if first is None else first
            same = same and all(torch.equal(a, b) for a, b in zip(first, inputs))
        ms = {s: statistics.median(t[1:]) for s, t in times.items()}  # the first run of each warms up
        report["modalities"][modality] = {**{f"{s}_ms": ms[s] for s in SETTINGS}, "runs_ms": times,
                                          "speed_up": ms["plain"] / ms["one_thread"], "same_inputs": same}
    from bench_budget import machine

    return {**report, "torch": torch.__version__, "machine": machine(), "date": time.strftime("%Y-%m-%d")}


def markdown(r: dict) -> str:
    rows = [f"| {m} | {v['plain_ms']:.1f} | {v['one_thread_ms']:.1f} | {v['speed_up']:.2f}x | "
            f"{'yes' if v['same_inputs'] else 'NO'} |" for m, v in r["modalities"].items()]
    return "\n".join([
        "# HOCA's extractors: decoding the clips with torch and BLAS on one thread", "",
        f"{r['clips']} clips (the first of each dataset), decoded and turned into each network's inputs, median of "
        f"{r['repeats']} runs after a warm-up, the settings alternating; torch {r['torch']}, {r['threads']} threads "
        f"outside `one_thread`. Machine: {r['machine']}; {r['date']} (benchmarks/bench_extract_decode.py).", "",
        "| modality | plain (ms a clip) | one_thread (ms a clip) | speed-up | same inputs |", "|---|---:|---:|---:|---|",
        *rows, ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=ROOT, help="a workspace whose video world is built")
    parser.add_argument("--clips", type=int, default=100, help="clips of each dataset")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    from crossmodal.io import write_json, write_text

    report = measure(args.repo.resolve(), args.clips, args.repeats)
    write_json(args.out_dir / "extract_decode.json", report, indent=1)
    write_text(args.out_dir / "extract_decode.md", markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    sys.exit(main())
