"""Model registry: the `model:` name of a system in params.yaml -> its network class, one module per model.

`model: <name>` is the module `crossmodal.models.<name>`, which defines `MODEL = <its Captioner class>` for a task
that decodes captions (task_specs.py: captioning), or `MODELS = {<task>: <class>}` for the others (BAN: a VQA and a
grounding network). Modules are imported only when a system names them (`importlib.import_module`), never here at
import time, so adding a model file changes no other module's import closure (and so reruns no pipeline stage of
another model). The available names are found without importing anything: the `models/*.py` files with a
module-level `MODEL =`.

Each class carries its own frozen `Args` dataclass, so `model_args` are validated (unknown keys, types)
with the same strict loader as the rest of params.yaml.
"""
from __future__ import annotations

import difflib
import importlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from torch import nn

from ..config.loader import build
from ..io import InputError, load_torch
from ..task_specs import DEFAULT, SPECS
from .base import Captioner

_DEFINES = {True: re.compile(r"^MODEL\s*=", re.MULTILINE), False: re.compile(r"^MODELS\s*=", re.MULTILINE)}


class ModelSpec(Protocol):
    """What `build_model` reads of a system's params: the model's name and its arguments."""

    @property
    def model(self) -> str: ...

    @property
    def model_args(self) -> Mapping[str, Any]: ...


def available_models(task: str = DEFAULT.name) -> list[str]:
    """The model names of a task: modules of this package whose source has a line starting `MODEL =` (a task that
    decodes captions, task_specs.py) or `MODELS =` (the other tasks), read, not imported."""
    pattern = _DEFINES[SPECS[task].captions]
    return sorted(path.stem for path in Path(__file__).parent.glob("*.py")
                  if pattern.search(path.read_text(encoding="utf-8")))


def _unknown(model_name: str, task: str = DEFAULT.name) -> str:
    """'<name>' (did you mean ...?); available models: ..."""
    names = available_models(task)
    close = difflib.get_close_matches(model_name, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{model_name!r}{hint}; available models: {', '.join(names)}"


def _find(model_name: str, task: str = DEFAULT.name) -> type | None:
    if model_name not in available_models(task):  # also keeps names like "base" or "a.b" from being imported
        return None
    module = importlib.import_module(f"{__package__}.{model_name}")
    if not SPECS[task].captions:
        cls = getattr(module, "MODELS", {}).get(task)
        return cls if isinstance(cls, type) else None
    cls = getattr(module, "MODEL", None)
    return cls if isinstance(cls, type) and issubclass(cls, Captioner) else None


def model_module(model_name: str) -> str:
    """The module that defines model `model_name`, crossmodal.models.<model_name> (where a pipeline's import
    closure of that model starts), without importing it; InputError for an unknown name."""
    if model_name not in available_models():
        raise InputError(f"unknown model {_unknown(model_name)}")
    return f"{__package__}.{model_name}"


def model_class(model_name: str, task: str = DEFAULT.name) -> type:
    """The class of module crossmodal.models.<model_name> for `task` (`MODEL`, or `MODELS[task]`), imported now;
    InputError when there is none."""
    cls = _find(model_name, task)
    if cls is None:
        raise InputError(f"unknown {task} model {_unknown(model_name, task)}")
    return cls


def build_model(where: str, variant: ModelSpec, vocab_size: int, input_dims: Mapping[str, int],
                task: str = DEFAULT.name, sizes: Sequence[int] = ()) -> nn.Module:
    """The freshly initialised network of the system at params key path `where` (errors name it) for `task`: the
    class of `variant.model` for it (`MODEL`, or `MODELS[task]`) built from `variant.model_args` as
    `cls(args, vocab_size, *sizes, input_dims)`, `sizes` the task's own (VQA: the number of answers), `input_dims`
    the feature size of each named input. Every task builds its network here (a task whose embedding starts from word
    vectors loads them after: tasks/), and so does every reader of a trained captioner. A captioner must find each
    input it consumes in `input_dims`; the other tasks' networks also read inputs their task makes (the question)."""
    cls = _find(variant.model, task)
    if cls is None:
        raise InputError(f"params.yaml: '{where}.model' is {_unknown(variant.model, task)}")
    args = build(cls.Args, variant.model_args, f"{where}.model_args")
    missing = [name for name in cls.consumes(args) if name not in input_dims] if SPECS[task].captions else []
    if missing:
        raise InputError(f"params.yaml: '{where}': model {variant.model!r} consumes input(s) "
                         f"{', '.join(missing)}, which the system does not provide (it has: {', '.join(input_dims)})")
    return cls(args, vocab_size, *sizes, input_dims)


def read_model_file(path: Path, stage: str) -> tuple[bytes, dict]:
    """The bytes and contents of a trained system's model.pt (tensors and plain data only: `load_torch`), or a
    one-line error naming the stage that makes it."""
    if not path.is_file():
        raise InputError(f"missing file: {path} (run `dvc repro {stage}` first)")
    data = path.read_bytes()
    return data, load_torch(path, stage, "model file", data)


def load_state(model: Captioner, state_dict: dict, path: Path, name: str) -> Captioner:
    try:
        model.load_state_dict(state_dict)
    except RuntimeError as err:
        raise InputError(f"{path}: not a model of {name!r} ({str(err).splitlines()[0]})") from None
    return model
