"""Every paper's record, found by its folder: `papers/<name>/paper.py` and its `PAPER`.

A module of its own, apart from the `Paper` record (papers/__init__.py), because it imports every paper's paper.py:
the stages that list the papers (the pipeline generator's `code` and `params`, the `index`) depend on all of them
(`IMPORTS_EACH`, which pipeline/closures.py reads), a paper's own stage commands only on their paper's.
"""
from __future__ import annotations

import importlib

from ..config.loader import paper_names
from . import Paper

IMPORTS_EACH = "papers/*/paper.py"  # what `papers()` imports by name: every paper's record (pipeline/closures.py)


def papers() -> dict[str, Paper]:
    """Every paper's record by name, in the order of the status table (`order`, then name)."""
    found = []
    for name in paper_names():  # the folders the config loader takes params sections by
        paper = importlib.import_module(f"{__package__}.{name}.paper").PAPER
        found.append(paper)
        if paper.name != name:
            raise ValueError(f"papers/{name}/paper.py: PAPER.name is {paper.name!r}, not its folder's name")
    return {p.name: p for p in sorted(found, key=lambda p: (p.order, p.name))}
