"""VQA v2 reader, official answer normalisation, BAN's vocabulary and soft targets, official accuracy."""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from crossmodal.data.vqa import (
    QUESTION_PAD,
    QUESTION_TOKENS,
    QUESTION_UNK,
    VqaAnnotation,
    VqaQuestion,
    answer_vocabulary,
    encode_questions,
    question_words,
    read_vqa,
    read_vqa_annotations,
    read_vqa_questions,
    soft_score,
    soft_scores,
    target_matrix,
    tokenize_question,
)
from crossmodal.io import InputError
from crossmodal.metrics.vqa import normalize_answer, vqa_accuracy

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # copies of ../shared/fixtures (see its README)
QUESTIONS = FIXTURES / "vqa" / "v2_OpenEnded_mscoco_val2014_questions_first100.json"
ANNOTATIONS = FIXTURES / "vqa" / "v2_mscoco_val2014_annotations_first100.json"


@pytest.fixture(scope="module")
def questions():
    return read_vqa(QUESTIONS, ANNOTATIONS)


def by_id(questions, question_id):
    return next(q for q in questions if q.question_id == question_id)


def test_joins_questions_and_annotations(questions):
    assert len(questions) == 100
    assert len({q.image_id for q in questions}) == 19
    first = questions[0]
    assert (first.question_id, first.image_id, first.question) == (262148000, 262148, "Where is he looking?")
    ann = first.annotation
    assert (ann.question_type, ann.answer_type, ann.multiple_choice_answer) == ("none of the above", "other", "down")
    assert ann.answers == ("down", "down", "at table", "skateboard", "down", "table", "down", "down", "down", "down")
    assert ann.answer_confidences == ("yes",) * 10
    assert questions[1].annotation.answer_confidences[5] == "maybe"
    assert (questions[-1].question_id, questions[-1].question) == (393274003, "What is cast?")
    assert Counter(q.annotation.answer_type for q in questions) == {"other": 43, "yes/no": 40, "number": 17}


def test_reads_each_file_alone():
    questions = read_vqa_questions(QUESTIONS)
    assert len(questions) == 100 and all(q.annotation is None for q in questions)
    assert read_vqa(QUESTIONS) == questions  # test splits come without annotations
    annotations = read_vqa_annotations(ANNOTATIONS)
    assert [a.question_id for a in annotations] == [q.question_id for q in questions]


@pytest.mark.parametrize("raw, normalised", [
    ("Two dogs", "2 dogs"),                   # number words -> digits
    ("none", "0"),
    ("Ten Men", "10 men"),
    ("the cat", "cat"),                       # articles dropped
    ("A man on an island", "man on island"),
    ("dont know", "don't know"),              # contractions get their apostrophes
    ("couldnt've", "couldn't've"),
    ("couldn'tve", "couldn't've"),
    ("somebody'd", "somebodyd"),              # the official table's one reversed entry
    ("Im", "im"),                             # capitalised official keys can never match
    ("it's tired", "it's tired"),             # apostrophes are not punctuation
    ("leaf-hat", "leaf hat"),                 # punctuation inside a word becomes a space
    ("red/yellow", "red yellow"),
    ("black, white", "black white"),          # ... and vanishes where it touches a space
    ("yes!", "yes"),
    ("(maybe)", "maybe"),
    ("1,000", "1000"),                        # a digit-comma-digit run: every mark deleted
    ("http://foodiebakercom", "http: foodiebakercom"),  # colons stay
    ("3.5", "3.5"),                           # a period before a digit stays
    ("a.m.", "am"),
    ("4.", "4"),
])
def test_official_normalisation(raw, normalised):
    assert normalize_answer(raw) == normalised


def test_at_most_32_periods_are_deleted():
    assert normalize_answer("." * 40) == "." * 8


