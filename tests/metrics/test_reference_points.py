"""The constant-caption floor and the human ceiling against brute-force pycocoevalcap computations."""
from __future__ import annotations

import numpy as np
import pytest
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.rouge.rouge import Rouge
from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

from crossmodal.io import InputError
from crossmodal.metrics import captions
from crossmodal.metrics.reference_points import best_constant_caption, human_ceiling

REFERENCES = {
    10: ["a red cube left of a blue sphere", "a blue sphere right of a red cube", "red cube and blue ball"],
    11: ["a small green cone on a red cube", "a green cone sits on a red cube", "a cone above a cube"],
    12: ["two blue spheres next to a cube", "a cube beside two blue balls", "blue spheres near a red cube"],
    13: ["a large yellow cylinder", "a big yellow cylinder on the floor", "one yellow cylinder"],
    14: ["a red sphere above a green cube", "a green cube under a red sphere", "a red ball over a cube"],
    15: ["a blue cube left of a red cube", "two cubes, one blue and one red", "a red cube and a blue cube"],
}
CANDIDATES = [
    "A red cube.", "a red cube", "a blue sphere next to a red cube", "a cube", "A green cone on a red cube!",
    "a yellow cylinder", "two blue spheres", "red cube and blue ball", "a red cube left of a blue sphere",
    "a cube above a sphere", "the", "", "a blue sphere next to a red cube",
]


def _tokenize(captions_by_key: dict) -> dict:
    return PTBTokenizer().tokenize({k: [{"caption": c} for c in v] for k, v in captions_by_key.items()})


def test_best_constant_caption_matches_brute_force_pycocoevalcap():
    tok_refs = _tokenize(REFERENCES)
    tok_cands = _tokenize({k: [c] for k, c in enumerate(CANDIDATES)})
    brute = {}
    for k in range(len(CANDIDATES)):
        candidate = tok_cands[k][0]
        brute[candidate] = Cider().compute_score(tok_refs, {i: [candidate] for i in tok_refs})[0]
    ranked = sorted(brute.items(), key=lambda kv: -kv[1])
    assert ranked[0][1] > ranked[1][1] + 1e-6  # a unique winner, so the test is not about tie-breaking
    caption, score = best_constant_caption(CANDIDATES, REFERENCES)
    assert caption in CANDIDATES
    assert _tokenize({0: [caption]})[0][0] == ranked[0][0]
    assert score == pytest.approx(ranked[0][1], abs=1e-9)
    fast_caption, fast_score = best_constant_caption(CANDIDATES, REFERENCES, top_k=0)
    assert fast_caption == caption
    assert fast_score == pytest.approx(score, abs=1e-9)


def test_best_constant_caption_on_pretokenized_input_prefers_the_majority_caption():
    refs = {1: ["a cube", "a red cube"], 2: ["a red cube", "a cube"], 3: ["a blue ball", "a ball"]}
    caption, score = best_constant_caption(["a ball", "a red cube", "a cube", "a cube"], refs, tokenize=False)
    assert caption == "a red cube"
    expected = Cider().compute_score(refs, {i: ["a red cube"] for i in refs})[0]
    assert score == pytest.approx(expected, abs=1e-9)


@pytest.mark.slow  # human_ceiling scores METEOR: a JVM starts
def test_human_ceiling_with_identical_references_equals_direct_cider():
    refs = {i: [caps[0]] * 3 for i, caps in REFERENCES.items()}
    tok = _tokenize({i: [r[0]] for i, r in refs.items()})
    direct = Cider().compute_score({i: t * 2 for i, t in tok.items()}, tok)[0]
    result = human_ceiling(refs)
    assert result["CIDEr"] == pytest.approx(direct, abs=1e-9)
    assert result["BLEU-1"] == pytest.approx(1.0) and result["ROUGE-L"] == pytest.approx(1.0)


@pytest.mark.slow
def test_human_ceiling_is_the_mean_over_leave_one_out_rounds():
    refs = dict(REFERENCES)
    refs[16] = ["a cube", "a small cube"]  # fewer references: round k uses reference k mod 2
    result = human_ceiling(refs)
    tok = _tokenize(refs)
    expected = {"BLEU-4": [], "ROUGE-L": [], "CIDEr": [], "METEOR": []}
    for k in range(3):
        res = {i: [t[k % len(t)]] for i, t in tok.items()}
        gts = {i: t[:k % len(t)] + t[k % len(t) + 1:] for i, t in tok.items()}
        expected["BLEU-4"].append(Bleu(4).compute_score(gts, res, verbose=0)[0][3])
        expected["ROUGE-L"].append(Rouge().compute_score(gts, res)[0])
        expected["CIDEr"].append(Cider().compute_score(gts, res)[0])
        expected["METEOR"].append(captions._meteor_instance.compute_score(gts, res)[0])
    for name, values in expected.items():
        assert result[name] == pytest.approx(np.mean(values), abs=1e-9), name
    assert result["SPICE"] is None or captions.spice_available()
    assert 0.3 < result["CIDEr"] < 10 and 0 < result["METEOR"] < 1


def test_human_ceiling_needs_two_references_per_image():
    with pytest.raises(InputError, match="image 3 has 1 reference"):
        human_ceiling({1: ["a", "b"], 3: ["c"]})
