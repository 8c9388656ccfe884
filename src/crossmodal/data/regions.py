"""Region features in HDF5: the one on-disk layout every region-feature consumer reads.

Synthetic features (from `crossmodal.features.regions.extract`) and real bottom-up-attention features
(converted from the Anderson et al. TSV files) are both written in this layout, so the readers, datasets
and models downstream never know which they got.

Layout (layout_version 1), one file per feature set, N images, T boxes in total, D feature channels:

    image_ids    int64   [N]       image id (= `cocoid` in dataset_coco.json, `image_id` in COCO files)
    num_boxes    int32   [N]       boxes of each image (varies: 10-100 adaptive for bottom-up attention)
    box_offsets  int64   [N + 1]   cumulative counts; image i owns rows box_offsets[i]:box_offsets[i+1]
    boxes        float32 [T, 4]    x1, y1, x2, y2 in pixels of the original image
    features     float32 [T, D]    one feature vector per box (fc7 / pool5 of the detector)
    image_size   int32   [N, 2]    width, height in pixels (to normalise boxes)

    attributes:  feature_dim (int D), layout_version (int, 1), source (str, e.g. "synthetic backbone",
                 "bottom-up-attention tsv")

Rows of all images are stored back to back in `features`/`boxes`, so reading one image is one slice and
reading everything is one sequential read. `RegionFileWriter` streams images in (real COCO features are
~120k images x 10-100 boxes x 2048 floats, tens of GB, far more than fits in memory), so `features` and
`boxes` are resizable and therefore chunked, with chunks of about `CHUNK_BYTES` (256 KiB: 32 rows of 2048
floats, so an image of 10-100 boxes touches 1-5 chunks). Measured on 600 MB of 2048-d features, random
per-image reads from chunks of 32-256 KiB ran within about 15% of a contiguous dataset, cold and warm;
1-4 MiB chunks were 1.5-2.5x slower. No compression: the files are read far more often than written and
compression costs more time than it saves. Files written before the writer existed (contiguous datasets)
have the same layout and read the same way.
"""
from __future__ import annotations

import contextlib
import operator
import os
import sys
from pathlib import Path
from typing import Iterable, Sequence

import h5py
import numpy as np
import torch

from ..io import InputError, atomic_path
from .hdf5 import ReadOnlyHDF5, one_line

LAYOUT_VERSION = 1
CHUNK_BYTES = 256 * 1024  # target chunk size of `features` and `boxes` (see the module docstring)
FLUSH_BYTES = 32 * 1024 * 1024  # rows the writer buffers before appending them to the file
_DATASETS = {  # name -> (dtype kind, ndim)
    "image_ids": ("i", 1),
    "num_boxes": ("i", 1),
    "box_offsets": ("i", 1),
    "boxes": ("f", 2),
    "features": ("f", 2),
    "image_size": ("i", 2),
}


