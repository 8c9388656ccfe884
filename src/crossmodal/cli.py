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
from .io import InputError, atomic_path, read_json, save_torch, write_json, write_text


def _progress() -> bool:
    return os.environ.get("CROSSMODAL_PROGRESS", "1") != "0"


def _set_threads() -> None:
    import torch

    local = int(os.environ.get("LOCAL_WORLD_SIZE", 1))  # torchrun: processes sharing this machine's cores
    default = min(2, max(1, (os.cpu_count() or 1) // local))
    torch.set_num_threads(int(os.environ.get("CROSSMODAL_THREADS", default)))


REAL_DATA = "COCO 2014 (Karpathy split), bottom-up-attention features"


def _real(cfg) -> bool:
    return cfg.profile == "real"


def _skipped_under_real_profile(path: Path, note: str) -> None:
    """The output of a synthetic-only stage under the real profile: a note, so that `dvc dag` keeps one shape for
    both profiles and nothing downstream can mistake it for data."""
    write_json(path, {"profile": "real", "note": note})


def cmd_download(cfg, root: Path, args) -> None:
    """Fetch one published dataset into data/raw/<dataset>/ (profile real and `fetch: true`), else leave a note."""
    name = args.dataset
    if name not in cfg.datasets:
        raise InputError(f"unknown dataset {name!r}; params.yaml `datasets` declares: {', '.join(sorted(cfg.datasets))}")
    dataset, target = cfg.datasets[name], root / paths.raw(name)
    if not _real(cfg) or not dataset.fetch:
        reason = "profile synthetic" if not _real(cfg) else f"datasets.{name}.fetch is false"
        write_json(target / "MANIFEST.json", {"dataset": name, "fetched": False, "reason": reason, "files": []})
        return
    from .data.download import fetch_dataset

    manifest = fetch_dataset(name, dataset.files, target, progress=_progress())
    print(json.dumps({"dataset": name, "files": [f["name"] for f in manifest["files"]]}))


def cmd_synthesize(cfg, root: Path, args) -> None:
    if _real(cfg):
        with atomic_path(root / paths.WORLD) as tmp:
            _skipped_under_real_profile(tmp / "PROFILE.json", "not generated: profile real reads the published COCO files")
        write_json(root / paths.METRICS / "data_profile.json", {"profile": REAL_DATA, "synthetic": False})
        return
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


def _split_file(cfg) -> Path:
    """The Karpathy split file of the profile: published, or the synthetic world's copy of its layout."""
    return paths.KARPATHY_COCO if _real(cfg) else paths.DATASET_JSON


def cmd_prepro_captions(cfg, root: Path, args) -> None:
    from .data.captions import preprocess
    from .data.coco import read_coco_captions
    from .data.karpathy import read_karpathy

    sources = paths.COCO_CAPTION_FILES if _real(cfg) else [paths.world_annotations(s) for s in ("val", "test")]
    references: dict[int, list[str]] = {}
    for source in sources:
        references.update(read_coco_captions(root / source))
    images = read_karpathy(root / _split_file(cfg))
    summary = preprocess(cfg.vocabularies, images, references, root / paths.CAPTIONS)
    print(json.dumps(summary))


def cmd_pretrain_backbone(cfg, root: Path, args) -> None:
    if _real(cfg):
        note = "not trained: profile real converts the published bottom-up-attention features"
        save_torch({"profile": "real", "note": note}, root / paths.BACKBONE)
        _skipped_under_real_profile(root / paths.METRICS / "backbone.json", note)
        return
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
    if _real(cfg):
        from .data.butd_tsv import convert_butd_tsv, find_tsv_files

        raw = root / paths.raw(cfg.regions.published)
        summary = convert_butd_tsv(find_tsv_files(raw), root / paths.REGIONS,
                                   expected_boxes=cfg.regions.box_range,
                                   progress=_progress())
        print(json.dumps(summary))
        return
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

    images = read_karpathy(root / _split_file(cfg))
    candidates = sorted({" ".join(s.tokens) for img in images if img.split == "train" for s in img.sentences})
    val_refs = read_coco_captions(root / paths.references("val"))
    test_refs = read_coco_captions(root / paths.references("test"))
    caption, val_cider = best_constant_caption(candidates, val_refs)
    constant = evaluate_captions({i: caption for i in test_refs}, test_refs)
    write_json(root / paths.METRICS / "reference_points.json", {
        "constant_caption": {"caption": caption, "chosen_on": "val", "val_CIDEr": val_cider, "test": constant},
        "human_ceiling": {"test": human_ceiling(test_refs)},
    })


def cmd_train(cfg, root: Path, args) -> None:
    """Train one system: a cross-entropy variant, or an SCST run continuing one (params.yaml `scst`); with
    `compute.processes` > 1 this command reruns itself under torchrun, rank 0 writing the outputs."""
    from .tracking import Run
    from .training import distributed

    name = args.variant
    trained = cfg.trained()
    if name not in trained:
        raise InputError(f"unknown variant {name!r}; params.yaml declares: {', '.join(sorted(trained))}")
    if distributed.needs_launch(cfg.compute):
        argv = (["--params", args.params] if args.params else []) + ["train", "--variant", name]
        raise SystemExit(distributed.launch(cfg.compute, argv))
    scst = isinstance(trained[name], config_mod.ScstConfig)
    params = {"variant": name, **config_mod.flatten(trained[name], "scst" if scst else "variant"),
              "evaluation.beam_size": cfg.evaluation.beam_size}
    if scst:  # the model it continues
        params.update(config_mod.flatten(trained[trained[name].init], "variant"))
    stage = cfg.stage_of(name)  # the dvc.yaml stage, for the MLflow tag
    with (distributed.process_group(cfg.compute) as group,
          group.on_main(lambda: Run(stage, params, run_name=name)) as run):  # MLflow starts while the data load
        from .training.scst import ScstTrainer
        from .training.xe import Trainer

        _set_threads()
        trainer = (ScstTrainer if scst else Trainer)(cfg, name, root, progress=_progress())
        result = trainer.run(run)
        if not group.main:
            return
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
    files = {img["image_id"]: img["path"] for img in read_json(root / paths.IMAGES)}
    data = REAL_DATA if _real(cfg) else "synthetic image world"
    lines = [f"# Qualitative examples (test split, {data})", ""]
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
    "download": cmd_download,
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
        if name == "download":
            p.add_argument("--dataset", required=True, help="a key of `datasets` in params.yaml")
    args = parser.parse_args(argv)
    try:
        cfg = config_mod.load(args.params)
        COMMANDS[args.command](cfg, config_mod.repo_root(), args)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
