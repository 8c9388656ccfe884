"""MSVD and MSR-VTT readers, the common captions JSON, standard splits, and the video feature layout."""
from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import h5py
import numpy as np
import pytest

from crossmodal.data.video import (
    VideoCaptions,
    VideoFeatures,
    check_standard_splits,
    msvd_split,
    parse_msvd_clip,
    read_msrvtt,
    read_msvd,
    read_msvd_mapping,
    read_video_captions,
    write_video_captions,
    write_video_features,
)
from crossmodal.io import InputError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # copies of ../shared/fixtures (see its README)
MSVD_CAPTIONS = FIXTURES / "msvd" / "AllVideoDescriptions_excerpt.txt"
MSVD_MAPPING = FIXTURES / "msvd" / "youtube_mapping_head.txt"
MSRVTT_2017 = FIXTURES / "msrvtt" / "videodatainfo_2017_excerpt.json"


# --- MSVD -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("clip, parts", [
    ("-4wsuPCjDBc_5_15", ("-4wsuPCjDBc", 5, 15)),
    ("-9CUm-2cui8_39_44", ("-9CUm-2cui8", 39, 44)),
    ("a_b-c_d_108_115", ("a_b-c_d", 108, 115)),  # YouTube ids may hold underscores: split at the last two
])
def test_msvd_clip_names(clip, parts):
    assert parse_msvd_clip(clip) == parts


@pytest.mark.parametrize("clip", ["abc_5", "abc_5_x", "_5_15", "abc"])
def test_bad_msvd_clip_names(clip):
    with pytest.raises(InputError, match="is not <youtube id>_<start>_<end>"):
        parse_msvd_clip(clip)


def test_msvd_standard_split_boundaries():
    assert [msvd_split(f"vid{n}") for n in (1, 1200, 1201, 1300, 1301, 1970)] == \
        ["train", "train", "val", "val", "test", "test"]
    for bad in ("vid0", "vid1971", "video1", "vid01"):
        with pytest.raises(InputError, match="is not vid1 ... vid1970"):
            msvd_split(bad)


def test_reads_msvd_excerpt():
    mapping = read_msvd_mapping(MSVD_MAPPING)
    assert len(mapping) == 10
    assert (mapping["-4wsuPCjDBc_5_15"], mapping["-9CUm-2cui8_39_44"], mapping["-DRy7rBg0IQ_31_37"]) == ("vid1", "vid5", "vid10")
    videos = read_msvd(MSVD_CAPTIONS, MSVD_MAPPING)
    assert list(videos) == [f"vid{n}" for n in range(1, 11)]  # natural order: vid10 last
    assert videos["vid1"] == VideoCaptions("train", (
        "a squirrel is eating a peanut in it's shell",
        "a chipmunk is eating",
        "a chipmunk is eating a peanut",
        "a chipmunk is eating a nut",
        "a squirrel is eating a nut",
        "a squirrel is eating a whole peanut",
        "a squirrel is eating a peanut",
    ))
    assert all(videos[f"vid{n}"].captions == () for n in range(2, 11))  # the excerpt has captions for vid1 only
    assert check_standard_splits(videos, "msvd", excerpt=True) == {"train": 10, "val": 0, "test": 0}
    with pytest.raises(InputError, match="differ from the standard"):
        check_standard_splits(videos, "msvd")


def test_msvd_comments_blank_lines_and_unmapped_clips(tmp_path):
    captions = tmp_path / "AllVideoDescriptions.txt"
    captions.write_text("#####\n# Microsoft Research Video Description Corpus\n#####\n\n"
                        "-4wsuPCjDBc_5_15 a squirrel eats\n"
                        "-7KMZQEsJW4_205_208   a man  sings \r\n"
                        "zz_top_1_2 a band plays\n")
    with pytest.raises(InputError, match="1 clips are not in .* \\(first: zz_top_1_2\\)"):
        read_msvd(captions, MSVD_MAPPING)
    videos = read_msvd(captions, MSVD_MAPPING, drop_unmapped=True)
    assert videos["vid1"].captions == ("a squirrel eats",) and videos["vid2"].captions == ("a man  sings",)


@pytest.mark.parametrize("text, message", [
    ("-4wsuPCjDBc_5_15 vid1\n-7KMZQEsJW4_205_208 vid1\n", ":2: clip -7KMZQEsJW4_205_208 or video vid1 is mapped twice"),
    ("-4wsuPCjDBc_5_15\n", ":1: expected '<clip> vid<N>'"),
    ("-4wsuPCjDBc_5_15 vid2000\n", ":1: MSVD video id 'vid2000' is not vid1 ... vid1970"),
])
def test_bad_msvd_mapping(tmp_path, text, message):
    (tmp_path / "map.txt").write_text(text)
    with pytest.raises(InputError, match=re.escape(message)):
        read_msvd_mapping(tmp_path / "map.txt")


