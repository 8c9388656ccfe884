"""Paper tables as data, and the builder that puts our numbers beside the paper's, cell by cell.

Each results table of a paper is transcribed once into `reports/paper_tables/<id>.yaml` (this package's
`paper_tables/`). Keeping the paper's numbers as data, not code, lets the loader check the transcription
strictly and lets one small builder render every table the same honest way: paper and ours side by side in one
cell "paper / ours", one sub-table per column group (cut further to fit WIDTH), the data profile named in the
header, cited rows kept, missing results shown as "pending", never a number.

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

Each row is of one kind (the CSV's `kind`, counted in `<paper>.summary.json` and the index): `reproduced` (our
numbers beside the paper's), `server_only` (trained, but every column needs the test server), `pending` (a system
not trained yet) or `cited` (another paper's system, not retrained). Footnotes speak of the systems, never of the
code: a footnote that several rows repeat with another system each is one mark (†, ‡) with one note naming them.

Inputs of the builder, in `metrics_dir`: `<variant>.json` = {"variant", "test": {metric: value or null,
"<metric>_status": why null, ...}, ...}; `reference_points.json` = {"<name>": {"test": {...}, optional
"caption", "note"}}; `data_profile.json` = {"profile", "synthetic", "<unit>": {"train", "val", "test"}
counts, "seed", ...}.
"""
from __future__ import annotations

import csv
import io
import math
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

import yaml

from crossmodal import paths
from crossmodal.environment import summary as environment_summary
from crossmodal.io import InputError, SafeLoader, read_json, write_json, write_text

REFERENCE_LABELS = {"constant_caption": "Constant caption", "human_ceiling": "Human ceiling"}
REFERENCE_HEADING = "Reference points (ours, same test split)"
WIDTH = 145  # the widest line a Markdown sub-table may have (a normal screen), where cutting its columns can reach it
KINDS = ("reproduced", "server_only", "pending", "cited")  # a row's kind, in the order the index counts them
KIND_LABELS = ("Rows run", "Server only", "Pending", "Cited")  # their columns in the index and the status table
ROWS_NOTE = ("Rows run: our numbers beside the paper's; server only: trained, but the COCO test server scores every "
             "column (the pipeline writes the submission file); pending: waiting for a system not trained yet; cited: "
             "other papers' systems, as printed.")
STILL_IMPROVING = ("Best validation epoch = last epoch: still improving when its schedule ended, so it may be "
                   "under-trained")
SERVER_FILES = ("Server columns: the COCO test server scores the submission file "
                f"`{paths.submission('<system>').as_posix()}` that the pipeline writes for each of these systems "
                "(on synthetic data the test split stands in for test2014)")


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


def _mapping(obj: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a mapping, got {type(obj).__name__}")
    unknown = sorted(str(k) for k in obj if k not in required and k not in optional)
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(unknown)}")
    missing = [k for k in required if k not in obj]
    if missing:
        raise InputError(f"{where}: missing key(s) {', '.join(missing)}")
    return obj


def _text(obj: Any, where: str) -> str:
    if not isinstance(obj, str) or not obj.strip():
        raise InputError(f"{where}: expected a non-empty string, got {obj!r}")
    return obj.strip()


