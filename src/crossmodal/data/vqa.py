"""VQA v2 question and annotation files, BAN's answer vocabulary and soft-score targets.

The synthetic VQA world writes the same two files as the real dataset, so everything downstream reads
these through one reader:

    questions:    {info, task_type, data_type, data_subtype, license,
                   questions: [{image_id, question, question_id}]}
    annotations:  {info, data_type, data_subtype, license,
                   annotations: [{question_id, image_id, question_type, answer_type, multiple_choice_answer,
                                  answers: [{answer, answer_confidence, answer_id}] x 10}]}

`read_vqa` joins the two by `question_id` and refuses anything that would silently mislabel questions:
a question without its annotation or the reverse, a repeated id, an annotation whose `image_id` differs
from its question's, files of different `data_subtype`s, a question without exactly ten human answers.
Test files come without annotations (`annotations_path=None`).

Answers are normalised as the official evaluator does (`metrics/vqa.py`: `normalize_answer`, which BAN's
`tools/compute_softscore.py` repeats).

BAN's answer vocabulary (`answer_vocabulary`) counts, for every question of train + val, its normalised
`multiple_choice_answer` (one count per question id) and keeps answers counted at least 9 times (3,129
answers on VQA v2). Deviation: the official label order is first appearance in the train-then-val files;
ours is by decreasing count, ties alphabetically, so that labels do not depend on file order.

Questions (`tokenize_question`, `question_words`, `encode_questions`) follow BAN's `Dictionary.tokenize`: lower
case, commas and question marks removed, "'s" split off as its own token, split on whitespace; at most 14 tokens.
The word list is built from the train, val and test-dev questions, as the official `create_dictionary` does
(questions are inputs, never labels), most frequent first, ties alphabetically. Questions are padded at the back,
as the official `VQAFeatureDataset.tokenize` does (its comment says "in front"), so that a GRU's states at the real
words do not depend on padding; unlike the official code, the padding is masked. Deviation: ids 0 and 1 are padding
and unknown words (the official code sends an unknown word to its least frequent word's id).

Soft targets (`soft_scores`) follow BAN's `compute_target`: the ten human answers are counted as they
stand in the file, *not normalised* (so ``leaf-hat`` never scores the label ``leaf hat``), and each
vocabulary answer given by k annotators gets min(1, 0.3 k) (0.3, 0.6, 0.9, 1.0 for k = 1, 2, 3, >= 4),
an approximation of the accuracy below.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Iterable, Mapping, Sequence

import numpy as np

from ..io import InputError, json_field, read_json
from ..metrics.vqa import normalize_answer

ANSWERS_PER_QUESTION = 10
QUESTION_TOKENS = 14  # BAN's max_length
QUESTION_PAD, QUESTION_UNK = 0, 1
ANSWER_TYPES = ("yes/no", "number", "other")
BAN_MIN_ANSWER_OCCURRENCE = 9

# --- scores --------------------------------------------------------------------------------------

_SOFT_SCORE_BELOW_FOUR = (0.0, 0.3, 0.6, 0.9)


def soft_score(annotator_count: int) -> float:
    """BAN's target for an answer given by `annotator_count` of the ten humans: 0, .3, .6, .9, then 1."""
    if annotator_count < 0:
        raise ValueError(f"annotator count must be >= 0, got {annotator_count}")
    return _SOFT_SCORE_BELOW_FOUR[annotator_count] if annotator_count < 4 else 1.0


def soft_scores(human_answers: Sequence[str], vocabulary: Collection[str]) -> dict[str, float]:
    """Soft target of every vocabulary answer among the (unnormalised) human answers, as BAN computes it."""
    counts = Counter(human_answers)
    return {answer: soft_score(n) for answer, n in counts.items() if answer in vocabulary}


# --- files ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class VqaAnnotation:
    """The human answers of one question; `answers` and `answer_confidences` in file order."""

    question_id: int
    image_id: int
    question_type: str
    answer_type: str
    multiple_choice_answer: str
    answers: tuple[str, ...]
    answer_confidences: tuple[str, ...]


@dataclass(frozen=True)
class VqaQuestion:
    """One question, with its annotation when the split has them (not on test)."""

    question_id: int
    image_id: int
    question: str
    annotation: VqaAnnotation | None = None


def _load(path: str | Path, list_key: str) -> tuple[Path, dict, list]:
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: top level must be an object with field '{list_key}'")
    return Path(path), data, json_field(data, list_key, list, Path(path), "top level")


def _question(entry: object, path: Path, where: str) -> VqaQuestion:
    if not isinstance(entry, dict):
        raise InputError(f"{path}: {where} must be an object")
    return VqaQuestion(question_id=json_field(entry, "question_id", int, path, where),
                       image_id=json_field(entry, "image_id", int, path, where),
                       question=json_field(entry, "question", str, path, where))


