"""`python -m crossmodal <command>`: one command per DVC stage kind.

Each command loads and validates params.yaml, runs its stage, and writes its outputs atomically. Bad input
(params, missing or corrupt files) prints one line `error: ...` and exits with status 2. Heavy modules are
imported inside the commands so that every stage starts quickly.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import config as config_mod
from . import paths
from .io import InputError, read_json, save_torch, write_json, write_text


def _progress() -> bool:
    return os.environ.get("CROSSMODAL_PROGRESS", "1") != "0"


def _set_threads() -> None:
    import torch

    torch.set_num_threads(int(os.environ.get("CROSSMODAL_THREADS", min(2, os.cpu_count() or 1))))


def cmd_synthesize(cfg, root: Path, args) -> None:
    from .worlds.image_world import generate

    summary = generate(cfg.world, root / paths.WORLD, progress=_progress())
    write_json(root / paths.METRICS / "data_profile.json", {
        "profile": "synthetic image world",
        "synthetic": True,
        "images": config_mod.to_dict(cfg.world.images),
        "image_size": cfg.world.image_size,
        "seed": cfg.world.seed,
        "summary": summary,
    })


def cmd_prepro_captions(cfg, root: Path, args) -> None:
    from .data.captions import preprocess

    summary = preprocess(cfg.captions, root / paths.DATASET_JSON, root / paths.CAPTIONS)
    print(json.dumps(summary))


def cmd_pretrain_backbone(cfg, root: Path, args) -> None:
    from .tracking import Run

    with Run("pretrain_backbone", config_mod.flatten(cfg.backbone, "backbone")) as run:  # starts MLflow first
        from .features.backbone import pretrain

        _set_threads()
        result = pretrain(cfg.backbone, root / paths.WORLD, root / paths.BACKBONE, progress=_progress())
        for epoch, loss in enumerate(result.get("train_loss", []), 1):
            run.log_metrics({"train_loss": loss}, step=epoch)
        run.log_metrics({f"val_accuracy_{k}": v for k, v in result["accuracy"].items()})
        run.log_metrics({"train_seconds": result.pop("seconds")})  # timings stay out of the DVC metrics
        write_json(root / paths.METRICS / "backbone.json", {"mlflow_run_id": run.run_id, **result})


def cmd_extract_regions(cfg, root: Path, args) -> None:
    from .features.regions import extract

    _set_threads()
    summary = extract(cfg.regions, root / paths.BACKBONE, root / paths.WORLD, root / paths.REGIONS,
                      progress=_progress())
    print(json.dumps(summary))


def cmd_reference_points(cfg, root: Path, args) -> None:
    from .data.coco import read_coco_captions
    from .data.karpathy import read_karpathy
    from .metrics.captions import evaluate_captions
    from .metrics.reference_points import best_constant_caption, human_ceiling

    images = read_karpathy(root / paths.DATASET_JSON)
    candidates = sorted({" ".join(s.tokens) for img in images if img.split == "train" for s in img.sentences})
    val_refs = read_coco_captions(root / paths.annotations("val"))
    test_refs = read_coco_captions(root / paths.annotations("test"))
    caption, val_cider = best_constant_caption(candidates, val_refs)
    constant = evaluate_captions({i: caption for i in test_refs}, test_refs)
    write_json(root / paths.METRICS / "reference_points.json", {
        "constant_caption": {"caption": caption, "chosen_on": "val", "val_CIDEr": val_cider, "test": constant},
        "human_ceiling": {"test": human_ceiling(test_refs)},
    })


def cmd_train(cfg, root: Path, args) -> None:
    """Train one system: a cross-entropy variant, or an SCST run continuing one (params.yaml `scst`)."""
    from .tracking import Run

    name = args.variant
    trained = cfg.trained()
    if name not in trained:
        raise InputError(f"unknown variant {name!r}; params.yaml declares: {', '.join(sorted(trained))}")
    scst = isinstance(trained[name], config_mod.ScstConfig)
    params = {"variant": name, **config_mod.flatten(trained[name], "scst" if scst else "variant"),
              "evaluation.beam_size": cfg.evaluation.beam_size}
    if scst:  # the model it continues
        params.update(config_mod.flatten(trained[trained[name].init], "variant"))
    stage = cfg.stage_of(name)  # the dvc.yaml stage, for the MLflow tag
    with Run(stage, params, run_name=name) as run:  # MLflow starts while torch and data load
        from .training.scst import ScstTrainer
        from .training.xe import Trainer

        _set_threads()
        trainer = (ScstTrainer if scst else Trainer)(cfg, name, root, progress=_progress())
        result = trainer.run(run)
        save_torch({"variant": name, "model": config_mod.to_dict(trainer.vcfg),
                    "state_dict": trainer.model.state_dict(), "vocab_size": len(trainer.words)},
                   root / paths.MODELS / name / "model.pt")
        _write_system(cfg, root, name, run, trainer.test_refs, {
            "variant": name, "model": trainer.vcfg.model, "objective": "scst" if scst else "xe", **result})
        trainer.checkpoint.unlink(missing_ok=True)  # finished: a rerun (new code, say) must not resume it


def cmd_ensemble(cfg, root: Path, args) -> None:
    """Decode the test split with an ensemble of trained systems (params.yaml `ensembles`)."""
    from .tracking import Run

    name = args.name
    if name not in cfg.ensembles:
        raise InputError(f"unknown ensemble {name!r}; params.yaml declares: {', '.join(sorted(cfg.ensembles))}")
    members = cfg.ensembles[name].members
    params = {"ensemble": name, "members": ",".join(members), "evaluation.beam_size": cfg.evaluation.beam_size}
    with Run(cfg.stage_of(name), params, run_name=name) as run:
        from .training.ensemble import run_ensemble

        _set_threads()
        result = run_ensemble(cfg, name, root)
        refs = result.pop("refs")
        scst = isinstance(cfg.trained()[members[0]], config_mod.ScstConfig)
        _write_system(cfg, root, name, run, refs, {"variant": name, "model": cfg.model_of(members[0]).model,
                                                   "objective": "scst" if scst else "xe", "members": list(members),
                                                   **result})


def _write_system(cfg, root: Path, name: str, run, refs: dict[int, list[str]], metrics: dict) -> None:
    """A finished system's outputs: test predictions (also as the COCO server's submission file), qualitative
    examples and the metrics file; the test metrics and files also go to its MLflow run."""
    from .metrics.captions import write_results

    predictions = metrics.pop("predictions")
    run.log_metrics({f"test_{k}": v for k, v in metrics["test"].items() if isinstance(v, float)})
    run.set_tag("SPICE_status", metrics["test"]["SPICE_status"])
    pred_path = root / paths.PREDICTIONS / name / f"captions_test_{name}_results.json"
    write_results(pred_path, predictions)
    write_results(root / paths.submission(name), predictions)
    run.log_artifact(pred_path)
    examples_path = root / paths.PREDICTIONS / name / "qualitative.md"
    write_text(examples_path, _qualitative(cfg, root, predictions, refs))
    run.log_artifact(examples_path)
    write_json(root / paths.METRICS / f"{name}.json", {**metrics, "mlflow_run_id": run.run_id})


def _qualitative(cfg, root: Path, predictions: dict[int, str], refs: dict[int, list[str]]) -> str:
    files = {img["image_id"]: img["file_name"] for img in read_json(root / paths.SCENE_GRAPHS)["images"]}
    lines = ["# Qualitative examples (test split, synthetic image world)", ""]
    for image_id in sorted(predictions)[: cfg.evaluation.qualitative_examples]:
        lines += [f"## image {image_id} (`{files.get(image_id, '?')}`)", "", f"- **model:** {predictions[image_id]}"]
        lines += [f"- reference: {r}" for r in refs[image_id]] + [""]
    return "\n".join(lines)


def cmd_tables(cfg, root: Path, args) -> None:
    from .reports.tables import build_all

    written = build_all(Path(__file__).parent / "reports" / "paper_tables", root / paths.METRICS,
                        set(cfg.trained()) | set(cfg.ensembles), root / paths.TABLES, root / paths.INDEX)
    for path in written:
        print(path)


COMMANDS = {
    "synthesize": cmd_synthesize,
    "prepro-captions": cmd_prepro_captions,
    "pretrain-backbone": cmd_pretrain_backbone,
    "extract-regions": cmd_extract_regions,
    "reference-points": cmd_reference_points,
    "train": cmd_train,
    "ensemble": cmd_ensemble,
    "tables": cmd_tables,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="crossmodal", description=__doc__.splitlines()[0])
    parser.add_argument("--params", default=None, help="parameter file (default: <repo root>/params.yaml)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        p = sub.add_parser(name)
        if name == "train":
            p.add_argument("--variant", required=True,
                           help="a key of `variants`, `scst`, `reseeds` or `scst_reseeds` in params.yaml")
        if name == "ensemble":
            p.add_argument("--name", required=True, help="a key of `ensembles` in params.yaml")
    args = parser.parse_args(argv)
    try:
        cfg = config_mod.load(args.params)
        COMMANDS[args.command](cfg, config_mod.repo_root(), args)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
