"""Feature stages: RoI-align, the region HDF5 layout, proposals, backbone pretraining and extraction."""
from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from crossmodal.config.data import SplitSizes, WorldConfig
from crossmodal.config.features import BackboneConfig, RegionsConfig
import crossmodal.data.regions as regions_module
from crossmodal.data.regions import RegionFeatures, RegionFileWriter, write_region_file
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
# the HDF5 layout


def _write_sample(path: Path, counts=(3, 0, 5, 1), dim=6):
    rng = np.random.default_rng(0)
    ids = [17, 4, 99, 23]
    boxes = [rng.uniform(0, 50, size=(c, 4)).astype(np.float32) for c in counts]
    feats = [rng.normal(size=(c, dim)).astype(np.float32) for c in counts]
    sizes = [(64, 48), (96, 96), (80, 60), (32, 40)]
    write_region_file(path, ids, boxes, feats, sizes, source="test")
    return ids, boxes, feats, sizes


def test_region_file_round_trip(tmp_path):
    path = tmp_path / "regions.h5"
    ids, boxes, feats, sizes = _write_sample(path)
    assert [p.name for p in tmp_path.iterdir()] == ["regions.h5"]  # the temporary was renamed, not left behind
    with RegionFeatures(path) as rf:
        assert len(rf) == 4 and rf.ids.tolist() == ids
        assert rf.feature_dim == 6 and rf.source == "test"
        assert rf.offsets.tolist() == [0, 3, 3, 8, 9] and rf.num_boxes.tolist() == [3, 0, 5, 1]
        assert rf.image_sizes.tolist() == [list(s) for s in sizes]
        for i, image_id in enumerate(ids):
            f, b = rf.get(image_id)
            assert f.dtype == np.float32 and np.array_equal(f, feats[i]) and np.array_equal(b, boxes[i])
        assert rf.index_of(99) == 2
        with pytest.raises(InputError, match="no features for image 5"):
            rf.index_of(5)

        padded, mask, pboxes = rf.load_all()
        assert padded.shape == (4, 5, 6) and pboxes.shape == (4, 5, 4)
        assert mask.sum(1).tolist() == [3, 0, 5, 1]
        assert mask.tolist() == [[j < c for j in range(5)] for c in (3, 0, 5, 1)]
        for i in range(4):
            assert torch.equal(padded[i, : len(feats[i])], torch.from_numpy(feats[i]))
            assert torch.equal(pboxes[i, : len(boxes[i])], torch.from_numpy(boxes[i]))
        assert not padded[~mask].any() and not pboxes[~mask].any()

        sub, sub_mask, _ = rf.load_padded([23, 17], max_boxes=2)  # out of order, truncated
        assert sub.shape == (2, 2, 6) and sub_mask.tolist() == [[True, False], [True, True]]
        assert torch.equal(sub[0, 0], torch.from_numpy(feats[3][0])) and torch.equal(sub[1], torch.from_numpy(feats[0][:2]))


def test_missing_region_file_is_an_input_error(tmp_path):
    path = tmp_path / "nope.h5"
    with pytest.raises(InputError) as err:
        RegionFeatures(path)
    assert str(err.value) == f"missing region feature file: {path}"


