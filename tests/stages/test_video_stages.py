"""HOCA's data path through the platform: the video world's stages, its captions processed as the image world's,
its features in the feature-set layout the captioning task reads, a captioner over clips, the single-modality
HOCA models, the stage files a video vocabulary brings, and the cost table's row configuration."""
from __future__ import annotations

import argparse
import json
import shutil

import h5py
import numpy as np
import pytest
import torch
import yaml

from crossmodal import paths
from crossmodal.config.loader import build, from_data, repo_root
from crossmodal.data.captions import load_labels, load_vocabulary
from crossmodal.data.coco import read_coco_captions
from crossmodal.data.feature_sets import SplitInputs
from crossmodal.data.regions import RegionFeatures
from crossmodal.data.video import item_id, read_msrvtt, read_msvd
from crossmodal.io import InputError
from crossmodal.models.hoca import HOCAArgs, LowRankHOCACaptioner
from crossmodal.pipelines import spine_stages
from crossmodal.papers.hoca.commands import hoca_cost
from crossmodal.papers.hoca.paper import PAPER as HOCA
from crossmodal.stages import extract_video, prepro_video, synthesize_video

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"video": {"world": {"clips": {"msvd": 10, "msrvtt": 10}, "captions_per_clip": {"msvd": 3, "msrvtt": 2},
                            "frames": 8, "fps": 8, "frame_size": 32}},
        "vocabularies": {"min5": {}, "msvd": {"min_word_count": 1, "max_length": 10, "corpus": "msvd"},
                         "msrvtt": {"min_word_count": 1, "max_length": 10, "corpus": "msrvtt"}},
        "evaluation": {"qualitative_examples": 2}, "runtime": {"progress": False}}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("video")
    cfg = from_data(TINY)
    synthesize_video.run(cfg, root, argparse.Namespace())
    prepro_video.run(cfg, root, argparse.Namespace())
    return cfg, root


def test_item_ids_are_the_numbers_ending_the_video_ids():
    assert [item_id(v) for v in ("vid12", "video0", "video7010")] == [12, 0, 7010]
    with pytest.raises(InputError, match="does not end in a number"):
        item_id("clip")


def test_each_dataset_is_processed_as_the_image_worlds_captions(world):
    cfg, root = world
    profile = json.loads((root / paths.METRICS / "video_profile.json").read_text())
    assert profile["synthetic"] and set(profile) >= {"msvd-like clips", "msrvtt-like clips"}
    folder = root / paths.VIDEO_WORLD
    readers = {"msvd": read_msvd(folder / "msvd/AllVideoDescriptions.txt", folder / "msvd/youtube_mapping.txt",
                                 num_videos=10),
               "msrvtt": read_msrvtt(folder / "msrvtt/videodatainfo.json")}
    for dataset, videos in readers.items():
        words = load_vocabulary(root / paths.vocabulary(dataset, dataset) / "vocab.json")
        for split in ("train", "val", "test"):
            labels = load_labels(root / paths.vocabulary(dataset, dataset) / "labels.h5", split)
            expected = [v for v, video in videos.items() if video.split == split]
            assert labels.image_ids.tolist() == [item_id(v) for v in expected]  # every clip of the split, in order
            for row, video_id in enumerate(expected):  # each caption decodes back to its words
                encoded = labels.labels[labels.start[row]:labels.end[row]]
                decoded = [" ".join(words[i] for i in seq if i) for seq in encoded]
                known = set(words)  # words of the training captions; the others are <unk>
                assert decoded == [" ".join(w if w in known else "<unk>" for w in c.lower().split())
                                   for c in videos[video_id].captions]
            if split != "train":
                refs = read_coco_captions(root / paths.references(split, dataset))
                assert refs == {item_id(v): list(videos[v].captions) for v in expected}
        assert (root / paths.examples(dataset) / "examples.json").is_file()
    assert not (root / paths.CAPTIONS).exists()  # the image world's captions are prepro_captions' alone


