"""`params.yaml` -> typed, validated, frozen config objects.

Every section is a dataclass; loading walks the YAML and the dataclass fields together, so an unknown or
mistyped key, a wrong type or an out-of-range value fails at once with one line naming the key path
(and the nearest valid key). Stages receive config objects; nothing reads `params.yaml` behind their back.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .io import InputError


# --------------------------------------------------------------------------------------------------
# sections


@dataclass(frozen=True)
class RemoteFile:
    """One published file of a dataset (params.yaml `datasets`); data/download.py fetches and verifies it."""

    url: str | None  # None: no stable public link is known; the file must be placed by hand
    sha256: str | None = None  # the publisher's or a checked copy's; None: the first verified download records it
    size: int | None = None  # bytes, when known
    name: str | None = None  # file name in data/raw/<dataset>/; default: the URL's last path component
    extract: bool = False  # a zip or tar archive, unpacked into data/raw/<dataset>/ once verified

    def __post_init__(self) -> None:
        if self.url is None and self.name is None:
            raise ValueError("a file without url needs a name (where the manual copy goes)")
        if self.sha256 is not None:
            digest = self.sha256.strip().lower()
            if len(digest) != 64 or set(digest) - set("0123456789abcdef"):
                raise ValueError(f"sha256 must be 64 hexadecimal digits, got {self.sha256!r}")
            object.__setattr__(self, "sha256", digest)
        if self.size is not None and self.size < 0:
            raise ValueError(f"size must be >= 0, got {self.size}")


@dataclass(frozen=True)
class DatasetConfig:
    """A published dataset of the real profile: what it is, its files, and whether `profile: real` fetches it."""

    description: str
    files: tuple[RemoteFile, ...]
    fetch: bool = True  # false: not needed by the pipelines built so far; set true to download it

    def __post_init__(self) -> None:
        if not self.files:
            raise ValueError("files must list at least one file")


@dataclass(frozen=True)
class SplitSizes:
    train: int = 1500
    val: int = 250
    test: int = 250

    def __post_init__(self) -> None:
        for name in ("train", "val", "test"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")


@dataclass(frozen=True)
class WorldConfig:
    """The synthetic image world: rendered scenes, scene graphs and five captions per image."""

    seed: int = 0
    images: SplitSizes = field(default_factory=SplitSizes)
    image_size: int = 96
    min_objects: int = 2
    max_objects: int = 4
    shapes: tuple[str, ...] = ("circle", "square", "triangle", "diamond", "cross", "star")
    colors: tuple[str, ...] = ("red", "green", "blue", "yellow", "purple", "orange", "white", "gray")
    sizes: tuple[str, ...] = ("small", "large")
    textures: tuple[str, ...] = ("plain", "striped", "dotted", "checkered")
    references_per_image: int = 5

    def __post_init__(self) -> None:
        if not 1 <= self.min_objects <= self.max_objects:
            raise ValueError("need 1 <= min_objects <= max_objects")
        if self.image_size < 32:
            raise ValueError("image_size must be at least 32")
        if self.references_per_image < 2:
            raise ValueError("references_per_image must be at least 2 (the human ceiling needs it)")


@dataclass(frozen=True)
class BackboneConfig:
    """Small CNN + RoI head pretrained on the world's classes and attributes (Faster R-CNN analogue)."""

    seed: int = 0
    channels: int = 32
    feature_dim: int = 128
    roi_size: int = 7
    epochs: int = 4
    batch_size: int = 32
    lr: float = 2e-3
    background_boxes: int = 2


PUBLISHED_REGIONS = {"butd_adaptive": (10, 100), "butd_fixed36": (36, 36)}  # feature set -> boxes per image


@dataclass(frozen=True)
class RegionsConfig:
    """Proposal boxes: jittered ground truth plus distractors, a varying number per image."""

    seed: int = 0
    jitter: float = 0.1
    min_distractors: int = 1
    max_distractors: int = 6
    published: str = "butd_adaptive"  # profile real: the bottom-up feature set converted instead
    published_boxes: tuple[int, int] | None = None  # boxes per image the conversion insists on; None: the set's own

    def __post_init__(self) -> None:
        if self.published not in PUBLISHED_REGIONS:
            raise ValueError(f"published must be one of {', '.join(PUBLISHED_REGIONS)}, not {self.published!r}")
        if self.published_boxes is not None and not 1 <= self.published_boxes[0] <= self.published_boxes[1]:
            raise ValueError(f"published_boxes must be [min, max] with 1 <= min <= max, got {self.published_boxes}")

    @property
    def box_range(self) -> tuple[int, int]:
        return self.published_boxes or PUBLISHED_REGIONS[self.published]


