"""CiderD must equal pycocoevalcap's CIDEr-D exactly (to 1e-6), per candidate and at corpus level."""
from __future__ import annotations

import math

import numpy as np
import pytest
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.cider.cider_scorer import CiderScorer

from crossmodal.metrics.cider import CiderD

WORDS = [f"w{i}" for i in range(10)]  # a small vocabulary so n-grams repeat within and across captions


def _sentence(rng: np.random.Generator, lo: int = 0, hi: int = 15) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(lo, hi))))


def _reference_scores(cands: list[str], refs: list[list[str]], sigma: float = 6.0) -> np.ndarray:
    scorer = CiderScorer(n=4, sigma=sigma)
    for c, r in zip(cands, refs):
        scorer += (c, r)
    return np.asarray(scorer.compute_score()[1])


def _random_batch(seed: int, size: int) -> tuple[list[str], list[list[str]]]:
    rng = np.random.default_rng(seed)
    cands = [_sentence(rng) for _ in range(size)]
    refs = [[_sentence(rng, 1) for _ in range(int(rng.integers(1, 7)))] for _ in range(size)]
    return cands, refs


@pytest.mark.parametrize("seed,sigma", [(0, 6.0), (1, 6.0), (2, 2.0)])
def test_matches_pycocoevalcap_per_candidate_and_corpus(seed, sigma):
    cands, refs = _random_batch(seed, 80)
    ours = CiderD(sigma=sigma).score(cands, refs)
    np.testing.assert_allclose(ours, _reference_scores(cands, refs, sigma), rtol=0, atol=1e-6)
    assert ours.max() > 0.5  # the comparison is not between two vectors of zeros
    if sigma == 6.0:
        corpus, _ = Cider().compute_score({i: r for i, r in enumerate(refs)}, {i: [c] for i, c in enumerate(cands)})
        assert abs(ours.mean() - corpus) < 1e-6


def test_edge_cases_match_pycocoevalcap():
    rng = np.random.default_rng(7)
    cands = ["", "w1 w1 w1 w1 w1 w1", " ".join(["w2", "w3"] * 20), "w4", "w5 w6 w7 w8 w9",
             "w1 w2 w3", "w0 w0 w1"]
    refs = [["w1 w2 w3", "w0"], ["w1 w1 w2", "w1", "w1 w1 w1 w1"], ["w2 w3 w2"], ["w4 w4", "", "w5"],
            ["w5 w6 w7 w8 w9"] * 4, ["w1 w2 w3"] * 2 + ["w3 w2 w1"], ["w0 w0 w1 w0 w0 w1"]]
    cands += [_sentence(rng) for _ in range(10)]
    refs += [[_sentence(rng, 1) for _ in range(3)] for _ in range(10)]
    ours = CiderD().score(cands, refs)
    expected = _reference_scores(cands, refs)
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-6)
    assert ours[0] == 0.0  # empty candidate
    assert ours[4] > ours[2]  # exact match of a long caption beats a long, repetitive one


def test_hand_computed_values_and_unseen_ngrams():
    # corpus of 2 images: every n-gram weight is log 2 - log(df) = log 2 (df = 1) or log 2 (df = 0, unseen)
    scorer = CiderD(corpus=[["a b"], ["c d"]])
    scores = scorer.score(["x", "a", "a b", "a b"], [["x"], ["a"], ["a b"], ["a b c d e f g h i j k l m n"]])
    # unigram cosine 1, higher orders empty: 10 * mean(1, 0, 0, 0) = 2.5; "a b": unigrams and bigram = 5
    assert scores[:3] == pytest.approx([2.5, 2.5, 5.0], abs=1e-12)
    # 1 vs 13 bigrams: the Gaussian length penalty exp(-144 / 72) applies to the cosine terms
    a, b = math.log(2), math.log(2)
    uni = (2 * a * a) / (math.sqrt(2) * a * math.sqrt(14) * a)
    bi = (b * b) / (b * math.sqrt(13) * b)
    assert scores[3] == pytest.approx(10 * (uni + bi) / 4 * math.exp(-144 / 72), abs=1e-12)
    # n-grams of known words that the corpus lacks ("b a", "b c", "a b c") also weigh log 2 - log 1
    assert scorer.score(["b a", "a b c"], [["b a"], ["a b c"]]) == pytest.approx([5.0, 7.5], abs=1e-12)


def test_cached_document_frequencies_match_pycocoevalcap_on_the_corpus():
    cands, refs = _random_batch(11, 60)
    expected = _reference_scores(cands, refs)  # df over all 60 images
    cached = CiderD(corpus=refs)
    subset = list(range(0, 60, 4))
    np.testing.assert_allclose(cached.score([cands[i] for i in subset], [refs[i] for i in subset]),
                               expected[subset], rtol=0, atol=1e-6)
    # per-call document frequencies over the subset differ: the option really changes the corpus
    per_call = CiderD().score([cands[i] for i in subset], [refs[i] for i in subset])
    assert np.abs(per_call - expected[subset]).max() > 1e-3


def test_repeated_reference_lists_count_as_documents_like_pycocoevalcap():
    """SCST passes one reference list per sampled caption; pycocoevalcap counts each as one image."""
    cands, refs = _random_batch(5, 12)
    samples = [c for c in cands for _ in range(3)]
    sample_refs = [refs[i] if k else list(refs[i]) for i in range(12) for k in range(3)]
    np.testing.assert_allclose(CiderD().score(samples, sample_refs), _reference_scores(samples, sample_refs),
                               rtol=0, atol=1e-6)


def test_constant_caption_scores_equal_brute_force_corpus_cider():
    cands, refs = _random_batch(3, 30)
    candidates = cands + ["", refs[0][0], "w1 w1 w1"]
    fast = CiderD().constant_caption_scores(candidates, refs)
    gts = {i: r for i, r in enumerate(refs)}
    brute = [Cider().compute_score(gts, {i: [c] for i in gts})[0] for c in candidates]
    np.testing.assert_allclose(fast, brute, rtol=0, atol=1e-6)


def test_rejects_malformed_calls():
    with pytest.raises(ValueError):
        CiderD().score(["a"], [["a"], ["b"]])
    with pytest.raises(ValueError):
        CiderD().score(["a"], [[]])
    with pytest.raises(ValueError):
        CiderD(corpus=[])
    assert CiderD().score([], []).shape == (0,)


def test_no_ngram_of_any_candidate_in_any_reference_scores_zero():
    candidates, references = ["", "zzz"], [["a red circle"], ["a blue square", "two stars"]]
    scores = CiderD().score(candidates, references)
    expected, _ = Cider().compute_score({0: references[0], 1: references[1]}, {0: [candidates[0]], 1: [candidates[1]]})
    assert scores.tolist() == [0.0, 0.0] and expected == 0.0
