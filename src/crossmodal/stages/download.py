"""Stage `download-<dataset>`: fetch one published dataset into data/raw/<dataset>/ (profile real and
`fetch: true`), else leave a note saying why nothing was fetched. Under the real profile, in a queued
experiment's temporary copy, it first links the repository's finished files (data/download.py, `link_finished`),
those a user placed by hand for a dataset not fetched included."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .. import paths
from ..config.loader import origin_root
from ..io import InputError, write_json
from ..stage_common import progress, real

ARGUMENTS = {"--dataset": "a key of `datasets` in params.yaml"}


def run(cfg, root: Path, args) -> None:
    name = args.dataset
    if name not in cfg.datasets:
        raise InputError(f"unknown dataset {name!r}; params.yaml `datasets` declares: {', '.join(sorted(cfg.datasets))}")
    dataset, target = cfg.datasets[name], root / paths.raw(name)
    origin = origin_root() / paths.raw(name)
    if real(cfg) and origin.is_dir() and origin.resolve() != target.resolve():  # a queued experiment's copy
        from ..data.download import link_finished

        linked = link_finished(origin, target)  # also what a user placed by hand for a dataset not fetched
        print(f"{name}: {linked} finished file(s) linked from {origin}, to be verified", file=sys.stderr)
    if not real(cfg) or not dataset.fetch:
        reason = "profile synthetic" if not real(cfg) else f"datasets.{name}.fetch is false"
        write_json(target / "MANIFEST.json", {"dataset": name, "fetched": False, "reason": reason, "files": []})
        return
    from ..data.download import fetch_dataset

    manifest = fetch_dataset(name, dataset.files, target, progress=progress(cfg))
    print(json.dumps({"dataset": name, "files": [f["name"] for f in manifest["files"]]}))
