"""Word vectors: trained on a world's text with gensim, read from the published files, turned into an embedding.

BAN-Glove initialises its question embedding from GloVe (Pennington et al. 2014; the official code reads
glove.6B.300d.txt), Low-Rank HOCA its word embedding from word2vec (300-d, the GoogleNews vectors). Neither file
describes the synthetic worlds' words, so on the synthetic profile the vectors are trained on the world's own text:
- with gensim's Word2Vec (skip-gram, negative sampling), the well-kept implementation. gensim has no GloVe trainer,
  and skip-gram with negative sampling factorises a shifted word-context PMI matrix (Levy and Goldberg 2014), the
  statistic GloVe fits by weighted least squares, so BAN-Glove's vectors here are skip-gram vectors in GloVe's
  role and file format (a deviation the BAN tables' notes state);
- no frequent-word downsampling by default (`sample` 0): a world's vocabulary has tens of words, all of them
  frequent, and gensim's default (1e-3) discards most of their occurrences (on a small colour / shape corpus it
  left colours and shapes at cosine 0.94 from each other, against -0.03 without it). Even so, words that fill
  the same slots of the same sentences end up close: on the worlds' text the colours sit at a mean cosine of 0.75
  from each other and the shapes at 0.92, and BAN-Glove, started from them, scores below BAN (docs/results.md);
- one worker thread, the seed, and a hash of a word's text that does not change between processes (`_stable_hash`,
  in place of Python's salted `hash`), so the same text and params give the same vectors in every run.

Files. GloVe's text format is one word per line followed by its components, space-separated, no header; word2vec's
text format is the same after a header line "<count> <dim>" (`read_word_vectors` takes either). Ours are written in
GloVe's, each component as the shortest decimal that reads back as the same float32.

`embedding_matrix` builds a vocabulary's [V, D] initial embedding: a word with a vector gets it; any other word a
draw from U(-0.1, 0.1) (HOCA: "words which are not in the word2vec matrix are initialized randomly"), seeded, or
zeros (`missing="zeros"`, BAN's official `create_glove_embedding_init`).
"""
from __future__ import annotations

import zlib
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from ..io import InputError, atomic_path


def _stable_hash(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def train_word_vectors(sentences: Iterable[Sequence[str]], dim: int, seed: int = 0, epochs: int = 10,
                       window: int = 5, min_count: int = 1, negative: int = 5,
                       sample: float = 0.0) -> dict[str, np.ndarray]:
    """Skip-gram vectors (gensim Word2Vec, one thread) of every word seen `min_count` times, most frequent first."""
    from gensim.models import Word2Vec  # imported here: only the word-vector stage needs it

    model = Word2Vec(sentences=[list(s) for s in sentences], vector_size=dim, window=window, min_count=min_count,
                     sg=1, negative=negative, sample=sample, epochs=epochs, seed=seed, workers=1,
                     hashfxn=_stable_hash)
    return {word: model.wv[word].astype(np.float32) for word in model.wv.index_to_key}


def write_word_vectors(path: str | Path, vectors: Mapping[str, np.ndarray]) -> None:
    """GloVe's text format (atomically); float32 components as their shortest exact decimals."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        for word, vector in vectors.items():
            if not word or any(c.isspace() for c in word):
                raise ValueError(f"word {word!r} cannot be written in the text format (empty or with whitespace)")
            out.write(word + " " + " ".join(repr(float(np.float32(v))) for v in vector) + "\n")


def read_word_vectors(path: str | Path, words: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Vectors of a GloVe or word2vec text file (all, or only `words`), as float32; the first occurrence of a word
    wins. Lines of another width than the first vector's are an error naming the line."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"missing word-vector file: {path}")
    wanted = None if words is None else set(words)
    vectors: dict[str, np.ndarray] = {}
    dim = None
    with open(path, encoding="utf-8", errors="strict") as lines:
        for number, line in enumerate(lines, 1):
            fields = line.rstrip("\n").rstrip(" ").split(" ")
            if number == 1 and len(fields) == 2 and all(f.isdigit() for f in fields):
                dim = int(fields[1])  # word2vec's header: count, dimension
                continue
            if len(fields) < 2:
                raise InputError(f"{path}:{number}: expected a word and its components")
            if dim is None:
                dim = len(fields) - 1
            if len(fields) - 1 != dim:
                raise InputError(f"{path}:{number}: {len(fields) - 1} components, expected {dim}")
            word = fields[0]
            if (wanted is None or word in wanted) and word not in vectors:
                try:
                    vectors[word] = np.array(fields[1:], dtype=np.float32)
                except ValueError:
                    raise InputError(f"{path}:{number}: a component of {word!r} is not a number") from None
    return vectors


def initialise_embedding(embedding, matrix, padding_row: int | None = None) -> None:
    """Copy `matrix` ([V, D], e.g. from `embedding_matrix`) into an nn.Embedding's weight; `padding_row` stays
    zero. A shape mismatch is a ValueError."""
    import torch

    if tuple(matrix.shape) != tuple(embedding.weight.shape):
        raise ValueError(f"word vectors {tuple(matrix.shape)} do not fit the embedding {tuple(embedding.weight.shape)}")
    with torch.no_grad():
        embedding.weight.copy_(torch.as_tensor(matrix))
        if padding_row is not None:
            embedding.weight[padding_row].zero_()


def embedding_matrix(vocabulary: Sequence[str], vectors: Mapping[str, np.ndarray], dim: int, seed: int = 0,
                     missing: str = "uniform") -> tuple[np.ndarray, int]:
    """([V, dim] float32 initial embedding, how many words had a vector); the rest drawn from U(-0.1, 0.1)
    (`missing="uniform"`) or zero (`"zeros"`)."""
    if missing not in ("uniform", "zeros"):
        raise ValueError(f"missing must be uniform or zeros, not {missing!r}")
    rng = np.random.default_rng(seed)
    shape = (len(vocabulary), dim)
    matrix = (rng.uniform(-0.1, 0.1, shape) if missing == "uniform" else np.zeros(shape)).astype(np.float32)
    found = 0
    for row, word in enumerate(vocabulary):
        vector = vectors.get(word)
        if vector is not None:
            if vector.shape != (dim,):
                raise InputError(f"the vector of {word!r} has {vector.shape[0]} components, the embedding {dim}")
            matrix[row] = vector
            found += 1
    return matrix, found


def start_embedding(model, path: str | Path, vocabulary: Sequence[str], dim: int, missing: str = "uniform") -> None:
    """Initialise `model`'s word embedding through its `load_word_vectors` from the vectors of the file `path`, one
    row per word of `vocabulary` in its order (`embedding_matrix`; `missing` as there). Every task that starts an
    embedding from word vectors goes through here: captioning (HOCA, word2vec's role) and BAN's (GloVe's)."""
    matrix, _ = embedding_matrix(vocabulary, read_word_vectors(path, vocabulary), dim, missing=missing)
    model.load_word_vectors(matrix)
