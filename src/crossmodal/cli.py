"""`python -m crossmodal <command>`: one command per DVC stage kind, plus `pipelines`, which writes the stage files.

Each stage command loads and validates params.yaml and runs its module in `crossmodal.stages`, imported by name
so that a stage's code closure (pipelines.py) holds only what that command runs. Bad input (params, missing or
corrupt files) prints one line `error: ...` and exits with status 2. Outputs are written atomically.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from . import config as config_mod
from .environment import pin_kernel_paths
from .io import InputError

# command -> (module in crossmodal.stages, its arguments)
COMMANDS: dict[str, tuple[str, dict[str, str]]] = {
    "code": ("code", {"--closures": "comma-separated code closure keys (closures.py)"}),
    "download": ("download", {"--dataset": "a key of `datasets` in params.yaml"}),
    "synthesize": ("synthesize", {}),
    "prepro-captions": ("prepro_captions", {}),
    "pretrain-backbone": ("pretrain_backbone", {}),
    "extract-regions": ("extract_regions", {}),
    "reference-points": ("reference_points", {}),
    "train": ("train", {"--system": "a key of `<paper>.systems` in params.yaml"}),
    "ensemble": ("ensemble", {"--name": "a key of `<paper>.ensembles` in params.yaml"}),
    "tables": ("tables", {"--paper": "a paper section of params.yaml",
                          "--systems": "comma-separated trained systems whose rows are built"}),
    "index": ("index", {}),
    "pipelines": ("", {}),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="crossmodal", description=__doc__.splitlines()[0])
    parser.add_argument("--params", default=None, help="parameter file (default: <repo root>/params.yaml)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_, arguments) in COMMANDS.items():
        p = sub.add_parser(name)
        for flag, text in arguments.items():
            p.add_argument(flag, required=flag != "--systems", default="", help=text)
        if name == "pipelines":
            p.add_argument("--check", action="store_true", help="exit 1 if a stage file differs from its params")
    args = parser.parse_args(argv)
    try:
        cfg = config_mod.load(args.params)
        root = config_mod.repo_root()
        pin_kernel_paths(cfg.compute.portable)  # before any stage module imports torch
        if args.command == "pipelines":  # by name too: no stage depends on the generator
            return importlib.import_module("crossmodal.pipelines").write_pipelines(cfg, root, check=args.check)
        importlib.import_module(f"crossmodal.stages.{COMMANDS[args.command][0]}").run(cfg, root, args)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
