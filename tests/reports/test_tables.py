"""Paper-table transcriptions load strictly, and the builder sets paper and ours side by side honestly."""
from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
import yaml

from crossmodal.io import InputError
from crossmodal.reports.claims import HOLDS, PENDING, SEEDS, UNCLEAR, UNTESTABLE, WORLD, ClaimResult, ClaimsPage
from crossmodal.reports.index_page import (STATUS_BEGIN, STATUS_END, build_index, build_status, replace_status,
                                           status_block)
from crossmodal.reports.table_builder import REFERENCE_HEADING, WIDTH, build_paper, build_table, summary_name
from crossmodal.reports.table_schema import load_table, load_tables

PAPERS = Path(__file__).resolve().parents[2] / "src" / "crossmodal" / "papers"  # each paper's tables/
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
    table = load_table(PAPERS / "xlan/tables/xlan_table3.yaml")
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
    (d / "video_profile.json").write_text(json.dumps({
        "profile": "synthetic video world", "synthetic": True, "msvd-like clips": {"train": 122, "val": 10, "test": 68},
        "seed": 0}))
    return d


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip("|").split("|")]


def _md_rows(markdown: str) -> dict[tuple[str, ...], dict[str, str]]:
    """The rows of every Markdown sub-table, keyed by their label cells (footnote markers, numbered, † and ‡, stripped
    from the first), each row's cells of all sub-tables merged under their column label, prefixed by the short name of
    the sub-table's column group ("XE C": "113.5 / 114.5")."""
    rows, prefix, header, metric = {}, "", [], []
    lines = markdown.splitlines()
    for line, following in zip(lines, lines[1:] + [""]):
        if line.startswith("## "):
            group = re.match(r"## .*?\(([^()]+)\)(:|$)", line)
            prefix = f"{group[1]} " if group else ""
        elif line.startswith("| ") and following.startswith("|-"):
            metric = [a == "---:" for a in _cells(following)]  # label columns are left-aligned
            header = [prefix * m + label for label, m in zip(_cells(line), metric)]
        elif line.startswith("| "):
            cells = _cells(line)
            labels = [cells[0].split("[^")[0].rstrip("†‡")] + [c for c, m in zip(cells[1:], metric[1:]) if not m]
            rows.setdefault(tuple(labels), {}).update(zip(header, cells))
    return rows


def _table_lines(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if line.startswith("|")]


def build_all(tables_dir: Path, metrics_dir: Path, registered: set[str], out: Path, index: Path) -> list[Path]:
    """Every table of a directory built as one paper's, then the index over it: the md/csv paths and the index."""
    ids = sorted(p.stem for p in Path(tables_dir).glob("*.yaml"))
    written = build_paper("paper", ids, metrics_dir, registered, out, Path(tables_dir))
    assert written[-1] == out / summary_name("paper")
    build_index([written[-1]], out, index)
    return written[:-1] + [index]


@pytest.fixture()
def every_table(tmp_path) -> Path:
    """One directory holding every paper's transcribed tables, so that a build test builds them all as one paper's."""
    d = tmp_path / "every_table"
    d.mkdir()
    for path in PAPERS.glob("*/tables/*.yaml"):
        (d / path.name).write_bytes(path.read_bytes())
    return d