@dataclass(frozen=True)
class CaptionsConfig:
    """One vocabulary convention: words seen at least `min_word_count` times in training, captions cut to
    `max_length` words (params.yaml `vocabularies`, one processed caption set each)."""

    min_word_count: int = 5
    max_length: int = 16


@dataclass(frozen=True)
class ComputeConfig:
    """Where and how training runs (training/distributed.py): device, mixed precision, DDP processes, lazy reading."""

    device: str = "auto"  # auto (CUDA when available) | cpu | cuda
    amp: bool = False  # mixed precision (autocast) on CUDA
    processes: int = 1  # > 1: the stage relaunches itself under torchrun, one DDP process each
    backend: str = "auto"  # auto (nccl on CUDA, gloo on CPU) | nccl | gloo
    lazy_features: bool = False  # read region features per batch from HDF5 instead of loading them all
    loader_workers: int = 0  # DataLoader worker processes of the lazy reader

    def __post_init__(self) -> None:
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda, not {self.device!r}")
        if self.backend not in ("auto", "nccl", "gloo"):
            raise ValueError(f"backend must be auto, nccl or gloo, not {self.backend!r}")
        if self.processes < 1 or self.loader_workers < 0:
            raise ValueError("processes must be at least 1 and loader_workers at least 0")


@dataclass(frozen=True)
class EvaluationConfig:
    beam_size: int = 3
    max_length: int = 16
    batch_size: int = 100
    qualitative_examples: int = 8


@dataclass(frozen=True)
class ScheduledSamplingConfig:
    start_epoch: int = -1  # -1: off
    increase_every: int = 5
    increase_prob: float = 0.05
    max_prob: float = 0.25


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 0
    epochs: int = 10
    batch_size: int = 50
    optimizer: str = "adam"
    lr: float = 5e-4
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    schedule: str = "step"  # step | noam | plateau | constant
    step_size: int = 3  # step: decay every this many epochs
    gamma: float = 0.8  # step and plateau: decay factor
    patience: int = 3  # plateau: lr *= gamma after more than `patience` epochs in a row without a better val CIDEr-D
    warmup_steps: int = 10000  # noam
    noam_factor: float = 1.0  # noam: lr = factor * model_size^-0.5 * min(s^-0.5, s * warmup^-1.5); `lr` unused
    noam_model_size: int = 1024  # noam
    grad_clip: float = 0.1  # clip by value (the Up-Down/AoANet codes) or by norm, see grad_clip_mode
    grad_clip_mode: str = "value"  # value | norm
    label_smoothing: float = 0.0
    scheduled_sampling: ScheduledSamplingConfig = field(default_factory=ScheduledSamplingConfig)
    samples_per_image: int = 5  # SCST: multinomial samples per image, rewarded against the greedy caption

    def __post_init__(self) -> None:
        if self.schedule not in ("step", "noam", "plateau", "constant"):
            raise ValueError(f"schedule must be step, noam, plateau or constant, not {self.schedule!r}")
        if self.optimizer not in ("adam", "adamw", "sgd"):
            raise ValueError(f"optimizer must be adam, adamw or sgd, not {self.optimizer!r}")
        if self.grad_clip_mode not in ("value", "norm"):
            raise ValueError(f"grad_clip_mode must be value or norm, not {self.grad_clip_mode!r}")
        if self.epochs < 1 or self.batch_size < 1 or self.samples_per_image < 1:
            raise ValueError("epochs, batch_size and samples_per_image must be at least 1")


@dataclass(frozen=True)
class VariantConfig:
    """One trained system: a registered model name, its arguments, and its training recipe."""

    model: str
    vocabulary: str  # a key of params.yaml `vocabularies`: the caption preprocessing of this system's paper
    model_args: dict = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)


@dataclass(frozen=True)
class ScstConfig:
    """Self-critical sequence training (Rennie et al. 2017) that continues a cross-entropy variant.

    It starts from `init`'s best model (by validation CIDEr-D), so it shares that variant's model and
    model_args; `train` is its own recipe (lr, epochs, samples per image, plateau decay).
    """

    init: str
    train: TrainConfig = field(default_factory=TrainConfig)


@dataclass(frozen=True)
class ReseedConfig:
    """An ensemble member: the system `of` retrained with another `seed`, every other param shared with it.

    For a member of an SCST run, `init` names the cross-entropy member of the same seed it continues (spelled
    out, not derived, so that dvc.yaml can depend on that model's directory).
    """

    of: str
    seed: int
    init: str | None = None


ENSEMBLE_SIZE = 4  # the paper's Σ rows fuse four models; dvc.yaml's ensemble stage depends on four members