class RegionFileWriter:
    """Stream images into one region-feature file; the file appears (atomically) only on a clean exit.

        with RegionFileWriter(path, feature_dim=2048, source="bottom-up-attention tsv") as writer:
            for image_id, boxes, features, (width, height) in rows:
                writer.add(image_id, boxes, features, (width, height))

    Rows are buffered up to `FLUSH_BYTES` and appended to resizable chunked datasets, so memory stays
    bounded whatever the file size. The small index arrays are written when the block ends; an exception
    inside the block leaves no target file. Duplicate ids and inconsistent shapes are programming errors
    (ValueError); readers of untrusted input check them first to name the offending line.
    """

    def __init__(self, path: str | os.PathLike, feature_dim: int, source: str):
        if int(feature_dim) < 1:
            raise ValueError(f"feature_dim must be positive, got {feature_dim}")
        self.path = Path(path)
        self.feature_dim = int(feature_dim)
        self.source = str(source)
        self._ids: list[int] = []
        self._seen: set[int] = set()
        self._counts: list[int] = []
        self._sizes: list[tuple[int, int]] = []
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending_bytes = 0
        self._stack: contextlib.ExitStack | None = None
        self._h5: h5py.File | None = None

    def __enter__(self) -> "RegionFileWriter":
        if self._stack is not None:
            raise RuntimeError("a RegionFileWriter can be entered only once")
        self._stack = contextlib.ExitStack()
        try:
            tmp = self._stack.enter_context(atomic_path(self.path, suffix=".h5"))
            self._h5 = self._stack.enter_context(h5py.File(tmp, "w"))
            for name, width in (("boxes", 4), ("features", self.feature_dim)):
                rows = max(1, CHUNK_BYTES // (4 * width))
                self._h5.create_dataset(name, shape=(0, width), maxshape=(None, width), chunks=(rows, width),
                                        dtype=np.float32, track_times=False)
        except BaseException:
            if not self._stack.__exit__(*sys.exc_info()):
                raise
        return self

    def __contains__(self, image_id: int) -> bool:
        return int(image_id) in self._seen

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, image_id: int, boxes: np.ndarray, features: np.ndarray, image_size: Sequence[int]) -> None:
        """Append one image: boxes [n, 4] (x1, y1, x2, y2 pixels), features [n, D], image_size (width, height)."""
        if self._h5 is None:
            raise RuntimeError("RegionFileWriter.add called outside its with-block")
        image_id = operator.index(image_id)
        if image_id in self._seen:
            raise ValueError(f"image {image_id} was already added")
        boxes = np.asarray(boxes, dtype=np.float32)
        features = np.asarray(features, dtype=np.float32)
        if boxes.size == 0 and features.size == 0:  # an image without boxes may come as empty lists
            boxes, features = boxes.reshape(0, 4), features.reshape(0, self.feature_dim)
        if boxes.ndim != 2 or boxes.shape[1] != 4:
            raise ValueError(f"image {image_id}: boxes have shape {boxes.shape}, expected (n, 4)")
        if features.shape != (len(boxes), self.feature_dim):
            raise ValueError(f"image {image_id}: features have shape {features.shape}, expected ({len(boxes)}, {self.feature_dim})")
        size = np.asarray(image_size).reshape(-1)
        if size.shape != (2,):
            raise ValueError(f"image {image_id}: image_size must be (width, height), got {image_size!r}")
        self._seen.add(image_id)
        self._ids.append(image_id)
        self._counts.append(len(boxes))
        self._sizes.append((int(size[0]), int(size[1])))
        self._pending.append((boxes, features))
        self._pending_bytes += boxes.nbytes + features.nbytes
        if self._pending_bytes >= FLUSH_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        for name, part in (("boxes", 0), ("features", 1)):
            block = np.concatenate([p[part] for p in self._pending])
            ds = self._h5[name]
            start = ds.shape[0]
            ds.resize(start + len(block), axis=0)
            ds[start:] = block
        self._pending, self._pending_bytes = [], 0

    def _finish(self) -> None:
        if not self._ids:
            raise ValueError(f"no images were added to {self.path}")
        self._flush()
        counts = np.array(self._counts, dtype=np.int32)
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        h5 = self._h5
        h5.create_dataset("image_ids", data=np.array(self._ids, dtype=np.int64), track_times=False)
        h5.create_dataset("num_boxes", data=counts, track_times=False)
        h5.create_dataset("box_offsets", data=offsets, track_times=False)
        h5.create_dataset("image_size", data=np.array(self._sizes, dtype=np.int32).reshape(-1, 2), track_times=False)
        h5.attrs["feature_dim"] = self.feature_dim
        h5.attrs["layout_version"] = LAYOUT_VERSION
        h5.attrs["source"] = self.source

    def __exit__(self, exc_type, exc, tb) -> bool:
        stack, self._stack = self._stack, None
        try:
            if exc_type is None:
                try:
                    self._finish()
                except BaseException:
                    if not stack.__exit__(*sys.exc_info()):
                        raise
                    return False
            return bool(stack.__exit__(exc_type, exc, tb))
        finally:
            self._h5, self._pending = None, []


