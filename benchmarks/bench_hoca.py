"""HOCA against Low-Rank HOCA on a CPU or a GPU: time and memory of the attention module as the clips grow (§4.3's
complexity argument, the measured side of the paper's Table 3).

Run: PYTHONPATH=src python benchmarks/bench_hoca.py [--frames 10 20 40 80] [--words 20] [--repeats 3]
[--device cuda] [--amp]. Writes benchmarks/results/hoca.{json,md} (hoca_cuda.* on a GPU, where memory is the
GPU's peak allocation above the inputs and weights).

Workload at the paper's sizes (§5.1): batch 25 clips, t frames per modality (the paper samples 80), features of
1536 / 1024 / 128 dimensions (Inception-ResNet-v2, I3D, VGGish), attention size d = 512, decoder query 512, rank
1. One training pass of the multiple attentive fusion (`modules.hoca.MultipleAttentiveFusion`) over a caption of
`--words` decoder steps (as training unrolls the decoder: every step's graph is kept until the backward), then its
backward; median of `--repeats` after a warm-up pass. Variants: HOCA-U (Bahdanau attention per modality),
HOCA-UBT (full correlation tensors: t^3 per clip and step for the ternary head) and L-HOCA-UBT. Each configuration
runs in its own process; memory is its peak RSS minus its RSS before the first pass (the inputs and weights).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import on_device  # noqa: E402

VARIANTS = {"HOCA-U": ("U", False), "HOCA-UBT": ("UBT", False), "L-HOCA-UBT": ("UBT", True)}
BATCH, DIMS, ATT_DIM, QUERY_DIM = 25, (1536, 1024, 128), 512, 512


def _current_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device) / 2**30
    with open("/proc/self/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 2**20
    return 0.0


def measure(variant: str, frames: int, words: int, repeats: int, device: str = "cpu", amp: bool = False) -> dict:
    from crossmodal.modules.hoca import MultipleAttentiveFusion

    dev = on_device.start(device)
    torch.manual_seed(0)
    kind, low_rank = VARIANTS[variant]
    module = MultipleAttentiveFusion(QUERY_DIM, DIMS, [frames] * 3, ATT_DIM, kind, low_rank, rank=1).to(dev)
    features = [torch.randn(BATCH, frames, d).to(dev) for d in DIMS]
    queries = torch.randn(words, BATCH, QUERY_DIM).to(dev).requires_grad_()

    def one_caption() -> None:
        with on_device.autocast(dev, amp):
            keys = module.precompute(features)
            total = sum(module(queries[t], features, keys=keys)[0][0].float().sum() for t in range(words))
        total.backward()

    before = _current_gib(dev)
    times = []
    for i in range(repeats + 1):
        seconds = on_device.seconds(one_caption, dev)
        if i:
            times.append(seconds)
    peak = on_device.peak_gib(dev)
    return {"seconds": round(statistics.median(times), 3), "memory_GiB": round(peak - before, 3),
            "parameters": sum(p.numel() for p in module.parameters())}


def markdown(report: dict) -> str:
    frames = report["frames"]
    gpu = report.get("device") == "cuda"
    where = report["machine"] + ("" if gpu else f", {report['threads']} torch threads, torch {report['torch']}")
    memory = "peak GPU allocation above the allocation" if gpu else "peak RSS above the RSS"
    precision = ", bf16 autocast" if report.get("amp") else ""
    lines = [f"# HOCA against Low-Rank HOCA: the attention module as clips grow ({'GPU' if gpu else 'CPU'})", "",
             f"{where}{precision}. Batch {BATCH} clips, "
             f"features {'/'.join(map(str, DIMS))}-d, d = {ATT_DIM}, rank 1; one caption of {report['words']} decoder "
             f"steps forward and backward, median of {report['repeats']} after a warm-up. Memory: {memory} "
             "before the first pass.", "",
             "| variant | " + " | ".join(f"t = {t}: s / GiB" for t in frames) + " |",
             "|---|" + "---:|" * len(frames)]
    for variant in VARIANTS:
        cells = []
        for t in frames:
            r = report["results"].get(f"{variant}@{t}")
            cells.append("—" if r is None else f"{r['seconds']} / {r['memory_GiB']}")
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    lines += ["", "Low-Rank over full HOCA-UBT (the paper's Table 3 on MSR-VTT, whole models: memory 0.58, "
              "time 0.66):", ""]
    for t in frames:
        full, low = report["results"].get(f"HOCA-UBT@{t}"), report["results"].get(f"L-HOCA-UBT@{t}")
        if full and low:
            lines.append(f"- t = {t}: time {low['seconds'] / full['seconds']:.2f}, memory "
                         f"{low['memory_GiB'] / max(full['memory_GiB'], 1e-9):.2f}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", nargs="+", type=int, default=[10, 20, 40, 80])
    parser.add_argument("--words", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent / "results")
    on_device.add_arguments(parser)
    parser.add_argument("--one", nargs=2, metavar=("VARIANT", "FRAMES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one[0], int(args.one[1]), args.words, args.repeats, args.device, args.amp)))
        return
    results = {}
    for t in args.frames:
        for variant in args.variants:
            out = subprocess.run([sys.executable, __file__, "--one", variant, str(t), "--words", str(args.words),
                                  "--repeats", str(args.repeats), *on_device.child_arguments(args)],
                                 capture_output=True, text=True)
            if out.returncode:
                print(f"{variant} t={t}: failed ({out.stderr.strip().splitlines()[-1:]})", file=sys.stderr)
                continue
            results[f"{variant}@{t}"] = json.loads(out.stdout)
            print(variant, t, results[f"{variant}@{t}"], flush=True)
    report = {"machine": on_device.machine(args.device), "device": args.device, "amp": args.amp,
              "threads": on_device.THREADS, "torch": torch.__version__,
              "frames": args.frames, "words": args.words, "repeats": args.repeats, "results": results}
    stem = on_device.stem("hoca", args)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out_dir / f"{stem}.md").write_text(markdown(report))


if __name__ == "__main__":
    main()