def _annotation(entry: object, path: Path, where: str) -> VqaAnnotation:
    if not isinstance(entry, dict):
        raise InputError(f"{path}: {where} must be an object")
    answer_type = json_field(entry, "answer_type", str, path, where)
    if answer_type not in ANSWER_TYPES:
        raise InputError(f"{path}: {where}.answer_type is {answer_type!r}, expected one of {', '.join(ANSWER_TYPES)}")
    raw_answers = json_field(entry, "answers", list, path, where)
    if len(raw_answers) != ANSWERS_PER_QUESTION:
        raise InputError(f"{path}: {where}.answers has {len(raw_answers)} entries, expected {ANSWERS_PER_QUESTION}")
    answers, confidences, answer_ids = [], [], set()
    for k, raw in enumerate(raw_answers):
        at = f"{where}.answers[{k}]"
        if not isinstance(raw, dict):
            raise InputError(f"{path}: {at} must be an object")
        answers.append(json_field(raw, "answer", str, path, at))
        confidences.append(json_field(raw, "answer_confidence", str, path, at))
        answer_id = json_field(raw, "answer_id", int, path, at)
        if answer_id in answer_ids:
            raise InputError(f"{path}: {at}.answer_id {answer_id} appears twice in the question")
        answer_ids.add(answer_id)
    return VqaAnnotation(question_id=json_field(entry, "question_id", int, path, where),
                         image_id=json_field(entry, "image_id", int, path, where),
                         question_type=json_field(entry, "question_type", str, path, where),
                         answer_type=answer_type,
                         multiple_choice_answer=json_field(entry, "multiple_choice_answer", str, path, where),
                         answers=tuple(answers), answer_confidences=tuple(confidences))


def _read_entries(path: str | Path, list_key: str, parse) -> tuple[Path, dict, list]:
    """(path, top-level object, parsed entries) of a questions or annotations file; question ids unique."""
    path, data, entries = _load(path, list_key)
    items = [parse(e, path, f"{list_key}[{k}]") for k, e in enumerate(entries)]
    seen: set[int] = set()
    for k, item in enumerate(items):
        if item.question_id in seen:
            raise InputError(f"{path}: {list_key}[{k}] repeats question_id {item.question_id}")
        seen.add(item.question_id)
    return path, data, items


def read_vqa_questions(path: str | Path) -> list[VqaQuestion]:
    """The questions of a VQA questions file, in file order (no annotations attached)."""
    return _read_entries(path, "questions", _question)[2]


def read_vqa_annotations(path: str | Path) -> list[VqaAnnotation]:
    """The annotations of a VQA annotations file, in file order."""
    return _read_entries(path, "annotations", _annotation)[2]


def read_vqa(questions_path: str | Path, annotations_path: str | Path | None = None) -> list[VqaQuestion]:
    """Questions in file order, each joined with its annotation (when an annotations file is given)."""
    q_path, q_data, questions = _read_entries(questions_path, "questions", _question)
    if annotations_path is None:
        return questions
    a_path, a_data, annotations = _read_entries(annotations_path, "annotations", _annotation)
    q_subtype, a_subtype = q_data.get("data_subtype"), a_data.get("data_subtype")
    if q_subtype is not None and a_subtype is not None and q_subtype != a_subtype:
        raise InputError(f"{a_path}: data_subtype {a_subtype!r} does not match {q_subtype!r} of {q_path}")
    by_id = {a.question_id: a for a in annotations}
    joined = []
    for k, question in enumerate(questions):
        annotation = by_id.pop(question.question_id, None)
        if annotation is None:
            raise InputError(f"{a_path}: no annotation for question_id {question.question_id} (questions[{k}] of {q_path})")
        if annotation.image_id != question.image_id:
            raise InputError(f"{a_path}: annotation of question_id {question.question_id} has image_id "
                             f"{annotation.image_id}, the question has {question.image_id}")
        joined.append(VqaQuestion(question.question_id, question.image_id, question.question, annotation))
    if by_id:
        orphan = next(iter(by_id))
        raise InputError(f"{a_path}: {len(by_id)} annotations have no question in {q_path} (first: question_id {orphan})")
    return joined


def answer_vocabulary(annotations: Iterable[VqaAnnotation], min_occurrence: int = BAN_MIN_ANSWER_OCCURRENCE) -> list[str]:
    """Normalised `multiple_choice_answer`s of at least `min_occurrence` questions, most frequent first."""
    questions_per_answer: dict[str, set[int]] = {}
    for annotation in annotations:
        answer = normalize_answer(annotation.multiple_choice_answer)
        questions_per_answer.setdefault(answer, set()).add(annotation.question_id)
    counts = {answer: len(ids) for answer, ids in questions_per_answer.items() if len(ids) >= min_occurrence}
    return sorted(counts, key=lambda answer: (-counts[answer], answer))


# --- questions and targets as arrays --------------------------------------------------------------

def tokenize_question(question: str) -> list[str]:
    """BAN's tokenisation: lower case, ',' and '?' removed, "'s" split off, whitespace-separated."""
    return question.lower().replace(",", "").replace("?", "").replace("'s", " 's").split()


