"""The README's variant examples do what they say: each `dvc exp run -S <key>=<value>` is followed by the stages it
reruns, and `dvc status` agrees. The check runs on the full pipeline without its data: a copy of the stage files
whose locks record the params as params.yaml states them now (as after a full `dvc repro`), so `dvc status` reports
a stage's params as changed exactly when the example changes one of its keys. What the repro then also reruns is
what depends on those stages' outputs, from DVC's own graph (`dvc dag`). `dvc repro pipelines/<paper>/dvc.yaml`
examples are checked against the stages it needs (`dvc dag`)."""
from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
EXAMPLE = re.compile(r"^(dvc exp run (?:--queue )?-S (\S+)=(\S+)|dvc repro (pipelines/\w+/dvc\.yaml))\s*(?:#.*)?$")
RERUNS = re.compile(r"^#\s+(?:re)?runs: (.+)$")
MORE = re.compile(r"^#\s{5,}(\S.*)$")  # a `reruns:` line wrapped onto the next, indented further
SEEDS = "+seeds"  # a name's suffix in a `reruns:` line: the system with its seed copies (params `seeds: n`)


def examples() -> list[tuple[str, list[str] | None]]:
    """(command, stages it names) of every example in the README and docs/."""
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]:
        lines = path.read_text().splitlines()
        for k, line in enumerate(lines):
            if line.startswith("dvc exp run") and " -S " in line or EXAMPLE.match(line) and "pipelines/" in line:
                names = RERUNS.match(lines[k + 1]) if k + 1 < len(lines) else None
                more = [m.group(1) for m in itertools.takewhile(bool, map(MORE.match, lines[k + 2:]))]  # wrapped
                out.append((line, " ".join([names.group(1), *more]).split() if names else None))
    return out


def _run(repo: Path, *args: str) -> str:
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "PYTHONPATH": str(repo / "src"), "HOME": str(repo)}
    proc = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _lookup(tree: dict, key: str):
    for part in key.split("."):
        tree = tree[part]
    return tree


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """The stage files, params and code, with locks that match params.yaml (no data)."""
    repo = tmp_path_factory.mktemp("readme") / "repo"
    repo.mkdir()
    for name in ("src", "dvc.yaml", "dvc.lock", "pipelines", "params.yaml", ".dvcignore", ".dvc/config"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, repo / name)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    for stage_file in [repo / "dvc.yaml", *(repo / "pipelines").glob("*/dvc.yaml")]:
        lock_file = stage_file.with_suffix(".lock")
        lock = yaml.safe_load(lock_file.read_text()) if lock_file.is_file() else {"schema": "2.0", "stages": {}}
        for name, stage in yaml.safe_load(stage_file.read_text())["stages"].items():
            entry = lock["stages"].setdefault(name, {"cmd": stage["cmd"]})
            entry.pop("params", None)
            if stage.get("params"):
                entry["params"] = {"params.yaml": {k: _lookup(params, k) for k in stage["params"]}}
        lock_file.write_text(yaml.safe_dump(lock, sort_keys=False))
    _run(repo, "git", "init", "-q")
    return repo


def _short(stage: str) -> str:
    """`pipelines/aoanet/dvc.yaml:tables` -> `aoanet:tables`; a system's stage -> its name."""
    match = re.match(r"pipelines/(\w+)/dvc\.yaml:(\w+)", stage)
    if not match:
        return stage
    return f"{match.group(1)}:tables" if match.group(2) == "tables" else match.group(2)


def _graph(repo: Path, target: str | None = None) -> tuple[set[str], list[tuple[str, str]]]:
    dot = _run(repo, "dvc", "dag", "--dot", *([target] if target else ["--full"]))
    nodes = set(re.findall(r'^"([^"]+)";$', dot, re.M))
    return nodes, re.findall(r'^"([^"]+)" -> "([^"]+)";$', dot, re.M)


def reruns(repo: Path, command: str) -> set[str]:
    match = EXAMPLE.match(command)
    if match.group(4):  # one paper: its stages and every stage they need, apart from the shared ones
        ours = yaml.safe_load((repo / match.group(4)).read_text())["stages"]
        needed = set().union(*(_graph(repo, f"{match.group(4)}:{name}")[0] for name in ours))
        return {_short(s) for s in needed if s.startswith("pipelines/")}
    key, value = match.group(2), yaml.safe_load(match.group(3))
    path = repo / "params.yaml"
    original = path.read_text()
    params = yaml.safe_load(original)
    parent = _lookup(params, key.rsplit(".", 1)[0])
    assert key.rsplit(".", 1)[1] in parent, f"{key}: not a key of params.yaml"
    parent[key.rsplit(".", 1)[1]] = value
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        status = json.loads(_run(repo, "dvc", "status", "--json"))
    finally:
        path.write_text(original)
    direct = {stage for stage, changes in status.items() if stage != "code"
              and any("params.yaml" in c.get("changed deps", {}) for c in changes if isinstance(c, dict))}
    _, edges = _graph(repo)
    found, todo = set(direct), list(direct)
    while todo:
        stage = todo.pop()
        for upstream, downstream in edges:  # dvc dag --dot draws an edge from a stage to the stage that needs it
            if upstream == stage and downstream not in found:
                found.add(downstream)
                todo.append(downstream)
    return {_short(s) for s in found}


def test_there_are_examples_of_each_kind():
    commands = [c for c, _ in examples()]
    assert any("recipes." in c for c in commands) and any(".systems." in c for c in commands)
    assert any(c.startswith("dvc repro pipelines/") for c in commands)


@pytest.mark.parametrize("command, names", examples(), ids=[c for c, _ in examples()])
def test_example_reruns_the_stages_it_names(repo, command, names):
    assert names is not None, f"`{command}` must be followed by a line `#   reruns: <stages>`"
    found = reruns(repo, command)
    seeds = {n for n in names if n.endswith(SEEDS)}  # `updown+seeds`: updown and its seed copies, updown_seed<k>
    copies = {s for n in seeds for s in found if re.fullmatch(rf"{n[:-len(SEEDS)]}_seed\d+", s)}
    assert all(any(s.startswith(n[:-len(SEEDS)] + "_seed") for s in copies) for n in seeds), (seeds, copies)
    assert found == {n[:-len(SEEDS)] if n in seeds else n for n in names} | copies
