"""The README's variant examples do what they say: each `dvc exp run -S <key>=<value>` is followed by the stages it
reruns. The check runs on the full pipeline without its data: the stages an example reaches directly are those
whose params values file (what the `params` stage writes, stages/params.py) changes with the example's key; what
the repro then also reruns is what depends on those stages' outputs, from DVC's own graph (`dvc dag`, read once).
`dvc repro pipelines/<paper>/dvc.yaml` examples are checked against the stages it needs, from the same graph."""
from __future__ import annotations

import functools
import itertools
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow  # DVC on the full pipeline, once per example

ROOT = Path(__file__).resolve().parents[2]
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
    """The stage files, params and code (no data): what `dvc dag` and the `params` stage's values need."""
    repo = tmp_path_factory.mktemp("readme") / "repo"
    repo.mkdir()
    for name in ("src", "dvc.yaml", "pipelines", "params.yaml", ".dvcignore", ".dvc/config"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, repo / name)
    _run(repo, "git", "init", "-q")
    return repo


def _values(params: dict) -> dict[str, dict]:
    """{stage as DVC names it: the values of the params it reads}, as the `params` stage writes them."""
    from crossmodal import paths
    from crossmodal.config.loader import from_data
    from crossmodal.pipelines import param_lists

    out = {}
    for path, keys in param_lists(from_data(params)).items():
        rel = path.relative_to(paths.PARAMS)
        stage = f"pipelines/{rel.parent}/dvc.yaml:{rel.stem}" if rel.parent.name else rel.stem
        out[stage] = {key: _lookup(params, key) for key in keys}
    return out


def _short(stage: str) -> str:
    """`pipelines/aoanet/dvc.yaml:tables` -> `aoanet:tables`; a system's stage -> its name."""
    match = re.match(r"pipelines/(\w+)/dvc\.yaml:(\w+)", stage)
    if not match:
        return stage
    return f"{match.group(1)}:tables" if match.group(2) == "tables" else match.group(2)


@functools.cache
def _graph(repo: Path) -> tuple[set[str], list[tuple[str, str]]]:
    """DVC's whole graph, once per module: the examples change params in memory, never the stage files."""
    dot = _run(repo, "dvc", "dag", "--dot", "--full")
    nodes = set(re.findall(r'^"([^"]+)";$', dot, re.M))
    return nodes, re.findall(r'^"([^"]+)" -> "([^"]+)";$', dot, re.M)


def _reach(edges: list[tuple[str, str]], start: set[str], upstream: bool = False) -> set[str]:
    """`start` and every stage that needs one of them (`upstream`: that one of them needs), by the graph's edges."""
    step: dict[str, list[str]] = {}
    for before, after in edges:  # dvc dag --dot draws an edge from a stage to the stage that needs it
        step.setdefault(after if upstream else before, []).append(before if upstream else after)
    found, todo = set(start), list(start)
    while todo:
        for stage in step.get(todo.pop(), []):
            if stage not in found:
                found.add(stage)
                todo.append(stage)
    return found


def reruns(repo: Path, command: str) -> set[str]:
    match = EXAMPLE.match(command)
    if match.group(4):  # one paper: its stages and every stage they need, apart from the shared ones
        ours = yaml.safe_load((repo / match.group(4)).read_text())["stages"]
        needed = _reach(_graph(repo)[1], {f"{match.group(4)}:{name}" for name in ours}, upstream=True)
        return {_short(s) for s in needed if s.startswith("pipelines/")}
    key, value = match.group(2), yaml.safe_load(match.group(3))
    before = _values(yaml.safe_load((repo / "params.yaml").read_text()))
    params = yaml.safe_load((repo / "params.yaml").read_text())
    parent = _lookup(params, key.rsplit(".", 1)[0])
    assert key.rsplit(".", 1)[1] in parent, f"{key}: not a key of params.yaml"
    parent[key.rsplit(".", 1)[1]] = value
    after = _values(params)
    direct = {stage for stage in before if before[stage] != after[stage]}  # whose values file changes
    return {_short(s) for s in _reach(_graph(repo)[1], direct)}


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