def question_words(questions: Iterable[VqaQuestion]) -> list[str]:
    """The question word list: every token of the given questions, most frequent first, ties alphabetically
    (id = QUESTION_UNK + 1 + position)."""
    counts = Counter(token for q in questions for token in tokenize_question(q.question))
    return sorted(counts, key=lambda word: (-counts[word], word))


def encode_questions(questions: Sequence[VqaQuestion], words: Sequence[str],
                     max_length: int = QUESTION_TOKENS) -> tuple[np.ndarray, np.ndarray]:
    """(ids [Q, max_length] int64, back-padded with QUESTION_PAD, unknown words QUESTION_UNK; lengths [Q])."""
    index = {word: QUESTION_UNK + 1 + k for k, word in enumerate(words)}
    ids = np.full((len(questions), max_length), QUESTION_PAD, np.int64)
    lengths = np.zeros(len(questions), np.int64)
    for row, question in enumerate(questions):
        tokens = tokenize_question(question.question)[:max_length]
        ids[row, :len(tokens)] = [index.get(token, QUESTION_UNK) for token in tokens]
        lengths[row] = len(tokens)
    return ids, lengths


def target_matrix(questions: Sequence[VqaQuestion], answers: Sequence[str]) -> np.ndarray:
    """[Q, A] float32: each question's soft score (`soft_scores`) of every vocabulary answer, 0 elsewhere."""
    column: Mapping[str, int] = {answer: k for k, answer in enumerate(answers)}
    targets = np.zeros((len(questions), len(answers)), np.float32)
    for row, question in enumerate(questions):
        if question.annotation is None:
            raise InputError(f"question {question.question_id} has no annotation: no target (a test split?)")
        for answer, score in soft_scores(question.annotation.answers, column).items():
            targets[row, column[answer]] = score
    return targets


# --- the processed arrays (stage prepro_vqa) -------------------------------------------------------

SPLIT_SUBTYPES = {"train": "train2014", "val": "val2014", "test": "test-dev2015"}  # our split -> VQA v2's


def questions_file(folder: Path, split: str) -> Path:
    return folder / f"v2_OpenEnded_mscoco_{SPLIT_SUBTYPES[split]}_questions.json"


def annotations_file(folder: Path, split: str) -> Path:
    """VQA v2's annotations of a split; test-dev's are the evaluation server's copy (`server/`)."""
    name = f"v2_mscoco_{SPLIT_SUBTYPES[split]}_annotations.json"
    return folder / "server" / name if split == "test" else folder / name


@dataclass(frozen=True)
class VqaSplit:
    """One split as arrays: question and image ids [Q], question tokens [Q, L] (back-padded), and the soft
    targets [Q, A] (None on test-dev, whose answers stay with the server)."""

    question_ids: np.ndarray
    image_ids: np.ndarray
    tokens: np.ndarray
    targets: np.ndarray | None


def preprocess_vqa(source: Path, out: Path, min_answer_count: int, question_length: int) -> dict:
    """Read VQA v2 files from `source` (train and val with annotations, test-dev questions only) and write `out`:
    `answers.json` (BAN's answer vocabulary over train + val), `words.json` (the question words of every split)
    and `<split>.npz` per split. Returns a summary (questions per split, answers, words)."""
    from ..io import atomic_path, write_json

    splits = {split: read_vqa(questions_file(source, split),
                              None if split == "test" else annotations_file(source, split)) for split in SPLIT_SUBTYPES}
    answers = answer_vocabulary([q.annotation for s in ("train", "val") for q in splits[s]], min_answer_count)
    if not answers:
        raise InputError(f"{source}: no answer is the majority answer of {min_answer_count} questions "
                         "(lower vqa.min_answer_count)")
    words = question_words([q for questions in splits.values() for q in questions])
    with atomic_path(out) as tmp:
        tmp.mkdir(parents=True)
        write_json(tmp / "answers.json", answers)
        write_json(tmp / "words.json", words)
        for split, questions in splits.items():
            tokens, _ = encode_questions(questions, words, question_length)
            arrays = {"question_ids": np.array([q.question_id for q in questions], np.int64),
                      "image_ids": np.array([q.image_id for q in questions], np.int64), "tokens": tokens}
            if split != "test":
                arrays["targets"] = target_matrix(questions, answers)
            np.savez(tmp / f"{split}.npz", **arrays)
    return {"questions": {s: len(q) for s, q in splits.items()}, "answers": len(answers), "words": len(words)}


def load_vqa_split(folder: Path, split: str) -> VqaSplit:
    path = folder / f"{split}.npz"
    if not path.is_file():
        raise InputError(f"missing file: {path} (run `dvc repro prepro_vqa` first)")
    with np.load(path) as data:
        return VqaSplit(data["question_ids"], data["image_ids"], data["tokens"],
                        data["targets"] if "targets" in data else None)
