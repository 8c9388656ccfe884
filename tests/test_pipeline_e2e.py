"""End to end: the whole pipeline with `dvc repro` on a tiny profile in a temporary copy of the repository.

One module-scoped `dvc repro` feeds every test here: outputs and tables exist and carry numbers, a second
repro does nothing, a changed variant param reruns only that training and the tables, training resumed
after a crash reaches the same metrics, and bad input fails with one line and a non-zero status.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

TINY = {
    "world": {"images": {"train": 60, "val": 12, "test": 12}, "image_size": 64},
    "backbone": {"epochs": 2, "channels": 16, "feature_dim": 32},
    "captions": {"min_word_count": 2},
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


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("pipeline") / "repo"
    repo.mkdir()
    for name in ("src", "dvc.yaml", "params.yaml", ".dvcignore", ".gitignore"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, repo / name)
    (repo / ".dvc").mkdir()
    shutil.copy(ROOT / ".dvc" / "config", repo / ".dvc" / "config")
    shutil.copy(ROOT / ".dvc" / ".gitignore", repo / ".dvc" / ".gitignore")
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
    run(repo, "git", "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    run(repo, "git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "tiny")
    run(repo, "dvc", "repro")
    run(repo, "git", "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    run(repo, "git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "repro")
    return repo


def test_repro_builds_every_output_and_the_table(repo):
    world = repo / "data/raw/image_world"
    assert (world / "dataset_coco.json").is_file() and (world / "annotations/captions_test.json").is_file()
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
