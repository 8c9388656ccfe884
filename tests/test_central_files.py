"""The central files name no paper and no task: a paper is its package (papers/<paper>/), a task its spec
(task_specs.py) and its modules in tasks/. Checked on the string literals of the config loader and sections, the
pipeline generator and its stage helpers, the reports, the model registry and the paths (docstrings aside)."""
from __future__ import annotations

import ast
from pathlib import Path

from crossmodal.config.loader import paper_names
from crossmodal.task_specs import SPECS

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "crossmodal"
CENTRAL = ["config/*.py", "pipelines.py", "pipeline/stage_spec.py", "reports/*.py", "models/registry.py", "paths.py",
           "cli.py", "stages/index.py", "stages/tables.py", "stages/train.py"]


def _literals(path: Path) -> set[str]:
    """The string literals of a module, its docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings}


def test_no_central_file_names_a_paper_or_a_task():
    names = set(paper_names()) | set(SPECS)
    assert {"xlan", "hoca", "vqa", "captioning"} <= names
    files = [p for pattern in CENTRAL for p in sorted(PACKAGE.glob(pattern))]
    assert len(files) > 20
    named = {f"{p.relative_to(PACKAGE)}: {s!r}" for p in files for s in _literals(p) & names}
    assert not named


def test_the_check_finds_a_name():
    assert "ban" in _literals(PACKAGE / "models" / "ban.py") | {"ban"} and "vqa" in _literals(
        PACKAGE / "models" / "ban.py")  # MODELS = {"vqa": ...}: a model declares its tasks
