"""Leaf-exact params dependencies, derived independently of the generator: every value stated under a recipe or a
system (its `paper:` blocks included) is changed, one at a time, and the systems whose resolved configuration
changes are the stages that must read that key path (the values file the `params` stage writes for each stage),
under both profiles. A stage that reads a key whose change leaves its configuration alone (superfluous: it would
rerun for nothing) or misses one that changes it (missing: a stale result) fails here."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from crossmodal import pipelines
from crossmodal.config.loader import MODEL_KEYS, Config, from_data, paper_names

pytestmark = pytest.mark.slow  # every params value changed, one at a time

ROOT = Path(__file__).resolve().parents[1]
ALTERNATIVES = {  # a string value that must stay valid when changed: another of its allowed values
    "schedule": ["constant", "step"], "optimizer": ["sgd", "adam"], "grad_clip_mode": ["norm", "value"],
    "vocabulary": ["min6", "min5"], "objective": [],  # an entry's objective cannot change alone (validation)
    "candidates": ["beam", "sample"], "baseline": ["mean", "greedy"], "caption_rows": ["repeat", "once"],
}


def _leaves(tree, path=()):
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _leaves(value, (*path, key))
    else:
        yield path, tree


def _changed(value, key: str, cfg_data: dict):
    """Values to try in place of `value` (the first valid one is used)."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1]
    if isinstance(value, float):
        return [value * 1.5 + 0.01]
    if isinstance(value, list):
        return [[_changed(value[0], key, cfg_data)[0], *value[1:]]] if value and key != "members" else []
    if key == "init":  # another cross-entropy system (an ensemble's members must keep one model)
        return [name for paper in paper_names() for name, e in cfg_data.get(paper, {}).get("systems", {}).items()
                if name != value and "init" not in e]
    if key in ALTERNATIVES:
        return [v for v in ALTERNATIVES[key] if v != value]
    return [f"{value}_x"]


def _entry_leaves(data: dict):
    """(key path, value) of every value stated under `recipes` and the papers' `systems` and `recipes`."""
    roots = [("recipes",)] + [(p, kind) for p in paper_names() for kind in ("systems", "recipes")]
    for root in roots:
        tree = data
        for key in root:
            tree = tree.get(key, {}) if isinstance(tree, dict) else {}
        for name, entry in tree.items():
            for path, value in _leaves({k: v for k, v in entry.items() if k != "of"}):
                yield (*root, name, *path), value


def _expand(data: dict, path: tuple) -> list[tuple]:
    tree = data
    for key in path:
        tree = tree[key]
    return [(*path, *sub) for sub, _ in _leaves(tree)] if isinstance(tree, dict) else [path]


def _view(cfg: Config) -> dict:
    """What each stage computes from: a system's resolved config and its model's keys; an ensemble's members and
    their models' keys. Compared as the frozen config objects themselves (field by field, as `to_dict` would list
    them, and an order of magnitude cheaper)."""
    systems = cfg.systems()
    model = lambda name: {k: getattr(cfg.model_of(name), k) for k in MODEL_KEYS}  # noqa: E731
    view = {name: (s, model(name)) for name, s in systems.items()}
    view.update({name: (e.members, [model(m) for m in e.members]) for name, e in cfg.ensembles().items()})
    return view


def _set(data: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(data)
    tree = out
    for key in path[:-1]:
        tree = tree[key]
    tree[path[-1]] = value
    return out


@pytest.mark.parametrize("profile", ["synthetic", "real"])
def test_every_stage_lists_exactly_the_keys_its_configuration_takes(profile):
    data = {**yaml.safe_load((ROOT / "params.yaml").read_text()), "profile": profile}
    cfg = from_data(data)
    before = _view(cfg)
    derived: dict[str, set[str]] = {name: set() for name in before}
    untestable = []
    for path, value in _entry_leaves(data):
        for candidate in _changed(value, path[-1], data):
            try:
                after = _view(from_data(_set(data, path, candidate)))
            except Exception:  # noqa: BLE001 - an invalid change: try the next candidate
                continue
            for name in before:
                if after[name] != before[name]:
                    derived[name].add(".".join(path))
            break
        else:
            untestable.append(".".join(path))
    # `seeds` adds or removes copies (test_more_seeds_add_stages_and_rerun_none); an SCST entry's count cannot
    # change alone (its init needs as many), nor can a count whose copies an ensemble names; a system's `task` cannot
    # change alone either (a VQA system has no caption vocabulary)
    assert {p.split(".")[-1] for p in untestable} <= {"objective", "seeds", "task"}, untestable
    stages = {path.stem: keys for path, keys in pipelines.param_lists(cfg).items()}  # each stage's values file
    for name, keys in derived.items():
        listed = {".".join(leaf) for p in stages[name] if p not in pipelines.SHARED_PARAMS
                  and not p.startswith("vocabularies.") and not p.endswith((".objective", ".task", ".members"))
                  for leaf in _expand(data, tuple(p.split(".")))}  # a mapping stands for each of its values
        assert listed == keys, (name, "missing:", sorted(keys - listed), "superfluous:", sorted(listed - keys))


def test_more_seeds_add_stages_and_rerun_none():
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    stages = lambda d: {name: stage for text in pipelines.expected_files(from_data(d)).values()  # noqa: E731
                        for name, stage in yaml.safe_load(text)["stages"].items()}
    before = stages(data)
    seeds = data["aoanet"]["systems"]["aoanet"]["seeds"]
    after = stages(_set(data, ("aoanet", "systems", "aoanet", "seeds"), seeds + 1))
    assert set(after) - set(before) == {f"aoanet_seed{seeds}"}
    changed = {name for name in before if after[name] != before[name]}
    assert changed <= {"tables", "index"}, changed  # the reports read the new run; no training stage reruns
    values = lambda d: {p.stem: k for p, k in pipelines.param_lists(from_data(d)).items()}  # noqa: E731
    old, new = values(data), values(_set(data, ("aoanet", "systems", "aoanet", "seeds"), seeds + 1))
    assert {n for n in old if old[n] != new[n]} <= {"tables", "index"}


def test_no_stage_lists_params_keys_so_dvc_lock_holds_no_values():
    """Each stage depends on its values file, and `code` and `params` on params.yaml as a file: no stage lists params
    keys, whose values DVC would copy into dvc.lock and parse and write again after every stage it runs
    (docs/performance.md). dvc.yaml's top-level `params` keeps every key in `dvc params diff` and `dvc exp show`."""
    root_spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    assert root_spec["params"] == ["params.yaml"]
    assert all("params.yaml" in root_spec["stages"][stage]["deps"] for stage in ("code", "params"))
    for name in ["dvc.yaml", *(f"pipelines/{p}/dvc.yaml" for p in paper_names() if (ROOT / "pipelines" / p).is_dir())]:
        for lock_or_spec in (ROOT / name, (ROOT / name).with_suffix(".lock")):
            stages = yaml.safe_load(lock_or_spec.read_text())["stages"]
            assert not [s for s, stage in stages.items() if "params" in stage], lock_or_spec
