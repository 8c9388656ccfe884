"""reports/index.md, the page that leads to every result, and the status of the papers that it and the README show.

The index links the claims page first, then shows the papers' status (`build_status`), every built table with its
source and row counts (read from the `<paper>.summary.json` files the builder writes, table_builder.py), and every
trained system with its test scores. The README carries the same status table between markers
(`replace_status`, `status_block`; scripts/readme_status.py writes it).
"""
from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Mapping, Protocol, Sequence

from crossmodal.io import InputError, read_json, write_text
from crossmodal.reports.results import Results, fmt, md_row
from crossmodal.reports.table_builder import KINDS
from crossmodal.task_specs import DEFAULT, SPECS

KIND_LABELS = ("Rows run", "Server only", "Pending", "Cited")  # the columns of KINDS in the index and the status table
ROWS_NOTE = ("Rows run: our numbers beside the paper's; server only: trained, but the COCO test server scores every "
             "column (the pipeline writes the submission file); pending: waiting for a system not trained yet; cited: "
             "other papers' systems, as printed.")


class Verdicts(Protocol):
    """What the index and the status table read of the claims page (claims.ClaimsPage, not imported: these pages
    depend on what they read of the claims, not on how claims.py judges them)."""

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
        index.append(md_row([f"[{entry['id']}]({link})", entry["table"], entry["paper"],
                             *(str(entry.get(kind, 0)) for kind in KINDS),
                             *([page.held([entry["id"]])] if page else [])]))
    if sections:
        index += ["", *sections]
    if systems:
        results = Results(metrics_dir, set(systems))
        index += ["", "## Trained systems", "", "Test split, x100; params.yaml `<paper>.systems` and "
                  "`<paper>.ensembles`. Epochs: the best validation epoch / the epochs run, and what stopped the run "
                  "(patience or the `max_epochs` cap). Captioning: beam search; VQA: the official accuracy on "
                  "test-dev; grounding: recall of the entity phrases."]
        by_task: dict[str, list[str]] = {}
        for name in systems:
            by_task.setdefault(results.metrics(name).get("task", DEFAULT.name), []).append(name)
        for task, spec in SPECS.items():  # the tasks' order; each its heading and test columns (task_specs.py)
            if task not in by_task:
                continue
            columns = spec.columns
            index += ["", f"### {spec.heading}", "", "| System | Paper | Objective | Epochs | "
                      + " | ".join(label for _, label in columns) + " |", "|---|---|---|---|" + "---:|" * len(columns)]
            for name in by_task[task]:
                data = results.metrics(name)
                test = data["test"]
                epochs = (f"{data['best_epoch']} / {len(data['history'])}, {data.get('stopped_by', 'max_epochs')}"
                          if data.get("history") else "")
                index.append(md_row([f"`{name}`", systems[name], data.get("objective", ""), epochs,
                                     *(fmt(100 * test[k], 1) if test.get(k) is not None else ""
                                       for k, _ in columns)]))
        head += ["", results.environment_line()]
    write_text(index_path, "\n".join([*head, "", *index]) + "\n")


# ---------------------------------------------------------------- the status of the papers

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


def build_status(titles: Mapping[str, str], summaries: dict[str, Path], systems: dict[str, str],
                 ensembles: dict[str, str], metrics_dir: Path, claims: Verdicts,
                 seeds: dict[str, tuple[str, ...]] | None = None) -> str:
    """The status table of the papers (Markdown, with its notes): per paper of `titles` ({paper: its name in the
    table}, in the table's order; a section not there, the shared baselines, is counted in a note), the tables
    transcribed (`summaries`: {paper: its <paper>.summary.json}, papers without tables left out), the systems
    ({name: paper}) and ensembles trained (those with a metrics file in `metrics_dir`), the rows of its tables
    by kind; then, in a second table, its tables' claims by outcome on the claims page (`claims.tally`). `seeds`
    (claims.seed_groups) names the shared systems' seed copies by their system. reports/index.md and the README
    show the same text (scripts/readme_status.py)."""
    claim_labels = list(claims.tally([]))
    lines = ["| " + " | ".join(["Paper", "Tables", "Systems", "Stopped by patience", *KIND_LABELS]) + " |",
             "|---|---|" + "---:|" * (2 + len(KIND_LABELS))]
    tallies = ["| " + " | ".join(["Paper", *claim_labels]) + " |", "|---|" + "---:|" * len(claim_labels)]

    def trained(names: list[str]) -> str:
        done = sum((metrics_dir / f"{n}.json").is_file() for n in names)
        return str(done) if done == len(names) else f"{done} of {len(names)}"

    for paper, name in titles.items():
        own = [s for s, p in systems.items() if p == paper]
        combined = [e for e, p in ensembles.items() if p == paper]
        runs = [trained(own) + (f" + {trained(combined)} ensembles" if combined else ""),
                stopped_by_patience(own, metrics_dir)]
        entries = read_json(summaries[paper]) if paper in summaries else []
        tallies.append(md_row([name, *claims.tally([e["id"] for e in entries]).values()]))
        if paper not in summaries:
            lines.append(md_row([name, "none yet", *runs, *["—"] * len(KINDS)]))
            continue
        counts = {kind: sum(e.get(kind, 0) for e in entries) for kind in KINDS}
        lines.append(md_row([name, f"{len(entries)}: " + _table_labels([e["table"] for e in entries]), *runs,
                             *(str(counts[kind]) for kind in KINDS)]))
    lines += ["", *tallies, "", ROWS_NOTE]
    shared = [s for s, p in {**systems, **ensembles}.items() if p not in titles]
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
