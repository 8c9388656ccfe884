"""Stage `synthesize_vqa`: the VQA world (worlds/vqa_world.py) over the image world's scenes, as VQA v2 question and
annotation files in data/raw/vqa_world/ (the test-dev annotations under server/, which only the test reads). Under
the real profile a note: VQA v2 comes from the `vqa_v2` download."""
from __future__ import annotations

from pathlib import Path

from .. import paths
from ..config.loader import to_dict
from ..stage_common import write_task_world


def run(cfg, root: Path, args) -> None:
    def generate(scene_graphs, out):
        from ..worlds.vqa_world import VqaWorldConfig, generate

        return {"questions": generate(VqaWorldConfig(**to_dict(cfg.vqa.world)), scene_graphs, out)}

    write_task_world(cfg, root, paths.VQA_WORLD, "VQA v2", generate)