def _number(obj: Any, where: str) -> float:
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
    top = _mapping(raw, str(path),
                   ("id", "paper", "source", "dataset", "unit", "scale", "columns", "sections"),
                   ("decimals", "note", "label_fields", "column_groups", "reference_points", "data_profile", "claims",
                    "real_split"))
    table_id = _text(top["id"], f"{path}: id")
    if table_id != path.stem:
        raise InputError(f"{path}: id {table_id!r} differs from the file name {path.stem!r}")
    source = _mapping(top["source"], f"{path}: source", ("table", "caption"))
    decimals = top.get("decimals", 1)
    if isinstance(decimals, bool) or not isinstance(decimals, int) or not 0 <= decimals <= 4:
        raise InputError(f"{path}: decimals must be an integer 0..4, got {decimals!r}")

    label_fields = []
    for i, f in enumerate(_list(top.get("label_fields", [{"key": "model", "label": "Model"}]), f"{path}: label_fields")):
        f = _mapping(f, f"{path}: label_fields[{i}]", ("key", "label"))
        label_fields.append(LabelField(_text(f["key"], f"{path}: label_fields[{i}].key"),
                                       _text(f["label"], f"{path}: label_fields[{i}].label")))
    _unique([f.key for f in label_fields], f"{path}: label_fields", "key(s)")

    groups = []
    for i, g in enumerate(top.get("column_groups") or []):
        g = _mapping(g, f"{path}: column_groups[{i}]", ("id", "label", "short"))
        groups.append(ColumnGroup(*(_text(g[k], f"{path}: column_groups[{i}].{k}") for k in ("id", "label", "short"))))
    group_ids = [g.id for g in groups]
    _unique(group_ids, f"{path}: column_groups", "id(s)")

    columns = []
    for i, c in enumerate(_list(top["columns"], f"{path}: columns")):
        where = f"{path}: columns[{i}]"
        c = _mapping(c, where, ("key", "label"), ("group", "server_only", "scale"))
        group = c.get("group")
        if group is not None and group not in group_ids:
            raise InputError(f"{where}: group {group!r} is not declared in column_groups")
        if not isinstance(c.get("server_only", False), bool):
            raise InputError(f"{where}: server_only must be true or false")
        scale = c.get("scale")
        columns.append(Column(_text(c["key"], f"{where}.key"), _text(c["label"], f"{where}.label"), group,
                              c.get("server_only", False), None if scale is None else _number(scale, f"{where}.scale")))
    _unique([c.id for c in columns], f"{path}: columns", "column id(s)")

    sections = []
    for s_i, s in enumerate(_list(top["sections"], f"{path}: sections")):
        s = _mapping(s, f"{path}: sections[{s_i}]", ("name", "rows"))
        name = _text(s["name"], f"{path}: sections[{s_i}].name")
        rows = tuple(_load_row(r, f"{path}: section {name!r} row {r_i + 1}", label_fields, columns, group_ids)
                     for r_i, r in enumerate(_list(s["rows"], f"{path}: section {name!r} rows")))
        sections.append(Section(name, rows))

    reference_points = top.get("reference_points")
    real_split = top.get("real_split")
    if real_split not in (None, "val"):
        raise InputError(f"{path}: real_split must be val, got {real_split!r}")
    scale = _number(top["scale"], f"{path}: scale")
    rows = [row for section in sections for row in section.rows]
    claims = () if top.get("claims") is None else _load_claims(top["claims"], str(path), rows, columns, scale)
    return PaperTable(
        id=table_id, paper=_text(top["paper"], f"{path}: paper"),
        source_table=_text(source["table"], f"{path}: source.table"),
        caption=" ".join(_text(source["caption"], f"{path}: source.caption").split()),
        dataset=_text(top["dataset"], f"{path}: dataset"), unit=_text(top["unit"], f"{path}: unit"),
        scale=scale, decimals=decimals,
        note=None if top.get("note") is None else _text(top["note"], f"{path}: note"),
        label_fields=tuple(label_fields), column_groups=tuple(groups), columns=tuple(columns), sections=tuple(sections),
        reference_points=None if reference_points is None else _text(reference_points, f"{path}: reference_points"),
        data_profile=_text(top.get("data_profile", "data_profile.json"), f"{path}: data_profile"), claims=claims,
        real_split=real_split,
    )


def _load_row(raw: Any, where: str, label_fields: tuple[LabelField, ...], columns: list[Column],
              group_ids: list[str]) -> Row:
    if isinstance(raw, dict) and isinstance(raw.get("label"), (str, dict)):  # name the row in every message
        label = raw["label"]
        where += f" ({label if isinstance(label, str) else ' | '.join(map(str, label.values()))})"
    raw = _mapping(raw, where, ("label", "values"), ("variant", "cited", "note"))
    label = raw["label"]
    keys = [f.key for f in label_fields]
    if isinstance(label, str) and len(keys) == 1:
        labels = {keys[0]: _text(label, f"{where}: label")}
    else:
        label = _mapping(label, f"{where}: label", tuple(keys))
        labels = {k: _text(label[k], f"{where}: label.{k}") for k in keys}

    values_raw = _mapping(raw["values"], f"{where}: values", tuple(c.id for c in columns))
    values = {cid: None if v is None else _number(v, f"{where}: values.{cid}") for cid, v in values_raw.items()}

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
        variant = {g: _text(v, f"{where}: variant.{g}") for g, v in _mapping(variant, f"{where}: variant", (),
                                                                              tuple(group_ids)).items()}
    elif variant is not None:
        variant = _text(variant, f"{where}: variant")
    note = raw.get("note", [])
    notes = tuple(" ".join(_text(n, f"{where}: note").split()) for n in (note if isinstance(note, list) else [note]))
    return Row(labels, values, variant, cited, notes)


def _load_claims(raw: Any, path: str, rows: list[Row], columns: list[Column], scale: float) -> tuple[Claim, ...]:
    """The `claims:` list of a table, each checked against the table's rows (see the module docstring)."""
    claims = []
    for i, c in enumerate(_list(raw, f"{path}: claims")):
        where = f"{path}: claims[{i}]" + (f" ({c['id']})" if isinstance(c, dict) and isinstance(c.get("id"), str)
                                          else "")
        c = _mapping(c, where, ("id", "text", "better", "worse", "quote", "where"), ("metric", "note", "untestable"))
        metric = _text(c.get("metric", "CIDEr"), f"{where}: metric")
        better, worse = _text(c["better"], f"{where}: better"), _text(c["worse"], f"{where}: worse")
        if better == worse:
            raise InputError(f"{where}: better and worse are both {better!r}")
        (paper_better, col_scale), (paper_worse, _) = (_paper_value(name, metric, rows, columns, f"{where}: {side}")
                                                       for name, side in ((better, "better"), (worse, "worse")))
        claims.append(Claim(
            id=_text(c["id"], f"{where}: id"), text=" ".join(_text(c["text"], f"{where}: text").split()),
            better=better, worse=worse, metric=metric, paper_better=paper_better, paper_worse=paper_worse,
            scale=scale if col_scale is None else col_scale,
            quote=" ".join(_text(c["quote"], f"{where}: quote").split()), where=_text(c["where"], f"{where}: where"),
            note=None if c.get("note") is None else " ".join(_text(c["note"], f"{where}: note").split()),
            untestable=None if c.get("untestable") is None else _untestable(c["untestable"], f"{where}: untestable")))
    _unique([c.id for c in claims], f"{path}: claims", "id(s)")
    return tuple(claims)


