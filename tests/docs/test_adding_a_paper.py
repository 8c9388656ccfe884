"""docs/adding-a-paper.md shows the toy paper's files as they are (tests/toy_paper/, which the tiny pipeline adds to
a copy of the repository and builds): its params section and its record, and it lists every file the toy adds."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "adding-a-paper.md").read_text()
TOY = ROOT / "tests" / "toy_paper"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", PAGE, flags=re.S | re.M)


def test_the_page_shows_the_toy_papers_params_section_and_record_as_they_are():
    (section,) = _blocks("yaml")
    assert yaml.safe_load(section) == yaml.safe_load((TOY / "params.yaml").read_text())
    (record,) = _blocks("python")
    assert record.strip() in (TOY / "src/crossmodal/papers/toy/paper.py").read_text()


def test_the_page_lists_every_file_the_toy_adds():
    added = {p.relative_to(TOY).as_posix() for p in TOY.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    listed = set(re.findall(r"^\| `([^`]+)`", PAGE, flags=re.M))
    assert added - {"params.yaml"} == listed - {"params.yaml"} and "| `params.yaml`, section `toy` |" in PAGE
