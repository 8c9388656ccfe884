"""The region files' HDF5 layout (data/regions.py): a round trip, the writers (streaming and from lists), and each
malformed file as an input error that names it."""
from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

import crossmodal.data.regions as regions_module
from crossmodal.data.regions import RegionFeatures, RegionFileWriter, write_region_file
from crossmodal.io import InputError



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