@dataclass(frozen=True)
class EnsembleConfig:
    """Models decoded together by beam search over their averaged log-probabilities."""

    members: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.members) != ENSEMBLE_SIZE or len(set(self.members)) != ENSEMBLE_SIZE:
            raise ValueError(f"members must be {ENSEMBLE_SIZE} distinct trained systems, got {list(self.members)}")


PROFILES = ("synthetic", "real")


@dataclass(frozen=True)
class Config:
    profile: str = "synthetic"  # synthetic (the embedded default) | real (published data, paper scale)
    datasets: dict[str, DatasetConfig] = field(default_factory=dict)
    world: WorldConfig = field(default_factory=WorldConfig)
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    regions: RegionsConfig = field(default_factory=RegionsConfig)
    vocabularies: dict[str, CaptionsConfig] = field(default_factory=lambda: {"min5": CaptionsConfig()})
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    variants: dict[str, VariantConfig] = field(default_factory=dict)
    scst: dict[str, ScstConfig] = field(default_factory=dict)
    reseeds: dict[str, ReseedConfig] = field(default_factory=dict)  # cross-entropy ensemble members
    scst_reseeds: dict[str, ReseedConfig] = field(default_factory=dict)  # SCST ensemble members
    ensembles: dict[str, EnsembleConfig] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {', '.join(PROFILES)}, not {self.profile!r}")
        for name, variant in self.variants.items():
            if variant.vocabulary not in self.vocabularies:
                raise ValueError(f"'variants.{name}.vocabulary' is {variant.vocabulary!r}, not a key of vocabularies "
                                 f"({', '.join(sorted(self.vocabularies))})")
        seen: dict[str, str] = {}
        for section in ("variants", "scst", "reseeds", "scst_reseeds", "ensembles"):
            for name in getattr(self, section):
                if name in seen:
                    raise ValueError(f"'{section}.{name}' reuses the name of '{seen[name]}.{name}'; "
                                     "metrics files would collide")
                seen[name] = section
        for name, run in self.scst.items():
            if run.init not in self.variants:
                raise ValueError(f"'scst.{name}.init' is {run.init!r}, not a key of variants "
                                 f"({', '.join(sorted(self.variants))})")
        for name, member in self.reseeds.items():
            base = self.variants.get(member.of)
            if base is None:
                raise ValueError(f"'reseeds.{name}.of' is {member.of!r}, not a key of variants")
            if member.init is not None or member.seed == base.train.seed:
                raise ValueError(f"'reseeds.{name}' needs a seed other than {member.of}'s and no init")
        for name, member in self.scst_reseeds.items():
            base = self.scst.get(member.of)
            if base is None:
                raise ValueError(f"'scst_reseeds.{name}.of' is {member.of!r}, not a key of scst")
            init = self.reseeds.get(member.init or "")
            if init is None or init.of != base.init or init.seed != member.seed:
                raise ValueError(f"'scst_reseeds.{name}.init' must name the reseeds entry of {base.init} with "
                                 f"seed {member.seed}, got {member.init!r}")
        trained = self.trained()
        for name, ensemble in self.ensembles.items():
            unknown = [m for m in ensemble.members if m not in trained]
            if unknown:
                raise ValueError(f"'ensembles.{name}.members': {unknown[0]!r} is not a trained system")
            if len({repr(self.model_of(m)) for m in ensemble.members}) > 1:
                raise ValueError(f"'ensembles.{name}.members' must share one model and model_args")
            if len({isinstance(trained[m], ScstConfig) for m in ensemble.members}) > 1:
                raise ValueError(f"'ensembles.{name}.members' mix cross-entropy and SCST systems")

    def trained(self) -> dict[str, VariantConfig | ScstConfig]:
        """Every trained system by name: cross-entropy variants, SCST runs and their reseeded ensemble members
        (a member is its base system with `train.seed` replaced and, for SCST, `init` its own XE member)."""
        def reseed(run, member: ReseedConfig):
            changes = {"init": member.init} if member.init else {}
            return dataclasses.replace(run, train=dataclasses.replace(run.train, seed=member.seed), **changes)

        return {**self.variants, **self.scst,
                **{name: reseed(self.variants[m.of], m) for name, m in self.reseeds.items()},
                **{name: reseed(self.scst[m.of], m) for name, m in self.scst_reseeds.items()}}

    def model_of(self, name: str) -> VariantConfig:
        """The cross-entropy variant config (model, model_args) whose network the trained system `name` uses."""
        run = self.trained()[name]
        if isinstance(run, ScstConfig):
            return self.model_of(run.init)
        return dataclasses.replace(run, train=TrainConfig())

    def stage_of(self, name: str) -> str:
        """The dvc.yaml stage that produces system `name` (its MLflow tag)."""
        for stage, section in (("train", "variants"), ("scst", "scst"), ("reseed", "reseeds"),
                               ("reseed_scst", "scst_reseeds"), ("ensemble", "ensembles")):
            if name in getattr(self, section):
                return f"{stage}@{name}"
        raise KeyError(name)


