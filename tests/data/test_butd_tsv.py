"""Bottom-up-attention TSV files: decoding the real layout, the exact inverse writer, conversion to HDF5."""
from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from crossmodal.data.butd_tsv import (
    SOURCE,
    ButdRow,
    convert_butd_tsv,
    find_tsv_files,
    iter_butd_tsv,
    write_butd_tsv,
)
from crossmodal.data.regions import RegionFeatures, write_region_file
from crossmodal.io import InputError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # copies of ../shared/fixtures (see its README)
DIM8 = FIXTURES / "butd_tsv" / "butd_2rows_dim8.tsv"
DIM2048 = FIXTURES / "butd_tsv" / "butd_2rows_dim2048.tsv"


def _assert_rows_equal(got: list[ButdRow], want: list[ButdRow]) -> None:
    assert [r.image_id for r in got] == [r.image_id for r in want]
    for a, b in zip(got, want):
        assert (a.image_w, a.image_h) == (b.image_w, b.image_h)
        assert a.boxes.dtype == np.float32 and np.array_equal(a.boxes, b.boxes)
        assert a.features.dtype == np.float32 and np.array_equal(a.features, b.features)


def test_dim8_fixture_decodes_to_the_expected_arrays():
    expected = json.loads((FIXTURES / "butd_tsv" / "butd_2rows_dim8.expected.json").read_text())
    rows = list(iter_butd_tsv(DIM8))
    assert len(rows) == len(expected) == 2
    for row, want, line in zip(rows, expected, (1, 2)):
        assert (row.image_id, row.image_w, row.image_h, row.num_boxes) == (
            want["image_id"], want["image_w"], want["image_h"], want["num_boxes"])
        assert row.line == line
        assert row.boxes.shape == (want["num_boxes"], 4) and row.features.shape == (want["num_boxes"], 8)
        assert np.array_equal(row.boxes, np.array(want["boxes"], dtype=np.float32))
        assert np.array_equal(row.features, np.array(want["features"], dtype=np.float32))


@pytest.mark.parametrize("fixture", [DIM8, DIM2048], ids=["dim8", "dim2048"])
def test_writer_is_the_exact_inverse(fixture, tmp_path):
    rows = list(iter_butd_tsv(fixture))
    out = tmp_path / "again.tsv"
    assert write_butd_tsv(out, rows) == len(rows)
    assert out.read_bytes() == fixture.read_bytes()


def test_dim2048_fixture_has_real_feature_size():
    rows = list(iter_butd_tsv(DIM2048))
    assert [r.image_id for r in rows] == [391895, 522418]
    assert [r.features.shape for r in rows] == [(3, 2048), (2, 2048)]
    assert all(np.isfinite(r.features).all() and np.isfinite(r.boxes).all() for r in rows)


def test_progress_callback_sees_every_byte():
    seen = []
    list(iter_butd_tsv(DIM2048, on_bytes=seen.append))
    assert sum(seen) == DIM2048.stat().st_size and len(seen) == 2


def test_lf_line_ends_and_blank_lines_are_accepted(tmp_path):
    path = tmp_path / "lf.tsv"
    path.write_bytes(DIM8.read_bytes().replace(b"\r\n", b"\n\n"))
    _assert_rows_equal(list(iter_butd_tsv(path)), list(iter_butd_tsv(DIM8)))


def test_conversion_reads_back_equal(tmp_path):
    rows = list(iter_butd_tsv(DIM2048))
    out = tmp_path / "regions.h5"
    summary = convert_butd_tsv([DIM2048], out, expected_boxes=(2, 3), progress=False)
    assert summary["images"] == 2 and summary["total_boxes"] == 5 and summary["feature_dim"] == 2048
    assert summary["boxes_per_image"] == {"min": 2, "mean": 2.5, "max": 3}
    assert summary["tsv_bytes"] == DIM2048.stat().st_size
    assert [p.name for p in tmp_path.iterdir()] == ["regions.h5"]
    with RegionFeatures(out) as rf:
        assert rf.source == SOURCE and rf.feature_dim == 2048
        assert rf.ids.tolist() == [391895, 522418]
        assert rf.num_boxes.tolist() == [3, 2] and rf.offsets.tolist() == [0, 3, 5]
        assert rf.image_sizes.tolist() == [[640, 360], [640, 480]]
        for row in rows:
            feats, boxes = rf.get(row.image_id)
            assert np.array_equal(feats, row.features) and np.array_equal(boxes, row.boxes)


def test_synthetic_region_file_exports_to_tsv_and_converts_back(tmp_path):
    rng = np.random.default_rng(4)
    ids, counts, sizes = [5, 3, 11], [4, 1, 7], [(64, 48), (80, 80), (32, 96)]
    boxes = [rng.uniform(0, 60, (c, 4)).astype(np.float32) for c in counts]
    feats = [rng.normal(size=(c, 16)).astype(np.float32) for c in counts]
    write_region_file(tmp_path / "synthetic.h5", ids, boxes, feats, sizes, source="synthetic backbone")
    with RegionFeatures(tmp_path / "synthetic.h5") as rf:
        exported = [ButdRow(int(i), int(w), int(h), *rf.get(i)[::-1]) for i, (w, h) in zip(rf.ids, rf.image_sizes)]
    write_butd_tsv(tmp_path / "synthetic.tsv", exported)
    convert_butd_tsv([tmp_path / "synthetic.tsv"], tmp_path / "back.h5", progress=False)
    with RegionFeatures(tmp_path / "synthetic.h5") as a, RegionFeatures(tmp_path / "back.h5") as b:
        assert np.array_equal(a.ids, b.ids) and np.array_equal(a.offsets, b.offsets)
        assert np.array_equal(a.image_sizes, b.image_sizes)
        for x, y in zip(a.load_all(), b.load_all()):
            assert x.equal(y)


