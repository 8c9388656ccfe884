"""Stage `index`: reports/claims.md, the papers' claims tested over seeds (reports/claims.py), with the same results as
data in reports/claims.json, and reports/index.md, which links it first, then the status of the papers (the README
shows the same table), every paper's built tables with their sources, row counts and claims that hold, the figures
(reports/figures/: training curves, with the `dvc plots` data in reports/plots/, and per paper its decoder's
attention on a test image), and every trained system and ensemble with its test scores; then it tags each system's
MLflow run with its paper, table rows and seed. It depends on all of them (and on what the attention figures read:
the systems' model files, the example image, the region features), so `dvc repro` at the root rebuilds every stage
of every paper. It keeps the curve PNGs it drew in data/cache/figures/ and reads the unchanged ones from there next
time (reports/figures.py): after one system retrains, it draws that system's curves and its paper's overview only. A
queued experiment's copy reads and adds to its repository's cache (config.loader.origin_root), which the repository's
own index prunes."""
from __future__ import annotations

from pathlib import Path

from .. import paths
from ..config.loader import origin_root
from ..io import write_json, write_text
from ..papers.registry import papers
from ..reports.claims import (CLAIMS, CLAIMS_JSON, SPREAD, ClaimsPage, Systems, build_claims, cross_cpu_spread,
                               seed_groups)
from ..reports.attention import Mechanism, caption, write_attention_figures
from ..reports.figures import FIGURES, PLOTS, figure_index_lines, write_figures
from ..reports.runs import tag_runs
from ..reports.index_page import build_index, build_status
from ..reports.table_builder import summary_name
from ..reports.table_schema import load_tables

FIGURE_CACHE = Path("data/cache/figures")  # the curve PNGs this stage drew last (reports/figures.py)


def titles() -> dict[str, str]:
    """{paper: its name in the status table}, in the table's order (papers/<paper>/paper.py)."""
    return {name: record.title for name, record in papers().items() if record.title}


def summaries(cfg, root: Path) -> dict[str, Path]:
    """{paper: its tables' summary file}, for every paper with transcribed tables."""
    return {paper: root / paths.TABLES / summary_name(paper) for paper, section in cfg.papers.items() if section.tables}


def status(cfg, root: Path, page: ClaimsPage | None = None) -> str:
    """The status table of the papers, from the committed summaries and metrics and the claims page (`page`, built
    here from them when not given; scripts/readme_status.py)."""
    systems = {name: cfg.paper_of(name) for name in cfg.systems()}
    ensembles = {name: cfg.paper_of(name) for name in cfg.ensembles()}
    return build_status(titles(), summaries(cfg, root), systems, ensembles, root / paths.METRICS,
                        page or claims(cfg, root), seed_groups(cfg))


def claims(cfg, root: Path) -> ClaimsPage:
    """The claims page: every paper's transcribed claims judged on the committed metrics, with the cross-CPU spread of
    benchmarks/results/spread.json."""
    tables = {paper: load_tables(list(section.tables), paths.paper_tables(paper))
              for paper, section in cfg.papers.items() if section.tables}
    spread_md = SPREAD.with_suffix(".md").as_posix()  # its readable form, linked from reports/claims.md
    return build_claims(tables, Systems.of(cfg), root / paths.METRICS, cross_cpu_spread(root / SPREAD),
                        f"[{spread_md}](../{spread_md})")


def figures(cfg, root: Path) -> list[str]:
    """Every trained system's training-curve PNG and `dvc plots` file, every paper's overview (reports/figures.py)
    and attention figure (reports/attention.py); returns the index's section that lists them."""
    owners = {name: cfg.paper_of(name) for name in cfg.systems()}
    trained = {paper: [n for n, owner in owners.items() if owner == paper] for paper in dict.fromkeys(owners.values())}
    names, records = titles(), papers()
    origin = origin_root()  # a queued experiment's copy shares its repository's cache and leaves it unpruned
    written = write_figures(root / paths.METRICS, root / FIGURES, trained, root / PLOTS, seed_groups(cfg),
                            names, cache=origin / FIGURE_CACHE, prune_cache=origin.resolve() == root.resolve())
    mechanisms = {name: Mechanism(**r.attention) for name, r in records.items() if r.attention}
    attention = write_attention_figures(cfg, root, root / FIGURES, mechanisms, names)
    drawn = {name: [(label, root / path) for label, path in record.figures(cfg).items() if (root / path).is_file()]
             for name, record in records.items() if record.figures}  # what the papers' own stages draw
    captions = {path.name: caption(mechanisms[paper]) for paper, path in attention.items()}
    for record in records.values():
        captions.update(record.captions)
    return figure_index_lines(written, root / paths.INDEX, names, root / PLOTS, attention,
                              {paper: files for paper, files in drawn.items() if files}, captions)


def run(cfg, root: Path, args) -> None:
    systems = {name: cfg.paper_of(name) for name in [*cfg.systems(), *cfg.ensembles()]}
    page = claims(cfg, root)
    write_text(root / CLAIMS, page.markdown)
    write_json(root / CLAIMS_JSON, page.data)
    build_index(list(summaries(cfg, root).values()), root / paths.TABLES, root / paths.INDEX, root / paths.METRICS,
                systems, status(cfg, root, page), (root / CLAIMS, page), figures(cfg, root))
    tag_runs(cfg, root)  # MLflow's runs by paper, table rows and seed (reports/runs.py)
