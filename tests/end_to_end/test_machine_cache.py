"""A DVC cache outside the clone (scripts/machine_cache.sh): every stage DVC can run-cache is one, a fresh clone
pointed at the cache restores the finished stages without running them, and a stage killed mid-run leaves nothing
that a later repro would restore. The clones here use caches under pytest's temporary directory, never the user's
machine cache."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
import yaml
from dvc.repo import Repo

from tiny_pipeline import BIN, ROOT, environment, run, set_params, stages, stages_restored, stages_run

pytestmark = pytest.mark.slow  # clones of the tiny pipeline

# The stages kept out of the run-cache on purpose (src/crossmodal/pipelines.py, "Run-cache"), by name or prefix.
NOT_RUN_CACHED = {"download-": "its folder persists and is not cached (large raw data, resumable downloads)",
                  "tables": "Markdown and CSV tables, neither metrics nor plots DVC can read",
                  "index": "Markdown pages; it also tags the MLflow runs of the clone it runs in"}


def _excepted(name: str) -> bool:
    return any(name == k or (k.endswith("-") and name.startswith(k)) for k in NOT_RUN_CACHED)


def why_not_run_cached(stage) -> str | None:
    """Why DVC will not run-cache `stage` (a dvc.stage.Stage), or None. DVC 3's two conditions: `_can_hash` in
    dvc/stage/cache.py (a command, deps and outs; no callback or always-changed stage; local deps; local outs in the
    repository, none persistent) and `Stage.run` in dvc/stage/__init__.py (no `cache: false` output that is neither a
    metric nor a plot). Left out: `_can_hash`'s hashes of the deps, which exist once the deps do."""
    if stage.is_callback or stage.always_changed:
        return "a callback or always-changed stage"
    if not (stage.cmd and stage.deps and stage.outs):
        return "no command, deps or outs"
    if any(d.protocol != "local" or not d.def_path for d in stage.deps):
        return "a dependency that is not a local path"
    for out in stage.outs:
        if out.protocol != "local" or not out.def_path or not out.is_in_repo:
            return f"output {out.def_path} is not a local path in the repository"
        if out.persist:
            return f"output {out.def_path} persists"
        if not out.use_cache and not (out.is_metric or out.is_plot):
            return f"output {out.def_path} is `cache: false` and neither a metric nor a plot"
    return None


def _stage_files_repo(tmp_path: Path) -> Repo:
    """The repository's stage files in a scratch DVC repository (so that DVC writes nothing in the work tree)."""
    for name in ("dvc.yaml", "pipelines", "params.yaml", ".dvc/config"):
        src, dest = ROOT / name, tmp_path / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest)
    for path in tmp_path.glob("pipelines/*/dvc.lock"):
        path.unlink()
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    return Repo(str(tmp_path))


def test_every_generated_stage_is_run_cacheable_but_the_named_kinds(tmp_path):
    repo = _stage_files_repo(tmp_path)
    try:
        found = {s.name: why_not_run_cached(s) for s in repo.index.stages}
    finally:
        repo.close()
    assert len(found) > 40 and {"synthesize", "synthesize_video", "pretrain_backbone", "hoca_figures"} <= set(found)
    assert {n: why for n, why in found.items() if why and not _excepted(n)} == {}
    for kind in NOT_RUN_CACHED:  # each exception is still one (else it should leave this list)
        assert any(why for n, why in found.items() if n == kind or n.startswith(kind) and kind.endswith("-")), kind


def test_the_check_is_dvcs_own_condition(tmp_path):
    """A stage with a `cache: false` output that is neither a metric nor a plot is not saved in the run-cache, the
    same stage with that output declared a metric is (DVC itself, in a scratch repository)."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([str(BIN / "dvc"), "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "in.txt").write_text("x\n")
    runs = tmp_path / ".dvc" / "cache" / "runs"
    for kind, expected in (("outs", False), ("metrics", True)):
        (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"s": {
            "cmd": "echo '{\"a\": 1}' > m.json", "deps": ["in.txt"], kind: [{"m.json": {"cache": False}}]}}}))
        shutil.rmtree(runs, ignore_errors=True)
        subprocess.run([str(BIN / "dvc"), "repro", "-q", "-f"], cwd=tmp_path, check=True, capture_output=True)
        repo = Repo(str(tmp_path))
        try:
            assert (why_not_run_cached(repo.index.stages[0]) is None) == expected
        finally:
            repo.close()
        assert runs.is_dir() == expected, kind


# ------------------------------------------------------------------------------------------------ clones


def _outputs(repo: Path, skip) -> list[Path]:
    """Every file the stages write (root-relative), but those of stages `skip(name)` names."""
    files = []
    for stage in stages(repo).values():
        if skip(stage["name"]):
            continue
        base = (stage["file"].parent / stage.get("wdir", ".")).resolve()
        for entry in [*stage.get("outs", []), *stage.get("metrics", []), *stage.get("plots", [])]:
            path = base / (entry if isinstance(entry, str) else next(iter(entry)))
            found = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
            files += [p.relative_to(repo.resolve()) for p in found]
    return files


@pytest.fixture(scope="module")
def shared(tiny_repo, tmp_path_factory):
    """The tiny pipeline's copy with its DVC cache moved to a 'machine cache' outside it (as setup.sh would have
    placed it before the build), and the cache's path."""
    cache = tmp_path_factory.mktemp("machine") / "dvc"
    shutil.move(tiny_repo / ".dvc" / "cache", cache)
    run(tiny_repo, "dvc", "cache", "dir", "--local", str(cache))
    return tiny_repo, cache


