"""Stage `index`: reports/index.md, every paper's built tables with their sources and row counts, and every
trained system and ensemble with its test scores. It depends on all of them, so `dvc repro` at the root rebuilds
every stage of every paper."""
from __future__ import annotations

from pathlib import Path

from .. import paths
from ..config import PAPERS
from ..reports.tables import build_index, summary_name


def run(cfg, root: Path, args) -> None:
    summaries = [root / paths.TABLES / summary_name(paper) for paper in PAPERS if cfg.paper(paper).tables]
    systems = {name: cfg.paper_of(name) for name in [*cfg.systems(), *cfg.ensembles()]}
    build_index(summaries, root / paths.TABLES, root / paths.INDEX, root / paths.METRICS, systems)
