"""How much of a captioning run's spread comes from picking its best epoch on the 250 validation images?

Why: the claims report (reports/claims.md) judges orderings of systems over seeds whose pooled spread is wider than
most claimed effects (issue 62). The trainer keeps the epoch with the best validation CIDEr-D (greedy) and stops by
patience, both decided on a sample of 250 images. A different sample of validation images would pick a different
epoch, and so report a different test CIDEr-D. This measures that selection noise, to decide whether enlarging the
validation split pays (a larger split lengthens every run's validation).

How: in a temporary copy of the repository (`bench_pipeline.copy_repo`, then `dvc repro extract_regions
prepro_captions` there, with `runtime.threads: 1`), Up-Down (`baselines.systems.updown`) trains with the pipeline's
own trainer and task, once per seed, as a derived entry `{of: updown, train: {seed: k, max_epochs: --epochs,
patience: 0}}`: with no stopping rule it runs past its normal stop, and since Up-Down's schedule steps per step (not
on validation) its first epochs are exactly those of the normal run. The trainer's `validate` is wrapped (a
subclass) to record, after every epoch, the per-image CIDEr-D (metrics/cider.py, the scorer the validation metric
averages, after the same PTB tokenization) of the validation split decoded as the trainer selects (greedy) and of
the test split decoded as the tables report (beam `evaluation.beam_size`). The value it returns to the trainer is
the mean of the validation scores, the trainer's own validation metric (checked against `Task.validate` every
10th epoch).

Then, per seed, from the per-image scores V[epoch, image] and T[epoch, image]:
- the pick: Up-Down's own stopping rule (`stopping.EarlyStopping` with its `patience` and `min_delta`)
  replayed on the validation curve: the epoch the normal run keeps, and its test CIDEr-D;
- selection noise: 2,000 bootstrap resamples of the validation images; each replays the rule on its own curve and
  keeps its best epoch; the sd over resamples of the kept epochs' test CIDEr-D (all 250 test images) is the
  selection noise. Also with no stopping rule (the best of all trained epochs), to separate the pick from the stop;
- regret: the test CIDEr-D of the oracle epoch (best on test among the epochs the normal run trained) minus the
  picked epoch's; the oracle is the maximum of noisy test means, so this is an upper estimate;
- the test sample's own standard error: 2,000 bootstrap resamples of the test images at the picked epoch;
- scaling: the same bootstrap drawing m = 125, 250, 500, 1000 validation images (m > 250 draws from the 250 images'
  empirical distribution: what a 2x or 4x split from the same world would give, under that approximation).
- decoders (the seeds of `--cross-seeds`): the same run also records val with beam search and test greedy, and
  the rule replayed on the beam-decoded validation curve shows how much of the regret is the decoders'
  disagreement (greedy selects, beam reports) rather than the samples'.
Per-image CIDEr-D keeps the document frequencies of the whole split, as the earlier test-side measurement did.

Run from an activated .venv: `python benchmarks/bench_selection.py [--seeds 0 1 2] [--cross-seeds 2] [--epochs 40]`;
`--workdir DIR` keeps the prepared copy and the per-seed scores there (a rerun reuses them); `--analyse` recomputes
the statistics from benchmarks/results/selection.npz alone. Writes benchmarks/results/selection.{json,md,npz} (npz:
the per-image scores, float32).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from bench_pipeline import copy_repo

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# the worker runs the prepared copy's code (the workspace's may change meanwhile: other people work in it)
sys.path.insert(0, os.environ.get("BENCH_SELECTION_SRC", str(ROOT / "src")))
from crossmodal.io import atomic_path, write_json, write_text  # noqa: E402

SYSTEM = "updown"
SIZES = (125, 250, 500, 1000)  # validation images drawn per resample
CLAIMS_SEED_SD = 11.3  # reports/claims.md: pooled seed standard deviation of CIDEr-D (24 degrees of freedom)
ISSUE_TEST_SE = 5.7  # issue 62: a run's test-sample standard error, five prediction files, 2,000 resamples


def machine() -> dict:
    """CPU model name, family and model (crossmodal.machine), cores, torch threads of the training runs."""
    from crossmodal.machine import cpu_identity

    cpu = cpu_identity()
    return {"cpu": cpu["model_name"], "family": cpu["family"], "model": cpu["model"], "cores": os.cpu_count(),
            "torch_threads": 1}


# ---------------------------------------------------------------------------------------------- preparation
def prepare(repo: Path) -> None:
    """A copy of the repository with the image world, the captions and the region features built by DVC."""
    if (repo / "data" / "features" / "regions.h5").is_file() and (repo / "data" / "processed" / "captions").is_dir():
        return
    repo.mkdir(parents=True, exist_ok=True)
    copy_repo(repo)
    raw = yaml.safe_load((repo / "params.yaml").read_text())
    raw["runtime"]["threads"] = 1  # no stage depends on `runtime`; the machine is shared
    (repo / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    env = {**os.environ, "CROSSMODAL_PROGRESS": "0", "PYTHONPATH": str(repo / "src"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("DVC_ROOT", None)
    subprocess.run(["dvc", "repro", "extract_regions", "prepro_captions"], cwd=repo, env=env, check=True,
                   stdout=subprocess.DEVNULL)


def variant_params(repo: Path, seed: int, epochs: int) -> tuple[str, Path]:
    """A params file beside the copy's params.yaml declaring `selection_seed<k>`: Up-Down at seed k with no
    stopping rule, `epochs` epochs."""
    raw = yaml.safe_load((repo / "params.yaml").read_text())
    name = f"selection_seed{seed}"
    raw["baselines"]["systems"][name] = {"of": SYSTEM, "train": {"seed": seed, "max_epochs": epochs, "patience": 0}}
    out = repo / f"selection_seed{seed}.yaml"
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return name, out


# ---------------------------------------------------------------------------------------------- the training run
def per_image_scores(task, model, cross: bool) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Per-image CIDEr-D of the val split decoded as the trainer validates (`val`) and of the test split decoded
    as the tables report (`test`), all tokenized in one PTB run; and the seconds each part took. `cross` adds the
    other decoder of each split (`val_beam`, `test_greedy`), to tell the decoders' disagreement from the samples'."""
    from crossmodal.metrics.captions import ptb_tokenize
    from crossmodal.metrics.cider import CiderD
    from crossmodal.tasks.captioning import decode_split

    ev, seconds, predictions = task.cfg.evaluation, {}, {}
    greedy, beam = task.system.train.val_beam, task.cfg.beam_size(task.name)
    decodings = {"val": ("val", greedy), "test": ("test", beam)}
    if cross:
        decodings.update(val_beam=("val", beam), test_greedy=("test", greedy))
    for key, (split, width) in decodings.items():
        start = time.perf_counter()
        predictions[key] = decode_split(model, task.data.inputs[split], task.words, width, ev.max_length,
                                        ev.batch_size)
        seconds[f"decode_{key}"] = time.perf_counter() - start
    start = time.perf_counter()
    lines = {(key, "ref", i): task.data.refs[split][i]
             for key, (split, _) in decodings.items() for i in predictions[key]}
    lines.update({(key, "res", i): [c] for key in decodings for i, c in predictions[key].items()})
    tok = ptb_tokenize(lines)
    seconds["tokenize"] = time.perf_counter() - start
    scores = {}
    for key in decodings:
        start = time.perf_counter()
        ids = sorted(predictions[key])
        scores[key] = CiderD().score([tok[(key, "res", i)][0] for i in ids], [tok[(key, "ref", i)] for i in ids])
        seconds[f"score_{key}"] = time.perf_counter() - start
    return scores, seconds


