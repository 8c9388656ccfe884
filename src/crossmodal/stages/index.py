"""Stage `index`: reports/index.md, the status of the papers (the README shows the same table), every paper's
built tables with their sources and row counts, and every trained system and ensemble with its test scores. It
depends on all of them, so `dvc repro` at the root rebuilds every stage of every paper."""
from __future__ import annotations

from pathlib import Path

from .. import paths
from ..config import PAPERS
from ..reports.tables import build_index, build_status, summary_name


def summaries(cfg, root: Path) -> dict[str, Path]:
    """{paper: its tables' summary file}, for every paper with transcribed tables."""
    return {paper: root / paths.TABLES / summary_name(paper) for paper in PAPERS if cfg.paper(paper).tables}


def status(cfg, root: Path) -> str:
    """The status table of the papers, from the committed summaries and metrics (scripts/readme_status.py)."""
    systems = {name: cfg.paper_of(name) for name in cfg.systems()}
    ensembles = {name: cfg.paper_of(name) for name in cfg.ensembles()}
    return build_status(summaries(cfg, root), systems, ensembles, root / paths.METRICS)


def run(cfg, root: Path, args) -> None:
    systems = {name: cfg.paper_of(name) for name in [*cfg.systems(), *cfg.ensembles()]}
    build_index(list(summaries(cfg, root).values()), root / paths.TABLES, root / paths.INDEX, root / paths.METRICS,
                systems, status(cfg, root))
