"""The toy paper (docs/adding-a-paper.md): one model, `toy_pool`, beside Up-Down in one table. Not a publication: it
shows what a sixth paper needs, and the tests' tiny pipeline builds it.

Its systems are params.yaml's `toy` section; its table is in tables/."""
from __future__ import annotations

from .. import Paper

PAPER = Paper(name="toy", title="Toy paper", order=6)
