"""The VQA world: questions about the image world's scenes, with ten human-like answers each, as VQA v2 files.

It stands in for VQA v2 (BAN, Kim et al. 2018) and reads the image world's `scene_graphs.json`: every object's
shape, colour, size, texture and box, and the relations between objects. Questions are asked about the scene, never
the picture, so each has a true answer, and ten simulated annotators then answer it (below).

Question kinds (`answer_type`, then VQA's `question_type` prefix):
- yes/no: "is there a" red circle (half of them about an object that is not there), "is the" X left of the Y (half
  of them a relation that does not hold), "are there any" striped objects;
- number, "how many": objects of a colour, of a shape, or of a colour and shape. The last is asked first wherever
  the scene has look-alikes (two objects of one colour and shape), the case counting has to get right; the region
  features add overlapping duplicate boxes of each object (`features/regions.py`), the other case;
- other: "what color is the" X, "what shape is the" X, "what texture is the" X (the world's material: its only
  surface property, plain / striped / dotted / checkered), and "what is" left of / on / ... the X (a shape).
X names one object by the fewest attributes that single it out among the scene's objects (shape, then colour and
shape, then size, then texture), leaving out the attribute asked about; an object no such phrase singles out is
not asked about.

Annotator disagreement. Each question gets a difficulty: a chance p that one annotator answers it right, drawn from
Beta(c m, c (1 - m)) with the mean m of its answer type (`accuracy`) and concentration c. Each of the ten annotators
then answers right with chance p, and otherwise confuses the answer the way people do: the opposite yes/no, a count
one off, a neighbouring colour (`CONFUSABLE`), a look-alike shape, a similar texture. One answer in twenty is
written loosely: "Two" and "red." the official evaluator's normalisation reads as the answer, "grey" it does not,
and BAN's soft scores (`data/vqa.py`, on the raw answers) count none of them. So the soft score of the true answer,
min(1, 0.3 k) for k agreeing annotators, takes every value 0, 0.3, 0.6, 0.9 and 1. `multiple_choice_answer` is the
most frequent normalised answer (ties: the first given). `answer_confidence` is "yes", "maybe" or "no" (0.8 / 0.15 /
0.05).

Files (VQA v2's names): `v2_OpenEnded_mscoco_{train2014,val2014,test-dev2015}_questions.json` and
`v2_mscoco_{train2014,val2014}_annotations.json`, from the image world's train, val and test images. The test-dev
annotations go to `server/v2_mscoco_test-dev2015_annotations.json`, the evaluation server's copy: no stage that
trains or selects a model reads them. Question ids are image id x 1000 + k. Generation is seeded per image.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from ..io import atomic_path, write_json
from ..metrics.vqa import normalize_answer
from .phrasing import article, plural
from .seeding import item_rng

SPLIT_FILES = {"train": "train2014", "val": "val2014", "test": "test-dev2015"}
CONFUSABLE = {
    "color": {"red": ("orange", "pink"), "orange": ("red", "yellow"), "yellow": ("orange",), "green": ("cyan",),
              "blue": ("purple", "cyan"), "purple": ("blue", "pink"), "white": ("gray",), "gray": ("white",),
              "brown": ("orange",), "pink": ("red", "purple"), "cyan": ("blue", "green")},
    "shape": {"circle": ("pentagon", "hexagon"), "square": ("diamond",), "diamond": ("square",),
              "triangle": ("diamond",), "cross": ("star",), "star": ("cross",), "pentagon": ("hexagon", "circle"),
              "hexagon": ("pentagon", "circle")},
    "texture": {"plain": ("striped",), "striped": ("plain", "checkered"), "dotted": ("checkered",),
                "checkered": ("dotted", "striped")},
}
LOOSE = {"gray": "grey"}  # spellings the evaluator does not map onto the answer
RELATION_WORDS = {"left of": "left of", "right of": "right of", "above": "above", "below": "below",
                  "next to": "next to", "on": "on"}


@dataclass(frozen=True)
class VqaWorldConfig:
    seed: int = 0
    questions_per_image: int = 6
    accuracy: Mapping[str, float] = field(default_factory=lambda: {"yes/no": 0.9, "number": 0.75, "other": 0.8})
    concentration: float = 4.0
    loose_answers: float = 0.05

    def __post_init__(self) -> None:
        if set(self.accuracy) != {"yes/no", "number", "other"} or not all(0 < a <= 1 for a in self.accuracy.values()):
            raise ValueError("accuracy needs yes/no, number and other, each in (0, 1]")
        if self.questions_per_image < 1 or self.concentration <= 0:
            raise ValueError("questions_per_image must be >= 1 and concentration > 0")


@dataclass(frozen=True)
class Question:
    question: str
    question_type: str
    answer_type: str
    answer: str
    kind: str  # what a wrong annotator confuses: yes/no, number, color, shape, texture


def describe(obj: dict, objects: list[dict], leave_out: str | None = None) -> str | None:
    """The fewest attributes that single `obj` out among `objects` (shape; colour + shape; + size; + texture),
    without `leave_out`; None if no such phrase does."""
    orders = (("shape",), ("color", "shape"), ("size", "color", "shape"), ("size", "texture", "color", "shape"))
    for keys in orders:
        keys = tuple(k for k in keys if k != leave_out)
        if not keys:
            continue
        matches = [o for o in objects if all(o[k] == obj[k] for k in keys)]
        if matches == [obj]:
            words = [obj[k] for k in keys]
            if "shape" not in keys:
                words.append("object")
            return " ".join(words)
    return None


def _yes_no(rng: np.random.Generator, graph: dict, attributes: Mapping[str, list[str]]) -> Question | None:
    objects = graph["objects"]
    form = int(rng.integers(3))
    if form == 0:
        if rng.random() < 0.5:
            obj = objects[int(rng.integers(len(objects)))]
            color, shape = obj["color"], obj["shape"]
        else:
            color, shape = str(rng.choice(attributes["colors"])), str(rng.choice(attributes["shapes"]))
        there = any(o["color"] == color and o["shape"] == shape for o in objects)
        return Question(f"Is there {article(color)} {color} {shape}?", "is there a", "yes/no",
                        "yes" if there else "no", "yes/no")
    if form == 1:
        pairs = [(a, b) for a in objects for b in objects if a is not b]
        a, b = pairs[int(rng.integers(len(pairs)))]
        first, second = describe(a, objects), describe(b, objects)
        if first is None or second is None:
            return None
        holding = [r["predicate"] for r in graph["relations"]
                   if r["subject"] == a["object_id"] and r["object"] == b["object_id"]]
        pool = holding if holding and rng.random() < 0.5 else list(RELATION_WORDS)
        predicate = str(rng.choice(pool))
        return Question(f"Is the {first} {RELATION_WORDS[predicate]} the {second}?", "is the", "yes/no",
                        "yes" if predicate in holding else "no", "yes/no")
    texture = str(rng.choice(attributes["textures"]))
    return Question(f"Are there any {texture} objects?", "are there any", "yes/no",
                    "yes" if any(o["texture"] == texture for o in objects) else "no", "yes/no")


def _number(rng: np.random.Generator, graph: dict, attributes: Mapping[str, list[str]]) -> Question:
    objects = graph["objects"]
    pairs = Counter((o["color"], o["shape"]) for o in objects)
    lookalikes = [pair for pair, n in pairs.items() if n > 1]
    form = 2 if lookalikes and rng.random() < 0.7 else int(rng.integers(3))
    obj = objects[int(rng.integers(len(objects)))]
    color = obj["color"] if rng.random() < 0.85 else str(rng.choice(attributes["colors"]))
    shape = obj["shape"] if rng.random() < 0.85 else str(rng.choice(attributes["shapes"]))
    if form == 2 and lookalikes:
        color, shape = lookalikes[int(rng.integers(len(lookalikes)))]
    if form == 0:
        text, count = f"How many {color} objects are there?", sum(o["color"] == color for o in objects)
    elif form == 1:
        text, count = f"How many {plural(shape)} are there?", sum(o["shape"] == shape for o in objects)
    else:
        text = f"How many {color} {plural(shape)} are there?"
        count = sum(o["color"] == color and o["shape"] == shape for o in objects)
    return Question(text, "how many", "number", str(count), "number")


def _other(rng: np.random.Generator, graph: dict) -> Question | None:
    objects = graph["objects"]
    obj = objects[int(rng.integers(len(objects)))]
    form = int(rng.integers(4))
    if form < 3:
        asked = ("color", "shape", "texture")[form]
        phrase = describe(obj, objects, leave_out=asked)
        if phrase is None:
            return None
        return Question(f"What {asked} is the {phrase}?", f"what {asked} is the",
                        "other", obj[asked], asked)
    by_id = {o["object_id"]: o for o in objects}
    relations = [r for r in graph["relations"] if r["object"] == obj["object_id"]]
    if not relations:
        return None
    relation = relations[int(rng.integers(len(relations)))]
    standing = [r for r in relations if r["predicate"] == relation["predicate"]]
    phrase = describe(obj, objects)
    if len(standing) != 1 or phrase is None:
        return None
    return Question(f"What is {RELATION_WORDS[relation['predicate']]} the {phrase}?", "what is", "other",
                    by_id[relation["subject"]]["shape"], "shape")


def ask(rng: np.random.Generator, graph: dict, attributes: Mapping[str, list[str]], count: int) -> list[Question]:
    """`count` distinct questions about one scene, the answer types in turn (yes/no, number, other)."""
    questions: list[Question] = []
    for _ in range(count * 20):
        if len(questions) == count:
            break
        kind = len(questions) % 3
        question = (_yes_no(rng, graph, attributes) if kind == 0 else _number(rng, graph, attributes) if kind == 1
                    else _other(rng, graph))
        if question is not None and question.question not in {q.question for q in questions}:
            questions.append(question)
    return questions


def annotate(rng: np.random.Generator, question: Question, cfg: VqaWorldConfig,
             attributes: Mapping[str, list[str]]) -> list[str]:
    """Ten annotators' answers (see the module docstring)."""
    mean = cfg.accuracy[question.answer_type]
    p = 1.0 if mean == 1 else rng.beta(cfg.concentration * mean, cfg.concentration * (1 - mean))
    answers = []
    for _ in range(10):
        if rng.random() < p:
            answer = question.answer
        elif question.kind == "yes/no":
            answer = "no" if question.answer == "yes" else "yes"
        elif question.kind == "number":
            n = int(question.answer)
            answer = str(n + 1 if n == 0 or rng.random() < 0.5 else n - 1)
        else:
            near = CONFUSABLE[question.kind].get(question.answer, ())
            pool = near if near and rng.random() < 0.8 else [a for a in attributes[question.kind + "s"]
                                                              if a != question.answer]
            answer = str(pool[int(rng.integers(len(pool)))]) if pool else question.answer
        if rng.random() < cfg.loose_answers:
            answer = _loose(rng, answer)
        answers.append(answer)
    return answers


