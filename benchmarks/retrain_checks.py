"""What a retrain must show (issue 62), read from a built workspace's results and set beside a stale set's.

Run from an activated .venv, after `dvc repro` in the workspace given (default: this repository):
`python benchmarks/retrain_checks.py [--repo DIR] [--stale REV]`. Writes `benchmarks/results/retrain_checks.{json,md}`.

1. **Stopped by patience.** Every trained system's metrics file says how its run ended (`stopped_by`: `patience` or
   `max_epochs`). The attribute detector (`attributes.json`) and the video extractors (`extract_<modality>.json`) ran
   by the same rule with their own caps (`attributes.epochs`, `video.features.epochs`): an epoch count below the cap
   is a stop by patience.
2. **SCST over its cross-entropy model.** Every system trained with `objective: scst` against the system its
   `init` names, on test CIDEr-D (x100).
3. **Answer priors.** A VQA system "sits at a prior" on an answer type when its test accuracy there equals, to 0.05
   points, what answering every question of the type with the type's most frequent training answer scores on the
   same test questions (the official accuracy, metrics/vqa.py). Sitting at both the yes/no and the number priors means
   the system learnt neither.
4. **What changed.** Each system's headline test metric (CIDEr-D, VQA overall, grounding R@1; x100) in the stale set
   (the metrics files at `--stale`, read with `git show`) and now.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from crossmodal.config.loader import load  # noqa: E402
from crossmodal.io import write_json, write_text  # noqa: E402

HEADLINE = {"captioning": "CIDEr", "vqa": "overall", "grounding": "R@1"}  # a task's metric in `test`
TOLERANCE = 0.0005  # answer-prior equality, as a fraction (0.05 points)


def _metrics(folder: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def _stale_metrics(repo: Path, rev: str) -> dict[str, dict]:
    names = subprocess.run(["git", "ls-tree", "--name-only", f"{rev}:reports/metrics"], cwd=repo, check=True,
                           capture_output=True, text=True).stdout.split()
    return {Path(n).stem: json.loads(subprocess.run(["git", "show", f"{rev}:reports/metrics/{n}"], cwd=repo,
                                                    check=True, capture_output=True, text=True).stdout)
            for n in names if n.endswith(".json")}


def stops(cfg, metrics: dict[str, dict]) -> dict:
    """Runs that did not stop by patience, of the systems trained; the detector's and the extractors' epochs."""
    trained = {name: m["stopped_by"] for name, m in metrics.items() if name in cfg.systems() and "stopped_by" in m}
    capped = sorted(name for name, how in trained.items() if how != "patience")
    features = {"attributes": (len(metrics.get("attributes", {}).get("history", [])), cfg.attributes.epochs)}
    for modality in ("frames", "motion", "audio"):
        entry = metrics.get(f"extract_{modality}", {})
        features[f"extract_{modality}"] = (len(entry.get("train_loss", [])), cfg.video.features.epochs)
    return {"runs": len(trained), "not_by_patience": capped,
            "features": {k: {"epochs": e, "cap": cap, "by_patience": 0 < e < cap} for k, (e, cap) in features.items()}}


def scst_pairs(cfg, metrics: dict[str, dict]) -> list[dict]:
    out = []
    for name, system in cfg.systems().items():
        if system.objective != "scst" or name not in metrics or system.init not in metrics:
            continue
        after, before = (100 * metrics[n]["test"]["CIDEr"] for n in (name, system.init))
        out.append({"system": name, "init": system.init, "xe": round(before, 1), "scst": round(after, 1),
                    "gain": round(after - before, 1)})
    return out


def answer_priors(repo: Path, cfg, metrics: dict[str, dict]) -> dict:
    """Each answer type's prior score on the test questions, and the VQA systems at the yes/no and number priors."""
    from crossmodal.data.vqa import annotations_file, read_vqa_annotations
    from crossmodal.metrics.vqa import vqa_accuracy

    folder = repo / "data/raw/vqa_world"
    train, test = (read_vqa_annotations(annotations_file(folder, split)) for split in ("train", "test"))
    prior = {}
    for kind in sorted({a.answer_type for a in test}):
        answer = Counter(a.multiple_choice_answer for a in train if a.answer_type == kind).most_common(1)[0][0]
        scores = [vqa_accuracy(answer, a.answers) for a in test if a.answer_type == kind]
        prior[kind] = {"answer": answer, "score": sum(scores) / len(scores)}
    systems = {}
    for name, system in cfg.systems().items():
        if system.task == "vqa" and name in metrics:
            test_scores = metrics[name]["test"]
            at = [k for k in ("yes/no", "number") if abs(test_scores[k] - prior[k]["score"]) <= TOLERANCE]
            systems[name] = {"yes/no": round(100 * test_scores["yes/no"], 1),
                             "number": round(100 * test_scores["number"], 1), "at_priors": at}
    return {"priors": {k: {"answer": v["answer"], "score": round(100 * v["score"], 1)} for k, v in prior.items()},
            "systems": systems, "at_both": sorted(n for n, s in systems.items() if len(s["at_priors"]) == 2)}


