"""The baselines that several papers' tables share (Show and Tell, Att2in, Up-Down): systems of no paper of their
own, shown in AoANet's, X-LAN's and ETA's tables.

Its systems, recipes and ensembles are params.yaml's `baselines` section; its tables are in tables/."""
from __future__ import annotations

from .. import Paper

PAPER = Paper(name="baselines", title=None, order=0)
