"""End to end: the whole pipeline with `dvc repro` on a tiny profile in a temporary copy of the repository.

One module-scoped build feeds every test here (and pytest-xdist keeps the module on one worker), by the README's
first command, `python -m crossmodal.repro --jobs 2` (`dvc repro` per stage, two at a time): outputs and tables
exist and carry numbers; every stage ran exactly the code it depends on (an import trace of each stage process
against its dvc.yaml deps); a second, plain `dvc repro` does nothing; a new model file, a runtime param or a
changed model file rerun exactly what they should; training resumed after a crash reaches the same metrics;
queued experiments land in MLflow; and bad input fails with one line and a non-zero status.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from crossmodal.environment import summary

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TRACE_HOOK = Path(__file__).resolve().parent / "import_trace"
pytestmark = pytest.mark.usefixtures("one_thread")  # the in-process runs (resume, patience), as the stages

TINY = {
    "runtime": {"threads": 1},  # tiny tensors gain nothing from a second thread; the other pytest worker needs the core
    "world": {"images": {"train": 60, "val": 12, "test": 12}, "image_size": 64},
    "backbone": {"epochs": 2, "channels": 16, "feature_dim": 32},
    "grid": {"size": 3},
    "attributes": {"words": 12, "top_k": 4, "hidden_dim": 16, "epochs": 1},
    "vqa": {"world": {"questions_per_image": 3}, "min_answer_count": 2},
    "word_vectors": {"dim": 16, "epochs": 2},
    "word2vec": {"dim": 16, "epochs": 2},
    "video": {"world": {"clips": {"msvd": 10, "msrvtt": 10}, "captions_per_clip": {"msvd": 3, "msrvtt": 2},
                        "frames": 8, "frame_size": 32},
              "features": {"frames_per_clip": 4, "chunk_frames": 4, "dims": {"frames": 8, "motion": 8, "audio": 8},
                           "channels": 4, "epochs": 1}},
    "vocabularies": {"min5": {"min_word_count": 2}, "min6": {"min_word_count": 2},
                     "msvd": {"min_word_count": 1}, "msrvtt": {"min_word_count": 1}},
    "hoca_figures": {"rank_sweep": ["l_hoca_ubt_msvd"], "full": "l_hoca_ubt_msvd", "curves": ["l_hoca_ubt_msvd"],
                     "maf": ["l_hoca_ubt_msvd"]},
    "hoca_cost": {"rows": {"cost_l_hoca_ubt": "l_hoca_ubt_msvd"}, "model_args": {"hidden_dim": 24}, "batch_size": 4},
}
TINY_BAN = {"model_args": {"embed_dim": 16, "hidden_dim": 16, "glimpses": 2, "word_vectors": True, "counter": True},
            "train": {"max_epochs": 1, "patience": 0, "batch_size": 32}}
TINY_GROUNDING = {"model_args": {"embed_dim": 16, "hidden_dim": 16, "word_vectors": True},
                  "train": {"max_epochs": 1, "patience": 0, "batch_size": 32}}
TINY_ETA_TRAIN = {"max_epochs": 1, "patience": 0, "batch_size": 10}
TINY_HOCA = {"model_args": {"embed_dim": 16, "hidden_dim": 16, "att_dim": 16, "steps": dict.fromkeys(
    ("frames", "motion", "audio"), 4)}, "train": {"max_epochs": 1, "patience": 0, "batch_size": 4}}
TINY_UPDOWN_ARGS = {"embed_dim": 32, "hidden_dim": 32, "att_hidden_dim": 32}
TINY_UPDOWN_TRAIN = {"max_epochs": 6, "patience": 0, "batch_size": 10, "lr": 0.01, "step_size": 100}  # fixed epochs
TINY_SCST_TRAIN = {"max_epochs": 2, "patience": 0, "batch_size": 10, "lr": 0.001}
SEEDS = [f"updown_seed{k}" for k in (1, 2, 3)]
UPDOWN_FAMILY = ["updown", *SEEDS, "updown_scst", "updown_ensemble"]  # the systems whose network is Up-Down's


def _env(repo: Path) -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = f"{repo / 'src'}{os.pathsep}{TRACE_HOOK}"
    env["CROSSMODAL_PROGRESS"] = "0"
    env.pop("DVC_ROOT", None)
    return env


def run(repo: Path, *args: str, check: bool = True, trace: Path | None = None,
        timeout: int = 600) -> subprocess.CompletedProcess:
    env = _env(repo) if trace is None else {**_env(repo), "CROSSMODAL_IMPORT_TRACE": str(trace)}
    proc = subprocess.run(list(args), cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
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


def copy_pipeline(repo: Path) -> Path:
    """The pipeline's code, stages, params and DVC config in a fresh directory (no data, no results)."""
    repo.mkdir(parents=True)
    for name in ("src", "dvc.yaml", "pipelines", "params.yaml", ".dvcignore", ".gitignore",
                 "benchmarks/results/spread.json"):  # the cross-CPU spread the claims page cites
        src = ROOT / name
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, repo / name)
    (repo / ".dvc").mkdir()
    shutil.copy(ROOT / ".dvc" / "config", repo / ".dvc" / "config")
    shutil.copy(ROOT / ".dvc" / ".gitignore", repo / ".dvc" / ".gitignore")
    return repo


