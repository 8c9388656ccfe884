"""Attention on Attention for Image Captioning (Huang, Wang, Chen & Wei, ICCV 2019): AoANet.

Its systems, recipes and ensembles are params.yaml's `aoanet` section; its tables are in tables/."""
from __future__ import annotations

from .. import Paper

PAPER = Paper(name="aoanet", title="AoANet", order=3)
