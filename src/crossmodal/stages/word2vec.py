"""Stage `word2vec`: the word vectors HOCA starts its word embedding from, in word2vec's role and GloVe's text format
(data/features/word2vec.txt; params `word2vec`). Synthetic profile: skip-gram vectors (features/word_vectors.py)
trained on the training captions of the video world's datasets. Real profile: word2vec's GoogleNews vectors (dataset
`word2vec`, binary format, read by gensim), restricted to the words of the video vocabularies."""
from __future__ import annotations

import json
from pathlib import Path

from .. import paths
from ..config.data import VIDEO_DATASETS
from ..io import InputError
from ..stage_common import real


def training_text(cfg, root: Path) -> list[list[str]]:
    """The tokens of every training caption of the video datasets some vocabulary describes."""
    from ..data.captions import tokenize
    from .prepro_video import read_videos

    datasets = [d for d in VIDEO_DATASETS if any(v.corpus == d for v in cfg.vocabularies.values())]
    return [tokenize(caption) for dataset in datasets for video in read_videos(cfg, root, dataset).values()
            if video.split == "train" for caption in video.captions]


def read_binary_vectors(path: Path, words: set[str]) -> dict:
    """`words`' vectors of a word2vec binary file (GoogleNews-vectors-negative300.bin), read by gensim."""
    if not path.is_file():
        raise InputError(f"missing word-vector file: {path}")
    from gensim.models import KeyedVectors

    vectors = KeyedVectors.load_word2vec_format(str(path), binary=True)
    return {w: vectors[w].astype("float32") for w in sorted(words) if w in vectors.key_to_index}


def run(cfg, root: Path, args) -> None:
    from ..features.word_vectors import train_word_vectors, write_word_vectors

    wv = cfg.word2vec
    if real(cfg):
        source = root / paths.raw("word2vec") / wv.file
        words = {w for name, v in cfg.vocabularies.items() if v.corpus != "images"
                 for w in json.loads((root / paths.vocabulary(name, v.corpus) / "vocab.json").read_text())["words"]}
        vectors = read_binary_vectors(source, words)
        if not vectors:
            raise InputError(f"{source}: none of the {len(words)} words of the video vocabularies has a vector")
    else:
        vectors = train_word_vectors(training_text(cfg, root), wv.dim, seed=wv.seed, epochs=wv.epochs,
                                     window=wv.window, negative=wv.negative)
    write_word_vectors(root / paths.WORD2VEC, vectors)
    print(json.dumps({"words": len(vectors), "dim": wv.dim}))
