"""The papers' records (papers/<paper>/paper.py): found by their folders, each named as its folder and its params
section, its tables in its package; a paper's own params sections (`<paper>.studies`) are checked as strictly as the
rest of params.yaml."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from crossmodal import paths
from crossmodal.config.loader import from_data, load
from crossmodal.io import InputError
from crossmodal.papers.registry import papers
from crossmodal.pipelines import expected_files

ROOT = Path(__file__).resolve().parents[2]


def test_every_paper_is_a_folder_whose_tables_it_holds():
    records, cfg = papers(), load(ROOT / "params.yaml")
    assert set(records) == set(cfg.papers)
    assert [r.title for r in records.values() if r.title] == ["X-LAN / X-Transformer", "ETA-Transformer", "AoANet",
                                                              "HOCA / Low-Rank HOCA", "BAN"]  # the status's order
    for name, section in cfg.papers.items():
        assert all((paths.paper_tables(name) / f"{t}.yaml").is_file() for t in section.tables)


@pytest.mark.parametrize("studies, message", [
    ({"figurs": {}}, "unknown key 'hoca.studies.figurs' (did you mean 'figures'?)"),
    ({"cost": {"epochs": 0}}, "'hoca.studies.cost': batch_size and epochs must be at least 1"),
    ({"cost": {"row": {}}}, "unknown key 'hoca.studies.cost.row' (did you mean 'rows'?)"),
])
def test_a_papers_own_sections_are_checked_by_key_path(studies, message):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["hoca"]["studies"] = studies
    with pytest.raises(InputError) as err:
        expected_files(from_data(params))  # the generator checks them: the `code` and `params` stages run it first
    assert message in str(err.value)