def worker(repo: Path, params: Path, name: str, out: Path, cross: bool) -> None:
    """Train `name` in this process (1 thread), recording per-image scores after every epoch; saves them to `out`
    (npz) and prints a JSON line with the trainer's result and the checks."""
    import torch

    from crossmodal.config.loader import load
    from crossmodal.training.trainer import Trainer

    torch.set_num_threads(1)

    class Recording(Trainer):
        """The trainer, recording every epoch's per-image val and test CIDEr-D; its validation value is unchanged."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.scores, self.seconds, self.check = {}, [], []
            self.mark = time.perf_counter()

        def validate(self) -> float:
            train_s = time.perf_counter() - self.mark
            scores, seconds = per_image_scores(self.task, self.model, cross)
            value = float(np.mean(scores["val"]))
            if len(self.seconds) % 10 == 9:  # every 10th epoch, the trainer's own metric: the scores must average to it
                own = self.task.validate(self.model)
                self.check.append({"epoch": len(self.seconds) + 1, "task_validate": own, "recorded_mean": value})
                if abs(own - value) > 1e-9:
                    raise SystemExit(f"recorded val mean {value} differs from Task.validate {own}")
            for key, values in scores.items():
                self.scores.setdefault(key, []).append(values)
            self.seconds.append({"train": train_s, **seconds})
            self.mark = time.perf_counter()
            return value

    start = time.perf_counter()
    trainer = Recording(load(params), name, repo, progress=False)
    try:
        result = trainer.run(None)
    finally:
        trainer.checkpoint.unlink(missing_ok=True)
    scores = {key: np.stack(values).astype(np.float32) for key, values in trainer.scores.items()}
    test, best = scores["test"], result["best_epoch"]
    with atomic_path(out) as tmp, open(tmp, "wb") as f:
        np.savez_compressed(f, **scores)
    print(json.dumps({
        "epochs": len(result["history"]), "best_epoch_all": best, "seconds": time.perf_counter() - start,
        "history_val": [row["val_CIDEr"] for row in result["history"]],  # the trainer's exact (float64) curve
        "val_checks": trainer.check,
        # the trainer's final test (pycocoevalcap's Cider) at its best epoch against the recorded per-image mean
        "test_check": {"pycocoevalcap": 100 * result["test"]["CIDEr"],
                       "recorded_mean": 100 * float(test[best - 1].mean())},
        "seconds_per_epoch": {k: float(np.median([s[k] for s in trainer.seconds])) for k in trainer.seconds[0]}}))


def run_seed(repo: Path, seed: int, epochs: int, out: Path, cross: bool) -> dict:
    name, params = variant_params(repo, seed, epochs)
    env = {**os.environ, "CROSSMODAL_PROGRESS": "0", "BENCH_SELECTION_SRC": str(repo / "src"),
           "PYTHONPATH": str(repo / "src"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, __file__, "--worker", name, "--params", str(params), "--repo", str(repo), "--out", str(out)]
    cmd += ["--cross"] if cross else []
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"seed {seed} failed (status {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------- statistics
def replay(curves: np.ndarray, patience: int, min_delta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The trainer's rule on each column of `curves` [epochs, runs]: (kept epoch index, epochs trained, whether the
    rule still wanted more epochs than were recorded). Mirrors Trainer.run: before epoch e the rule may end the run;
    the best is the first epoch of the highest value."""
    from crossmodal.stopping import EarlyStopping

    n_epochs, n_runs = curves.shape
    kept, trained, cut = np.zeros(n_runs, int), np.zeros(n_runs, int), np.zeros(n_runs, bool)
    for r in range(n_runs):
        rule, best, value = EarlyStopping(patience, min_delta), -1, -np.inf
        for e in range(n_epochs):
            if rule.spent(e):
                break
            if curves[e, r] > value:
                best, value = e, curves[e, r]
            rule.update(float(curves[e, r]), e + 1)
        else:
            e = n_epochs
            cut[r] = not rule.spent(n_epochs)
        kept[r], trained[r] = best, e
    return kept, trained, cut


