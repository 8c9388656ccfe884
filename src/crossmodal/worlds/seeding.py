"""One seeded generator per item of a world: the SHA-256 of the item's name parts, so that an item's content
depends on its own name only (not on how many items come before it, nor on other worlds' draws)."""
from __future__ import annotations

import hashlib

import numpy as np


def item_rng(*parts: object) -> np.random.Generator:
    """A generator seeded by the first 8 bytes of SHA-256("part/part/...")."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))
