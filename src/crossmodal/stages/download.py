"""Stage `download-<dataset>`: fetch one published dataset into data/raw/<dataset>/ (profile real and
`fetch: true`), else leave a note saying why nothing was fetched."""
from __future__ import annotations

import json
from pathlib import Path

from .. import paths
from ..io import InputError, write_json
from .common import progress, real

ARGUMENTS = {"--dataset": "a key of `datasets` in params.yaml"}


def run(cfg, root: Path, args) -> None:
    name = args.dataset
    if name not in cfg.datasets:
        raise InputError(f"unknown dataset {name!r}; params.yaml `datasets` declares: {', '.join(sorted(cfg.datasets))}")
    dataset, target = cfg.datasets[name], root / paths.raw(name)
    if not real(cfg) or not dataset.fetch:
        reason = "profile synthetic" if not real(cfg) else f"datasets.{name}.fetch is false"
        write_json(target / "MANIFEST.json", {"dataset": name, "fetched": False, "reason": reason, "files": []})
        return
    from ..data.download import fetch_dataset

    manifest = fetch_dataset(name, dataset.files, target, progress=progress(cfg))
    print(json.dumps({"dataset": name, "files": [f["name"] for f in manifest["files"]]}))