# --------------------------------------------------------------------------------------------------
# loading


def _suggest(key: str, allowed: list[str]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    return f" (did you mean '{close[0]}'?)" if close else f" (allowed: {', '.join(allowed)})"


def _convert(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, where)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        return _convert(value, next(o for o in options if o is not type(None)), where)
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise InputError(f"params.yaml: '{where}' must be a mapping, got {type(value).__name__}")
        args = typing.get_args(tp)
        if not args:
            return dict(value)
        return {k: _convert(v, args[1], f"{where}.{k}") for k, v in value.items()}
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise InputError(f"params.yaml: '{where}' must be a list, got {type(value).__name__}")
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise InputError(f"params.yaml: '{where}' must have {len(args)} entries, got {len(value)}")
        return tuple(_convert(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"params.yaml: '{where}' must be a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"params.yaml: '{where}' must be an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise InputError(f"params.yaml: '{where}' must be true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise InputError(f"params.yaml: '{where}' must be a string, got {value!r}")
        return value
    raise TypeError(f"unsupported config type {tp!r} at {where}")


def build(cls: type, data: Any, where: str = "") -> Any:
    """Build dataclass `cls` from a mapping, rejecting unknown keys and wrong types by key path."""
    label = where or "(top level)"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"params.yaml: '{label}' must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in fields:
            raise InputError(f"params.yaml: unknown key '{path}'{_suggest(str(key), list(fields))}")
        kwargs[key] = _convert(value, hints[key], path)
    missing = [
        name for name, f in fields.items()
        if name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise InputError(f"params.yaml: '{label}' is missing required key '{missing[0]}'")
    try:
        return cls(**kwargs)
    except ValueError as err:
        raise InputError(f"params.yaml: '{label}': {err}") from None


def repo_root() -> Path:
    """The root of the workspace a stage runs in: the nearest parent of the cwd holding dvc.yaml.

    Not DVC_ROOT: in queued experiments DVC runs the stage inside a temporary copy but points DVC_ROOT at
    the parent repository, so data paths must follow the working directory (tracking uses DVC_ROOT).
    """
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if (candidate / "dvc.yaml").is_file():
            return candidate
    return here


PAPER_KEY = "paper"


def apply_profile(tree: Any, real: bool, where: str = "") -> Any:
    """Resolve the `paper:` blocks of a params tree: under the real profile a block is deep-merged over the
    mapping that holds it (its values are the papers' settings), under the synthetic profile it is dropped.
    One switch (`profile`) thus turns every model size and schedule to paper scale, and each paper value sits
    next to the small-world value it replaces."""
    if isinstance(tree, list):
        return [apply_profile(v, real, f"{where}[{k}]") for k, v in enumerate(tree)]
    if not isinstance(tree, dict):
        return tree
    out = {k: apply_profile(v, real, f"{where}.{k}" if where else str(k)) for k, v in tree.items() if k != PAPER_KEY}
    if PAPER_KEY in tree:
        block = tree[PAPER_KEY]
        if not isinstance(block, dict):
            raise InputError(f"params.yaml: '{where + '.' if where else ''}{PAPER_KEY}' must be a mapping of "
                             f"paper-scale overrides, got {type(block).__name__}")
        if real:
            out = _deep_merge(out, apply_profile(block, real, f"{where}.{PAPER_KEY}"))
    return out


def _deep_merge(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        both_maps = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _deep_merge(merged[key], value) if both_maps else value
    return merged


def load(path: str | os.PathLike | None = None) -> Config:
    path = Path(path) if path is not None else repo_root() / "params.yaml"
    if not path.is_file():
        raise InputError(f"missing parameter file: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise InputError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    if isinstance(data, dict):
        data = apply_profile(data, data.get("profile") == "real")
    return build(Config, data)


def to_dict(obj: Any) -> Any:
    """Plain nested dict/list view of a config object (for logging and hashing)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """`{'a': {'b': 1}}` -> `{'a.b': 1}`; lists are kept as values."""
    plain = to_dict(obj)
    out: dict[str, Any] = {}
    if isinstance(plain, dict):
        for k, v in plain.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v:
                out.update(flatten(v, key))
            else:
                out[key] = v
    return out
