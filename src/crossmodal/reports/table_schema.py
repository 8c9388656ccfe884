"""The paper tables as data: the schema of a transcribed table and its strict loader.

Each results table of a paper is transcribed once into `<id>.yaml` in its paper's folder (`papers/<paper>/tables/`,
`paths.paper_tables`). Keeping the paper's numbers as data, not code, lets this loader check the transcription strictly
and lets one small builder (table_builder.py) render every table the same honest way.

YAML format (every key below is the complete set; anything else is an error)::

    id: xlan_table3                    # must equal the file stem; names the outputs <id>.md / <id>.csv
    paper: "X-Linear Attention Networks for Image Captioning (Pan et al., CVPR 2020)"
    source:
      table: "Table 3"                 # the paper's table number
      caption: "Ablation study on ..." # the paper's caption text
    dataset: COCO                      # the paper's data, named in "synthetic data, not COCO"
    unit: "%"                          # unit of the paper's values
    scale: 100                         # paper value = our value x scale (our BLEU etc. are fractions)
    decimals: 1                        # optional (default 1): decimals of our rendered values
    note: "..."                        # optional, printed under the header
    label_fields:                      # optional (default: one field {key: model, label: Model})
      - {key: encoder, label: "Image Encoder"}
      - {key: decoder, label: "Sentence Decoder"}
    column_groups:                     # optional, e.g. Table 1's two training regimes
      - {id: xe, label: "Cross-Entropy Loss", short: "XE"}
    columns:
      - key: BLEU-4                    # our metric key, looked up in the metrics JSON's "test"
        label: "B@4"                   # the paper's column label
        group: xe                      # optional: a column_groups id
        server_only: false             # optional: only a test server computes it (ours: "server only";
                                       #   once a filling variant has metrics, one note (‡) names the
                                       #   submission files the pipeline wrote, paths.submission)
        scale: 100                     # optional: overrides the table's scale for this column
    reference_points: reference_points.json   # optional: add our constant-caption / human-ceiling rows
    data_profile: data_profile.json    # optional (this default): the metrics-dir file naming our data
    real_split: val                    # optional: the metrics split ours are read from when the data profile is
                                       #   not synthetic, instead of "test" (BAN's ablations are on VQA 2.0 val;
                                       #   real test-dev answers stay with the evaluation server)
    sections:
      - name: "Single model"           # e.g. "Single model", "Ensemble"
        rows:
          - label: {encoder: "Faster R-CNN", decoder: "LSTM + X-Linear attention"}  # a plain string
                                       #   when the table has a single label field
            values: {BLEU-4: 36.6, ...}  # every column id exactly once; null where the paper has none
            variant: xlan_dec          # our trained variant filling the row; with column groups also
                                       #   a mapping {group id: variant}
            cited: true                # instead of variant: another system that we do not train
            note: "..."                # optional footnote, or a list of them
    claims:                            # optional: the orderings the paper asserts (reports/claims.py tests them)
      - id: enc1_over_dec              # unique in the table
        text: "1 X-Linear encoder block over none"   # the claim in a few words (the cell of reports/claims.md)
        better: xlan_enc1              # the system (a row's variant) the paper says is better ...
        worse: xlan_dec                # ... than this one; both must fill rows of this table
        metric: CIDEr                  # optional (default CIDEr): a column key; the paper's two values are read
                                       #   from the rows (the one column of that key the system fills)
        quote: "..."                   # the paper's words, verbatim
        where: "Sec. 4.3, Ablation Study"   # page or section of the quote
        note: "..."                    # optional: e.g. how the text's wording differs from the table
        untestable:                    # optional: the worlds cannot express the mechanism the claim is about
          reason: "..."                #   one sentence: what the world lacks (reports/claims.md lists it apart,
          link: "docs/....md#anchor"   #   out of the claims that can hold); the doc section that says so

A column's id is its key, or `<group>:<key>` when it belongs to a group; row `values` and the CSV
columns `<id>_paper` / `<id>_ours` use that id.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from crossmodal.io import InputError, SafeLoader


@dataclass(frozen=True)
class LabelField:
    key: str
    label: str


@dataclass(frozen=True)
class ColumnGroup:
    id: str
    label: str
    short: str


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    group: str | None = None
    server_only: bool = False
    scale: float | None = None

    @property
    def id(self) -> str:
        return self.key if self.group is None else f"{self.group}:{self.key}"


@dataclass(frozen=True)
class Row:
    labels: dict[str, str]
    values: dict[str, float | None]
    variant: str | dict[str, str] | None
    cited: bool
    notes: tuple[str, ...] = ()

    def variant_for(self, column: Column) -> str | None:
        if isinstance(self.variant, dict):
            return self.variant.get(column.group or "")
        return self.variant

    def variants(self) -> list[str]:
        if isinstance(self.variant, dict):
            return list(self.variant.values())
        return [self.variant] if self.variant else []


@dataclass(frozen=True)
class Section:
    name: str
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class Claim:
    """An ordering the paper asserts: system `better` beats system `worse` on `metric`, with the paper's two values
    (read from the table's rows), their scale (paper value = ours x scale), its words and where they stand."""
    id: str
    text: str
    better: str
    worse: str
    metric: str
    paper_better: float
    paper_worse: float
    scale: float
    quote: str
    where: str
    note: str | None = None
    untestable: Untestable | None = None


@dataclass(frozen=True)
class Untestable:
    """Why the worlds cannot test a claim: one sentence, and the section of the docs (a path from the repository's
    root, with its anchor) that says so."""
    reason: str
    link: str


@dataclass(frozen=True)
class PaperTable:
    id: str
    paper: str
    source_table: str
    caption: str
    dataset: str
    unit: str
    scale: float
    decimals: int
    note: str | None
    label_fields: tuple[LabelField, ...]
    column_groups: tuple[ColumnGroup, ...]
    columns: tuple[Column, ...]
    sections: tuple[Section, ...]
    reference_points: str | None
    data_profile: str
    claims: tuple[Claim, ...] = ()
    real_split: str | None = None

    def split(self, profile: Any) -> str:
        """The metrics split ours are read from, given the data profile (data_profile.json's contents)."""
        real = isinstance(profile, dict) and profile.get("synthetic") is False
        return self.real_split if self.real_split and real else "test"

    @property
    def rows(self) -> list[Row]:
        return [row for section in self.sections for row in section.rows]


# ---------------------------------------------------------------- loading and validation


class _StrictLoader(SafeLoader):
    """SafeLoader that rejects duplicate keys: a repeated column in a row would silently drop a number."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def expect_mapping(obj: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
    """`obj`, a mapping with every key of `required` and no key outside `required` and `optional`; else an
    InputError that names `where` (as every check here does)."""
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a mapping, got {type(obj).__name__}")
    unknown = sorted(str(k) for k in obj if k not in required and k not in optional)
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(unknown)}")
    missing = [k for k in required if k not in obj]
    if missing:
        raise InputError(f"{where}: missing key(s) {', '.join(missing)}")
    return obj


def expect_text(obj: Any, where: str) -> str:
    """`obj`, a non-empty string, stripped."""
    if not isinstance(obj, str) or not obj.strip():
        raise InputError(f"{where}: expected a non-empty string, got {obj!r}")
    return obj.strip()


def expect_number(obj: Any, where: str) -> float:
    """`obj`, a finite number (not a boolean), as a float."""
    if isinstance(obj, bool) or not isinstance(obj, (int, float)) or not math.isfinite(obj):
        raise InputError(f"{where}: expected a number, got {obj!r}")
    return float(obj)


def _list(obj: Any, where: str) -> list:
    if not isinstance(obj, list) or not obj:
        raise InputError(f"{where}: expected a non-empty list")
    return obj


def _unique(ids: list[str], where: str, what: str) -> None:
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise InputError(f"{where}: duplicate {what} {', '.join(dup)}")


def load_table(path: str | os.PathLike) -> PaperTable:
    """Read and strictly validate one transcribed paper table."""
    path = Path(path)
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_StrictLoader)
    except FileNotFoundError:
        raise InputError(f"missing file: {path}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"{path}: not valid YAML ({getattr(err, 'problem', None) or err}{at})") from None
    top = expect_mapping(raw, str(path),
                         ("id", "paper", "source", "dataset", "unit", "scale", "columns", "sections"),
                         ("decimals", "note", "label_fields", "column_groups", "reference_points", "data_profile",
                          "claims", "real_split"))
    table_id = expect_text(top["id"], f"{path}: id")
    if table_id != path.stem:
        raise InputError(f"{path}: id {table_id!r} differs from the file name {path.stem!r}")
    source = expect_mapping(top["source"], f"{path}: source", ("table", "caption"))
    decimals = top.get("decimals", 1)
    if isinstance(decimals, bool) or not isinstance(decimals, int) or not 0 <= decimals <= 4:
        raise InputError(f"{path}: decimals must be an integer 0..4, got {decimals!r}")

    label_fields = []
    default_fields = [{"key": "model", "label": "Model"}]
    for i, f in enumerate(_list(top.get("label_fields", default_fields), f"{path}: label_fields")):
        f = expect_mapping(f, f"{path}: label_fields[{i}]", ("key", "label"))
        label_fields.append(LabelField(expect_text(f["key"], f"{path}: label_fields[{i}].key"),
                                       expect_text(f["label"], f"{path}: label_fields[{i}].label")))
    _unique([f.key for f in label_fields], f"{path}: label_fields", "key(s)")

    groups = []
    for i, g in enumerate(top.get("column_groups") or []):
        g = expect_mapping(g, f"{path}: column_groups[{i}]", ("id", "label", "short"))
        groups.append(ColumnGroup(*(expect_text(g[k], f"{path}: column_groups[{i}].{k}")
                                    for k in ("id", "label", "short"))))
    group_ids = [g.id for g in groups]
    _unique(group_ids, f"{path}: column_groups", "id(s)")

    columns = [_load_column(c, f"{path}: columns[{i}]", group_ids)
               for i, c in enumerate(_list(top["columns"], f"{path}: columns"))]
    _unique([c.id for c in columns], f"{path}: columns", "column id(s)")

    sections = []
    for s_i, s in enumerate(_list(top["sections"], f"{path}: sections")):
        s = expect_mapping(s, f"{path}: sections[{s_i}]", ("name", "rows"))
        name = expect_text(s["name"], f"{path}: sections[{s_i}].name")
        rows = tuple(_load_row(r, f"{path}: section {name!r} row {r_i + 1}", label_fields, columns, group_ids)
                     for r_i, r in enumerate(_list(s["rows"], f"{path}: section {name!r} rows")))
        sections.append(Section(name, rows))

    reference_points = top.get("reference_points")
    real_split = top.get("real_split")
    if real_split not in (None, "val"):
        raise InputError(f"{path}: real_split must be val, got {real_split!r}")
    scale = expect_number(top["scale"], f"{path}: scale")
    rows = [row for section in sections for row in section.rows]
    claims = () if top.get("claims") is None else _load_claims(top["claims"], str(path), rows, columns, scale)
    return PaperTable(
        id=table_id, paper=expect_text(top["paper"], f"{path}: paper"),
        source_table=expect_text(source["table"], f"{path}: source.table"),
        caption=" ".join(expect_text(source["caption"], f"{path}: source.caption").split()),
        dataset=expect_text(top["dataset"], f"{path}: dataset"), unit=expect_text(top["unit"], f"{path}: unit"),
        scale=scale, decimals=decimals,
        note=None if top.get("note") is None else expect_text(top["note"], f"{path}: note"),
        label_fields=tuple(label_fields), column_groups=tuple(groups), columns=tuple(columns), sections=tuple(sections),
        reference_points=(None if reference_points is None
                          else expect_text(reference_points, f"{path}: reference_points")),
        data_profile=expect_text(top.get("data_profile", "data_profile.json"), f"{path}: data_profile"), claims=claims,
        real_split=real_split,
    )


def _load_column(raw: Any, where: str, group_ids: list[str]) -> Column:
    c = expect_mapping(raw, where, ("key", "label"), ("group", "server_only", "scale"))
    group = c.get("group")
    if group is not None and group not in group_ids:
        raise InputError(f"{where}: group {group!r} is not declared in column_groups")
    if not isinstance(c.get("server_only", False), bool):
        raise InputError(f"{where}: server_only must be true or false")
    scale = c.get("scale")
    return Column(expect_text(c["key"], f"{where}.key"), expect_text(c["label"], f"{where}.label"), group,
                  c.get("server_only", False), None if scale is None else expect_number(scale, f"{where}.scale"))


def _load_row(raw: Any, where: str, label_fields: tuple[LabelField, ...], columns: list[Column],
              group_ids: list[str]) -> Row:
    if isinstance(raw, dict) and isinstance(raw.get("label"), (str, dict)):  # name the row in every message
        label = raw["label"]
        where += f" ({label if isinstance(label, str) else ' | '.join(map(str, label.values()))})"
    raw = expect_mapping(raw, where, ("label", "values"), ("variant", "cited", "note"))
    label = raw["label"]
    keys = [f.key for f in label_fields]
    if isinstance(label, str) and len(keys) == 1:
        labels = {keys[0]: expect_text(label, f"{where}: label")}
    else:
        label = expect_mapping(label, f"{where}: label", tuple(keys))
        labels = {k: expect_text(label[k], f"{where}: label.{k}") for k in keys}

    values_raw = expect_mapping(raw["values"], f"{where}: values", tuple(c.id for c in columns))
    values = {cid: None if v is None else expect_number(v, f"{where}: values.{cid}") for cid, v in values_raw.items()}

    cited = raw.get("cited", False)
    if not isinstance(cited, bool):
        raise InputError(f"{where}: cited must be true or false, got {cited!r}")
    variant = raw.get("variant")
    if cited and variant is not None:
        raise InputError(f"{where}: a row is either cited or filled by a variant, not both")
    if not cited and variant is None:
        raise InputError(f"{where}: needs 'variant: <name>' or 'cited: true'")
    if isinstance(variant, dict) and group_ids:
        if not variant:
            raise InputError(f"{where}: variant mapping is empty")
        given = expect_mapping(variant, f"{where}: variant", (), tuple(group_ids))
        variant = {g: expect_text(v, f"{where}: variant.{g}") for g, v in given.items()}
    elif variant is not None:
        variant = expect_text(variant, f"{where}: variant")
    note = raw.get("note", [])
    notes = tuple(" ".join(expect_text(n, f"{where}: note").split())
                  for n in (note if isinstance(note, list) else [note]))
    return Row(labels, values, variant, cited, notes)


def _load_claims(raw: Any, path: str, rows: list[Row], columns: list[Column], scale: float) -> tuple[Claim, ...]:
    """The `claims:` list of a table, each checked against the table's rows (see the module docstring)."""
    claims = []
    for i, c in enumerate(_list(raw, f"{path}: claims")):
        where = f"{path}: claims[{i}]" + (f" ({c['id']})" if isinstance(c, dict) and isinstance(c.get("id"), str)
                                          else "")
        c = expect_mapping(c, where, ("id", "text", "better", "worse", "quote", "where"),
                           ("metric", "note", "untestable"))
        metric = expect_text(c.get("metric", "CIDEr"), f"{where}: metric")
        better, worse = expect_text(c["better"], f"{where}: better"), expect_text(c["worse"], f"{where}: worse")
        if better == worse:
            raise InputError(f"{where}: better and worse are both {better!r}")
        (paper_better, col_scale), (paper_worse, _) = (_paper_value(name, metric, rows, columns, f"{where}: {side}")
                                                       for name, side in ((better, "better"), (worse, "worse")))
        claims.append(Claim(
            id=expect_text(c["id"], f"{where}: id"), text=" ".join(expect_text(c["text"], f"{where}: text").split()),
            better=better, worse=worse, metric=metric, paper_better=paper_better, paper_worse=paper_worse,
            scale=scale if col_scale is None else col_scale,
            quote=" ".join(expect_text(c["quote"], f"{where}: quote").split()),
            where=expect_text(c["where"], f"{where}: where"),
            note=None if c.get("note") is None else " ".join(expect_text(c["note"], f"{where}: note").split()),
            untestable=None if c.get("untestable") is None else _untestable(c["untestable"], f"{where}: untestable")))
    _unique([c.id for c in claims], f"{path}: claims", "id(s)")
    return tuple(claims)


def _untestable(raw: Any, where: str) -> Untestable:
    u = expect_mapping(raw, where, ("reason", "link"))
    link = expect_text(u["link"], f"{where}: link")
    if "#" not in link or not link.split("#")[0].endswith(".md"):
        raise InputError(f"{where}: link must name a Markdown page and its section (page.md#anchor), not {link!r}")
    return Untestable(" ".join(expect_text(u["reason"], f"{where}: reason").split()), link)


def _paper_value(system: str, metric: str, rows: list[Row], columns: list[Column],
                 where: str) -> tuple[float, float | None]:
    """The paper's value of `metric` in the one cell that `system` fills, and that column's own scale."""
    if not any(system in row.variants() for row in rows):
        names = sorted({v for row in rows for v in row.variants()})
        raise InputError(f"{where}: {system!r} fills no row of this table (its systems: {', '.join(names)})")
    cells = [(row, col) for row in rows for col in columns if col.key == metric and row.variant_for(col) == system]
    if len(cells) != 1:
        found = f"{len(cells)} columns ({', '.join(col.id for _, col in cells)})" if cells else "no column"
        raise InputError(f"{where}: {system!r} fills {found} of metric {metric!r}; a claim needs exactly one")
    (row, col), = cells
    if row.values[col.id] is None:
        raise InputError(f"{where}: the paper prints no {col.id} for {system!r}")
    return row.values[col.id], col.scale


def table_file(table_id: str, directory: Path) -> Path:
    """The transcription of table `table_id` in `directory` (a paper's: `paths.paper_tables(paper)`)."""
    return directory / f"{table_id}.yaml"


def load_tables(table_ids: list[str], directory: Path) -> list[PaperTable]:
    """The transcribed tables `table_ids` of `directory` (a paper's: `paths.paper_tables(paper)`), in that order."""
    missing = [t for t in table_ids if not table_file(t, directory).is_file()]
    if missing:
        known = sorted(p.stem for p in directory.glob("*.yaml"))
        raise InputError(f"no transcribed table {missing[0]!r} in {directory} (known: {', '.join(known)})")
    return [load_table(table_file(t, directory)) for t in table_ids]
