"""MLflow set-up and tagging: one place that decides where runs go and what they carry.

- Backend: SQLite at `<repo root>/mlflow.db`, addressed by an absolute URI. Queued DVC experiments run in
  a temporary copy under `<repo>/.dvc/tmp/exps/...` that is deleted afterwards; DVC points `DVC_ROOT` at
  the parent repository there, and a root found inside such a copy is resolved past it: a relative URI
  (or one inside the copy) would silently lose those runs.
- The database is created/upgraded under a file lock: several processes creating it at once
  (`dvc queue start -j 2`) corrupt it otherwise.
- Artifacts go to an explicit absolute location `<repo root>/mlartifacts/<experiment>`.
- Every run is tagged with the DVC stage, the DVC experiment name and the git commit.
- The experiment carries a shared view of the MLflow UI's runs table (`RUNS_VIEW`): the UI shows no metric
  column by default; `runs_view_url` opens the table with the best epoch's and the test metrics, best first.
- Telemetry is off (crossmodal/__init__.py, before MLflow is imported).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .config.loader import origin_root, repo_root

EXPERIMENT = "crossmodal-repro"
RUNS_VIEW = "crossmodal-runs"  # the key of the view (`?viewStateShareKey=`), kept as an experiment tag
RUNS_VIEW_STATE = {  # what the MLflow UI (3.x) restores from the tag: columns `metrics.`<name>``, then the sort
    "selectedColumns": [f"metrics.`{name}`" for name in
                        ("best_val_CIDEr", "best_epoch", "test_CIDEr", "test_BLEU-4", "test_METEOR", "test_ROUGE-L")],
    "orderByKey": "metrics.`test_CIDEr`",
    "orderByAsc": False,
}


def runs_view_url(experiment_id: str, base: str = "http://127.0.0.1:5000") -> str:
    """The runs table of the experiment in the UI's machine-learning workflow (a new browser otherwise opens
    the GenAI overview), with the metric columns of `RUNS_VIEW_STATE`."""
    return f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning&viewStateShareKey={RUNS_VIEW}"


def tracking_uri(root: Path | None = None) -> str:
    root = root or origin_root()
    return f"sqlite:///{(root / 'mlflow.db').resolve()}"


def _git_commit() -> str:
    """The commit of the workspace the stage runs in (a queued experiment's copy has its own)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo_root(), capture_output=True, text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def _client_and_experiment(root: Path, experiment: str):
    """Open the store under the lock (creation/migration is not multi-process safe)."""
    from filelock import FileLock
    from mlflow.tracking import MlflowClient

    with FileLock(str(root / "mlflow.db.lock"), timeout=300):
        client = MlflowClient(tracking_uri(root))
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            artifacts = (root / "mlartifacts" / experiment).resolve()
            exp_id = client.create_experiment(experiment, artifact_location=artifacts.as_uri())
        else:
            exp_id = exp.experiment_id
        view, key = json.dumps(RUNS_VIEW_STATE), f"mlflow.sharedViewState.{RUNS_VIEW}"
        if exp is None or exp.tags.get(key) != view:
            client.set_experiment_tag(exp_id, key, view)
    return client, exp_id


class Run:
    """One MLflow run, logged by a worker process so that importing MLflow and opening the store (~2 s)
    overlaps with the stage's own start-up instead of adding to it.

    Calls are queued to the worker in order over a pipe; leaving the `with` block waits until everything
    is logged. A crash marks the run FAILED (an exception here, or the worker seeing the pipe close without
    an end message when the stage is killed), never leaves it RUNNING.
    """

    def __init__(self, stage: str, params: dict[str, Any], experiment: str = EXPERIMENT, run_name: str | None = None):
        tags = {
            "dvc.stage": stage,
            "dvc.exp_name": os.environ.get("DVC_EXP_NAME", "workspace"),
            "git.commit": _git_commit(),
            "mlflow.runName": run_name or stage,
        }
        self._worker = subprocess.Popen(
            [sys.executable, "-m", "crossmodal.tracking"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self._run_id: str | None = None
        self._send(op="start", root=str(origin_root()), experiment=experiment, run_name=run_name or stage,
                   params={k: str(v)[:6000] for k, v in params.items()}, tags=tags)

    def _send(self, **message: Any) -> None:
        try:
            self._worker.stdin.write(json.dumps(message) + "\n")
            self._worker.stdin.flush()
        except BrokenPipeError:
            raise RuntimeError(f"MLflow tracking worker died (exit {self._worker.wait()}); see its error above") from None

    @property
    def run_id(self) -> str:
        if self._run_id is None:
            line = self._worker.stdout.readline().strip()
            if not line:
                raise RuntimeError(f"MLflow tracking worker died (exit {self._worker.wait()}); see its error above")
            self._run_id = line
        return self._run_id

    def log_metrics(self, metrics: dict[str, float | None], step: int = 0) -> None:
        """Log a batch of metrics at one step (None values, e.g. unavailable SPICE, are skipped)."""
        self._send(op="metrics", metrics={k: float(v) for k, v in metrics.items() if v is not None}, step=step,
                   timestamp=int(time.time() * 1000))

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        self._send(op="artifact", path=str(Path(path).resolve()), artifact_path=artifact_path)

    def log_image(self, path: str | os.PathLike, key: str) -> None:
        """An image file as MLflow's image `key` (step 0): the UI shows it among the run's charts ("Model metrics")
        and side by side with other runs' image of the same key in the experiment's chart view."""
        self._send(op="image", path=str(Path(path).resolve()), key=key)

    def set_tag(self, key: str, value: str) -> None:
        self.set_tags({key: value})

    def set_tags(self, tags: dict[str, str]) -> None:
        self._send(op="tags", tags={k: str(v)[:5000] for k, v in tags.items()})

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.run_id  # noqa: B018  (make sure the run exists before ending it)
        self._send(op="end", status="FINISHED" if exc_type is None else "FAILED")
        self._worker.stdin.close()
        code = self._worker.wait()
        self._worker.stdout.close()
        if code != 0 and exc_type is None:
            raise RuntimeError(f"MLflow tracking worker failed (exit {code}); see its error above")


def _serve() -> None:
    """Worker loop: create the run, then apply the stage's messages in order until `end` or EOF."""
    import logging

    from mlflow.entities import Metric, Param, RunTag

    for name in ("mlflow", "alembic"):  # keep the stage's stderr to real problems
        logging.getLogger(name).setLevel(logging.WARNING)
    start = json.loads(sys.stdin.readline())
    client, exp_id = _client_and_experiment(Path(start["root"]), start["experiment"])
    run_id = client.create_run(exp_id, run_name=start["run_name"]).info.run_id
    client.log_batch(run_id, params=[Param(k, v) for k, v in start["params"].items()],
                     tags=[RunTag(k, v) for k, v in start["tags"].items()])
    print(run_id, flush=True)
    status = "FAILED"  # unless the stage says otherwise: EOF without `end` means it was killed
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["op"] == "metrics":
            batch = [Metric(k, v, msg["timestamp"], msg["step"]) for k, v in msg["metrics"].items()]
            for i in range(0, len(batch), 1000):
                client.log_batch(run_id, metrics=batch[i:i + 1000])
        elif msg["op"] == "artifact":
            client.log_artifact(run_id, msg["path"], msg["artifact_path"])
        elif msg["op"] == "image":
            from PIL import Image

            with Image.open(msg["path"]) as image:
                client.log_image(run_id, image.convert("RGB"), key=msg["key"], step=0)
        elif msg["op"] == "tags":
            client.log_batch(run_id, tags=[RunTag(k, v) for k, v in msg["tags"].items()])
        elif msg["op"] == "end":
            status = msg["status"]
            break
    client.set_terminated(run_id, status)


if __name__ == "__main__":
    from .pipeline.stage_client import HELPERS_ENV, run_on_server

    served = run_on_server(sys.argv[1:], "crossmodal.tracking", HELPERS_ENV)  # forked with MLflow imported
    if served is not None:
        sys.exit(served)
    _serve()
    sys.stdout.flush()
    os._exit(0)  # everything is committed to SQLite; skip MLflow's ~1 s of interpreter-exit hooks
