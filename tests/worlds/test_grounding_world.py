"""The grounding world (worlds/grounding_world.py): Flickr30k Entities files whose phrases point at the boxes of
the objects they describe, groups with several boxes, scene and not-visual chains without, uneven types."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from crossmodal.config.data import SplitSizes, WorldConfig
from crossmodal.data.flickr30k_entities import EntityRelease, check_splits, phrase_status, read_split_ids
from crossmodal.worlds import image_world
from crossmodal.worlds.grounding_world import GroundingWorldConfig, generate, pixel_box
from crossmodal.worlds.vqa_world import describe


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("grounding")
    image_world.generate(WorldConfig(images=SplitSizes(train=120, val=20, test=20), image_size=48), root / "images",
                         progress=False)
    graphs = json.loads((root / "images" / "scene_graphs.json").read_text())
    counts = generate(GroundingWorldConfig(), graphs, root / "entities")
    return graphs, root / "entities", counts


def test_every_phrase_points_at_the_boxes_of_what_it_describes(world):
    graphs, root, _ = world
    statuses, groups = Counter(), 0
    chains_seen: dict[int, int] = {}
    release = EntityRelease(root)
    for graph in graphs["images"]:
        image = release.image(graph["image_id"])
        assert len(image.sentences) == 5
        objects = graph["objects"]
        boxes = {o["object_id"]: pixel_box(o["box"], graph["width"]) for o in objects}
        for sentence in image.sentences:
            for phrase in sentence.phrases:
                status = phrase_status(phrase, image.annotation)
                statuses[status, phrase.types[0]] += 1
                if phrase.chain_id:
                    assert chains_seen.setdefault(phrase.chain_id, graph["image_id"]) == graph["image_id"]
                if status != "boxed" or phrase.types == ("scene",):
                    continue
                got = sorted(image.annotation.boxes[phrase.chain_id])
                words = phrase.text.split(" ")
                if words[0] in ("the", "a", "an"):  # one object, singled out by its words
                    (obj,) = [o for o in objects if describe(o, objects) == " ".join(words[1:])]
                    assert got == [boxes[obj["object_id"]]]
                else:  # "two red circles": every look-alike
                    members = [o for o in objects if o["color"] == words[1] and words[2].startswith(o["shape"])]
                    assert len(members) == len(got) >= 2 and words[0] == ("two", "three", "four")[len(got) - 2]
                    assert got == sorted(boxes[o["object_id"]] for o in members)
                    groups += 1
    assert groups > 10
    assert statuses["boxed", "scene"] > 20 and statuses["scene", "scene"] > 20  # scene chains boxed, or flagged
    assert statuses["notvisual", "notvisual"] > 50


def test_types_are_uneven_as_in_the_real_test_set(world):
    graphs, root, _ = world
    with EntityRelease(root) as release:
        types = Counter(p.types[0] for g in graphs["images"] for s in release.sentences(g["image_id"])
                        for p in s.phrases if p.types[0] not in ("scene", "notvisual"))
    assert types.most_common(1)[0][0] == "people"
    assert types["people"] > types["clothing"] > types["instruments"]
    assert set(types) <= {"people", "clothing", "bodyparts", "animals", "vehicles", "instruments", "other"}


def test_splits_are_the_image_worlds(world):
    graphs, root, counts = world
    splits = {s: read_split_ids(root / f"{s}.txt") for s in ("train", "val", "test")}
    assert check_splits(splits, excerpt=True) == counts == {"train": 120, "val": 20, "test": 20}
    assert splits["val"] == [g["image_id"] for g in graphs["images"] if g["split"] == "val"]


def test_pixel_boxes_are_one_based_and_inside_the_image():
    assert pixel_box([0.0, 0.0, 10.0, 12.5], 48) == (1, 1, 10, 13)
    assert pixel_box([3.2, 4.7, 48.0, 47.9], 48) == (4, 5, 48, 48)
