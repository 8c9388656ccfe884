"""Atomic file output and the project's one error type for bad input.

Every stage writes through `atomic_path`: the data go to a temporary sibling that is renamed over the
target only once complete, so a killed stage never leaves a half-written file that a later stage (or
DVC's cache) would accept.
"""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import shutil
import tempfile
import warnings
from io import BytesIO
from pathlib import Path
from typing import Any, Iterator

import yaml


# libyaml's parser, where PyYAML has it (its wheels do): the same values as the pure-Python one, about 8x faster on
# params.yaml and the paper tables, which every `code`, `params` and `tables` run reads
SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """`yaml.safe_load`, through `SafeLoader`."""
    return yaml.load(text, Loader=SafeLoader)


class InputError(Exception):
    """Bad input (params, data files): the CLI prints it as one line and exits non-zero."""


class RefusedFile(InputError):
    """A torch file that asks for more than tensors and plain data (what a hostile pickle does): refused unread."""


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside `target`; rename it onto `target` when the block succeeds.

    Works for files and for directories (the caller creates the directory at the yielded path).
    On error the temporary is removed and `target` is left as it was.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix + ".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    tmp.unlink()
    try:
        yield tmp
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=indent) + "\n", encoding="utf-8")


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def save_torch(obj: Any, path: str | os.PathLike) -> None:
    """`torch.save` atomically, through a file handle: given a path, torch names the archive inside after the
    file, so saving to a random temporary name made equal models differ byte for byte, and DVC then reran
    every stage downstream of a retrained but unchanged model."""
    import torch

    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        torch.save(obj, handle)


def load_torch(path: str | os.PathLike, stage: str, what: str, data: bytes | None = None) -> Any:
    """The contents of a torch file the pipeline wrote (a model file, a checkpoint, the backbone), on the CPU.

    Loaded with `weights_only=True`: only tensors and plain data (dicts, lists, tuples, numbers, strings) come
    back and nothing in the file runs, so a file from a DVC remote or a shared cache cannot act on the reader's
    machine. `what` names the file's kind and `stage` the `dvc repro` target that makes it, both in the errors;
    `data` is the file's bytes when the caller has read them already (to hash exactly what it loads).

    Errors, one line each: a missing file (InputError); `RefusedFile` when the pickle asks for anything else
    (a class or function to import, an opcode outside the safe set); InputError when the file is no readable
    torch archive (truncated, say).
    """
    import torch

    path = Path(path)
    if data is None:
        if not path.is_file():
            raise InputError(f"missing file: {path} (run `dvc repro {stage}` first)")
        data = path.read_bytes()
    try:
        with warnings.catch_warnings():  # its notes on a foreign pickle protocol would break the one-line error
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return torch.load(BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:  # torch's weights-only unpickler refused something in the file
        raise RefusedFile(f"{path}: refused to load this {what}: {_refusal(str(err))}, and only tensors and plain "
                          f"data are loaded (made by `dvc repro {stage}`)") from None
    except Exception as err:  # noqa: BLE001 - nothing runs here, so any failure just means an unreadable file
        detail = " ".join(str(err).split()).split(". ")[0][:200] or type(err).__name__
        raise InputError(f"{path}: not a readable {what} ({detail}) (made by `dvc repro {stage}`)") from None


def _refusal(message: str) -> str:
    """What torch's weights-only unpickler refused, in a few words, from its (long, multi-line) message."""
    if found := re.search(r"GLOBAL ([\w.]+)", message):
        return f"it would import `{found[1]}`"
    if found := re.search(r"Unsupported operand (\d+)", message):
        return f"it uses pickle opcode {found[1]}"
    return "it holds objects other than tensors and plain data"


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"missing file: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None


def json_field(entry: dict, key: str, kind: type | tuple, path: Path | str, where: str, required: bool = True):
    """`entry[key]` checked to be of `kind` (a bool is not an int); errors name the file and the field."""
    if key not in entry:
        if required:
            raise InputError(f"{path}: {where} is missing field '{key}'")
        return None
    value = entry[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InputError(f"{path}: {where}.{key} has the wrong type ({type(value).__name__})")
    return value
