"""The qualitative examples' material that several test modules share: a PNG's chunk types (a picture written
without metadata has only IHDR, IDAT and IEND), random pictures, and what `write_captions` reads (the examples that
`prepro_captions` sets aside and their references, a profile, a test-metrics row)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
from PIL import Image

from crossmodal import paths
from crossmodal.data.captions import write_examples
from crossmodal.data.karpathy import KarpathyImage
from crossmodal.pipeline import manifests


def chunks(png: bytes) -> list[str]:
    """The chunk types of a PNG file, in order."""
    found, at = [], 8
    while at < len(png):
        length = int.from_bytes(png[at:at + 4], "big")
        found.append(png[at + 4:at + 8].decode())
        at += 12 + length
    return found


def picture(seed: int = 0, size: int = 48) -> Image.Image:
    """A random RGB picture, the same for the same seed."""
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8))


def tiny_root(root: Path, ids: list[int], examples: int = 2, images: bool = True) -> dict[int, list[str]]:
    """What `prepro_captions` leaves for the examples: the first `examples` test images by id set aside, with a
    copy of each picture unless `images` is False (the real profile); their references."""
    world = root / "world"
    entries = [KarpathyImage(i, i, "test", "images/test", f"synth_test_{i:06d}.png", []) for i in ids]
    for entry in entries:
        (world / entry.path).parent.mkdir(parents=True, exist_ok=True)
        picture(entry.image_id).save(world / entry.path)
    write_examples(sorted(entries, key=lambda e: e.image_id)[:examples], world if images else None,
                   root / paths.EXAMPLES)
    manifests.write(root / paths.EXAMPLES)  # and its manifest, which the stages check it against
    return {i: [f"reference {k} of image {i}" for k in range(5)] for i in ids}


def config(profile: str = "synthetic"):
    """The one field of the config that `write_captions` reads."""
    return SimpleNamespace(profile=profile)


TEST = {"BLEU-1": 0.75, "BLEU-4": 0.4, "METEOR": 0.3, "ROUGE-L": 0.6, "CIDEr": 2.028341, "SPICE": None,
        "SPICE_status": "unavailable (no CoreNLP jars)"}