# --------------------------------------------------------------------------------------------------
# malformed input


GOOD_LINE = DIM8.read_bytes().split(b"\r\n")[0]


def _with_second_line(tmp_path: Path, fields: list[bytes]) -> Path:
    path = tmp_path / "bad.tsv"
    path.write_bytes(GOOD_LINE + b"\r\n" + b"\t".join(fields) + b"\r\n")
    return path


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda f: f[:5], "5 tab-separated fields, expected 6"),
        (lambda f: f + [b"x"], "7 tab-separated fields, expected 6"),
        (lambda f: [b"12a"] + f[1:], "field 'image_id' is not an integer"),
        (lambda f: f[:3] + [b"0"] + f[4:], "num_boxes 0, expected at least 1"),
        (lambda f: f[:4] + [f[4][:-4] + b"!!!!"] + f[5:], "field 'boxes' is not valid base64"),
        (lambda f: f[:5] + [f[5][:-1]], "field 'features' is not valid base64"),
        (lambda f: f[:3] + [b"4"] + f[4:], "12 box values, expected num_boxes x 4 = 16"),
        (lambda f: f[:5] + [base64.b64encode(base64.b64decode(f[5])[:-4])], "23 feature values, not divisible into 3 boxes"),
        (lambda f: f[:5] + [base64.b64encode(base64.b64decode(f[5])[:-6])], "90 bytes, not a whole number of float32"),
    ],
    ids=["few-fields", "many-fields", "bad-id", "no-boxes", "bad-base64", "truncated-base64", "box-count",
         "feature-count", "partial-float"],
)
def test_malformed_row_is_an_input_error_naming_the_line(tmp_path, change, message):
    path = _with_second_line(tmp_path, change(GOOD_LINE.split(b"\t")))
    with pytest.raises(InputError) as err:
        list(iter_butd_tsv(path))
    text = str(err.value)
    assert text.startswith(f"{path} line 2: ") and message in text and "\n" not in text
    with pytest.raises(InputError, match="line 2"):
        convert_butd_tsv([path], tmp_path / "out.h5", progress=False)
    assert not (tmp_path / "out.h5").exists()


def test_missing_tsv_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="missing bottom-up-attention TSV file"):
        convert_butd_tsv([DIM8, tmp_path / "nope.tsv"], tmp_path / "out.h5", progress=False)
    with pytest.raises(InputError, match="no bottom-up-attention TSV files"):
        convert_butd_tsv([], tmp_path / "out.h5", progress=False)


# --------------------------------------------------------------------------------------------------
# conversion checks


def test_box_count_range_is_checked(tmp_path):
    out = tmp_path / "out.h5"
    with pytest.raises(InputError) as err:
        convert_butd_tsv([DIM8], out, expected_boxes=(3, 3), progress=False)
    assert str(err.value) == f"{DIM8} line 2: image 522418 has 2 boxes, expected 3"
    with pytest.raises(InputError, match=r"line 1: image 391895 has 3 boxes, expected 10-100"):
        convert_butd_tsv([DIM8], out, expected_boxes=(10, 100), progress=False)
    assert not out.exists()


def test_image_ids_filter_keeps_only_the_requested(tmp_path):
    out = tmp_path / "out.h5"
    summary = convert_butd_tsv([DIM8], out, image_ids={522418}, progress=False)
    assert summary["images"] == 1
    with RegionFeatures(out) as rf:
        assert rf.ids.tolist() == [522418]
        assert np.array_equal(rf.get(522418)[0], list(iter_butd_tsv(DIM8))[1].features)


def test_missing_requested_images_are_listed(tmp_path):
    out = tmp_path / "out.h5"
    with pytest.raises(InputError) as err:
        convert_butd_tsv([DIM8], out, image_ids=[522418, 7, 3, 391895], progress=False)
    assert str(err.value) == f"2 of the 4 requested images are not in {DIM8}: 3, 7"
    with pytest.raises(InputError, match="1 of the 1 requested images are not in .*: 8"):
        convert_butd_tsv([DIM8], out, image_ids=[8], progress=False)
    assert not out.exists()


def test_duplicate_image_across_files_is_an_input_error(tmp_path):
    second = tmp_path / "part.tsv.1"
    shutil.copy(DIM8, second)
    out = tmp_path / "out.h5"
    with pytest.raises(InputError) as err:
        convert_butd_tsv([DIM8, second], out, progress=False)
    assert str(err.value) == f"{second} line 1: image 391895 appears a second time"
    assert not out.exists()


def test_feature_dimension_must_not_change(tmp_path):
    with pytest.raises(InputError, match="2048-d features, earlier rows 8-d"):
        convert_butd_tsv([DIM8, DIM2048], tmp_path / "out.h5", progress=False)


def test_find_tsv_files_in_an_extracted_archive(tmp_path):
    names = ["trainval/karpathy_train_resnet101_faster_rcnn_genome.tsv.10",
             "trainval/karpathy_train_resnet101_faster_rcnn_genome.tsv.2",
             "trainval/karpathy_test_resnet101_faster_rcnn_genome.tsv",
             "trainval/karpathy_val_resnet101_faster_rcnn_genome.tsv",
             ".trainval.zip.extract-x/karpathy_test_resnet101_faster_rcnn_genome.tsv",  # a download's staging
             "trainval/README.txt", "trainval.zip", "SHA256SUMS"]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert [p.relative_to(tmp_path).as_posix() for p in find_tsv_files(tmp_path)] == [names[2], names[1], names[0], names[3]]
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no bottom-up-attention TSV files"):
        find_tsv_files(tmp_path / "empty")
    with pytest.raises(InputError, match="missing folder"):
        find_tsv_files(tmp_path / "nope")
