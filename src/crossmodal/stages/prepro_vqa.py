"""Stage `prepro_vqa`: BAN's preprocessing of VQA v2 files (data/vqa.py `preprocess_vqa`): the answer vocabulary,
the question words, and per split the encoded questions and soft targets, in data/processed/vqa/. It reads the
synthetic VQA world; under the real profile VQA v2 is not wired in yet and the stage stops with one line."""
from __future__ import annotations

import json
from pathlib import Path

from .. import paths
from ..io import InputError
from .common import real


def run(cfg, root: Path, args) -> None:
    if real(cfg):
        raise InputError("VQA v2 under profile real is not wired into prepro_vqa yet (BAN runs on the synthetic "
                         "profile only so far; docs/real-data.md)")
    from ..data.vqa import preprocess_vqa

    summary = preprocess_vqa(root / paths.VQA_WORLD, root / paths.VQA, cfg.vqa.min_answer_count,
                             cfg.vqa.question_length)
    print(json.dumps(summary))
