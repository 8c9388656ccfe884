"""What every stage command shares: the runtime settings (threads, progress) and the real-profile conventions."""
from __future__ import annotations

import os
from pathlib import Path

from .io import write_json


def progress(cfg) -> bool:
    """Progress bars and per-epoch lines: `runtime.progress`, unless CROSSMODAL_PROGRESS=0 (tests, CI logs)."""
    return cfg.runtime.progress and os.environ.get("CROSSMODAL_PROGRESS", "1") != "0"


def set_threads(cfg) -> None:
    """torch threads per process: `runtime.threads`, or min(2, the cores each torchrun process gets)."""
    import torch

    local = int(os.environ.get("LOCAL_WORLD_SIZE", 1))  # torchrun: processes sharing this machine's cores
    torch.set_num_threads(cfg.runtime.threads or min(2, max(1, (os.cpu_count() or 1) // local)))


def record_environment(run=None, device: str = "cpu") -> dict:
    """This stage's environment block (environment.py), also set as the MLflow run's tags: what goes into its
    metrics file as `environment`. Call it after `set_threads`, once the stage's computation has run."""
    from .environment import describe, tags

    block = describe(device)
    if run is not None:
        run.set_tags(tags(block))
    return block


def real(cfg) -> bool:
    return cfg.profile == "real"


def skipped_under_real_profile(path: Path, note: str) -> None:
    """The output of a synthetic-only stage under the real profile: a note, so that `dvc dag` keeps one shape for
    both profiles and nothing downstream can mistake it for data."""
    write_json(path, {"profile": "real", "note": note})


def split_file(cfg) -> Path:
    """The Karpathy split file of the profile: published, or the synthetic world's copy of its layout."""
    from . import paths

    return paths.KARPATHY_COCO if real(cfg) else paths.DATASET_JSON


def write_task_world(cfg, root: Path, out: Path, dataset: str, generate) -> None:
    """A stage that writes a task's world over the image world's scenes (synthesize_vqa, synthesize_grounding):
    `generate(scene_graphs, out)` returns its summary, printed; under the real profile `out` holds a note naming
    the published `dataset` read instead."""
    import json

    from . import paths
    from .io import InputError, atomic_path

    if real(cfg):
        with atomic_path(root / out) as tmp:
            tmp.mkdir(parents=True)
            skipped_under_real_profile(tmp / "PROFILE.json", f"not generated: profile real reads {dataset}")
        return
    graphs = root / paths.SCENE_GRAPHS
    if not graphs.is_file():
        raise InputError(f"missing file: {graphs} (run `dvc repro synthesize` first)")
    print(json.dumps(generate(json.loads(graphs.read_text()), root / out)))