def _untestable(raw: Any, where: str) -> Untestable:
    u = _mapping(raw, where, ("reason", "link"))
    link = _text(u["link"], f"{where}: link")
    if "#" not in link or not link.split("#")[0].endswith(".md"):
        raise InputError(f"{where}: link must name a Markdown page and its section (page.md#anchor), not {link!r}")
    return Untestable(" ".join(_text(u["reason"], f"{where}: reason").split()), link)


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


PAPER_TABLES = Path(__file__).parent / "paper_tables"


def table_file(table_id: str, directory: Path = PAPER_TABLES) -> Path:
    """The transcription of table `table_id` (by default this package's paper_tables/<id>.yaml)."""
    return directory / f"{table_id}.yaml"


def load_tables(table_ids: list[str], directory: Path = PAPER_TABLES) -> list[PaperTable]:
    """The transcribed tables `table_ids`, in that order."""
    missing = [t for t in table_ids if not table_file(t, directory).is_file()]
    if missing:
        known = sorted(p.stem for p in directory.glob("*.yaml"))
        raise InputError(f"no transcribed table {missing[0]!r} in {directory} (known: {', '.join(known)})")
    return [load_table(table_file(t, directory)) for t in table_ids]


# ---------------------------------------------------------------- our results


def _profile_line(profile: Any, path: Path, dataset: str) -> str:
    """The header line that says, prominently, what data our numbers come from."""
    if not isinstance(profile, dict) or "profile" not in profile or "synthetic" not in profile:
        raise InputError(f"{path}: expected an object with 'profile' and 'synthetic'")
    name = _text(profile["profile"], f"{path}: profile")
    if not isinstance(profile["synthetic"], bool):
        raise InputError(f"{path}: synthetic must be true or false")
    parts = [f"{c['train']}/{c['val']}/{c['test']} {unit}" for unit, c in profile.items()
             if isinstance(c, dict) and {"train", "val", "test"} <= c.keys()]
    if "seed" in profile:
        parts.append(f"seed {profile['seed']}")
    line = f"Reproduced on: {name}" + (f" ({', '.join(parts)})" if parts else "")
    if profile["synthetic"]:
        line += f" — synthetic data, not {dataset}: compare orderings, not absolute values"
    return f"**{line}**"


class _Results:
    """Our metrics files per variant, each read once; a variant's metrics of one split (`test`, or a table's
    `real_split`) are None while it is pending."""

    def __init__(self, metrics_dir: Path, registered: set[str], split: str = "test"):
        self.metrics_dir, self.registered, self.split, self._cache = metrics_dir, registered, split, {}

    def metrics(self, variant: str) -> dict:
        """The whole metrics file of a registered variant (an InputError when it is missing or malformed)."""
        if self.test(variant) is None:
            raise InputError(f"{self.metrics_dir / f'{variant}.json'}: missing (no metrics of {variant!r})")
        return self._cache[variant]

    def test(self, variant: str, split: str | None = None) -> dict | None:
        """The metrics of `split` (default: this reader's) of a variant, None while it is pending."""
        split = split or self.split
        path = self.metrics_dir / f"{variant}.json"
        if variant not in self._cache:
            if variant not in self.registered or not path.is_file():
                self._cache[variant] = None
            else:
                data = read_json(path)
                if isinstance(data, dict) and data.get("variant", variant) != variant:
                    raise InputError(f"{path}: names variant {data['variant']!r}, expected {variant!r}")
                self._cache[variant] = data
        data = self._cache[variant]
        if data is None:
            return None
        if not isinstance(data, dict) or not isinstance(data.get(split), dict):
            raise InputError(f"{path}: expected an object with a {split!r} metrics mapping")
        return data[split]

    def environment_line(self) -> str | None:
        """The heading line naming the environment of every variant read so far (environment.py): one line when
        they agree, each environment with its variants when they do not; None when no variant has results."""
        shown = {v: data.get("environment") for v, data in self._cache.items() if data is not None}
        if not shown:
            return None
        groups: dict[str, list[str]] = {}
        for variant, block in shown.items():
            recorded = isinstance(block, dict) and "cpu_capability" in block
            text = environment_summary(block) if recorded else "not recorded"
            groups.setdefault(text, []).append(variant)
        if len(groups) == 1:
            runs = f"all {len(shown)} runs shown" if len(shown) > 1 else "the one run shown"
            return f"**Computed on: {next(iter(groups))}, {runs}.**"
        parts = "; ".join(f"{text}: {', '.join(sorted(variants))}" for text, variants in sorted(groups.items()))
        return f"**Computed on mixed environments: {parts}.**"


