"""A folder's manifest: the MD5 of each of its files, written beside it by the stage that writes the folder.

A stage that reads a whole folder that many stages read depends on the folder's manifest, one file, instead of the
folder: a synthetic world, or a processed caption folder (a vocabulary's, the references, the qualitative examples;
data/captions.py). DVC then walks each folder once per `dvc repro`, as the output of the stage that writes it,
instead of once more for each stage that reads it: the image world's 2,004 files were checked 7 times, the
grounding world's 4,003 3 times, the video world's 605 4 times (a no-op `dvc repro` spent about a third of its time
there, docs/performance.md); the caption folders were 321 folder dependencies of the captioning stages.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from ..io import InputError, read_json, write_json


def path_of(folder: Path) -> Path:
    """The manifest of `folder`: a sibling file, `data/raw/image_world.manifest.json` for `data/raw/image_world`."""
    return folder.with_name(f"{folder.name}.manifest.json")


def digests(folder: Path) -> dict[str, str]:
    """Each file under `folder` (its path relative to `folder`, POSIX separators) and its MD5, in path order."""
    return {p.relative_to(folder).as_posix(): hashlib.md5(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def write(folder: Path) -> None:
    """Write `folder`'s manifest (atomically; after the folder is complete)."""
    write_json(path_of(folder), {"folder": folder.name, "files": digests(folder)}, indent=0)


def check(folder: Path) -> None:
    """Raise InputError unless `folder` holds exactly the files its manifest lists, with the same contents."""
    manifest = path_of(folder)
    if not manifest.is_file():
        raise InputError(f"missing file: {manifest} (the manifest of {folder}; `dvc repro` writes both)")
    data = read_json(manifest)
    recorded = data.get("files") if isinstance(data, dict) else None
    if not isinstance(recorded, dict):
        raise InputError(f"{manifest}: not a manifest (no `files` mapping); `dvc repro` writes it again")
    found = digests(folder)
    if found != recorded:
        differ = sorted(f for f in recorded.keys() | found.keys() if recorded.get(f) != found.get(f))
        raise InputError(f"{folder} differs from its manifest {manifest} in {len(differ)} file(s), first "
                         f"{', '.join(differ[:3])}: it was changed after the stage that writes it ran "
                         "(`dvc repro` writes it again)")