def write_region_file(
    path: str | os.PathLike,
    image_ids: Sequence[int] | np.ndarray,
    boxes_list: Sequence[np.ndarray],
    features_list: Sequence[np.ndarray],
    image_sizes: Sequence[Sequence[int]] | np.ndarray,
    source: str,
) -> None:
    """Write one region-feature file from in-memory lists (through `RegionFileWriter`).

    `boxes_list[i]` is [n_i, 4] and `features_list[i]` is [n_i, D] for image `image_ids[i]`;
    `image_sizes[i]` is (width, height). Inconsistent arguments are programming errors (ValueError).
    """
    ids = np.asarray(image_ids, dtype=np.int64).reshape(-1)
    n = len(ids)
    if len(boxes_list) != n or len(features_list) != n or len(image_sizes) != n:
        raise ValueError(f"{n} image ids but {len(boxes_list)} box arrays, {len(features_list)} feature arrays "
                         f"and {len(image_sizes)} image sizes")
    dims = {np.asarray(f).shape[1] for f in features_list if np.asarray(f).ndim == 2}
    if len(dims) != 1:
        raise ValueError(f"features must all be 2-d with one feature dimension, got {sorted(dims)}")
    with RegionFileWriter(path, dims.pop(), source) as writer:
        for image_id, boxes, features, size in zip(ids, boxes_list, features_list, image_sizes):
            writer.add(image_id, boxes, features, size)


