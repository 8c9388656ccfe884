"""What a change reruns, on a copy of the tests' tiny pipeline (tiny_pipeline.py): a new model file and the runtime
params rerun nothing; an edited model file, a recipe's key, a value stated at a new key and one system's param rerun
exactly the stages that take them, and what depends on those stages' outputs; an edited world reruns only the stage
that writes it.
"""
from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest
from tiny_pipeline import (SEEDS, UPDOWN_FAMILY, commit_all, in_paper, run, set_params, stages_restored,
                           stages_run)

pytestmark = pytest.mark.slow  # reruns of the tiny pipeline's stages


@pytest.fixture(scope="module")
def repo(tiny_repo: Path) -> Path:
    return tiny_repo  # this module's own copy of the session's tiny pipeline


TABLES = ["pipelines/aoanet/dvc.yaml:tables", "index", "pipelines/xlan/dvc.yaml:tables"]  # X-LAN's: Up-Down only


def test_a_new_model_file_and_the_runtime_params_rerun_nothing(repo):
    """No stage imports a model it does not train, and `runtime` (threads, progress bars, lazy reading, loader
    workers) is no stage's dependency: `code` and `params`, which depend on params.yaml as a file, rerun, write
    every closure and values file as it was, and nothing after them runs."""
    new_model = repo / "src/crossmodal/models/newmodel.py"
    new_model.write_text("from .updown import UpDown\n\nMODEL = UpDown\n")
    set_params(repo, {"runtime": {"threads": 2, "progress": False, "lazy_features": True, "loader_workers": 1}})
    values = {p: p.read_bytes() for p in (repo / "data/params").rglob("*.json")}
    try:
        assert _stages_changed(run(repo, "dvc", "status").stdout) == ["code", "params"]
        assert stages_run(run(repo, "dvc", "repro").stdout) == ["code", "params"]
        assert {p: p.read_bytes() for p in (repo / "data/params").rglob("*.json")} == values
    finally:
        new_model.unlink()
        _restore_params(repo)


def test_editing_one_model_file_changes_only_its_systems(repo):
    """Up-Down's file: `code` rewrites the closures that hold it, and then Up-Down's systems (the reseeded members,
    SCST continuing it, their ensemble) change, and with them the tables showing them (downstream, as the next
    test shows); Att2in, whose recipe derives from Up-Down's params, and every other stage do not."""
    model = repo / "src/crossmodal/models/updown.py"
    model.write_text(model.read_text() + "\n# an edit\n")
    try:
        assert _stages_changed(run(repo, "dvc", "status").stdout) == ["code"]
        run(repo, "dvc", "repro", "code")
        assert _stages_changed(run(repo, "dvc", "status").stdout) == sorted(in_paper("baselines", *UPDOWN_FAMILY))
    finally:
        run(repo, "git", "checkout", str(model))
        run(repo, "dvc", "repro", "code")
    assert "changed" not in run(repo, "dvc", "status").stdout
    assert run(repo, "git", "status", "--porcelain").stdout == ""  # the lock is back as it was


def test_a_world_changed_behind_dvcs_back_is_written_again_and_reruns_no_reader(repo):
    """The stages that read the whole image world depend on its manifest (pipeline/manifests.py), not on its files: an
    edited picture is a changed output of `synthesize`, which `dvc repro` restores from its run-cache (or runs
    again); the world every reader read comes back, with the same manifest, so no reader reruns. A reader started by
    hand on the edited world stops."""
    image = next((repo / "data/raw/image_world/images/train").glob("*.png"))
    original = image.read_bytes()
    image.write_bytes(original[::-1])
    try:
        assert _stages_changed(run(repo, "dvc", "status").stdout) == ["synthesize"]
        refused = run(repo, sys.executable, "-m", "crossmodal", "reference-points", check=False)
        assert refused.returncode != 0 and f"first images/train/{image.name}:" in refused.stderr, refused.stderr
        out = run(repo, "dvc", "repro").stdout
        assert stages_run(out) + stages_restored(out) == ["synthesize"], out
    finally:
        if image.read_bytes() != original:
            image.write_bytes(original)
    assert image.read_bytes() == original
    assert "changed" not in run(repo, "dvc", "status").stdout
    assert run(repo, "git", "status", "--porcelain").stdout == ""


