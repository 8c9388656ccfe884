"""Attention on Attention for Image Captioning (Huang, Wang, Chen & Wei, ICCV 2019): AoANet.

Its systems, recipes and ensembles are params.yaml's `aoanet` section; its tables are in tables/."""
from __future__ import annotations

from .. import Paper

PAPER = Paper(name="aoanet", title="AoANet", order=3, attention={
    "system": "aoanet", "module": "attention", "method": "forward",
    "title": "multi-head attention f_mh-att of the AoA decoder (eq. 8)"})
