"""Time crossmodal's CiderD against pycocoevalcap's CiderScorer; writes benchmarks/results/cider.{json,md}.

Run: PYTHONPATH=src python benchmarks/bench_cider.py [--repeats 15] [--out-dir benchmarks/results]

Workloads (captions of 9-15 words drawn from a Zipf vocabulary of 2,000 words, so n-grams repeat as in COCO;
candidates are references with 3 words replaced, so that scores are far from zero):
- batch: 500 candidates x 5 references, the SCST reward shape the target is stated for (>= 10x with cached
  document frequencies from a 5,000-image training corpus);
- scst: 100 images x 5 sampled captions each, the reference list repeated per sample as SCST passes it;
- constant: 7,500 candidate captions each scored as the constant caption of 250 images x 5 references
  (best_constant_caption); pycocoevalcap's time is extrapolated from 20 candidates.
Every fast result is checked against pycocoevalcap (max absolute difference reported).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
from pycocoevalcap.cider.cider_scorer import CiderScorer

from crossmodal.io import write_json, write_text
from crossmodal.metrics.cider import CiderD


def _captions(rng: np.random.Generator, count: int) -> list[str]:
    vocab = np.array([f"w{i}" for i in range(2000)])
    p = 1.0 / np.arange(1, vocab.size + 1)
    p /= p.sum()
    lengths = rng.integers(9, 16, size=count)
    words = rng.choice(vocab, size=int(lengths.sum()), p=p)
    ends = np.cumsum(lengths)
    return [" ".join(words[e - n:e]) for e, n in zip(ends, lengths)]


def _perturb(rng: np.random.Generator, caption: str, changes: int = 3) -> str:
    """A caption that shares most n-grams with a reference, so that scores are far from zero."""
    words = caption.split()
    for k in rng.integers(0, len(words), size=changes):
        words[k] = f"w{int(rng.integers(0, 50))}"
    return " ".join(words)


def _median_time(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def _pycoco(cands: list[str], refs: list[list[str]]) -> np.ndarray:
    scorer = CiderScorer(n=4, sigma=6.0)
    for c, r in zip(cands, refs):
        scorer += (c, r)
    return np.asarray(scorer.compute_score()[1])


def _compare(cached: CiderD, per_call: CiderD, cands: list[str], refs: list[list[str]], repeats: int) -> dict:
    """Times of pycocoevalcap and both CiderD modes on one workload, with the largest score difference."""
    t_ref, expected = _median_time(lambda: _pycoco(cands, refs), max(3, repeats // 3))
    t_cached, _ = _median_time(lambda: cached.score(cands, refs), repeats)
    t_call, got = _median_time(lambda: per_call.score(cands, refs), repeats)
    return {"pycocoevalcap_s": t_ref, "ciderd_cached_df_s": t_cached, "ciderd_per_call_df_s": t_call,
            "speedup_cached_df": t_ref / t_cached, "speedup_per_call_df": t_ref / t_call,
            "mean_cider": float(expected.mean()),
            "max_abs_diff_per_call_vs_pycocoevalcap": float(np.abs(got - expected).max())}


def run(repeats: int) -> dict:
    rng = np.random.default_rng(0)
    corpus_caps = _captions(rng, 5000 * 5)
    corpus = [corpus_caps[5 * i:5 * i + 5] for i in range(5000)]
    build_s, cached = _median_time(lambda: CiderD(corpus), 1)
    per_call = CiderD()
    report: dict = {"machine": {"python": platform.python_version(), "numpy": np.__version__,
                                "cpus": os.cpu_count(), "platform": platform.platform()},
                    "cached_corpus": {"images": 5000, "references_per_image": 5, "build_s": build_s}}

    # batch: 500 x 5 (references from the training corpus, as in SCST)
    refs = corpus[:500]
    cands = [_perturb(rng, r[int(rng.integers(0, 5))]) for r in refs]
    report["batch"] = {"candidates": 500, "references_per_candidate": 5,
                       **_compare(cached, per_call, cands, refs, repeats)}

    # scst: 100 images x 5 samples, reference lists repeated per sample
    sample_refs = [corpus[i // 5] for i in range(500)]
    samples = [_perturb(rng, r[int(rng.integers(0, 5))]) for r in sample_refs]
    report["scst"] = {"images": 100, "samples_per_image": 5,
                      **_compare(cached, per_call, samples, sample_refs, repeats)}

    # constant caption search: 7,500 candidates x 250 images x 5 references
    images = corpus[:250]
    candidates = [_perturb(rng, c) for c in corpus_caps[-7500:]]
    t_fast, fast = _median_time(lambda: per_call.constant_caption_scores(candidates, images), max(3, repeats // 5))
    probe = candidates[:20]
    start = time.perf_counter()
    brute = np.array([_pycoco([c] * len(images), images).mean() for c in probe])
    t_probe = time.perf_counter() - start
    report["constant"] = {"candidates": 7500, "images": 250, "references_per_image": 5,
                          "ciderd_s": t_fast, "pycocoevalcap_extrapolated_s": t_probe / len(probe) * 7500,
                          "speedup": t_probe / len(probe) * 7500 / t_fast,
                          "best_score": float(fast.max()),
                          "max_abs_diff_vs_pycocoevalcap_on_20": float(np.abs(fast[:20] - brute).max())}
    return report


def markdown(report: dict) -> str:
    b, s, c = report["batch"], report["scst"], report["constant"]
    lines = [
        "# CiderD vs pycocoevalcap CiderScorer", "",
        f"Machine: {report['machine']['cpus']} CPUs, Python {report['machine']['python']}, "
        f"numpy {report['machine']['numpy']}. Median wall times.", "",
        f"Cached document frequencies: built once from {report['cached_corpus']['images']} images x 5 "
        f"references in {report['cached_corpus']['build_s']:.2f} s.", "",
        "| workload | pycocoevalcap | CiderD cached df | CiderD per-call df | speed-up cached | speed-up per-call "
        "| mean CIDEr-D | max abs diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in (("500 candidates x 5 refs", b), ("SCST 100 images x 5 samples", s)):
        lines.append(f"| {name} | {row['pycocoevalcap_s'] * 1e3:.1f} ms | {row['ciderd_cached_df_s'] * 1e3:.1f} ms "
                     f"| {row['ciderd_per_call_df_s'] * 1e3:.1f} ms | {row['speedup_cached_df']:.1f}x "
                     f"| {row['speedup_per_call_df']:.1f}x | {row['mean_cider']:.3f} "
                     f"| {row['max_abs_diff_per_call_vs_pycocoevalcap']:.1e} |")
    lines += ["", f"Constant-caption search, {c['candidates']} candidates x {c['images']} images x 5 refs: "
              f"CiderD {c['ciderd_s']:.2f} s; pycocoevalcap (extrapolated from 20) "
              f"{c['pycocoevalcap_extrapolated_s']:.0f} s "
              f"({c['speedup']:.0f}x); best corpus CIDEr-D {c['best_score']:.3f}; "
              f"max abs diff {c['max_abs_diff_vs_pycocoevalcap_on_20']:.1e}.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args()
    report = run(args.repeats)
    write_json(args.out_dir / "cider.json", report)
    write_text(args.out_dir / "cider.md", markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
