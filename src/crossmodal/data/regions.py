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

Rows of all images are stored back to back in `features`/`boxes`, so reading everything is one contiguous
read and reading one image is one slice. Files are written uncompressed and unchunked: they are read far
more often than written and compression costs more time than it saves at these sizes.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Sequence

import h5py
import numpy as np
import torch

from ..io import InputError, atomic_path

LAYOUT_VERSION = 1
_DATASETS = {  # name -> (dtype kind, ndim)
    "image_ids": ("i", 1),
    "num_boxes": ("i", 1),
    "box_offsets": ("i", 1),
    "boxes": ("f", 2),
    "features": ("f", 2),
    "image_size": ("i", 2),
}


def write_region_file(
    path: str | os.PathLike,
    image_ids: Sequence[int] | np.ndarray,
    boxes_list: Sequence[np.ndarray],
    features_list: Sequence[np.ndarray],
    image_sizes: Sequence[Sequence[int]] | np.ndarray,
    source: str,
) -> None:
    """Write one region-feature file in the layout above (atomically: temp file + rename).

    `boxes_list[i]` is [n_i, 4] and `features_list[i]` is [n_i, D] for image `image_ids[i]`;
    `image_sizes[i]` is (width, height). Inconsistent arguments are programming errors (ValueError).
    """
    ids = np.asarray(image_ids, dtype=np.int64).reshape(-1)
    n = len(ids)
    if len(boxes_list) != n or len(features_list) != n:
        raise ValueError(f"{n} image ids but {len(boxes_list)} box arrays and {len(features_list)} feature arrays")
    if len(np.unique(ids)) != n:
        raise ValueError("image ids must be unique")
    sizes = np.asarray(image_sizes, dtype=np.int32).reshape(n, 2)
    counts = np.array([len(b) for b in boxes_list], dtype=np.int32)
    if any(len(f) != c for f, c in zip(features_list, counts)):
        raise ValueError("each image needs as many feature rows as boxes")
    dims = {np.asarray(f).shape[1] for f in features_list if np.asarray(f).ndim == 2}
    if len(dims) != 1:
        raise ValueError(f"features must all be 2-d with one feature dimension, got {sorted(dims)}")
    dim = dims.pop()
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    boxes = np.concatenate([np.asarray(b, dtype=np.float32).reshape(-1, 4) for b in boxes_list]) if n else np.zeros((0, 4), np.float32)
    feats = np.concatenate([np.asarray(f, dtype=np.float32) for f in features_list]) if n else np.zeros((0, dim), np.float32)
    with atomic_path(path, suffix=".h5") as tmp:
        with h5py.File(tmp, "w") as h5:
            h5.create_dataset("image_ids", data=ids)
            h5.create_dataset("num_boxes", data=counts)
            h5.create_dataset("box_offsets", data=offsets)
            h5.create_dataset("boxes", data=boxes)
            h5.create_dataset("features", data=feats)
            h5.create_dataset("image_size", data=sizes)
            h5.attrs["feature_dim"] = int(dim)
            h5.attrs["layout_version"] = LAYOUT_VERSION
            h5.attrs["source"] = str(source)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text[:200]


class RegionFeatures:
    """Read-only view of one region-feature file; validates the layout when opened.

    The small index arrays (ids, counts, offsets, sizes) are read at once; features and boxes stay on disk
    and are read per request. `load_all()` pulls everything into padded tensors, which suits the small
    synthetic default; the loaders for real data (COCO: ~120k images x up to 100 boxes x 2048) read lazily
    per item through `get` / `load_padded`. Picklable (the HDF5 handle is reopened in the receiving
    process), so it can live inside a torch Dataset used by DataLoader workers.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise InputError(f"missing region feature file: {self.path}")
        self._file: h5py.File | None = None
        h5 = self._h5()
        try:
            self._validate(h5)
        except BaseException:
            self.close()
            raise

    # -- opening and validation -------------------------------------------------------------------

    def _h5(self) -> h5py.File:
        if self._file is None:
            try:
                self._file = h5py.File(self.path, "r")
            except OSError as err:
                raise InputError(
                    f"region feature file {self.path} is truncated or not HDF5 ({_one_line(err)})"
                ) from None
        return self._file

    def _read(self, name: str, sel=slice(None)) -> np.ndarray:
        try:
            return self._h5()[name][sel]
        except OSError as err:
            raise InputError(f"region feature file {self.path}: cannot read '{name}', truncated? ({_one_line(err)})") from None

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

    # -- lifetime ---------------------------------------------------------------------------------

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "RegionFeatures":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_file"] = None
        return state

    def __repr__(self) -> str:
        return f"RegionFeatures({str(self.path)!r}, images={len(self)}, boxes={int(self.offsets[-1])}, dim={self.feature_dim})"
