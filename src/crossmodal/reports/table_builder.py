"""The builder that puts our numbers beside the paper's, cell by cell, for each transcribed table (table_schema.py).

One builder renders every table the same honest way: paper and ours side by side in one cell "paper / ours", one
sub-table per column group (cut further to fit WIDTH), the data profile named in the header, cited rows kept,
missing results shown as "pending", never a number.

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
from dataclasses import dataclass
from pathlib import Path

from crossmodal import paths
from crossmodal.io import InputError, read_json, write_json, write_text
from crossmodal.reports.results import Results, decimals_of, fmt, md_row, profile_line
from crossmodal.reports.table_schema import (Column, PaperTable, Row, expect_mapping, expect_number,
                                             expect_text, load_tables)

REFERENCE_LABELS = {"constant_caption": "Constant caption", "human_ceiling": "Human ceiling"}
REFERENCE_HEADING = "Reference points (ours, same test split)"
WIDTH = 145  # the widest line a Markdown sub-table may have (a normal screen), where cutting its columns can reach it
KINDS = ("reproduced", "server_only", "pending", "cited")  # a row's kind, in the order the index counts them
STILL_IMPROVING = ("Best validation epoch = last epoch: still improving when its schedule ended, so it may be "
                   "under-trained")
SERVER_FILES = ("Server columns: the COCO test server scores the submission file "
                f"`{paths.submission('<system>').as_posix()}` that the pipeline writes for each of these systems "
                "(on synthetic data the test split stands in for test2014)")


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
    return None if test[key] is None else expect_number(test[key], f"{where}: test.{key}")


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


def _csv_num(value: float | None) -> str:
    return "" if value is None else repr(round(value, 4))


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
        return ["", md_row(labels + [c.label for c in columns]), "|" + "---|" * len(labels) + "---:|" * len(columns),
                *(md_row(row.labels + [row.cells.get(c.id, "") for c in columns]) for row in rows)]

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
    rendering = _Rendering(table, Path(metrics_dir), set(registered_variants), seeds or {})
    for section in table.sections:
        if len(table.sections) > 1:
            rendering.heading(section.name)
        for row in section.rows:
            rendering.paper_row(section.name, row)
    if table.reference_points:
        rendering.reference_rows(rendering.metrics_dir / table.reference_points)
    return BuiltTable(rendering.markdown(), rendering.csv(), rendering.counts)


class _Rendering:
    """One table being rendered: its rows as Markdown and CSV, the rows counted by kind, and the footnotes, in the
    order the rows are added (a footnote's number is the order of its first use)."""

    def __init__(self, table: PaperTable, metrics_dir: Path, registered: set[str], seeds: dict[str, tuple[str, ...]]):
        self.table, self.metrics_dir, self.seeds = table, metrics_dir, seeds
        self.profile_path = metrics_dir / table.data_profile
        self.profile = read_json(self.profile_path)
        self.split = table.split(self.profile)
        self.results = Results(metrics_dir, registered, self.split)
        self.notes = _Footnotes()
        self.scale = {c.id: table.scale if c.scale is None else c.scale for c in table.columns}
        self.short = {g.id: g.short for g in table.column_groups}
        self.md_rows: list[_MdRow] = []
        self.csv_rows: list[list[str]] = []
        self.counts = dict.fromkeys(KINDS, 0)

    def group(self, variant: str) -> tuple[str, ...]:
        """The seed group of a variant: itself and its reseeded copies."""
        return self.seeds.get(variant, (variant,))

    def heading(self, text: str) -> None:
        self.md_rows.append(_MdRow([f"**{text}**"] + [""] * (len(self.table.label_fields) - 1), {}))

    def our_cell(self, tests: list[dict | None], c: Column, where: str) -> tuple[str, list[str]]:
        """Markdown text and CSV numbers (mean, sample sd, n) of one of our cells: one run's value, or the mean
        of a seed group's runs."""
        if c.server_only:
            return "server only", ["", "", ""]
        if not tests or any(t is None for t in tests):
            return "pending", ["", "", ""]
        values = [_our_value(t, c.key, where) for t in tests]
        if any(v is None for v in values):
            status = tests[0].get(f"{c.key}_status") or "not computed"
            return "n/a" + self.notes.mark(f"{c.key}: {status}"), ["", "", ""]
        values = [v * self.scale[c.id] for v in values]
        mean = sum(values) / len(values)
        decimals = self.table.decimals
        if len(values) == 1:
            return fmt(mean, decimals), [_csv_num(mean), "", "1"]
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        return (f"{fmt(mean, decimals)} ± {fmt(sd, decimals)} ({len(values)})",
                [_csv_num(mean), _csv_num(sd), str(len(values))])

    def kind(self, row: Row) -> str:
        """The row's kind (KINDS): cited, pending until every seed of its systems has results, else reproduced or,
        when every column needs the test server, server only."""
        if row.cited:
            return "cited"
        if not all(self.results.test(s) is not None for v in row.variants() for s in self.group(v)):
            return "pending"
        return "server_only" if all(c.server_only for c in self.table.columns) else "reproduced"

    def system_marks(self, row: Row) -> str:
        """The symbol marks of a trained row: ‡ for the submission files its server columns wrote, † for its runs
        still improving when their schedule ended (once each, in column order)."""
        results = self.results
        submitted = {row.variant_for(c) for c in self.table.columns if c.server_only} - {None}
        marks = [self.notes.symbol("‡", SERVER_FILES, f"`{name}`")
                 for name in sorted(v for v in submitted if results.test(v) is not None)]
        marks += [self.notes.symbol("†", STILL_IMPROVING, item)
                  for name in dict.fromkeys(s for v in row.variants() for s in self.group(v))
                  if results.test(name) is not None and (item := still_improving(name, results.metrics(name)))]
        return "".join(dict.fromkeys(marks))  # one mark each, however many systems it names

    def paper_row(self, section: str, row: Row) -> None:
        """Add a transcribed row: its labels with their footnotes and marks, and per column "paper / ours"."""
        table = self.table
        labels = [row.labels[f.key] for f in table.label_fields]
        plain = labels[0]
        labels[0] += "".join(self.notes.mark(n) for n in row.notes)
        labels[0] += "".join(self.notes.mark(n) for n in _not_trained(row, plain, self.results.registered,
                                                                        self.short))
        kind = self.kind(row)
        if not row.cited:
            labels[0] += self.system_marks(row)
        self.counts[kind] += 1
        cells, numbers = {}, []
        for c in table.columns:
            paper = row.values[c.id]
            paper_text = "-" if paper is None else fmt(paper, max(table.decimals, decimals_of(paper)))
            if row.cited:
                ours, ours_nums = "cited", ["", "", ""]
            else:
                variant = row.variant_for(c)
                tests = [self.results.test(s) for s in self.group(variant)] if variant else []
                ours, ours_nums = self.our_cell(tests, c, str(self.metrics_dir / f"{variant}.json"))
            cells[c.id] = f"{paper_text} / {ours}"
            numbers += [_csv_num(paper), *ours_nums]
        self.md_rows.append(_MdRow(labels, cells))
        variant_text = (";".join(f"{g}={v}" for g, v in row.variant.items()) if isinstance(row.variant, dict)
                        else row.variant or "")
        self.csv_rows.append([section] + [row.labels[f.key] for f in table.label_fields]
                             + [kind, variant_text] + numbers)

    def reference_rows(self, ref_path: Path) -> None:
        """Add our reference points (constant caption, human ceiling, ...) under their own heading: ours alone."""
        n_labels = len(self.table.label_fields)
        refs = read_json(ref_path)
        if isinstance(refs, dict):
            refs.pop("environment", None)  # the stage's own environment block (environment.py)
        if not isinstance(refs, dict) or not refs:
            raise InputError(f"{ref_path}: expected a non-empty object of reference points")
        self.heading(REFERENCE_HEADING)
        for name, point in refs.items():
            where = f"{ref_path}: {name}"
            point = expect_mapping(point, where, ("test",), ("caption", "note", "label", "chosen_on", "val_CIDEr"))
            if not isinstance(point["test"], dict):
                raise InputError(f"{where}: test must be a metrics mapping")
            plain = expect_text(point.get("label") or REFERENCE_LABELS.get(name, name), where + ": label")
            label = plain
            if "caption" in point:
                label += self.notes.mark(f'{plain}: the same sentence for every test image, '
                                         f'"{expect_text(point["caption"], where + ": caption")}".')
            if point.get("note"):
                label += self.notes.mark(expect_text(point["note"], where + ": note"))
            cells, numbers = {}, []
            for c in self.table.columns:
                cells[c.id], ours_nums = self.our_cell([point["test"]], c, where)
                numbers += ["", *ours_nums]
            self.md_rows.append(_MdRow([label] + [""] * (n_labels - 1), cells))
            self.csv_rows.append([REFERENCE_HEADING, plain] + [""] * (n_labels - 1) + ["reference", ""] + numbers)

    def markdown(self) -> str:
        """The Markdown page: the header (what data, what environment, how to read a cell), the sub-tables and
        the footnotes."""
        table, split = self.table, self.split
        lines = [
            f"# {table.id}: {table.source_table} of {table.paper}",
            "",
            profile_line(self.profile, self.profile_path, table.dataset),
            "",
            *([line, ""] if (line := self.results.environment_line()) else []),
            f"Source: {table.source_table}. {table.caption}",
            "",
            f'Each cell reads "paper / ours": the paper\'s value as printed ({table.unit}; "-": none printed) / our '
            f'{split}-split value × {table.scale:g}, one run (seed 0) or "mean ± sd (n)" over n seeds. Instead of '
            'ours, "pending": not trained yet; "cited": another system, not retrained here'
            + ('; "server only": only the COCO test server computes it' if any(c.server_only for c in table.columns)
               else "")
            + (". Reference points: ours alone." if table.reference_points else "."),
        ]
        if split != "test":
            lines += ["", f"Ours are on the {split} split, as the paper's are, because this profile's test answers "
                      f"stay with its evaluation server; {split} also chose each run's epoch, so ours are optimistic."]
        if table.note:
            lines += ["", table.note]
        lines += _markdown_tables(table, self.md_rows)
        if self.notes.texts or self.notes.symbols:
            lines += ["", *self.notes.lines()]
        return "\n".join(lines) + "\n"

    def csv(self) -> str:
        """The CSV text: per row its section, labels, kind and variant, then per column the paper's value and ours
        (mean, sample sd, n)."""
        header = ["section"] + [f.key for f in self.table.label_fields] + ["kind", "variant"]
        for c in self.table.columns:
            header += [f"{c.id}_paper", f"{c.id}_ours", f"{c.id}_ours_sd", f"{c.id}_ours_n"]
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(self.csv_rows)
        return buf.getvalue()


def _not_trained(row: Row, label: str, registered: set[str], short: dict[str, str]) -> list[str]:
    """Footnotes for the systems of a row that the pipeline does not train yet (no entry in params.yaml), in the
    reader's words: "ETA: not trained yet." (or per column group, when the row's other systems are trained)."""
    missing = [name for name in dict.fromkeys(row.variants()) if name not in registered]
    if not missing:
        return []
    if len(missing) == len(row.variants()) or not isinstance(row.variant, dict):
        return [f"{label}: not trained yet."]
    return [f"{label} ({short[group]}): not trained yet." for group, name in row.variant.items() if name in missing]


def build_paper(paper: str, table_ids: list[str], metrics_dir: Path, registered_variants: set[str],
                out_dir: Path, tables_dir: Path, seeds: dict[str, tuple[str, ...]] | None = None) -> list[Path]:
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