def test_vocabulary_counts_normalised_multiple_choice_answers(questions):
    annotations = [q.annotation for q in questions]
    direct = Counter(normalize_answer(a.multiple_choice_answer) for a in annotations)
    assert direct["yes"] == 21 and direct["no"] == 20 and direct["1"] == 7
    assert answer_vocabulary(annotations) == ["yes", "no"]  # BAN's threshold 9
    small = answer_vocabulary(annotations, min_occurrence=2)
    assert small == ["yes", "no", "1", "white", "0", "7", "3", "bedroom", "brown", "green"]
    assert small == sorted((a for a, n in direct.items() if n >= 2), key=lambda a: (-direct[a], a))
    assert answer_vocabulary(annotations + annotations, min_occurrence=2) == small  # one count per question id
    assert len(answer_vocabulary(annotations, min_occurrence=1)) == len(direct)


def test_vocabulary_merges_spellings_after_normalisation():
    def ann(question_id, answer):
        return VqaAnnotation(question_id, 1, "how many", "number", answer, ("2",) * 10, ("yes",) * 10)

    assert answer_vocabulary([ann(1, "two"), ann(2, "2"), ann(3, "Two."), ann(4, "three")], min_occurrence=3) == ["2"]


def test_soft_score_of_annotator_counts():
    assert [soft_score(n) for n in range(7)] == [0.0, 0.3, 0.6, 0.9, 1.0, 1.0, 1.0]
    with pytest.raises(ValueError):
        soft_score(-1)


def test_soft_scores_match_direct_counts(questions):
    vocabulary = set(answer_vocabulary([q.annotation for q in questions], min_occurrence=1))
    for q in questions:
        counts = Counter(q.annotation.answers)
        expected = {a: {1: 0.3, 2: 0.6, 3: 0.9}.get(n, 1.0) for a, n in counts.items() if a in vocabulary}
        assert soft_scores(q.annotation.answers, vocabulary) == pytest.approx(expected)
    sign = by_id(questions, 393266000).annotation  # 'red and yellow' x3, 'red' x3
    assert soft_scores(sign.answers, vocabulary) == {"red and yellow": 0.9, "red": 0.9}
    hat = by_id(questions, 262175002).annotation  # human answers count as written: 'leaf-hat' is not 'leaf hat'
    assert soft_scores(hat.answers, {"hat", "leaf hat"}) == {"hat": 1.0}


def _leave_one_out(prediction, humans):
    scores = []
    for left_out in range(len(humans)):
        matches = sum(1 for k, h in enumerate(humans) if k != left_out and h == prediction)
        scores.append(min(1.0, matches / 3))
    return sum(scores) / len(scores)


def test_accuracy_matches_direct_leave_one_out(questions):
    for q in questions:
        raw = q.annotation.answers
        humans = list(raw) if len(set(raw)) == 1 else [normalize_answer(a) for a in raw]
        for prediction in set(humans):
            assert vqa_accuracy(prediction, q.annotation.answers) == pytest.approx(_leave_one_out(prediction, humans))
    looking = by_id(questions, 262148000).annotation
    assert vqa_accuracy("down", looking.answers) == 1.0          # 7 of 10
    assert vqa_accuracy("table", looking.answers) == pytest.approx(0.3)  # 1 of 10: 9 subsets x 1/3
    assert vqa_accuracy("up", looking.answers) == 0.0
    sign = by_id(questions, 393266000).annotation
    assert vqa_accuracy("red and yellow", sign.answers) == pytest.approx(0.9)  # 3 of 10


def test_accuracy_normalises_only_when_humans_disagree(questions):
    unanimous = next(q.annotation for q in questions if set(q.annotation.answers) == {"yes"})
    assert vqa_accuracy("yes", unanimous.answers) == 1.0
    assert vqa_accuracy(" yes\n", unanimous.answers) == 1.0   # white space is always cleaned
    assert vqa_accuracy("Yes", unanimous.answers) == 0.0      # official 2021 evaluator: no normalisation here
    looking = by_id(questions, 262148000).annotation
    assert vqa_accuracy("Down.", looking.answers) == 1.0


# --- malformed input ------------------------------------------------------------------------------

