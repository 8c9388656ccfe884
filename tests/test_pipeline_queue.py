"""Queued DVC experiments on a copy of the tests' tiny pipeline (tiny_pipeline.py): two run at once, both land in
MLflow with their params, and the workspace is left as it was.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from tiny_pipeline import run


@pytest.fixture(scope="module")
def repo(tiny_repo: Path) -> Path:
    return tiny_repo  # this module's own copy of the session's tiny pipeline


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
