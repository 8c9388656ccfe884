"""The named inputs of a split, read from their feature sets: what a system's `inputs` param maps to tensors.

A feature set is an HDF5 file `data/features/<name>.h5` in the region layout (data/regions.py: per item a
variable number of rows of one width, with boxes); `regions` is the only one built so far, and grids, attribute
words or video modalities join as further sets. For a split (the item ids of one task split) each input is read
either all at once into padded tensors in memory (the small default) or per batch from disk by worker processes
(`runtime.lazy_features`, for COCO); both pad every batch to the split's widest item, so they give the same
batches, and neither changes what a stage computes.
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Iterable, Iterator, Mapping

import numpy as np
import torch
from torch.nn import functional as F

from .. import paths
from .inputs import Padded
from .region_loader import RegionBatchLoader
from .regions import RegionFeatures

Batch = tuple[np.ndarray, dict[str, Padded]]  # rows of the split, and each named input's padded batch


def feature_dims(root: Path, sets: Mapping[str, str]) -> dict[str, int]:
    """Row width of each named input's feature set ({input: set name} -> {input: width})."""
    dims = {}
    for name, feature_set in sets.items():
        with RegionFeatures(root / paths.features(feature_set)) as reader:
            dims[name] = reader.feature_dim
    return dims


def to_device(inputs: dict[str, Padded], device: torch.device) -> dict[str, Padded]:
    return {name: Padded(*(t.to(device, non_blocking=True) for t in padded)) for name, padded in inputs.items()}


class _Memory:
    """One input of a split as padded tensors in memory; a batch is a selection of rows."""

    def __init__(self, path: Path, ids: np.ndarray):
        with RegionFeatures(path) as reader:
            self.values, self.mask, _ = reader.load_padded(ids.tolist())

    def batches(self, row_lists: list[np.ndarray]) -> Iterator[Padded]:
        for rows in row_lists:
            yield Padded(self.values[rows], self.mask[rows])


class _Lazy:
    """One input of a split read per batch by `RegionBatchLoader` (worker processes prefetch ahead), padded to the
    split's width so batches equal those of `_Memory` exactly."""

    def __init__(self, path: Path, ids: np.ndarray, workers: int):
        with RegionFeatures(path) as reader:
            self.width = int(reader.num_boxes[[reader.index_of(i) for i in ids]].max(initial=0))
        self.loader = RegionBatchLoader(path, ids, workers=workers, max_boxes=None)

    def batches(self, row_lists: list[np.ndarray]) -> Iterator[Padded]:
        loaded = self.loader.batches([rows for rows in row_lists if len(rows)])
        with torch.random.fork_rng(devices=[]):  # a starting DataLoader draws a seed from the global random
            first = next(loaded, None)  # stream, which would shift dropout against the in-memory path
        loaded = itertools.chain([first] if first is not None else [], loaded)
        empty = torch.zeros(0, 0, self.loader.dataset.feature_dim), torch.zeros(0, 0, dtype=torch.bool)
        for rows in row_lists:  # an empty row list (a rank's share of a short last batch) reads nothing
            _, values, mask = next(loaded) if len(rows) else (rows, *empty)
            pad = self.width - values.size(1)
            yield Padded(F.pad(values, (0, 0, 0, pad)), F.pad(mask, (0, pad)))


class SplitInputs:
    """The named inputs of one split's items: `batches(row_lists)` yields (rows, {input: Padded}) per list of
    row numbers into `ids`, in order."""

    def __init__(self, root: Path, sets: Mapping[str, str], ids: np.ndarray, lazy: bool = False, workers: int = 0):
        self.ids = np.asarray(ids)
        self.readers = {name: _Lazy(root / paths.features(s), self.ids, workers) if lazy
                        else _Memory(root / paths.features(s), self.ids) for name, s in sets.items()}

    def batches(self, row_lists: Iterable[np.ndarray]) -> Iterator[Batch]:
        row_lists = list(row_lists)
        streams = {name: reader.batches(row_lists) for name, reader in self.readers.items()}
        for rows in row_lists:
            yield rows, {name: next(stream) for name, stream in streams.items()}
