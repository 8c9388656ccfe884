"""What a reader of an MLflow run sees besides the curves: the qualitative examples drawn as pictures
(drawing.py: deterministic PNGs, fixed width, wrapped text, a video clip's frame strip), and caption
metrics logged on the tables' ×100 scale while the metrics files keep 0–1 (tasks/captioning.py)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from crossmodal import paths
from crossmodal.data.captions import write_examples
from crossmodal.data.karpathy import KarpathyImage
from crossmodal.io import InputError
from crossmodal import drawing
from crossmodal.tasks.captioning import SCALE, Captioning, write_captions

LONG = "a large checkered red square to the left of a small dotted green circle above a blue star " * 2


def chunks(png: bytes) -> list[str]:
    """The chunk types of a PNG file, in order."""
    found, at = [], 8
    while at < len(png):
        length = int.from_bytes(png[at:at + 4], "big")
        found.append(png[at + 4:at + 8].decode())
        at += 12 + length
    return found


def picture(seed: int = 0, size: int = 48) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8))


def test_a_panel_is_the_same_bytes_every_time_and_carries_no_time_stamp():
    first = drawing.png_bytes(drawing.caption_panel(picture(), "a red circle", ["a red ball", LONG]))
    second = drawing.png_bytes(drawing.caption_panel(picture(), "a red circle", ["a red ball", LONG]))
    assert first == second
    assert chunks(first) == ["IHDR", "IDAT", "IEND"]  # no tIME, tEXt or other metadata
    assert first != drawing.png_bytes(drawing.caption_panel(picture(), "a blue circle", ["a red ball", LONG]))


def test_panel_size_picture_and_wrapped_text():
    face = drawing.font()
    lines = drawing.wrap(LONG, 200, face)
    assert len(lines) > 2 and all(face.getlength(line) <= 200 for line in lines)
    assert " ".join(lines) == " ".join(LONG.split())  # nothing lost or reordered
    assert drawing.wrap("", 200, face) == [""]

    line = sum(face.getmetrics()) + drawing.LINE_GAP
    short = drawing.caption_panel(picture(size=96), "a red circle", ["a red ball"])
    assert short.size == (drawing.PANEL_WIDTH, 3 * drawing.MARGIN + 192 + 2 * line)  # 96 px enlarged 2x
    wrapped = drawing.caption_panel(picture(size=96), "a red circle", [LONG])
    extra = len(drawing.wrap(f"ref 1: {LONG}", drawing.PANEL_WIDTH - 2 * drawing.MARGIN, face)) - 1
    assert extra >= 1 and wrapped.height == short.height + extra * line
    # the 96-pixel image, enlarged 2x without blurring, centred at the top
    x0 = (drawing.PANEL_WIDTH - 192) // 2
    assert np.array_equal(np.asarray(short)[drawing.MARGIN:drawing.MARGIN + 192:2, x0:x0 + 192:2],
                          np.asarray(picture(size=96)))
    no_picture = drawing.caption_panel(None, "a red circle", ["a red ball"], note="no picture")
    assert no_picture.size == (drawing.PANEL_WIDTH, 2 * drawing.MARGIN + 3 * line)


def test_frame_strip_of_a_synthetic_clip():
    colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0)]
    frames = [np.full((24, 32, 3), c, np.uint8) for c in colours]  # H x W x 3 arrays, as a video reader gives
    strip = drawing.frame_strip(frames, height=48, gap=4)
    assert strip.size == (4 * 64 + 3 * 4, 48)
    assert [strip.getpixel((k * 68 + 30, 20)) for k in range(4)] == colours
    assert strip.getpixel((65, 20)) == drawing.BACKGROUND  # the gap
    panel = drawing.caption_panel(strip, "a red then a green square", ["squares change colour"])
    assert panel.width == drawing.PANEL_WIDTH
    assert drawing.png_bytes(panel) == drawing.png_bytes(drawing.caption_panel(
        drawing.frame_strip([Image.fromarray(f) for f in frames], height=48, gap=4), "a red then a green square",
        ["squares change colour"]))
    with pytest.raises(ValueError):
        drawing.frame_strip([])


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


def tiny_root(root: Path, ids: list[int], examples: int = 2, images: bool = True) -> dict[int, list[str]]:
    """What `prepro_captions` leaves for the examples: the first `examples` test images by id set aside, with a
    copy of each picture unless `images` is False (the real profile); their references."""
    world = root / "world"
    entries = [KarpathyImage(i, i, "test", "images/test", f"synth_test_{i:06d}.png", []) for i in ids]
    for entry in entries:
        (world / entry.path).parent.mkdir(parents=True, exist_ok=True)
        picture(entry.image_id).save(world / entry.path)
    write_examples(sorted(entries, key=lambda e: e.image_id)[:examples], world if images else None,
                   root / paths.EXAMPLES)
    return {i: [f"reference {k} of image {i}" for k in range(5)] for i in ids}


def config(profile: str = "synthetic"):
    return SimpleNamespace(profile=profile)


TEST = {"BLEU-1": 0.75, "BLEU-4": 0.4, "METEOR": 0.3, "ROUGE-L": 0.6, "CIDEr": 2.028341, "SPICE": None,
        "SPICE_status": "unavailable (no CoreNLP jars)"}


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
    (tmp_path / "synthetic" / paths.EXAMPLES / "1.png").unlink()
    with pytest.raises(InputError, match="examples/1.png; run `dvc repro prepro_captions`"):
        write_captions(config("synthetic"), tmp_path / "synthetic", "tiny", FakeRun(), refs,
                       {"predictions": {1: "a cat", 2: "a dog"}, "test": dict(TEST)})
