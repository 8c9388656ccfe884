"""What one METEOR start costs a stage, against a request to the scheduler's shared scorer; writes
benchmarks/results/meteor.{json,md}.

Run: PYTHONPATH=src python benchmarks/bench_meteor.py [--repeats 3] [--images 500] [--out-dir benchmarks/results]

- own JVM: a process starts METEOR 1.5 (pycocoevalcap's wrapper, as a stage does without the shared scorer) and
  scores `--images` captions: wall seconds and the JVM's CPU seconds (user + system, read when it has exited);
- shared: the same captions sent to a `SharedMeteor` whose JVM has already loaded (the scheduler's case for every
  stage after the first): wall seconds of the request.
Both give the same score (checked). The captions are the synthetic world's kind: short, from a small vocabulary.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from pathlib import Path

import numpy as np
from bench_budget import machine

from crossmodal.io import write_json, write_text
from crossmodal.metrics import captions
from crossmodal.metrics.meteor_server import SharedMeteor

WORDS = "a the man woman dog cat red blue small large ball box sits runs on under near with two three".split()


def _captions(rng: np.random.Generator, images: int) -> tuple[dict, dict]:
    def caption() -> str:
        return " ".join(rng.choice(WORDS, size=int(rng.integers(6, 12))))

    gts = {i: [caption() for _ in range(5)] for i in range(images)}
    return gts, {i: [caption()] for i in range(images)}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def own_jvm(gts: dict, res: dict) -> tuple[float, float, float]:
    """(wall s, the JVM's CPU s, score) of starting METEOR and scoring once."""
    cpu, start = _children_cpu(), time.perf_counter()
    score = captions.local_meteor_score(gts, res)
    wall = time.perf_counter() - start
    captions.stop_local_meteor()  # waits for the JVM, so that its CPU time is counted
    return wall, _children_cpu() - cpu, score


def shared(gts: dict, res: dict, repeats: int) -> tuple[list[float], float]:
    """Wall seconds of each request to a warm shared scorer, and its score."""
    with SharedMeteor() as meteor:
        os.environ[captions.SHARED_METEOR] = meteor.env[captions.SHARED_METEOR]
        try:
            score = captions._meteor_score(gts, res)  # the JVM loads here, once
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                assert captions._meteor_score(gts, res) == score
                times.append(time.perf_counter() - start)
        finally:
            del os.environ[captions.SHARED_METEOR]
    return times, score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    gts, res = _captions(np.random.default_rng(0), args.images)
    runs = [own_jvm(gts, res) for _ in range(args.repeats)]
    times, score = shared(gts, res, args.repeats)
    assert all(r[2] == score for r in runs), "the shared scorer gave another score"
    own_wall, own_cpu = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
    result = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "images": args.images,
              "own_jvm": {"wall_s": [r[0] for r in runs], "cpu_s": [r[1] for r in runs]},
              "shared_request_wall_s": times, "score": score}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    write_json(args.out_dir / "meteor.json", result)
    write_text(args.out_dir / "meteor.md", "\n".join([
        "# METEOR: a stage's own JVM against the scheduler's shared scorer", "",
        f"Machine: {result['machine']}; {result['date']}. {args.images} captions of 5 "
        f"references each; medians of {args.repeats} (benchmarks/bench_meteor.py). Both give METEOR {score:.6f}.", "",
        "| | wall (s) | CPU (s) |", "|---|---:|---:|",
        f"| own JVM: start, load the paraphrase table, score | {own_wall:.2f} | {own_cpu:.2f} (the JVM's) |",
        f"| shared scorer, already loaded: one request | {statistics.median(times):.2f} | |", "",
        "Every captioning stage pays the first row once without the shared scorer; under "
        "`python -m crossmodal.pipeline.repro` only the run's first request does.", ""]))
    print((args.out_dir / "meteor.md").read_text())


if __name__ == "__main__":
    main()
