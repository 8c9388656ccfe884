"""X-Linear Attention Networks for Image Captioning (Pan, Yao, Li & Mei, CVPR 2020): X-LAN and X-Transformer.

Its systems, recipes and ensembles are params.yaml's `xlan` section; its tables are in tables/."""
from __future__ import annotations

from .. import Paper

PAPER = Paper(name="xlan", title="X-LAN / X-Transformer", order=1, attention={
    "system": "xlan", "module": "attention", "method": "attend",
    "title": r"X-Linear spatial attention $\beta^s$ (eq. 4) of the decoder"})
