"""Rewrite what the README and docs/results.md print from the committed results: the README's first lines (the
papers' claims in plain words, `summary`) and its status table of the papers (reports/tables/*.summary.json,
reports/metrics/*.json and the claims judged on them with benchmarks/results/spread.json), the same table the
`index` stage writes into reports/index.md; and the metric cells of every results table (a table headed
`| system |`) in both files, each row's from its system's test metrics (the `(`name`)` in its first cell) or from
the reference points (reports/metrics/reference_points.json); and the Quick start's times, in reference minutes, from
benchmarks/results/retrain.json (benchmarks/retrain_time.py) and test_command.json (bench_test_command.py). Prose
numbers are not touched.

    python scripts/readme_status.py           # rewrite them
    python scripts/readme_status.py --check   # exit 1 if any is stale (tests/docs/test_readme.py checks the same)
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from crossmodal.config.loader import load  # noqa: E402
from crossmodal.reports.index_page import SUMMARY_BEGIN, SUMMARY_END, replace_status  # noqa: E402
from crossmodal.stages.index import claims, status  # noqa: E402

RESULTS_FILES = ("README.md", "docs/results.md")
COLUMNS = {"B@1": "BLEU-1", "B@4": "BLEU-4", "METEOR": "METEOR", "ROUGE-L": "ROUGE-L", "CIDEr-D": "CIDEr"}
REFERENCE_ROWS = {"Best constant caption": "constant_caption", "Human ceiling": "human_ceiling"}
TIMES_BEGIN = "<!-- times:begin (generated from benchmarks/results/: python scripts/readme_status.py) -->"
TIMES_END = "<!-- times:end -->"
PAPER_NAMES = {"shared": "shared stages", "baselines": "baselines", "xlan": "X-LAN", "aoanet": "AoANet", "eta": "ETA",
               "hoca": "HOCA", "ban": "BAN"}


def results_tables(text: str, root: Path = ROOT) -> tuple[str, int]:
    """`text` with the metric cells of its results table's rows rewritten (x100, one decimal), and how many rows
    it rewrote; the first table headed `| system |` is the results table."""
    lines = text.split("\n")
    header = next(i for i, line in enumerate(lines) if line.startswith("| system |"))
    names = [c.strip() for c in lines[header].strip("|").split("|")][1:]
    refs = json.loads((root / "reports/metrics/reference_points.json").read_text())
    rows = 0
    for i in range(header + 2, len(lines)):
        if not lines[i].startswith("| "):
            break
        first = lines[i].strip("|").split("|")[0].strip()
        system = re.search(r"\(`(\w+)`", first)
        ref = next((v for k, v in REFERENCE_ROWS.items() if first.startswith(k)), None)
        if not system and not ref:
            continue
        test = (json.loads((root / f"reports/metrics/{system.group(1)}.json").read_text())["test"] if system
                else refs[ref]["test"])
        lines[i] = "| " + " | ".join([first, *(f"{100 * test[COLUMNS[n]]:.1f}" for n in names)]) + " |"
        rows += 1
    return "\n".join(lines), rows


def summary(cfg, root: Path = ROOT, page=None) -> str:
    """The README's summary block: the claims page's counts in plain words (ClaimsPage.sentence), wrapped at 116."""
    text = (page or claims(cfg, root)).sentence() + " Each claim's verdict, effect size and reason: " \
        "[reports/claims.md](reports/claims.md)."
    return "\n".join(textwrap.wrap(text, width=116, break_long_words=False, break_on_hyphens=False)) + "\n"


def times(root: Path = ROOT) -> str:
    """The Quick start's table of the two commands' times: the first command's from a fresh clone (every stage of
    the pipeline once, at its time in the retrain's logs, replayed as the scheduler runs them, and each pipeline's
    share of that stage time) and the test command's, in reference minutes, with the machine and its factor."""
    retrain = json.loads((root / "benchmarks/results/retrain.json").read_text())
    tests = json.loads((root / "benchmarks/results/test_command.json").read_text())
    cpu, first = retrain["machine"], retrain["first_command"]
    total = {k: first[k] + first["setup"][k] for k in ("minutes", "reference_minutes")}  # set-up and stages
    machine = f"{cpu['model_name']}, family {cpu['family']}, model {cpu['model']}"
    shares = ", ".join(f"{PAPER_NAMES.get(name, name)} {100 * p['share']:.0f}%" for name, p in first["papers"].items())
    note = (f"Measured on an {machine} (calibration factor {retrain['factor']:.3f}): {total['minutes']:.0f} and "
            f"{tests['minutes']:.1f} min there (the first: set-up and {first['stages']} stages at their times in the "
            f"retrain's {retrain['runs']} runs, as the command schedules them); stage time by pipeline: {shares} "
            f"([retrain.md](benchmarks/results/retrain.md)); the tests: {tests['pytest']} "
            "([test_command.md](benchmarks/results/test_command.md)).")
    return "\n".join([
        "| command | what it does | reference minutes |", "|---|---|---:|",
        f"| first | sets up `.venv` (pinned), runs every stage, two at a time | **{total['reference_minutes']:.0f}** |",
        f"| second | the same set-up, then the tests (CI's line) | **{tests['reference_minutes']:.1f}** |", "",
        *textwrap.wrap(note, width=116, break_long_words=False, break_on_hyphens=False), ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a status or results table is stale")
    args = parser.parse_args(argv)
    stale = []
    for name in RESULTS_FILES:
        path = ROOT / name
        text = path.read_text(encoding="utf-8")
        new = results_tables(text)[0]
        if name == "README.md":
            cfg = load(str(ROOT / "params.yaml"))
            page = claims(cfg, ROOT)
            new = replace_status(replace_status(new, status(cfg, ROOT, page)), summary(cfg, ROOT, page),
                                 SUMMARY_BEGIN, SUMMARY_END)
            new = replace_status(new, times(ROOT), TIMES_BEGIN, TIMES_END)
        if new != text:
            stale.append(name)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if stale and args.check:
        print(f"stale tables in {', '.join(stale)}; run `python scripts/readme_status.py`", file=sys.stderr)
        return 1
    print(f"rewritten: {', '.join(stale)}" if stale else "every table is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
