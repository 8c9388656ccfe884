"""Rewrite what the README and docs/results.md print from the committed results: the README's status table of the
papers (reports/tables/*.summary.json, reports/metrics/*.json, and for its claims that hold the papers' claims
judged on them with benchmarks/results/spread.json), the same table the `index` stage writes into
reports/index.md; and the metric cells of every results table (a table headed `| system |`) in both files, each
row's from its system's test metrics (the `(`name`)` in its first cell) or from the reference points
(reports/metrics/reference_points.json). Prose numbers are not touched.

    python scripts/readme_status.py           # rewrite them
    python scripts/readme_status.py --check   # exit 1 if any is stale (tests/test_readme.py checks the same)
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from crossmodal import config  # noqa: E402
from crossmodal.reports.tables import replace_status  # noqa: E402
from crossmodal.stages.index import status  # noqa: E402

RESULTS_FILES = ("README.md", "docs/results.md")
COLUMNS = {"B@1": "BLEU-1", "B@4": "BLEU-4", "METEOR": "METEOR", "ROUGE-L": "ROUGE-L", "CIDEr-D": "CIDEr"}
REFERENCE_ROWS = {"Best constant caption": "constant_caption", "Human ceiling": "human_ceiling"}


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
            new = replace_status(new, status(config.load(str(ROOT / "params.yaml")), ROOT))
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
