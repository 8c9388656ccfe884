"""Lazy per-item region loading: batches equal `load_padded`, in order, from worker processes, reading only their rows."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from crossmodal.data.region_loader import RegionBatchLoader, RegionDataset, collate_regions
from crossmodal.data.regions import RegionFeatures, write_region_file
from crossmodal.io import InputError

COUNTS = [3, 7, 0, 12, 1, 5, 9, 2, 4, 11, 6, 8, 10, 1, 3, 7, 2, 5, 12, 4]


@pytest.fixture(scope="module")
def region_file(tmp_path_factory):
    rng = np.random.default_rng(7)
    path = tmp_path_factory.mktemp("regions") / "regions.h5"
    ids = rng.permutation(1000)[: len(COUNTS)] + 1
    boxes = [rng.uniform(0, 100, (c, 4)).astype(np.float32) for c in COUNTS]
    feats = [rng.normal(size=(c, 6)).astype(np.float32) for c in COUNTS]
    write_region_file(path, ids, boxes, feats, [(100, 80)] * len(ids), source="test")
    return path, ids


def _epoch(n: int, batch: int, seed: int) -> list[np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    return [order[i:i + batch] for i in range(0, n, batch)]


def _assert_batches_equal_load_padded(loader, path, image_ids, row_lists, max_boxes=None, boxes=False):
    got = list(loader.batches(row_lists))
    assert len(got) == len(row_lists)
    with RegionFeatures(path) as rf:
        for batch, rows in zip(got, row_lists):
            assert np.array_equal(batch[0], rows)  # order preserved, rows handed back
            feats, mask, pboxes = rf.load_padded(image_ids[rows], max_boxes)
            assert batch[1].dtype == torch.float32 and batch[2].dtype == torch.bool
            assert torch.equal(batch[1], feats) and torch.equal(batch[2], mask)
            assert len(batch) == (4 if boxes else 3)
            if boxes:
                assert torch.equal(batch[3], pboxes)


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_equal_load_padded_in_order(region_file, workers):
    path, ids = region_file
    image_ids = ids[::-1].copy()  # an order other than the file's
    loader = RegionBatchLoader(path, image_ids, workers=workers)
    for seed in (0, 1):  # two epochs through one loader
        _assert_batches_equal_load_padded(loader, path, image_ids, _epoch(len(image_ids), 6, seed))


@pytest.mark.parametrize("workers", [0, 2])
def test_max_boxes_cap_and_boxes(region_file, workers):
    path, ids = region_file
    loader = RegionBatchLoader(path, ids, workers=workers, max_boxes=4, boxes=True)
    _assert_batches_equal_load_padded(loader, path, ids, _epoch(len(ids), 7, 3), max_boxes=4, boxes=True)


@pytest.mark.parametrize("workers", [0, 2])
def test_batch_of_images_without_boxes(region_file, workers):
    path, ids = region_file
    loader = RegionBatchLoader(path, ids, workers=workers)
    (rows, feats, mask), = loader.batches([np.array([2, 2])])  # image 2 has no boxes; rows may repeat
    assert feats.shape == (2, 0, 6) and mask.shape == (2, 0)


def test_items_read_only_their_own_rows(region_file, monkeypatch):
    path, ids = region_file
    dataset = RegionDataset(path, ids, max_boxes=5, boxes=True)
    with RegionFeatures(path) as rf:
        own_rows = {int(i): (int(rf.offsets[k]), int(rf.offsets[k + 1])) for k, i in enumerate(rf.ids)}
    reads = []
    real_read = RegionFeatures._read

    def spy(self, name, sel=slice(None)):
        reads.append((name, (sel.start, sel.stop)))  # slices are unhashable before Python 3.12
        return real_read(self, name, sel)

    def forbidden(*args, **kwargs):
        raise AssertionError("the lazy dataset must not load whole batches or files")

    monkeypatch.setattr(RegionFeatures, "_read", spy)
    monkeypatch.setattr(RegionFeatures, "load_all", forbidden)
    monkeypatch.setattr(RegionFeatures, "load_padded", forbidden)
    loader = RegionBatchLoader(path, ids, max_boxes=5, boxes=True)
    reads.clear()
    for k in (3, 0, 9):
        image_id, feats, boxes = dataset[k]
        assert image_id == ids[k] and len(feats) == min(COUNTS[k], 5) and len(boxes) == len(feats)
        assert sorted(reads) == [("boxes", own_rows[image_id]), ("features", own_rows[image_id])]
        reads.clear()
    list(loader.batches(_epoch(len(ids), 5, 2)))
    assert len(reads) == 2 * len(ids)
    assert {sel for _, sel in reads} == set(own_rows.values())


def test_dataset_pickles_without_its_handle(region_file):
    path, ids = region_file
    dataset = RegionDataset(path, ids)
    dataset[0]  # opens the HDF5 handle in this process
    clone = pickle.loads(pickle.dumps(dataset))
    assert clone.regions._file is None and len(clone) == len(ids) and clone.feature_dim == 6
    for k in (0, 5, 19):
        a, b = dataset[k], clone[k]
        assert a[0] == b[0] and torch.equal(a[1], b[1])
    assert clone.regions is not dataset.regions


def test_collate_pads_like_load_padded(region_file):
    path, ids = region_file
    dataset = RegionDataset(path, ids)
    rows = [3, 2, 0]
    image_ids, feats, mask = collate_regions([dataset[k] for k in rows])
    with RegionFeatures(path) as rf:
        want_f, want_m, _ = rf.load_padded(ids[rows])
    assert image_ids.dtype == torch.long and image_ids.tolist() == ids[rows].tolist()
    assert torch.equal(feats, want_f) and torch.equal(mask, want_m)
    with pytest.raises(ValueError, match="empty batch"):
        collate_regions([])


def test_bad_arguments(region_file):
    path, ids = region_file
    with pytest.raises(InputError, match="no features for image 100000"):
        RegionBatchLoader(path, [int(ids[0]), 100000])
    loader = RegionBatchLoader(path, ids)
    with pytest.raises(ValueError, match=r"row numbers must lie in \[0, 20\)"):
        list(loader.batches([np.array([0, 20])]))
    with pytest.raises(ValueError, match="at least one row"):
        list(loader.batches([np.array([], dtype=np.int64)]))
    with pytest.raises(ValueError, match="max_boxes must be positive"):
        RegionDataset(path, ids, max_boxes=0)
