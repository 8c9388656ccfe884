"""End to end: the whole pipeline with `dvc repro` on a tiny profile (tiny_pipeline.py: built once per session by
the README's first command, `python -m crossmodal.pipeline.repro --jobs 2`). This module checks the build itself:
outputs and tables exist and carry numbers; every stage ran exactly the code it depends on (an import trace of each
stage process against its dvc.yaml deps); a second, plain `dvc repro` does nothing; training resumed after a crash
reaches the same metrics; and bad input fails with one line and a non-zero status. What reruns after a change, queued
experiments and the real profile have modules of their own (test_reruns.py, test_queue.py, test_real_profile.py,
beside this one), each on its own copy of the build, so that both pytest workers share that work.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from tiny_pipeline import in_process_params, run, stages

from crossmodal.environment import summary

# the tiny pipeline's build; one thread for the in-process runs (resume, patience), as the stages
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def repo(tiny_repo: Path) -> Path:
    return tiny_repo  # this module's own copy of the session's tiny pipeline


# modules a stage imports only under the real profile (the tiny run is synthetic)
REAL_PROFILE_ONLY = {"download": {"src/crossmodal/data/__init__.py", "src/crossmodal/data/download.py"},
                     "extract-regions": {"src/crossmodal/data/butd_tsv.py"},
                     "extract-grid": {"src/crossmodal/data/karpathy.py", "src/crossmodal/features/vgg.py"},
                     "train-attributes": {"src/crossmodal/features/vgg.py"}}


def _closure_files(repo: Path, stage: dict) -> dict[str, str]:
    """The files (with their MD5s) of the code closure a stage depends on, as the `code` stage wrote them."""
    (listing,) = [d for d in stage["deps"] if d.startswith("data/code/")]
    return {f: md5 for md5, f in (line.split("  ") for line in (repo / listing).read_text().splitlines())}


def test_every_stage_depends_on_exactly_the_code_it_runs(tiny_build):
    """The import trace of each stage process against the code its stage depends on (its closure's file, which
    lists each file with its MD5): nothing missing, and nothing listed that the stage never imports (but the real
    profile's readers). The `code` stage depends on the files it lists and those it runs, and on params.yaml."""
    repo = tiny_build.repo  # the traces name its files (only read here)
    by_cmd, checked, listed, ran_by_cmd = stages(repo), set(), set(), {}
    for trace in tiny_build.traces.glob("*.json"):
        record = json.loads(trace.read_text())
        if not record["argv"][0].endswith("crossmodal/__main__.py"):  # DVC itself, git hooks
            continue
        argv = record["argv"][1:]
        if "--measure" in argv:  # a process the stage hoca_cost starts per row: part of that stage
            argv = argv[argv.index("hoca-cost"):argv.index("--measure")]
        cmd = "python -m crossmodal " + " ".join(argv)
        ran_by_cmd.setdefault(cmd, set()).update(
            Path(f).resolve().relative_to(repo.resolve()).as_posix() for f in record["files"])
    for cmd, ran in ran_by_cmd.items():
        stage = by_cmd[cmd]
        checked.add(cmd)
        if stage["name"] == "code":
            code_stage = (stage, ran)
            continue
        assert not [d for d in stage["deps"] if d.startswith("src/") and not d.endswith(".yaml")], stage["name"]
        files = _closure_files(repo, stage)
        assert all(hashlib.md5((repo / f).read_bytes()).hexdigest() == md5 for f, md5 in files.items())
        listed |= set(files)
        code = set(files)
        assert ran <= code, f"{stage['name']}: imports {sorted(ran - code)} but does not depend on them"
        if stage["name"] == "params":  # it runs the stage-file generator, whose function-level imports of the
            continue  # report modules (for the tables' and figures' paths) do not all run when only listing keys
        assert code - ran == REAL_PROFILE_ONLY.get(cmd.split()[3], set()), f"{stage['name']}: {sorted(code - ran)}"
    assert checked == set(by_cmd)  # every stage ran once and was checked
    stage, ran = code_stage
    assert set(stage["deps"]) == listed | ran | {"params.yaml"}
    assert run(repo, sys.executable, "-m", "crossmodal", "pipelines", "--check").returncode == 0


def test_the_build_scored_every_captioning_stage_on_one_shared_meteor(tiny_build):
    """Each captioning system's training or decoding stage and the reference points asked the scheduler's METEOR
    (their scores are checked against pycocoevalcap's own in metrics/test_captions.py and test_meteor_server.py)."""
    systems = sum(1 for s in stages(tiny_build.repo).values() if s["cmd"].split()[3] in ("train", "ensemble")
                  and json.loads((tiny_build.repo / f"reports/metrics/{s['cmd'].split()[-1]}.json").read_text())
                  .get("test", {}).get("METEOR") is not None)
    log = tiny_build.log.read_text()
    scorings = int(re.search(r"METEOR: one JVM for (\d+) scoring", log).group(1))
    assert systems >= 9 and scorings > systems, log[-300:]


def test_repro_builds_every_output_and_the_table(repo):
    world = repo / "data/raw/image_world"
    assert (world / "dataset_coco.json").is_file()
    assert (repo / "data/processed/captions/references/captions_test.json").is_file()
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
    index = (repo / "reports/index.md").read_text()
    assert "xlan_table3" in index
    # every number names where it was made: metrics files, the MLflow run's tags, table and index headings
    environment = metrics["environment"]
    assert environment["threads"] >= 1 and environment["versions"]["torch"] == torch.__version__
    for path in (repo / "reports/metrics").glob("*.json"):  # every stage's, data profiles and extractors included
        assert json.loads(path.read_text())["environment"]["cpu_id"], path.name
    line = f"**Computed on: {summary(environment)}, "
    assert line in table and line in index
    with sqlite3.connect(repo / "mlflow.db") as db:
        tags = dict(db.execute("SELECT key, value FROM tags WHERE run_uuid = ?", (metrics["mlflow_run_id"],)))
    assert tags["env.cpu_capability"] == environment["cpu_capability"]
    assert tags["env.versions.torch"] == torch.__version__
    assert not list((repo / "data/checkpoints").rglob("*.pt"))  # finished runs leave no checkpoint to resume


def test_eta_reads_the_detected_attributes_and_fuses_with_another_model(repo):
    """The ETA path: the grid and attribute stages write their feature sets, the detector reports precision@k and
    mAP on test, ETA trains on the grid and the detected attributes, and a late fusion of two different models (ETA
    and Transformer_s) decodes with the union of their inputs."""
    from crossmodal.data.regions import RegionFeatures

    with RegionFeatures(repo / "data/features/grid.h5") as grid:
        assert grid.feature_dim == 32 and set(grid.num_boxes.tolist()) == {9}  # backbone map pooled to 3 x 3
    detector = json.loads((repo / "reports/metrics/attributes.json").read_text())
    assert 0 < detector["test"]["precision_at_4"] <= 1 and 0 < detector["test"]["mAP"] <= 1
    assert len(detector["words"]) == 12 and detector["mlflow_run_id"]
    words = json.loads((repo / "data/processed/captions/min5/vocab.json").read_text())["words"]
    with RegionFeatures(repo / "data/features/attributes.h5") as detected:
        rows, _ = detected.get(int(detected.ids[0]))
        assert rows.shape == (4, 2) and {words[int(i)] for i in rows[:, 0]} <= set(detector["words"])
        assert np.all(np.diff(rows[:, 1]) <= 0)  # most probable first
    fused = json.loads((repo / "reports/metrics/eta_and_ts.json").read_text())
    assert fused["members"] == ["eta", "transformer_s"] and fused["model"] == "eta"
    assert json.loads((repo / "reports/metrics/eta.json").read_text())["stopped_by"]
    table = (repo / "reports/tables/eta_table2.md").read_text()
    assert f"{100 * json.loads((repo / 'reports/metrics/eta.json').read_text())['test']['CIDEr']:.1f}" in table


def test_ban_answers_the_vqa_worlds_questions_through_the_shared_trainer(repo):
    metrics = json.loads((repo / "reports/metrics/ban_8_glove_counter.json").read_text())
    assert metrics["task"] == "vqa" and set(metrics["test"]) <= {"overall", "yes/no", "number", "other"}
    assert 0 < metrics["test"]["overall"] <= 1 and len(metrics["history"]) == 1
    test_questions = json.loads((repo / "data/raw/vqa_world/v2_OpenEnded_mscoco_test-dev2015_questions.json")
                                .read_text())["questions"]
    results = json.loads((repo / "data/predictions/ban_8_glove_counter/"
                          "vqa_OpenEnded_mscoco_test-dev2015_ban_8_glove_counter_results.json").read_text())
    assert sorted(r["question_id"] for r in results) == sorted(q["question_id"] for q in test_questions)
    table = (repo / "reports/tables/ban_testdev.md").read_text()
    assert f"{100 * metrics['test']['overall']:.2f}" in table and "VQA 2.0" in table
    assert (repo / "data/features/word_vectors.txt").read_text().split("\n", 1)[0].count(" ") == 16
    grounding = json.loads((repo / "reports/metrics/ban_flickr.json").read_text())
    assert grounding["task"] == "grounding" and {"R@1", "R@5", "R@10"} <= set(grounding["test"])
    assert 0 <= grounding["test"]["R@1"] <= grounding["test"]["R@5"] <= grounding["test"]["R@10"] <= 1
    assert f"{100 * grounding['test']['R@1']:.1f}" in (repo / "reports/tables/ban_flickr_recall.md").read_text()


def test_hoca_captions_the_video_worlds_clips_through_the_captioning_task(repo):
    """The video world's files, its three extractors' feature sets, HOCA trained on them as any captioner (its
    references and predictions keyed by clip), its figures, its cost row and its tables."""
    from crossmodal.data.regions import RegionFeatures

    assert list((repo / "data/raw/video_world/msvd/YouTubeClips").glob("*.avi"))
    for modality in ("frames", "motion", "audio"):
        with RegionFeatures(repo / f"data/features/msvd_{modality}.h5") as features:
            assert features.feature_dim == 8 and set(features.num_boxes.tolist()) == {4}
        assert json.loads((repo / f"reports/metrics/extract_{modality}.json").read_text())["val_accuracy"]
    metrics = json.loads((repo / "reports/metrics/l_hoca_ubt_msvd.json").read_text())
    assert metrics["model"] == "hoca" and metrics["test"]["CIDEr"] >= 0 and len(metrics["history"]) == 1
    with sqlite3.connect(repo / "mlflow.db") as db:  # decoded with its recipe's beam (5), Up-Down with the shared 3
        beams = dict(db.execute("SELECT r.name, p.value FROM runs r JOIN params p ON p.run_uuid = r.run_uuid "
                                "WHERE p.key = 'beam_size'"))
    assert beams["l_hoca_ubt_msvd"] == "5" and beams["updown"] == beams["updown_ensemble"] == "3"
    refs = json.loads((repo / "data/processed/video/msvd/references/captions_test.json").read_text())
    results = json.loads((repo / "data/predictions/l_hoca_ubt_msvd/captions_test_l_hoca_ubt_msvd_results.json")
                         .read_text())
    assert sorted(r["image_id"] for r in results) == sorted(i["id"] for i in refs["images"])
    assert "msvd-like, synthetic video world" in (repo / "data/predictions/l_hoca_ubt_msvd/qualitative.md").read_text()
    assert not (repo / "data/processed/captions/msvd").exists()  # video vocabularies are prepro_video's alone
    assert (repo / "data/features/word2vec.txt").read_text().split("\n", 1)[0].count(" ") == 16
    for name in ("hoca_fig5_rank", "hoca_fig6_curves", "hoca_fig7_maf"):
        assert (repo / f"reports/hoca_figures/{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    cost = json.loads((repo / "reports/metrics/cost_l_hoca_ubt.json").read_text())
    assert cost["test"]["train_seconds"] > 0 and cost["test"]["space_gib"] >= 0
    assert cost["model_args"]["hidden_dim"] == 24
    table = (repo / "reports/tables/hoca_table1.md").read_text()
    assert f"{100 * metrics['test']['CIDEr']:.1f}" in table and "synthetic video world" in table
    assert f"{cost['test']['train_seconds']:.2f}" in (repo / "reports/tables/hoca_table3.md").read_text()


def test_a_sixth_paper_is_a_folder(repo):
    """The toy paper of docs/adding-a-paper.md (tests/toy_paper/: its package, one model file, its params section)
    joined the build touching no other file: its stage file, its system trained by the shared trainer, its table with
    our numbers, its row in the papers' status."""
    from tiny_pipeline import ROOT, TOY

    added = {p.relative_to(TOY).as_posix() for p in TOY.rglob("*") if p.is_file() and p.name != "params.yaml"
             and "__pycache__" not in p.parts}
    ours = {p.relative_to(repo).as_posix(): p for p in (repo / "src").rglob("*") if p.is_file()
            and "__pycache__" not in p.parts and ".egg-info" not in p.as_posix()}
    assert added <= set(ours) and {"src/crossmodal/papers/toy/paper.py", "src/crossmodal/models/toy_pool.py"} <= added
    for path, file in ours.items():  # every other file of the package as the repository has it
        assert path in added or file.read_bytes() == (ROOT / path).read_bytes(), path
    assert set(yaml.safe_load((repo / "pipelines/toy/dvc.yaml").read_text())["stages"]) == {"toy_pool", "tables"}
    metrics = json.loads((repo / "reports/metrics/toy_pool.json").read_text())
    assert metrics["model"] == "toy_pool" and len(metrics["history"]) == 6 and metrics["test"]["CIDEr"] >= 0
    table = (repo / "reports/tables/toy_table1.md").read_text()
    assert f"{100 * metrics['test']['CIDEr']:.1f}" in table and "synthetic image world" in table
    status = [line for line in (repo / "reports/index.md").read_text().splitlines() if line.startswith("| Toy paper")]
    assert status[0].split("|")[2].strip() == "1: Table 1"  # the status table's row (then the claims' tally)


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
    assert set(metrics["history"][0]) >= {"train_loss", "train_CIDEr_beam", "val_CIDEr"}  # from beams (scst_beam),
    assert "train_CIDEr_greedy" not in metrics["history"][0]  # under their mean: no greedy caption decoded
    from crossmodal.config.loader import from_data
    from crossmodal.training.trainer import Trainer

    start = Trainer(from_data(in_process_params(repo)), "updown_scst", repo, progress=False).model.state_dict()
    saved = torch.load(repo / "data/models/updown/model.pt", weights_only=False)["state_dict"]
    assert start.keys() == saved.keys() and all(torch.equal(start[k], saved[k]) for k in saved)
    submission = json.loads((repo / "data/predictions/updown_scst/captions_test2014_updown_scst_results.json")
                            .read_text())
    assert len(submission) == 12 and set(submission[0]) == {"image_id", "caption"}
    table = (repo / "reports/tables/aoanet_offline.md").read_text()
    for value in (xe_metrics["test"]["CIDEr"], metrics["test"]["CIDEr"]):  # a cell reads "paper / ours"
        assert f"/ {100 * value:.1f} |" in table
    note = next(line for line in (repo / "reports/tables/aoanet_online.md").read_text().splitlines()
                if line.startswith("‡"))  # the server columns' one note names the submission file of each system
    assert "captions_test2014_<system>_results.json" in note and note.endswith(": `updown_scst`.")


def test_second_repro_does_nothing(repo):
    out = run(repo, "dvc", "repro").stdout
    assert "Running stage" not in out, out


@pytest.mark.parametrize("name", ["updown", "updown_scst"])
def test_training_resumed_after_a_crash_reaches_the_same_metrics(repo, monkeypatch, name):
    from crossmodal.config.loader import from_data
    from crossmodal.training.trainer import Trainer as cls

    cfg = from_data(in_process_params(repo))
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
    from crossmodal.config.loader import load
    from crossmodal.training.trainer import Trainer as cls

    params = in_process_params(repo)
    params["baselines"]["systems"]["updown"]["train"] = {"max_epochs": 20, "patience": 2}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    cfg = load(tmp_path / "params.yaml")
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
