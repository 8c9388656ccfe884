"""Rewrite the README's status table of the papers from the committed results (reports/tables/*.summary.json,
reports/metrics/*.json, and for its claims that hold the papers' claims judged on them with
benchmarks/results/spread.json), the same table the `index` stage writes into reports/index.md.

    python scripts/readme_status.py           # rewrite the block between the README's status markers
    python scripts/readme_status.py --check   # exit 1 if the README's table is stale (tests/test_readme.py checks it)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from crossmodal import config  # noqa: E402
from crossmodal.reports.tables import replace_status  # noqa: E402
from crossmodal.stages.index import status  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md's status table is stale")
    args = parser.parse_args(argv)
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    new = replace_status(text, status(config.load(str(ROOT / "params.yaml")), ROOT))
    if new == text:
        return 0
    if args.check:
        print("README.md: the status table is stale; run `python scripts/readme_status.py`", file=sys.stderr)
        return 1
    readme.write_text(new, encoding="utf-8")
    print("README.md: status table rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
