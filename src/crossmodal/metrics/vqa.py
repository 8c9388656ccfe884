"""The official VQA evaluation (GT-Vision-Lab/VQA): answer normalisation and the per-question accuracy.
`data/vqa.py` reads the files and builds BAN's training targets with the same normalisation.

Answer normalisation (`normalize_answer`) is the one of the official evaluator, GT-Vision-Lab/VQA
`PythonEvaluationTools/vqaEvaluation/vqaEval.py` (2021 head, the v2.0 punctuation list), which BAN's
`tools/compute_softscore.py` (jnhwkim/ban-vqa, after hengyuan-hu/bottom-up-attention-vqa) repeats:

1. punctuation: each of ``; / [ ] " { } ( ) = + \\ _ - > < @ ` , ? !`` is deleted when it touches a space
   in the answer, or when the answer contains a digit-comma-digit run, and is otherwise replaced by a
   space (``leaf-hat`` -> ``leaf hat``, ``black, white`` -> ``black white``); colons and apostrophes stay;
2. periods not followed by a digit are deleted (``3.5`` keeps its point; the official pattern meant to
   also keep a period after a digit, but its look-behind is misspelt and has no effect, so ``4.`` ->
   ``4``); as in the official call, at most 32 periods are deleted (the `re.UNICODE` flag lands in
   the `count` argument);
3. lower-case, split on white space, map number words ``none``/``zero`` -> ``0``, ``one`` ... ``ten``
   -> ``1`` ... ``10``, drop the articles ``a``, ``an``, ``the``, and restore apostrophes of contractions
   written without them (``dont`` -> ``don't``, ``couldnt've`` -> ``couldn't've``), then join with
   single spaces.

The contraction table is generated from the contracted forms: every form is reachable from each
spelling that lacks exactly one of its apostrophes, which is what the official table lists. Deviations,
none of which changes a result: the official table's capitalised keys (``Im``, ``Ive``, ``Id've``,
``I'dve``) are left out because they are looked up after lower-casing and can never match, and its
identity entries (``let's``, ``she's``) are left out; its one reversed entry, ``somebody'd`` ->
``somebodyd``, is kept. BAN's extra removal of commas after normalisation is omitted: step 1 has already
removed or replaced every comma.

VQA accuracy (`vqa_accuracy`) is the 2021 official evaluator's: new lines and tabs become spaces and
ends are stripped; only when the ten human answers are not all identical are they and the prediction
normalised as above; the score is the mean, over the ten subsets of nine humans, of
min(1, matching humans / 3).
"""
from __future__ import annotations

import re
from typing import Sequence

_PUNCTUATION = (";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-",
                ">", "<", "@", "`", ",", "?", "!")
_DIGIT_COMMA_DIGIT = re.compile(r"\d,\d")
_PERIOD_NOT_BEFORE_DIGIT = re.compile(r"\.(?!\d)")
_MAX_PERIODS_DELETED = 32
_NUMBER_WORDS = {"none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
                 "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10"}
_ARTICLES = frozenset({"a", "an", "the"})
_CONTRACTED_FORMS = """
    ain't aren't can't could've couldn't couldn't've didn't doesn't don't hadn't hadn't've hasn't haven't
    he'd he'd've he's how'd how'll how's isn't it'd it'd've it'll ma'am mightn't mightn't've might've
    mustn't must've needn't not've o'clock oughtn't 'ow's'at shan't she'd've should've shouldn't
    shouldn't've somebody'd've somebody'll somebody's someone'd someone'd've someone'll someone's
    something'd something'd've something'll that's there'd there'd've there're there's they'd they'd've
    they'll they're they've 'twas wasn't we'd've we've weren't what'll what're what's what've when's
    where'd where's where've who'd who'd've who'll who's who've why'll why're why's won't would've
    wouldn't wouldn't've y'all y'all'll y'all'd've you'd you'd've you'll you're you've
""".split()


def _contraction_table() -> dict[str, str]:
    table = {}
    for form in _CONTRACTED_FORMS:
        for at in (k for k, char in enumerate(form) if char == "'"):
            table[form[:at] + form[at + 1:]] = form
    table["somebody'd"] = "somebodyd"  # reversed in the official table; kept for identical results
    return table


_CONTRACTIONS = _contraction_table()


def _strip_punctuation(text: str) -> str:
    delete_every_mark = _DIGIT_COMMA_DIGIT.search(text) is not None
    out = text
    for mark in _PUNCTUATION:
        touches_space = f"{mark} " in text or f" {mark}" in text
        out = out.replace(mark, "" if delete_every_mark or touches_space else " ")
    return _PERIOD_NOT_BEFORE_DIGIT.sub("", out, count=_MAX_PERIODS_DELETED)


def _normalize_words(text: str) -> str:
    words = []
    for word in text.lower().split():
        word = _NUMBER_WORDS.get(word, word)
        if word not in _ARTICLES:
            words.append(_CONTRACTIONS.get(word, word))
    return " ".join(words)


def normalize_answer(answer: str) -> str:
    """The official answer normalisation (punctuation, periods, case, number words, articles, contractions)."""
    return _normalize_words(_strip_punctuation(answer))



def _clean_whitespace(text: str) -> str:
    return text.replace("\n", " ").replace("\t", " ").strip()


def vqa_accuracy(prediction: str, human_answers: Sequence[str]) -> float:
    """Official accuracy of one predicted answer: mean over leave-one-human-out subsets of min(1, matches/3)."""
    if not human_answers:
        raise ValueError("vqa_accuracy needs at least one human answer")
    humans = [_clean_whitespace(a) for a in human_answers]
    predicted = _clean_whitespace(prediction)
    if len(set(humans)) > 1:
        humans = [normalize_answer(a) for a in humans]
        predicted = normalize_answer(predicted)
    matches = sum(h == predicted for h in humans)
    # leaving out human i removes one match exactly when human i matched
    per_subset = [min(1.0, (matches - (h == predicted)) / 3) for h in humans]
    return sum(per_subset) / len(per_subset)