def commit_all(repo: Path, message: str) -> None:
    run(repo, "git", "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    run(repo, "git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", message)


def tiny_params(params: dict) -> dict:
    """Up-Down, three reseeded members, their ensemble, SCST continuing it and Att2in (which shares Up-Down's recipe,
    `lstm_xe`, but not its code, and states its own epochs and learning rate), all tiny; the AoANet and X-LAN
    tables that show them."""
    base, recipes = params["baselines"]["systems"], params["recipes"]
    params["recipes"] = {"lstm_xe": _merge(recipes["lstm_xe"], {"train": TINY_UPDOWN_TRAIN}),
                         "scst": _merge(recipes["scst"], {"train": TINY_SCST_TRAIN})}
    systems = {
        "att2in": _merge(base["att2in"], {"model_args": TINY_UPDOWN_ARGS, "train": {"max_epochs": 2, "lr": 0.02}}),
        "updown": _merge(base["updown"], {"model_args": TINY_UPDOWN_ARGS}),
        **{name: {"of": "updown", "train": {"seed": k, "max_epochs": 2}} for k, name in enumerate(SEEDS, 1)},
        "updown_scst": _merge(base["updown_scst"], {"train": {"lr": 0.001}}),  # a key of its own to change
    }
    for entry in systems.values():  # the members are stated, with epochs of their own (`seeds: n` copies are not)
        entry.pop("seeds", None)
    params["baselines"] = {"systems": systems, "ensembles": {"updown_ensemble": {"members": ["updown", *SEEDS]}}}
    params["aoanet"] = {"tables": params["aoanet"]["tables"]}
    params["xlan"] = {"tables": ["xlan_table3"]}
    eta = params["eta"]["recipes"]["eta_xe"]  # ETA on both of its inputs and Transformer_s, late-fused
    eta = _merge(eta, {"model_args": {"dim": 16, "heads": 2, "ffn_dim": 32}, "train": TINY_ETA_TRAIN})
    params["eta"] = {"tables": ["eta_table2"], "systems": {
        "eta": {**eta, "inputs": {"regions": "grid", "attributes": "attributes"}},  # Table 4's ETA
        "transformer_s": {"of": "eta", "model_args": {"mode": "semantic"}, "inputs": {"attributes": "attributes"}}},
        "ensembles": {"eta_and_ts": {"members": ["eta", "transformer_s"]}}}
    ban = _merge(params["ban"]["recipes"]["ban_vqa"], TINY_BAN)  # BAN-Glove-Counter: VQA, word vectors, counter
    grounding = _merge(params["ban"]["recipes"]["ban_flickr_recipe"], TINY_GROUNDING)  # BAN on the grounding world
    params["ban"] = {"tables": ["ban_testdev", "ban_flickr_recall"],
                     "systems": {"ban_8_glove_counter": ban, "ban_flickr": grounding}}
    hoca = params["hoca"]["recipes"]  # L-HOCA-UBT on the MSVD-like clips: its figures and a cost row
    hoca = _merge({**hoca["hoca_xe"], **{k: v for k, v in hoca["hoca_msvd"].items() if k != "of"}}, TINY_HOCA)
    params["hoca"] = {"tables": ["hoca_table1", "hoca_table3"], "systems": {"l_hoca_ubt_msvd": hoca}}
    params["hoca_cost"]["rows"] = {}  # TINY's one row replaces the paper's three
    return _merge(params, TINY)


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("import-trace")


@pytest.fixture(scope="module")
def repo(tmp_path_factory, traces) -> Path:
    repo = copy_pipeline(tmp_path_factory.mktemp("pipeline") / "repo")
    params = tiny_params(yaml.safe_load((repo / "params.yaml").read_text()))
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(repo, sys.executable, "-m", "crossmodal", "pipelines")
    run(repo, "git", "init", "-q")
    commit_all(repo, "tiny")
    run(repo, sys.executable, "-m", "crossmodal.repro", "--jobs", "2", trace=traces,  # the README's first command
        timeout=1800)  # about 530 s on a 2-core AVX2 machine while the other worker runs the other modules
    commit_all(repo, "repro")
    return repo


def stages(repo: Path) -> dict[str, dict]:
    """Every stage of the repository's stage files, by the command it runs."""
    out = {}
    for path in [repo / "dvc.yaml", *sorted((repo / "pipelines").glob("*/dvc.yaml"))]:
        for name, stage in yaml.safe_load(path.read_text())["stages"].items():
            out[stage["cmd"]] = {"name": name, "file": path, **stage}
    return out


# modules a stage imports only under the real profile (the tiny run is synthetic)
REAL_PROFILE_ONLY = {"download": {"src/crossmodal/data/__init__.py", "src/crossmodal/data/download.py"},
                     "extract-regions": {"src/crossmodal/data/butd_tsv.py"},
                     "extract-grid": {"src/crossmodal/data/karpathy.py", "src/crossmodal/features/vgg.py"},
                     "train-attributes": {"src/crossmodal/features/vgg.py"}}


def _closure_files(repo: Path, stage: dict) -> dict[str, str]:
    """The files (with their MD5s) of the code closure a stage depends on, as the `code` stage wrote them."""
    (listing,) = [d for d in stage["deps"] if d.startswith("data/code/")]
    return {f: md5 for md5, f in (line.split("  ") for line in (repo / listing).read_text().splitlines())}


def test_every_stage_depends_on_exactly_the_code_it_runs(repo, traces):
    """The import trace of each stage process against the code its stage depends on (its closure's file, which
    lists each file with its MD5): nothing missing, and nothing listed that the stage never imports (but the real
    profile's readers). The `code` stage depends on the files it lists and those it runs, no other."""
    by_cmd, checked, listed, ran_by_cmd = stages(repo), set(), set(), {}
    for trace in traces.glob("*.json"):
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
    assert set(stage["deps"]) == listed | ran
    assert run(repo, sys.executable, "-m", "crossmodal", "pipelines", "--check").returncode == 0


def test_repro_builds_every_output_and_the_table(repo):
    world = repo / "data/raw/image_world"
    assert (world / "dataset_coco.json").is_file() and (repo / "data/processed/captions/references/captions_test.json").is_file()
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
    for name in ("backbone", "updown_ensemble", "reference_points"):
        assert json.loads((repo / f"reports/metrics/{name}.json").read_text())["environment"]["cpu"]
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
    assert cost["test"]["train_seconds"] > 0 and cost["test"]["space_gib"] >= 0 and cost["model_args"]["hidden_dim"] == 24
    table = (repo / "reports/tables/hoca_table1.md").read_text()
    assert f"{100 * metrics['test']['CIDEr']:.1f}" in table and "synthetic video world" in table
    assert f"{cost['test']['train_seconds']:.2f}" in (repo / "reports/tables/hoca_table3.md").read_text()


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
    from crossmodal.training.trainer import Trainer

    start = Trainer(config.load(repo / "params.yaml"), "updown_scst", repo, progress=False).model.state_dict()
    saved = torch.load(repo / "data/models/updown/model.pt", weights_only=False)["state_dict"]
    assert start.keys() == saved.keys() and all(torch.equal(start[k], saved[k]) for k in saved)
    submission = json.loads((repo / "data/predictions/updown_scst/captions_test2014_updown_scst_results.json")
                            .read_text())
    assert len(submission) == 12 and set(submission[0]) == {"image_id", "caption"}
    table = (repo / "reports/tables/aoanet_offline.md").read_text()
    for value in (xe_metrics["test"]["CIDEr"], metrics["test"]["CIDEr"]):
        assert f"| {100 * value:.1f} |" in table
    note = next(line for line in (repo / "reports/tables/aoanet_online.md").read_text().splitlines()
                if line.startswith("‡"))  # the server columns' one note names the submission file of each system
    assert "captions_test2014_<system>_results.json" in note and note.endswith(": `updown_scst`.")


def test_second_repro_does_nothing(repo):
    out = run(repo, "dvc", "repro").stdout
    assert "Running stage" not in out, out


TABLES = ["pipelines/aoanet/dvc.yaml:tables", "index", "pipelines/xlan/dvc.yaml:tables"]  # X-LAN's: Up-Down only


def _in(paper: str, *names: str) -> list[str]:
    return [f"pipelines/{paper}/dvc.yaml:{n}" for n in names]


def test_a_new_model_file_and_the_runtime_params_rerun_nothing(repo):
    """No stage imports a model it does not train, and `runtime` (threads, progress bars, lazy reading, loader
    workers) is no stage's dependency: the `params` stage, which reads params.yaml whole, writes every values file
    as it was."""
    new_model = repo / "src/crossmodal/models/newmodel.py"
    new_model.write_text("from .updown import UpDown\n\nMODEL = UpDown\n")
    set_params(repo, {"runtime": {"threads": 2, "progress": False, "lazy_features": True, "loader_workers": 1}})
    values = {p: p.read_bytes() for p in (repo / "data/params").rglob("*.json")}
    try:
        assert _stages_changed(run(repo, "dvc", "status").stdout) == ["params"]
        assert _stages_run(run(repo, "dvc", "repro").stdout) == ["params"]
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
        assert _stages_changed(run(repo, "dvc", "status").stdout) == sorted(_in("baselines", *UPDOWN_FAMILY))
    finally:
        run(repo, "git", "checkout", str(model))
        run(repo, "dvc", "repro", "code")
    assert "changed" not in run(repo, "dvc", "status").stdout
    assert run(repo, "git", "status", "--porcelain").stdout == ""  # the lock is back as it was


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
    Up-Down. So the recipe's learning rate reruns Up-Down and its members, and not Att2in."""
    assert "changed" not in run(repo, "dvc", "status").stdout
    set_params(repo, {"recipes": {"lstm_xe": {"train": {"lr": 0.005}}}})
    try:
        assert _params_changed(repo) == sorted(_in("baselines", "updown", *SEEDS))
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
        assert _params_changed(repo) == sorted(_in("baselines", "updown", *SEEDS))
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
    assert _stages_run(out) == sorted(["code", "params", *_in("baselines", "updown_seed1", "updown_ensemble"),
                                       "index"]), out
    set_params(repo, {"baselines": {"systems": {"updown_scst": {"train": {"lr": 0.002}}}}})
    out = run(repo, "dvc", "repro").stdout
    assert _stages_run(out) == sorted(["code", "params", *_in("baselines", "updown_scst"), *TABLES[:2]]), out
    assert "CIDEr" in run(repo, "dvc", "metrics", "diff").stdout
    commit_all(repo, "member epochs, scst lr")


def _stages_run(out: str) -> list[str]:
    return sorted(line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage"))


@pytest.mark.parametrize("name", ["updown", "updown_scst"])
def test_training_resumed_after_a_crash_reaches_the_same_metrics(repo, monkeypatch, name):
    from crossmodal import config
    from crossmodal.training.trainer import Trainer as cls

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


def test_a_run_killed_inside_a_patience_window_resumes_to_the_same_stop(repo, tmp_path, monkeypatch):
    """Early stopping (patience 2): killed in the first epoch after the best one, the resumed run still stops two
    epochs after the best, before its cap, with the same curve, model and test metrics."""
    from crossmodal import config
    from crossmodal.training.trainer import Trainer as cls

    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["baselines"]["systems"]["updown"]["train"] = {"max_epochs": 20, "patience": 2}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    cfg = config.load(tmp_path / "params.yaml")
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


BAN = "ban_8_glove_counter"  # the tiny build's VQA system
PAPER_ARGS = {"embed_dim": 16, "hidden_dim": 16, "att_hidden_dim": 16}  # stand-in for the paper's sizes


def test_real_profile_downloads_converts_and_trains_the_world_served_in_the_published_formats(repo, tmp_path):
    """The real-data path without the internet: the tiny image, VQA and grounding worlds, the word vectors and a
    narrow stand-in for VGG-16 exported as the publishers' files, served on 127.0.0.1 (Flickr30k's features placed by
    hand), downloaded, extracted and converted by the same stages, then Up-Down, BAN-Glove-Counter and BAN on
    Flickr30k Entities trained for one epoch. The converted captions, references, features, VQA and grounding arrays
    and word vectors must equal those the synthetic profile built from the same worlds, the grid features the stand-in's conv5 grid of the images, and the attribute detector trains on it."""
    from loopback_http import LoopbackHTTPServer

    from crossmodal.data.captions import load_labels, load_vocabulary
    from crossmodal.data.coco import read_coco_captions
    from crossmodal.data.regions import RegionFeatures
    from crossmodal.data.karpathy import read_karpathy
    from crossmodal.features.grid import cell_boxes, grid_features
    from crossmodal.features.vgg import Vgg16Conv, load_image
    from crossmodal.features.word_vectors import read_word_vectors
    from crossmodal.worlds.export_real import (FLICKR_ID_OFFSET, export_grid_formats, export_grounding_formats,
                                               export_real_formats, export_vqa_formats)

    archives = export_real_formats(repo / "data/raw/image_world", repo / "data/features/regions.h5", tmp_path / "www")
    ban_archives = export_vqa_formats(repo / "data/raw/vqa_world", repo / "data/features/word_vectors.txt",
                                      tmp_path / "www")
    torch.manual_seed(0)
    standin = Vgg16Conv((2, 3, 4, 4, 6)).eval()  # VGG-16's layout, narrow: torchvision's key names
    torch.save(standin.state_dict(), tmp_path / "standin.pth")
    grid_files = export_grid_formats(repo / "data/raw/image_world", tmp_path / "standin.pth", tmp_path / "www")
    flickr = export_grounding_formats(repo / "data/raw/grounding_world", repo / "data/features/regions.h5",
                                      tmp_path / "www")
    real = copy_pipeline(tmp_path / "real")
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["profile"] = "real"
    params["baselines"] = {"systems": {"updown": {**params["baselines"]["systems"]["updown"], "paper": {
        "model_args": PAPER_ARGS, "train": {**TINY_UPDOWN_TRAIN, "max_epochs": 1}}}}}
    params["ban"]["systems"] = {name: {**params["ban"]["systems"][name], "paper": {
        "model_args": {k: tiny["model_args"][k] for k in ("embed_dim", "hidden_dim")}, "train": tiny["train"]}}
        for name, tiny in ((BAN, TINY_BAN), ("ban_flickr", TINY_GROUNDING))}
    params["word_vectors"]["paper"] = {"dim": TINY["word_vectors"]["dim"]}  # the exported vectors' size
    params["runtime"]["paper"] = {"lazy_features": True, "loader_workers": 1}
    params["regions"]["published_boxes"] = [1, 100]  # the world has 3-10 boxes, not the published 10-100
    (real / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(real, "git", "init", "-q")
    placed = real / "data/raw/flickr30k_features"  # no stable link: placed by hand
    placed.mkdir(parents=True)
    shutil.copy(flickr.pop("flickr30k_features")[0], placed)
    with LoopbackHTTPServer(tmp_path / "www") as base:
        served = {**archives, **ban_archives, **grid_files, **flickr}
        set_params(real, {"datasets": {name: {"fetch": True, "files": [
            {"url": f"{base}/{a.name}", "extract": a.suffix == ".zip"} for a in files]} for name, files in served.items()}})
        run(real, sys.executable, "-m", "crossmodal", "pipelines")
        commit_all(real, "real profile on loopback")
        out = run(real, "dvc", "repro", "pipelines/baselines/dvc.yaml:updown", f"pipelines/ban/dvc.yaml:{BAN}",
                  "pipelines/ban/dvc.yaml:tables", "extract_grid", "train_attributes").stdout
    assert _stages_run(out) == sorted(["code", "params", "download-karpathy", "download-coco_captions", "download-butd_adaptive",
                                       "download-butd_fixed36", "synthesize", "prepro_captions",
                                       "pretrain_backbone", "extract_regions", *_in("baselines", "updown"),
                                       "download-vqa_v2", "download-glove", "synthesize_vqa", "prepro_vqa",
                                       "word_vectors", *_in("ban", BAN), "download-coco_images", "download-vgg16",
                                       "extract_grid", "train_attributes", "download-flickr30k_entities",
                                       "download-flickr30k_features", "synthesize_grounding", "prepro_grounding",
                                       *_in("ban", "ban_flickr", "tables")]), out
    for name, files in served.items():
        manifest = json.loads((real / f"data/raw/{name}/MANIFEST.json").read_text())
        sums = (real / f"data/raw/{name}/SHA256SUMS").read_text().split()
        assert manifest["fetched"] and sums[1::2] == sorted(a.name for a in files)
    assert not json.loads((real / "data/raw/butd_fixed36/MANIFEST.json").read_text())["fetched"]  # fetch: false
    assert json.loads((real / "data/raw/image_world/PROFILE.json").read_text())["profile"] == "real"

    ours, theirs = repo / "data/processed/captions", real / "data/processed/captions"
    for vocabulary in ("min5", "min6"):
        assert load_vocabulary(theirs / vocabulary / "vocab.json") == load_vocabulary(ours / vocabulary / "vocab.json")
        for split in ("train", "val", "test"):
            a, b = (load_labels(d / vocabulary / "labels.h5", split) for d in (ours, theirs))
            assert np.array_equal(a.image_ids, b.image_ids) and np.array_equal(a.labels, b.labels)
    for split in ("val", "test"):
        refs = [read_coco_captions(d / f"references/captions_{split}.json") for d in (ours, theirs)]
        assert refs[0] == refs[1]
    with RegionFeatures(repo / "data/features/regions.h5") as a, RegionFeatures(real / "data/features/regions.h5") as b:
        coco = len(a.ids)  # COCO's images, then Flickr30k's: the grounding world's, renumbered
        grounded = [int(i) for s in ("train", "val", "test")
                    for i in (repo / f"data/raw/grounding_world/{s}.txt").read_text().split()]
        assert np.array_equal(a.ids, b.ids[:coco]) and b.source == "bottom-up-attention tsv"
        assert sorted(b.ids[coco:].tolist()) == sorted(i + FLICKR_ID_OFFSET for i in grounded)
        for i, j in [*zip(a.ids.tolist(), b.ids.tolist()), *((i, i + FLICKR_ID_OFFSET) for i in grounded)]:
            assert all(np.array_equal(x, y) for x, y in zip(a.get(i), b.get(j)))

    ours, theirs = repo / "data/processed/vqa", real / "data/processed/vqa"  # VQA v2's files, the same arrays
    assert all(json.loads((ours / f).read_text()) == json.loads((theirs / f).read_text())
               for f in ("answers.json", "words.json"))
    for split in ("train", "val", "test"):
        with np.load(ours / f"{split}.npz") as a, np.load(theirs / f"{split}.npz") as b:
            assert sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)
    synthetic, flickr = repo / "data/processed/grounding", real / "data/processed/grounding"  # Flickr30k Entities'
    assert (synthetic / "words.json").read_text() == (flickr / "words.json").read_text()
    for split in ("train", "val", "test"):
        with np.load(synthetic / f"{split}.npz") as a, np.load(flickr / f"{split}.npz") as b:
            assert sorted(a) == sorted(b) and np.array_equal(a["image_ids"] + FLICKR_ID_OFFSET, b["image_ids"])
            assert all(np.array_equal(a[k], b[k]) for k in a if k != "image_ids")
    grounding = json.loads((real / "reports/metrics/ban_flickr.json").read_text())
    assert 0 <= grounding["test"]["R@1"] <= grounding["test"]["R@10"] <= 1 and len(grounding["history"]) == 1
    words = {w for task in ("vqa", "grounding") for w in json.loads((real / f"data/processed/{task}/words.json")
                                                                        .read_text())}
    glove = read_word_vectors(real / "data/features/word_vectors.txt")  # GloVe restricted to both tasks' words
    assert set(glove) <= words and len(glove) > 10
    world = read_word_vectors(repo / "data/features/word_vectors.txt", glove)
    assert all(np.array_equal(glove[w], world[w]) for w in glove)
    size = TINY["grid"]["size"]  # ETA's grid: the stand-in's conv5 of every image, in the original image's cells
    with RegionFeatures(repo / "data/features/grid.h5") as ours, RegionFeatures(real / "data/features/grid.h5") as b:
        assert np.array_equal(ours.ids, b.ids) and b.source == "VGG-16 conv5 grid"
        for image in read_karpathy(repo / "data/raw/image_world/dataset_coco.json")[::20]:
            pixels, (width, height) = load_image(repo / "data/raw/image_world" / image.path)  # the PNG served
            features, boxes = b.get(image.image_id)
            with torch.inference_mode():
                assert torch.allclose(torch.from_numpy(features), grid_features(standin(pixels[None]), size)[0])
            assert np.array_equal(boxes, cell_boxes(size, width, height)) and features.shape == (size * size, 6)
    detector = json.loads((real / "reports/metrics/attributes.json").read_text())  # the detector on VGG-16
    assert len(detector["history"]) == 1 and 0 <= detector["test"]["mAP"] <= 1 and detector["mlflow_run_id"]
    with RegionFeatures(repo / "data/features/attributes.h5") as ours, \
            RegionFeatures(real / "data/features/attributes.h5") as b:
        assert np.array_equal(ours.ids, b.ids) and b.get(int(b.ids[0]))[0].shape == (TINY["attributes"]["top_k"], 2)
    ban = json.loads((real / f"reports/metrics/{BAN}.json").read_text())
    assert ban["test"]["overall"] is None and "server" in ban["test"]["overall_status"]
    assert 0 <= ban["best_val_score"] <= 1
    testdev = (real / "reports/tables/ban_testdev.md").read_text()  # BAN's tables: test-dev's scores are the server's
    assert "n/a" in testdev and "stay with the evaluation server" in testdev
    assert f"{100 * grounding['test']['R@1']:.1f}" in (real / "reports/tables/ban_flickr_recall.md").read_text()
    submitted = json.loads((real / f"data/predictions/{BAN}/vqa_OpenEnded_mscoco_test-dev2015_{BAN}_results.json")
                           .read_text())
    with np.load(theirs / "test.npz") as test:
        assert sorted(r["question_id"] for r in submitted) == sorted(test["question_ids"].tolist())

    metrics = json.loads((real / "reports/metrics/updown.json").read_text())
    assert len(metrics["history"]) == 1 and metrics["test"]["CIDEr"] >= 0 and metrics["mlflow_run_id"]
    saved = torch.load(real / "data/models/updown/model.pt", weights_only=False)
    assert {k: saved["model"]["model_args"][k] for k in PAPER_ARGS} == PAPER_ARGS  # the paper block applied
    qualitative = (real / "data/predictions/updown/qualitative.md").read_text()
    assert "COCO 2014" in qualitative and "(`val2014/COCO_val2014_" in qualitative  # paths a reader can open

    # the server is gone: downloaded files are verified and accepted without any network...
    assert "Running stage" in run(real, "dvc", "repro", "-f", "download-karpathy").stdout
    # ...and a missing one fails at once, naming where a manual copy goes
    (real / "data/raw/karpathy/caption_datasets.zip").unlink()
    proc = run(real, "dvc", "repro", "-f", "download-karpathy", check=False)
    assert proc.returncode != 0
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "connection refused" in error[0]
    assert re.search(r"place it at \S*/data/raw/karpathy/caption_datasets\.zip", error[0]), error[0]


def test_both_profiles_have_one_dag(repo, tmp_path):
    other = copy_pipeline(tmp_path / "other")
    shutil.copy(repo / "params.yaml", other / "params.yaml")
    run(other, "git", "init", "-q")
    synthetic = run(other, "dvc", "dag", "--dot").stdout
    set_params(other, {"profile": "real"})
    assert run(other, "dvc", "dag", "--dot").stdout == synthetic and "download-coco_captions" in synthetic
