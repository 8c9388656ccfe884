"""The VQA world's stages and what the word vectors read of it (the pipeline generator's, pipelines.py: a task's
world stages live with the task, so that the generator names none)."""
from __future__ import annotations

from .. import paths
from ..pipeline.stage_spec import stage, stage_code, world_file


def stages(cfg) -> dict:
    """The VQA world and BAN's preprocessing of VQA v2 files."""
    vqa_world = str(paths.VQA_WORLD)
    return {  # the world's scene graphs, not its 2,000 pictures: a no-op repro checks one file, not the folder
        "synthesize_vqa": stage("python -m crossmodal synthesize-vqa", ["profile", "vqa.world"],
                                [world_file(cfg, paths.SCENE_GRAPHS), *stage_code("synthesize_vqa")], [vqa_world]),
        "prepro_vqa": stage("python -m crossmodal prepro-vqa", ["profile", "vqa.min_answer_count",
                                                                 "vqa.question_length"],
                            [vqa_world, paths.raw("vqa_v2"), *stage_code("prepro_vqa")], [str(paths.VQA)])}


def text(cfg) -> list:
    """The training questions the word vectors learn from (data/vqa.py questions_file), and the processed words that
    restrict GloVe under the real profile."""
    return [world_file(cfg, paths.VQA_WORLD / "v2_OpenEnded_mscoco_train2014_questions.json"), paths.VQA]