def _write(tmp_path: Path, name: str, data) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def _fixture(path: Path) -> dict:
    return json.loads(path.read_text())


def _broken_annotations(tmp_path, edit):
    data = _fixture(ANNOTATIONS)
    edit(data)
    return _write(tmp_path, "annotations.json", data)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["annotations"].pop(), "no annotation for question_id 393274003"),
    (lambda d: d["annotations"].append(dict(d["annotations"][0], question_id=1)), "have no question"),
    (lambda d: d["annotations"][3].update(image_id=5), "question_id 393225000 has image_id 5, the question has 393225"),
    (lambda d: d["annotations"][4].update(question_id=262148000), "annotations[4] repeats question_id 262148000"),
    (lambda d: d["annotations"][2]["answers"].pop(), "annotations[2].answers has 9 entries"),
    (lambda d: d["annotations"][2].update(answer_type="colour"), "annotations[2].answer_type is 'colour'"),
    (lambda d: d["annotations"][2]["answers"][1].update(answer_id=1), "answer_id 1 appears twice"),
    (lambda d: d["annotations"][2]["answers"][1].pop("answer"), "annotations[2].answers[1] is missing field 'answer'"),
    (lambda d: d.update(data_subtype="train2014"), "data_subtype 'train2014' does not match 'val2014'"),
])
def test_bad_annotations_are_input_errors(tmp_path, edit, message):
    with pytest.raises(InputError, match=re.escape(message)):
        read_vqa(QUESTIONS, _broken_annotations(tmp_path, edit))


def test_bad_questions_are_input_errors(tmp_path):
    data = _fixture(QUESTIONS)
    data["questions"][7]["question_id"] = "262148007"
    with pytest.raises(InputError, match=r"questions\[7\]\.question_id has the wrong type"):
        read_vqa_questions(_write(tmp_path, "q.json", data))
    with pytest.raises(InputError, match="field 'questions'"):
        read_vqa_questions(_write(tmp_path, "q.json", {"info": {}}))
    with pytest.raises(InputError, match="not valid JSON"):
        read_vqa_questions(_write(tmp_path, "q.json", "{"))
    with pytest.raises(InputError, match="missing file"):
        read_vqa_questions(tmp_path / "absent.json")


def test_questions_are_tokenised_as_ban_does_and_back_padded():
    assert tokenize_question("What's on the man's head, left?") == ["what", "'s", "on", "the", "man", "'s", "head",
                                                                   "left"]
    questions = [VqaQuestion(1, 1, "Is there a red circle?"), VqaQuestion(2, 1, "Is the circle red?"),
                 VqaQuestion(3, 2, " ".join(["red"] * 20) + "?")]
    words = question_words(questions)
    assert words == ["red", "circle", "is", "a", "the", "there"]  # by count (red 22, circle 2, is 2), then a-z
    ids, lengths = encode_questions(questions[:2] + [VqaQuestion(4, 3, "Is it blue?")] + questions[2:], words)
    assert ids.shape == (4, QUESTION_TOKENS) and ids.dtype == np.int64
    assert ids[0, :5].tolist() == [4, 7, 5, 2, 3] and (ids[0, 5:] == QUESTION_PAD).all()  # id = 2 + position
    assert ids[2, :3].tolist() == [4, QUESTION_UNK, QUESTION_UNK]
    assert lengths.tolist() == [5, 4, 3, QUESTION_TOKENS] and (ids[3] == 2).all()  # cut at 14 tokens


def test_target_matrix_holds_the_soft_scores(questions):
    answers = answer_vocabulary([q.annotation for q in questions], min_occurrence=1)
    targets = target_matrix(questions, answers)
    for row, question in enumerate(questions):
        want = soft_scores(question.annotation.answers, set(answers))
        assert {answers[k]: float(v) for k, v in enumerate(targets[row]) if v} == pytest.approx(want)
    with pytest.raises(InputError, match="has no annotation"):
        target_matrix([VqaQuestion(9, 9, "Why?")], answers)