def changes(cfg, now: dict[str, dict], stale: dict[str, dict]) -> list[dict]:
    out = []
    for name, system in cfg.systems().items():
        key = HEADLINE.get(system.task)
        if key and name in now:
            old = stale.get(name, {}).get("test", {}).get(key)
            new = now[name]["test"][key]
            out.append({"system": name, "metric": key, "stale": None if old is None else round(100 * old, 1),
                        "now": round(100 * new, 1)})
    return out


def markdown(r: dict) -> str:
    s, p = r["stops"], r["priors"]
    lines = ["# The retrain's checks (issue 62)", "",
             f"A built workspace at {r['commit'][:7]}; stale set: {r['stale']}. Machine: {r['cpu']}. "
             "Made by benchmarks/retrain_checks.py (its docstring defines each check).", "",
             f"## 1. Stopped by patience: {s['runs'] - len(s['not_by_patience'])} of {s['runs']} runs", ""]
    lines += [f"- not by patience: {', '.join(s['not_by_patience']) or 'none'}"]
    lines += [f"- {k}: {v['epochs']} epochs of a cap of {v['cap']}"
              f" ({'stopped by patience' if v['by_patience'] else 'NOT stopped by patience'})"
              for k, v in s["features"].items()]
    gains = r["scst"]
    lines += ["", f"## 2. SCST over its cross-entropy model: {sum(g['gain'] > 0 for g in gains)} of {len(gains)} "
              "pairs gain", "", "| SCST system | its XE model | XE | SCST | gain |", "|---|---|---:|---:|---:|"]
    lines += [f"| {g['system']} | {g['init']} | {g['xe']} | {g['scst']} | {g['gain']:+.1f} |" for g in gains]
    lines += ["", f"## 3. Answer priors: {len(p['at_both'])} of {len(p['systems'])} VQA systems at both", "",
              "Priors on the test questions: " + "; ".join(f"{k} {v['score']} ('{v['answer']}')"
                                                          for k, v in p["priors"].items()) + ".", "",
              "| VQA system | yes/no | number | at the prior on |", "|---|---:|---:|---|"]
    lines += [f"| {n} | {v['yes/no']} | {v['number']} | {', '.join(v['at_priors']) or '-'} |"
              for n, v in p["systems"].items()]
    lines += ["", "## 4. Headline test metric, stale set and now (x100)", "", "| system | metric | stale | now |",
              "|---|---|---:|---:|"]
    lines += [f"| {c['system']} | {c['metric']} | {'-' if c['stale'] is None else c['stale']} | {c['now']} |"
              for c in r["changes"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=ROOT)
    parser.add_argument("--stale", default="122478b", help="the commit of the stale results (default: 122478b)")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    from crossmodal.machine import cpu_identity, describe

    repo = args.repo.resolve()
    cfg = load(repo / "params.yaml")
    now, stale = _metrics(repo / "reports/metrics"), _stale_metrics(repo, args.stale)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    report = {"commit": commit, "stale": args.stale, "cpu": describe(cpu_identity()),
              "stops": stops(cfg, now), "scst": scst_pairs(cfg, now), "priors": answer_priors(repo, cfg, now),
              "changes": changes(cfg, now, stale)}
    write_json(args.out_dir / "retrain_checks.json", report, indent=1)
    write_text(args.out_dir / "retrain_checks.md", markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
