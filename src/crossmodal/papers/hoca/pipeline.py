"""HOCA's stages beyond its systems' and its tables' (`stages`, which the pipeline generator calls): Figs. 5-7 and
Table 3's cost, each when params.yaml names its systems (`hoca.studies.figures`, `hoca.studies.cost`)."""
from __future__ import annotations

from ... import paths
from ...io import InputError
from ...pipeline.stage_spec import dedupe, grouped, model_data, stage, stage_code
from .captions import FIGURE_FILES, FOLDER
from .paper import PAPER, figures_drawn, maf_reads

COMMANDS = "papers.hoca.commands."  # where this paper's stage commands live (the CLI finds them there)


def hoca_figures_stage(cfg) -> dict:
    """Figs. 5-7 (commands/hoca_figures.py), when params name their systems."""
    from ...reports.claims import seed_groups

    figures = PAPER.study(cfg, "figures")
    if not figures_drawn(cfg):
        return {}
    unknown = [s for s in [*figures.rank_sweep, figures.full, *figures.curves, *figures.maf] if s not in cfg.systems()]
    if unknown:
        raise InputError(f"params.yaml: hoca.studies.figures names {unknown[0]!r}, which is not a system")
    ranks = ",".join(f"{cfg.model_of(s).model_args.get('rank', 1)}:{s}" for s in figures.rank_sweep)
    groups = seed_groups(cfg)  # Figs. 5 and 6 draw a system's seeds as their mean ± sd
    drawn = dedupe([m for s in [*figures.rank_sweep, figures.full, *figures.curves] for m in groups[s]])
    return {"hoca_figures": stage(
        f"python -m crossmodal hoca-figures --out {FOLDER} --ranks {ranks} --full {figures.full} "
        f"--curves {','.join(figures.curves)} --maf {','.join(figures.maf)}",
        ["profile", "evaluation.max_length", "hoca.studies.figures",
         *grouped(cfg, dedupe([k for s in figures.maf for k in cfg.model_sources(s)]))],
        [*(paths.METRICS / f"{s}.json" for s in drawn),
         *dedupe([str(f) for s in figures.maf for f in maf_reads(cfg, s)]), *stage_code(COMMANDS + "hoca_figures")],
        [], wdir="../..", plots=list(FIGURE_FILES.values()))}  # PNGs: `dvc plots show` shows them


def hoca_cost_stage(cfg) -> dict:
    """Table 3 (commands/hoca_cost.py): its rows (`hoca.studies.cost.rows`, which `Config.measured_rows` lists for
    the shared code), when params name them."""
    rows = PAPER.study(cfg, "cost").rows
    if not rows:
        return {}
    measured = list(rows.values())
    unknown = [s for s in measured if s not in cfg.systems()]
    if unknown:
        raise InputError(f"params.yaml: hoca.studies.cost.rows names {unknown[0]!r}, which is not a system")
    return {"hoca_cost": stage(
        "python -m crossmodal hoca-cost", ["profile", "compute", "hoca.studies.cost",
                                           *grouped(cfg, dedupe([k for s in measured for k in cfg.sources(s)]))],
        [*dedupe([str(d) for s in measured for d in model_data(cfg, s)]),
         *stage_code(COMMANDS + "hoca_cost", "tasks.captioning", "tasks.objectives.xe", "models.hoca")], [],
        [paths.METRICS / f"{row}.json" for row in rows], wdir="../..")}


def stages(cfg) -> dict:
    """The stages beyond HOCA's systems' and its tables': {stage name: stage}."""
    return {**hoca_figures_stage(cfg), **hoca_cost_stage(cfg)}


