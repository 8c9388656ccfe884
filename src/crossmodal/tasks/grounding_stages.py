"""The grounding world's stages and what the word vectors read of it (the pipeline generator's, pipelines.py: a
task's world stages live with the task, so that the generator names none)."""
from __future__ import annotations

from .. import paths
from ..pipeline.stage_spec import manifest, stage, stage_code, world_file


def stages(cfg) -> dict:
    """The grounding world and BAN's preprocessing of Flickr30k Entities files."""
    grounding_world = manifest(paths.GROUNDING_WORLD)
    return {
        "synthesize_grounding": stage("python -m crossmodal synthesize-grounding", ["profile", "grounding.world"],
                                      [world_file(cfg, paths.SCENE_GRAPHS), *stage_code("synthesize_grounding")],
                                      [str(paths.GROUNDING_WORLD), grounding_world]),
        "prepro_grounding": stage("python -m crossmodal prepro-grounding", ["profile", "grounding.sentence_length"],
                                  [grounding_world, paths.raw("flickr30k_entities"), *stage_code("prepro_grounding")],
                                  [str(paths.GROUNDING)])}


def text(cfg) -> list:
    """The training sentences the word vectors learn from (the world, by its manifest), and the processed words that
    restrict GloVe under the real profile."""
    return [manifest(paths.GROUNDING_WORLD), paths.GROUNDING]
