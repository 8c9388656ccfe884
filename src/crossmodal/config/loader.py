"""`params.yaml` -> typed, validated, frozen config objects: the loader, and `Config`, the root that names the sections.

Every section is a dataclass (data.py, features.py, training.py, compute.py, reports.py); loading walks the YAML and
the dataclass fields together, so an unknown or mistyped key, a wrong type or an out-of-range value fails at once
with one line naming the key path (and the nearest valid key, or where a key that moved lives now: `MOVED_KEYS`).
Stages receive config objects; nothing reads `params.yaml` behind their back.

Beside the conversion (`build`), the loader resolves what params.yaml states once for many: the `paper:` blocks of
the real profile (`apply_profile`), and the papers' `systems` entries along their `of:` chains, with the reseeded
copies that `seeds: n` asks for (`Config`). `repo_root` and `origin_root` say where the workspace is.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import paths
from ..io import InputError, load_yaml
from ..task_specs import SPECS
from .compute import ComputeConfig, EvaluationConfig, RuntimeConfig
from .data import CaptionsConfig, DatasetConfig, GroundingConfig, VqaConfig, WorldConfig
from .features import AttributesConfig, BackboneConfig, GridConfig, RegionsConfig, VideoConfig, WordVectorsConfig
from .training import EnsembleConfig, PaperConfig, SystemConfig, TrainConfig

PROFILES = ("synthetic", "real")
PAPER_KEY = "paper"  # a block of paper-scale overrides, applied under `profile: real` (apply_profile)
MODEL_KEYS = ("model", "vocabulary", "inputs", "model_args", "beam_size")  # an scst system takes these from its `init`
ENTRY_KINDS = ("systems", "recipes")  # the entries `of` may name; recipes train nothing
SEEDS_KEY = "seeds"  # `seeds: n` on a system: it and n - 1 reseeded copies (`expand_seeds`)
ENTRY_ONLY = ("of", PAPER_KEY, SEEDS_KEY)  # keys of an entry that are not values of the system it states
MOVED_KEYS = {  # keys params.yaml once had, by the section that held them: old key -> its path now, from that section
    TrainConfig: {"samples_per_image": "scst.samples", "scst_candidates": "scst.candidates",
                  "scst_baseline": "scst.baseline"},
}


def seed_copy(name: str, k: int) -> str:
    return f"{name}_seed{k}"


def expand_seeds(paper: str, systems: dict) -> tuple[dict, set[str]]:
    """`systems` with every entry that states `seeds: n` followed by its n - 1 reseeded copies, and their names.
    Copy k is `<name>_seed<k>: {of: <name>, train: {seed: k}}`; the copy of an SCST entry (`init: X`) continues
    `X_seed<k>`, so X needs as many seeds. No key of params.yaml states a copy's seed (its name does), so its stage
    takes its base's keys (the init's name included): raising n adds stages and reruns none."""
    out, made = {}, set()
    for name, entry in systems.items():
        out[name] = entry
        n = entry.get(SEEDS_KEY, 1) if isinstance(entry, dict) else 1
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InputError(f"params.yaml: '{paper}.systems.{name}.{SEEDS_KEY}' must be an integer of at least 1, "
                             f"got {n!r}")
        for k in range(1, n):
            copy = {"of": name, "train": {"seed": k}}
            if isinstance(entry.get("init"), str):
                copy["init"] = seed_copy(entry["init"], k)
            if systems.get(seed_copy(name, k), copy) != copy:  # (an expanded section expands to itself)
                raise InputError(f"params.yaml: '{paper}.systems.{seed_copy(name, k)}' is the name of a seed copy of "
                                 f"'{name}' ({SEEDS_KEY}: {n}); rename it or lower {SEEDS_KEY}")
            out[seed_copy(name, k)] = copy
            made.add(seed_copy(name, k))
    return out, made


@dataclass(frozen=True)
class _Leaf:
    """A value of a params entry with the key path that states it (`Config.sources`)."""

    value: Any
    path: str


def _annotate(tree: Any, where: str | None) -> Any:
    """`tree` with each leaf paired with its key path; `where` None: values no key states (a seed copy's)."""
    if isinstance(tree, dict):
        return {k: _annotate(v, None if where is None else f"{where}.{k}") for k, v in tree.items()}
    return _Leaf(tree, where)


def _strip(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _strip(v) for k, v in tree.items()}
    return tree.value


def _leaf_paths(tree: Any) -> list[str]:
    if isinstance(tree, dict):
        return [p for v in tree.values() for p in _leaf_paths(v)]
    return [] if tree.path is None else [tree.path]


def _check_keys(cls: type, data: Any, where: str) -> None:
    """Strict keys and types of a partial entry (a recipe states only some of a system's keys)."""
    if not isinstance(data, dict):
        raise InputError(f"params.yaml: '{where}' must be a mapping, got {type(data).__name__}")
    hints, fields = _hints(cls), {f.name for f in dataclasses.fields(cls)}
    for key, value in data.items():
        if key not in fields:
            raise InputError(f"params.yaml: unknown key '{where}.{key}'{_hint(cls, str(key), where, sorted(fields))}")
        _convert(value, hints[key], f"{where}.{key}")  # nested sections (train) have defaults: built in full


@dataclass(frozen=True)
class Config:
    """The root of params.yaml: one field per section (the section modules' dataclasses), and the papers'; made, it
    holds every paper's systems resolved along their `of:` chains, seed copies included (`systems`, `where`,
    `sources`), and checks what no single section can (names, inits, vocabularies, ensembles)."""

    profile: str = "synthetic"  # synthetic (the embedded default) | real (published data, paper scale)
    datasets: dict[str, DatasetConfig] = field(default_factory=dict)
    world: WorldConfig = field(default_factory=WorldConfig)
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    regions: RegionsConfig = field(default_factory=RegionsConfig)
    grid: GridConfig = field(default_factory=GridConfig)
    attributes: AttributesConfig = field(default_factory=AttributesConfig)
    vqa: VqaConfig = field(default_factory=VqaConfig)
    grounding: GroundingConfig = field(default_factory=GroundingConfig)
    word_vectors: WordVectorsConfig = field(default_factory=WordVectorsConfig)
    word2vec: WordVectorsConfig = field(default_factory=lambda: WordVectorsConfig(
        file="GoogleNews-vectors-negative300.bin"))
    video: VideoConfig = field(default_factory=VideoConfig)
    vocabularies: dict[str, CaptionsConfig] = field(default_factory=lambda: {"min5": CaptionsConfig()})
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    recipes: dict[str, dict] = field(default_factory=dict)  # recipes several papers share: abstract, train nothing
    papers: dict[str, PaperConfig] = field(default_factory=dict, metadata={"flat": True})  # params.yaml's paper
    # sections, in its order: each a top-level key named as its package (`paper_names`; `from_data` gathers them)

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {', '.join(PROFILES)}, not {self.profile!r}")
        recipes = {f"recipes.{n}": e for n, e in self.recipes.items()}
        recipes.update({f"{p}.recipes.{n}": e for p, section in self.papers.items()
                        for n, e in section.recipes.items()})
        for where, entry in recipes.items():
            if isinstance(entry, dict) and SEEDS_KEY in entry:
                raise ValueError(f"'{where}.{SEEDS_KEY}': a recipe trains nothing to seed")
        copies: set[str] = set()
        papers = {}
        for paper, section in self.papers.items():
            systems, made = expand_seeds(paper, section.systems)
            papers[paper] = dataclasses.replace(section, systems=systems)
            copies |= made
        object.__setattr__(self, "papers", papers)
        object.__setattr__(self, "_copies", copies)
        seen: dict[str, str] = {name: f"recipes.{name}" for name in self.recipes}
        for paper, section in self.papers.items():
            for kind in (*ENTRY_KINDS, "ensembles"):
                for name in getattr(section, kind):
                    if name in seen:
                        raise ValueError(f"'{paper}.{kind}.{name}' reuses the name of '{seen[name]}'; metrics files "
                                         "would collide")
                    seen[name] = f"{paper}.{kind}.{name}"
        object.__setattr__(self, "_where", seen)
        raw = dict(self.recipes)
        for section in self.papers.values():
            for kind in ENTRY_KINDS:
                raw.update(getattr(section, kind))
        object.__setattr__(self, "_raw", raw)  # every entry `of` may name: the systems and the recipes
        object.__setattr__(self, "_merged", {})  # name -> its layers (never mutated once made)
        for name in raw:  # bases first, so that a mistake is reported at the entry that makes it
            for base in reversed(self._bases(name)):
                if base not in self._merged:
                    self._layers(base)
                    if self.is_recipe(base):
                        self._check_recipe(base)
        object.__setattr__(self, "_systems", {name: self._resolve(name) for name in raw if not self.is_recipe(name)})
        for name, system in self._systems.items():
            where = self.where(name)
            if system.objective == "scst":
                init = self._systems.get(system.init)
                if init is None or init.objective != "xe":
                    copy = f" (a seed copy of '{self.where(name.rpartition('_seed')[0])}.{SEEDS_KEY}' continues "\
                        "the same seed of its init, which needs as many seeds)" if name in self._copies else ""
                    raise ValueError(f"'{where}.init' is {system.init!r}, not a cross-entropy system{copy}")
            elif SPECS[system.task].captions and system.vocabulary not in self.vocabularies:
                raise ValueError(f"'{where}.vocabulary' is {system.vocabulary!r}, not a key of vocabularies "
                                 f"({', '.join(sorted(self.vocabularies))})")
        for name, ensemble in self.ensembles().items():
            where = self.where(name)
            unknown = [m for m in ensemble.members if m not in self._systems]
            if unknown:
                raise ValueError(f"'{where}.members': {unknown[0]!r} is not a trained system")
            if len({self.model_of(m).vocabulary for m in ensemble.members}) > 1:
                raise ValueError(f"'{where}.members' must share one vocabulary")
            other = [m for m in ensemble.members if not SPECS[self._systems[m].task].captions]
            if other:
                raise ValueError(f"'{where}.members': {other[0]!r} is a {self._systems[other[0]].task} system; "
                                 "ensembles decode captions")
            fed = [(n, s) for m in ensemble.members for n, s in self.model_of(m).inputs.items()]
            if len(dict(fed)) < len(set(fed)):
                raise ValueError(f"'{where}.members' feed one named input from different feature sets")
            if len({self._systems[m].objective for m in ensemble.members}) > 1:
                raise ValueError(f"'{where}.members' mix cross-entropy and SCST systems")
            if len({self.model_of(m).beam_size for m in ensemble.members}) > 1:
                raise ValueError(f"'{where}.members' decode with different beam widths (`beam_size`)")

    # ---- systems and their derivation

    def paper(self, name: str) -> PaperConfig:
        """A paper's section; an empty one for a paper params.yaml does not state."""
        return self.papers.get(name, PaperConfig())

    def is_recipe(self, name: str) -> bool:
        return self.where(name).split(".")[-2] == "recipes"

    def where(self, name: str) -> str:
        """The params.yaml key path of a system, recipe or ensemble, e.g. 'xlan.systems.xlan_enc1'."""
        return self._where[name]

    def paper_of(self, name: str) -> str:
        return self.where(name).split(".")[0]

    def stage(self, name: str) -> str:
        """The DVC address of the stage that trains (or decodes) system or ensemble `name`."""
        return f"pipelines/{self.paper_of(name)}/dvc.yaml:{name}"

    def _bases(self, name: str) -> list[str]:
        """`name` and the valid part of its `of` chain (`_layers` reports a broken or circular one)."""
        out, raw = [name], self._raw
        while isinstance(base := raw[out[-1]].get("of") if isinstance(raw[out[-1]], dict) else None, str) \
                and base in raw and base not in out:
            out.append(base)
        return out

    def chain(self, name: str) -> list[str]:
        """The system and the entries (systems and recipes) it derives from (`of`), nearest first."""
        return self._bases(name)

    def _layers(self, name: str, visiting: tuple[str, ...] = ()) -> tuple[dict, dict]:
        """(synthetic values, paper-scale overrides) of an entry, each merged along its `of` chain, every leaf
        annotated with the key path that states it: an entry states what differs from its base, and its `paper:`
        block what differs at paper scale. A base of another `model` contributes no model_args (its arguments are
        its own). A recipe derives only from recipes; a system from a recipe or from a system of its own paper."""
        if name not in self._merged:
            self._merged[name] = self._merge_layers(name, visiting)
        return self._merged[name]

    def _merge_layers(self, name: str, visiting: tuple[str, ...]) -> tuple[dict, dict]:
        raw, where = self._raw[name], self.where(name)
        if not isinstance(raw, dict):
            raise InputError(f"params.yaml: '{where}' must be a mapping, got {type(raw).__name__}")
        own = _annotate({k: v for k, v in raw.items() if k not in ENTRY_ONLY}, None if name in self._copies else where)
        if name in self._copies and "init" in own:  # a copy's init is named after its base's
            own["init"] = _Leaf(own["init"].value, f"{self.where(raw['of'])}.init")
        paper = raw.get(PAPER_KEY) or {}
        if not isinstance(paper, dict):
            raise InputError(f"params.yaml: '{where}.{PAPER_KEY}' must be a mapping of paper-scale overrides")
        paper = _annotate(paper, f"{where}.{PAPER_KEY}")
        base_name = raw.get("of")
        if base_name is None:
            return own, paper
        if base_name in visiting or base_name == name:
            raise InputError(f"params.yaml: '{where}.of' derives from itself ({' -> '.join((name, *visiting))})")
        if not isinstance(base_name, str) or base_name not in self._raw:
            raise InputError(f"params.yaml: '{where}.of' is {base_name!r}, not a system or recipe"
                             f"{_suggest(str(base_name), list(self._raw))}")
        if not self.is_recipe(base_name):
            if self.is_recipe(name):
                raise InputError(f"params.yaml: '{where}.of' is the trained system {base_name!r}; a recipe derives "
                                 "only from recipes")
            if self.paper_of(base_name) != self.paper_of(name):
                raise InputError(f"params.yaml: '{where}.of' is {base_name!r}, a trained system of another paper "
                                 f"({self.paper_of(base_name)}); derive from the recipe it uses instead")
        base, base_paper = self._layers(base_name, visiting + (name,))
        value = lambda tree, key, default=None: getattr(tree.get(key), "value", default)  # noqa: E731
        if "model" in own and value(own, "model") != value(base, "model"):
            base = {k: v for k, v in base.items() if k != "model_args"}
            base_paper = {k: v for k, v in base_paper.items() if k != "model_args"}
        if value(own, "objective", value(base, "objective", "xe")) != value(base, "objective", "xe"):
            raise InputError(f"params.yaml: '{where}' derives from {base_name!r}, which has another objective")
        return _deep_merge(base, own), _deep_merge(base_paper, paper)

    def _check_recipe(self, name: str) -> None:
        """A recipe trains nothing, so it need not be a whole system; its keys and types are still strict."""
        merged, paper = self._layers(name)
        for tree, where in ((merged, self.where(name)), (paper, f"{self.where(name)}.{PAPER_KEY}")):
            _check_keys(SystemConfig, _strip(tree), where)

    def _annotated(self, name: str) -> dict:
        """The resolved entry (profile applied, derivation merged) with each leaf's key path."""
        merged, paper = self._layers(name)
        return _deep_merge(merged, paper) if self.profile == "real" else merged

    def _resolve(self, name: str) -> SystemConfig:
        where = self.where(name)
        merged = _strip(self._annotated(name))
        if merged.get("objective") == "scst":
            stated = [k for k in MODEL_KEYS if k in merged]
            if stated:
                raise InputError(f"params.yaml: '{where}.{stated[0]}': an scst system uses the model of its init; "
                                 "state it there")
        return build(SystemConfig, merged, where)

    def sources(self, name: str) -> list[str]:
        """The params.yaml key path of every value system `name` takes, where that value is stated: its own
        entry's, its bases' (a key it overrides is its own), the `paper:` blocks' under the real profile, and
        for an SCST system its init's model keys. The stage's params are exactly these (pipelines.py)."""
        own = _leaf_paths(self._annotated(name))
        return own + [p for p in self.model_sources(name) if p not in own] if self._systems[name].init else own

    def model_sources(self, name: str) -> list[str]:
        """The key paths of the model keys (model, vocabulary, inputs, model_args) of `model_name(name)`, after
        the key that names it where `name` continues another system (`init`)."""
        tree = self._annotated(self.model_name(name))
        init = _leaf_paths({"init": self._annotated(name)["init"]}) if self._systems[name].init else []
        return init + _leaf_paths({k: v for k, v in tree.items() if k in MODEL_KEYS})

    def systems(self) -> dict[str, SystemConfig]:
        """Every trained system by name, resolved (profile applied, derivations merged)."""
        return dict(self._systems)

    def ensembles(self) -> dict[str, EnsembleConfig]:
        return {name: e for section in self.papers.values() for name, e in section.ensembles.items()}

    def measured_rows(self) -> dict[str, str]:
        """Table rows that a paper's study stage measures instead of a training stage (row -> the system it
        measures), each its own seed group of one: the `rows` of a study section (`<paper>.studies.<study>.rows`)."""
        return {row: system for section in self.papers.values() for study in section.studies.values()
                if isinstance(study, dict) for row, system in (study.get("rows") or {}).items()}

    def model_name(self, name: str) -> str:
        """The cross-entropy system whose network `name` trains (itself) or continues (its `init`)."""
        system = self._systems[name]
        return system.init if system.objective == "scst" else name

    def model_of(self, name: str) -> SystemConfig:
        """The config of `model_name(name)`: model, vocabulary, inputs, model_args."""
        return self._systems[self.model_name(name)]

    def beam_size(self, name: str) -> int:
        """The beam that decodes system or ensemble `name` on test: its model's `beam_size`, else the shared
        `evaluation.beam_size` (members of an ensemble share theirs)."""
        first = self.ensembles()[name].members[0] if name not in self._systems else name
        return self.model_of(first).beam_size or self.evaluation.beam_size

    def ensemble_inputs(self, name: str) -> dict[str, str]:
        """The named inputs an ensemble's members read, united: {input: feature set} (they agree where shared)."""
        return {n: s for m in self.ensembles()[name].members for n, s in self.model_of(m).inputs.items()}


# --------------------------------------------------------------------------------------------------
# loading


def _suggest(key: str, allowed: list[str]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    return f" (did you mean '{close[0]}'?)" if close else f" (allowed: {', '.join(allowed)})"


def _hint(cls: type, key: str, where: str, allowed: list[str]) -> str:
    """What an unknown `key` of section `cls` at `where` should be: the path it moved to (MOVED_KEYS), so that an
    old params.yaml or `-S` override names the new key, else the nearest of `allowed` (`_suggest`)."""
    moved = MOVED_KEYS.get(cls, {}).get(key)
    if moved is None:
        return _suggest(key, allowed)
    return f" (did you mean '{where + '.' if where else ''}{moved}'? the key moved there)"


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
        if any(o in (bool, str) and isinstance(value, o) for o in options):  # e.g. bool | str: true or "auto"
            return value
        return _convert(value, next(o for o in options if o is not type(None)), where)
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise InputError(f"params.yaml: '{where}' must be a mapping, got {type(value).__name__}")
        args = typing.get_args(tp)
        if not args:
            return dict(value)
        return {k: _convert(v, args[1], f"{where}.{k}" if where else str(k)) for k, v in value.items()}
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


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def build(cls: type, data: Any, where: str = "") -> Any:
    """Build dataclass `cls` from a mapping, rejecting unknown keys and wrong types by key path."""
    label = where or "(top level)"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"params.yaml: '{label}' must be a mapping, got {type(data).__name__}")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in fields:
            raise InputError(f"params.yaml: unknown key '{path}'{_hint(cls, str(key), where, list(fields))}")
        kwargs[key] = _convert(value, hints[key], "" if fields[key].metadata.get("flat") else path)  # a flat
        # field's entries are top-level keys of their own (Config.papers)
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


def origin_root() -> Path:
    """The repository a stage's workspace belongs to: the workspace itself, or, inside a queued experiment's
    temporary copy (`<repo>/.dvc/tmp/exps/...`, where DVC points `DVC_ROOT` at the copy or at the repository), the
    repository it was copied from. MLflow's database lives there, and the downloaded datasets a copy lacks."""
    root = Path(os.environ["DVC_ROOT"]).resolve() if os.environ.get("DVC_ROOT") else repo_root()
    parts = root.parts
    for i in range(len(parts) - 2):
        if parts[i:i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i])
    return root


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
        data = load_yaml(path.read_text())
    except yaml.YAMLError as err:
        raise InputError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    return from_data(data)