class RegionFeatures(ReadOnlyHDF5):
    """Read-only view of one region-feature file; validates the layout when opened.

    The small index arrays (ids, counts, offsets, sizes) are read at once; features and boxes stay on disk
    and are read per request. `load_all()` pulls everything into padded tensors, which suits the small
    synthetic default; the loaders for real data (COCO: ~120k images x up to 100 boxes x 2048) read lazily
    per item through `get` / `load_padded`. Picklable (the HDF5 handle is reopened in the receiving
    process), so it can live inside a torch Dataset used by DataLoader workers.
    """

    description = "region feature file"

    def _read(self, name: str, sel=slice(None)) -> np.ndarray:
        try:
            return self._h5()[name][sel]
        except OSError as err:
            raise InputError(f"region feature file {self.path}: cannot read '{name}', truncated? ({one_line(err)})") from None

    def _validate(self, h5: h5py.File) -> None:
        where = f"region feature file {self.path}"
        for name, (kind, ndim) in _DATASETS.items():
            if name not in h5 or not isinstance(h5[name], h5py.Dataset):
                raise InputError(f"{where}: missing dataset '{name}'")
            ds = h5[name]
            if ds.dtype.kind not in (kind, "u" if kind == "i" else kind) or ds.ndim != ndim:
                raise InputError(f"{where}: dataset '{name}' has dtype {ds.dtype} and {ds.ndim} dims, expected {ndim}-d {'integer' if kind == 'i' else 'float'}")
        for attr in ("feature_dim", "layout_version", "source"):
            if attr not in h5.attrs:
                raise InputError(f"{where}: missing attribute '{attr}'")
        if int(h5.attrs["layout_version"]) != LAYOUT_VERSION:
            raise InputError(f"{where}: layout_version {h5.attrs['layout_version']} is not supported (expected {LAYOUT_VERSION})")
        self.feature_dim = int(h5.attrs["feature_dim"])
        source = h5.attrs["source"]
        self.source = source.decode() if isinstance(source, bytes) else str(source)
        self._ids = self._read("image_ids").astype(np.int64)
        self.num_boxes = self._read("num_boxes").astype(np.int64)
        self.offsets = self._read("box_offsets").astype(np.int64)
        self.image_sizes = self._read("image_size").astype(np.int64)
        n = len(self._ids)
        total = h5["features"].shape[0]
        if len(self.num_boxes) != n or self.image_sizes.shape != (n, 2):
            raise InputError(f"{where}: num_boxes/image_size do not match the {n} image ids")
        if len(self.offsets) != n + 1 or self.offsets[0] != 0 or np.any(np.diff(self.offsets) != self.num_boxes) or self.offsets[-1] != total:
            raise InputError(f"{where}: box_offsets are inconsistent with num_boxes or with the {total} feature rows")
        if h5["boxes"].shape != (total, 4):
            raise InputError(f"{where}: boxes have shape {h5['boxes'].shape}, expected ({total}, 4)")
        if h5["features"].shape[1] != self.feature_dim:
            raise InputError(f"{where}: features have {h5['features'].shape[1]} columns but feature_dim is {self.feature_dim}")
        self._index = {int(i): k for k, i in enumerate(self._ids)}
        if len(self._index) != n:
            raise InputError(f"{where}: duplicate image ids")

    # -- access -----------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def ids(self) -> np.ndarray:
        return self._ids.copy()

    def index_of(self, image_id: int) -> int:
        try:
            return self._index[int(image_id)]
        except KeyError:
            raise InputError(f"region feature file {self.path} has no features for image {image_id}") from None

    def get(self, image_id: int) -> tuple[np.ndarray, np.ndarray]:
        """Features [n, D] and boxes [n, 4] (float32) of one image."""
        k = self.index_of(image_id)
        rows = slice(int(self.offsets[k]), int(self.offsets[k + 1]))
        return self._read("features", rows).astype(np.float32, copy=False), self._read("boxes", rows).astype(np.float32, copy=False)

    def load_padded(
        self, image_ids: Iterable[int], max_boxes: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Batch of images as (features [B, Nmax, D], mask [B, Nmax] True on real rows, boxes [B, Nmax, 4]).

        Nmax is the largest box count in the batch, capped at `max_boxes` (an image with more boxes keeps
        its first `max_boxes`). Padded rows are zero. A run of consecutive images is read as one block.
        """
        idx = np.array([self.index_of(i) for i in image_ids], dtype=np.int64)
        counts = self.num_boxes[idx]
        if len(idx) and np.all(np.diff(idx) == 1):
            lo, hi = int(self.offsets[idx[0]]), int(self.offsets[idx[-1] + 1])
            feats = self._read("features", slice(lo, hi))
            boxes = self._read("boxes", slice(lo, hi))
        else:
            spans = [slice(int(self.offsets[k]), int(self.offsets[k + 1])) for k in idx]
            feats = np.concatenate([self._read("features", s) for s in spans]) if spans else np.zeros((0, self.feature_dim), np.float32)
            boxes = np.concatenate([self._read("boxes", s) for s in spans]) if spans else np.zeros((0, 4), np.float32)
        # row r of the concatenation belongs to image `owner[r]` at position `pos[r]` within it
        owner = np.repeat(np.arange(len(idx)), counts)
        starts = np.cumsum(counts) - counts
        pos = np.arange(len(owner)) - np.repeat(starts, counts)
        width = int(counts.max()) if len(idx) else 0
        if max_boxes is not None:
            width = min(width, int(max_boxes))
            keep = pos < width
            owner, pos, feats, boxes = owner[keep], pos[keep], feats[keep], boxes[keep]
        out_f = torch.zeros(len(idx), width, self.feature_dim, dtype=torch.float32)
        out_b = torch.zeros(len(idx), width, 4, dtype=torch.float32)
        mask = torch.zeros(len(idx), width, dtype=torch.bool)
        o, p = torch.from_numpy(owner), torch.from_numpy(pos)
        out_f[o, p] = torch.from_numpy(np.ascontiguousarray(feats, dtype=np.float32))
        out_b[o, p] = torch.from_numpy(np.ascontiguousarray(boxes, dtype=np.float32))
        mask[o, p] = True
        return out_f, mask, out_b

    def load_all(self, max_boxes: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every image, in file order (`ids`), as padded tensors; one contiguous read."""
        return self.load_padded(self._ids, max_boxes)

    def __repr__(self) -> str:
        return f"RegionFeatures({str(self.path)!r}, images={len(self)}, boxes={int(self.offsets[-1])}, dim={self.feature_dim})"