def still_improving(variant: str, metrics: dict) -> str | None:
    """For a trained variant whose best validation epoch is its last (the schedule stopped it while it was still
    improving, so it may be under-trained), its entry in the table's † note, e.g. "`xlan` 10 of 10"; None for an
    earlier best, or metrics without a curve (ensembles, reference points)."""
    history, best = metrics.get("history"), metrics.get("best_epoch")
    if not isinstance(history, list) or not history or best != len(history):
        return None
    return f"`{variant}` {best} of {len(history)}"


def _our_value(test: dict, key: str, where: str) -> float | None:
    if key not in test:
        raise InputError(f"{where}: test metrics lack {key!r}")
    return None if test[key] is None else _number(test[key], f"{where}: test.{key}")


# ---------------------------------------------------------------- rendering


class _Footnotes:
    """GitHub-style footnotes, numbered in order of first use and shared by identical texts; and symbol notes:
    one mark (†) and one note for a footnote that rows repeat with another system each, naming them all."""

    def __init__(self):
        self.texts: list[str] = []
        self.symbols: dict[str, tuple[str, list[str]]] = {}  # mark -> (note, the systems it names)

    def mark(self, text: str) -> str:
        if text not in self.texts:
            self.texts.append(text)
        return f"[^{self.texts.index(text) + 1}]"

    def symbol(self, mark: str, text: str, item: str) -> str:
        """`mark`, whose one note reads `text` and names `item` (with the items of every other row marked so)."""
        note, items = self.symbols.setdefault(mark, (text, []))
        if note != text:
            raise ValueError(f"mark {mark} already stands for another note")
        if item not in items:
            items.append(item)
        return mark

    def lines(self) -> list[str]:
        lines = [f"[^{i + 1}]: {t}" for i, t in enumerate(self.texts)]
        for mark, (text, items) in self.symbols.items():
            lines += [""] * bool(lines) + [f"{mark} {text}: {', '.join(items)}."]
        return lines


def _fmt(value: float, decimals: int) -> str:
    return f"{value:.{decimals}f}"


def _csv_num(value: float | None) -> str:
    return "" if value is None else repr(round(value, 4))


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


@dataclass(frozen=True)
class _MdRow:
    """A Markdown row of every sub-table: its label cells and its cell per column id (none: a section heading)."""
    labels: list[str]
    cells: dict[str, str]


