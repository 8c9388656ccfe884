"""Lazy per-item reading of region features with DataLoader worker processes, for data too big for memory.

The small synthetic default loads its whole region file into padded tensors (`RegionFeatures.load_all`).
At COCO scale (~120k images x 10-100 boxes x 2048 floats, tens of GB) that is impossible, so training
reads each batch's images from disk: `RegionDataset` reads one image per item through
`RegionFeatures.get` (one slice of its rows, never a whole dataset), `collate_regions` pads a batch
exactly as `RegionFeatures.load_padded` does, and `RegionBatchLoader.batches` runs those reads in worker
processes that prefetch ahead of the trainer, for batches whose composition and order the trainer chooses.

Each process reads through its own HDF5 handle: a dataset that finds itself in a process other than the
one that opened its file (a forked or spawned DataLoader worker) takes a handle-less copy of its
`RegionFeatures` (the pickling state), which opens the file on first use. HDF5 handles are never shared
across processes.
"""
from __future__ import annotations

import copy
import math
import os
from typing import Iterable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from .regions import RegionFeatures

RegionItem = tuple  # (image_id, features [n, D]) or (image_id, features [n, D], boxes [n, 4])


class RegionDataset(Dataset):
    """Item k = (image_ids[k], features [n, D] float32[, boxes [n, 4] float32]), n capped at `max_boxes`.

    The file is opened and validated here (missing ids are InputErrors now, not in a worker later); the
    features stay on disk and each item reads only its own rows.
    """

    def __init__(self, path: str | os.PathLike, image_ids: Sequence[int] | np.ndarray,
                 max_boxes: int | None = None, boxes: bool = False):
        self.regions = RegionFeatures(path)
        self.image_ids = np.asarray(image_ids, dtype=np.int64).reshape(-1)
        for image_id in self.image_ids:
            self.regions.index_of(image_id)
        if max_boxes is not None and int(max_boxes) < 1:
            raise ValueError(f"max_boxes must be positive, got {max_boxes}")
        self.max_boxes = None if max_boxes is None else int(max_boxes)
        self.boxes = boxes
        self._pid = os.getpid()

    @property
    def feature_dim(self) -> int:
        return self.regions.feature_dim

    def __len__(self) -> int:
        return len(self.image_ids)

    def _regions_here(self) -> RegionFeatures:
        if self._pid != os.getpid():  # a worker: never use the parent's HDF5 handle
            self.regions = copy.copy(self.regions)
            self._pid = os.getpid()
        return self.regions

    def __getitem__(self, k: int) -> RegionItem:
        image_id = int(self.image_ids[k])
        feats, boxes = self._regions_here().get(image_id)
        keep = slice(None, self.max_boxes)
        item = (image_id, torch.from_numpy(np.ascontiguousarray(feats[keep])))
        return item + (torch.from_numpy(np.ascontiguousarray(boxes[keep])),) if self.boxes else item

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_pid"] = None  # the receiving process takes its own handle
        return state


def _zeros(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Zeros; in a DataLoader worker, allocated in shared memory at once (as torch's `default_collate` does),
    which saves copying every batch (40 MB at 50 x 100 x 2048) into shared memory to send it: measured
    1.3x the images/s with two workers."""
    if get_worker_info() is None:
        return torch.zeros(shape, dtype=dtype)
    numel = math.prod(shape)
    storage = torch.UntypedStorage._new_shared(numel * dtype.itemsize)
    return torch.empty(0, dtype=dtype).set_(storage).view(shape).zero_()


def collate_regions(items: Sequence[RegionItem]) -> tuple[torch.Tensor, ...]:
    """(image_ids [B] long, features [B, Nmax, D], mask [B, Nmax] bool[, boxes [B, Nmax, 4]]), zero-padded.

    Nmax is the largest box count in the batch (items are already capped at `max_boxes`), as in
    `RegionFeatures.load_padded`.
    """
    if not items:
        raise ValueError("cannot collate an empty batch")
    ids = torch.tensor([item[0] for item in items], dtype=torch.long)
    counts = [len(item[1]) for item in items]
    width, dim = max(counts), items[0][1].shape[1]
    feats = _zeros((len(items), width, dim), torch.float32)
    mask = _zeros((len(items), width), torch.bool)
    with_boxes = len(items[0]) == 3
    boxes = _zeros((len(items), width, 4), torch.float32) if with_boxes else None
    for i, (item, n) in enumerate(zip(items, counts)):
        feats[i, :n] = item[1]
        mask[i, :n] = True
        if with_boxes:
            boxes[i, :n] = item[2]
    return (ids, feats, mask, boxes) if with_boxes else (ids, feats, mask)


class RegionBatchLoader:
    """Reads batches of region features chosen by the caller, with `workers` processes prefetching ahead.

    `batches(row_lists)` yields, for each array of row numbers into `image_ids` and in the same order,
    (rows, features [B, Nmax, D], mask [B, Nmax]) — plus boxes [B, Nmax, 4] when `boxes=True` — equal to
    `RegionFeatures.load_padded(image_ids[rows], max_boxes)`. With `workers=0` the reads happen in the
    calling process. Call `batches` once per epoch (a fresh set of workers each time).
    """

    def __init__(self, path: str | os.PathLike, image_ids: Sequence[int] | np.ndarray, workers: int = 0,
                 max_boxes: int | None = None, prefetch_factor: int = 2, pin_memory: bool = False,
                 boxes: bool = False):
        if workers < 0 or prefetch_factor < 1:
            raise ValueError(f"need workers >= 0 and prefetch_factor >= 1, got {workers} and {prefetch_factor}")
        self.dataset = RegionDataset(path, image_ids, max_boxes, boxes)
        self.workers = int(workers)
        self.prefetch_factor = int(prefetch_factor)
        self.pin_memory = pin_memory

    def __len__(self) -> int:
        return len(self.dataset)

    def batches(self, row_lists: Iterable[np.ndarray | Sequence[int]]) -> Iterator[tuple]:
        rows_per_batch = [np.asarray(rows, dtype=np.int64).reshape(-1) for rows in row_lists]
        for rows in rows_per_batch:
            if len(rows) == 0:
                raise ValueError("every batch needs at least one row")
            if rows.min() < 0 or rows.max() >= len(self.dataset):
                raise ValueError(f"row numbers must lie in [0, {len(self.dataset)}), got {rows.min()}..{rows.max()}")
        loader = DataLoader(
            self.dataset,
            batch_sampler=[rows.tolist() for rows in rows_per_batch],
            num_workers=self.workers,
            collate_fn=collate_regions,
            pin_memory=self.pin_memory,
            prefetch_factor=self.prefetch_factor if self.workers else None,
        )
        for rows, (_, *tensors) in zip(rows_per_batch, loader):
            yield (rows, *tensors)
