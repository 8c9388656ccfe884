"""Stage `code`: one file per code closure a stage runs (closures.py), `data/code/<key>.txt`, listing each file
of the closure with its MD5.

Every other stage depends on its closure's file instead of on the ~45 source files of its closure: DVC then
checks about 70 source files once, here, rather than ~2,000 file dependencies on every `dvc repro`, and a no-op
repro stays within its budget. The reruns are the same: an edit changes the files of the closures that hold the
edited file and no other, and DVC reruns exactly the stages that depend on those. `dvc status` names this stage
only; `dvc repro code` then shows (in `dvc status`) which stages the edit reaches.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from .. import paths
from ..closures import closure, roots
from ..io import InputError, atomic_path, write_text


def run(cfg, root: Path, args) -> None:
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
