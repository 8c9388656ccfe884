"""Stage `tables` of a paper's pipeline: its transcribed tables (params.yaml `<paper>.tables`) with our numbers
beside the paper's. `--systems` names the trained systems whose rows are built (the pipeline generator lists
them, so that the stage reruns when that set changes); rows of other systems show as pending. A row of a system
with several seeds (params `seeds: n`) shows their mean ± sd (n)."""
from __future__ import annotations

from pathlib import Path

from .. import paths
from ..io import InputError
from ..reports.claims import seed_groups
from ..reports.table_builder import build_paper

ARGUMENTS = {"--paper": "a paper section of params.yaml",
             "--systems": "comma-separated trained systems whose rows are built"}
OPTIONAL = ("--systems",)


def run(cfg, root: Path, args) -> None:
    if args.paper not in cfg.papers:
        raise InputError(f"unknown paper {args.paper!r}; params.yaml has {', '.join(cfg.papers)}")
    groups = seed_groups(cfg)
    systems = {s for name in args.systems.split(",") if name for s in groups.get(name, (name,))}  # with their seeds
    for path in build_paper(args.paper, list(cfg.paper(args.paper).tables), root / paths.METRICS, systems,
                            root / paths.TABLES, paths.paper_tables(args.paper), seeds=groups):
        print(path)
