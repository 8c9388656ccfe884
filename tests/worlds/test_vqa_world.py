"""The VQA world (worlds/vqa_world.py): questions whose answers are true of the scene, ten annotators whose
disagreement gives every soft score, and VQA v2 files that the reader takes, test-dev answers kept apart."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from crossmodal.config.data import SplitSizes, WorldConfig
from crossmodal.data.vqa import answer_vocabulary, read_vqa, read_vqa_questions, soft_score
from crossmodal.metrics.vqa import normalize_answer
from crossmodal.worlds import image_world
from crossmodal.worlds.vqa_world import VqaWorldConfig, annotate, ask, describe, generate


@pytest.fixture(scope="module")
def graphs(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("world") / "world"
    image_world.generate(WorldConfig(images=SplitSizes(train=60, val=20, test=20), image_size=48), out,
                         progress=False)
    return json.loads((out / "scene_graphs.json").read_text())


def truth(question: str, graph: dict) -> str:
    """The answer of a question, worked out again from the scene by a direct reading of its words."""
    objects, words = graph["objects"], question.rstrip("?").split()
    def matching(phrase: list[str]) -> list[dict]:
        return [o for o in objects if all(w in (o["shape"], o["color"], o["size"], o["texture"], "object")
                                          for w in phrase)]
    def plural_match(o: dict, noun: str) -> bool:
        return noun in (o["shape"] + "s", o["shape"] + "es")
    if words[:2] == ["How", "many"]:
        described = words[2:-2]
        if described[-1] == "objects":
            return str(sum(o["color"] == described[0] for o in objects))
        return str(sum(plural_match(o, described[-1]) and (len(described) == 1 or o["color"] == described[0])
                       for o in objects))
    if words[:2] == ["Is", "there"]:
        return "yes" if any(o["color"] == words[3] and o["shape"] == words[4] for o in objects) else "no"
    if words[:3] == ["Are", "there", "any"]:
        return "yes" if any(o["texture"] == words[3] for o in objects) else "no"
    if words[0] == "What" and words[2] == "is":  # What color / shape / texture is the X
        (obj,) = matching(words[4:])
        return obj[words[1]]
    raise AssertionError(f"not re-derived here: {question}")


def test_answers_are_true_of_the_scene(graphs):
    checked = Counter()
    attributes = graphs["attributes"]
    for graph in graphs["images"]:
        for q in ask(np.random.default_rng(graph["image_id"]), graph, attributes, 6):
            if q.question.startswith(("Is the", "What is")):
                continue  # relations: checked against the relation list below
            assert q.answer == truth(q.question, graph), q.question
            checked[q.answer_type] += 1
    assert min(checked.values()) > 20


def test_relation_questions_follow_the_relation_list(graphs):
    attributes, seen = graphs["attributes"], 0
    for graph in graphs["images"]:
        objects = graph["objects"]
        for q in ask(np.random.default_rng(graph["image_id"]), graph, attributes, 6):
            if not q.question.startswith("What is"):
                continue
            reference = q.question.rstrip("?").split(" the ", 1)[1]
            (target,) = [o for o in objects if describe(o, objects) == reference]
            predicate = q.question[len("What is "):].split(" the ")[0]
            subjects = [o["shape"] for r in graph["relations"] for o in objects
                        if r["object"] == target["object_id"] and r["predicate"] == predicate
                        and r["subject"] == o["object_id"]]
            assert subjects == [q.answer]
            seen += 1
    assert seen > 5


def test_references_single_out_one_object():
    rows = [("circle", "red", "small", "plain"), ("circle", "red", "large", "plain"),
            ("square", "red", "small", "dotted"), ("square", "red", "small", "plain")]
    objects = [{"object_id": i, "shape": s, "color": c, "size": z, "texture": t} for i, (s, c, z, t) in enumerate(rows)]
    assert describe(objects[0], objects) == "small red circle"
    assert describe(objects[2], objects) == "small dotted red square"
    assert describe(objects[0], objects, leave_out="color") == "small circle"
    assert describe(objects[2], objects, leave_out="shape") == "small dotted red object"
    twins = objects[:1] + [dict(objects[0], object_id=9)]
    assert describe(twins[0], twins) is None


def test_annotators_disagree_enough_for_every_soft_score(graphs):
    cfg = VqaWorldConfig()
    rng = np.random.default_rng(0)
    agreeing = Counter()
    for graph in graphs["images"]:
        for q in ask(rng, graph, graphs["attributes"], 6):
            answers = annotate(rng, q, cfg, graphs["attributes"])
            assert len(answers) == 10
            agreeing[soft_score(answers.count(q.answer))] += 1
    assert set(agreeing) == {0.0, 0.3, 0.6, 0.9, 1.0}
    perfect = VqaWorldConfig(accuracy={"yes/no": 1.0, "number": 1.0, "other": 1.0}, loose_answers=0.0)
    q = ask(rng, graphs["images"][0], graphs["attributes"], 1)[0]
    assert annotate(rng, q, perfect, graphs["attributes"]) == [q.answer] * 10
    assert normalize_answer("Two") == "2" and normalize_answer("red.") == "red"  # loose answers the evaluator reads


def test_files_are_vqa_v2_and_test_dev_answers_stay_on_the_server(graphs, tmp_path):
    counts = generate(VqaWorldConfig(), graphs, tmp_path / "vqa")
    root = tmp_path / "vqa"
    train = read_vqa(root / "v2_OpenEnded_mscoco_train2014_questions.json",
                     root / "v2_mscoco_train2014_annotations.json")
    val = read_vqa(root / "v2_OpenEnded_mscoco_val2014_questions.json", root / "v2_mscoco_val2014_annotations.json")
    test = read_vqa_questions(root / "v2_OpenEnded_mscoco_test-dev2015_questions.json")
    assert (len(train), len(val), len(test)) == (counts["train"], counts["val"], counts["test"]) == (360, 120, 120)
    assert not list(root.glob("*test-dev2015_annotations.json"))
    server = read_vqa(root / "v2_OpenEnded_mscoco_test-dev2015_questions.json",
                      root / "server" / "v2_mscoco_test-dev2015_annotations.json")
    assert [q.question_id for q in server] == [q.question_id for q in test]
    annotations = [q.annotation for q in train + val]
    assert Counter(a.answer_type for a in annotations).keys() == {"yes/no", "number", "other"}
    assert {a.question_type for a in annotations} >= {"is there a", "how many", "what color is the"}
    vocabulary = answer_vocabulary(annotations, min_occurrence=3)
    assert {"yes", "no", "1", "2", "red"} <= set(vocabulary)
    for a in annotations:  # the majority answer, normalised, as VQA's multiple_choice_answer
        normalised = [normalize_answer(x) for x in a.answers]
        assert normalised.count(a.multiple_choice_answer) == max(Counter(normalised).values())
    again = tmp_path / "again"
    generate(VqaWorldConfig(), graphs, again)
    assert (again / "v2_mscoco_train2014_annotations.json").read_bytes() == \
        (root / "v2_mscoco_train2014_annotations.json").read_bytes()
