"""Stage `prepro_vqa`: BAN's preprocessing of VQA v2 files (data/vqa.py `preprocess_vqa`): the answer vocabulary,
the question words, and per split the encoded questions and soft targets, in data/processed/vqa/. It reads the
synthetic VQA world, or under the real profile VQA v2 itself from the `vqa_v2` download (train2014 and val2014 with
their annotations, the test-dev2015 questions): the same file names in both folders."""
from __future__ import annotations

import json
from pathlib import Path

from .. import paths
from ..stage_common import real


def run(cfg, root: Path, args) -> None:
    from ..data.vqa import preprocess_vqa

    source = root / (paths.raw("vqa_v2") if real(cfg) else paths.VQA_WORLD)
    summary = preprocess_vqa(source, root / paths.VQA, cfg.vqa.min_answer_count, cfg.vqa.question_length)
    print(json.dumps(summary))
