"""Word vectors (features/word_vectors.py): gensim skip-gram vectors that place words of one role together, the
same vectors in every process, files in GloVe's and word2vec's text formats read back exactly, and embeddings."""
from __future__ import annotations

import os
import subprocess
import sys
from itertools import product
from pathlib import Path

import numpy as np
import pytest

import crossmodal
from crossmodal.features.word_vectors import (
    embedding_matrix,
    read_word_vectors,
    train_word_vectors,
    write_word_vectors,
)
from crossmodal.io import InputError

COLORS, SHAPES = ("red", "blue", "green", "yellow"), ("circle", "square", "star", "cross")


def corpus() -> list[list[str]]:
    rng = np.random.default_rng(0)
    sentences = []
    for _ in range(600):
        a, b = rng.choice(COLORS, 2, replace=False), rng.choice(SHAPES, 2, replace=False)
        sentences.append(["a", a[0], b[0], "is", "left", "of", "a", a[1], b[1]])
    return sentences


def cosine(u, v) -> float:
    return float(u @ v / np.linalg.norm(u) / np.linalg.norm(v))


def test_words_of_one_role_end_up_together():
    vectors = train_word_vectors(corpus(), dim=16, epochs=20)
    same = np.mean([cosine(vectors[a], vectors[b]) for group in (COLORS, SHAPES) for a in group for b in group
                    if a != b])
    across = np.mean([cosine(vectors[a], vectors[b]) for a, b in product(COLORS, SHAPES)])
    assert same > 0.8 and across < 0.3, (same, across)


@pytest.mark.slow  # a Python process
def test_vectors_do_not_depend_on_the_process(tmp_path):
    here = train_word_vectors(corpus(), dim=8, epochs=3)
    write_word_vectors(tmp_path / "here.txt", here)
    code = ("import sys; sys.path[:0] = sys.argv[1:3]; from test_word_vectors import corpus; "
            "from crossmodal.features.word_vectors import train_word_vectors, write_word_vectors; "
            f"write_word_vectors({str(tmp_path / 'there.txt')!r}, train_word_vectors(corpus(), dim=8, epochs=3))")
    src, tests = str(Path(crossmodal.__file__).parents[1]), str(Path(__file__).parent)
    kernels = {k: v for k, v in os.environ.items() if k.startswith(("OPENBLAS_", "MKL_", "OMP_"))}  # the machine's
    # BLAS kernel choice (OPENBLAS_CORETYPE is set on some CPUs), which is the same for every stage's process
    subprocess.run([sys.executable, "-c", code, src, tests], check=True, env={**kernels, "PYTHONHASHSEED": "123"})
    assert (tmp_path / "there.txt").read_bytes() == (tmp_path / "here.txt").read_bytes()


def test_text_files_read_back_exactly(tmp_path):
    vectors = {"red": np.array([0.1, -2.5e-8, 3.0], np.float32), "circle": np.array([1 / 3, 0, -1], np.float32)}
    write_word_vectors(tmp_path / "glove.txt", vectors)
    back = read_word_vectors(tmp_path / "glove.txt")
    assert list(back) == ["red", "circle"] and all(np.array_equal(back[w], vectors[w]) for w in vectors)
    assert list(read_word_vectors(tmp_path / "glove.txt", words=["circle", "absent"])) == ["circle"]
    (tmp_path / "w2v.txt").write_text("2 3\nthe 0.5 0.25 -1\nof 1 2 3\n")
    assert read_word_vectors(tmp_path / "w2v.txt")["the"].tolist() == [0.5, 0.25, -1.0]
    (tmp_path / "ragged.txt").write_text("the 0.5 0.25\nof 1 2 3\n")
    with pytest.raises(InputError, match="ragged.txt:2: 3 components, expected 2"):
        read_word_vectors(tmp_path / "ragged.txt")
    (tmp_path / "bad.txt").write_text("the 0.5 x\n")
    with pytest.raises(InputError, match="bad.txt:1: a component of 'the' is not a number"):
        read_word_vectors(tmp_path / "bad.txt")
    with pytest.raises(ValueError, match="whitespace"):
        write_word_vectors(tmp_path / "x.txt", {"two words": np.zeros(2, np.float32)})


def test_embedding_copies_known_words_and_draws_the_rest():
    vectors = {"red": np.array([1, 2, 3], np.float32)}
    matrix, found = embedding_matrix(["<pad>", "red", "zebra"], vectors, 3, seed=4)
    assert found == 1 and matrix.dtype == np.float32 and matrix.shape == (3, 3)
    assert matrix[1].tolist() == [1, 2, 3]
    assert (np.abs(matrix[[0, 2]]) <= 0.1).all()
    assert np.array_equal(embedding_matrix(["<pad>", "red", "zebra"], vectors, 3, seed=4)[0], matrix)
    with pytest.raises(InputError, match="has 3 components, the embedding 4"):
        embedding_matrix(["red"], vectors, 4)
    zeros, _ = embedding_matrix(["<pad>", "red"], vectors, 3, missing="zeros")  # BAN's official initialisation
    assert zeros.tolist() == [[0, 0, 0], [1, 2, 3]]
