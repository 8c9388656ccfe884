"""HOCA's own params sections, under `hoca.studies` in params.yaml: its figures (`figures`) and its cost table
(`cost`), which study trained systems beyond the tables (paper.py declares them; `Paper.study` builds them)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class FiguresConfig:
    """HOCA's Figs. 5-7 (stage hoca_figures, figures.py): the L-HOCA-UBT systems of the rank sweep
    (each at its own `model_args.rank`) and the HOCA-UBT line beside them (`full`), the systems whose learning
    curves are drawn, and those whose MAF weights are drawn over one test caption. Each must be a HOCA system."""

    rank_sweep: tuple[str, ...] = ()
    full: str = ""
    curves: tuple[str, ...] = ()
    maf: tuple[str, ...] = ()


@dataclass(frozen=True)
class CostConfig:
    """HOCA's Table 3 (stage hoca_cost): each row (`rows`: row variant -> the system measured) trained for `epochs`
    epochs of `batch_size` clips with `model_args` (the paper's model size) over its system's, in a process of its
    own; its time and its peak memory above the process's memory before the model was built."""

    rows: dict[str, str] = field(default_factory=dict)
    model_args: dict = field(default_factory=dict)
    batch_size: int = 25
    epochs: int = 1

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.epochs < 1:
            raise ValueError("batch_size and epochs must be at least 1")
