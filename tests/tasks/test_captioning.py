"""The captioning task's run logging (tasks/captioning.py): caption metrics logged on the tables' ×100 scale while the
metrics files keep 0–1, and each qualitative example drawn and logged as a picture."""
from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from qualitative_examples import TEST, config, tiny_root

from crossmodal import drawing, paths
from crossmodal.io import InputError
from crossmodal.tasks.captioning import SCALE, Captioning, write_captions


def test_captioning_logs_its_metric_and_rewards_times_100_and_the_rest_as_they_are():
    task = Captioning.__new__(Captioning)  # for_tracking reads class attributes only
    row = {"train_loss": 2.5, "lr": 0.001, "train_CIDEr_sample": 1.03, "train_CIDEr_greedy": 1.2, "val_CIDEr": 1.7568513}
    assert task.for_tracking(row) == {"train_loss": 2.5, "lr": 0.001, "train_CIDEr_sample": 103.0,
                                      "train_CIDEr_greedy": 120.0, "val_CIDEr": 175.6851}


class FakeRun:
    """Records what a stage logs to its MLflow run."""

    def __init__(self):
        self.metrics, self.tags, self.artifacts, self.images = {}, {}, [], {}

    def log_metrics(self, metrics, step=0):
        self.metrics.update({k: v for k, v in metrics.items() if v is not None})

    def set_tags(self, tags):
        self.tags.update(tags)

    def set_tag(self, key, value):
        self.tags[key] = value

    def log_artifact(self, path, artifact_path=None):
        self.artifacts.append((Path(path), artifact_path))

    def log_image(self, path, key):
        self.images[key] = Path(path)


def test_write_captions_logs_x100_keeps_0_to_1_and_draws_each_example(tmp_path):
    refs = tiny_root(tmp_path, [7, 3, 9])
    run = FakeRun()
    predictions = {3: "a red circle", 7: "a blue square", 9: "a green star"}
    metrics = write_captions(config(), tmp_path, "tiny", run, refs, {"variant": "tiny", "predictions": predictions,
                                                                     "test": dict(TEST)})
    assert metrics["test"] == TEST and "predictions" not in metrics  # the metrics file's body: 0-1, unchanged
    assert run.metrics == {"test_BLEU-1": 75.0, "test_BLEU-4": 40.0, "test_METEOR": 30.0, "test_ROUGE-L": 60.0,
                           "test_CIDEr": 202.8341}
    assert SCALE == 100 and "x100" in run.tags["metric_scale"]

    folder = tmp_path / paths.PREDICTIONS / "tiny"
    pngs = [folder / "qualitative" / f"{i}.png" for i in (3, 7)]  # the first two test images by id
    assert sorted((folder / "qualitative").iterdir()) == pngs
    assert (pngs[0], "qualitative") in run.artifacts and (pngs[1], "qualitative") in run.artifacts
    assert (folder / "qualitative.md", None) in run.artifacts
    assert run.images == {"example_3": pngs[0], "example_7": pngs[1]}  # the same example, one key in every run
    page = (folder / "qualitative.md").read_text()
    assert "![image 3 with its captions](qualitative/3.png)" in page and "(`images/test/synth_test_000003.png`)" in page
    assert "- **model:** a red circle" in page and "- reference: reference 4 of image 3" in page
    with Image.open(pngs[0]) as image:
        assert image.width == drawing.PANEL_WIDTH and image.height > drawing.PICTURE_HEIGHT
    before = [p.read_bytes() for p in pngs]
    write_captions(config(), tmp_path, "tiny", FakeRun(), refs, {"predictions": predictions, "test": dict(TEST)})
    assert [p.read_bytes() for p in pngs] == before  # DVC sees the same output


def test_real_profile_draws_the_captions_without_a_picture_and_synthetic_needs_its_images(tmp_path):
    refs = tiny_root(tmp_path, [1, 2], examples=5, images=False)  # the real profile has no images: only features
    run = FakeRun()
    write_captions(config("real"), tmp_path, "tiny", run, refs,
                   {"predictions": {1: "a cat", 2: "a dog"}, "test": dict(TEST)})
    folder = tmp_path / paths.PREDICTIONS / "tiny" / "qualitative"
    assert sorted(p.name for p in folder.iterdir()) == ["1.png", "2.png"]
    with Image.open(folder / "1.png") as image:
        assert image.height < drawing.PICTURE_HEIGHT  # text only
    with pytest.raises(InputError, match="example 2 has no test prediction"):
        write_captions(config("real"), tmp_path, "tiny", FakeRun(), refs,
                       {"predictions": {1: "a cat"}, "test": dict(TEST)})
    tiny_root(tmp_path / "synthetic", [1, 2])
    (tmp_path / "synthetic" / paths.EXAMPLES / "1.png").unlink()  # a folder changed behind DVC's back stops the stage
    with pytest.raises(InputError, match="examples differs from its manifest .* in 1 file.s., first 1.png"):
        write_captions(config("synthetic"), tmp_path / "synthetic", "tiny", FakeRun(), refs,
                       {"predictions": {1: "a cat", 2: "a dog"}, "test": dict(TEST)})
