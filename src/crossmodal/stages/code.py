"""Stage `code`: one file per code closure a stage runs (pipeline/closures.py), `data/code/<key>.txt`, listing each
file of the closure with its MD5.

Every other stage depends on its closure's file instead of on the ~45 source files of its closure: DVC then
checks about 70 source files once, here, rather than ~2,000 file dependencies on every `dvc repro`, and a no-op
repro stays within its budget. The reruns are the same: an edit changes the files of the closures that hold the
edited file and no other, and DVC reruns exactly the stages that depend on those. `dvc status` names this stage
only; `dvc repro code` then shows (in `dvc status`) which stages the edit reaches.

It also depends on the params sections of entries (recipes, systems) and first checks that the stage files are
what params.yaml now says (pipelines.check_current): a system, ensemble or table added or removed needs `python -m
crossmodal pipelines`, and the repro stops here with one line instead of leaving a stage out. (A value stated at
a new key path needs nothing: the `params` stage reads the new key into the values files.) Its outputs do not
change when only params do, so nothing else reruns.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from .. import paths
from ..io import InputError, atomic_path, write_text
from ..pipeline.closures import closure, roots
from ..pipelines import check_current

ARGUMENTS = {"--closures": "comma-separated code closure keys (pipeline/closures.py)"}


def run(cfg, root: Path, args) -> None:
    check_current(cfg, root)
    keys = [k for k in args.closures.split(",") if k]
    with atomic_path(root / paths.CODE) as tmp:  # the whole folder at once: no file of a removed closure stays
        tmp.mkdir(parents=True)
        for closure_key in keys:
            try:
                files = closure(roots(closure_key))
            except ValueError as err:
                raise InputError(f"code closure {closure_key}: {err}") from None
            lines = [f"{hashlib.md5((root / f).read_bytes()).hexdigest()}  {f}" for f in files]
            write_text(tmp / f"{closure_key}.txt", "\n".join(lines) + "\n")
    print(f"{len(keys)} code closures in {paths.CODE}")
