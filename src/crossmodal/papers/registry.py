"""Every paper's record, found by its folder: `papers/<name>/paper.py` and its `PAPER`.

A module of its own, apart from the `Paper` record (papers/__init__.py), because it imports every paper's paper.py:
the stages that list the papers (the pipeline generator's `code` and `params`, the `index`) depend on all of them
(`IMPORTS_EACH`, which pipeline/closures.py reads), a paper's own stage commands only on their paper's.
"""
from __future__ import annotations

import importlib

from . import HERE, Paper

IMPORTS_EACH = "papers/*/paper.py"  # what `papers()` imports by name: every paper's record (pipeline/closures.py)


def papers() -> dict[str, Paper]:
    """Every paper's record by name, in the order of the status table (`order`, then name)."""
    found = []
    for path in sorted(HERE.glob("*/paper.py")):
        paper = importlib.import_module(f"{__package__}.{path.parent.name}.paper").PAPER
        found.append(paper)
        if paper.name != path.parent.name:
            raise ValueError(f"{path}: PAPER.name is {paper.name!r}, not its folder's name {path.parent.name!r}")
    return {p.name: p for p in sorted(found, key=lambda p: (p.order, p.name))}
