"""Two reference points that bracket every captioning result: a blind constant caption and the humans.

- `best_constant_caption`: the one caption that, emitted for every image, maximises corpus CIDEr-D. It is a
  floor that needs no image at all; a model that barely beats it has learnt the caption prior, not the
  images. Select it on the validation references and report it on test (the caller does both): choosing and
  reporting on the same split would flatter it.
- `human_ceiling`: each reference in turn is taken as the "prediction" and scored against the remaining
  references of its image, with every metric; the usual leave-one-out estimate of human agreement.
"""
from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np

from crossmodal.io import InputError
from crossmodal.metrics.captions import average_results, ptb_tokenize, require_java, score_tokenized
from crossmodal.metrics.cider import CiderD


def _check_references(references: dict[int, list[str]], minimum: int) -> None:
    if not references:
        raise InputError("no reference captions given")
    for image_id, refs in references.items():
        if len(refs) < minimum:
            raise InputError(f"image {image_id} has {len(refs)} reference captions; at least {minimum} needed")
        if not all(isinstance(r, str) for r in refs):
            raise InputError(f"reference captions of image {image_id} must be strings")


def best_constant_caption(candidates: Sequence[str], references: dict[int, list[str]], top_k: int = 5,
                          tokenize: bool = True) -> tuple[str, float]:
    """The candidate caption with the highest corpus CIDEr-D when emitted for every image of `references`.

    Candidates (e.g. all training captions) are deduplicated, PTB-tokenized like the references (as
    evaluate_captions will tokenize the constant caption later; `tokenize=False` takes both as already
    tokenized), and all scored at once by CiderD.constant_caption_scores with document frequencies from
    `references`, as pycocoevalcap computes them. The `top_k` best are then rescored with pycocoevalcap's
    own Cider, which picks the winner and gives the returned score (0: keep the fast score). Ties go to the
    alphabetically first caption. Returns (candidate as given, CIDEr-D).
    """
    _check_references(references, 1)
    if not candidates or not all(isinstance(c, str) for c in candidates):
        raise InputError("best_constant_caption needs a non-empty list of candidate caption strings")
    raw = sorted(set(candidates))
    image_ids = sorted(references)
    if tokenize:
        require_java()
        both: dict[Hashable, Sequence[str]] = {("cand", k): [c] for k, c in enumerate(raw)}
        both.update({("ref", i): references[i] for i in image_ids})
        tok = ptb_tokenize(both)
        cand_tok = [tok[("cand", k)][0] for k in range(len(raw))]
        refs_tok = [tok[("ref", i)] for i in image_ids]
    else:
        cand_tok, refs_tok = [" ".join(c.split()) for c in raw], [list(references[i]) for i in image_ids]
    first_raw: dict[str, int] = {}
    for k, caption in enumerate(cand_tok):
        first_raw.setdefault(caption, k)
    unique = list(first_raw)
    scores = CiderD().constant_caption_scores(unique, refs_tok)
    ranked = np.argsort(-scores, kind="stable")
    if top_k <= 0:
        best, best_score = int(ranked[0]), float(scores[ranked[0]])
    else:
        from pycocoevalcap.cider.cider import Cider

        gts = dict(enumerate(refs_tok))
        exact = [float(Cider().compute_score(gts, {j: [unique[c]] for j in gts})[0]) for c in ranked[:top_k]]
        pick = int(np.argmax(exact))  # first maximum: keeps the fast ranking's tie order
        best, best_score = int(ranked[pick]), exact[pick]
    return raw[first_raw[unique[best]]], best_score


def human_ceiling(references: dict[int, list[str]], use_spice: bool | None = None) -> dict:
    """Leave-one-out human agreement: every metric of one reference against the others, averaged over rounds.

    Round k takes reference k of every image as that image's prediction and the other references as its
    references, and is scored as one evaluation of a system on all images (corpus BLEU, METEOR, CIDEr-D
    document frequencies over the images), exactly as evaluate_captions would score it; the result is the
    mean over rounds, so each annotator is scored like a model. With unequal reference counts there are
    max(count) rounds and an image with n references uses reference k mod n in round k. References are
    PTB-tokenized once for all rounds (the tokenizer works caption by caption, so this changes nothing).
    Returns the dict shape of evaluate_captions.
    """
    _check_references(references, 2)
    require_java()
    image_ids = sorted(references)
    tok = ptb_tokenize({i: references[i] for i in image_ids})
    rounds = max(len(tok[i]) for i in image_ids)
    results = []
    for k in range(rounds):
        res, gts = {}, {}
        for i in image_ids:  # per image bookkeeping only; the scorers see whole rounds
            j = k % len(tok[i])
            res[i] = [tok[i][j]]
            gts[i] = tok[i][:j] + tok[i][j + 1:]
        results.append(score_tokenized(gts, res, use_spice))
    return average_results(results)