def paper_names() -> tuple[str, ...]:
    """The papers' params sections: the folders of crossmodal/papers/ that hold a paper.py (found by their files,
    not imported: a paper's package sits above this loader)."""
    return tuple(sorted(path.parent.name for path in paths.PAPERS.glob("*/paper.py")))


def unknown_key(path: str, key: str, allowed: list[str]) -> InputError:
    """The error for an unknown key at `path` whose section allows `allowed`."""
    return InputError(f"params.yaml: unknown key '{path}'{_suggest(key, allowed)}")


def _root_keys(data: dict, papers: tuple[str, ...]) -> None:
    """Fail on an unknown top-level key, naming the nearest section or paper; a key `<paper>_<section>` is a paper's
    own section, which lives at `<paper>.studies.<section>` (the papers' packages define them)."""
    allowed = [f.name for f in dataclasses.fields(Config) if f.name != "papers"] + list(papers)
    for key in data:
        if key in allowed:
            continue
        paper = next((p for p in papers if str(key).startswith(p + "_")), None)
        if paper is not None:
            raise InputError(f"params.yaml: unknown key '{key}' (did you mean '{paper}.studies."
                             f"{str(key)[len(paper) + 1:]}'? a paper's own sections moved there)")
        raise unknown_key(str(key), str(key), allowed)


def from_data(data: Any) -> Config:
    """The config of a parsed params.yaml tree (not modified)."""
    if isinstance(data, dict):
        names = paper_names()
        _root_keys(data, names)
        # entries' paper blocks merge along `of` chains (Config._layers), not where they stand
        data = {k: dict(v) if k in names and isinstance(v, dict) else v for k, v in data.items()}
        entries = {(paper, kind): section.pop(kind) for paper, section in data.items()
                   if paper in names and isinstance(section, dict) for kind in ENTRY_KINDS if kind in section}
        recipes = data.pop("recipes", None)
        data = apply_profile(data, data.get("profile") == "real")
        for (paper, kind), values in entries.items():
            data[paper][kind] = values
        if recipes is not None:
            data["recipes"] = recipes
        data = {**{k: v for k, v in data.items() if k not in names},
                "papers": {k: v for k, v in data.items() if k in names}}
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
