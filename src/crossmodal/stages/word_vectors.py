"""Stage `word_vectors`: the word vectors BAN-Glove starts its word embedding from, in GloVe's text format
(data/features/word_vectors.txt). Synthetic profile: skip-gram vectors (features/word_vectors.py says why not GloVe
itself) trained on the worlds' training text: the image world's captions, and the questions of the VQA world and the
sentences of the grounding world where systems of those tasks are trained. Real profile: the published GloVe file
(dataset `glove`), restricted to the words of those tasks' processed word lists."""
from __future__ import annotations

import json
from pathlib import Path

from .. import paths
from ..io import InputError
from ..pipeline import manifests
from ..stage_common import real


def tasks(cfg) -> set[str]:
    return {system.task for system in cfg.systems().values()}


def training_text(cfg, root: Path) -> list[list[str]]:
    """The tokens of every training caption of the image world, and of every training question (VQA world) and
    sentence (grounding world) of the trained tasks."""
    images = json.loads((root / paths.DATASET_JSON).read_text())["images"]
    text = [s["tokens"] for image in images if image["split"] == "train" for s in image["sentences"]]
    if "vqa" in tasks(cfg):
        from ..data.vqa import questions_file, read_vqa_questions, tokenize_question

        text += [tokenize_question(q.question) for q in read_vqa_questions(questions_file(root / paths.VQA_WORLD,
                                                                                              "train"))]
    if "grounding" in tasks(cfg):
        from ..data.flickr30k_entities import EntityRelease

        world = root / paths.GROUNDING_WORLD
        manifests.check(world)
        with EntityRelease(world) as release:
            text += [[w.lower() for w in sentence.words] for image_id in release.split_ids("train")
                     for sentence in release.sentences(image_id)]
    return text


def run(cfg, root: Path, args) -> None:
    from ..features.word_vectors import read_word_vectors, train_word_vectors, write_word_vectors

    wv = cfg.word_vectors
    if real(cfg):
        source = root / paths.raw("glove") / wv.file
        words = {w for task, folder in (("vqa", paths.VQA), ("grounding", paths.GROUNDING)) if task in tasks(cfg)
                 for w in json.loads((root / folder / "words.json").read_text())}
        vectors = read_word_vectors(source, words)
        if not vectors:
            raise InputError(f"{source}: none of the {len(words)} words of the processed questions and sentences "
                             "has a vector")
    else:
        vectors = train_word_vectors(training_text(cfg, root), wv.dim, seed=wv.seed, epochs=wv.epochs,
                                     window=wv.window, negative=wv.negative)
    write_word_vectors(root / paths.WORD_VECTORS, vectors)
    print(json.dumps({"words": len(vectors), "dim": wv.dim}))
