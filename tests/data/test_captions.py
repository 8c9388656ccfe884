"""Caption preprocessing: tokenisation, vocabulary threshold, <unk>, truncation, HDF5 labels, references."""
import json

import h5py
import numpy as np
import pytest

from crossmodal.config.data import CaptionsConfig
from crossmodal.data.captions import SPECIALS, UNK, decode, load_labels, load_vocabulary, preprocess, tokenize
from crossmodal.data.coco import read_coco_captions
from crossmodal.data.karpathy import read_karpathy
from crossmodal.io import InputError


def _dataset(path):
    def img(i, split, sents):
        return {"filepath": "x", "filename": f"{i}.png", "imgid": i, "split": split, "cocoid": 100 + i,
                "sentids": list(range(10 * i, 10 * i + len(sents))),
                "sentences": [{"tokens": s.split(), "raw": s, "imgid": i, "sentid": 10 * i + k}
                              for k, s in enumerate(sents)]}
    images = [
        img(0, "train", ["a red circle", "a red square", "a blue circle left of a red square"]),
        img(1, "train", ["a red circle", "one green star"]),
        img(2, "test", ["a purple circle"]),
        img(3, "val", ["a red star"]),
    ]
    path.write_text(json.dumps({"images": images, "dataset": "t"}))


def test_tokenize_lowercases_and_drops_punctuation():
    assert tokenize("A Red-circle, left of it.") == ["a", "red", "circle", "left", "of", "it"]


REFERENCES = {102: ["A purple circle.", "One purple circle"], 103: ["A red star."], 100: ["unused"]}


def _preprocess(tmp_path, vocabularies, references=REFERENCES, image_root=None):
    _dataset(tmp_path / "d.json")
    return preprocess(vocabularies, read_karpathy(tmp_path / "d.json"), references, tmp_path / "out", 1, image_root)


def test_vocabulary_threshold_unk_and_truncation(tmp_path):
    summary = _preprocess(tmp_path, {"v": CaptionsConfig(min_word_count=2, max_length=4)})["v"]
    out = tmp_path / "out" / "v"
    words = load_vocabulary(out / "vocab.json")
    # counts in train: a=5, red=4, circle=3, square=2 ; blue/left/of/one/green/star = 1 (below threshold)
    assert words == SPECIALS + ["a", "red", "circle", "square"]
    assert summary["vocab_size"] == 8 and summary["captions"] == 7
    train = load_labels(out / "labels.h5", "train")
    assert train.image_ids.tolist() == [100, 101]
    rows = train.labels[train.start[0]:train.end[0]]
    w = {x: i for i, x in enumerate(words)}
    # "a blue circle left of a red square" -> truncated to 4 tokens, rare words -> <unk>
    assert rows[2].tolist() == [w["a"], UNK, w["circle"], UNK]
    assert rows[0].tolist() == [w["a"], w["red"], w["circle"], 0]
    assert decode(rows[0], words) == "a red circle"
    test = load_labels(out / "labels.h5", "test")
    assert test.image_ids.tolist() == [102]
    with h5py.File(out / "labels.h5") as f:
        assert f["label_length"][:].tolist() == [3, 3, 4, 3, 3, 3, 3]
        assert np.all(f["labels"][:] >= 0)


def test_one_caption_set_per_vocabulary_and_shared_references(tmp_path):
    summary = _preprocess(tmp_path, {"min1": CaptionsConfig(min_word_count=1, max_length=8),
                                     "min3": CaptionsConfig(min_word_count=3, max_length=8)})
    assert summary["images"] == {"train": 2, "val": 1, "test": 1}
    assert summary["min1"]["vocab_size"] == 4 + 10 and summary["min3"]["vocab_size"] == 4 + 3
    assert load_vocabulary(tmp_path / "out/min3/vocab.json") == SPECIALS + ["a", "red", "circle"]
    refs = tmp_path / "out" / "references"
    assert read_coco_captions(refs / "captions_test.json") == {102: REFERENCES[102]}
    assert read_coco_captions(refs / "captions_val.json") == {103: REFERENCES[103]}
    images = json.loads((tmp_path / "out" / "images.json").read_text())
    assert images[2] == {"image_id": 102, "path": "x/2.png", "split": "test"}


def test_the_first_test_images_are_set_aside_as_examples_with_a_copy_of_each(tmp_path):
    _preprocess(tmp_path, {"v": CaptionsConfig()})  # the real profile: no images at hand, the list only
    examples = tmp_path / "out" / "examples"
    assert json.loads((examples / "examples.json").read_text()) == [{"image_id": 102, "path": "x/2.png", "file": None}]
    assert sorted(p.name for p in examples.iterdir()) == ["examples.json"]
    world = tmp_path / "world"
    with pytest.raises(InputError, match="image 102: missing file .*world/x/2.png"):
        _preprocess(tmp_path, {"v": CaptionsConfig()}, image_root=world)
    assert (examples / "examples.json").is_file()  # the earlier output stays whole
    (world / "x").mkdir(parents=True)
    (world / "x" / "2.png").write_bytes(b"picture bytes")
    _preprocess(tmp_path, {"v": CaptionsConfig()}, image_root=world)
    assert json.loads((examples / "examples.json").read_text())[0]["file"] == "102.png"
    assert (examples / "102.png").read_bytes() == b"picture bytes"


def test_an_evaluation_image_without_references_is_an_error_and_nothing_is_written(tmp_path):
    with pytest.raises(InputError, match="image 103 .* val split has no reference captions"):
        _preprocess(tmp_path, {"v": CaptionsConfig()}, {102: ["x"]})
    assert not (tmp_path / "out").exists()
