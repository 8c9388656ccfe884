"""The image world's region features (features/regions.py, features/backbone.py): RoI-align, proposals, backbone
pretraining and extraction. The region files' HDF5 layout has its own module (tests/data/test_regions.py)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from crossmodal.config.data import SplitSizes, WorldConfig
from crossmodal.config.features import BackboneConfig, RegionsConfig
from crossmodal.data.regions import RegionFeatures
from crossmodal.features.backbone import load_backbone, load_images, pretrain, roi_align
from crossmodal.features.regions import extract, propose_boxes
from crossmodal.io import InputError
from crossmodal.worlds.image_world import generate


# --------------------------------------------------------------------------------------------------
# RoI-align


def _reference_roi_align(fmap: np.ndarray, box, stride: float, offset: float, r: int, sr: int) -> np.ndarray:
    """Point-by-point bilinear RoI-align (border-clamped) for one box on fmap [C, h, w]."""
    c, h, w = fmap.shape
    x1, y1, x2, y2 = box
    out = np.zeros((c, r, r))
    for i in range(r):
        for j in range(r):
            acc = np.zeros(c)
            for a in range(sr):
                for b in range(sr):
                    y = y1 + (y2 - y1) * (i * sr + a + 0.5) / (r * sr)
                    x = x1 + (x2 - x1) * (j * sr + b + 0.5) / (r * sr)
                    u = min(max((x - offset) / stride, 0.0), w - 1)
                    v = min(max((y - offset) / stride, 0.0), h - 1)
                    u0, v0 = min(int(np.floor(u)), w - 2), min(int(np.floor(v)), h - 2)
                    fu, fv = u - u0, v - v0
                    acc += ((1 - fv) * ((1 - fu) * fmap[:, v0, u0] + fu * fmap[:, v0, u0 + 1])
                            + fv * ((1 - fu) * fmap[:, v0 + 1, u0] + fu * fmap[:, v0 + 1, u0 + 1]))
            out[:, i, j] = acc / (sr * sr)
    return out


def test_roi_align_of_constant_map_is_the_constant():
    fmap = torch.full((2, 3, 6, 8), 2.5)
    boxes = torch.tensor([[[0.0, 0.0, 32.0, 24.0], [3.3, 5.1, 17.9, 11.2]], [[10.0, 1.0, 12.0, 3.0], [0.0, 0.0, 4.0, 4.0]]])
    out = roi_align(fmap, boxes, stride=4, out_size=5)
    assert out.shape == (2, 2, 3, 5, 5)
    torch.testing.assert_close(out, torch.full_like(out, 2.5))


def test_roi_align_integer_box_reproduces_the_crop():
    fmap = torch.arange(2 * 10 * 12, dtype=torch.float32).view(1, 2, 10, 12)
    box = torch.tensor([[[2.0, 3.0, 7.0, 8.0]]])  # pixels 2..6 x 3..7, i.e. a 5 x 5 crop
    out = roi_align(fmap, box, stride=1, out_size=5, sampling_ratio=1)
    torch.testing.assert_close(out[0, 0], fmap[0, :, 3:8, 2:7])


def test_roi_align_bins_average_their_cells():
    fmap = torch.randn(1, 3, 8, 8)
    box = torch.tensor([[[0.0, 4.0, 4.0, 8.0]]])  # rows 4..7, cols 0..3; 2 x 2 bins of 2 x 2 cells each
    out = roi_align(fmap, box, stride=1, out_size=2, sampling_ratio=2)
    expected = fmap[0, :, 4:8, 0:4].reshape(3, 2, 2, 2, 2).mean(dim=(2, 4))
    torch.testing.assert_close(out[0, 0], expected)


def test_roi_align_matches_pointwise_bilinear_with_stride_and_offset():
    gen = torch.Generator().manual_seed(3)
    fmap = torch.randn(2, 4, 6, 7, generator=gen)
    xy = torch.rand(2, 3, 2, generator=gen) * 20
    wh = torch.rand(2, 3, 2, generator=gen) * 10 + 1
    boxes = torch.cat([xy, xy + wh], dim=-1)
    boxes[1, 2] = torch.tensor([-3.0, 20.0, 30.0, 27.0])  # partly past the map: border-clamped
    out = roi_align(fmap, boxes, stride=4, out_size=3, sampling_ratio=2, offset=0.5)
    for n in range(2):
        for k in range(3):
            ref = _reference_roi_align(fmap[n].numpy().astype(np.float64), boxes[n, k].tolist(), 4, 0.5, 3, 2)
            np.testing.assert_allclose(out[n, k].numpy(), ref, atol=1e-5)


# --------------------------------------------------------------------------------------------------
# proposals


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(-1)
    area = lambda x: (x[:, 2:] - x[:, :2]).prod(-1)
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


def test_propose_boxes_counts_bounds_and_shuffling():
    cfg = RegionsConfig(jitter=0.1, min_distractors=1, max_distractors=6)
    rng = np.random.default_rng(0)
    gt = np.array([[2.0, 3.0, 20.0, 25.0], [40.0, 40.0, 70.0, 70.0], [60.0, 5.0, 90.0, 30.0]])
    counts, gt_positions = [], set()
    for _ in range(300):
        boxes = propose_boxes(gt, 96, 80, rng, cfg)
        assert boxes.dtype == np.float32 and boxes.shape[1] == 4
        assert (boxes[:, :2] >= 0).all() and (boxes[:, 2] <= 96).all() and (boxes[:, 3] <= 80).all()
        assert (boxes[:, 2:] - boxes[:, :2] >= 2 - 1e-4).all()
        iou = _iou(gt, boxes.astype(np.float64))
        assert (iou.max(1) > 0.6).all()  # every object keeps a (jittered) proposal
        gt_positions.add(int(iou[0].argmax()))
        counts.append(len(boxes))
    assert min(counts) == 3 + 1 and max(counts) == 3 + 6
    assert len(gt_positions) > 3  # an object's box is not always in the same place of the list
    again = propose_boxes(gt, 96, 80, np.random.default_rng(5), cfg)
    assert np.array_equal(again, propose_boxes(gt, 96, 80, np.random.default_rng(5), cfg))


# --------------------------------------------------------------------------------------------------
# pretraining and extraction on generated worlds


@pytest.fixture(scope="module")
def small_world(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("world")
    generate(WorldConfig(images=SplitSizes(100, 30, 5), image_size=64), out, progress=False)
    return out


SMALL_BACKBONE = BackboneConfig(channels=8, feature_dim=64, epochs=12, batch_size=10, lr=3e-3)


@pytest.fixture(scope="module")
def pretrained(small_world, tmp_path_factory):
    out = tmp_path_factory.mktemp("backbone") / "backbone.pt"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny batches: a second thread gains little and loses much on a busy machine
    try:
        return out, pretrain(SMALL_BACKBONE, small_world, out, progress=False)
    finally:
        torch.set_num_threads(threads)


def test_pretraining_learns_classes_and_attributes(pretrained):
    path, result = pretrained
    acc, chance = result["accuracy"], result["chance"]
    assert acc["class"] > 2 * chance["class"]
    assert acc["color"] > 3 * chance["color"]
    assert acc["size"] > 0.8
    assert result["train_loss"][-1] < 0.6 * result["train_loss"][0]
    model, meta = load_backbone(path)
    assert meta["classes"][0] == "__background__" and len(meta["classes"]) == 7
    assert set(meta["attributes"]) == {"color", "size", "texture"} and meta["config"]["feature_dim"] == 64
    assert not model.training


def test_pretraining_is_deterministic(tmp_path):
    world = tmp_path / "world"
    generate(WorldConfig(images=SplitSizes(20, 5, 5), image_size=64), world, progress=False)
    cfg = BackboneConfig(channels=4, feature_dim=16, epochs=1, batch_size=8)
    first = pretrain(cfg, world, tmp_path / "a.pt", progress=False)
    second = pretrain(cfg, world, tmp_path / "b.pt", progress=False)
    assert first["train_loss"] == second["train_loss"]
    a, b = torch.load(tmp_path / "a.pt")["state_dict"], torch.load(tmp_path / "b.pt")["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_missing_image_is_an_input_error(tmp_path):
    world = tmp_path / "world"
    generate(WorldConfig(images=SplitSizes(20, 5, 5), image_size=64), world, progress=False)
    victim = sorted((world / "images" / "train").glob("*.png"))[3]
    victim.unlink()
    with pytest.raises(InputError) as err:
        pretrain(BackboneConfig(epochs=1), world, tmp_path / "bb.pt", progress=False)
    assert str(err.value) == f"missing image file: {victim}"
    assert not (tmp_path / "bb.pt").exists()


def test_extract_writes_every_image_with_its_proposals(pretrained, small_world, tmp_path):
    backbone_path, _ = pretrained
    cfg = RegionsConfig(seed=1, min_distractors=2, max_distractors=4)
    out = tmp_path / "regions.h5"
    summary = extract(cfg, backbone_path, small_world, out, progress=False)
    graphs = json.loads((small_world / "scene_graphs.json").read_text())["images"]
    with RegionFeatures(out) as rf:
        assert rf.ids.tolist() == [g["image_id"] for g in graphs]
        assert rf.feature_dim == 64 and rf.source == "synthetic backbone"
        n_objects = np.array([len(g["objects"]) for g in graphs])
        extra = rf.num_boxes - n_objects
        assert extra.min() >= 2 and extra.max() <= 4
        assert summary["images"] == len(graphs) and summary["total_boxes"] == int(rf.num_boxes.sum())
        feats, mask, boxes = rf.load_all()
        assert torch.isfinite(feats).all() and (feats[mask] >= 0).all() and feats[mask].abs().sum() > 0
        # a box's feature does not depend on the other boxes batched with it
        g = graphs[7]
        model, _ = load_backbone(backbone_path)
        image = load_images(small_world, [g])
        k = rf.index_of(g["image_id"])
        own_f, own_b = rf.get(g["image_id"])
        with torch.no_grad():
            alone = model.region_features(image, torch.from_numpy(own_b[1:2])[None])[0, 0]
        torch.testing.assert_close(alone, torch.from_numpy(own_f[1]), atol=1e-4, rtol=1e-4)
        assert torch.equal(boxes[k, : len(own_b)], torch.from_numpy(own_b))
    again = tmp_path / "again.h5"
    extract(cfg, backbone_path, small_world, again, progress=False)
    with RegionFeatures(out) as a, RegionFeatures(again) as b:
        assert np.array_equal(a.get(g["image_id"])[1], b.get(g["image_id"])[1])