def resample_means(scores: np.ndarray, size: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Means of `scores` [epochs, images] over `resamples` draws of `size` images with replacement: [epochs, B]."""
    counts = rng.multinomial(size, np.full(scores.shape[1], 1.0 / scores.shape[1]), size=resamples)
    return scores.astype(np.float64) @ counts.T / size


def analyse_seed(val: np.ndarray, test: np.ndarray, history: list[float] | None, patience: int, min_delta: float,
                 resamples: int, seed: int) -> dict:
    """Selection noise, regret, test-sample error and scaling of one run (scores on pycocoevalcap's 0-10 scale;
    reported x100 as the tables print them). The normal run's pick replays the rule on the trainer's own curve
    (`history`, float64); the stored per-image scores are float32, and must give the same pick."""
    rng = np.random.default_rng(seed)
    val_mean, test_mean = 100 * val.astype(np.float64).mean(1), 100 * test.astype(np.float64).mean(1)
    exact = val_mean / 100 if history is None else np.asarray(history, dtype=np.float64)
    kept, trained, cut = replay(exact[:, None], patience, min_delta)
    pick, stop = int(kept[0]), int(trained[0])
    if replay(val_mean[:, None] / 100, patience, min_delta)[0][0] != pick:
        raise SystemExit(f"seed {seed}: the stored scores pick another epoch than the trainer's curve")
    oracle = int(np.argmax(test_mean[:stop]))
    test_boot = 100 * resample_means(test[pick:pick + 1], test.shape[1], resamples, rng)[0]
    out = {"epochs_recorded": int(val.shape[0]), "normal_stop": stop, "rule_cut_short": bool(cut[0]),
           "picked_epoch": pick + 1, "picked_val": round(float(val_mean[pick]), 2),
           "picked_test": round(float(test_mean[pick]), 2), "oracle_epoch": oracle + 1,
           "oracle_test": round(float(test_mean[oracle]), 2),
           "regret": round(float(test_mean[oracle] - test_mean[pick]), 2),
           "best_val_epoch_all": int(np.argmax(val_mean)) + 1, "oracle_epoch_all": int(np.argmax(test_mean)) + 1,
           "test_se_at_pick": round(float(test_boot.std(ddof=1)), 2),
           "val_curve": [round(float(v), 2) for v in val_mean], "test_curve": [round(float(v), 2) for v in test_mean],
           "sizes": {}}
    for size in SIZES:
        curves = resample_means(val, size, resamples, rng)
        kept, trained, cut = replay(curves, patience, min_delta)
        free = np.argmax(curves, axis=0)  # no stopping rule: the best of every recorded epoch
        picked, picked_free = test_mean[kept], test_mean[free]
        epochs, counts = np.unique(kept + 1, return_counts=True)
        out["sizes"][str(size)] = {
            "selection_sd": round(float(picked.std(ddof=1)), 2),
            "selection_sd_no_stop": round(float(picked_free.std(ddof=1)), 2),
            "mean_picked_test": round(float(picked.mean()), 2),
            "mean_regret": round(float(test_mean[oracle] - picked.mean()), 2),
            "picked_epoch_quartiles": [int(q) for q in np.percentile(kept + 1, [25, 50, 75])],
            "stop_epoch_quartiles": [int(q) for q in np.percentile(trained, [25, 50, 75])],
            "share_cut_short": round(float(cut.mean()), 4),
            "picked_epochs": {str(int(e)): int(c) for e, c in zip(epochs, counts)},
            "val_se_at_pick": round(float(100 * resample_means(val[pick:pick + 1], size, resamples, rng)[0]
                                          .std(ddof=1)), 2)}
    return out


def analyse(scores: dict[str, dict[str, np.ndarray]], runs: dict, patience: int, min_delta: float,
            resamples: int) -> dict:
    seeds = {k: analyse_seed(v["val"], v["test"], runs[k]["history_val"], patience, min_delta, resamples, int(k))
             for k, v in scores.items()}
    for k, v in scores.items():
        if "val_beam" in v:  # the same run, its epoch kept by beam-decoded validation (the tables' decoder)
            by_beam = analyse_seed(v["val_beam"], v["test"], None, patience, min_delta, resamples, int(k))
            seeds[k]["select_by_val_beam"] = {key: by_beam[key] for key in (
                "normal_stop", "picked_epoch", "picked_val", "picked_test", "oracle_epoch", "oracle_test", "regret",
                "val_curve")}
            seeds[k]["select_by_val_beam"]["selection_sd"] = by_beam["sizes"]["250"]["selection_sd"]
            seeds[k]["select_by_val_beam"]["mean_regret"] = by_beam["sizes"]["250"]["mean_regret"]
            seeds[k]["test_greedy_curve"] = [round(float(x), 2) for x in 100 * v["test_greedy"].astype(float).mean(1)]
    pooled = {}
    for size in SIZES:
        var = float(np.mean([s["sizes"][str(size)]["selection_sd"] ** 2 for s in seeds.values()]))
        pooled[str(size)] = round(var ** 0.5, 2)
    sel = pooled["250"]
    test_se = float(np.mean([s["test_se_at_pick"] ** 2 for s in seeds.values()])) ** 0.5
    seed_var = CLAIMS_SEED_SD ** 2
    return {"seeds": seeds, "pooled_selection_sd": pooled,
            "pooled_test_se": round(test_se, 2),
            "shares_of_seed_variance": {"selection": round(sel ** 2 / seed_var, 3),
                                        "test_sample": round(test_se ** 2 / seed_var, 3)},
            "scaling_vs_250": {k: round(v / sel, 3) if sel else None for k, v in pooled.items()}}


# ---------------------------------------------------------------------------------------------- report
def markdown(report: dict) -> str:
    m, a = report["machine"], report["analysis"]
    lines = ["# Selection noise: picking the best epoch on 250 validation images (Up-Down, synthetic world)", "",
             f"Machine: {m['cpu']} (CPU family {m['family']}, model {m['model']}), {m['cores']} cores, "
             f"{m['torch_threads']} torch thread per run; {report['date']}. Up-Down (`baselines.systems.updown`) "
             f"trained {report['epochs']} epochs per seed with no stopping rule; its own rule (patience "
             f"{report['rule']['patience']}, min_delta {report['rule']['min_delta']}) replayed on each curve. "
             f"{report['resamples']:,} bootstrap resamples. CIDEr-D x100; val greedy, test beam "
             f"{report['test_beam']}. Method: the docstring of benchmarks/bench_selection.py; per-image scores in "
             "selection.npz.", "",
             "| seed | normal stop | picked epoch (val) | picked test | oracle epoch (test) | oracle test | regret | "
             "selection sd | selection sd, no stop rule | test-sample se | mean regret over resamples |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for seed, s in a["seeds"].items():
        z = s["sizes"]["250"]
        lines.append(f"| {seed} | {s['normal_stop']}{' (cut)' if s['rule_cut_short'] else ''} | {s['picked_epoch']} "
                     f"({s['picked_val']}) | {s['picked_test']} | {s['oracle_epoch']} | {s['oracle_test']} | "
                     f"{s['regret']} | {z['selection_sd']} | {z['selection_sd_no_stop']} | {s['test_se_at_pick']} | "
                     f"{z['mean_regret']} |")
    sh = a["shares_of_seed_variance"]
    lines += ["", f"Pooled over seeds: selection sd **{a['pooled_selection_sd']['250']}**, test-sample se "
              f"**{a['pooled_test_se']}** (issue 62's five prediction files: {ISSUE_TEST_SE}). As shares of one run's "
              f"seed variance ({CLAIMS_SEED_SD}² from reports/claims.md): selection {100 * sh['selection']:.1f}%, "
              f"test sample {100 * sh['test_sample']:.1f}%.", "",
              "Validation split size (bootstrap draws of m images; m > 250 from the 250 images' empirical "
              "distribution):", "",
              "| m | selection sd, pooled | x of 250's | " + " | ".join(
                  f"seed {k}: sd / sd no stop / val se / picked-epoch quartiles / resamples cut" for k in a["seeds"])
              + " |", "|---:|---:|---:|" + "---|" * len(a["seeds"])]
    for size in SIZES:
        cells = []
        for s in a["seeds"].values():
            z = s["sizes"][str(size)]
            cells.append(f"{z['selection_sd']} / {z['selection_sd_no_stop']} / {z['val_se_at_pick']} / "
                         f"{'-'.join(map(str, z['picked_epoch_quartiles']))} / {100 * z['share_cut_short']:.1f}%")
        lines.append(f"| {size} | {a['pooled_selection_sd'][str(size)]} | {a['scaling_vs_250'][str(size)]} | "
                     + " | ".join(cells) + " |")
    crossed = {k: s for k, s in a["seeds"].items() if "select_by_val_beam" in s}
    if crossed:
        lines += ["", "Selected by beam-decoded validation instead (the same run; the tables test with beam search):",
                  "", "| seed | normal stop | picked epoch (val beam) | picked test | oracle epoch | oracle test "
                  "| regret | selection sd | mean regret over resamples |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for seed, s in crossed.items():
            b = s["select_by_val_beam"]
            lines.append(f"| {seed} | {b['normal_stop']} | {b['picked_epoch']} ({b['picked_val']}) | "
                         f"{b['picked_test']} | {b['oracle_epoch']} | {b['oracle_test']} | {b['regret']} | "
                         f"{b['selection_sd']} | {b['mean_regret']} |")
    lines += ["", "Curves (x100 per epoch):", ""]
    for seed, s in a["seeds"].items():
        lines += [f"- seed {seed} val: " + " ".join(map(str, s["val_curve"])),
                  f"- seed {seed} test: " + " ".join(map(str, s["test_curve"]))]
        if "select_by_val_beam" in s:
            lines += [f"- seed {seed} val, beam: " + " ".join(map(str, s["select_by_val_beam"]["val_curve"])),
                      f"- seed {seed} test, greedy: " + " ".join(map(str, s["test_greedy_curve"]))]
    lines += ["", "Runs (checks: the recorded val mean against Task.validate every 10th epoch; the recorded test mean "
              "against pycocoevalcap's CIDEr-D at the best epoch of the whole run):", ""]
    for seed, r in report["runs"].items():
        t, sec = r["test_check"], r["seconds_per_epoch"]
        diff = max((abs(c["task_validate"] - c["recorded_mean"]) for c in r["val_checks"]), default=float("nan"))
        lines.append(f"- seed {seed}: {r['epochs']} epochs in {r['seconds'] / 60:.1f} min; val |diff| max {diff:.1e} "
                     f"at epochs {', '.join(str(c['epoch']) for c in r['val_checks'])}; "
                     f"test {t['pycocoevalcap']:.2f} vs {t['recorded_mean']:.2f}; median s/epoch: "
                     + ", ".join(f"{k} {v:.2f}" for k, v in sec.items()))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--cross-seeds", nargs="*", type=int, default=[2],
                        help="seeds that also record val with beam search and test greedy (~0.5 s more per epoch)")
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--workdir", type=Path, default=None, help="keep the prepared copy and scores here")
    parser.add_argument("--analyse", action="store_true", help="only recompute from benchmarks/results/selection.npz")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--params", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--repo", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cross", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.repo, args.params, args.worker, args.out, args.cross)
    from crossmodal.config.loader import load

    rule = load(ROOT / "params.yaml").systems()[SYSTEM].train
    if args.analyse:
        report = json.loads((RESULTS / "selection.json").read_text())
        with np.load(RESULTS / "selection.npz") as z:
            scores = {k: {name.rsplit("_", 1)[0]: z[name] for name in z.files if name.rsplit("_", 1)[1] == k}
                      for k in report["runs"]}
    else:
        report = {"machine": machine(), "date": datetime.date.today().isoformat(), "system": SYSTEM,
                  "epochs": args.epochs, "resamples": args.resamples, "runs": {},
                  "test_beam": load(ROOT / "params.yaml").beam_size(SYSTEM),
                  "rule": {"patience": rule.patience, "min_delta": rule.min_delta}}
        scores = {}
        with tempfile.TemporaryDirectory(prefix="bench-selection-") as tmp:
            work = (args.workdir or Path(tmp)).resolve()
            start = time.perf_counter()
            prepare(work / "repo")
            report["prepare_s"] = round(time.perf_counter() - start, 1)
            for seed in args.seeds:
                out = work / f"scores_seed{seed}_{args.epochs}.npz"
                log = out.with_suffix(".json")
                if not out.is_file():
                    log.write_text(json.dumps(run_seed(work / "repo", seed, args.epochs, out,
                                                       seed in args.cross_seeds)))
                report["runs"][str(seed)] = json.loads(log.read_text())
                with np.load(out) as z:
                    scores[str(seed)] = {name: z[name] for name in z.files}
                print(f"seed {seed}: {report['runs'][str(seed)]}", flush=True)
        with atomic_path(RESULTS / "selection.npz") as tmp, open(tmp, "wb") as f:
            np.savez_compressed(f, **{f"{split}_{k}": v[split] for k, v in scores.items() for split in v})
    report["analysis"] = analyse(scores, report["runs"], rule.patience, rule.min_delta, report["resamples"])
    write_json(RESULTS / "selection.json", report)
    write_text(RESULTS / "selection.md", markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