def test_truncated_region_file_is_an_input_error(tmp_path):
    path = tmp_path / "regions.h5"
    _write_sample(path, counts=(40, 30, 50, 20), dim=32)
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(size // 2)
    with pytest.raises(InputError) as err:
        RegionFeatures(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and "truncated or not HDF5" in msg


def test_not_hdf5_is_an_input_error(tmp_path):
    path = tmp_path / "regions.h5"
    path.write_text("image_id\tfeatures\n")
    with pytest.raises(InputError, match="truncated or not HDF5"):
        RegionFeatures(path)


def test_missing_dataset_and_bad_offsets_are_input_errors(tmp_path):
    path = tmp_path / "regions.h5"
    _write_sample(path)
    with h5py.File(path, "r+") as h5:
        del h5["image_size"]
    with pytest.raises(InputError, match="missing dataset 'image_size'"):
        RegionFeatures(path)
    _write_sample(path)
    with h5py.File(path, "r+") as h5:
        h5["box_offsets"][2] = 4
    with pytest.raises(InputError, match="box_offsets are inconsistent"):
        RegionFeatures(path)


def test_streaming_writer_matches_the_list_writer(tmp_path, monkeypatch):
    monkeypatch.setattr(regions_module, "FLUSH_BYTES", 200)  # several appends, not one block
    rng = np.random.default_rng(1)
    counts = [5, 0, 12, 1, 30, 7]
    ids = [40, 2, 17, 9, 100, 3]
    boxes = [rng.uniform(0, 90, (c, 4)).astype(np.float32) for c in counts]
    feats = [rng.normal(size=(c, 10)).astype(np.float32) for c in counts]
    sizes = [(64 + i, 48 + i) for i in range(len(ids))]
    with RegionFileWriter(tmp_path / "streamed.h5", feature_dim=10, source="test") as writer:
        for args in zip(ids, boxes, feats, sizes):
            writer.add(*args)
        assert len(writer) == 6 and 17 in writer and 18 not in writer
        assert not (tmp_path / "streamed.h5").exists()  # appears only when the block ends
    with RegionFeatures(tmp_path / "streamed.h5") as rf, h5py.File(tmp_path / "streamed.h5") as h5:
        assert rf.ids.tolist() == ids and rf.num_boxes.tolist() == counts and rf.source == "test"
        assert rf.offsets.tolist() == np.concatenate([[0], np.cumsum(counts)]).tolist()
        assert rf.image_sizes.tolist() == [list(s) for s in sizes]
        for i, image_id in enumerate(ids):
            f, b = rf.get(image_id)
            assert np.array_equal(f, feats[i]) and np.array_equal(b, boxes[i])
        assert h5["features"].chunks is not None and h5["features"].maxshape == (None, 10)
        assert dict(h5.attrs) == {"feature_dim": 10, "layout_version": 1, "source": "test"}


def test_streaming_writer_leaves_no_file_when_the_block_fails(tmp_path):
    path = tmp_path / "regions.h5"
    with pytest.raises(KeyboardInterrupt):
        with RegionFileWriter(path, feature_dim=3, source="test") as writer:
            writer.add(1, np.zeros((2, 4)), np.ones((2, 3)), (10, 10))
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
    _write_sample(path)
    before = path.read_bytes()
    with pytest.raises(RuntimeError, match="stop"):
        with RegionFileWriter(path, feature_dim=3, source="test") as writer:
            writer.add(1, np.zeros((2, 4)), np.ones((2, 3)), (10, 10))
            raise RuntimeError("stop")
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["regions.h5"]


def test_streaming_writer_rejects_duplicates_and_wrong_shapes(tmp_path):
    path = tmp_path / "regions.h5"
    with pytest.raises(ValueError, match="image 7 was already added"):
        with RegionFileWriter(path, feature_dim=3, source="test") as writer:
            writer.add(7, np.zeros((1, 4)), np.zeros((1, 3)), (5, 5))
            writer.add(7, np.zeros((1, 4)), np.zeros((1, 3)), (5, 5))
    with RegionFileWriter(path, feature_dim=3, source="test") as writer:
        with pytest.raises(ValueError, match=r"boxes have shape \(2, 5\)"):
            writer.add(1, np.zeros((2, 5)), np.zeros((2, 3)), (5, 5))
        with pytest.raises(ValueError, match=r"features have shape \(2, 4\), expected \(2, 3\)"):
            writer.add(1, np.zeros((2, 4)), np.zeros((2, 4)), (5, 5))
        with pytest.raises(ValueError, match=r"features have shape \(1, 3\), expected \(2, 3\)"):
            writer.add(1, np.zeros((2, 4)), np.zeros((1, 3)), (5, 5))
        with pytest.raises(ValueError, match="image_size must be"):
            writer.add(1, np.zeros((2, 4)), np.zeros((2, 3)), (5, 5, 3))
        writer.add(1, np.zeros((2, 4)), np.zeros((2, 3)), (5, 5))  # the rejected calls left nothing behind
    with RegionFeatures(path) as rf:
        assert rf.ids.tolist() == [1] and rf.num_boxes.tolist() == [2]
    with pytest.raises(ValueError, match="image 1 was already added"):
        write_region_file(path, [1, 1], [np.zeros((1, 4))] * 2, [np.zeros((1, 3))] * 2, [(5, 5)] * 2, "test")
    assert not list(tmp_path.glob(".*tmp"))


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