def _stages_changed(status: str) -> list[str]:
    return sorted(line[:-1] for line in status.splitlines() if line.endswith(":") and not line[0].isspace())


def _params_changed(repo: Path) -> list[str]:
    """The stages a params change reaches: `params` rewrites the values files (after `code`, which checks the stage
    files on any change of the entries), and `dvc status` then reports the stages whose values file changed."""
    run(repo, "dvc", "repro", "params")
    return [s for s in _stages_changed(run(repo, "dvc", "status").stdout) if s not in ("code", "params")]


def _restore_params(repo: Path) -> None:
    """params.yaml and the lock as committed, and the values files as they were."""
    run(repo, "git", "checkout", "params.yaml", "dvc.lock")
    run(repo, "dvc", "repro", "params")


def test_changing_a_recipe_key_reruns_every_system_on_it_but_one_that_overrides_it(repo):
    """Att2in states its own learning rate; Up-Down takes the recipe's, and its reseeded members take it through
    Up-Down, and so does the toy paper's system. So the recipe's learning rate reruns Up-Down, its members and the
    toy's system, and not Att2in."""
    assert "changed" not in run(repo, "dvc", "status").stdout
    set_params(repo, {"recipes": {"lstm_xe": {"train": {"lr": 0.005}}}})
    try:
        assert _params_changed(repo) == sorted([*in_paper("baselines", "updown", *SEEDS),
                                                "pipelines/toy/dvc.yaml:toy_pool"])
        assert "recipes.lstm_xe.train.lr" in run(repo, "dvc", "params", "diff").stdout
    finally:
        _restore_params(repo)


def test_a_value_stated_at_a_new_key_reruns_the_systems_that_take_it(repo):
    """`-S +baselines.systems.updown.train.lr=…` states at Up-Down a value it took from its recipe. The stage files
    name no params, so they stay as they are; the `params` stage reads the new key into the values files of Up-Down
    and its seed copies (what `Config.sources` now says they read), and exactly those rerun."""
    set_params(repo, {"baselines": {"systems": {"updown": {"train": {"lr": 0.005}}}}})
    try:
        assert run(repo, sys.executable, "-m", "crossmodal", "pipelines", "--check").returncode == 0
        assert _params_changed(repo) == sorted(in_paper("baselines", "updown", *SEEDS))
        values = json.loads((repo / "data/params/baselines/updown_seed2.json").read_text())
        assert values["baselines.systems.updown.train"] == {"lr": 0.005}  # its only key there: the mapping
        assert "recipes.lstm_xe.train.lr" not in values and "recipes.lstm_xe.train" not in values
    finally:
        _restore_params(repo)
    assert "changed" not in run(repo, "dvc", "status").stdout


def test_changing_one_system_param_reruns_only_it_its_continuations_and_tables(repo):
    """A reseeded member's epochs: it and the ensemble it enters; SCST's learning rate: it and the tables showing
    it. Up-Down, the other members and Att2in stay."""
    assert "changed" not in run(repo, "dvc", "status").stdout
    set_params(repo, {"baselines": {"systems": {"updown_seed1": {"train": {"max_epochs": 3}}}}})
    out = run(repo, "dvc", "repro").stdout
    assert stages_run(out) == sorted(["code", "params", *in_paper("baselines", "updown_seed1", "updown_ensemble"),
                                       "index"]), out
    metrics = repo / "reports/metrics/updown_scst.json"
    before = json.loads(metrics.read_text())["mlflow_run_id"]
    set_params(repo, {"baselines": {"systems": {"updown_scst": {"train": {"lr": 0.002}}}}})
    out = run(repo, "dvc", "repro").stdout
    assert stages_run(out) == sorted(["code", "params", *in_paper("baselines", "updown_scst"), *TABLES[:2]]), out
    # the metrics file now names a new MLflow run, trained at the new rate (not its CIDEr, which another CPU's
    # trajectory may leave as it was)
    after = json.loads(metrics.read_text())["mlflow_run_id"]
    with sqlite3.connect(repo / "mlflow.db") as db:
        (rate,) = db.execute("SELECT value FROM params WHERE run_uuid = ? AND key = ?",
                             (after, "baselines.systems.updown_scst.train.lr")).fetchone()
    assert after != before and rate == "0.002"
    commit_all(repo, "member epochs, scst lr")
