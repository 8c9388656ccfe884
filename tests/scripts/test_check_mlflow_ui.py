"""The MLflow UI as a reader sees it: scripts/check_mlflow_ui.py in headless Chromium against a run logged by the
pipeline's own code (tracking.Run, the captioning task's scale and write_captions, the trainer's best-epoch metrics
as training/test_distributed.py checks them), and the runs table filtered by the paper tag that the index stage sets
(reports/runs.py). Skipped where Chromium or the playwright package is missing."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from crossmodal import paths, tracking
from crossmodal.config.loader import load
from crossmodal.reports.runs import tag_runs
from crossmodal.tasks.captioning import Captioning, write_captions
from qualitative_examples import TEST, config, tiny_root

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.is_file(), reason="no /usr/bin/chromium (apt-get install chromium)"),
]


def test_the_ui_opens_on_the_runs_table_and_shows_the_best_epoch_and_the_pictures(tmp_path, monkeypatch):
    pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "dvc.yaml").write_text("stages: {}\n")
    monkeypatch.setenv("DVC_ROOT", str(repo))
    refs = tiny_root(repo, [3, 7])
    task = Captioning.__new__(Captioning)  # its scale, as the trainer applies it
    with tracking.Run("pipelines/baselines/dvc.yaml:tiny", {"system": "tiny"}, run_name="tiny") as run:
        for epoch, value in enumerate([0.9, 1.741897, 1.2], 1):
            run.log_metrics(task.for_tracking({"train_loss": 3.0 / epoch, "val_CIDEr": value}), step=epoch)
        run.log_metrics({"best_epoch": 2, "best_val_CIDEr": task.for_tracking({"val_CIDEr": 1.741897})["val_CIDEr"]})
        write_captions(config(), repo, "tiny", run, refs,
                       {"predictions": {3: "a red circle", 7: "a blue square"}, "test": dict(TEST)})
    cfg = load(ROOT / "params.yaml")
    (repo / paths.METRICS).mkdir(parents=True)
    for name in ("updown", "xlan"):  # two papers' runs (baselines, xlan), tagged as the index stage tags them
        with tracking.Run(cfg.stage(name), {"system": name}, run_name=name) as other:
            other.log_metrics({"test_CIDEr": 100.0})
        (repo / paths.METRICS / f"{name}.json").write_text(json.dumps({"variant": name, "mlflow_run_id": other.run_id}))
    assert tag_runs(cfg, repo) == 2
    shots = tmp_path / "shots"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_mlflow_ui.py"), "--repo", str(repo),
                           "--shots", str(shots)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok    run page: best_epoch = 2" in proc.stdout and "ok    run page: best_val_CIDEr = 174.1897" in proc.stdout  # 7 digits, as real runs log
    # the newest run with a paper tag is xlan's: the table filtered by `tags.paper = 'xlan'` lists it, not the others
    for line in ("the search box holds tags.paper = 'xlan'", "its 1 newest runs by name listed",
                 "none of the 2 other run names listed"):
        assert f"ok    runs by paper xlan: {line}" in proc.stdout, proc.stdout
    assert sorted(p.name for p in shots.iterdir()) == ["run_artifact.png", "run_charts.png", "run_overview.png",
                                                       "runs_by_paper.png", "runs_table.png"]
