"""Paper-table transcriptions load strictly, and the builder sets paper and ours side by side honestly."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml

from crossmodal.io import InputError
from crossmodal.reports.tables import build_all, load_table

PAPER_TABLES = Path(__file__).resolve().parents[1] / "src" / "crossmodal" / "reports" / "paper_tables"
XLAN_VARIANTS = {"updown", "xlan_dec", "xlan_enc1", "xlan_enc2", "xlan_enc3", "xlan_enc4", "xlan"}
SPICE_STATUS = "Stanford CoreNLP jars absent (offline)"
METRICS = ["BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr", "SPICE"]


def _small_table(**row_overrides) -> dict:
    row = {"label": "Ours", "values": {"BLEU-4": 36.6, "CIDEr": None}, "variant": "base"}
    row.update(row_overrides)
    return {"id": "t", "paper": "P (A et al., X 2020)", "source": {"table": "Table 9", "caption": "c"},
            "dataset": "COCO", "unit": "%", "scale": 100,
            "columns": [{"key": "BLEU-4", "label": "B@4"}, {"key": "CIDEr", "label": "C"}],
            "sections": [{"name": "Single model", "rows": [row]}]}


def _write_yaml(tmp_path: Path, table: dict) -> Path:
    path = tmp_path / f"{table['id']}.yaml"
    path.write_text(yaml.safe_dump(table, sort_keys=False, allow_unicode=True))
    return path


@pytest.mark.parametrize("overrides, expected", [
    ({"colour": "red"}, "unknown key(s) colour"),
    ({"variant": None}, "needs 'variant: <name>' or 'cited: true'"),
    ({"values": {"BLEU-4": 36.6, "CIDEr": None, "BLEU-9": 1.0}}, "unknown key(s) BLEU-9"),
    ({"values": {"BLEU-4": "36.6", "CIDEr": None}}, "values.BLEU-4: expected a number"),
    ({"values": {"BLEU-4": 36.6}}, "missing key(s) CIDEr"),
    ({"cited": True}, "either cited or filled by a variant"),
])
def test_loader_rejects_bad_rows_with_one_line_naming_file_and_row(tmp_path, overrides, expected):
    table = _small_table(**overrides)
    if overrides.get("variant", "x") is None:
        del table["sections"][0]["rows"][0]["variant"]
    path = _write_yaml(tmp_path, table)
    with pytest.raises(InputError) as err:
        load_table(path)
    message = str(err.value)
    assert expected in message and str(path) in message and "row 1 (Ours)" in message
    assert "\n" not in message


def test_loader_rejects_unknown_top_level_key_and_duplicate_keys(tmp_path):
    table = _small_table()
    table["colums"] = []
    with pytest.raises(InputError, match=r"t\.yaml: unknown key\(s\) colums"):
        load_table(_write_yaml(tmp_path, table))
    dup = tmp_path / "d.yaml"
    dup.write_text(_write_yaml(tmp_path, _small_table()).read_text().replace("BLEU-4: 36.6", "BLEU-4: 36.6\n      BLEU-4: 1.0"))
    with pytest.raises(InputError, match="duplicate key 'BLEU-4'"):
        load_table(dup)


def test_xlan_table3_transcription():
    table = load_table(PAPER_TABLES / "xlan_table3.yaml")
    assert [c.key for c in table.columns] == METRICS
    assert [c.label for c in table.columns] == ["B@1", "B@2", "B@3", "B@4", "M", "R", "C", "S"]
    rows = table.rows
    assert [r.variant for r in rows] == ["updown", "xlan_dec", "xlan_enc1", "xlan_enc2", "xlan_enc3", "xlan_enc4", "xlan"]
    assert rows[6].values == dict(zip(METRICS, [78.0, 62.3, 48.9, 38.2, 28.8, 58.0, 122.0, 21.9]))
    assert rows[1].values["BLEU-4"] == 36.6 and rows[1].values["BLEU-1"] == 76.9
    assert rows[0].values["BLEU-2"] == 60.3 and rows[0].values["CIDEr"] == 114.1
    assert rows[5].values["ROUGE-L"] == 57.8 and rows[5].values["CIDEr"] == 120.4
    for i in (0, 4, 5):  # the extraction lost these B@1 cells: null with a note, never a guess
        assert rows[i].values["BLEU-1"] is None and "B@1 lost in text extraction." in rows[i].notes
    assert all(v is not None for i in (1, 2, 3, 6) for v in rows[i].values.values())
    assert rows[6].labels == {"encoder": "Faster R-CNN + 4×X-Linear attention (+ELU)",
                              "decoder": "LSTM + X-Linear attention (+ELU)"}


@pytest.fixture()
def metrics_dir(tmp_path) -> Path:
    d = tmp_path / "metrics"
    d.mkdir()
    updown = dict(zip(METRICS, [0.71234, 0.55, 0.41, 0.30491, 0.251, 0.532, 1.14492, None]))
    (d / "updown.json").write_text(json.dumps({"variant": "updown", "model": "updown", "mlflow_run_id": "r1",
                                               "test": {**updown, "SPICE_status": SPICE_STATUS}}))
    const = dict(zip(METRICS, [0.3, 0.2, 0.1, 0.05, 0.1, 0.3, 0.123, None]))
    human = dict(zip(METRICS, [0.8, 0.7, 0.6, 0.5, 0.4, 0.7, 2.0, None]))
    (d / "reference_points.json").write_text(json.dumps({
        "constant_caption": {"caption": "a red circle left of a blue square",
                             "test": {**const, "SPICE_status": SPICE_STATUS}},
        "human_ceiling": {"test": {**human, "SPICE_status": SPICE_STATUS}}}))
    (d / "data_profile.json").write_text(json.dumps({
        "profile": "synthetic image world", "synthetic": True, "images": {"train": 1500, "val": 250, "test": 250},
        "image_size": 128, "seed": 0}))
    return d


def _md_rows(markdown: str) -> dict[str, dict[str, str]]:
    """Markdown table rows keyed by their first two cells, footnote markers stripped from the first."""
    lines = [l for l in markdown.splitlines() if l.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[(cells[0].split("[^")[0], cells[1])] = dict(zip(header, cells))
    return rows


def test_build_with_only_updown_metrics(tmp_path, metrics_dir):
    out, index = tmp_path / "reports" / "tables", tmp_path / "reports" / "index.md"
    written = build_all(PAPER_TABLES, metrics_dir, XLAN_VARIANTS, out, index)
    assert written == [out / "xlan_table3.md", out / "xlan_table3.csv", index]
    md = (out / "xlan_table3.md").read_text()
    assert md.startswith("# xlan_table3: Table 3 of X-Linear Attention Networks for Image Captioning (Pan et al., CVPR 2020)")
    assert ("**Reproduced on: synthetic image world (1500/250/250 images, seed 0) — synthetic data, not COCO: "
            "compare orderings, not absolute values**") in md
    rows = _md_rows(md)
    up = rows[("Faster R-CNN", "LSTM + Conventional attention")]
    assert (up["B@1 paper"], up["B@1 ours"]) == ("-", "71.2")
    assert (up["B@4 paper"], up["B@4 ours"]) == ("36.1", "30.5")
    assert (up["C paper"], up["C ours"]) == ("114.1", "114.5")
    spice_mark = up["S ours"]
    assert spice_mark.startswith("n/a[^")
    assert f"{spice_mark[3:]}: SPICE: {SPICE_STATUS}" in md
    pending = [r for k, r in rows.items() if k[0] != "Faster R-CNN" or k[1] != "LSTM + Conventional attention"]
    paper_rows = [r for r in pending if r["B@2 paper"]]
    assert len(paper_rows) == 6
    assert all(r[f"{c} ours"] == "pending" for r in paper_rows for c in ("B@1", "B@4", "C", "S"))
    assert rows[("Faster R-CNN + 4×X-Linear attention (+ELU)", "LSTM + X-Linear attention (+ELU)")]["C paper"] == "122.0"
    const, human = rows[("Constant caption", "")], rows[("Human ceiling", "")]
    assert (const["C paper"], const["C ours"], human["C ours"]) == ("", "12.3", "200.0")
    assert md.index("Reference points (ours, same test split)") < md.index("| Constant caption")
    assert '"a red circle left of a blue square"' in md

    table = list(csv.DictReader(io.StringIO((out / "xlan_table3.csv").read_text())))
    assert [r["kind"] for r in table] == ["reproduced"] + ["pending"] * 6 + ["reference"] * 2
    assert float(table[0]["BLEU-4_ours"]) == pytest.approx(30.491) and table[0]["BLEU-4_paper"] == "36.1"
    assert float(table[0]["CIDEr_ours"]) == pytest.approx(114.492) and table[0]["BLEU-1_paper"] == ""
    assert table[0]["SPICE_ours"] == "" and table[0]["SPICE_paper"] == "20.9"
    assert all(r[f"{m}_ours"] == "" for r in table[1:7] for m in METRICS)
    assert table[6]["CIDEr_paper"] == "122.0" and table[6]["variant"] == "xlan"
    assert table[7]["encoder"] == "Constant caption" and float(table[7]["CIDEr_ours"]) == pytest.approx(12.3)

    idx = index.read_text()
    assert "| [xlan_table3](tables/xlan_table3.md) | Table 3 | X-Linear Attention Networks" in idx
    assert idx.rstrip().endswith("| 1 | 6 | 0 |")


def test_build_is_byte_identical_when_repeated(tmp_path, metrics_dir):
    out, index = tmp_path / "tables", tmp_path / "index.md"
    first = {p: p.read_bytes() for p in build_all(PAPER_TABLES, metrics_dir, XLAN_VARIANTS, out, index)}
    second = {p: p.read_bytes() for p in build_all(PAPER_TABLES, metrics_dir, XLAN_VARIANTS, out, index)}
    assert first == second and sorted(p.name for p in out.iterdir()) == ["xlan_table3.csv", "xlan_table3.md"]


def test_cited_unregistered_grouped_and_server_only_cells(tmp_path, metrics_dir):
    table = _small_table()
    table["column_groups"] = [{"id": "xe", "label": "Cross-Entropy Loss", "short": "XE"}]
    table["columns"] = [{"key": "BLEU-4", "label": "B@4", "group": "xe"},
                        {"key": "CIDEr", "label": "C", "server_only": True}]
    table["sections"] = [
        {"name": "Single model", "rows": [
            {"label": "Up-Down", "values": {"xe:BLEU-4": 36.2, "CIDEr": 113.5}, "variant": {"xe": "updown"}},
            {"label": "Other", "values": {"xe:BLEU-4": 30.0, "CIDEr": None}, "cited": True}]},
        {"name": "Ensemble", "rows": [
            {"label": "Ghost", "values": {"xe:BLEU-4": 1.0, "CIDEr": 2.0}, "variant": "ghost"}]}]
    tables = tmp_path / "paper"
    tables.mkdir()
    ghost = json.loads((metrics_dir / "updown.json").read_text())  # a stale file of an unregistered variant
    (metrics_dir / "ghost.json").write_text(json.dumps({**ghost, "variant": "ghost"}))
    _write_yaml(tables, table)
    build_all(tables, metrics_dir, {"updown"}, tmp_path / "out", tmp_path / "index.md")
    md = (tmp_path / "out" / "t.md").read_text()
    rows = {k[0]: r for k, r in _md_rows(md).items()}
    assert (rows["Up-Down"]["XE B@4 ours"], rows["Up-Down"]["C ours"]) == ("30.5", "server only")
    assert (rows["Other"]["XE B@4 ours"], rows["Other"]["C paper"]) == ("cited", "-")
    assert rows["Ghost"]["XE B@4 ours"] == "pending" and "variant `ghost` is not registered" in md
    assert "**Ensemble**" in md and "XE = Cross-Entropy Loss" in md
    assert (tmp_path / "index.md").read_text().rstrip().endswith("| 1 | 1 | 1 |")
    kinds = [r["kind"] for r in csv.DictReader(io.StringIO((tmp_path / "out" / "t.csv").read_text()))]
    assert kinds == ["reproduced", "cited", "pending"]


def test_missing_metric_in_metrics_file_is_an_input_error(tmp_path, metrics_dir):
    data = json.loads((metrics_dir / "updown.json").read_text())
    del data["test"]["METEOR"]
    (metrics_dir / "updown.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"updown\.json: test metrics lack 'METEOR'"):
        build_all(PAPER_TABLES, metrics_dir, XLAN_VARIANTS, tmp_path / "out", tmp_path / "index.md")
    assert not (tmp_path / "out").exists()
