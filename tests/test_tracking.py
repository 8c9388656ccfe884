"""MLflow logging: absolute SQLite URI under the repo root, tags, batched metrics, artifacts, concurrency."""
import multiprocessing as mp
import time
from pathlib import Path

import pytest

from crossmodal import tracking
from crossmodal.config.loader import origin_root

pytestmark = pytest.mark.slow  # MLflow stores and processes


@pytest.fixture
def repo(tmp_path, monkeypatch):
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.setenv("DVC_EXP_NAME", "exp-test")
    return tmp_path


def test_queued_experiment_copy_logs_to_the_real_repository(tmp_path, monkeypatch):
    copy = tmp_path / ".dvc" / "tmp" / "exps" / "tmpabc123"
    copy.mkdir(parents=True)
    monkeypatch.setenv("DVC_ROOT", str(copy))
    assert origin_root() == tmp_path
    assert tracking.tracking_uri() == f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_run_logs_params_metrics_tags_and_artifacts(repo):
    from mlflow.tracking import MlflowClient

    artifact = repo / "predictions.json"
    artifact.write_text('[{"image_id": 1, "caption": "a red circle"}]')
    with tracking.Run("train@updown", {"lr": 0.001, "epochs": 3}) as run:
        for epoch in (1, 2, 3):
            run.log_metrics({"train_loss": 1.0 / epoch, "val_CIDEr": 0.1 * epoch}, step=epoch)
        run.log_metrics({"test_SPICE": None, "test_CIDEr": 0.5})
        run.log_artifact(artifact)
    client = MlflowClient(tracking.tracking_uri())
    data = client.get_run(run.run_id)
    assert data.info.status == "FINISHED"
    assert data.data.params == {"lr": "0.001", "epochs": "3"}
    assert data.data.tags["dvc.stage"] == "train@updown"
    assert data.data.tags["dvc.exp_name"] == "exp-test"
    assert "git.commit" in data.data.tags
    assert [m.value for m in client.get_metric_history(run.run_id, "val_CIDEr")] == pytest.approx([0.1, 0.2, 0.3])
    assert "test_SPICE" not in data.data.metrics and data.data.metrics["test_CIDEr"] == 0.5
    location = client.get_experiment(data.info.experiment_id).artifact_location
    assert location == (repo / "mlartifacts" / tracking.EXPERIMENT).as_uri()
    assert [f.path for f in client.list_artifacts(run.run_id)] == ["predictions.json"]


def test_the_experiment_carries_the_runs_view_and_images_become_mlflow_images(repo):
    """The README's link opens the runs table through the experiment's shared view (metric columns, best first);
    an image logged by key is what the UI shows among a run's charts."""
    import json

    from mlflow.tracking import MlflowClient
    from PIL import Image

    picture = repo / "3.png"
    Image.new("RGB", (8, 6), (200, 30, 30)).save(picture)
    with tracking.Run("train@tiny", {}) as run:
        run.log_image(picture, "example_3")
    client = MlflowClient(tracking.tracking_uri())
    experiment = client.get_experiment_by_name(tracking.EXPERIMENT)
    view = json.loads(experiment.tags[f"mlflow.sharedViewState.{tracking.RUNS_VIEW}"])
    assert "metrics.`best_val_CIDEr`" in view["selectedColumns"] and view["orderByKey"] == "metrics.`test_CIDEr`"
    assert tracking.runs_view_url(experiment.experiment_id) == (
        f"http://127.0.0.1:5000/#/experiments/{experiment.experiment_id}/runs?workflowType=machine_learning"
        f"&viewStateShareKey={tracking.RUNS_VIEW}")
    images = [f.path for f in client.list_artifacts(run.run_id, "images")]
    assert any(p.startswith("images/example_3+step+0+") and p.endswith(".png") for p in images), images


def test_failed_stage_marks_run_failed(repo):
    from mlflow.tracking import MlflowClient

    with pytest.raises(RuntimeError):
        with tracking.Run("train@x", {}) as run:
            raise RuntimeError("boom")
    assert MlflowClient(tracking.tracking_uri()).get_run(run.run_id).info.status == "FAILED"


def _log_one(root: str, name: str) -> None:
    import os

    os.environ["DVC_ROOT"] = root
    with tracking.Run(f"train@{name}", {"name": name}) as run:
        run.log_metrics({"x": 1.0})


def test_two_processes_creating_the_database_at_once_both_log(repo):
    from mlflow.tracking import MlflowClient

    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_log_one, args=(str(repo), n)) for n in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert all(p.exitcode == 0 for p in procs)
    client = MlflowClient(tracking.tracking_uri())
    exp = client.get_experiment_by_name(tracking.EXPERIMENT)
    names = sorted(r.data.params["name"] for r in client.search_runs([exp.experiment_id]))
    assert names == ["a", "b"]


def _killed_stage(root: str) -> None:
    import os

    os.environ["DVC_ROOT"] = root
    run = tracking.Run("train@killed", {"name": "killed"})
    run.log_metrics({"train_loss": 2.5}, step=1)
    print(run.run_id, flush=True)
    os._exit(1)  # like SIGKILL: no __exit__, no cleanup


def test_killed_stage_leaves_a_failed_run_with_what_it_logged(repo):
    import subprocess
    import sys

    from mlflow.tracking import MlflowClient

    code = f"import tests.test_tracking as t; t._killed_stage({str(repo)!r})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    run_id = proc.stdout.strip().splitlines()[-1]
    client = MlflowClient(tracking.tracking_uri())
    for _ in range(100):  # the worker finishes on its own after the stage died
        run = client.get_run(run_id)
        if run.info.status != "RUNNING":
            break
        time.sleep(0.1)
    assert run.info.status == "FAILED"
    assert run.data.metrics["train_loss"] == 2.5
