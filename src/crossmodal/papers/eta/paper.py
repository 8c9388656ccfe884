"""Entangled Transformer for Image Captioning (Li, Zhu, Liu & Yang, ICCV 2019): ETA-Transformer.

Its systems, recipes and ensembles are params.yaml's `eta` section; its tables are in tables/."""
from __future__ import annotations

from .. import Paper

PAPER = Paper(name="eta", title="ETA-Transformer", order=2)
