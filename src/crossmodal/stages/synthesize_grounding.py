"""Stage `synthesize_grounding`: the grounding world (worlds/grounding_world.py) over the image world's scenes, as
Flickr30k Entities files (annotations.zip with Sentences/ and Annotations/, the split lists) in data/raw/grounding_world/. Under the real
profile a note: Flickr30k Entities comes from the `flickr30k_entities` download."""
from __future__ import annotations

from pathlib import Path

from .. import paths
from ..config.loader import to_dict
from ..pipeline import manifests
from ..stage_common import write_task_world


def run(cfg, root: Path, args) -> None:
    def generate(scene_graphs, out):
        from ..worlds.grounding_world import GroundingWorldConfig, generate

        return {"images": generate(GroundingWorldConfig(**to_dict(cfg.grounding.world)), scene_graphs, out)}

    write_task_world(cfg, root, paths.GROUNDING_WORLD, "Flickr30k Entities", generate)
    manifests.write(root / paths.GROUNDING_WORLD)
