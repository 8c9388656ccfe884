"""Readers of the real caption formats: Karpathy split files and COCO caption annotations."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from crossmodal.config.data import SplitSizes, WorldConfig
from crossmodal.data.coco import read_coco_captions
from crossmodal.data.karpathy import KarpathyImage, by_split, read_karpathy
from crossmodal.io import InputError
from crossmodal.worlds import image_world


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # copies of ../shared/fixtures (see its README)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("world") / "image_world"
    cfg = WorldConfig(seed=3, images=SplitSizes(train=8, val=3, test=4), image_size=64)
    image_world.generate(cfg, out, progress=False)
    return out


def test_reads_real_coco_karpathy_entry():
    (im,) = read_karpathy(FIXTURES / "karpathy" / "dataset_coco_excerpt.json")
    assert isinstance(im, KarpathyImage)
    assert (im.image_id, im.imgid, im.split) == (391895, 0, "test")
    assert (im.filepath, im.filename) == ("val2014", "COCO_val2014_000000391895.jpg")
    assert im.path == "val2014/COCO_val2014_000000391895.jpg"
    assert [s.sentid for s in im.sentences] == [770337, 771687, 772707, 776154, 781998]
    assert im.sentences[0].tokens == ["a", "man", "with", "a", "red", "helmet", "on", "a", "small", "moped",
                                      "on", "a", "dirt", "road"]
    assert im.sentences[0].raw == "A man with a red helmet on a small moped on a dirt road. "
    assert im.sentences[3].tokens[-1] == "mountains"


def test_reads_flickr8k_without_filepath_or_cocoid():
    images = read_karpathy(FIXTURES / "karpathy" / "dataset_flickr8k_excerpt.json")
    assert [(im.image_id, im.imgid, im.split, im.filepath) for im in images] == [
        (0, 0, "train", None), (1, 1, "train", None)]
    assert images[1].filename == images[1].path == "2903617548_d3e38d7f88.jpg"
    assert [s.sentid for s in images[1].sentences] == [5, 6, 7, 8, 9]
    assert images[0].sentences[1].tokens == ["black", "dog", "chasing", "brown", "dog", "through", "snow"]


def test_restval_maps_to_train_only_when_asked(tmp_path):
    data = json.loads((FIXTURES / "karpathy" / "dataset_coco_excerpt.json").read_text())
    data["images"][0]["split"] = "restval"
    path = tmp_path / "dataset_coco.json"
    path.write_text(json.dumps(data))
    assert read_karpathy(path)[0].split == "train"
    assert read_karpathy(path, restval_to_train=False)[0].split == "restval"


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["images"][0].pop("split"), "images[0] is missing field 'split'"),
    (lambda d: d["images"][0]["sentences"][2].pop("tokens"), "images[0].sentences[2] is missing field 'tokens'"),
    (lambda d: d["images"][0].update(split="dev"), "images[0].split is 'dev'"),
    (lambda d: d["images"][0].update(imgid="0"), "images[0].imgid has the wrong type"),
    (lambda d: d.pop("images"), "top level is missing field 'images'"),
])
def test_malformed_karpathy_names_file_and_field(tmp_path, mutate, message):
    data = json.loads((FIXTURES / "karpathy" / "dataset_coco_excerpt.json").read_text())
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        read_karpathy(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_missing_karpathy_file(tmp_path):
    with pytest.raises(InputError, match="missing Karpathy split file"):
        read_karpathy(tmp_path / "nope.json")


def test_reads_generated_world_split_file(world):
    images = read_karpathy(world / "dataset_coco.json")
    groups = by_split(images)
    assert {k: len(v) for k, v in groups.items()} == {"train": 8, "val": 3, "test": 4}
    assert [im.image_id for im in images] == list(range(1, 16))
    assert [im.imgid for im in images] == list(range(15))
    assert all(len(im.sentences) == 5 for im in images)
    first = images[0]
    assert (first.filepath, first.filename) == ("images/train", "synth_train_000001.png")
    assert (world / first.filepath / first.filename).is_file()


def test_coco_fixture_non_strict_keeps_annotated_ids():
    path = FIXTURES / "coco_caption" / "captions_val2014_first100_samples.json"
    with pytest.raises(InputError, match="refers to image 203564, which is not in 'images'"):
        read_coco_captions(path)
    caps = read_coco_captions(path, strict=False)
    assert len(caps) == 156  # 100 listed images + 56 further ids that only annotations name
    assert list(caps)[:3] == [391895, 522418, 184613]
    assert caps[391895] == []
    assert caps[331352] == ["A small closed toilet in a cramped space.",
                            "A tan toilet and sink combination in a small room.",
                            "This is an advanced toilet with a sink and control panel.",
                            "A close-up picture of a toilet with a fountain."]
    assert caps[203564] == ["A bicycle replica with a clock as the front wheel.", "The bike has a clock as a tire.",
                            "A black metal bicycle with a clock inside the front wheel."]
    assert sum(len(v) for v in caps.values()) == 100


@pytest.mark.parametrize("bad, message", [
    ({"images": []}, "field 'annotations' is missing"),
    ({"images": [{"id": 1}], "annotations": [{"image_id": 1}]}, "annotations[0] has no string field 'caption'"),
    ({"images": [{"id": "1"}], "annotations": []}, "images[0] has no integer field 'id'"),
    ({"images": [{"id": 1}, {"id": 1}], "annotations": []}, "repeats image id 1"),
])
def test_malformed_coco_caption_file(tmp_path, bad, message):
    path = tmp_path / "captions.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(InputError) as err:
        read_coco_captions(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_reads_generated_world_annotations(world):
    images = {im.image_id: im for im in read_karpathy(world / "dataset_coco.json")}
    for split, n in (("val", 3), ("test", 4)):
        caps = read_coco_captions(world / "annotations" / f"captions_{split}.json")
        assert len(caps) == n
        for image_id, refs in caps.items():
            assert images[image_id].split == split
            assert refs == [s.raw for s in images[image_id].sentences]