def _loose(rng: np.random.Generator, answer: str) -> str:
    """The answer as a hurried annotator types it: a number word, a capital, a full stop, another spelling."""
    if answer.isdigit() and int(answer) <= 10:
        return ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")[int(answer)]
    if answer in LOOSE:
        return LOOSE[answer]
    return answer.capitalize() if rng.random() < 0.5 else answer + "."


def _majority(answers: list[str]) -> str:
    normalised = [normalize_answer(a) for a in answers]
    counts = Counter(normalised)
    best = max(counts.values())
    return next(a for a in normalised if counts[a] == best)


def generate(cfg: VqaWorldConfig, scene_graphs: Mapping, out_dir: str | Path) -> dict[str, int]:
    """Write the VQA files for every image of `scene_graphs` (the image world's JSON) into `out_dir` (replaced
    atomically); returns the number of questions per split."""
    attributes = {k: list(v) for k, v in scene_graphs["attributes"].items()}
    questions: dict[str, list[dict]] = {split: [] for split in SPLIT_FILES}
    annotations: dict[str, list[dict]] = {split: [] for split in SPLIT_FILES}
    for graph in scene_graphs["images"]:
        rng = item_rng(cfg.seed, "vqa", graph["image_id"])
        for k, question in enumerate(ask(rng, graph, attributes, cfg.questions_per_image)):
            question_id = graph["image_id"] * 1000 + k
            answers = annotate(rng, question, cfg, attributes)
            confidence = rng.choice(["yes", "maybe", "no"], size=10, p=[0.8, 0.15, 0.05])
            split = graph["split"]
            questions[split].append({"image_id": graph["image_id"], "question": question.question,
                                     "question_id": question_id})
            annotations[split].append({
                "question_id": question_id, "image_id": graph["image_id"], "question_type": question.question_type,
                "answer_type": question.answer_type, "multiple_choice_answer": _majority(answers),
                "answers": [{"answer": a, "answer_confidence": str(c), "answer_id": i + 1}
                            for i, (a, c) in enumerate(zip(answers, confidence))]})
    info = {"description": "Synthetic VQA world (crossmodal-repro) over the image world's scenes", "version": "2.0"}
    with atomic_path(out_dir) as tmp:
        (tmp / "server").mkdir(parents=True)
        for split, subtype in SPLIT_FILES.items():
            common = {"info": info, "data_type": "mscoco", "data_subtype": subtype, "license": {"name": "CC BY 4.0"}}
            write_json(tmp / f"v2_OpenEnded_mscoco_{subtype}_questions.json",
                       {**common, "task_type": "Open-Ended", "questions": questions[split]}, indent=None)
            where = tmp / "server" if split == "test" else tmp
            write_json(where / f"v2_mscoco_{subtype}_annotations.json",
                       {**common, "annotations": annotations[split]}, indent=None)
    return {split: len(q) for split, q in questions.items()}