def test_clips_are_decoded_with_torch_and_blas_on_one_thread_and_training_gets_its_threads_back():
    """A second thread of torch or of numpy's BLAS spins between calls and slowed FFmpeg's decoding down
    (benchmarks/results/extract_decode.md); the extractor then trains with the stage's threads, as before."""
    from threadpoolctl import threadpool_info

    torch.set_num_threads(2)
    with extract_video.one_thread():
        assert torch.get_num_threads() == 1
        blas = [lib for lib in threadpool_info() if lib["user_api"] == "blas"]
        assert blas and all(lib["num_threads"] == 1 for lib in blas)
    assert torch.get_num_threads() == 2
    with pytest.raises(RuntimeError), extract_video.one_thread():
        raise RuntimeError("a clip that fails to decode")
    assert torch.get_num_threads() == 2


def test_an_extractor_stage_under_early_stopping_reports_its_curve_and_writes_every_clip(world, tmp_path):
    _, built = world
    root = tmp_path / "copy"  # the stage writes features and metrics: a copy keeps the shared world as it was
    shutil.copytree(built, root)
    features = {"frames_per_clip": 4, "chunk_frames": 4, "dims": {"frames": 8, "motion": 8, "audio": 8},
                "channels": 4, "epochs": 8, "patience": 2, "min_delta": 0.001}
    cfg = from_data({**TINY, "video": {**TINY["video"], "features": features}})
    extract_video.run(cfg, root, argparse.Namespace(modality="audio"))
    metrics = json.loads((root / paths.METRICS / "extract_audio.json").read_text())
    curve = metrics["val_mean_accuracy"]
    assert len(metrics["train_loss"]) == len(curve) <= features["epochs"]
    assert metrics["best_epoch"] == curve.index(max(curve)) + 1
    assert metrics["clips"]["val"] > 0 and metrics["clips"]["train"] > metrics["clips"]["val"]
    for dataset in ("msvd", "msrvtt"):
        with RegionFeatures(root / paths.features(f"{dataset}_audio")) as written:
            assert len(written.ids) == TINY["video"]["world"]["clips"][dataset]  # every split's clips


def test_feature_sets_hold_each_clips_time_steps_under_its_item_id(tmp_path):
    features = {"video3": np.arange(12, dtype=np.float32).reshape(4, 3), "video1": np.ones((2, 3), np.float32)}
    path = tmp_path / paths.features("msrvtt_frames")
    path.parent.mkdir(parents=True)
    extract_video.write_feature_set(path, features, {"video3": 16, "video1": 8})
    with RegionFeatures(path) as reader:
        assert reader.ids.tolist() == [1, 3]
    with h5py.File(path) as h5:  # row t's span: the sampled frame i_t = floor((t + 1/2) F / T) to i_t + 1
        np.testing.assert_array_equal(h5["boxes"][()], [[2, 0, 3, 1], [6, 0, 7, 1],
                                                        [2, 0, 3, 1], [6, 0, 7, 1], [10, 0, 11, 1], [14, 0, 15, 1]])
    (_, batch), = SplitInputs(tmp_path, {"frames": "msrvtt_frames"}, np.array([3, 1])).batches([np.array([0, 1])])
    values, mask = batch["frames"]
    np.testing.assert_array_equal(values[0].numpy(), features["video3"])  # the captioning task's batch of clips
    np.testing.assert_array_equal(values[1, :2].numpy(), features["video1"])
    assert mask.tolist() == [[True] * 4, [True, True, False, False]]


def test_single_modality_hoca_reads_only_its_input():
    args = build(HOCAArgs, {"variant": "U", "modalities": ["motion"], "embed_dim": 8, "hidden_dim": 8, "att_dim": 8,
                            "steps": {"frames": 4, "motion": 4, "audio": 4}, "dropout": 0.0}, "x")
    model = LowRankHOCACaptioner(args, 9, {"motion": 5})
    assert model.INPUTS == ("motion",) and LowRankHOCACaptioner.consumes(args) == ("motion",)
    assert set(model.encoders) == {"motion"}
    from crossmodal.data.inputs import Padded

    inputs = {"motion": Padded(torch.randn(2, 4, 5), torch.ones(2, 4, dtype=torch.bool))}
    out = model(inputs, torch.tensor([[4, 5, 0], [6, 0, 0]]))
    assert out.shape == (2, 4, 9)
    for bad, match in [({"variant": "B", "modalities": ["frames"]}, "needs at least 2"),
                       ({"modalities": ["audio", "frames"]}, "in that order"), ({"modalities": []}, "some of")]:
        with pytest.raises(InputError, match=match):
            build(HOCAArgs, bad, "x")


