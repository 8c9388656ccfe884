"""What an SCST step from beams costs, with and without the greedy caption that the mean baseline never reads.

Under `train.scst.baseline: mean` self-critical training decodes no greedy caption (tasks/objectives/scst.py); before
2026-11-28 it decoded one per image at every step, for the log only. This benchmark times steps of SCST from beams
(`train.scst.candidates: beam`, `train.scst.baseline: mean`) on the training batches of a built workspace, from the
system's `init` model: `greedy` decodes the greedy captions first, as the old code did, then runs the step; `none`
runs the step as the code now does. A step is the candidates, their rewards, the loss, backward, clipping and the update
(`Trainer.optimise`). Both start from the same weights and optimizer state in each repeat, alternating, so that the
machine's drift falls on both; medians over the repeats. Each batch size is timed on the first `--steps` batches
of epoch 1's order.

Run from an activated .venv, on a workspace where each system's init model is built (for `eta_scst` and
`xlan_scst`: `dvc repro pipelines/eta/dvc.yaml:eta pipelines/xlan/dvc.yaml:xlan`):
`python benchmarks/bench_scst_steps.py [--workspace .] [--systems eta_scst xlan_scst] [--batches 20 50]
[--steps 15] [--name scst_steps]`. Writes benchmarks/results/<name>.{json,md}.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def measure(workspace: Path, system: str, batch: int, steps: int, repeats: int) -> dict:
    import torch

    from crossmodal.config.loader import load
    from crossmodal.decoding.search import greedy_decode
    from crossmodal.tasks.objectives.scst import self_critical_batch
    from crossmodal.data.feature_sets import to_device
    from crossmodal.training.trainer import Trainer

    torch.set_num_threads(2)
    trainer = Trainer(load(workspace / "params.yaml"), system, workspace, progress=False)
    task, objective = trainer.task, trainer.task.objective
    scst = dataclasses.replace(objective.train.scst, candidates="beam", baseline="mean")
    order = trainer.epoch_order(0)
    shares = [order[i * batch:(i + 1) * batch] for i in range(steps)]
    batches = [(rows, to_device(inputs, trainer.device)) for rows, inputs in task.train_batches(shares)]
    start_state = copy.deepcopy((trainer.model.state_dict(), trainer.optimizer.state_dict()))

    def run(with_greedy: bool) -> float:
        trainer.model.load_state_dict(start_state[0])
        trainer.optimizer.load_state_dict(start_state[1])
        torch.manual_seed(0)
        began = time.perf_counter()
        for rows, inputs in batches:
            if with_greedy:  # what the old code decoded before every step, for the log only
                trainer.model.eval()
                with torch.no_grad():
                    greedy_decode(trainer.model, inputs, task.max_length)
            loss, _, _ = self_critical_batch(trainer.model, inputs, [objective.references[i] for i in rows],
                                             objective.cider, task.words, scst.samples, task.max_length,
                                             baseline=scst.baseline, candidates=scst.candidates)
            trainer.optimise(loss)
        return time.perf_counter() - began

    run(False)  # warm-up
    seconds: dict[str, list[float]] = {"greedy": [], "none": []}
    for _ in range(repeats):
        for variant in seconds:
            seconds[variant].append(run(variant == "greedy"))
    median = {k: statistics.median(v) for k, v in seconds.items()}
    return {"batch_images": batch, "steps": len(batches), "seconds": seconds,
            "ms_per_step": {k: round(1000 * v / len(batches), 1) for k, v in median.items()},
            "ms_per_image": {k: round(1000 * v / (len(batches) * batch), 2) for k, v in median.items()},
            "speedup": round(median["greedy"] / median["none"], 2)}


def write(report: dict, name: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    lines = ["# SCST steps from beams, with and without the unread greedy caption (default profile, synthetic data)",
             "", f"Machine: {report['machine']}; {report['date']}. Each system from its init model, 5 beams per image "
             f"against their mean reward; medians of {report['repeats']} alternating runs of the same steps from the "
             "same weights.", "",
             "| system | images a step | steps | with greedy (ms a step) | without (ms a step) "
             "| with / without (ms an image) | speed-up |", "|---|---:|---:|---:|---:|---|---:|"]
    for r in report["runs"]:
        step, image = r["ms_per_step"], r["ms_per_image"]
        lines.append(f"| {r['system']} | {r['batch_images']} | {r['steps']} | {step['greedy']} | {step['none']} "
                     f"| {image['greedy']} / {image['none']} | {r['speedup']}x |")
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, default=ROOT, help="a built workspace (default: this repository)")
    parser.add_argument("--systems", nargs="+", default=["eta_scst", "xlan_scst"],
                        help="SCST systems, their init models built")
    parser.add_argument("--batches", type=int, nargs="+", default=[20, 50], help="images a step")
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--name", default="scst_steps", help="the results files' name")
    args = parser.parse_args()
    runs = []
    for system in args.systems:
        for batch in args.batches:
            run = measure(args.workspace.resolve(), system, batch, args.steps, args.repeats)
            runs.append({"system": system, **run})
            print(json.dumps(runs[-1]), flush=True)
    from bench_budget import machine

    write({"machine": machine(), "date": time.strftime("%Y-%m-%d"), "repeats": args.repeats, "runs": runs}, args.name)


if __name__ == "__main__":
    main()
