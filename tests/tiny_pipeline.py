"""The tests' tiny pipeline: the whole pipeline on tiny params, built once per pytest session and shared.

`shared_build` runs the README's first command, `python -m crossmodal.pipeline.repro --jobs 2` (`dvc repro` per
stage, two at a time), in a temporary copy of the repository, with every stage process's imports traced
(import_trace/). Under pytest-xdist the first worker that asks builds it while any other waits on a file lock; the
build is never changed afterwards. A test module works on its own copy (`copy_build`, the `tiny_repo` fixture in
conftest.py), so the modules that rerun stages (test_pipeline_*.py) can run on both workers at once.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TRACE_HOOK = Path(__file__).resolve().parent / "import_trace"
TOY = Path(__file__).resolve().parent / "toy_paper"  # docs/adding-a-paper.md's toy paper, as files of the repository

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
    "hoca": {"studies": {
        "figures": {"rank_sweep": ["l_hoca_ubt_msvd"], "full": "l_hoca_ubt_msvd", "curves": ["l_hoca_ubt_msvd"],
                    "maf": ["l_hoca_ubt_msvd"]},
        "cost": {"rows": {"cost_l_hoca_ubt": "l_hoca_ubt_msvd"}, "model_args": {"hidden_dim": 24}, "batch_size": 4}}},
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


_SERVERS: dict[Path, dict] = {}  # a repository copy -> its stage server's variables (`serve_stages`)


def environment(repo: Path) -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = f"{repo / 'src'}{os.pathsep}{TRACE_HOOK}"
    env["CROSSMODAL_PROGRESS"] = "0"
    env.pop("DVC_ROOT", None)
    env.pop("PYTEST_CURRENT_TEST", None)  # pytest's per-test name: one environment for a module's stage server
    return {**env, **_SERVERS.get(repo, {})}


@contextlib.contextmanager
def serve_stages(repo: Path):
    """While the block runs, the stages that `run` starts in `repo` (by `dvc repro` and queued experiments too) are
    forked by a stage server (crossmodal/pipeline/stage_server.py), as `python -m crossmodal.pipeline.repro` gives
    its own: each skips importing torch and MLflow. A run whose environment differs (an import trace) runs its
    stages alone."""
    from crossmodal.pipeline.stage_server import SharedStageServer

    with SharedStageServer(environment(repo)) as server:
        _SERVERS[repo] = server.env
        try:
            yield
        finally:
            del _SERVERS[repo]


def run(repo: Path, *args: str, check: bool = True, trace: Path | None = None,
        timeout: int = 600) -> subprocess.CompletedProcess:
    env = environment(repo) if trace is None else {**environment(repo), "CROSSMODAL_IMPORT_TRACE": str(trace)}
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


def add_toy_paper(repo: Path) -> list[Path]:
    """Add the toy paper of docs/adding-a-paper.md (tests/toy_paper/: its package, its model file, its params section)
    to a copied pipeline, touching no other file; returns the files added, relative to the repository."""
    added = sorted(p.relative_to(TOY) for p in TOY.rglob("*") if p.is_file() and p.name != "params.yaml"
                   and "__pycache__" not in p.parts)
    for path in added:
        assert not (repo / path).exists(), f"the toy paper would replace {path}"
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(TOY / path, repo / path)
    with open(repo / "params.yaml", "a", encoding="utf-8") as params:
        params.write("\n" + (TOY / "params.yaml").read_text())
    return added


def in_process_params(repo: Path) -> dict:
    """The tiny repository's params as this process's code takes them: without the toy paper's section, whose package
    is in the repository's copy of the code only (the loader would call `toy` an unknown key)."""
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params.pop("toy", None)
    return params