def test_a_video_vocabulary_brings_the_video_stages_and_leaves_prepro_captions_alone():
    params = yaml.safe_load((repo_root() / "params.yaml").read_text())
    cfg = from_data(params)
    stages = spine_stages(cfg)
    assert {"synthesize_video", "prepro_video", "extract_frames", "extract_motion", "extract_audio",
            "word2vec"} <= set(stages)
    assert not any(p.startswith("vocabularies.ms") for p in stages["prepro_captions"]["params"])
    assert set(stages["prepro_video"]["params"]) >= {"vocabularies.msvd", "vocabularies.msrvtt"}
    params["vocabularies"] = {k: v for k, v in params["vocabularies"].items() if k.startswith("min")}
    params["hoca"] = {}
    without = spine_stages(from_data(params))
    assert not {"synthesize_video", "prepro_video", "extract_frames", "word2vec"} & set(without)


def test_a_cost_row_is_its_system_at_the_paper_size_for_fixed_epochs():
    path = repo_root() / "params.yaml"
    cfg = from_data(yaml.safe_load(path.read_text()))
    cost = HOCA.study(cfg, "cost")
    row, system = next(iter(cost.rows.items()))
    config = hoca_cost.row_config(cfg, path, row)
    measured, original = config.systems()[row], config.systems()[system]
    assert measured.train.batch_size == cost.batch_size
    assert measured.train.max_epochs == cost.epochs and measured.train.patience == 0
    assert config.model_of(row).model_args == {**original.model_args, **cost.model_args}
    assert measured.inputs == original.inputs and measured.vocabulary == original.vocabulary


def test_under_the_real_profile_user_features_become_the_feature_sets(tmp_path):
    """The paper's extractors are the user's: [T, D] files per dataset and modality (data/video.py) are converted
    into the feature sets the captioning task reads, keyed by item id; a missing file is one clear error."""
    from crossmodal.data.video import write_video_features

    arrays = {"msvd": {"vid1": np.ones((3, 4), np.float32), "vid2": np.arange(8, dtype=np.float32).reshape(2, 4)},
              "msrvtt": {"video0": np.full((5, 4), 2.0, np.float32)}}
    for dataset, features in arrays.items():
        write_video_features(tmp_path / extract_video.USER_FEATURES / dataset / "audio.h5", features)
    cfg = from_data({"profile": "real"})
    extract_video.run(cfg, tmp_path, argparse.Namespace(modality="audio"))
    with RegionFeatures(tmp_path / paths.features("msvd_audio")) as reader:
        assert reader.ids.tolist() == [1, 2] and reader.num_boxes.tolist() == [3, 2]
        np.testing.assert_array_equal(reader.get(2)[0], arrays["msvd"]["vid2"])
    summary = json.loads((tmp_path / paths.METRICS / "extract_audio.json").read_text())
    assert summary["converted"] == {"msvd": 2, "msrvtt": 1}
    with pytest.raises(InputError, match="docs/real-data.md"):
        extract_video.run(cfg, tmp_path, argparse.Namespace(modality="motion"))


def test_word2vecs_binary_file_is_read_for_the_words_used(tmp_path):
    from gensim.models import KeyedVectors

    from crossmodal.stages.word2vec import read_binary_vectors

    vectors = KeyedVectors(3)
    vectors.add_vectors(["ball", "rolls", "cube"], np.arange(9, dtype=np.float32).reshape(3, 3))
    vectors.save_word2vec_format(str(tmp_path / "vectors.bin"), binary=True)
    found = read_binary_vectors(tmp_path / "vectors.bin", {"ball", "cube", "spins"})
    assert sorted(found) == ["ball", "cube"]
    np.testing.assert_array_equal(found["cube"], [6, 7, 8])
    with pytest.raises(InputError, match="missing word-vector file"):
        read_binary_vectors(tmp_path / "none.bin", {"ball"})