def fresh_clone(origin: Path, dest: Path, cache: Path) -> Path:
    """A clone of `origin` that knows none of its finished stages (no lock files, as when the session was killed
    before committing them), its cache set by scripts/machine_cache.sh from CROSSMODAL_DVC_CACHE."""
    run(origin, "git", "clone", "-q", str(origin), str(dest))
    for lock in [dest / "dvc.lock", *dest.glob("pipelines/*/dvc.lock")]:
        lock.unlink(missing_ok=True)
    (dest / "scripts").mkdir(exist_ok=True)  # the tiny pipeline's repository has no scripts/: the work tree's
    shutil.copy(ROOT / "scripts" / "machine_cache.sh", dest / "scripts")  # (it configures the clone it lies in)
    env = {**environment(dest), "CROSSMODAL_DVC_CACHE": str(cache), "DVC": str(BIN / "dvc")}
    proc = subprocess.run(["bash", "scripts/machine_cache.sh"], cwd=dest, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout == proc.stderr == "", proc.stderr
    return dest


def test_setup_points_a_clone_at_the_machine_cache_once_and_leaves_a_users_own(shared, tmp_path):
    origin, cache = shared
    clone = fresh_clone(origin, tmp_path / "clone", cache)
    assert run(clone, "dvc", "cache", "dir").stdout.strip() == str(cache)
    config = (clone / ".dvc" / "config.local").read_text()
    env = {**environment(clone), "CROSSMODAL_DVC_CACHE": str(tmp_path / "elsewhere"), "DVC": str(BIN / "dvc")}
    subprocess.run(["bash", "scripts/machine_cache.sh"], cwd=clone, env=env, check=True, timeout=60)
    assert (clone / ".dvc" / "config.local").read_text() == config  # a second run changes nothing
    mine = tmp_path / "mine"
    run(clone, "dvc", "cache", "dir", "--local", str(mine))
    subprocess.run(["bash", "scripts/machine_cache.sh"], cwd=clone, env=env, check=True, timeout=60)
    assert run(clone, "dvc", "cache", "dir").stdout.strip() == str(mine)
    assert not (tmp_path / "elsewhere").exists()
    assert ".dvc/config" not in run(clone, "git", "status", "--porcelain").stdout  # config.local: never committed


def test_a_fresh_clone_restores_every_finished_stage_without_running_it(shared, tmp_path):
    """`dvc repro` of every run-cached stage in a fresh clone: only the downloads run (they persist, and write the
    note git holds), every other stage is restored from the machine cache, byte for byte."""
    origin, cache = shared
    clone = fresh_clone(origin, tmp_path / "clone", cache)
    targets = [f"{s['file'].relative_to(origin)}:{s['name']}" for s in stages(origin).values()
               if not _excepted(s["name"]) or s["name"].startswith("download-")]
    out = run(clone, "dvc", "repro", *targets, timeout=300).stdout
    assert all(name.startswith("download-") for name in stages_run(out)), stages_run(out)
    restored = set(stages_restored(out))
    assert {"code", "params", "synthesize", "pretrain_backbone", "extract_regions", "synthesize_video",
            "pipelines/baselines/dvc.yaml:att2in", "pipelines/hoca/dvc.yaml:hoca_figures"} <= restored
    assert len(restored) == len(targets) - sum(t.split(":")[1].startswith("download-") for t in targets)
    files = _outputs(origin, _excepted)
    assert len(files) > 50
    differ = [f for f in files if (clone / f).read_bytes() != (origin / f).read_bytes()]
    assert differ == []


def _run_entries(cache: Path) -> set[Path]:
    return {p.relative_to(cache) for p in (cache / "runs").rglob("*") if p.is_file()}


def test_a_stage_killed_mid_run_runs_again_and_nothing_half_written_is_restored(shared, tmp_path):
    """A backbone with an epoch more (a run the cache has not seen) killed while it trains: the run-cache gains no
    entry and the lock none; a fresh clone then runs the stage again, and only its finished run is cached."""
    origin, cache = shared
    clone = fresh_clone(origin, tmp_path / "clone", cache)
    set_params(clone, {"backbone": {"epochs": 3}})
    run(clone, "dvc", "repro", "synthesize")  # restored; `params` runs (the new value)
    before = _run_entries(cache)
    log = tmp_path / "killed.out"
    with log.open("w") as sink:
        proc = subprocess.Popen(["dvc", "repro", "--single-item", "pretrain_backbone"], cwd=clone, stdout=sink,
                                stderr=subprocess.STDOUT, env=environment(clone), start_new_session=True)
    mlflow_db = clone / "mlflow.db"
    deadline = time.monotonic() + 120
    while not (mlflow_db.exists() and "Running stage 'pretrain_backbone'" in log.read_text()):  # it trains
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert _run_entries(cache) == before
    assert "pretrain_backbone" not in yaml.safe_load((clone / "dvc.lock").read_text())["stages"]

    run(clone, "git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "backbone: 3 epochs")
    again = fresh_clone(clone, tmp_path / "again", cache)  # the stopped clone's params, in a new session
    out = run(again, "dvc", "repro", "pretrain_backbone").stdout
    assert "Stage 'pretrain_backbone' is cached" not in out and "Running stage 'pretrain_backbone'" in out
    assert stages_run(out) == ["pretrain_backbone"]  # its upstream stages restored, as before
    assert len(_run_entries(cache) - before) == 1  # the finished run's entry, nothing of the killed one
    assert len(json.loads((again / "reports" / "metrics" / "backbone.json").read_text())["train_loss"]) == 3
    torch.load(again / "data" / "models" / "backbone.pt", map_location="cpu", weights_only=False)  # whole
