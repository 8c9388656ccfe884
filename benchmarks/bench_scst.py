"""Why self-critical training does not raise test CIDEr-D here: probes on the committed cross-entropy models.

For each SCST system (default: `updown_scst`, `aoanet_scst`), from its init's best model:
- decoding: validation CIDEr-D greedy and with beam 2, 3 and 5, the mean caption length and the share of captions
  cut at `max_length` (no `<eos>`), for the cross-entropy model;
- training: N epochs of SCST as the pipeline runs it (`default`) and under variants of the recipe that the papers'
  codes differ on, with the validation CIDEr-D (greedy and beam 3) after each epoch:
  - `no_dropout`: every dropout off while sampling (X-LAN's SCST configuration sets dropout to 0; the
    official AoANet code samples in train mode, as the default does);
  - `lr_x0.25` / `lr_x4`: the learning rate a quarter / four times the recipe's;
  - `mean`, `mean_lr_x0.25`, `mean_lr_x4`: the baseline is the mean reward of the image's other samples
    (`train.scst.baseline: mean`) instead of the greedy caption's, at the recipe's learning rate or scaled;
  - `t0.5`, `t0.7`: samples drawn at temperature 0.5 / 0.7 (closer to the greedy caption; the loss keeps the
    model's untempered log-probabilities, as `decoding.search.sample_decode` returns them);
  - `t0.5_on_policy`, `t0.7_on_policy`: the same samples, with the loss on the tempered policy's
    log-probabilities log_softmax(log p / T), so that the gradient is the policy gradient of the distribution
    the samples come from (the model is wrapped for sampling only; the greedy baseline and decoding are as
    before);
  - `samples16`: 16 samples per image instead of 5, at the same number of images per batch;
  - `beam5_mean`, `beam5_greedy`: the candidates are the 5 best beams of a beam search (`train.scst.candidates:
    beam`, `tasks/objectives/scst.beam_candidates`), against the mean of the other beams' rewards (the meshed-memory
    Transformer's SCST) or the greedy caption's;
  - `sample_greedy`: the papers' SCST, multinomial samples against the greedy caption, whatever params.yaml's
    recipe says (`default` runs the recipe).

Each run is in-process on the workspace's built features and models (`dvc repro` first), 2 threads. Writes
benchmarks/results/<name>.{json,md} (default scst). Run from an activated .venv:
`python benchmarks/bench_scst.py [--systems updown_scst aoanet_scst] [--epochs 4] [--variants ...] [--name ...]`.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from step_models import AdjustedSteps  # noqa: E402
VARIANTS = {"default": {}, "no_dropout": {}, "lr_x0.25": {"lr": 0.25}, "lr_x4": {"lr": 4.0},
            "mean": {"baseline": "mean"}, "mean_lr_x0.25": {"baseline": "mean", "lr": 0.25},
            "mean_lr_x4": {"baseline": "mean", "lr": 4.0}, "t0.5": {"temperature": 0.5},
            "t0.7": {"temperature": 0.7}, "samples16": {"samples": 16},
            "t0.5_on_policy": {"temperature": 0.5, "on_policy": True},
            "t0.7_on_policy": {"temperature": 0.7, "on_policy": True},
            "beam5_mean": {"candidates": "beam", "baseline": "mean"},
            "beam5_greedy": {"candidates": "beam", "baseline": "greedy"},
            "sample_greedy": {"candidates": "sample", "baseline": "greedy"}}


class Tempered(AdjustedSteps):
    """The model's step distribution at temperature T, log_softmax(log p / T): sampling from it at temperature 1
    draws what sampling the model at T draws, and returns the tempered log-probabilities."""

    def __init__(self, model, temperature: float):
        super().__init__(model)
        self.temperature = temperature

    def adjust(self, logprobs):
        import torch

        return torch.log_softmax(logprobs / self.temperature, -1)


def decoding(task, model, beams=(1, 2, 3, 5)) -> dict:
    """Validation CIDEr-D by beam size, with caption lengths and cut captions."""
    from crossmodal.metrics.captions import cider_only
    from crossmodal.tasks.captioning import decode_split

    ev, out = task.cfg.evaluation, {}
    for beam in beams:
        predictions = decode_split(model, task.data.inputs["val"], task.words, beam, ev.max_length, ev.batch_size)
        lengths = [len(c.split()) for c in predictions.values()]
        out[f"beam{beam}"] = {"CIDEr": round(100 * cider_only(predictions, task.data.refs["val"]), 2),
                              "mean_words": round(sum(lengths) / len(lengths), 2),
                              "cut_at_max": round(sum(n >= task.max_length for n in lengths) / len(lengths), 3)}
    ref_lengths = [len(r.split()) for refs in task.data.refs["val"].values() for r in refs]
    out["references_mean_words"] = round(sum(ref_lengths) / len(ref_lengths), 2)
    return out


def train(system: str, variant: str, epochs: int) -> dict:
    import torch

    from crossmodal.config.loader import load
    from crossmodal.decoding import search
    from crossmodal.tasks.objectives import scst
    from crossmodal.training.trainer import Trainer

    torch.set_num_threads(2)
    trainer = Trainer(load(ROOT / "params.yaml"), system, ROOT, progress=False)
    objective, knobs = trainer.task.objective, VARIANTS[variant]
    scst_knobs = {k: knobs[k] for k in ("samples", "candidates", "baseline") if k in knobs}  # train.scst's fields
    objective.train = dataclasses.replace(objective.train, scst=dataclasses.replace(objective.train.scst, **scst_knobs))
    if knobs.get("on_policy"):
        def sample_tempered(model, inputs, *args, **kwargs):
            return search.sample_decode(Tempered(model, knobs["temperature"]), inputs, *args, **kwargs)
        scst.sample_decode = sample_tempered
    else:
        scst.sample_decode = functools.partial(search.sample_decode, temperature=knobs.get("temperature", 1.0))
    scale = VARIANTS[variant].get("lr")
    if scale:
        for group in trainer.optimizer.param_groups:
            group["lr"] *= scale
    if variant == "no_dropout":
        for module in trainer.model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
    curve, start = [], time.perf_counter()
    for epoch in range(epochs):
        logged = trainer.train_epoch(epoch)
        trainer.model.eval()
        d = decoding(trainer.task, trainer.model, beams=(1, 3))
        curve.append({"epoch": epoch + 1, "greedy": d["beam1"]["CIDEr"], "beam3": d["beam3"]["CIDEr"],
                      "greedy_words": d["beam1"]["mean_words"],
                      **{k: round(100 * v, 2) for k, v in logged.items() if "CIDEr" in k}})
        print(system, variant, json.dumps(curve[-1]), flush=True)
    return {"curve": curve, "seconds": round(time.perf_counter() - start, 1)}


def write(report: dict, name: str = "scst") -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    lines = ["# Self-critical training probes (default profile, synthetic data)", "",
             f"Machine: {report['machine']}; {report['date']}. Validation split, CIDEr-D x100.", ""]
    for system, r in report["systems"].items():
        lines += [f"## {system} (from `{r['init']}`)", "", "Cross-entropy model, by beam size:", "",
                  "| beam | CIDEr-D | mean words | cut at max length |", "|---:|---:|---:|---:|"]
        lines += [f"| {k[4:]} | {v['CIDEr']} | {v['mean_words']} | {v['cut_at_max']} |"
                  for k, v in r["decoding"].items() if k.startswith("beam")]
        lines += ["", f"References: {r['decoding']['references_mean_words']} words on average.", "",
                  "SCST, after each epoch: greedy / beam 3 (training samples' and greedy captions' CIDEr-D):", ""]
        for variant, v in r["variants"].items():
            cells = ", ".join(f"{c['greedy']:.1f} / {c['beam3']:.1f} ({c.get('train_CIDEr_sample', 0):.0f}, "
                              f"{c.get('train_CIDEr_greedy', 0):.0f})" for c in v["curve"])
            lines.append(f"- `{variant}` ({v['seconds']} s): {cells}")
        lines.append("")
    (RESULTS / f"{name}.md").write_text("\n".join(lines))


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", nargs="+", default=["updown_scst", "aoanet_scst"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--name", default="scst", help="results file stem in benchmarks/results/")
    args = parser.parse_args()
    from bench_budget import machine
    from crossmodal.config.loader import load
    from crossmodal.training.trainer import Trainer

    torch.set_num_threads(2)
    cfg = load(ROOT / "params.yaml")
    report = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "epochs": args.epochs, "systems": {}}
    for system in args.systems:
        start = Trainer(cfg, system, ROOT, progress=False)  # the init's best model, as SCST starts from it
        start.model.eval()
        r = report["systems"][system] = {"init": cfg.systems()[system].init,
                                         "decoding": decoding(start.task, start.model), "variants": {}}
        print(system, json.dumps(r["decoding"]), flush=True)
        for variant in args.variants:
            r["variants"][variant] = train(system, variant, args.epochs)
        write(report, args.name)
    print((RESULTS / f"{args.name}.md").read_text())


if __name__ == "__main__":
    main()
