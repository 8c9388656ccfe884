"""Stages `word_vectors` and `word2vec` (`word-vectors --vectors glove | word2vec`): word vectors in GloVe's text
format that a model's word embedding starts from.

- `glove` (BAN-Glove; data/features/word_vectors.txt, params `word_vectors`): synthetic profile, skip-gram vectors
  (features/word_vectors.py says why not GloVe itself) trained on the image world's training captions, and the
  questions of the VQA world and the sentences of the grounding world where systems of those tasks are trained;
  real profile, the published GloVe file (dataset `glove`), restricted to the words of those tasks' processed word
  lists.
- `word2vec` (HOCA; data/features/word2vec.txt, params `word2vec`): synthetic profile, skip-gram vectors trained on
  the training captions of the video world's datasets; real profile, word2vec's GoogleNews vectors (dataset
  `word2vec`, binary format), restricted to the words of the video vocabularies."""
from __future__ import annotations

import json
from pathlib import Path

from .. import paths
from ..config import VIDEO_DATASETS
from ..io import InputError
from .common import real

ARGUMENTS = {"--vectors": "glove (BAN's, stage word_vectors) or word2vec (HOCA's, stage word2vec)"}
OUTPUT = {"glove": paths.WORD_VECTORS, "word2vec": paths.WORD2VEC}


def tasks(cfg) -> set[str]:
    return {system.task for system in cfg.systems().values()}


def glove_text(cfg, root: Path) -> list[list[str]]:
    """The tokens of every training caption of the image world, and of every training question (VQA world) and
    sentence (grounding world) of the trained tasks."""
    images = json.loads((root / paths.DATASET_JSON).read_text())["images"]
    text = [s["tokens"] for image in images if image["split"] == "train" for s in image["sentences"]]
    if "vqa" in tasks(cfg):
        from ..data.vqa import questions_file, read_vqa_questions, tokenize_question

        text += [tokenize_question(q.question) for q in read_vqa_questions(questions_file(root / paths.VQA_WORLD,
                                                                                              "train"))]
    if "grounding" in tasks(cfg):
        from ..data.flickr30k_entities import read_entity_sentences, read_split_ids

        world = root / paths.GROUNDING_WORLD
        text += [[w.lower() for w in sentence.words] for image_id in read_split_ids(world / "train.txt")
                 for sentence in read_entity_sentences(world / "Sentences" / f"{image_id}.txt")]
    return text


def video_datasets(cfg) -> list[str]:
    """The video datasets some vocabulary describes."""
    return [d for d in VIDEO_DATASETS if any(v.corpus == d for v in cfg.vocabularies.values())]


def word2vec_text(cfg, root: Path) -> list[list[str]]:
    """The tokens of every training caption of the video datasets."""
    from ..data.captions import tokenize
    from .prepro_video import read_videos

    return [tokenize(caption) for dataset in video_datasets(cfg) for video in read_videos(cfg, root, dataset).values()
            if video.split == "train" for caption in video.captions]


def used_words(cfg, root: Path, kind: str) -> set[str]:
    """The words the processed data of `kind`'s users hold (what the published vectors are restricted to)."""
    if kind == "glove":
        return {w for task, folder in (("vqa", paths.VQA), ("grounding", paths.GROUNDING)) if task in tasks(cfg)
                for w in json.loads((root / folder / "words.json").read_text())}
    return {w for name, v in cfg.vocabularies.items() if v.corpus != "images"
            for w in json.loads((root / paths.vocabulary(name, v.corpus) / "vocab.json").read_text())["words"]}


def read_binary_vectors(path: Path, words: set[str]) -> dict:
    """`words`' vectors of a word2vec binary file (GoogleNews-vectors-negative300.bin), read by gensim."""
    if not path.is_file():
        raise InputError(f"missing word-vector file: {path}")
    from gensim.models import KeyedVectors

    vectors = KeyedVectors.load_word2vec_format(str(path), binary=True)
    return {w: vectors[w].astype("float32") for w in sorted(words) if w in vectors.key_to_index}


def run(cfg, root: Path, args) -> None:
    from ..features.word_vectors import read_word_vectors, train_word_vectors, write_word_vectors

    kind = args.vectors
    if kind not in OUTPUT:
        raise InputError(f"--vectors must be one of {', '.join(OUTPUT)}, not {kind!r}")
    wv = cfg.word_vectors if kind == "glove" else cfg.word2vec
    if real(cfg):
        source, words = root / paths.raw(kind) / wv.file, used_words(cfg, root, kind)
        vectors = read_binary_vectors(source, words) if source.suffix == ".bin" else read_word_vectors(source, words)
        if not vectors:
            raise InputError(f"{source}: none of the {len(words)} words of the processed text has a vector")
    else:
        text = glove_text(cfg, root) if kind == "glove" else word2vec_text(cfg, root)
        vectors = train_word_vectors(text, wv.dim, seed=wv.seed, epochs=wv.epochs, window=wv.window,
                                     negative=wv.negative)
    write_word_vectors(root / OUTPUT[kind], vectors)
    print(json.dumps({"words": len(vectors), "dim": wv.dim}))
