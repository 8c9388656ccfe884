"""`python -m crossmodal <command>`: one command per DVC stage kind, plus `pipelines`, which writes the stage files.

The commands are the modules of `crossmodal.stages`, and of a paper's `commands` package (papers/<paper>/commands/),
that define `run(cfg, root, args)`: module `extract_regions` is the command `extract-regions`. A stage module
declares its command-line arguments in a module-level literal `ARGUMENTS = {"--flag": "help"}` (required strings;
`OPTIONAL` names those that may be left out), which this module reads from the file's syntax tree without importing
it. Adding a stage therefore edits no file here, and no other stage's code closure (pipeline/closures.py) changes.

Each stage command loads and validates params.yaml and runs its module, imported by name so that a stage's code
closure holds only what that command runs. Bad input (params, missing or corrupt files) prints one line
`error: ...` and exits with status 2. Outputs are written atomically.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import sys
from pathlib import Path

from .config.loader import load, repo_root
from .environment import pin_kernel_paths
from .io import InputError

PACKAGE = Path(__file__).resolve().parent
STAGES = PACKAGE / "stages"


def _literal(tree: ast.Module, name: str, default):
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    return default


def stage_commands() -> dict[str, tuple[str, dict[str, str], frozenset[str]]]:
    """command -> (stage module, {flag: help}, optional flags), for every stage module with a `run` function. The
    module is named as pipeline/closures.py keys it: `extract_regions` in stages/, `papers.<paper>.commands.<m>`."""
    commands: dict[str, tuple[str, dict[str, str], frozenset[str]]] = {}
    for path in [*sorted(STAGES.glob("*.py")), *sorted(PACKAGE.glob("papers/*/commands/*.py"))]:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        if not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body):
            continue
        module = path.stem if path.parent == STAGES else ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        command = path.stem.replace("_", "-")
        if command in commands:
            raise ValueError(f"{path}: command {command!r} is also {commands[command][0]}")
        commands[command] = (module, _literal(tree, "ARGUMENTS", {}), frozenset(_literal(tree, "OPTIONAL", ())))
    return commands


def module_name(stage_module: str) -> str:
    """The importable name of a stage module as `stage_commands` names it."""
    return f"crossmodal.{stage_module}" if "." in stage_module else f"crossmodal.stages.{stage_module}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="crossmodal", description=__doc__.splitlines()[0])
    parser.add_argument("--params", default=None, help="parameter file (default: <repo root>/params.yaml)")
    sub = parser.add_subparsers(dest="command", required=True)
    commands = stage_commands()
    for name, (_, arguments, optional) in commands.items():
        p = sub.add_parser(name)
        for flag, text in arguments.items():
            p.add_argument(flag, required=flag not in optional, default="", help=text)
    sub.add_parser("pipelines").add_argument("--check", action="store_true",
                                             help="exit 1 if a stage file differs from its params")
    args = parser.parse_args(argv)
    try:
        cfg = load(args.params)
        root = repo_root()
        pin_kernel_paths(cfg.compute.portable)  # before any stage module imports torch
        if args.command == "pipelines":  # by name too: no stage depends on the generator
            return importlib.import_module("crossmodal.pipelines").write_pipelines(cfg, root, check=args.check)
        importlib.import_module(module_name(commands[args.command][0])).run(cfg, root, args)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
