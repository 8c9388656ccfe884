"""Bottom-up-attention feature TSV files: streaming reader, writer, and conversion to the region HDF5 layout.

The published COCO region features of Anderson et al. (peteanderson80/bottom-up-attention, written by
`tools/generate_tsv.py`) are tab-separated text: no header, `\\r\\n` line ends, one image per line with the
fields `image_id, image_w, image_h, num_boxes, boxes, features`, where `boxes` and `features` are base64 of
little-endian float32 arrays [num_boxes, 4] (x1, y1, x2, y2 in pixels) and [num_boxes, D] (D = 2048).
Two sets were published:

- adaptive, 10-100 boxes per image (`trainval.zip`, about 22 GB): `ADAPTIVE_TRAINVAL_FILES` under
  `trainval/`, the Karpathy train split cut into `.0` / `.1` parts;
- fixed, 36 boxes per image (`trainval_36.zip`): `FIXED_TRAINVAL_FILES` under `trainval_36/`.

(The box ranges per set live in `config.features.PUBLISHED_REGIONS`; `convert_butd_tsv` takes one as `expected_boxes`.)

Lines are hundreds of KB and files many GB, so everything streams line by line (bytes, split on tabs: no
`csv` module and its field-size limit) and `convert_butd_tsv` appends into one region file through
`RegionFileWriter` with bounded memory. `write_butd_tsv` is the exact inverse of the reader (byte for byte
on the published layout), so synthetic features can be exported to the real format and converted back by
the same code path as the real ones. Blank lines are skipped, as the `csv` readers used by the official
tools skip them; `\\n` line ends are accepted as well.
"""
from __future__ import annotations

import base64
import binascii
import itertools
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection, Iterable, Iterator, Sequence

import numpy as np
from tqdm import tqdm

from ..io import InputError, atomic_path
from .regions import RegionFileWriter

SOURCE = "bottom-up-attention tsv"
FIELDS = ("image_id", "image_w", "image_h", "num_boxes", "boxes", "features")
ADAPTIVE_TRAINVAL_FILES = (
    "karpathy_train_resnet101_faster_rcnn_genome.tsv.0",
    "karpathy_train_resnet101_faster_rcnn_genome.tsv.1",
    "karpathy_val_resnet101_faster_rcnn_genome.tsv",
    "karpathy_test_resnet101_faster_rcnn_genome.tsv",
)
FIXED_TRAINVAL_FILES = ("trainval_resnet101_faster_rcnn_genome_36.tsv",)
_FLOAT = np.dtype("<f4")
_TSV_NAME = re.compile(r"(?P<stem>.+)\.tsv(?:\.(?P<part>\d+))?")


@dataclass(frozen=True, eq=False)
class ButdRow:
    """One image of a TSV file; `line` is its 1-based line number there (0 for rows built in memory).

    Arrays decoded from a file are read-only views of the decoded bytes.
    """

    image_id: int
    image_w: int
    image_h: int
    boxes: np.ndarray
    features: np.ndarray
    line: int = 0

    @property
    def num_boxes(self) -> int:
        return len(self.boxes)


def _decode(field: bytes, name: str, where: str) -> np.ndarray:
    try:
        raw = base64.b64decode(field, validate=True)
    except (binascii.Error, ValueError) as err:
        raise InputError(f"{where}: field '{name}' is not valid base64 ({err})") from None
    if len(raw) % _FLOAT.itemsize:
        raise InputError(f"{where}: field '{name}' holds {len(raw)} bytes, not a whole number of float32 values")
    return np.frombuffer(raw, dtype=_FLOAT).astype(np.float32, copy=False)


def _integer(field: bytes, name: str, where: str) -> int:
    try:
        return int(field)
    except ValueError:
        raise InputError(f"{where}: field '{name}' is not an integer: {field[:40]!r}") from None


def _parse(fields: list[bytes], where: str, line_no: int) -> ButdRow:
    image_id, width, height, count = (_integer(f, n, where) for f, n in zip(fields[:4], FIELDS))
    if count < 1:
        raise InputError(f"{where}: image {image_id} has num_boxes {count}, expected at least 1")
    boxes = _decode(fields[4], "boxes", where)
    if boxes.size != count * 4:
        raise InputError(f"{where}: image {image_id} has {boxes.size} box values, expected num_boxes x 4 = {count * 4}")
    features = _decode(fields[5], "features", where)
    if features.size == 0 or features.size % count:
        raise InputError(f"{where}: image {image_id} has {features.size} feature values, not divisible into {count} boxes")
    return ButdRow(image_id, width, height, boxes.reshape(count, 4), features.reshape(count, -1), line_no)


