"""End to end: the whole pipeline with `dvc repro` on a tiny profile in a temporary copy of the repository.

One module-scoped `dvc repro` feeds every test here: outputs and tables exist and carry numbers, a second
repro does nothing, a changed variant param reruns only that training and the tables, training resumed
after a crash reaches the same metrics, and bad input fails with one line and a non-zero status.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

TINY = {
    "world": {"images": {"train": 60, "val": 12, "test": 12}, "image_size": 64},
    "backbone": {"epochs": 2, "channels": 16, "feature_dim": 32},
    "vocabularies": {"min5": {"min_word_count": 2}, "min6": {"min_word_count": 2}},
}
TINY_UPDOWN_ARGS = {"embed_dim": 32, "hidden_dim": 32, "att_hidden_dim": 32}
TINY_UPDOWN_TRAIN = {"epochs": 6, "batch_size": 10, "lr": 0.01, "step_size": 100}
TINY_SCST_TRAIN = {"epochs": 2, "batch_size": 10, "lr": 0.001}


def _env(repo: Path) -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = str(repo / "src")
    env["CROSSMODAL_PROGRESS"] = "0"
    env.pop("DVC_ROOT", None)
    return env


def run(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), cwd=repo, env=_env(repo), capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def _merge(base: dict, override: dict) -> dict:
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def set_params(repo: Path, override: dict) -> None:
    path = repo / "params.yaml"
    path.write_text(yaml.safe_dump(_merge(yaml.safe_load(path.read_text()), override), sort_keys=False))


def copy_pipeline(repo: Path) -> Path:
    """The pipeline's code, stages, params and DVC config in a fresh directory (no data, no results)."""
    repo.mkdir(parents=True)
    for name in ("src", "dvc.yaml", "params.yaml", ".dvcignore", ".gitignore"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, repo / name)
    (repo / ".dvc").mkdir()
    shutil.copy(ROOT / ".dvc" / "config", repo / ".dvc" / "config")
    shutil.copy(ROOT / ".dvc" / ".gitignore", repo / ".dvc" / ".gitignore")
    return repo