def commit_all(repo: Path, message: str) -> None:
    run(repo, "git", "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    run(repo, "git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", message)


def tiny_params(params: dict) -> dict:
    """Up-Down, three reseeded members, their ensemble, SCST continuing it and Att2in (which shares Up-Down's recipe,
    `lstm_xe`, but not its code, and states its own epochs and learning rate), all tiny; the AoANet and X-LAN
    tables that show them."""
    base, recipes = params["baselines"]["systems"], params["recipes"]
    params["recipes"] = {"lstm_xe": _merge(recipes["lstm_xe"], {"train": TINY_UPDOWN_TRAIN}),
                         "scst": _merge(recipes["scst"], {"train": TINY_SCST_TRAIN}),
                         "scst_beam": _merge(recipes["scst_beam"], {"train": TINY_SCST_TRAIN})}
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
    studies = params["hoca"]["studies"]
    studies["cost"]["rows"] = {}  # TINY's one row replaces the paper's three
    params["hoca"] = {"tables": ["hoca_table1", "hoca_table3"], "systems": {"l_hoca_ubt_msvd": hoca},
                      "studies": studies}
    return _merge(params, TINY)


def stages(repo: Path) -> dict[str, dict]:
    """Every stage of the repository's stage files, by the command it runs."""
    out = {}
    for path in [repo / "dvc.yaml", *sorted((repo / "pipelines").glob("*/dvc.yaml"))]:
        for name, stage in yaml.safe_load(path.read_text())["stages"].items():
            out[stage["cmd"]] = {"name": name, "file": path, **stage}
    return out


def in_paper(paper: str, *names: str) -> list[str]:
    """The stages' addresses as `dvc repro` prints them."""
    return [f"pipelines/{paper}/dvc.yaml:{n}" for n in names]


def stages_restored(out: str) -> list[str]:
    """The stages a `dvc repro` restored from DVC's run-cache instead of running them, from its output."""
    return sorted(line.split("'")[1] for line in out.splitlines() if line.endswith("is cached - skipping run, "
                                                                               "checking out outputs"))


def stages_run(out: str) -> list[str]:
    """The stages a `dvc repro` ran, from its output."""
    return sorted(line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage"))


class Build(NamedTuple):
    repo: Path  # the built repository: read it, never change it
    traces: Path  # one JSON file per `python -m crossmodal` process of the build: its argv and imported modules

    @property
    def log(self) -> Path:
        """What the build's `python -m crossmodal.pipeline.repro` printed."""
        return self.traces.parent / "repro.out"


def _build(build: Build) -> None:
    repo = copy_pipeline(build.repo)
    add_toy_paper(repo)  # a sixth paper, added as docs/adding-a-paper.md says
    build.traces.mkdir()
    params = tiny_params(yaml.safe_load((repo / "params.yaml").read_text()))
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(repo, sys.executable, "-m", "crossmodal", "pipelines")
    run(repo, "git", "init", "-q")
    commit_all(repo, "tiny")
    # the README's first command: about 280 s alone on a 2-core AVX2 machine, 530 s beside a worker
    out = run(repo, sys.executable, "-m", "crossmodal.pipeline.repro", "--jobs", "2", trace=build.traces,
              timeout=1800).stdout
    build.log.write_text(out)
    commit_all(repo, "repro")


def shared_build(tmp_path_factory, worker_id: str) -> Build:
    """The session's tiny pipeline, built by the first caller (`worker_id`: pytest-xdist's, "master" without it);
    a failed build fails every later caller at once with its error instead of building again."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == "master" else base.parent  # the workers' common directory of this session
    root = shared / "tiny-pipeline"
    build, built, failed = Build(root / "repo", root / "import-trace"), root / "BUILT", root / "FAILED"
    with FileLock(str(shared / "tiny-pipeline.lock")):
        if failed.exists():
            raise AssertionError(f"the tiny pipeline's build failed (on another worker):\n{failed.read_text()}")
        if not built.exists():
            root.mkdir()
            try:
                _build(build)
            except BaseException as err:
                failed.write_text(f"{type(err).__name__}: {err}")
                raise
            built.touch()
    return build


def copy_build(build: Build, dest: Path) -> Path:
    """A copy of the built repository that a module may change: files, git, DVC's lock and MLflow's database, whose
    artifact locations are moved to the copy's own `mlartifacts` (the experiment records an absolute one)."""
    shutil.copytree(build.repo, dest, symlinks=True)
    old, new = ((r / "mlartifacts").resolve().as_uri() for r in (build.repo, dest))
    with sqlite3.connect(dest / "mlflow.db") as db:
        db.execute("UPDATE experiments SET artifact_location = replace(artifact_location, ?, ?)", (old, new))
        db.execute("UPDATE runs SET artifact_uri = replace(artifact_uri, ?, ?)", (old, new))
    return dest
