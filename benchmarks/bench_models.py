"""Captioning models at the papers' sizes on a CPU or a GPU: training step time, peak memory, beam-search throughput.

Run: PYTHONPATH=src python benchmarks/bench_models.py [--models aoanet updown] [--repeats 3] [--out-dir ...]
[--device cuda] [--amp]. Writes benchmarks/results/models.{json,md} (models_cuda.* on a GPU, where the
X-Transformer runs at the paper's batch of 40 and memory is the GPU's peak allocation).

Workload (COCO with bottom-up features, as in the papers): each image has 10-100 regions of 2048-d (the
adaptive bottom-up boxes, padded to 100 and masked), 5 captions of 16 words, a vocabulary of 10,369 words
(AoANet's), the paper's batch size in images. A training step is forward + label-smoothed cross-entropy +
backward + Adam update, median of `--repeats` after one warm-up step. Decoding is beam search (beam 3, up to
16 words) of 10 images with the model in eval mode, median of `--repeats` after a warm-up, in images/s
(weights are random, so <eos> is forbidden and every caption has 16 words). With `--scst`, a self-critical step
too (tasks/objectives/scst.py: 5 candidates per image, rewarded by CIDEr-D against 5 random references, backward and
Adam), with its candidates sampled (the papers') and from a beam search of 5 (`train.scst.candidates: beam`),
<eos> forbidden likewise, median of `--repeats` after a warm-up. Each model runs in its own process so that its
peak RSS (resident memory, includes Python and torch, ~0.4 GiB) is its own.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from crossmodal.data.captions import EOS

sys.path.insert(0, str(Path(__file__).resolve().parent))
import on_device  # noqa: E402
from step_models import AdjustedSteps  # noqa: E402

# name -> (registered model, model_args at the paper's size, batch size in images, source of the sizes)
PAPER_SIZES = {
    "showtell": ("showtell", {"embed_dim": 512, "hidden_dim": 512}, 10, "self-critical.pytorch defaults"),
    "att2in": ("att2in", {"embed_dim": 512, "hidden_dim": 512, "att_hidden_dim": 512}, 10,
               "self-critical.pytorch defaults"),
    "updown": ("updown", {"embed_dim": 1000, "hidden_dim": 1000, "att_hidden_dim": 512}, 100,
               "Up-Down paper: 1000-d LSTMs, 512-d attention, batch 100"),
    "aoanet": ("aoanet", {}, 10, "AoANet paper: D = 1024, 8 heads, 6 refiner layers, batch 10"),
    "xlan": ("xlan", {}, 40, "X-LAN paper: D = 1024, 8 heads, 4 X-Linear encoder blocks + ELU, batch 40"),
    "xtransformer": ("xtransformer", {}, 10, "official config: D = 768, 8 heads, 6 + 6 layers; batch 10 (the paper's 40 "
                     "was killed past 24 GiB here)"),
    "eta": ("eta", {}, 75, "ETA paper: d = 512, 6 + 6 layers (two sub-encoders), 8 heads, 5-10 attributes, "
            "batch 75"),
}
VOCAB, FEATURE_DIM, MAX_REGIONS, MIN_REGIONS, CAPTIONS, WORDS = 10369, 2048, 100, 10, 5, 16
MIN_ATTRIBUTES, MAX_ATTRIBUTES = 5, 10  # ETA's detected words per image
# on a GPU, the paper's batch where the CPU's memory could not hold it: (batch, source of the sizes)
GPU_BATCH = {"xtransformer": (40, "official config: D = 768, 8 heads, 6 + 6 layers; the paper's batch 40")}


class FullLength(AdjustedSteps):
    """The model with <eos> forbidden, so every beam decodes all WORDS steps: random weights would otherwise end
    captions at arbitrary lengths and the throughputs would not compare."""

    def adjust(self, logprobs):
        logprobs = logprobs.clone()
        logprobs[:, EOS] = float("-inf")
        return logprobs


def scst_seconds(model, inputs: dict, images: int, candidates: str, optimizer, repeats: int, dev, amp: bool) -> float:
    """Median seconds of one self-critical step (module docstring) with `candidates` sample or beam."""
    import random

    from crossmodal.metrics.cider import CiderD
    from crossmodal.tasks.objectives.scst import self_critical_batch

    rng = random.Random(0)
    words = ["<pad>", "<bos>", "<eos>", "<unk>"] + [f"w{i}" for i in range(4, VOCAB)]
    references = [[" ".join(rng.choices(words[4:], k=WORDS)) for _ in range(CAPTIONS)] for _ in range(images)]
    cider, generator = CiderD(corpus=references), torch.Generator(dev).manual_seed(0)

    def step() -> None:
        with on_device.autocast(dev, amp):
            loss, _, _ = self_critical_batch(model, inputs, references, cider, words, 5, WORDS, generator,
                                             baseline="mean" if candidates == "beam" else "greedy",
                                             candidates=candidates)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return statistics.median([on_device.seconds(step, dev) for _ in range(repeats + 1)][1:])


def measure(name: str, repeats: int, device: str = "cpu", amp: bool = False, scst: bool = False) -> dict:
    from types import SimpleNamespace

    from crossmodal.data.inputs import Padded
    from crossmodal.decoding.search import beam_search
    from crossmodal.models.registry import build_model
    from crossmodal.tasks.objectives.xe import sequence_loss

    dev = on_device.start(device)
    torch.manual_seed(0)
    model_name, args, images, _ = PAPER_SIZES[name]
    images = GPU_BATCH[name][0] if dev.type == "cuda" and name in GPU_BATCH else images
    model = build_model(name, SimpleNamespace(model=model_name, model_args=args), VOCAB,
                        {"regions": FEATURE_DIM, "attributes": 2}).to(dev)
    counts = torch.randint(MIN_REGIONS, MAX_REGIONS + 1, (images,))
    mask = torch.arange(MAX_REGIONS)[None] < counts[:, None]
    feats = torch.randn(images, MAX_REGIONS, FEATURE_DIM).relu() * mask[..., None]
    inputs = {"regions": Padded(feats, mask)}
    if "attributes" in model.INPUTS:  # ETA: 5-10 detected words per image, rows (word id, probability)
        words = torch.randint(MIN_ATTRIBUTES, MAX_ATTRIBUTES + 1, (images,))
        rows = torch.stack([torch.randint(4, VOCAB, (images, MAX_ATTRIBUTES)).float(),
                            torch.rand(images, MAX_ATTRIBUTES)], -1)
        inputs["attributes"] = Padded(rows, torch.arange(MAX_ATTRIBUTES)[None] < words[:, None])
    inputs = on_device.moved(inputs, dev)
    targets = torch.randint(4, VOCAB, (images * CAPTIONS, WORDS)).to(dev)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

    def train_step() -> None:
        with on_device.autocast(dev, amp):
            loss = sequence_loss(model(inputs, targets, CAPTIONS), targets, 0.2)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    model.train()
    times = []
    for i in range(repeats + 1):
        seconds = on_device.seconds(train_step, dev)
        if i:  # the first step allocates Adam's state and warms the allocator
            times.append(seconds)
    model.eval()
    decode_images = min(images, 10)
    decode_inputs = {name: Padded(values[:decode_images], m[:decode_images]) for name, (values, m) in inputs.items()}
    decode_times, decoded = [], {}

    def decode() -> None:
        decoded["seqs"], _ = beam_search(FullLength(model), decode_inputs, 3, WORDS)

    for i in range(repeats + 1):  # the first call warms up
        seconds = on_device.seconds(decode, dev)
        if i:
            decode_times.append(seconds)
    seqs = decoded["seqs"]
    decode_seconds = statistics.median(decode_times)
    extra = {}
    if scst:
        # <eos> forbidden in the candidates' and the greedy decoding too (FullLength)
        model.step = FullLength(SimpleNamespace(INPUTS=model.INPUTS, step=model.step)).step
        extra = {f"scst_{c}_step_s": round(scst_seconds(model, inputs, images, c, optimizer, repeats, dev, amp), 3)
                 for c in ("sample", "beam")}
    return {
        "parameters_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "batch_images": images,
        "train_step_s": round(statistics.median(times), 3),
        "train_captions_per_s": round(images * CAPTIONS / statistics.median(times), 1),
        "beam3_images_per_s": round(decode_images / decode_seconds, 2),
        "beam3_words": round(float((seqs != 0).sum(1).float().mean()), 1),
        "peak_GiB": round(on_device.peak_gib(dev), 2),
        **extra,
    }


def markdown(report: dict) -> str:
    gpu = report.get("device", "cpu") == "cuda"
    where = f"{report['machine']}" + ("" if gpu else f", {report['threads']} torch threads, torch {report['torch']}")
    precision = "bf16 autocast on the forward pass" if report.get("amp") else "fp32"
    memory = "peak GPU memory allocated (GiB)" if gpu else "peak RSS (GiB)"
    lines = [
        f"# Captioning models at the papers' sizes ({'GPU' if gpu else 'CPU'})", "",
        f"{where}; {precision}. Workload: "
        f"{MIN_REGIONS}-{MAX_REGIONS} regions of {FEATURE_DIM}-d per image (padded, masked; ETA also "
        f"{MIN_ATTRIBUTES}-{MAX_ATTRIBUTES} attribute words), {CAPTIONS} captions of "
        f"{WORDS} words, vocabulary {VOCAB:,}. Train step = forward + cross-entropy + backward + Adam; median of "
        f"{report['repeats']} after a warm-up step. Decoding: beam 3 over 10 images, eval mode, random weights, <eos> forbidden.", "",
        "| model | sizes from | parameters (M) | batch (images) | train step (s) | captions/s | beam-3 images/s "
        f"| words decoded | {memory} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in report["models"].items():
        source = GPU_BATCH[name][1] if gpu and name in GPU_BATCH else PAPER_SIZES[name][3]
        lines.append(f"| {name} | {source} | {r['parameters_M']} | {r['batch_images']} | "
                     f"{r['train_step_s']} | {r['train_captions_per_s']} | {r['beam3_images_per_s']} | "
                     f"{r['beam3_words']} | {r['peak_GiB']} |")
    scst = {name: r for name, r in report["models"].items() if "scst_beam_step_s" in r}
    if scst:
        lines += ["", "Self-critical step (5 candidates per image, CIDEr-D reward, backward, Adam; the paper's "
                  "batch), in seconds:", "",
                  "| model | batch (images) | candidates sampled | from a beam of 5 | ratio |",
                  "|---|---|---|---|---|"]
        lines += [f"| {name} | {r['batch_images']} | {r['scst_sample_step_s']} | {r['scst_beam_step_s']} | "
                  f"{r['scst_beam_step_s'] / r['scst_sample_step_s']:.2f} |" for name, r in scst.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(PAPER_SIZES), choices=list(PAPER_SIZES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out-dir", default=str(Path(__file__).parent / "results"))
    parser.add_argument("--scst", action="store_true", help="also time a self-critical step, sampled and from beams")
    on_device.add_arguments(parser)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # child process: measure one model, print JSON
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.repeats, args.device, args.amp, args.scst)))
        return

    from crossmodal.io import write_json, write_text

    out_dir, stem = Path(args.out_dir), on_device.stem("models", args)
    previous = out_dir / f"{stem}.json"  # models not measured now keep their last figures
    results = json.loads(previous.read_text())["models"] if previous.is_file() else {}
    for name in args.models:
        out = subprocess.run([sys.executable, __file__, "--one", name, "--repeats", str(args.repeats),
                              *(["--scst"] if args.scst else []), *on_device.child_arguments(args)],
                             capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(f"{name} failed:\n{out.stderr}")
        results[name] = json.loads(out.stdout.strip().splitlines()[-1])
        print(name, results[name], flush=True)
    report = {"machine": on_device.machine(args.device), "device": args.device, "amp": args.amp,
              "torch": torch.__version__, "threads": on_device.THREADS, "repeats": args.repeats,
              "models": results}
    write_json(out_dir / f"{stem}.json", report)
    write_text(out_dir / f"{stem}.md", markdown(report))


if __name__ == "__main__":
    main()
