"""Bilinear Attention Networks (Kim, Jun & Zhang, NeurIPS 2018): VQA 2.0 and Flickr30k Entities.

Its systems, recipes and ensembles are params.yaml's `ban` section; its tables are in tables/."""
from __future__ import annotations

from .. import Paper

PAPER = Paper(name="ban", title="BAN", order=5)