@pytest.fixture()
def xlan3_only(tmp_path) -> Path:
    """A paper-tables directory holding only xlan_table3.yaml, so a build test looks at one table."""
    d = tmp_path / "paper_tables_xlan3"
    d.mkdir()
    (d / "xlan_table3.yaml").write_text((PAPERS / "xlan/tables/xlan_table3.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    return d


def test_build_with_only_updown_metrics(tmp_path, metrics_dir, xlan3_only):
    out, index = tmp_path / "reports" / "tables", tmp_path / "reports" / "index.md"
    written = build_all(xlan3_only, metrics_dir, XLAN_VARIANTS, out, index)
    assert written == [out / "xlan_table3.md", out / "xlan_table3.csv", index]
    md = (out / "xlan_table3.md").read_text()
    assert md.startswith("# xlan_table3: Table 3 of X-Linear Attention Networks for Image Captioning (Pan et al., CVPR 2020)")
    assert ("**Reproduced on: synthetic image world (1500/250/250 images, seed 0) — synthetic data, not COCO: "
            "compare orderings, not absolute values**") in md
    assert 'Each cell reads "paper / ours"' in md
    rows = _md_rows(md)
    up = rows[("Faster R-CNN", "LSTM + Conventional attention")]
    assert (up["B@1"], up["B@4"], up["C"]) == ("- / 71.2", "36.1 / 30.5", "114.1 / 114.5")  # "-": the paper prints none
    paper, spice_mark = up["S"].split(" / ")
    assert paper == "20.9" and spice_mark.startswith("n/a[^")
    assert f"{spice_mark[3:]}: SPICE: {SPICE_STATUS}" in md
    pending = [r for k, r in rows.items() if k != ("Faster R-CNN", "LSTM + Conventional attention")
               and k[0] not in ("Constant caption", "Human ceiling", f"**{REFERENCE_HEADING}**")]
    assert len(pending) == 6
    assert all(r[c].endswith(" / pending") for r in pending for c in ("B@1", "B@4", "C", "S"))
    elu = rows[("Faster R-CNN + 4×X-Linear attention (+ELU)", "LSTM + X-Linear attention (+ELU)")]
    assert elu["C"] == "122.0 / pending"
    const, human = rows[("Constant caption", "")], rows[("Human ceiling", "")]
    assert (const["C"], human["C"]) == ("12.3", "200.0")  # reference points: ours alone
    assert md.index("Reference points (ours, same test split)") < md.index("| Constant caption")
    assert '"a red circle left of a blue square"' in md
    # two long label columns leave room for a few metrics: the columns are cut into sub-tables that fit a screen
    assert max(map(len, _table_lines(md))) <= WIDTH < len("| " + " | ".join(elu.values()) + " |")
    headings = [line for line in md.splitlines() if line.startswith("## ")]
    assert len(headings) > 1 and ", ".join(h[3:] for h in headings) == "B@1, B@2, B@3, B@4, M, R, C, S"
    assert md.count("| Faster R-CNN + 4×X-Linear attention (+ELU)") == len(headings)  # every row in each

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
    assert "| Rows run | Server only | Pending | Cited |" in idx
    assert idx.rstrip().endswith("| 1 | 0 | 6 | 0 |")


def test_build_is_byte_identical_when_repeated(tmp_path, metrics_dir, xlan3_only, every_table):
    out, index = tmp_path / "tables", tmp_path / "index.md"
    first = {p: p.read_bytes() for p in build_all(xlan3_only, metrics_dir, XLAN_VARIANTS, out, index)}
    second = {p: p.read_bytes() for p in build_all(xlan3_only, metrics_dir, XLAN_VARIANTS, out, index)}
    assert first == second
    assert sorted(p.name for p in out.iterdir()) == ["paper.summary.json", "xlan_table3.csv", "xlan_table3.md"]
    everything = {p: p.read_bytes() for p in build_all(every_table, metrics_dir, XLAN_VARIANTS, out, index)}
    assert everything == {p: p.read_bytes() for p in build_all(every_table, metrics_dir, XLAN_VARIANTS, out, index)}


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
    assert (rows["Up-Down"]["XE B@4"], rows["Up-Down"]["C"]) == ("36.2 / 30.5", "113.5 / server only")
    assert (rows["Other"]["XE B@4"], rows["Other"]["C"]) == ("30.0 / cited", "- / cited")
    assert rows["Ghost"]["XE B@4"] == "1.0 / pending" and "]: Ghost: not trained yet." in md
    assert "params.yaml" not in md and "variant" not in md  # footnotes speak of systems, not of the code
    assert '"server only": only the COCO test server computes it.' in md
    # the column of no group first, under no heading; then the group's own sub-table under its label
    assert md.index("| Model | C |") < md.index("## Cross-Entropy Loss (XE)\n\n| Model | B@4 |")
    assert md.count("| **Ensemble** |") == 2 and md.count("| Ghost") == 2  # sections and rows in each sub-table
    assert (tmp_path / "index.md").read_text().rstrip().endswith("| 1 | 0 | 1 | 1 |")  # reproduced: B@4 is ours
    kinds = [r["kind"] for r in csv.DictReader(io.StringIO((tmp_path / "out" / "t.csv").read_text()))]
    assert kinds == ["reproduced", "cited", "pending"]


def test_missing_metric_in_metrics_file_is_an_input_error(tmp_path, metrics_dir, every_table):
    data = json.loads((metrics_dir / "updown.json").read_text())
    del data["test"]["METEOR"]
    (metrics_dir / "updown.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"updown\.json: test metrics lack 'METEOR'"):
        build_all(every_table, metrics_dir, XLAN_VARIANTS, tmp_path / "out", tmp_path / "index.md")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- the transcribed tables

TABLE_IDS = ["aoanet_offline", "aoanet_online", "ban_coattention", "ban_counting", "ban_flickr_recall",
             "ban_flickr_types", "ban_glimpses", "ban_residual", "ban_testdev", "eta_table1", "eta_table2", "eta_table3",
             "eta_table4", "eta_table5", "eta_table6", "hoca_table1", "hoca_table2", "hoca_table3", "xlan_table1",
             "xlan_table2", "xlan_table3"]
DATASETS = {"ban_flickr_recall": "Flickr30k Entities", "ban_flickr_types": "Flickr30k Entities",
            "hoca_table1": "MSVD and MSR-VTT", "hoca_table2": "MSVD and MSR-VTT", "hoca_table3": "MSR-VTT"}
COST_TABLES = {"hoca_table3"}  # memory (G) and seconds, on their own scale
ONLINE = ["BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr"]


def _row(table, label: str):
    """The one row whose first label field reads `label`."""
    found = [r for r in table.rows if r.labels[table.label_fields[0].key] == label]
    assert len(found) == 1, (label, [r.labels for r in table.rows])
    return found[0]


def _online(c5_c40: list[float | None]) -> dict[str, float | None]:
    """Row values of an online table from the printed order B@1 c5, B@1 c40, B@2 c5, ..."""
    ids = [f"{g}:{m}" for m in ONLINE for g in ("c5", "c40")]
    assert len(c5_c40) == len(ids)
    return dict(zip(ids, c5_c40))


def test_every_paper_table_loads(every_table):
    tables = load_tables(TABLE_IDS, every_table)
    assert sorted(p.stem for p in every_table.glob("*.yaml")) == TABLE_IDS
    assert all(p.stem.startswith(p.parent.parent.name + "_") for p in PAPERS.glob("*/tables/*.yaml"))  # its paper's
    for t in tables:
        expected = DATASETS.get(t.id, "VQA 2.0" if t.id.startswith("ban_") else "COCO")
        assert t.dataset == expected and (t.id in COST_TABLES or (t.unit == "%" and t.scale == 100))
        for row in t.rows:  # every variant row names its variant(s); cited rows name none
            assert row.cited != bool(row.variants())
            if t.column_groups and isinstance(row.variant, dict):
                assert set(row.variant) == {g.id for g in t.column_groups}
    online = {t.id for t in tables if any(c.server_only for c in t.columns)}
    assert online == {"aoanet_online", "xlan_table2", "eta_table3"}
    for t in tables:
        if t.id in online:  # every leaderboard metric is server-only, c5 and c40 per metric
            assert all(c.server_only for c in t.columns)
            assert [c.id for c in t.columns] == [f"{g}:{m}" for m in ONLINE for g in ("c5", "c40")]
            assert t.reference_points is None


def test_aoanet_offline_transcription():
    t = load_table(PAPERS / "aoanet/tables/aoanet_offline.yaml")
    assert [(s.name, len(s.rows)) for s in t.sections] == [("Single model", 8)]
    assert [c.id for c in t.columns] == [f"{g}:{m}" for g in ("xe", "scst")
                                         for m in ("BLEU-1", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr", "SPICE")]
    assert [r.labels["model"] for r in t.rows] == ["LSTM [37]", "SCST [31]", "LSTM-A [50]", "Up-Down [2]",
                                                   "RFNet [20]", "GCN-LSTM [49]", "SGAE [44]", "AoANet"]
    lstm = t.rows[0]
    assert lstm.variant == {"xe": "showtell", "scst": "showtell_scst"}
    assert list(lstm.values.values()) == [None, 29.6, 25.2, 52.6, 94.0, None, None, 31.9, 25.5, 54.3, 106.3, None]
    assert _row(t, "SCST [31]").variant == {"xe": "att2in", "scst": "att2in_scst"}
    assert _row(t, "SCST [31]").values["scst:CIDEr"] == 114.0
    updown = _row(t, "Up-Down [2]")
    assert updown.variant == {"xe": "updown", "scst": "updown_scst"}
    assert (updown.values["xe:BLEU-1"], updown.values["xe:CIDEr"], updown.values["scst:SPICE"]) == (77.2, 113.5, 21.4)
    assert _row(t, "RFNet [20]").cited and _row(t, "RFNet [20]").values["xe:ROUGE-L"] == 56.8
    assert _row(t, "GCN-LSTM [49]").values["scst:CIDEr"] == 127.6
    sgae = _row(t, "SGAE [44]")
    assert all(sgae.values[f"xe:{m}"] is None for m in ("BLEU-1", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr", "SPICE"))
    assert sgae.values["scst:BLEU-1"] == 80.8 and sgae.values["scst:CIDEr"] == 127.8
    aoanet = t.rows[-1]
    assert aoanet.variant == {"xe": "aoanet", "scst": "aoanet_scst"}
    assert list(aoanet.values.values()) == [77.4, 37.2, 28.4, 57.5, 119.8, 21.3, 80.2, 38.9, 29.2, 58.8, 129.8, 22.4]
    assert sum(r.cited for r in t.rows) == 4


def test_aoanet_online_transcription():
    t = load_table(PAPERS / "aoanet/tables/aoanet_online.yaml")
    assert [(s.name, len(s.rows)) for s in t.sections] == [("Online leaderboard", 7)]
    assert [r.labels["model"] for r in t.rows] == ["SCST [31]", "LSTM-A [50]", "Up-Down [2]", "RFNet [20]",
                                                   "GCN-LSTM [49]", "SGAE [44]", "AoANet"]
    assert [r.variant for r in t.rows] == ["att2in_scst", None, "updown_scst", None, None, None, "aoanet_scst"]
    assert t.rows[0].values == _online([78.1, 93.7, 61.9, 86.0, 47.0, 75.9, 35.2, 64.5, 27.0, 35.5, 56.3, 70.7,
                                        114.7, 116.0])
    assert t.rows[-1].values == _online([81.0, 95.0, 65.8, 89.6, 51.4, 81.3, 39.4, 71.2, 29.1, 38.5, 58.9, 74.5,
                                         126.9, 129.6])
    assert any("ensemble" in n and "single model" in n for n in t.rows[-1].notes)
    gcn = _row(t, "GCN-LSTM [49]")
    assert gcn.values["c5:BLEU-1"] is None and gcn.values["c40:BLEU-1"] is None
    assert gcn.values["c5:CIDEr"] == 125.3 and gcn.values["c40:CIDEr"] == 126.5
    assert _row(t, "RFNet [20]").values["c40:BLEU-4"] == 69.2
    assert [c.label for c in t.columns][-1] == "CIDEr-D"


def test_xlan_table1_transcription():
    t = load_table(PAPERS / "xlan/tables/xlan_table1.yaml")
    assert [(s.name, len(s.rows)) for s in t.sections] == [("Single model", 12), ("Ensemble/Fusion", 8)]
    single, ensemble = t.sections[0].rows, t.sections[1].rows
    assert [r.labels["model"] for r in single] == [
        "LSTM [33]", "SCST [28]", "LSTM-A [40]", "RFNet [13]", "Up-Down [2]", "GCN-LSTM [38]", "LBPF [26]",
        "SGAE [36]", "AoANet [12]", "X-LAN", "Transformer [29]", "X-Transformer"]
    assert [r.labels["model"] for r in ensemble] == [
        "SCST [28] Σ", "RFNet [13] Σ", "GCN-LSTM [38] Σ", "SGAE [36] Σ", "HIP [39] Σ", "AoANet [12] Σ", "X-LAN Σ",
        "X-Transformer Σ"]
    variants = {r.labels["model"]: r.variant for r in t.rows if not r.cited}
    assert variants == {
        "LSTM [33]": {"xe": "showtell", "scst": "showtell_scst"},
        "SCST [28]": {"xe": "att2in", "scst": "att2in_scst"},
        "Up-Down [2]": {"xe": "updown", "scst": "updown_scst"},
        "AoANet [12]": {"xe": "aoanet", "scst": "aoanet_scst"},
        "X-LAN": {"xe": "xlan", "scst": "xlan_scst"},
        "Transformer [29]": {"xe": "transformer", "scst": "transformer_scst"},
        "X-Transformer": {"xe": "xtransformer", "scst": "xtransformer_scst"},
        "X-LAN Σ": {"xe": "xlan_ensemble", "scst": "xlan_scst_ensemble"},
        "X-Transformer Σ": {"xe": "xtransformer_ensemble", "scst": "xtransformer_scst_ensemble"}}
    assert _row(t, "AoANet [12] Σ").cited and _row(t, "SCST [28] Σ").cited
    lstm = single[0].values
    assert [lstm[f"xe:{m}"] for m in METRICS] == [None, None, None, 29.6, 25.2, 52.6, 94.0, None]
    assert [lstm[f"scst:{m}"] for m in METRICS] == [None, None, None, 31.9, 25.5, 54.3, 106.3, None]
    xlan = _row(t, "X-LAN").values
    assert [xlan[f"xe:{m}"] for m in METRICS] == [78.0, 62.3, 48.9, 38.2, 28.8, 58.0, 122.0, 21.9]
    assert [xlan[f"scst:{m}"] for m in METRICS] == [80.8, 65.6, 51.4, 39.5, 29.5, 59.2, 132.0, 23.4]
    rfnet = _row(t, "RFNet [13]").values
    assert (rfnet["xe:BLEU-2"], rfnet["xe:BLEU-3"], rfnet["xe:ROUGE-L"], rfnet["scst:BLEU-3"]) == (60.4, 46.6, 56.5, 48.4)
    assert _row(t, "LBPF [26]").values["xe:CIDEr"] == 116.4 and _row(t, "Transformer [29]").values["scst:CIDEr"] == 128.3
    assert _row(t, "X-Transformer").values["scst:CIDEr"] == 132.8
    sgae = _row(t, "SGAE [36] Σ").values
    assert all(sgae[f"xe:{m}"] is None for m in METRICS) and sgae["scst:BLEU-1"] == 81.0 and sgae["scst:CIDEr"] == 129.1
    hip = _row(t, "HIP [39] Σ").values
    assert hip["xe:BLEU-1"] is None and hip["scst:BLEU-1"] is None and hip["scst:CIDEr"] == 130.6
    assert _row(t, "X-LAN Σ").values["scst:CIDEr"] == 133.7 and _row(t, "X-LAN Σ").values["xe:BLEU-1"] == 78.8
    xt = ensemble[-1]
    assert [xt.values[f"scst:{m}"] for m in METRICS] == [81.7, 66.8, 52.6, 40.7, 29.9, 59.7, 135.3, 23.8]
    assert xt.values["xe:CIDEr"] == 122.1 and xt.values["xe:BLEU-1"] == 77.8
    assert any('"817"' in n and "81.7" in n for n in xt.notes)  # the corrected cell says so


def test_xlan_table2_transcription():
    t = load_table(PAPERS / "xlan/tables/xlan_table2.yaml")
    assert [(s.name, len(s.rows)) for s in t.sections] == [("Online leaderboard", 11)]
    assert [r.labels["model"] for r in t.rows] == [
        "LSTM-A (ResNet-152) [40]", "Up-Down (ResNet-101) [2]", "RFNet (ResNet+DenseNet+Inception) [13]",
        "SGAE (ResNet-101) [36]", "GCN-LSTM (ResNet-101) [38]", "AoANet (ResNet-101) [12]", "HIP (SENet-154) [39]",
        "X-LAN (ResNet-101)", "X-LAN (SENet-154)", "X-Transformer (ResNet-101)", "X-Transformer (SENet-154)"]
    assert [r.variant for r in t.rows] == [None, "updown_scst", None, None, None, "aoanet_scst", None,
                                           "xlan_scst_ensemble", None, "xtransformer_scst_ensemble", None]
    assert t.rows[0].values == _online([78.7, 93.7, 62.7, 86.7, 47.6, 76.5, 35.6, 65.2, 27.0, 35.4, 56.4, 70.5,
                                        116.0, 118.0])
    assert t.rows[-1].values == _online([81.9, 95.7, 66.9, 90.5, 52.4, 82.5, 40.3, 72.4, 29.6, 39.2, 59.5, 75.0,
                                         131.1, 133.5])
    assert _row(t, "X-LAN (ResNet-101)").values == _online([81.1, 95.3, 66.0, 89.8, 51.5, 81.5, 39.5, 71.4, 29.4,
                                                            38.9, 59.2, 74.7, 128.0, 130.3])
    gcn = _row(t, "GCN-LSTM (ResNet-101) [38]").values
    assert (gcn["c5:BLEU-1"], gcn["c40:BLEU-1"]) == (80.8, 95.2)
    assert _row(t, "HIP (SENet-154) [39]").values["c40:CIDEr"] == 130.2
    assert any("single model" in n for n in _row(t, "AoANet (ResNet-101) [12]").notes)


def test_eta_table1_transcription():
    t = load_table(PAPERS / "eta/tables/eta_table1.yaml")
    assert [(f.key, f.label) for f in t.label_fields] == [("model", "Model"), ("regions", "Proposal"),
                                                          ("attributes", "Semantic")]
    assert [(s.name, len(s.rows)) for s in t.sections] == [("Offline evaluation", 7)]
    assert [tuple(r.labels.values()) for r in t.rows] == [
        ("SCST [30]", "✗", "✗"), ("LSTM-A [43]", "✗", "✓"), ("VS-LSTM [22]", "✓", "✓"), ("Up-Down [2]", "✓", "✗"),
        ("GCN-LSTM_fuse [42]", "✓", "✓"), ("ETA", "✓", "✓"), ("ETA_fuse", "✓", "✓")]
    assert [r.variant for r in t.rows] == [
        {"xe": "att2in", "scst": "att2in_scst"}, None, None, {"xe": "updown", "scst": "updown_scst"}, None,
        {"xe": "eta", "scst": "eta_scst"}, {"xe": "eta_fuse", "scst": "eta_fuse_scst"}]
    assert list(t.rows[0].values.values()) == [None, 30.0, 25.9, 53.4, 99.4, None, None, 34.2, 26.7, 55.7, 114.0, None]
    vs = _row(t, "VS-LSTM [22]").values
    assert (vs["xe:BLEU-1"], vs["xe:ROUGE-L"], vs["xe:CIDEr"], vs["scst:ROUGE-L"], vs["scst:SPICE"]) == (76.3, None, 110.2, None, None)
    assert _row(t, "GCN-LSTM_fuse [42]").values["scst:CIDEr"] == 128.7
    assert list(_row(t, "ETA").values.values()) == [77.3, 37.1, 28.2, 57.1, 117.9, 21.4, 81.5, 39.3, 28.8, 58.9, 126.6, 22.7]
    assert list(t.rows[-1].values.values()) == [77.6, 37.8, 28.4, 57.4, 119.3, 21.6, 81.5, 39.9, 28.9, 59.0, 127.6, 22.6]


def test_eta_table3_transcription():
    t = load_table(PAPERS / "eta/tables/eta_table3.yaml")
    assert [(s.name, len(s.rows)) for s in t.sections] == [("Online leaderboard", 6)]
    assert [r.labels["model"] for r in t.rows] == ["SCST", "LSTM-A", "VS-LSTM", "Up-Down", "GCN-LSTM", "ETA"]
    assert [r.variant for r in t.rows] == ["att2in_scst", None, None, "updown_scst", None, "eta_scst_ensemble"]
    assert t.rows[0].values == _online([78.1, 93.7, 61.9, 86.0, 47.0, 75.9, 35.2, 64.5, 27.0, 35.3, 56.3, 70.7,
                                        114.7, 116.0])  # M c40 35.3 as printed here (AoANet prints 35.5)
    assert t.rows[-1].values == _online([81.2, 95.0, 65.5, 89.0, 50.9, 80.4, 38.9, 70.2, 28.6, 38.0, 58.6, 73.9,
                                         122.1, 124.4])
    assert _row(t, "VS-LSTM").values["c40:BLEU-1"] == 94.6 and _row(t, "VS-LSTM").values["c5:CIDEr"] == 116.6
    assert _row(t, "GCN-LSTM").values["c5:BLEU-1"] is None and _row(t, "GCN-LSTM").values["c5:BLEU-2"] == 65.5
    assert any("three models" in n for n in t.rows[-1].notes)


def _plain(values: list[float | None]) -> dict[str, float | None]:
    """Row values of a table with the columns B@1, B@4, M, R, C, S, in the printed order."""
    return dict(zip(["BLEU-1", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr", "SPICE"], values, strict=True))


def test_eta_table2_transcription():
    t = load_table(PAPERS / "eta/tables/eta_table2.yaml")
    assert [(s.name, len(s.rows)) for s in t.sections] == [("Single modality", 10)]
    assert [(r.labels["model"], r.variant) for r in t.rows] == [
        ("VS-LSTM_s", None), ("VS-LSTM_v", None), ("VS-LSTM", None), ("GCN-LSTM_s", None), ("GCN-LSTM_v", None),
        ("GCN-LSTM_fuse", None), ("Transformer_s", "transformer_s"), ("Transformer_v", "transformer_v"),
        ("ETA", "eta"), ("ETA^oracle", "eta_oracle")]
    assert t.rows[0].values == _plain([74.3, 33.3, 26.5, None, 105.1, None])  # VS-LSTM prints no R and no S
    assert _row(t, "Transformer_v").values == _plain([75.9, 34.0, 27.5, 56.1, 112.2, 21.0])
    assert t.rows[-1].values == _plain([97.0, 76.7, 47.9, 84.2, 204.2, 34.7])
    eta1 = load_table(PAPERS / "eta/tables/eta_table1.yaml")  # the rows Table 1 repeats: its cross-entropy numbers
    for label, in_table1 in (("VS-LSTM", "VS-LSTM [22]"), ("GCN-LSTM_fuse", "GCN-LSTM_fuse [42]"), ("ETA", "ETA")):
        xe = {k.split(":")[1]: v for k, v in _row(eta1, in_table1).values.items() if k.startswith("xe:")}
        assert _row(t, label).values == xe, label
    assert {(c.better, c.worse) for c in t.claims} == {("eta", "transformer_v"), ("eta", "transformer_s"),
                                                       ("eta_oracle", "eta")}


def test_eta_table4_transcription():
    t = load_table(PAPERS / "eta/tables/eta_table4.yaml")
    assert [(s.name, len(s.rows)) for s in t.sections] == [("Model structures", 7)]
    assert [(r.labels["model"], r.variant) for r in t.rows] == [
        ("LSTM [18]", "softatt_grid"), ("Convolution [3]", "convcap_grid"), ("Transformer_s", "transformer_s"),
        ("Transformer_s - Encoder", "transformer_s_noenc"), ("Transformer_v", "transformer_v_grid"),
        ("Transformer_v - Encoder", "transformer_v_grid_noenc"), ("ETA", "eta_grid")]
    assert t.rows[0].values == _plain([71.3, 30.3, 24.7, 52.5, 91.2, 17.2])
    assert _row(t, "Transformer_v - Encoder").values == _plain([70.2, 28.2, 24.2, 51.6, 91.8, 17.2])
    assert t.rows[-1].values == _plain([72.2, 31.9, 25.7, 53.4, 99.2, 18.6])
    eta2 = load_table(PAPERS / "eta/tables/eta_table2.yaml")  # the semantic-only Transformer: the same system and numbers
    assert _row(t, "Transformer_s").values == _row(eta2, "Transformer_s").values
    for encoder, none in (("Transformer_s", "Transformer_s - Encoder"), ("Transformer_v", "Transformer_v - Encoder")):
        assert all(_row(t, encoder).values[k] > v for k, v in _row(t, none).values.items())  # "over all the metrics"
    assert {(c.better, c.worse) for c in t.claims} == {
        ("transformer_s", "transformer_s_noenc"), ("transformer_v_grid", "transformer_v_grid_noenc"),
        ("eta_grid", "transformer_s"), ("eta_grid", "transformer_v_grid"), ("eta_grid", "softatt_grid"),
        ("eta_grid", "convcap_grid")}


def test_eta_table5_transcription():
    t = load_table(PAPERS / "eta/tables/eta_table5.yaml")
    assert [(s.name, len(s.rows)) for s in t.sections] == [("Ablation", 7)]
    assert [(r.labels["model"], r.variant) for r in t.rows] == [
        ("Transformer_v", "transformer_v_scst"), ("Transformer_s", "transformer_s_scst"),
        ("T_v & T_s fuse", "tvs_fuse_scst"), ("Parallel", "parallel_scst"), ("Stacked_v", "stacked_v_scst"),
        ("Stacked_s", "stacked_s_scst"), ("ETA", "eta_scst")]
    assert t.rows[2].values == _plain([79.6, 37.5, 27.6, 57.6, 118.7, 19.8])
    assert _row(t, "Stacked_v").values == _plain([80.7, 39.1, 28.6, 58.6, 125.0, 22.4])
    eta1 = load_table(PAPERS / "eta/tables/eta_table1.yaml")  # ETA repeats Table 1's sequence-level row
    assert _row(t, "ETA").values == {k.split(":")[1]: v for k, v in _row(eta1, "ETA").values.items()
                                     if k.startswith("scst:")}
    claims = {c.id: c for c in t.claims}
    assert len(claims) == 11
    text_not_table = claims["parallel_over_stacked_v"]  # the text's PA > SA_v, which the printed CIDEr-D reverses
    assert (text_not_table.paper_worse, text_not_table.paper_better) == (125.0, 124.9)
    assert "disagrees" in text_not_table.note
    assert all(c.paper_better > c.paper_worse for c in t.claims if c is not text_not_table)


def test_eta_table6_transcription():
    t = load_table(PAPERS / "eta/tables/eta_table6.yaml")
    assert [(s.name, len(s.rows)) for s in t.sections] == [("Activation in GBC", 4)]
    assert [(r.labels["model"], r.variant) for r in t.rows] == [
        ("Sigmoid", "eta_sigmoid"), ("Tanh", "eta_tanh"), ("ReLU", "eta_relu"), ("Linear", "eta")]
    assert t.rows[0].values == _plain([74.5, 32.1, 26.3, 54.8, 104.9, 19.4])
    assert t.rows[-1].values == _plain([76.3, 36.3, 28.1, 56.5, 115.2, 21.0])
    assert {(c.better, c.worse) for c in t.claims} == {
        ("eta_relu", "eta_sigmoid"), ("eta_relu", "eta_tanh"), ("eta", "eta_sigmoid"), ("eta", "eta_tanh"),
        ("eta", "eta_relu")}
    assert all(c.paper_better > c.paper_worse for c in t.claims)


# ---------------------------------------------------------------- server-only cells


def _write_metrics(metrics_dir: Path, variant: str, environment: dict | None = None) -> None:
    test = dict(zip(METRICS, [0.7, 0.5, 0.4, 0.3, 0.25, 0.5, 1.1, None]))
    extra = {"environment": environment} if environment else {}
    (metrics_dir / f"{variant}.json").write_text(json.dumps({"variant": variant, **extra,
                                                             "test": {**test, "SPICE_status": SPICE_STATUS}}))


def test_headings_name_the_environment_of_the_runs_shown_and_list_mixed_ones(tmp_path, metrics_dir):
    here = {"cpu": "AMD EPYC", "cpu_capability": "AVX512", "threads": 2, "portable": False, "device": "cpu"}
    there = {**here, "cpu": "Intel Xeon", "cpu_capability": "AVX2", "portable": True}
    tables = tmp_path / "paper"
    tables.mkdir()
    (tables / "aoanet_online.yaml").write_text((PAPERS / "aoanet/tables/aoanet_online.yaml").read_text(encoding="utf-8"),
                                               encoding="utf-8")

    def heading(systems: set[str]) -> list[str]:
        build_all(tables, metrics_dir, systems, tmp_path / "out", tmp_path / "index.md")
        md = (tmp_path / "out" / "aoanet_online.md").read_text()
        return [line for line in md.splitlines() if line.startswith("**Computed on")]

    _write_metrics(metrics_dir, "aoanet_scst", here)
    _write_metrics(metrics_dir, "updown_scst", here)
    assert heading({"aoanet_scst", "updown_scst"}) == [
        "**Computed on: CPU AVX512, 2 threads (AMD EPYC), all 2 runs shown.**"]
    _write_metrics(metrics_dir, "updown_scst", there)
    assert heading({"aoanet_scst", "updown_scst"}) == [
        "**Computed on mixed environments: CPU AVX2, 2 threads, portable kernels (Intel Xeon): updown_scst; "
        "CPU AVX512, 2 threads (AMD EPYC): aoanet_scst.**"]
    _write_metrics(metrics_dir, "updown_scst")  # written before environments were recorded
    assert heading({"aoanet_scst", "updown_scst"})[0].endswith("(AMD EPYC): aoanet_scst; not recorded: updown_scst.**")
    assert heading(set()) == []  # nothing reproduced: nothing to name


def test_server_only_cells_name_the_submission_file_once_the_variant_has_metrics(tmp_path, metrics_dir):
    _write_metrics(metrics_dir, "aoanet_scst")  # updown_scst and att2in_scst stay pending
    tables = tmp_path / "paper"
    tables.mkdir()
    (tables / "aoanet_online.yaml").write_text((PAPERS / "aoanet/tables/aoanet_online.yaml").read_text(encoding="utf-8"),
                                               encoding="utf-8")
    build_all(tables, metrics_dir, {"aoanet_scst", "updown_scst", "att2in_scst"}, tmp_path / "out",
              tmp_path / "index.md")
    md = (tmp_path / "out" / "aoanet_online.md").read_text()
    rows = {k[0]: r for k, r in _md_rows(md).items()}
    ours = [v.split(" / ")[1] for k, v in rows["AoANet"].items() if k != "Model"]
    assert ours == ["server only"] * 14
    note = [line for line in md.splitlines() if line.startswith("‡ ")]
    assert note == ["‡ Server columns: the COCO test server scores the submission file "
                    "`data/predictions/<system>/captions_test2014_<system>_results.json` that the pipeline writes for "
                    "each of these systems (on synthetic data the test split stands in for test2014): `aoanet_scst`."]
    assert rows["AoANet"]["Model"].count("‡") == 1  # marked once, on the row label
    for pending in ("Up-Down [2]", "SCST [31]"):  # no metrics yet, so no submission file and no mark
        assert all(v.endswith(" / server only") for k, v in rows[pending].items() if k != "Model")
        assert "‡" not in rows[pending]["Model"]
    assert "`updown_scst`" not in md and "`att2in_scst`" not in md
    assert all(v.endswith(" / cited") for k, v in rows["LSTM-A [50]"].items() if k != "Model")
    assert (rows["AoANet"]["c5 CIDEr-D"], rows["AoANet"]["c40 CIDEr-D"]) == ("126.9 / server only",
                                                                           "129.6 / server only")
    kinds = [r["kind"] for r in csv.DictReader(io.StringIO((tmp_path / "out" / "aoanet_online.csv").read_text()))]
    assert kinds == ["pending", "cited", "pending", "cited", "cited", "cited", "server_only"]
    # a trained row of which every cell needs the server holds no number of ours: server only, not reproduced
    assert (tmp_path / "index.md").read_text().rstrip().endswith("| 0 | 1 | 2 | 4 |")


def test_build_all_transcribed_tables(tmp_path, metrics_dir, every_table):
    _write_metrics(metrics_dir, "updown_scst")
    out, index = tmp_path / "tables", tmp_path / "index.md"
    written = build_all(every_table, metrics_dir, {"updown", "updown_scst"}, out, index)
    assert written == [out / f"{t}.{ext}" for t in TABLE_IDS for ext in ("md", "csv")] + [index]
    counts = {}
    for line in index.read_text().splitlines():
        if line.startswith("| ["):
            cells = [c.strip() for c in line.strip("|").split("|")]
            counts[cells[0].split("]")[0].lstrip("[")] = tuple(int(c) for c in cells[-4:])
    assert counts == {  # reproduced / server only / pending / cited: the Up-Down row of each table is ours
        "aoanet_offline": (1, 0, 3, 4), "aoanet_online": (0, 1, 2, 4), "eta_table1": (1, 0, 3, 3),
        "eta_table2": (0, 0, 4, 6), "eta_table3": (0, 1, 2, 3), "eta_table4": (0, 0, 7, 0), "eta_table5": (0, 0, 7, 0),
        "eta_table6": (0, 0, 4, 0), "xlan_table1": (1, 0, 8, 11), "xlan_table2": (0, 1, 3, 7), "xlan_table3": (1, 0, 6, 0),
        "ban_glimpses": (0, 0, 6, 0), "ban_residual": (0, 0, 3, 0), "ban_coattention": (0, 0, 3, 0),
        "ban_counting": (0, 0, 2, 1), "ban_testdev": (0, 0, 3, 6), "ban_flickr_recall": (0, 0, 1, 8),
        "ban_flickr_types": (0, 0, 1, 4), "hoca_table1": (0, 0, 9, 0), "hoca_table2": (0, 0, 2, 10),
        "hoca_table3": (0, 0, 3, 0)}
    summary = json.loads((out / summary_name("paper")).read_text())
    assert [sorted(e) for e in summary] == [["cited", "id", "paper", "pending", "reproduced", "server_only", "table"]] * len(TABLE_IDS)
    xlan2 = (out / "xlan_table2.md").read_text()
    assert xlan2.rstrip().endswith("`data/predictions/<system>/captions_test2014_<system>_results.json` that the "
                                   "pipeline writes for each of these systems (on synthetic data the test split stands "
                                   "in for test2014): `updown_scst`.")
    xlan1 = {k[0]: r for k, r in _md_rows((out / "xlan_table1.md").read_text()).items()}
    assert (xlan1["Up-Down [2]"]["XE C"], xlan1["Up-Down [2]"]["CIDEr opt. C"]) == ("113.5 / 114.5", "120.1 / 110.0")
    assert xlan1["X-Transformer Σ"]["CIDEr opt. B@1"] == "81.7 / pending"
    eta1 = (out / "eta_table1.md").read_text()
    assert "| Model | Proposal | Semantic |" in eta1 and "| ETA_fuse" in eta1
    for table in TABLE_IDS:  # every table fits a screen: no line of a sub-table wider than WIDTH
        md = (out / f"{table}.md").read_text()
        assert max(map(len, _table_lines(md))) <= WIDTH, table
        assert not re.search(r"\b(paper|ours) \|", md), table  # no "paper" and "ours" columns: one cell holds both
    groups = [line for line in (out / "aoanet_offline.md").read_text().splitlines() if line.startswith("## ")]
    assert groups == ["## Cross-Entropy Loss (XE)", "## CIDEr-D Score Optimization (CIDEr-D opt.)"]  # fits uncut
    wide = list(csv.reader(io.StringIO((out / "xlan_table1.csv").read_text())))[0]  # the CSV stays one wide table
    assert len(wide) == 4 + 4 * 16  # paper, ours (a mean over seeds), its sd and n per column
    assert wide[:6] == ["section", "model", "kind", "variant", "xe:BLEU-1_paper", "xe:BLEU-1_ours"]


@pytest.mark.parametrize("table_id, numbers, nulls, total", [
    # counted and summed over the table lines of the paper texts (X-LAN Table 1 with "817" read as 81.7)
    ("aoanet_offline", 82, 14, 4612.3),
    ("aoanet_online", 96, 2, 6833.5),
    ("xlan_table1", 248, 72, 14225.3),
    ("xlan_table2", 154, 0, 11259.0),
    ("eta_table1", 76, 8, 4376.0),
    ("eta_table2", 54, 6, 3239.7),
    ("eta_table3", 82, 2, 5763.8),
    ("eta_table4", 42, 0, 2026.0),
    ("eta_table5", 42, 0, 2424.2),
    ("eta_table6", 24, 0, 1288.2),
    ("ban_glimpses", 6, 0, 392.2),  # BAN's slides (shared/papers/004), lines 232-320
    ("ban_residual", 3, 0, 195.3),
    ("ban_coattention", 3, 0, 194.7),
    ("ban_counting", 2, 1, 105.7),
    ("ban_testdev", 9, 0, 541.0),
    ("ban_flickr_recall", 18, 9, 1053.0),
    ("ban_flickr_types", 40, 0, 2181.9),
])
def test_transcription_fingerprint(table_id, numbers, nulls, total):
    """Every printed number is transcribed: a mistyped, dropped or invented cell changes one of these."""
    values = [v for r in load_table(next(PAPERS.glob(f"*/tables/{table_id}.yaml"))).rows for v in r.values.values()]
    present = [v for v in values if v is not None]
    assert (len(present), len(values) - len(present)) == (numbers, nulls)
    assert round(sum(present), 1) == pytest.approx(total, abs=1e-6)


def test_rows_whose_best_epoch_is_the_last_say_they_were_still_improving(tmp_path, metrics_dir):
    table = load_table(_write_yaml(tmp_path, _small_table()))

    def markdown(best: int | None, epochs: int | None, stopped_by: str = "patience") -> str:
        _write_metrics(metrics_dir, "base")
        path = metrics_dir / "base.json"
        data = json.loads(path.read_text())
        if epochs is not None:
            data.update(history=[{"epoch": e, "val_CIDEr": 0.1 * e} for e in range(1, epochs + 1)], best_epoch=best,
                        stopped_by=stopped_by)
        path.write_text(json.dumps(data))
        return build_table(table, metrics_dir, {"base"}).markdown

    flagged = markdown(best=10, epochs=10)
    assert "| Ours† |" in flagged
    assert flagged.rstrip().endswith("† Best validation epoch = last epoch: still improving when its schedule ended, "
                                     "so it may be under-trained: `base` 10 of 10.")
    assert "| Ours† |" in markdown(best=10, epochs=10, stopped_by="max_epochs")  # whatever stopped it
    for best, epochs in ((8, 10), (None, None)):  # an earlier best; no curve (an ensemble, say)
        assert "still improving" not in markdown(best, epochs)


def test_a_footnote_rows_repeat_with_another_system_each_is_one_mark_with_one_note(tmp_path, metrics_dir):
    table = _small_table()
    table["column_groups"] = [{"id": "xe", "label": "Cross-Entropy Loss", "short": "XE"},
                              {"id": "rl", "label": "Self-critical", "short": "RL"}]
    table["columns"] = [{"key": "BLEU-4", "label": "B@4", "group": "xe"}, {"key": "BLEU-4", "label": "B@4", "group": "rl"}]
    table["sections"][0]["rows"] = [
        {"label": "A", "values": {"xe:BLEU-4": 1.0, "rl:BLEU-4": 2.0}, "variant": {"xe": "a", "rl": "a_rl"}},
        {"label": "B", "values": {"xe:BLEU-4": 1.0, "rl:BLEU-4": 2.0}, "variant": {"xe": "b", "rl": "b_rl"}},
        {"label": "C", "values": {"xe:BLEU-4": 1.0, "rl:BLEU-4": 2.0}, "variant": {"xe": "c", "rl": "c_rl"}}]
    for name, best in (("a", 10), ("a_rl", 2), ("b", 10), ("b_rl", 1), ("c", 4), ("c_rl", 1)):
        _write_metrics(metrics_dir, name)
        data = json.loads((metrics_dir / f"{name}.json").read_text())
        epochs = 2 if name.endswith("_rl") else 10
        data.update(history=[{"epoch": e} for e in range(1, epochs + 1)], best_epoch=best)
        (metrics_dir / f"{name}.json").write_text(json.dumps(data))
    md = build_table(load_table(_write_yaml(tmp_path, table)), metrics_dir,
                     {"a", "a_rl", "b", "b_rl", "c", "c_rl"}).markdown
    labels = [line.split("|")[1].strip() for line in md.splitlines() if line.startswith("| ") and "---" not in line]
    assert labels == ["Model", "A†", "B†", "C"] * 2  # one mark per row, however many of its systems it names
    notes = [line for line in md.splitlines() if "still improving" in line]
    assert notes == ["† Best validation epoch = last epoch: still improving when its schedule ended, so it may be "
                     "under-trained: `a` 10 of 10, `a_rl` 2 of 2, `b` 10 of 10."]
    assert "[^" not in md


def test_rows_of_systems_not_trained_say_so_in_the_readers_words(tmp_path, metrics_dir):
    table = _small_table()
    table["column_groups"] = [{"id": "xe", "label": "Cross-Entropy Loss", "short": "XE"},
                              {"id": "scst", "label": "CIDEr optimisation", "short": "SCST"}]
    table["columns"] = [{"key": "BLEU-4", "label": "B@4", "group": g} for g in ("xe", "scst")]
    table["sections"][0]["rows"] = [
        {"label": "ETA", "values": {"xe:BLEU-4": 1.0, "scst:BLEU-4": 2.0}, "variant": {"xe": "eta", "scst": "eta_scst"}},
        {"label": "Half", "values": {"xe:BLEU-4": 1.0, "scst:BLEU-4": 2.0}, "variant": {"xe": "updown", "scst": "h_scst"}}]
    md = build_table(load_table(_write_yaml(tmp_path, table)), metrics_dir, {"updown"}).markdown
    assert "[^1]: ETA: not trained yet." in md and "[^2]: Half (SCST): not trained yet." in md
    assert "`eta`" not in md and "registered" not in md


def _summary(path: Path, *entries: tuple) -> Path:
    path.write_text(json.dumps([{"id": i, "table": t, "paper": "P", "reproduced": r, "server_only": s, "pending": p,
                                 "cited": c} for i, t, r, s, p, c in entries]))
    return path


TITLES = {"xlan": "X-LAN / X-Transformer", "eta": "ETA-Transformer", "aoanet": "AoANet", "hoca": "HOCA / Low-Rank HOCA",
          "ban": "BAN"}  # the status table's papers, in its order (stages/index.py titles: the papers' records)


def test_status_table_counts_tables_systems_and_rows_per_paper(tmp_path, metrics_dir):
    for name in ("xlan", "xlan_scst", "showtell", "xlan_ensemble"):
        _write_metrics(metrics_dir, name)
    for name, stopped in (("xlan", "patience"), ("xlan_scst", "max_epochs"), ("showtell", "patience")):
        path = metrics_dir / f"{name}.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "stopped_by": stopped}))
    summaries = {"xlan": _summary(tmp_path / "xlan.json", ("x1", "Table 1", 2, 0, 1, 5), ("x2", "Table 2", 0, 3, 0, 2)),
                 "eta": _summary(tmp_path / "eta.json", ("e1", "Table 1", 1, 0, 4, 3))}
    systems = {"showtell": "baselines", "xlan": "xlan", "xlan_scst": "xlan", "xlan_dec": "xlan"}
    result = {o: ClaimResult(o, r, "images") for o, r in ((HOLDS, None), (UNCLEAR, SEEDS), (PENDING, None),
                                                           (UNTESTABLE, WORLD))}
    claims = ClaimsPage("", {"x1": {"c1": result[HOLDS], "c2": result[UNCLEAR], "c3": result[PENDING]},
                             "x2": {"c4": result[HOLDS], "c6": result[UNTESTABLE]},
                             "other": {"c5": result[HOLDS]}})  # e1 records no claims
    status = build_status(TITLES, summaries, systems, {"xlan_ensemble": "xlan"}, metrics_dir, claims)
    tables = status.split("\n\n")
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")[1:]]
            for line in tables[0].splitlines() if line.startswith("| ") and "---" not in line}
    assert list(rows) == ["Paper", "X-LAN / X-Transformer", "ETA-Transformer", "AoANet", "HOCA / Low-Rank HOCA", "BAN"]
    assert rows["Paper"] == ["Tables", "Systems", "Stopped by patience", "Rows run", "Server only", "Pending", "Cited"]
    assert rows["X-LAN / X-Transformer"] == ["2: Table 1, Table 2", "2 of 3 + 1 ensembles", "1 of 2", "2", "3", "1",
                                             "7"]
    assert rows["ETA-Transformer"] == ["1: Table 1", "0", "—", "1", "0", "4", "3"]
    assert rows["BAN"] == ["none yet", "0", "—", "—", "—", "—", "—"]
    tally = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")[1:]]
             for line in tables[1].splitlines() if line.startswith("| ") and "---" not in line}
    assert tally["Paper"] == ["Testable claims", "Hold", "Reversed", "Undecided: seeds", "Pending",
                              "Untestable on the world"]  # no claim undecided by a recipe: no such column
    assert tally["X-LAN / X-Transformer"] == ["4", "2", "0", "1", "1", "1"]  # the untestable one apart
    assert tally["ETA-Transformer"] == tally["BAN"] == ["—"] * 6
    assert "count under no paper; 1 of 1 stopped by patience" in " ".join(status.split())
    assert "Claims (`reports/claims.md`): each ordering" in " ".join(status.split())
    groups = {"showtell": ("showtell", "showtell_seed1"), "showtell_seed1": ("showtell_seed1", "showtell")}
    seeded = build_status(TITLES, summaries, {**systems, "showtell_seed1": "baselines"}, {}, metrics_dir, claims,
                          groups)
    assert "The 2 runs of the baselines that several papers share (`showtell` (2 seeds))" in " ".join(
        seeded.split())  # a seed copy is counted, and named by its system
    assert "not recorded yet" not in status
    assert max(len(line) for line in status.splitlines()) <= 120


def test_the_status_block_of_a_readme_is_replaced_between_its_markers():
    readme = f"# R\n\n{STATUS_BEGIN}\nold table\n{STATUS_END}\n\n## Quick start\n"
    new = replace_status(readme, "| new |\n")
    assert new == f"# R\n\n{STATUS_BEGIN}\n| new |\n{STATUS_END}\n\n## Quick start\n"
    assert status_block(new) == "| new |\n" and replace_status(new, "| new |\n") == new
    with pytest.raises(InputError, match="status:begin"):
        replace_status("# R\n", "| new |\n")


def test_a_wide_group_is_cut_into_the_fewest_even_runs_of_columns_that_fit_a_screen(tmp_path, metrics_dir):
    _write_metrics(metrics_dir, "base")
    table = _small_table()
    table["column_groups"] = [{"id": "xe", "label": "Cross-Entropy Loss", "short": "XE"}]
    table["columns"] = [{"key": m, "label": m, "group": "xe"} for m in METRICS]
    long_label = "A model whose name alone takes up more than half of a screen (ResNet-152, 101 layers) [40]"
    table["sections"] = [{"name": name, "rows": [{"label": f"{long_label} {name}", "values": dict.fromkeys(
        (f"xe:{m}" for m in METRICS), 12.5), "variant": {"xe": "base"}}]} for name in ("Single", "Ensemble")]
    md = build_table(load_table(_write_yaml(tmp_path, table)), metrics_dir, {"base"}).markdown
    widths = [max(map(len, block.splitlines())) for block in md.split("\n## ")[1:]]
    # the fewest runs: two runs of 4 columns beside this label would not fit
    assert len(widths) == 3 and max(widths) <= WIDTH < len(f"| {long_label} Ensemble |" + " 12.5 / 70.0 |" * 4)
    assert [line for line in md.splitlines() if line.startswith("## ")] == [
        "## Cross-Entropy Loss (XE): BLEU-1, BLEU-2, BLEU-3", "## Cross-Entropy Loss (XE): BLEU-4, METEOR, ROUGE-L",
        "## Cross-Entropy Loss (XE): CIDEr, SPICE"]
    assert md.count("| **Ensemble** |") == 3 and md.count(f"| {long_label} Single |") == 3
    assert f"| {long_label} Ensemble | 12.5 / 70.0 | 12.5 / 50.0 | 12.5 / 40.0 |" in md


def test_a_row_with_several_seeds_shows_their_mean_sd_and_n_and_waits_for_all(tmp_path, metrics_dir):
    table = load_table(_write_yaml(tmp_path, _small_table()))
    seeds = {"base": ("base", "base_seed1", "base_seed2")}
    for name, value in (("base", 0.30), ("base_seed1", 0.35), ("base_seed2", 0.40)):
        _write_metrics(metrics_dir, name)
        data = json.loads((metrics_dir / f"{name}.json").read_text())
        data["test"]["BLEU-4"] = value
        (metrics_dir / f"{name}.json").write_text(json.dumps(data))
    built = build_table(table, metrics_dir, {"base", "base_seed1", "base_seed2"}, seeds)
    values = [30.0, 35.0, 40.0]  # x100
    mean = sum(values) / 3
    sd = (sum((v - mean) ** 2 for v in values) / 2) ** 0.5  # the sample standard deviation, by a direct loop
    assert f"/ {mean:.1f} ± {sd:.1f} (3) |" in built.markdown and "mean ± sd (n)" in built.markdown
    row = next(csv.DictReader(io.StringIO(built.csv)))
    assert (float(row["BLEU-4_ours"]), float(row["BLEU-4_ours_sd"]), row["BLEU-4_ours_n"]) == (
        pytest.approx(mean), pytest.approx(sd), "3")
    alone = build_table(table, metrics_dir, {"base", "base_seed1", "base_seed2"})  # no groups: the one run
    assert f"/ {values[0]:.1f} |" in alone.markdown and next(csv.DictReader(io.StringIO(alone.csv)))["BLEU-4_ours_n"] == "1"
    (metrics_dir / "base_seed2.json").unlink()  # one seed missing: the row is pending, never a mean of fewer
    waiting = build_table(table, metrics_dir, {"base", "base_seed1", "base_seed2"}, seeds)
    assert waiting.counts["pending"] == 1 and "/ pending |" in waiting.markdown


def test_the_status_names_consecutive_tables_as_a_range():
    from crossmodal.reports.index_page import _table_labels

    assert _table_labels(["Table 1", "Table 2", "Table 3"]) == "Tables 1–3"
    assert _table_labels(["Table 1", "Table 3", "Table 4"]) == "Table 1, Table 3, Table 4"
    assert _table_labels(["Fig. 5", "Fig. 6"]) == "Fig. 5, Fig. 6"
    assert _table_labels(["Table 1", "Table 2"]) == "Table 1, Table 2"
    assert _table_labels(["Slide 'Residual Learning'", "Slide 'Flickr30k Entities Recall@1,5,10'"]) == "slides"


def test_a_real_split_table_reads_its_split_under_a_real_profile_and_test_on_synthetic_data(tmp_path):
    """BAN's ablations are on VQA 2.0 val: under the real profile (test-dev's answers with the server) such a table
    reads the metrics files' `val`; on synthetic data, `test` as every table does."""
    table = {**_small_table(variant="updown"), "real_split": "val"}
    (tables := tmp_path / "paper").mkdir()
    _write_yaml(tables, table)
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "updown.json").write_text(json.dumps({"variant": "updown", "test": {"BLEU-4": 0.30, "CIDEr": 1.1},
                                                     "val": {"BLEU-4": 0.25, "CIDEr": 0.9}}))
    for synthetic, expected in ((True, ("36.6 / 30.0", "- / 110.0")), (False, ("36.6 / 25.0", "- / 90.0"))):
        (metrics / "data_profile.json").write_text(json.dumps({"profile": "p", "synthetic": synthetic}))
        build_all(tables, metrics, {"updown"}, tmp_path / "out", tmp_path / "index.md")
        md = (tmp_path / "out" / "t.md").read_text()
        assert tuple(_md_rows(md)[("Ours",)].values())[1:] == expected
        assert ("our val-split value" in md and "Ours are on the val split" in md) == (not synthetic)
    (metrics / "updown.json").write_text(json.dumps({"variant": "updown", "test": {"BLEU-4": 0.30, "CIDEr": 1.1}}))
    with pytest.raises(InputError, match=r"updown\.json: expected an object with a 'val' metrics mapping"):
        build_all(tables, metrics, {"updown"}, tmp_path / "out2", tmp_path / "index.md")
    with pytest.raises(InputError, match="real_split must be val, got 'dev'"):
        load_table(_write_yaml(tables, {**table, "real_split": "dev"}))
