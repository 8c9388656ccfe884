"""Queued DVC experiments on a copy of the tests' tiny pipeline (tiny_pipeline.py): two run at once, both land in
MLflow with their params, and the workspace is left as it was.
"""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from tiny_pipeline import environment, run

pytestmark = pytest.mark.slow  # queued experiments on the tiny pipeline


@pytest.fixture(scope="module")
def repo(tiny_repo: Path) -> Path:
    return tiny_repo  # this module's own copy of the session's tiny pipeline


def start_workers(repo: Path) -> None:
    """`dvc queue start`, its output in a file: the process DVC forks to watch each worker keeps the command's stdout
    and stderr open until that worker ends, so a pipe read to its end (`run`) waits for the whole queue."""
    log_path = repo.parent / "queue-start.log"
    with open(log_path, "a") as log:
        proc = subprocess.run(["dvc", "queue", "start", "-j", "2"], cwd=repo, env=environment(repo),
                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, timeout=120)
    assert proc.returncode == 0, log_path.read_text()


def worker_logs(repo: Path) -> str:
    """The workers' own logs (DVC writes them under .dvc/tmp/exps/celery/), for a failure message."""
    return "\n".join(f"--- {path.name}\n{path.read_text()[-4000:]}"
                     for path in sorted((repo / ".dvc/tmp/exps").rglob("*.out")))


def test_queued_experiments_both_land_in_mlflow_and_leave_the_workspace_alone(repo):
    from mlflow.tracking import MlflowClient

    model = repo / "data/models/att2in/model.pt"
    before = model.stat().st_mtime_ns
    for lr in ("0.01", "0.005"):  # att2in states its own lr (0.02)
        run(repo, "dvc", "exp", "run", "--queue", "-S", f"baselines.systems.att2in.train.lr={lr}")
    try:
        start_workers(repo)
        deadline = time.time() + 600
        while time.time() < deadline:
            status = run(repo, "dvc", "queue", "status").stdout
            if "Queued" not in status and "Running" not in status:
                break
            if "Queued" in status and "0 active" in status:  # DVC's worker can exit with tasks left (dvc#10562)
                start_workers(repo)
            time.sleep(5)
    finally:
        run(repo, "dvc", "queue", "stop", "--kill", check=False)
    assert status.count("Success") == 2, f"{status}\n{worker_logs(repo)}"
    client = MlflowClient(f"sqlite:///{repo / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("crossmodal-repro")
    runs = [r for r in client.search_runs([experiment.experiment_id]) if r.data.tags.get("dvc.exp_name") != "workspace"]
    assert [r.data.tags["dvc.stage"] for r in runs] == ["pipelines/baselines/dvc.yaml:att2in"] * 2  # nothing else
    assert sorted(r.data.params["baselines.systems.att2in.train.lr"] for r in runs) == ["0.005", "0.01"]
    assert all(r.info.status == "FINISHED" and "test_CIDEr" in r.data.metrics for r in runs)
    assert model.stat().st_mtime_ns == before
    shown = run(repo, "dvc", "exp", "show", "--csv").stdout
    assert shown.count("baselines.systems.att2in.train.lr") == 1 and "0.005" in shown and "0.01" in shown
