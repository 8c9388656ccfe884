"""evaluate_captions must equal a direct coco-caption (pycocoevalcap) evaluation, offline and quietly."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.rouge.rouge import Rouge
from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

from crossmodal.io import InputError
from crossmodal.metrics import captions
from crossmodal.metrics.captions import (
    JAVA_MISSING,
    SPICE_UNAVAILABLE,
    cider_only,
    evaluate_captions,
    ptb_tokenize,
    read_results,
    spice_available,
    write_results,
)

pytestmark = pytest.mark.slow  # the Java tokenizer and METEOR

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "coco_caption"
RESULTS = FIXTURES / "captions_val2014_fakecap_results.json"


def _fixture_example() -> tuple[dict[int, str], dict[int, list[str]]]:
    """20 annotated images of the COCO sample (1 to 5 references each) paired with 20 fake captions."""
    annotations = json.loads((FIXTURES / "captions_val2014_first100_samples.json").read_text())["annotations"]
    refs: dict[int, list[str]] = {}
    for ann in annotations:
        refs.setdefault(ann["image_id"], []).append(ann["caption"])
    fake = json.loads(RESULTS.read_text())
    ids = sorted(refs)[:20]
    return {i: fake[k]["caption"] for k, i in enumerate(ids)}, refs


def _forbid(*_args, **_kwargs):
    raise AssertionError("network or SPICE setup attempted")


_CONNECT = socket.socket.connect


def _local_only(sock: socket.socket, address):
    """A Unix socket (the tests' shared METEOR scorer, conftest.py) but no network."""
    if sock.family != socket.AF_UNIX:
        _forbid()
    return _CONNECT(sock, address)


@pytest.fixture(scope="module")
def evaluated():
    """One full evaluation (one METEOR JVM) shared by the tests, with SPICE reported unavailable."""
    preds, refs = _fixture_example()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(captions, "spice_available", lambda: False)
        mp.setattr("pycocoevalcap.spice.get_stanford_models.urlretrieve", _forbid)
        mp.setattr("pycocoevalcap.spice.spice.Spice.__init__", _forbid)
        mp.setattr(socket.socket, "connect", _local_only)
        result = evaluate_captions(preds, refs)
    return preds, refs, result


def test_evaluate_captions_equals_direct_pycocoevalcap(evaluated):
    preds, refs, result = evaluated
    assert len({len(refs[i]) for i in preds}) > 1  # images with different numbers of references
    tokenizer = PTBTokenizer()
    gts = tokenizer.tokenize({i: [{"caption": c} for c in refs[i]] for i in preds})
    res = tokenizer.tokenize({i: [{"caption": preds[i]}] for i in preds})
    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    meteor, _ = captions._meteor_instance.compute_score(gts, res)  # pycocoevalcap's Meteor, same JVM
    expected = {"BLEU-1": bleu[0], "BLEU-2": bleu[1], "BLEU-3": bleu[2], "BLEU-4": bleu[3], "METEOR": meteor,
                "ROUGE-L": Rouge().compute_score(gts, res)[0], "CIDEr": Cider().compute_score(gts, res)[0]}
    for name, value in expected.items():
        assert result[name] == pytest.approx(value, abs=1e-9), name
    assert 0 < result["CIDEr"] and 0 < result["METEOR"] < 1


def test_spice_reported_unavailable_without_jars_and_no_download(evaluated):
    _, _, result = evaluated
    assert result["SPICE"] is None
    assert result["SPICE_status"] == SPICE_UNAVAILABLE == "unavailable (Stanford CoreNLP jars not installed)"
    assert set(result) == {"BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr", "SPICE",
                           "SPICE_status"}


def test_spice_required_but_missing_is_an_input_error(monkeypatch):
    monkeypatch.setattr(captions, "spice_available", lambda: False)
    with pytest.raises(InputError, match="SPICE requested"):
        evaluate_captions({1: "a dog"}, {1: ["a dog runs"]}, use_spice=True)


def test_spice_available_needs_both_corenlp_jars(monkeypatch, tmp_path):
    monkeypatch.setattr(captions, "_spice_dir", lambda: tmp_path)
    (tmp_path / "lib").mkdir()
    (tmp_path / "spice-1.0.jar").write_bytes(b"")
    (tmp_path / "lib" / "stanford-corenlp-3.6.0.jar").write_bytes(b"")
    assert not spice_available()
    (tmp_path / "lib" / "stanford-corenlp-3.6.0-models.jar").write_bytes(b"")
    assert spice_available()


def test_cider_only_equals_full_evaluation(evaluated):
    preds, refs, result = evaluated
    assert cider_only(preds, refs) == pytest.approx(result["CIDEr"], abs=1e-9)


def test_missing_java_is_a_clear_input_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    for call in (lambda: evaluate_captions({1: "a dog"}, {1: ["a dog"]}), lambda: cider_only({1: "a"}, {1: ["a"]})):
        with pytest.raises(InputError) as err:
            call()
        assert str(err.value) == JAVA_MISSING


def test_prediction_without_references_is_rejected():
    with pytest.raises(InputError, match="image 7 has no reference"):
        evaluate_captions({1: "a dog", 7: "a cat"}, {1: ["a dog"]})
    with pytest.raises(InputError, match="no predictions"):
        cider_only({}, {1: ["a dog"]})


def test_tokenizer_keeps_captions_aligned_across_stray_line_breaks():
    # pycocoevalcap alone would split the first caption in two and shift image 2's caption away
    out = ptb_tokenize({1: ["A dog.\rRuns", "x\u2028y"], 2: ["Cat!"], 3: []})
    assert out == {1: ["a dog runs", "x y"], 2: ["cat"], 3: []}


def test_read_results_on_the_official_fixture():
    results = read_results(RESULTS)
    assert len(results) == 1000
    assert results[404464] == "black and white photo of a man standing in front of a building"
    assert results[553162] == "black bear standing next to a tree in the woods"


def test_write_results_is_sorted_official_format_and_round_trips(tmp_path):
    path = tmp_path / "res" / "captions.json"
    preds = {42: "a red cube", 7: "two spheres", 19: ""}
    write_results(path, preds)
    rows = json.loads(path.read_text())
    assert rows == [{"image_id": 7, "caption": "two spheres"}, {"image_id": 19, "caption": ""},
                    {"image_id": 42, "caption": "a red cube"}]
    assert read_results(path) == preds
    assert [p.name for p in path.parent.iterdir()] == ["captions.json"]  # no temporary left behind
    with pytest.raises(InputError):
        write_results(path, {"7": "a"})


@pytest.mark.parametrize("content,message", [
    ('{"image_id": 1, "caption": "a"}', "JSON list"),
    ('[{"image_id": 1}]', "lacks"),
    ('[{"image_id": "1", "caption": "a"}]', "non-integer"),
    ('[{"image_id": 1, "caption": 3}]', "non-string"),
    ('[{"image_id": 1, "caption": "a"}, {"image_id": 1, "caption": "b"}]', "more than once"),
    ("[{", "not valid JSON"),
])
def test_read_results_rejects_malformed_files(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(InputError, match=message) as err:
        read_results(path)
    assert str(path) in str(err.value)
