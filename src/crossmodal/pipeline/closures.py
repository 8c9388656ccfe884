"""Code closures: which files of the `crossmodal` package a stage command runs.

A stage command runs `crossmodal/__main__.py`, the CLI, its stage module in `crossmodal/stages/` and, for a
system, its task, objective and model, which the CLI and the stage import by name so that no other stage's
closure holds them. Its closure is those modules and everything they import within the package: every `import`
anywhere in a module (function-level imports included), with the `__init__.py` of every package on the way
(Python runs them on import).

A closure is named by a key: the stage module, then the modules imported by name, joined by `+`
(`train+tasks.captioning+tasks.objectives.xe+models.xlan`). The `code` stage writes one file per key under `data/code/`
(stages/code.py) and every other stage depends on its key's file (pipelines.py).
"""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # src/crossmodal
SRC = PACKAGE.parent


def key(stage_module: str, *by_name: str) -> str:
    """The key of a stage module's closure with the modules it imports by name (`tasks.captioning`, …)."""
    return "+".join([stage_module, *by_name])


def roots(closure_key: str) -> list[str]:
    """The modules a closure starts from. A stage module is one of `crossmodal/stages/` (`train`) or, dotted, of a
    paper's package (`papers.hoca.commands.hoca_cost`), as cli.py names it."""
    stage_module, *by_name = closure_key.split("+")
    stage = f"crossmodal.{stage_module}" if "." in stage_module else f"crossmodal.stages.{stage_module}"
    return ["crossmodal.__main__", "crossmodal.cli", stage, *(f"crossmodal.{m}" for m in by_name)]


def _module_file(module: str) -> Path | None:
    """The file of a `crossmodal` module (a package's __init__.py), or None when it is not one."""
    parts = module.split(".")
    if parts[0] != "crossmodal":
        return None
    base = SRC.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports_each(tree: ast.Module) -> list[str]:
    """The modules a module imports by name from a folder scan, as its literal `IMPORTS_EACH` (a glob of files under
    the package, or a tuple of them: every paper's record, papers/registry.py) says."""
    for node in tree.body:
        named = isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "IMPORTS_EACH"
                                                     for t in node.targets)
        if named:
            globs = ast.literal_eval(node.value)
            return [_module_name(p) for g in ([globs] if isinstance(globs, str) else globs)
                    for p in sorted(PACKAGE.glob(g))]
    return []


@lru_cache(maxsize=None)
def _imports(path: Path) -> frozenset[str]:
    """The `crossmodal` modules one file imports anywhere in its body (and by name, `_imports_each`)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set(_imports_each(tree))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # kept only where a submodule
    return frozenset(m for m in found if _module_file(m) is not None)


def closure(modules: list[str]) -> list[str]:
    """Repository-relative files of the modules and everything they import in the package; sorted."""
    seen: set[Path] = set()
    todo = list(modules)
    while todo:
        module = todo.pop()
        parts = module.split(".")
        for k in range(1, len(parts) + 1):
            path = _module_file(".".join(parts[:k]))
            if path is None:
                raise ValueError(f"{module} is not a module of the crossmodal package")
            if path not in seen:
                seen.add(path)
                todo.extend(_imports(path))
    return sorted(p.relative_to(SRC.parent).as_posix() for p in seen)
