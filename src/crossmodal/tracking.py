"""MLflow set-up and tagging: one place that decides where runs go and what they carry.

- Backend: SQLite at `<repo root>/mlflow.db`, addressed by an absolute URI. Queued DVC experiments run in
  a temporary copy under `<repo>/.dvc/tmp/exps/...` that is deleted afterwards; DVC points `DVC_ROOT` at
  the parent repository there, and a root found inside such a copy is resolved past it: a relative URI
  (or one inside the copy) would silently lose those runs.
- The database is created/upgraded under a file lock: several processes creating it at once
  (`dvc queue start -j 2`) corrupt it otherwise.
- Artifacts go to an explicit absolute location `<repo root>/mlartifacts/<experiment>`.
- Every run is tagged with the DVC stage, the DVC experiment name and the git commit.
- Telemetry is off (set before mlflow is imported).
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from .config import repo_root

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")

EXPERIMENT = "crossmodal-repro"


def tracking_root() -> Path:
    """The repository whose mlflow.db should receive runs (the original repo for queued experiments)."""
    root = Path(os.environ["DVC_ROOT"]).resolve() if os.environ.get("DVC_ROOT") else repo_root()
    parts = root.parts
    for i in range(len(parts) - 2):
        if parts[i] == ".dvc" and parts[i + 1] == "tmp" and parts[i + 2] == "exps":
            return Path(*parts[:i])
    return root


def tracking_uri(root: Path | None = None) -> str:
    root = root or tracking_root()
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
    return client, exp_id


class Run:
    """One MLflow run; use as a context manager so a crash marks it FAILED instead of leaving it RUNNING."""

    def __init__(self, stage: str, params: dict[str, Any], experiment: str = EXPERIMENT, run_name: str | None = None):
        from mlflow.entities import Param, RunTag

        root = tracking_root()
        self.client, exp_id = _client_and_experiment(root, experiment)
        tags = {
            "dvc.stage": stage,
            "dvc.exp_name": os.environ.get("DVC_EXP_NAME", "workspace"),
            "git.commit": _git_commit(),
            "mlflow.runName": run_name or stage,
        }
        self.run_id = self.client.create_run(exp_id, run_name=run_name or stage).info.run_id
        self.client.log_batch(
            self.run_id,
            params=[Param(k, str(v)[:6000]) for k, v in params.items()],
            tags=[RunTag(k, v) for k, v in tags.items()],
        )

    def log_metrics(self, metrics: dict[str, float | None], step: int = 0) -> None:
        """Log a batch of metrics at one step (None values, e.g. unavailable SPICE, are skipped)."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, step) for k, v in metrics.items() if v is not None]
        for start in range(0, len(batch), 1000):
            self.client.log_batch(self.run_id, metrics=batch[start:start + 1000])

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def set_tag(self, key: str, value: str) -> None:
        self.client.set_tag(self.run_id, key, value)

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.client.set_terminated(self.run_id, "FINISHED" if exc_type is None else "FAILED")
