"""The papers' claims: loaded strictly beside their tables, judged over seeds by a stated test whose answers are known
on constructed distributions, and rendered as reports/claims.md."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from crossmodal.config import Config, build
from crossmodal.io import InputError
from crossmodal.reports.claims import (HOLDS, PENDING, REVERSED, UNCLEAR, ClaimsPage, against_spread, build_claims,
                                       cross_cpu_spread, judge, objectives, pooled_spread, seed_groups, welch)
from crossmodal.reports.tables import PAPER_TABLES, load_table, load_tables

BASE = {"model": "updown", "vocabulary": "min5", "train": {"max_epochs": 4}}
SPREAD = 9.5  # a pooled seed spread (CIDEr-D points) for the constructed single-run cases


# ---------------------------------------------------------------- verdicts on known answers


def test_clearly_better_holds():
    v = welch([130.0, 131.0, 129.5, 130.5], [110.0, 111.0, 109.0, 110.5])
    assert v.verdict == HOLDS and v.test == "welch" and v.low > 0
    assert v.diff == pytest.approx(20.125) and v.d > 10


def test_clearly_worse_is_reversed():
    v = welch([100.0, 101.0, 99.0], [120.0, 121.5, 119.0])
    assert v.verdict == REVERSED and v.high < 0 and v.diff < 0 and v.d < 0


def test_identical_distributions_are_not_distinguishable_and_say_their_ns():
    values = [150.0, 160.0, 155.0, 149.0]
    v = welch(values, list(values))
    assert v.verdict == UNCLEAR and v.diff == 0 and v.low < 0 < v.high and v.d == 0
    assert v.label() == "not distinguishable with 4 and 4 seeds"


def test_overlapping_seed_spreads_are_not_distinguishable():
    v = welch([181.5, 194.0, 177.0, 176.4], [183.0, 170.0, 190.0])  # a 4-point gap inside an 18-point seed range
    assert v.verdict == UNCLEAR and v.label() == "not distinguishable with 3 and 4 seeds"


def test_welch_interval_is_the_direct_welch_satterthwaite_computation():
    a, b = np.array([181.5, 194.0, 177.0, 176.4]), np.array([160.2, 175.3, 171.0])
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = stats.t.ppf(0.975, df) * se
    diff = a.mean() - b.mean()
    v = welch(a, b)
    assert (v.low, v.high, v.diff) == pytest.approx((diff - half, diff + half, diff), rel=1e-9)
    sp = math.sqrt(((len(a) - 1) * a.var(ddof=1) + (len(b) - 1) * b.var(ddof=1)) / (len(a) + len(b) - 2))
    assert v.d == pytest.approx(diff / sp, rel=1e-9)


def test_pooled_spread_weights_each_group_by_its_degrees_of_freedom():
    groups = {"x": [1.0, 3.0], "y": [10.0, 14.0, 18.0], "single": [7.0]}
    spread = pooled_spread(groups)
    assert spread.groups == ("x", "y") and spread.df == 3  # a single run adds nothing
    assert spread.std == pytest.approx(math.sqrt((1 * 2.0 + 2 * 16.0) / 3))
    assert pooled_spread({"single": [7.0]}) is None


def test_a_single_run_far_above_a_seed_group_holds_by_the_pooled_spread():
    spread = pooled_spread({"g": [180.0, 190.0, 170.0, 185.0]})
    v = judge([240.0], [180.0, 190.0, 170.0, 185.0], spread)
    assert v.test == "pooled" and v.verdict == HOLDS and (v.n_better, v.n_worse) == (1, 4)
    half = stats.t.ppf(0.975, spread.df) * spread.std * math.sqrt(1 + 1 / 4)
    assert (v.low, v.high) == pytest.approx((v.diff - half, v.diff + half))
    assert v.d == pytest.approx(v.diff / spread.std)


def test_a_single_run_inside_the_seed_spread_is_not_distinguishable():
    spread = pooled_spread({"g": [180.0, 190.0, 170.0, 185.0]})
    v = judge([187.0], [180.0, 190.0, 170.0, 185.0], spread)
    assert v.test == "pooled" and v.verdict == UNCLEAR and v.label() == "not distinguishable with 4 and 1 seeds"
    two_singles = against_spread([150.0], [210.0], spread)
    assert two_singles.verdict == REVERSED and two_singles.high < 0


def test_without_any_seed_group_a_single_run_is_not_distinguishable():
    v = judge([300.0], [100.0], None)
    assert v.verdict == UNCLEAR and v.d is None and v.label() == "not distinguishable with 1 and 1 seeds"


def test_cross_cpu_spread_is_max_minus_min_of_updown_test_cider(tmp_path):
    path = tmp_path / "spread.json"
    path.write_text(json.dumps([{"updown_test": {"CIDEr": c}} for c in (202.8, 213.2, 197.0)]))
    assert cross_cpu_spread(path) == pytest.approx(16.2)
    path.write_text(json.dumps([{"updown_test": {"CIDEr": 202.8}}, {"updown_test": {}}]))
    with pytest.raises(InputError, match="run 1 has no number at updown_test.CIDEr"):
        cross_cpu_spread(path)


# ---------------------------------------------------------------- seed groups


def _config() -> Config:
    return build(Config, {"vocabularies": {"min5": {}}, "xlan": {
        "systems": {
            "a": BASE,
            "a_seed1": {"of": "a", "train": {"seed": 1}},
            "a_seed2": {"of": "a", "train": {"seed": 2}},
            "a_twin": {"of": "a"},  # the same run as `a` (same seed): not another seed
            "a_lr": {"of": "a", "train": {"seed": 1, "lr": 1e-3}},  # another system, whatever its seed
            "b": {**BASE, "model_args": {"dim": 8}},
            "s": {"objective": "scst", "init": "a", "train": {"lr": 1e-5}},
            "s_seed1": {"of": "s", "init": "a_seed1", "train": {"seed": 1}},
            "s_lr": {"of": "s", "init": "a_lr", "train": {"seed": 1}},  # continues another system
            "t": {"objective": "scst", "init": "b", "train": {"lr": 1e-5}},  # same SCST recipe, another model
        },
        "ensembles": {"e": {"members": ["a", "a_seed1", "a_seed2", "a_lr"]}}}})


def test_seed_groups_differ_only_by_seed_and_init():
    groups = seed_groups(_config())
    assert groups["a"] == ("a", "a_seed1", "a_seed2")
    assert groups["a_seed2"] == ("a_seed2", "a", "a_seed1")
    assert groups["a_lr"] == ("a_lr",) and groups["b"] == ("b",)
    assert groups["s"] == ("s", "s_seed1") and groups["t"] == ("t",) and groups["s_lr"] == ("s_lr",)
    assert groups["e"] == ("e",)  # an ensemble is one run
    assert objectives(_config())["e"] == "xe" and objectives(_config())["s"] == "scst"


# ---------------------------------------------------------------- the claim loader


def _table(claims: list[dict]) -> dict:
    return {"id": "t", "paper": "P (A et al., X 2020)", "source": {"table": "Table 9", "caption": "c"},
            "dataset": "COCO", "unit": "%", "scale": 100,
            "column_groups": [{"id": "xe", "label": "Cross-Entropy", "short": "XE"},
                              {"id": "scst", "label": "CIDEr optimisation", "short": "SCST"}],
            "columns": [{"key": "CIDEr", "label": "C", "group": "xe"}, {"key": "CIDEr", "label": "C", "group": "scst"}],
            "sections": [{"name": "Single model", "rows": [
                {"label": "Base", "values": {"xe:CIDEr": 110.0, "scst:CIDEr": 120.0},
                 "variant": {"xe": "a", "scst": "s"}},
                {"label": "New", "values": {"xe:CIDEr": 115.5, "scst:CIDEr": None},  # t: the paper prints none
                 "variant": {"xe": "b", "scst": "t"}},
                {"label": "Other", "values": {"xe:CIDEr": 99.0, "scst:CIDEr": 100.0}, "cited": True}]}],
            "claims": claims}


CLAIM = {"id": "b_over_a", "text": "New over Base", "better": "b", "worse": "a", "quote": "New is better.",
         "where": "Sec. 4"}


def _load(tmp_path: Path, claims: list[dict]):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(_table(claims), sort_keys=False))
    return load_table(path)


def test_claims_read_the_papers_values_from_the_rows(tmp_path):
    (claim,) = _load(tmp_path, [CLAIM]).claims
    assert (claim.paper_worse, claim.paper_better, claim.metric, claim.scale) == (110.0, 115.5, "CIDEr", 100)
    (scst,) = _load(tmp_path, [{**CLAIM, "id": "s_over_a", "better": "s"}]).claims
    assert (scst.paper_worse, scst.paper_better) == (110.0, 120.0)  # a system's own column group


@pytest.mark.parametrize("change, message", [
    ({"better": "zz"}, "claims[0] (b_over_a): better: 'zz' fills no row of this table (its systems: a, b, s, t)"),
    ({"quote": "  "}, "claims[0] (b_over_a): quote: expected a non-empty string"),
    ({"colour": "red"}, "claims[0] (b_over_a): unknown key(s) colour"),
    ({"worse": "b"}, "better and worse are both 'b'"),
    ({"better": "t"}, "better: the paper prints no scst:CIDEr for 't'"),
    ({"metric": "BLEU-4"}, "better: 'b' fills no column of metric 'BLEU-4'"),
])
def test_the_claim_loader_rejects_bad_claims_with_one_line(tmp_path, change, message):
    with pytest.raises(InputError) as err:
        _load(tmp_path, [{**CLAIM, **change}])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_claim_without_a_quote_and_duplicate_ids_are_rejected(tmp_path):
    with pytest.raises(InputError, match=r"claims\[0\] \(b_over_a\): missing key\(s\) quote"):
        _load(tmp_path, [{k: v for k, v in CLAIM.items() if k != "quote"}])
    with pytest.raises(InputError, match=r"claims: duplicate id\(s\) b_over_a"):
        _load(tmp_path, [CLAIM, CLAIM])


def test_the_papers_claims_cover_the_ladder_the_variants_and_scst():
    pairs = {(c.better, c.worse) for t in load_tables(["xlan_table1", "xlan_table2", "xlan_table3"]) for c in t.claims}
    ladder = ["updown", "xlan_dec", "xlan_enc1", "xlan_enc2", "xlan_enc3", "xlan_enc4", "xlan"]
    assert {(b, w) for w, b in zip(ladder, ladder[1:])} <= pairs
    assert {("xtransformer", "transformer"), ("xtransformer_scst", "transformer_scst"), ("xlan_ensemble", "xlan"),
            ("xtransformer_ensemble", "xtransformer"), ("xlan_scst_ensemble", "xlan_scst"),
            ("xtransformer_scst_ensemble", "xtransformer_scst"), ("xlan_scst", "xlan"),
            ("xtransformer_scst", "xtransformer")} <= pairs
    aoanet = {(c.better, c.worse) for c in load_table(PAPER_TABLES / "aoanet_offline.yaml").claims}
    assert aoanet == {("aoanet", "updown"), ("aoanet_scst", "updown_scst"), ("aoanet_scst", "aoanet")}


def test_the_eta_claims_cover_fusion_scst_the_modalities_the_encoder_the_baselines_and_gbc():
    tables = {t.id: t for t in load_tables([f"eta_table{i}" for i in range(1, 7)])}
    pairs = {t: {(c.better, c.worse) for c in table.claims} for t, table in tables.items()}
    assert {("eta_fuse", "eta"), ("eta_fuse_scst", "eta_scst"), ("eta_scst", "eta")} <= pairs["eta_table1"]
    assert {("eta", "transformer_v"), ("eta", "transformer_s"), ("eta_oracle", "eta")} <= pairs["eta_table2"]
    assert not pairs["eta_table3"]  # the leaderboard: server-only numbers, no ordering tested
    assert {("transformer_s", "transformer_s_noenc"), ("transformer_v_grid", "transformer_v_grid_noenc")} <= pairs[
        "eta_table4"]
    assert {("eta_scst", "parallel_scst"), ("eta_scst", "stacked_v_scst"), ("eta_scst", "stacked_s_scst"),
            ("transformer_v_scst", "tvs_fuse_scst"), ("parallel_scst", "stacked_v_scst")} <= pairs["eta_table5"]
    assert pairs["eta_table6"] == {("eta_relu", "eta_sigmoid"), ("eta_relu", "eta_tanh"), ("eta", "eta_sigmoid"),
                                   ("eta", "eta_tanh"), ("eta", "eta_relu")}


# ---------------------------------------------------------------- the page


def _metrics(tmp_path: Path, cider: dict[str, float]) -> Path:
    d = tmp_path / "metrics"
    d.mkdir(parents=True)
    for name, value in cider.items():
        (d / f"{name}.json").write_text(json.dumps({"variant": name, "test": {"CIDEr": value / 100}}))
    (d / "data_profile.json").write_text(json.dumps({"profile": "synthetic image world", "synthetic": True,
                                                     "images": {"train": 10, "val": 5, "test": 5}, "seed": 0}))
    return d


def _page_rows(markdown: str) -> dict[str, list[str]]:
    """The claims tables' rows keyed by the claim cell's system names (`better` > `worse`)."""
    rows = {}
    for line in markdown.splitlines():
        if line.startswith("| ") and "` > `" in line:
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0].split("(", 1)[1].rstrip(")")] = cells
    return rows


def test_the_page_shows_paper_ours_and_verdicts(tmp_path):
    table = _load(tmp_path, [CLAIM, {**CLAIM, "id": "s_over_a", "text": "SCST over XE", "better": "s"},
                             {**CLAIM, "id": "a_over_b", "text": "Base over New", "better": "a", "worse": "b"}])
    cfg = _config()
    metrics = _metrics(tmp_path, {"a": 180.0, "a_seed1": 182.0, "a_seed2": 178.0, "a_lr": 150.0, "b": 200.0,
                                  "s": 130.0, "s_seed1": 128.0})
    page = build_claims({"xlan": [table]}, seed_groups(cfg), objectives(cfg), metrics, cpu_spread=25.0,
                        cpu_source="spread.md")
    rows = _page_rows(page.markdown)
    b_over_a = rows["`b` > `a`"]
    assert b_over_a[1:5] == ["110.0 → 115.5", "180.0 ± 2.0 (3)", "200.0 (1 run)", "**holds**[^pooled][^cpu]"]
    pooled = math.sqrt((2 * 4.0 + 1 * 2.0) / 3)  # the seeds of a (variance 4, df 2) and s (variance 2, df 1)
    assert b_over_a[5].startswith("+20.0 [") and b_over_a[5].endswith(f"d {20 / pooled:.2f}")
    s_over_a = rows["`s` > `a`"]
    assert s_over_a[3:5] == ["129.0 ± 1.4 (2)", "**reversed**[^scst]"]  # Welch: both sides have seeds
    assert rows["`a` > `b`"][4] == "**reversed**[^pooled][^cpu]"
    assert page.verdicts == {"t": {"b_over_a": HOLDS, "s_over_a": REVERSED, "a_over_b": REVERSED}}
    assert page.counts == {HOLDS: 1, REVERSED: 2, UNCLEAR: 0, PENDING: 0}
    assert page.summary() == "3 claims: 1 hold, 2 reversed, 0 not distinguishable"
    assert page.held(["t"]) == "1 of 3" and page.held(["t", "untranscribed"]) == "1 of 3"
    assert page.held(["untranscribed"]) == "—"  # a table without claims
    text = page.markdown
    assert "synthetic data, not COCO" in text and "95% confidence" in text and "Welch's t-test" in text
    assert "[^pooled]: Judged with the pooled seed spread" in text and "[^scst]: SCST over cross-entropy" in text
    assert "[^cpu]: The difference is smaller than the cross-CPU spread of Up-Down's test CIDEr-D (25.0 points" in text
    assert '"New is better."' in text


def test_the_page_says_pending_and_not_distinguishable(tmp_path):
    table = _load(tmp_path, [CLAIM])
    cfg = _config()
    metrics = _metrics(tmp_path, {"a": 180.0, "a_seed1": 195.0, "a_seed2": 170.0, "b": 186.0})
    page = build_claims({"xlan": [table]}, seed_groups(cfg), objectives(cfg), metrics, cpu_spread=None)
    assert _page_rows(page.markdown)["`b` > `a`"][4] == "**not distinguishable with 3 and 1 seeds**[^pooled]"
    assert "[^cpu]" not in page.markdown
    metrics_b_missing = _metrics(tmp_path / "other", {"a": 180.0})
    pending = build_claims({"xlan": [table]}, seed_groups(cfg), objectives(cfg), metrics_b_missing, cpu_spread=None)
    assert _page_rows(pending.markdown)["`b` > `a`"][3:5] == ["pending", "pending"]
    assert pending.counts[PENDING] == 1 and pending.held(["t"]) == "0 of 1"  # a pending claim counts, holds not


def test_a_real_split_tables_claims_are_judged_on_that_split_under_a_real_profile(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({**_table([CLAIM]), "real_split": "val"}, sort_keys=False))
    table, cfg = load_table(path), _config()
    metrics = _metrics(tmp_path, {"a": 180.0, "a_seed1": 182.0, "a_seed2": 178.0, "b": 200.0})
    for name, val in {"a": 2.0, "a_seed1": 2.02, "a_seed2": 1.98, "b": 1.5}.items():  # on val, b is worse
        data = json.loads((metrics / f"{name}.json").read_text())
        (metrics / f"{name}.json").write_text(json.dumps({**data, "val": {"CIDEr": val}}))
    synthetic = build_claims({"xlan": [table]}, seed_groups(cfg), objectives(cfg), metrics, cpu_spread=None)
    assert _page_rows(synthetic.markdown)["`b` > `a`"][4].startswith("**holds**")  # test, as on synthetic data
    (metrics / "data_profile.json").write_text(json.dumps({"profile": "real", "synthetic": False}))
    real = build_claims({"xlan": [table]}, seed_groups(cfg), objectives(cfg), metrics, cpu_spread=None)
    row = _page_rows(real.markdown)["`b` > `a`, on val"]
    assert row[2:5] == ["200.0 ± 2.0 (3)", "150.0 (1 run)", "**reversed**[^pooled]"]


def test_the_index_links_the_claims_page_first_and_counts_each_tables_claims_that_hold(tmp_path):
    from crossmodal.reports.tables import build_index

    summary = tmp_path / "tables" / "p.summary.json"
    summary.parent.mkdir()
    summary.write_text(json.dumps([{"id": "t", "table": "Table 9", "paper": "P", "reproduced": 1},
                                   {"id": "u", "table": "Table 10", "paper": "P", "cited": 2}]))
    metrics = _metrics(tmp_path, {})
    (metrics / "a.json").write_text(json.dumps({"variant": "a", "test": {"BLEU-4": 0.3, "METEOR": 0.2, "CIDEr": 1.8}}))
    index = tmp_path / "index.md"
    page = ClaimsPage("", {"t": {"x": HOLDS, "y": REVERSED, "z": UNCLEAR, "w": PENDING}})  # u records no claims
    build_index([summary], summary.parent, index, metrics, {"a": "xlan"}, "| status |", (tmp_path / "claims.md", page))
    lines = [line for line in index.read_text().splitlines() if line]
    assert lines[:2] == ["# Reproduced tables", "**Start here: [the papers' claims, tested over seeds](claims.md)** "
                         "(4 claims: 1 hold, 1 reversed, 1 not distinguishable, 1 pending)."]
    assert lines[2].startswith("**Computed on:") and lines[3] == "## Status of the papers"
    assert "| Table | Source | Paper | Reproduced | Server only | Pending | Cited | Claims that hold |" in lines
    assert "| [t](tables/t.md) | Table 9 | P | 1 | 0 | 0 | 0 | 1 of 4 |" in lines
    assert "| [u](tables/u.md) | Table 10 | P | 0 | 0 | 0 | 2 | — |" in lines