def test_msvd_caption_line_without_caption(tmp_path):
    (tmp_path / "d.txt").write_text("-4wsuPCjDBc_5_15 a squirrel\n-4wsuPCjDBc_5_15\n")
    with pytest.raises(InputError, match=re.escape("d.txt:2: clip '-4wsuPCjDBc_5_15' has no caption")):
        read_msvd(tmp_path / "d.txt", MSVD_MAPPING)


# --- MSR-VTT --------------------------------------------------------------------------------------

def test_reads_msrvtt_2017_excerpt():
    videos = read_msrvtt(MSRVTT_2017)
    assert list(videos) == ["video0", "video1", "video2", "video2960", "video6513", "video7010"]
    assert [v.split for v in videos.values()] == ["train", "train", "train", "train", "val", "test"]
    assert [v.category for v in videos.values()] == [9, 16, 9, 2, 14, 10]
    captions = videos["video2960"].captions
    assert len(captions) == 9
    assert captions[0] == "a cartoon animals runs through an ice cave in a video game"
    assert captions[8] == "a video game of a small animal"
    assert videos["video0"].captions == ()
    assert check_standard_splits(videos, "msrvtt", excerpt=True) == {"train": 4, "val": 1, "test": 1}


def _msrvtt_2016(tmp_path) -> tuple[Path, Path]:
    """The 2016 layout: train+validate in one file, test in another (made from the 2017 excerpt)."""
    data = json.loads(MSRVTT_2017.read_text())
    for video in data["videos"]:
        video["split"] = {"val": "validate"}.get(video["split"], video["split"])
    test_ids = {v["video_id"] for v in data["videos"] if v["split"] == "test"}
    train_val = dict(data, videos=[v for v in data["videos"] if v["video_id"] not in test_ids])
    test = dict(data, videos=[v for v in data["videos"] if v["video_id"] in test_ids],
                sentences=[{"caption": "a clip of a test video", "video_id": "video7010", "sen_id": 0}])
    (tmp_path / "train_val_videodatainfo.json").write_text(json.dumps(train_val))
    (tmp_path / "test_videodatainfo.json").write_text(json.dumps(test))
    return tmp_path / "train_val_videodatainfo.json", tmp_path / "test_videodatainfo.json"


def test_msrvtt_2016_files_merge_and_validate_means_val(tmp_path):
    train_val, test = _msrvtt_2016(tmp_path)
    alone = read_msrvtt(train_val)
    assert alone["video6513"].split == "val" and "video7010" not in alone
    merged = read_msrvtt([train_val, test])
    assert list(merged) == list(read_msrvtt(MSRVTT_2017))
    assert merged["video7010"] == VideoCaptions("test", ("a clip of a test video",), 10)
    with pytest.raises(InputError, match="repeats video video0"):
        read_msrvtt([train_val, MSRVTT_2017])


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["videos"][1].update(split="dev"), "videos[1].split is 'dev'"),
    (lambda d: d["videos"][2].pop("video_id"), "videos[2] is missing field 'video_id'"),
    (lambda d: d["videos"][0].update(category="9"), "videos[0].category has the wrong type (str)"),
    (lambda d: d["sentences"][3].update(video_id="video9"), "sentences[3] refers to video video9"),
    (lambda d: d["sentences"][3].update(sen_id=0), "sentences[3] repeats sen_id 0"),
    (lambda d: d["sentences"][4].update(caption=None), "sentences[4].caption has the wrong type"),
    (lambda d: d.pop("sentences"), "field 'sentences' is missing or not a list"),
])
def test_bad_msrvtt_files(tmp_path, edit, message):
    data = json.loads(MSRVTT_2017.read_text())
    edit(data)
    (tmp_path / "v.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match=re.escape(message)):
        read_msrvtt(tmp_path / "v.json")


# --- standard splits and the common JSON ----------------------------------------------------------

def test_full_size_splits_pass_and_need_captions():
    videos = {f"vid{n}": VideoCaptions(msvd_split(f"vid{n}"), ("a caption",)) for n in range(1, 1971)}
    assert check_standard_splits(videos, "msvd") == {"train": 1200, "val": 100, "test": 670}
    videos["vid1500"] = VideoCaptions("test", ())
    with pytest.raises(InputError, match=re.escape("msvd: 1 videos have no captions (first: vid1500)")):
        check_standard_splits(videos, "msvd")
    with pytest.raises(InputError, match="unknown video dataset"):
        check_standard_splits(videos, "youcook")


def test_common_json_round_trip(tmp_path):
    msrvtt = read_msrvtt(MSRVTT_2017)
    write_video_captions(tmp_path / "msrvtt.json", "msrvtt", msrvtt)
    data = json.loads((tmp_path / "msrvtt.json").read_text())
    assert data["dataset"] == "msrvtt"
    assert data["videos"]["video6513"] == {"split": "val", "captions": [], "category": 14}
    assert read_video_captions(tmp_path / "msrvtt.json") == ("msrvtt", msrvtt)
    msvd = read_msvd(MSVD_CAPTIONS, MSVD_MAPPING)
    write_video_captions(tmp_path / "msvd.json", "msvd", msvd)
    assert "category" not in json.loads((tmp_path / "msvd.json").read_text())["videos"]["vid1"]
    assert read_video_captions(tmp_path / "msvd.json") == ("msvd", msvd)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporaries left behind
    data["videos"]["video0"]["split"] = "validate"
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match=re.escape("videos['video0'].split is 'validate'")):
        read_video_captions(tmp_path / "bad.json")


