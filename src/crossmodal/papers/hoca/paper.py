"""Low-Rank HOCA (Jin, Huang, Chen, Li & Zhang, EMNLP 2019): video captioning with higher-order cross-modal attention.

Its systems train on the video world's MSVD- and MSR-VTT-like data (params.yaml `hoca`); beyond them, two stages
study them (pipeline.py `stages`): Figs. 5-7 (`studies.figures`, commands/hoca_figures.py, figures.py) and Table 3's
cost of whole models (`studies.cost`, commands/hoca_cost.py).
"""
from __future__ import annotations

from pathlib import Path

from ... import paths
from .. import Paper
from .captions import CAPTIONS, FIGURE_FILES
from .params import CostConfig, FiguresConfig


def figures_drawn(cfg) -> bool:
    """Whether params name systems for every figure (then the stage hoca_figures draws them)."""
    figures = PAPER.study(cfg, "figures")
    return bool(figures.rank_sweep and figures.full and figures.curves and figures.maf)


def figures(cfg) -> dict[str, Path]:
    """The figures the index lists: {label: PNG}, when the stage hoca_figures draws them."""
    return dict(FIGURE_FILES) if figures_drawn(cfg) else {}


def maf_reads(cfg, system: str) -> list[Path]:
    """The files Fig. 7's panel of `system` reads (figures.py `load_maf`): its model file, its vocabulary's vocab.json
    and labels.h5, and the feature file of each of its named inputs. Here, not beside `load_maf`, so that the
    generator lists them without importing matplotlib (0.7 s of every `code` and `params`)."""
    spec = cfg.model_of(system)
    folder = paths.vocabulary(spec.vocabulary, cfg.vocabularies[spec.vocabulary].corpus)
    return [paths.MODELS / system / "model.pt", folder / "vocab.json", folder / "labels.h5",
            *(paths.features(s) for s in spec.inputs.values())]


PAPER = Paper(name="hoca", title="HOCA / Low-Rank HOCA", order=4, studies={"figures": FiguresConfig,
                                                                          "cost": CostConfig},
              figures=figures, captions=CAPTIONS)