def iter_butd_tsv(
    path: str | os.PathLike,
    *,
    image_ids: Collection[int] | None = None,
    on_bytes: Callable[[int], object] | None = None,
) -> Iterator[ButdRow]:
    """Rows of one TSV file, streamed line by line; a malformed row is an InputError naming file and line.

    With `image_ids`, rows of other images are skipped without decoding. `on_bytes(n)` is called with the
    size of every line read (for progress bars).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"missing bottom-up-attention TSV file: {path}")
    with open(path, "rb") as handle:
        for line_no, line in enumerate(handle, start=1):
            if on_bytes is not None:
                on_bytes(len(line))
            line = line.rstrip(b"\r\n")
            if not line:
                continue
            where = f"{path} line {line_no}"
            fields = line.split(b"\t")
            if len(fields) != len(FIELDS):
                raise InputError(f"{where}: {len(fields)} tab-separated fields, expected {len(FIELDS)} ({', '.join(FIELDS)})")
            if image_ids is not None and _integer(fields[0], "image_id", where) not in image_ids:
                continue
            yield _parse(fields, where, line_no)


def write_butd_tsv(path: str | os.PathLike, rows: Iterable[ButdRow]) -> int:
    """Write rows in the published layout (`\\r\\n`, base64 of little-endian float32), atomically; returns the row count."""
    written = 0
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        for row in rows:
            boxes = np.ascontiguousarray(row.boxes, dtype=_FLOAT)
            features = np.ascontiguousarray(row.features, dtype=_FLOAT)
            if boxes.ndim != 2 or boxes.shape[1] != 4 or len(boxes) < 1 or features.ndim != 2 or len(features) != len(boxes):
                raise ValueError(f"image {row.image_id}: boxes {boxes.shape} and features {features.shape} are not [n, 4] and [n, D] with n >= 1")
            head = f"{int(row.image_id)}\t{int(row.image_w)}\t{int(row.image_h)}\t{len(boxes)}\t".encode()
            handle.write(head + base64.b64encode(boxes.tobytes()) + b"\t" + base64.b64encode(features.tobytes()) + b"\r\n")
            written += 1
    return written


def find_tsv_files(folder: str | os.PathLike) -> list[Path]:
    """The feature TSV files below `folder` (`*.tsv`, `*.tsv.<n>`; hidden entries skipped), in a fixed order:
    by folder and name, numbered parts in numeric order."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"missing folder of bottom-up-attention TSV files: {folder}")
    found = []
    for path in folder.rglob("*"):
        relative = path.relative_to(folder)
        match = _TSV_NAME.fullmatch(path.name)
        if match and path.is_file() and not any(part.startswith(".") for part in relative.parts):
            found.append((relative.parent.as_posix(), match["stem"], int(match["part"] or -1), path))
    if not found:
        raise InputError(f"no bottom-up-attention TSV files (*.tsv, *.tsv.<n>) below {folder}; the published "
                         f"archives hold e.g. {ADAPTIVE_TRAINVAL_FILES[0]} or {FIXED_TRAINVAL_FILES[0]}")
    return [entry[-1] for entry in sorted(found)]


def _box_range_text(expected: tuple[int, int]) -> str:
    lo, hi = expected
    return str(lo) if lo == hi else f"{lo}-{hi}"


def convert_butd_tsv(
    tsv_paths: Sequence[str | os.PathLike],
    out_h5: str | os.PathLike,
    *,
    image_ids: Collection[int] | None = None,
    expected_boxes: tuple[int, int] | None = None,
    progress: bool = True,
) -> dict:
    """Stream TSV files into one region HDF5 file (layout of `crossmodal.data.regions`); returns a summary.

    `image_ids` keeps only those images and requires all of them; `expected_boxes` = (min, max) boxes per
    image, e.g. (10, 100) for the adaptive set. An image id seen twice (in one file or across files),
    a change of feature dimension, a box count out of range or a requested image that never appears is an
    InputError, and no output file is written.
    """
    start = time.perf_counter()
    paths = [Path(p) for p in tsv_paths]
    if not paths:
        raise InputError("no bottom-up-attention TSV files to convert")
    for path in paths:
        if not path.is_file():
            raise InputError(f"missing bottom-up-attention TSV file: {path}")
    wanted = None if image_ids is None else {int(i) for i in image_ids}
    total_bytes = sum(p.stat().st_size for p in paths)
    counts: list[int] = []
    with tqdm(total=total_bytes, unit="B", unit_scale=True, desc="bottom-up tsv", disable=not progress, leave=False) as bar:
        rows = ((path, row) for path in paths for row in iter_butd_tsv(path, image_ids=wanted, on_bytes=bar.update))
        first = next(rows, None)
        if first is None:
            _require_all(wanted, set(), paths)
            raise InputError(f"no rows in {', '.join(map(str, paths))}")
        dim = first[1].features.shape[1]
        with RegionFileWriter(out_h5, dim, SOURCE) as writer:
            for path, row in itertools.chain([first], rows):
                where = f"{path} line {row.line}"
                if row.features.shape[1] != dim:
                    raise InputError(f"{where}: image {row.image_id} has {row.features.shape[1]}-d features, earlier rows {dim}-d")
                if expected_boxes is not None and not expected_boxes[0] <= row.num_boxes <= expected_boxes[1]:
                    raise InputError(f"{where}: image {row.image_id} has {row.num_boxes} boxes, expected {_box_range_text(expected_boxes)}")
                if row.image_id in writer:
                    raise InputError(f"{where}: image {row.image_id} appears a second time")
                writer.add(row.image_id, row.boxes, row.features, (row.image_w, row.image_h))
                counts.append(row.num_boxes)
            _require_all(wanted, writer, paths)
    boxes = np.array(counts)
    return {
        "images": len(counts),
        "total_boxes": int(boxes.sum()),
        "boxes_per_image": {"min": int(boxes.min()), "mean": float(boxes.mean()), "max": int(boxes.max())},
        "feature_dim": int(dim),
        "tsv_bytes": int(total_bytes),
        "seconds": time.perf_counter() - start,
    }


def _require_all(wanted: set[int] | None, found: Collection[int], paths: list[Path]) -> None:
    if wanted is None:
        return
    missing = sorted(i for i in wanted if i not in found)
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
        raise InputError(f"{len(missing)} of the {len(wanted)} requested images are not in "
                         f"{', '.join(map(str, paths))}: {shown}")
