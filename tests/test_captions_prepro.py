"""Caption preprocessing: tokenisation, vocabulary threshold, <unk>, truncation, HDF5 labels."""
import json

import h5py
import numpy as np

from crossmodal.config import CaptionsConfig
from crossmodal.data.captions import SPECIALS, UNK, decode, load_labels, load_vocabulary, preprocess, tokenize


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
    ]
    path.write_text(json.dumps({"images": images, "dataset": "t"}))


def test_tokenize_lowercases_and_drops_punctuation():
    assert tokenize("A Red-circle, left of it.") == ["a", "red", "circle", "left", "of", "it"]


def test_vocabulary_threshold_unk_and_truncation(tmp_path):
    _dataset(tmp_path / "d.json")
    summary = preprocess(CaptionsConfig(min_word_count=2, max_length=4), tmp_path / "d.json", tmp_path / "out")
    words = load_vocabulary(tmp_path / "out" / "vocab.json")
    # counts in train: a=5, red=4, circle=3, square=2 ; blue/left/of/one/green/star = 1 (below threshold)
    assert words == SPECIALS + ["a", "red", "circle", "square"]
    assert summary["vocab_size"] == 8 and summary["captions"] == 6
    train = load_labels(tmp_path / "out" / "labels.h5", "train")
    assert train.image_ids.tolist() == [100, 101]
    rows = train.labels[train.start[0]:train.end[0]]
    w = {x: i for i, x in enumerate(words)}
    # "a blue circle left of a red square" -> truncated to 4 tokens, rare words -> <unk>
    assert rows[2].tolist() == [w["a"], UNK, w["circle"], UNK]
    assert rows[0].tolist() == [w["a"], w["red"], w["circle"], 0]
    assert decode(rows[0], words) == "a red circle"
    test = load_labels(tmp_path / "out" / "labels.h5", "test")
    assert test.image_ids.tolist() == [102]
    with h5py.File(tmp_path / "out" / "labels.h5") as f:
        assert f["label_length"][:].tolist() == [3, 3, 4, 3, 3, 3]
        assert np.all(f["labels"][:] >= 0)