def commit_all(repo: Path, message: str) -> None:
    run(repo, "git", "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    run(repo, "git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", message)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = copy_pipeline(tmp_path_factory.mktemp("pipeline") / "repo")
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["variants"] = {"updown": params["variants"]["updown"]}
    params["scst"] = {"updown_scst": params["scst"]["updown_scst"]}
    params["reseeds"] = {f"updown_seed{k}": {"of": "updown", "seed": k} for k in (1, 2, 3)}
    params["scst_reseeds"] = {}
    params["ensembles"] = {"updown_ensemble": {"members": ["updown", *params["reseeds"]]}}
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    set_params(repo, {**TINY, "variants": {"updown": {"model_args": TINY_UPDOWN_ARGS, "train": TINY_UPDOWN_TRAIN}},
                      "scst": {"updown_scst": {"train": TINY_SCST_TRAIN}}})
    run(repo, "git", "init", "-q")
    commit_all(repo, "tiny")
    run(repo, "dvc", "repro")
    commit_all(repo, "repro")
    return repo


def test_repro_builds_every_output_and_the_table(repo):
    world = repo / "data/raw/image_world"
    assert (world / "dataset_coco.json").is_file() and (repo / "data/processed/captions/references/captions_test.json").is_file()
    assert (repo / "data/features/regions.h5").is_file()
    metrics = json.loads((repo / "reports/metrics/updown.json").read_text())
    assert set(metrics["test"]) >= {"BLEU-1", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr", "SPICE", "SPICE_status"}
    assert metrics["mlflow_run_id"] and metrics["test"]["CIDEr"] > 0
    results = json.loads(next((repo / "data/predictions/updown").glob("captions_test_*_results.json")).read_text())
    assert len(results) == 12 and set(results[0]) == {"image_id", "caption"}
    refs = json.loads((repo / "reports/metrics/reference_points.json").read_text())
    assert refs["human_ceiling"]["test"]["CIDEr"] > refs["constant_caption"]["test"]["CIDEr"]
    table = (repo / "reports/tables/xlan_table3.md").read_text()
    assert "synthetic" in table and "pending" in table
    assert f"{100 * metrics['test']['CIDEr']:.1f}" in table
    assert "xlan_table3" in (repo / "reports/index.md").read_text()
    assert not list((repo / "data/checkpoints").rglob("*.pt"))  # finished runs leave no checkpoint to resume


def test_reseeded_members_and_their_ensemble(repo):
    members = [json.loads((repo / f"reports/metrics/{m}.json").read_text())
               for m in ("updown", "updown_seed1", "updown_seed2", "updown_seed3")]
    assert len({json.dumps(m["history"], sort_keys=True) for m in members}) == 4  # other seeds, other runs
    ensemble = json.loads((repo / "reports/metrics/updown_ensemble.json").read_text())
    assert ensemble["objective"] == "xe" and ensemble["members"] == ["updown", "updown_seed1", "updown_seed2",
                                                                      "updown_seed3"]
    assert ensemble["mlflow_run_id"] and set(ensemble["test"]) == set(members[0]["test"])
    submission = repo / "data/predictions/updown_ensemble/captions_test2014_updown_ensemble_results.json"
    assert len(json.loads(submission.read_text())) == 12


def test_scst_continues_the_cross_entropy_model_and_fills_the_scst_columns(repo):
    xe_metrics = json.loads((repo / "reports/metrics/updown.json").read_text())
    metrics = json.loads((repo / "reports/metrics/updown_scst.json").read_text())
    assert metrics["objective"] == "scst" and metrics["model"] == "updown" and len(metrics["history"]) == 2
    assert set(metrics["history"][0]) >= {"train_loss", "train_CIDEr_sample", "train_CIDEr_greedy", "val_CIDEr"}
    from crossmodal import config
    from crossmodal.training.scst import ScstTrainer

    start = ScstTrainer(config.load(repo / "params.yaml"), "updown_scst", repo, progress=False).model.state_dict()
    saved = torch.load(repo / "data/models/updown/model.pt", weights_only=False)["state_dict"]
    assert start.keys() == saved.keys() and all(torch.equal(start[k], saved[k]) for k in saved)
    submission = json.loads((repo / "data/predictions/updown_scst/captions_test2014_updown_scst_results.json")
                            .read_text())
    assert len(submission) == 12 and set(submission[0]) == {"image_id", "caption"}
    table = (repo / "reports/tables/aoanet_offline.md").read_text()
    for value in (xe_metrics["test"]["CIDEr"], metrics["test"]["CIDEr"]):
        assert f"| {100 * value:.1f} |" in table
    assert "captions_test2014_updown_scst_results.json" in (repo / "reports/tables/aoanet_online.md").read_text()


def test_second_repro_does_nothing(repo):
    out = run(repo, "dvc", "repro").stdout
    assert "Running stage" not in out, out


def test_changing_one_variant_param_reruns_only_its_training_and_tables(repo):
    status = run(repo, "dvc", "status").stdout
    assert "changed" not in status
    set_params(repo, {"variants": {"updown": {"train": {"lr": 0.001}}}})
    out = run(repo, "dvc", "repro").stdout
    members = [f"reseed@updown_seed{k}" for k in (1, 2, 3)]  # reseeded members share every param but the seed
    assert _stages_run(out) == sorted(["ensemble@updown_ensemble", *members, "scst@updown_scst", "tables",
                                       "train@updown"]), out
    diff = run(repo, "dvc", "params", "diff").stdout
    assert "variants.updown.train.lr" in diff
    assert "CIDEr" in run(repo, "dvc", "metrics", "diff").stdout
    set_params(repo, {"scst": {"updown_scst": {"train": {"lr": 0.002}}}})
    assert _stages_run(run(repo, "dvc", "repro").stdout) == ["scst@updown_scst", "tables"]


def _stages_run(out: str) -> list[str]:
    return sorted(line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage"))


@pytest.mark.parametrize("name", ["updown", "updown_scst"])
def test_training_resumed_after_a_crash_reaches_the_same_metrics(repo, monkeypatch, name):
    from crossmodal import config
    from crossmodal.training.scst import ScstTrainer
    from crossmodal.training.xe import Trainer

    cls = ScstTrainer if name.endswith("_scst") else Trainer
    cfg = config.load(repo / "params.yaml")
    shutil.rmtree(repo / "data/checkpoints", ignore_errors=True)
    straight = cls(cfg, name, repo, progress=False).run()

    shutil.rmtree(repo / "data/checkpoints")
    original = cls.train_epoch

    def crash_in_second_epoch(self, epoch):
        if epoch == 1:
            raise KeyboardInterrupt("killed")
        return original(self, epoch)

    monkeypatch.setattr(cls, "train_epoch", crash_in_second_epoch)
    with pytest.raises(KeyboardInterrupt):
        cls(cfg, name, repo, progress=False).run()
    monkeypatch.setattr(cls, "train_epoch", original)
    resumed = cls(cfg, name, repo, progress=False).run()
    assert resumed["history"] == straight["history"]
    assert resumed["predictions"] == straight["predictions"]
    assert resumed["test"] == straight["test"]


def test_scst_without_its_cross_entropy_model_fails_with_one_line(repo):
    model = repo / "data/models/updown/model.pt"
    backup = model.read_bytes()
    try:
        model.unlink()
        proc = run(repo, sys.executable, "-m", "crossmodal", "train", "--variant", "updown_scst", check=False)
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "missing file" in lines[0] and "train@updown" in lines[0], proc.stderr
    finally:
        model.write_bytes(backup)


@pytest.mark.parametrize("damage, expected", [
    ("truncate_features", "is truncated or not HDF5"),
    ("remove_features", "missing region feature file"),
])
def test_bad_feature_file_fails_with_one_line_and_no_output(repo, damage, expected):
    features = repo / "data/features/regions.h5"
    backup = features.read_bytes()
    metrics = repo / "reports/metrics/updown.json"
    before = metrics.read_bytes()
    try:
        if damage == "truncate_features":
            features.write_bytes(backup[: len(backup) // 2])
        else:
            features.unlink()
        proc = run(repo, sys.executable, "-m", "crossmodal", "train", "--variant", "updown", check=False)
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], proc.stderr
        assert metrics.read_bytes() == before
    finally:
        features.write_bytes(backup)


def test_missing_image_fails_with_one_line(repo):
    image = next((repo / "data/raw/image_world/images/train").glob("*.png"))
    backup = image.read_bytes()
    try:
        image.unlink()
        proc = run(repo, sys.executable, "-m", "crossmodal", "extract-regions", check=False)
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and image.name in lines[0], proc.stderr
    finally:
        image.write_bytes(backup)


def test_queued_experiments_both_land_in_mlflow_and_leave_the_workspace_alone(repo):
    from mlflow.tracking import MlflowClient

    model = repo / "data/models/updown/model.pt"
    before = model.stat().st_mtime_ns
    for lr in ("0.02", "0.005"):
        run(repo, "dvc", "exp", "run", "--queue", "-S", f"variants.updown.train.lr={lr}")
    run(repo, "dvc", "queue", "start", "-j", "2")
    deadline = time.time() + 480
    while time.time() < deadline:
        status = run(repo, "dvc", "queue", "status").stdout
        if "Queued" not in status and "Running" not in status:
            break
        if "Queued" in status and "0 active" in status:  # DVC's worker can exit with tasks left (dvc#10562)
            run(repo, "dvc", "queue", "start", "-j", "2")
        time.sleep(5)
    assert status.count("Success") == 2, status
    client = MlflowClient(f"sqlite:///{repo / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("crossmodal-repro")
    runs = [r for r in client.search_runs([experiment.experiment_id]) if r.data.tags.get("dvc.exp_name") != "workspace"]
    reseeds = [f"reseed@updown_seed{k}" for k in (1, 2, 3)]
    for stage in ("train@updown", "scst@updown_scst", *reseeds):  # each experiment retrains updown and its kin
        logged = [r for r in runs if r.data.tags["dvc.stage"] == stage]
        assert sorted(r.data.params["variant.train.lr"] for r in logged) == ["0.005", "0.02"], stage
        assert all(r.info.status == "FINISHED" and "test_CIDEr" in r.data.metrics for r in logged)
    assert len([r for r in runs if r.data.tags["dvc.stage"] == "ensemble@updown_ensemble"]) == 2
    assert len(runs) == 12
    assert model.stat().st_mtime_ns == before


REAL_SOURCES = ("karpathy", "coco_captions", "butd_adaptive")  # what the captioning pipeline fetches
PAPER_ARGS = {"embed_dim": 16, "hidden_dim": 16, "att_hidden_dim": 16}  # stand-in for the paper's sizes


def test_real_profile_downloads_converts_and_trains_the_world_served_in_the_published_formats(repo, tmp_path):
    """The real-data path without the internet: the tiny world exported as the publishers' archives, served on
    127.0.0.1, downloaded, extracted and converted by the same stages, then trained for one epoch. The converted
    captions, references and features must equal those the synthetic profile built from the same world."""
    from loopback_http import LoopbackHTTPServer

    from crossmodal.data.captions import load_labels, load_vocabulary
    from crossmodal.data.coco import read_coco_captions
    from crossmodal.data.regions import RegionFeatures
    from crossmodal.worlds.export_real import export_real_formats

    archives = export_real_formats(repo / "data/raw/image_world", repo / "data/features/regions.h5", tmp_path / "www")
    real = copy_pipeline(tmp_path / "real")
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params.update(profile="real", scst={}, reseeds={}, scst_reseeds={}, ensembles={})
    params["variants"] = {"updown": {**params["variants"]["updown"], "paper": {
        "model_args": PAPER_ARGS, "train": {**TINY_UPDOWN_TRAIN, "epochs": 1}}}}
    params["compute"]["paper"] = {"lazy_features": True, "loader_workers": 1}
    params["regions"]["published_boxes"] = [1, 100]  # the world has 3-10 boxes, not the published 10-100
    (real / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(real, "git", "init", "-q")
    with LoopbackHTTPServer(tmp_path / "www") as base:
        set_params(real, {"datasets": {name: {"files": [{"url": f"{base}/{archives[name].name}", "extract": True}]}
                                       for name in REAL_SOURCES}})
        commit_all(real, "real profile on loopback")
        out = run(real, "dvc", "repro", "train@updown").stdout
    assert _stages_run(out) == sorted(["download@karpathy", "download@coco_captions", "download@butd_adaptive",
                                       "download@butd_fixed36", "synthesize", "prepro_captions",
                                       "pretrain_backbone", "extract_regions", "train@updown"]), out
    for name in REAL_SOURCES:
        manifest = json.loads((real / f"data/raw/{name}/MANIFEST.json").read_text())
        assert manifest["fetched"] and (real / f"data/raw/{name}/SHA256SUMS").read_text().split()[1] == archives[name].name
    assert not json.loads((real / "data/raw/butd_fixed36/MANIFEST.json").read_text())["fetched"]  # fetch: false
    assert json.loads((real / "data/raw/image_world/PROFILE.json").read_text())["profile"] == "real"

    ours, theirs = repo / "data/processed/captions", real / "data/processed/captions"
    for vocabulary in ("min5", "min6"):
        assert load_vocabulary(theirs / vocabulary / "vocab.json") == load_vocabulary(ours / vocabulary / "vocab.json")
        for split in ("train", "val", "test"):
            a, b = (load_labels(d / vocabulary / "labels.h5", split) for d in (ours, theirs))
            assert np.array_equal(a.image_ids, b.image_ids) and np.array_equal(a.labels, b.labels)
    for split in ("val", "test"):
        refs = [read_coco_captions(d / f"references/captions_{split}.json") for d in (ours, theirs)]
        assert refs[0] == refs[1]
    with RegionFeatures(repo / "data/features/regions.h5") as a, RegionFeatures(real / "data/features/regions.h5") as b:
        assert np.array_equal(a.ids, b.ids) and b.source == "bottom-up-attention tsv"
        assert all(torch.equal(x, y) for x, y in zip(a.load_all(), b.load_all()))

    metrics = json.loads((real / "reports/metrics/updown.json").read_text())
    assert len(metrics["history"]) == 1 and metrics["test"]["CIDEr"] >= 0 and metrics["mlflow_run_id"]
    saved = torch.load(real / "data/models/updown/model.pt", weights_only=False)
    assert {k: saved["model"]["model_args"][k] for k in PAPER_ARGS} == PAPER_ARGS  # the paper block applied
    qualitative = (real / "data/predictions/updown/qualitative.md").read_text()
    assert "COCO 2014" in qualitative and "(`images/test/synth_test_" in qualitative  # paths a reader can open

    # the server is gone: downloaded files are verified and accepted without any network...
    assert "Running stage" in run(real, "dvc", "repro", "-f", "download@karpathy").stdout
    # ...and a missing one fails at once, naming where a manual copy goes
    (real / "data/raw/karpathy/caption_datasets.zip").unlink()
    proc = run(real, "dvc", "repro", "-f", "download@karpathy", check=False)
    assert proc.returncode != 0
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "connection refused" in error[0]
    assert re.search(r"place it at \S*/data/raw/karpathy/caption_datasets\.zip", error[0]), error[0]


def test_both_profiles_have_one_dag(repo, tmp_path):
    other = copy_pipeline(tmp_path / "other")
    shutil.copy(repo / "params.yaml", other / "params.yaml")
    run(other, "git", "init", "-q")
    synthetic = run(other, "dvc", "dag", "--dot").stdout
    set_params(other, {"profile": "real"})
    assert run(other, "dvc", "dag", "--dot").stdout == synthetic and "download@coco_captions" in synthetic