def _markdown_tables(table: PaperTable, rows: list[_MdRow]) -> list[str]:
    """The Markdown lines of the table: one sub-table per column group (headed by the group's label and short name, in
    the order of the columns; columns of no group first), each repeating every row with its labels, its cells
    "paper / ours" right-aligned. A sub-table whose lines would be wider than WIDTH is cut into the fewest runs of
    consecutive columns, even in size, that fit (down to one column each), each heading naming its columns."""
    parts: dict[str | None, list[Column]] = {}
    for c in table.columns:
        parts.setdefault(c.group, []).append(c)
    groups = {g.id: g for g in table.column_groups}
    labels = [f.label for f in table.label_fields]

    def sub_table(columns: list[Column]) -> list[str]:
        return ["", _md_row(labels + [c.label for c in columns]), "|" + "---|" * len(labels) + "---:|" * len(columns),
                *(_md_row(row.labels + [row.cells.get(c.id, "") for c in columns]) for row in rows)]

    lines = []
    for group, columns in sorted(parts.items(), key=lambda part: part[0] is not None):
        title = None if group is None else f"{groups[group].label} ({groups[group].short})"
        for n in range(1, len(columns) + 1):
            size = -(-len(columns) // n)
            runs = [columns[i:i + size] for i in range(0, len(columns), size)]
            tables = [sub_table(run) for run in runs]
            if max(len(line) for t in tables for line in t) <= WIDTH:
                break
        for run, sub in zip(runs, tables):
            span = ", ".join(c.label for c in run) if len(runs) > 1 else None
            heading = ": ".join(filter(None, [title, span]))
            lines += ["", f"## {heading}", *sub] if heading else sub
    return lines


@dataclass(frozen=True)
class BuiltTable:
    markdown: str
    csv: str
    counts: dict[str, int]  # rows of each kind (KINDS)


def build_table(table: PaperTable, metrics_dir: str | os.PathLike, registered_variants: set[str],
                seeds: dict[str, tuple[str, ...]] | None = None) -> BuiltTable:
    """Render one table (Markdown and CSV text) from the transcription and our metrics files. `seeds` gives a
    system's seed group (claims.seed_groups: the system and its reseeded copies): a cell of a system with several
    seeds is their mean ± sample standard deviation (n), pending until every seed is trained."""
    metrics_dir = Path(metrics_dir)
    profile_path = metrics_dir / table.data_profile
    profile = read_json(profile_path)
    split = table.split(profile)
    results = _Results(metrics_dir, set(registered_variants), split)
    group = lambda variant: (seeds or {}).get(variant, (variant,))  # noqa: E731
    notes = _Footnotes()
    n_labels = len(table.label_fields)
    scale = {c.id: table.scale if c.scale is None else c.scale for c in table.columns}
    short = {g.id: g.short for g in table.column_groups}
    csv_header = ["section"] + [f.key for f in table.label_fields] + ["kind", "variant"]
    for c in table.columns:
        csv_header += [f"{c.id}_paper", f"{c.id}_ours", f"{c.id}_ours_sd", f"{c.id}_ours_n"]
    md_rows: list[_MdRow] = []
    csv_rows = []
    counts = dict.fromkeys(KINDS, 0)

    def our_cell(tests: list[dict | None], c: Column, where: str) -> tuple[str, list[str]]:
        """Markdown text and CSV numbers (mean, sample sd, n) of one of our cells: one run's value, or the mean
        of a seed group's runs."""
        if c.server_only:
            return "server only", ["", "", ""]
        if not tests or any(t is None for t in tests):
            return "pending", ["", "", ""]
        values = [_our_value(t, c.key, where) for t in tests]
        if any(v is None for v in values):
            status = tests[0].get(f"{c.key}_status") or "not computed"
            return "n/a" + notes.mark(f"{c.key}: {status}"), ["", "", ""]
        values = [v * scale[c.id] for v in values]
        mean = sum(values) / len(values)
        if len(values) == 1:
            return _fmt(mean, table.decimals), [_csv_num(mean), "", "1"]
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        return (f"{_fmt(mean, table.decimals)} ± {_fmt(sd, table.decimals)} ({len(values)})",
                [_csv_num(mean), _csv_num(sd), str(len(values))])

    def heading(text: str) -> None:
        md_rows.append(_MdRow([f"**{text}**"] + [""] * (n_labels - 1), {}))

    for section in table.sections:
        if len(table.sections) > 1:
            heading(section.name)
        for row in section.rows:
            labels = [row.labels[f.key] for f in table.label_fields]
            plain = labels[0]
            labels[0] += "".join(notes.mark(n) for n in row.notes)
            labels[0] += "".join(notes.mark(n) for n in _not_trained(row, plain, results.registered, short))
            if row.cited:
                kind = "cited"
            elif not all(results.test(s) is not None for v in row.variants() for s in group(v)):
                kind = "pending"
            else:
                kind = "server_only" if all(c.server_only for c in table.columns) else "reproduced"
            if not row.cited:  # a trained variant's server columns: the submission file it wrote (‡)
                submitted = {row.variant_for(c) for c in table.columns if c.server_only} - {None}
                marks = [notes.symbol("‡", SERVER_FILES, f"`{name}`")
                         for name in sorted(v for v in submitted if results.test(v) is not None)]
                marks += [notes.symbol("†", STILL_IMPROVING, item)  # once each, in column order
                          for name in dict.fromkeys(s for v in row.variants() for s in group(v))
                          if results.test(name) is not None
                          and (item := still_improving(name, results.metrics(name)))]
                labels[0] += "".join(dict.fromkeys(marks))  # one mark each, however many systems it names
            counts[kind] += 1
            cells, numbers = {}, []
            for c in table.columns:
                paper = row.values[c.id]
                paper_text = "-" if paper is None else _fmt(paper, max(table.decimals, _decimals_of(paper)))
                if row.cited:
                    ours, ours_nums = "cited", ["", "", ""]
                else:
                    variant = row.variant_for(c)
                    tests = [results.test(s) for s in group(variant)] if variant else []
                    ours, ours_nums = our_cell(tests, c, str(metrics_dir / f"{variant}.json"))
                cells[c.id] = f"{paper_text} / {ours}"
                numbers += [_csv_num(paper), *ours_nums]
            md_rows.append(_MdRow(labels, cells))
            variant_text = (";".join(f"{g}={v}" for g, v in row.variant.items()) if isinstance(row.variant, dict)
                            else row.variant or "")
            csv_rows.append([section.name] + [row.labels[f.key] for f in table.label_fields]
                            + [kind, variant_text] + numbers)

    if table.reference_points:
        ref_path = metrics_dir / table.reference_points
        refs = read_json(ref_path)
        if isinstance(refs, dict):
            refs.pop("environment", None)  # the stage's own environment block (environment.py)
        if not isinstance(refs, dict) or not refs:
            raise InputError(f"{ref_path}: expected a non-empty object of reference points")
        heading(REFERENCE_HEADING)
        for name, point in refs.items():
            where = f"{ref_path}: {name}"
            point = _mapping(point, where, ("test",), ("caption", "note", "label", "chosen_on", "val_CIDEr"))
            if not isinstance(point["test"], dict):
                raise InputError(f"{where}: test must be a metrics mapping")
            plain = _text(point.get("label") or REFERENCE_LABELS.get(name, name), where + ": label")
            label = plain
            if "caption" in point:
                label += notes.mark(f'{plain}: the same sentence for every test image, '
                                    f'"{_text(point["caption"], where + ": caption")}".')
            if point.get("note"):
                label += notes.mark(_text(point["note"], where + ": note"))
            cells, numbers = {}, []
            for c in table.columns:
                cells[c.id], ours_nums = our_cell([point["test"]], c, where)
                numbers += ["", *ours_nums]
            md_rows.append(_MdRow([label] + [""] * (n_labels - 1), cells))
            csv_rows.append([REFERENCE_HEADING, plain] + [""] * (n_labels - 1)
                            + ["reference", ""] + numbers)

    lines = [
        f"# {table.id}: {table.source_table} of {table.paper}",
        "",
        _profile_line(profile, profile_path, table.dataset),
        "",
        *([line, ""] if (line := results.environment_line()) else []),
        f"Source: {table.source_table}. {table.caption}",
        "",
        f'Each cell reads "paper / ours": the paper\'s value as printed ({table.unit}; "-": none printed) / our '
        f'{split}-split value × {table.scale:g}, one run (seed 0) or "mean ± sd (n)" over n seeds. Instead of ours, '
        '"pending": not trained yet; "cited": another system, not retrained here'
        + ('; "server only": only the COCO test server computes it' if any(c.server_only for c in table.columns)
           else "")
        + (". Reference points: ours alone." if table.reference_points else "."),
    ]
    if split != "test":
        lines += ["", f"Ours are on the {split} split, as the paper's are, because this profile's test answers stay "
                  f"with its evaluation server; {split} also chose each run's epoch, so ours are optimistic."]
    if table.note:
        lines += ["", table.note]
    lines += _markdown_tables(table, md_rows)
    if notes.texts or notes.symbols:
        lines += ["", *notes.lines()]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(csv_header)
    writer.writerows(csv_rows)
    return BuiltTable("\n".join(lines) + "\n", buf.getvalue(), counts)


def _not_trained(row: Row, label: str, registered: set[str], short: dict[str, str]) -> list[str]:
    """Footnotes for the systems of a row that the pipeline does not train yet (no entry in params.yaml), in the
    reader's words: "ETA: not trained yet." (or per column group, when the row's other systems are trained)."""
    missing = [name for name in dict.fromkeys(row.variants()) if name not in registered]
    if not missing:
        return []
    if len(missing) == len(row.variants()) or not isinstance(row.variant, dict):
        return [f"{label}: not trained yet."]
    return [f"{label} ({short[group]}): not trained yet." for group, name in row.variant.items() if name in missing]


def _decimals_of(value: float) -> int:
    """Decimals the paper printed (e.g. 70.04 keeps 2), so a transcribed number is never re-rounded."""
    text = repr(value)
    return len(text.split(".")[1]) if "." in text and "e" not in text else 0


def build_paper(paper: str, table_ids: list[str], metrics_dir: Path, registered_variants: set[str],
                out_dir: Path, tables_dir: Path = PAPER_TABLES,
                seeds: dict[str, tuple[str, ...]] | None = None) -> list[Path]:
    """Write `<id>.md` and `<id>.csv` for each of a paper's tables and `<paper>.summary.json` (what the index
    lists); return the paths written. Every table is checked before anything is written."""
    built = [(t, build_table(t, metrics_dir, registered_variants, seeds))
             for t in load_tables(table_ids, tables_dir)]
    written, summary = [], []
    for table, result in built:
        for suffix, text in ((".md", result.markdown), (".csv", result.csv)):
            write_text(out_dir / f"{table.id}{suffix}", text)
            written.append(out_dir / f"{table.id}{suffix}")
        summary.append({"id": table.id, "table": table.source_table, "paper": table.paper, **result.counts})
    write_json(out_dir / summary_name(paper), summary)
    return written + [out_dir / summary_name(paper)]


def summary_name(paper: str) -> str:
    return f"{paper}.summary.json"


class Verdicts(Protocol):
    """What the index and the status table read of the claims page (claims.ClaimsPage, not imported: the `tables`
    stage's code closure stays without claims.py)."""

    def summary(self) -> str:
        """One line of counts of the claims by verdict."""

    def held(self, table_ids: Sequence[str]) -> str:
        """"k of m": of the m claims of the tables `table_ids` that the worlds can test, the k that hold; "—" when
        they have none."""

    def tally(self, table_ids: Sequence[str]) -> dict[str, str]:
        """The status table's claim columns for the tables `table_ids`: {column label: cell}, the same labels for
        any tables."""

    def tally_note(self) -> str:
        """What the claim columns of `tally` count (a sentence or two under the status table)."""


def build_index(summaries: list[Path], tables_dir: Path, index_path: Path, metrics_dir: Path | None = None,
                systems: dict[str, str] | None = None, status: str | None = None,
                claims: tuple[Path, Verdicts] | None = None, sections: list[str] = ()) -> None:
    """reports/index.md: first the link to the claims page (`claims`: its path and the page) with its counts, then the
    papers' status (`status`, from build_status), every built table with its source and row counts from the papers'
    summaries (and, with the claims page, how many of its claims hold); then every trained system ({name: paper})
    with its test scores from `metrics_dir`. `sections`: Markdown lines placed between the tables and the systems
    (the figures' list)."""
    head, index = ["# Reproduced tables"], []
    page = claims[1] if claims else None
    if claims:
        link = Path(os.path.relpath(claims[0], index_path.parent)).as_posix()
        head += ["", f"**Start here: [the papers' claims, tested over seeds]({link})** ({page.summary()})."]
    if status:
        index += ["## Status of the papers", "", status.rstrip("\n"), "", "## Tables", ""]
    index += ["Each table sets the paper's numbers and ours side by side, \"paper / ours\" in each cell; its header "
              "names the data we ran on. Rows: rows run (our numbers beside the paper's), server only (ours, but "
              "only the COCO test server scores them), pending (not trained yet), cited (another system, kept as "
              "printed)." + (" Claims that hold: of the orderings the paper asserts in that table that the worlds can "
                             "test, how many hold over seeds (the claims page, linked above)." if page else ""), "",
              "| Table | Source | Paper | " + " | ".join(KIND_LABELS) + " |" + " Claims that hold |" * bool(page),
              "|---|---|---|---|---|---|---|" + "---|" * bool(page)]
    rows = sorted((entry for path in summaries for entry in read_json(path)), key=lambda e: e["id"])
    for entry in rows:
        link = Path(os.path.relpath(tables_dir / f"{entry['id']}.md", index_path.parent)).as_posix()
        index.append(_md_row([f"[{entry['id']}]({link})", entry["table"], entry["paper"],
                              *(str(entry.get(kind, 0)) for kind in KINDS),
                              *([page.held([entry["id"]])] if page else [])]))
    if sections:
        index += ["", *sections]
    if systems:
        results = _Results(metrics_dir, set(systems))
        index += ["", "## Trained systems", "", "Test split, x100; params.yaml `<paper>.systems` and "
                  "`<paper>.ensembles`. Epochs: the best validation epoch / the epochs run, and what stopped the run (patience or the "
                  "`max_epochs` cap). Captioning: beam search; VQA: the official accuracy on test-dev; grounding: "
                  "recall of the entity phrases."]
        by_task: dict[str, list[str]] = {}
        for name in systems:
            by_task.setdefault(results.metrics(name).get("task", "captioning"), []).append(name)
        for task, (title, columns) in INDEX_TASKS.items():
            if task not in by_task:
                continue
            index += ["", f"### {title}", "", "| System | Paper | Objective | Epochs | "
                      + " | ".join(label for _, label in columns) + " |", "|---|---|---|---|" + "---:|" * len(columns)]
            for name in by_task[task]:
                data = results.metrics(name)
                test = data["test"]
                epochs = (f"{data['best_epoch']} / {len(data['history'])}, {data.get('stopped_by', 'max_epochs')}"
                          if data.get("history") else "")
                index.append(_md_row([f"`{name}`", systems[name], data.get("objective", ""), epochs,
                                      *(_fmt(100 * test[k], 1) if test.get(k) is not None else ""
                                        for k, _ in columns)]))
        head += ["", results.environment_line()]
    write_text(index_path, "\n".join([*head, "", *index]) + "\n")


# the index's table of trained systems, per task: (heading, [(test metric key, column label)])
INDEX_TASKS = {"captioning": ("Captioning", [("BLEU-4", "B@4"), ("METEOR", "METEOR"), ("CIDEr", "CIDEr-D")]),
               "vqa": ("VQA", [("overall", "overall"), ("yes/no", "yes/no"), ("number", "number"),
                               ("other", "other")]),
               "grounding": ("Phrase grounding", [("R@1", "R@1"), ("R@5", "R@5"), ("R@10", "R@10")])}


# ---------------------------------------------------------------- the status of the papers

# The five papers, in the order the README's status table lists them: params.yaml section -> the reader's name.
STATUS_PAPERS = {"xlan": "X-LAN / X-Transformer", "eta": "ETA-Transformer", "aoanet": "AoANet",
                 "hoca": "HOCA / Low-Rank HOCA", "ban": "BAN"}
SHARED_SECTION = "baselines"  # systems whose rows several papers' tables share
STATUS_BEGIN = "<!-- status:begin (generated from reports/: python scripts/readme_status.py) -->"
STATUS_END = "<!-- status:end -->"
SUMMARY_BEGIN = "<!-- summary:begin (generated from reports/: python scripts/readme_status.py) -->"  # the claims in
SUMMARY_END = "<!-- summary:end -->"  # plain words, the README's first lines under its title paragraph


def _table_labels(labels: list[str]) -> str:
    """"Table 1, Table 2, Table 3" -> "Tables 1–3" where the labels are consecutive numbered tables; tables that a
    paper's slides hold ("Slide '...'", BAN's talk) -> "slides"; else joined."""
    numbers = [label.removeprefix("Table ") for label in labels]
    if len(labels) > 2 and all(n.isdigit() for n in numbers) and \
            [int(n) for n in numbers] == list(range(int(numbers[0]), int(numbers[0]) + len(numbers))):
        return f"Tables {numbers[0]}–{numbers[-1]}"
    if all(label.startswith("Slide ") for label in labels):
        return "slides"
    return ", ".join(labels)


def build_status(summaries: dict[str, Path], systems: dict[str, str], ensembles: dict[str, str],
                 metrics_dir: Path, claims: Verdicts, seeds: dict[str, tuple[str, ...]] | None = None) -> str:
    """The status table of the papers (Markdown, with its notes): per paper of STATUS_PAPERS, the tables
    transcribed (`summaries`: {paper: its <paper>.summary.json}, papers without tables left out), the systems
    ({name: paper}) and ensembles trained (those with a metrics file in `metrics_dir`), the rows of its tables
    by kind; then, in a second table, its tables' claims by outcome on the claims page (`claims.tally`). `seeds` (claims.seed_groups)
    names the shared systems' seed copies by their system. reports/index.md and the README show the same text
    (scripts/readme_status.py)."""
    claim_labels = list(claims.tally([]))
    lines = ["| " + " | ".join(["Paper", "Tables", "Systems", "Stopped by patience", *KIND_LABELS]) + " |",
             "|---|---|" + "---:|" * (2 + len(KIND_LABELS))]
    tallies = ["| " + " | ".join(["Paper", *claim_labels]) + " |", "|---|" + "---:|" * len(claim_labels)]

    def trained(names: list[str]) -> str:
        done = sum((metrics_dir / f"{n}.json").is_file() for n in names)
        return str(done) if done == len(names) else f"{done} of {len(names)}"

    for paper, name in STATUS_PAPERS.items():
        own = [s for s, p in systems.items() if p == paper]
        combined = [e for e, p in ensembles.items() if p == paper]
        runs = [trained(own) + (f" + {trained(combined)} ensembles" if combined else ""), stopped_by_patience(own, metrics_dir)]
        entries = read_json(summaries[paper]) if paper in summaries else []
        tallies.append(_md_row([name, *claims.tally([e["id"] for e in entries]).values()]))
        if paper not in summaries:
            lines.append(_md_row([name, "none yet", *runs, *["—"] * len(KINDS)]))
            continue
        counts = {kind: sum(e.get(kind, 0) for e in entries) for kind in KINDS}
        lines.append(_md_row([name, f"{len(entries)}: " + _table_labels([e["table"] for e in entries]), *runs,
                              *(str(counts[kind]) for kind in KINDS)]))
    lines += ["", *tallies, "", ROWS_NOTE]
    shared = [s for s, p in {**systems, **ensembles}.items() if p == SHARED_SECTION]
    if shared:
        named, seen = [], set()
        for name in shared:  # a seed copy is named by the first of its group
            group = (seeds or {}).get(name, (name,))
            if name not in seen:
                named.append(f"`{name}`" + (f" ({len(group)} seeds)" if len(group) > 1 else ""))
            seen.update(group)
        lines[-1] += (f" The {len(shared)} runs of the baselines that several papers share ({', '.join(named)}) "
                      f"count under no paper; {stopped_by_patience([s for s in shared if s in systems], metrics_dir)} "
                      "stopped by patience.")
    lines[-1] += (" Stopped by patience: of the runs trained, those whose validation metric had not improved for "
                  "`train.patience` epochs (the others reached `train.max_epochs`). " + claims.tally_note())
    lines[-1:] = textwrap.wrap(lines[-1], width=116, break_long_words=False, break_on_hyphens=False)
    return "\n".join(lines) + "\n"


def stopped_by_patience(names: list[str], metrics_dir: Path) -> str:
    """"k of n": of the runs among `names` with a metrics file, how many early stopping ended; "—" for none."""
    runs = [read_json(metrics_dir / f"{n}.json") for n in names if (metrics_dir / f"{n}.json").is_file()]
    return f"{sum(r.get('stopped_by') == 'patience' for r in runs)} of {len(runs)}" if runs else "—"


def replace_status(text: str, status: str, begin: str = STATUS_BEGIN, end: str = STATUS_END) -> str:
    """`text` (the README) with the block between the markers `begin` and `end` (by default the status table's)
    replaced by `status`."""
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise InputError(f"expected one {begin!r} line and one {end!r} line after it")
    head, rest = text.split(begin, 1)
    return head + begin + "\n" + status + end + rest.split(end, 1)[1]


def status_block(text: str, begin: str = STATUS_BEGIN, end: str = STATUS_END) -> str:
    """The block of `text` (the README) between the markers `begin` and `end` (by default the status table's)."""
    if begin not in text or end not in text:
        raise InputError(f"no {begin!r} ... {end!r} block")
    return text.split(begin, 1)[1].split(end, 1)[0].lstrip("\n")