# --- features -------------------------------------------------------------------------------------

def test_feature_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {"vid1": rng.normal(size=(5, 8)), "vid10": rng.normal(size=(3, 8)), "vid2": rng.normal(size=(1, 8))}
    write_video_features(tmp_path / "motion.h5", arrays)
    with VideoFeatures(tmp_path / "motion.h5") as features:
        assert (len(features), features.dim, features.video_ids) == (3, 8, ["vid1", "vid2", "vid10"])
        assert "vid10" in features and "vid3" not in features
        assert features.num_steps("vid1") == 5
        for video_id, array in arrays.items():
            got = features[video_id]
            assert got.dtype == np.float32 and np.allclose(got, array, atol=1e-6)
        features.check_covers(["vid1", "vid2"])
        with pytest.raises(InputError, match=re.escape("lacks 1 videos (first: 'vid3')")):
            features.check_covers(["vid1", "vid3"])
        with pytest.raises(InputError, match=re.escape("has no features for video 'vid3'")):
            features["vid3"]
        clone = pickle.loads(pickle.dumps(features))  # reopens in the receiving process
        assert np.array_equal(clone["vid10"], features["vid10"])
        clone.close()


def test_features_written_by_plain_h5py_are_read(tmp_path):
    with h5py.File(tmp_path / "audio.h5", "w") as f:
        f.create_dataset("video0", data=np.ones((4, 128), np.float16))
        f.attrs["extractor"] = "vggish"
    with VideoFeatures(tmp_path / "audio.h5") as features:
        assert features.dim == 128 and features["video0"].dtype == np.float32


@pytest.mark.parametrize("build, message", [
    (lambda f: (f.create_dataset("vid1", data=np.ones((2, 4))), f.create_dataset("vid2", data=np.ones((2, 5)))),
     "feature sizes differ (vid1 has D = 4, vid2 has D = 5)"),
    (lambda f: f.create_dataset("vid1", data=np.ones((2, 4, 1))), "'vid1' has dtype float64 and shape (2, 4, 1), expected 2-d float"),
    (lambda f: f.create_dataset("vid1", data=np.ones((2, 4), np.int32)), "'vid1' has dtype int32"),
    (lambda f: f.create_dataset("vid1", data=np.ones((0, 4))), "'vid1' has no time steps"),
    (lambda f: f.create_group("vid1"), "'vid1' is a group"),
    (lambda f: None, "holds no video"),
])
def test_bad_feature_files(tmp_path, build, message):
    with h5py.File(tmp_path / "f.h5", "w") as f:
        build(f)
    with pytest.raises(InputError, match=re.escape(message)):
        VideoFeatures(tmp_path / "f.h5")


def test_unreadable_feature_files_and_bad_writes(tmp_path):
    with pytest.raises(InputError, match="missing video feature file"):
        VideoFeatures(tmp_path / "absent.h5")
    (tmp_path / "text.h5").write_text("not hdf5")
    with pytest.raises(InputError, match="truncated or not HDF5"):
        VideoFeatures(tmp_path / "text.h5")
    for features, message in [({}, "at least one video"), ({"a/b": np.ones((1, 2))}, "cannot name"),
                              ({"v": np.ones(3)}, "expected \\[T >= 1, D\\]"),
                              ({"v": np.ones((1, 2)), "w": np.ones((1, 3))}, "one feature size")]:
        with pytest.raises(ValueError, match=message):
            write_video_features(tmp_path / "out.h5", features)
    assert not (tmp_path / "out.h5").exists()
