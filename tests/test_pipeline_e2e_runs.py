"""End to end, beside the pipeline: on its own copy of the shared tiny pipeline run (tests/tiny_pipeline.py), a
training run killed and resumed reaches the same metrics and the same early stop, bad input fails with one line and
a non-zero status, queued experiments land in MLflow and leave the workspace alone, and the real-data profile
downloads, converts and trains the world served in the publishers' formats on 127.0.0.1.
"""
from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from tiny_pipeline import (TINY_UPDOWN_TRAIN, addresses, built_copy, commit_all, copy_pipeline, ran_stages, run,
                           set_params)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return built_copy(tmp_path_factory, "runs").repo


@pytest.mark.parametrize("name", ["updown", "updown_scst"])
def test_training_resumed_after_a_crash_reaches_the_same_metrics(repo, monkeypatch, name):
    from crossmodal import config
    from crossmodal.training.trainer import Trainer as cls

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


def test_a_run_killed_inside_a_patience_window_resumes_to_the_same_stop(repo, tmp_path, monkeypatch):
    """Early stopping (patience 2): killed in the first epoch after the best one, the resumed run still stops two
    epochs after the best, before its cap, with the same curve, model and test metrics."""
    from crossmodal import config
    from crossmodal.training.trainer import Trainer as cls

    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["baselines"]["systems"]["updown"]["train"] = {"max_epochs": 20, "patience": 2}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    cfg = config.load(tmp_path / "params.yaml")
    shutil.rmtree(repo / "data/checkpoints", ignore_errors=True)
    straight = cls(cfg, "updown", repo, progress=False).run()
    best, epochs = straight["best_epoch"], len(straight["history"])
    assert epochs == best + 2 < 20, (best, epochs)  # it stopped by patience, not by its cap

    shutil.rmtree(repo / "data/checkpoints")
    original = cls.train_epoch

    def crash_inside_the_window(self, epoch):
        if epoch == best:  # the first epoch after the best (0-based)
            raise KeyboardInterrupt("killed")
        return original(self, epoch)

    monkeypatch.setattr(cls, "train_epoch", crash_inside_the_window)
    with pytest.raises(KeyboardInterrupt):
        cls(cfg, "updown", repo, progress=False).run()
    monkeypatch.setattr(cls, "train_epoch", original)
    resumed = cls(cfg, "updown", repo, progress=False).run()
    assert resumed["history"] == straight["history"] and resumed["best_epoch"] == best
    assert resumed["predictions"] == straight["predictions"] and resumed["test"] == straight["test"]
    shutil.rmtree(repo / "data/checkpoints")


def test_scst_without_its_cross_entropy_model_fails_with_one_line(repo):
    model = repo / "data/models/updown/model.pt"
    backup = model.read_bytes()
    try:
        model.unlink()
        proc = run(repo, sys.executable, "-m", "crossmodal", "train", "--system", "updown_scst", check=False)
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "missing file" in lines[0], proc.stderr
        assert "dvc repro pipelines/baselines/dvc.yaml:updown" in lines[0], proc.stderr
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
        proc = run(repo, sys.executable, "-m", "crossmodal", "train", "--system", "updown", check=False)
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

    model = repo / "data/models/att2in/model.pt"
    before = model.stat().st_mtime_ns
    for lr in ("0.01", "0.005"):  # att2in states its own lr (0.02)
        run(repo, "dvc", "exp", "run", "--queue", "-S", f"baselines.systems.att2in.train.lr={lr}")
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
    assert [r.data.tags["dvc.stage"] for r in runs] == ["pipelines/baselines/dvc.yaml:att2in"] * 2  # nothing else
    assert sorted(r.data.params["baselines.systems.att2in.train.lr"] for r in runs) == ["0.005", "0.01"]
    assert all(r.info.status == "FINISHED" and "test_CIDEr" in r.data.metrics for r in runs)
    assert model.stat().st_mtime_ns == before
    shown = run(repo, "dvc", "exp", "show", "--csv").stdout
    assert shown.count("baselines.systems.att2in.train.lr") == 1 and "0.005" in shown and "0.01" in shown


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
    params["profile"] = "real"
    params["baselines"] = {"systems": {"updown": {**params["baselines"]["systems"]["updown"], "paper": {
        "model_args": PAPER_ARGS, "train": {**TINY_UPDOWN_TRAIN, "max_epochs": 1}}}}}
    params["runtime"]["paper"] = {"lazy_features": True, "loader_workers": 1}
    params["regions"]["published_boxes"] = [1, 100]  # the world has 3-10 boxes, not the published 10-100
    (real / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(real, "git", "init", "-q")
    with LoopbackHTTPServer(tmp_path / "www") as base:
        set_params(real, {"datasets": {name: {"files": [{"url": f"{base}/{archives[name].name}", "extract": True}]}
                                       for name in REAL_SOURCES}})
        run(real, sys.executable, "-m", "crossmodal", "pipelines")
        commit_all(real, "real profile on loopback")
        out = run(real, "dvc", "repro", "pipelines/baselines/dvc.yaml:updown").stdout
    assert ran_stages(out) == sorted(["code", "params", "download-karpathy", "download-coco_captions", "download-butd_adaptive",
                                       "download-butd_fixed36", "synthesize", "prepro_captions",
                                       "pretrain_backbone", "extract_regions", *addresses("baselines", "updown")]), out
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
    assert "Running stage" in run(real, "dvc", "repro", "-f", "download-karpathy").stdout
    # ...and a missing one fails at once, naming where a manual copy goes
    (real / "data/raw/karpathy/caption_datasets.zip").unlink()
    proc = run(real, "dvc", "repro", "-f", "download-karpathy", check=False)
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
    assert run(other, "dvc", "dag", "--dot").stdout == synthetic and "download-coco_captions" in synthetic
