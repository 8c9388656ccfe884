"""The papers' claims: loaded strictly beside their tables, judged over seeds by a stated test whose answers are known
on constructed distributions, and rendered as reports/claims.md."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from crossmodal.config.loader import Config, from_data
from crossmodal.io import InputError, write_json
from crossmodal.reports.claims import (HOLDS, PENDING, RECIPE, REVERSED, SAMPLED_SCST, SEEDS, UNCLEAR, UNTESTABLE,
                                       WORLD, ClaimResult, ClaimsPage, Systems, against_spread, build_claims,
                                       cross_cpu_spread, judge, pooled_spread, seed_groups, welch, worlds)
from crossmodal.reports.power import mde, runs_to_decide
from crossmodal.paths import paper_tables
from crossmodal.reports.table_schema import PaperTable, load_table, load_tables

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
    assert v.ahead("`x`", "`y`") == "`x` and `y` tied"


def test_overlapping_seed_spreads_are_not_distinguishable():
    v = welch([181.5, 194.0, 177.0, 176.4], [183.0, 170.0, 190.0])  # a 4-point gap inside an 18-point seed range
    assert v.verdict == UNCLEAR and (v.n_better, v.n_worse) == (4, 3)
    low, high = f"{v.low:+.1f}".replace("-", "−"), f"{v.high:+.1f}".replace("-", "−")
    assert v.ahead("`x`", "`y`") == f"`x` ahead by +{v.diff:.1f} [{low}, {high}]"
    swapped = welch([183.0, 170.0, 190.0], [181.5, 194.0, 177.0, 176.4])
    assert swapped.ahead("`y`", "`x`") == f"`x` ahead by +{v.diff:.1f} [{low}, {high}]"  # x's lead, as x's


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
    assert v.test == "pooled" and v.verdict == UNCLEAR and (v.n_better, v.n_worse) == (1, 4)
    two_singles = against_spread([150.0], [210.0], spread)
    assert two_singles.verdict == REVERSED and two_singles.high < 0


def test_without_any_seed_group_a_single_run_is_not_distinguishable():
    v = judge([300.0], [100.0], None)
    assert v.verdict == UNCLEAR and v.d is None and v.ahead("`x`", "`y`") == "`x` ahead by +200.0"  # no interval


def test_cross_cpu_spread_is_max_minus_min_of_updown_test_cider(tmp_path):
    path = tmp_path / "spread.json"
    path.write_text(json.dumps([{"updown_test": {"CIDEr": c}} for c in (202.8, 213.2, 197.0)]))
    assert cross_cpu_spread(path) == pytest.approx(16.2)
    path.write_text(json.dumps([{"updown_test": {"CIDEr": 202.8}}, {"updown_test": {}}]))
    with pytest.raises(InputError, match="run 1 has no number at updown_test.CIDEr"):
        cross_cpu_spread(path)


# ---------------------------------------------------------------- seed groups


def _config() -> Config:
    return from_data({"vocabularies": {"min5": {}}, "xlan": {
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
    assert Systems.of(_config()).members["e"] == ("a", "a_seed1", "a_seed2", "a_lr")


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
    pairs = {(c.better, c.worse) for t in load_tables(["xlan_table1", "xlan_table2", "xlan_table3"], paper_tables("xlan")) for c in t.claims}
    ladder = ["updown", "xlan_dec", "xlan_enc1", "xlan_enc2", "xlan_enc3", "xlan_enc4", "xlan"]
    assert {(b, w) for w, b in zip(ladder, ladder[1:])} <= pairs
    assert {("xtransformer", "transformer"), ("xtransformer_scst", "transformer_scst"), ("xlan_ensemble", "xlan"),
            ("xtransformer_ensemble", "xtransformer"), ("xlan_scst_ensemble", "xlan_scst"),
            ("xtransformer_scst_ensemble", "xtransformer_scst"), ("xlan_scst", "xlan"),
            ("xtransformer_scst", "xtransformer")} <= pairs
    aoanet = {(c.better, c.worse) for c in load_table(paper_tables("aoanet") / "aoanet_offline.yaml").claims}
    assert aoanet == {("aoanet", "updown"), ("aoanet_scst", "updown_scst"), ("aoanet_scst", "aoanet")}


def test_the_eta_claims_cover_fusion_scst_the_modalities_the_encoder_the_baselines_and_gbc():
    tables = {t.id: t for t in load_tables([f"eta_table{i}" for i in range(1, 7)], paper_tables("eta"))}
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
    """The claims tables' rows keyed by the two systems as the paper ranks them (`better` > `worse`)."""
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        named = [c.split("`")[1] for c in cells if c.startswith("`")][:2]
        if line.startswith("| ") and len(named) == 2:
            rows[f"{named[0]} > {named[1]}"] = cells
    return rows


def _build(tables, cfg, metrics, **kwargs) -> ClaimsPage:
    return build_claims({"xlan": tables}, Systems.of(cfg), metrics, **{"cpu_spread": None, **kwargs})


def test_the_page_names_the_papers_better_system_first_and_which_of_ours_came_out_ahead(tmp_path):
    table = _load(tmp_path, [CLAIM, {**CLAIM, "id": "s_over_a", "text": "SCST over XE", "better": "s"},
                             {**CLAIM, "id": "a_over_b", "text": "Base over New", "better": "a", "worse": "b"}])
    metrics = _metrics(tmp_path, {"a": 180.0, "a_seed1": 182.0, "a_seed2": 178.0, "a_lr": 150.0, "b": 200.0,
                                  "s": 130.0, "s_seed1": 128.0})
    page = _build([table], _config(), metrics, cpu_spread=25.0, cpu_source="spread.md")
    rows = _page_rows(page.markdown)
    b_over_a = rows["b > a"]
    assert b_over_a[1:4] == ["115.5 vs 110.0 (+5.5)", "`b` 200.0 (1 run)", "`a` 180.0 ± 2.0 (3)"]
    assert b_over_a[4].startswith("**holds**[^pooled][^cpu]: `b` ahead by +20.0 [")
    pooled = math.sqrt((2 * 4.0 + 1 * 2.0) / 3)  # the seeds of a (variance 4, df 2) and s (variance 2, df 1)
    assert b_over_a[5] == f"{20 / pooled:.2f}"
    s_over_a = rows["s > a"]  # Welch: both sides have seeds; the larger number is ours ahead, named as such
    assert s_over_a[2:4] == ["`s` 129.0 ± 1.4 (2)", "`a` 180.0 ± 2.0 (3)"]
    assert s_over_a[4].startswith("**reversed**: `a` ahead by +51.0 [+")
    assert rows["a > b"][4].startswith("**reversed**[^pooled][^cpu]: `b` ahead by +20.0")
    assert {t: {c: r.outcome for c, r in claims.items()} for t, claims in page.results.items()} == {
        "t": {"b_over_a": HOLDS, "s_over_a": REVERSED, "a_over_b": REVERSED}}
    assert page.counts == {HOLDS: 1, REVERSED: 2, SEEDS: 0, RECIPE: 0, PENDING: 0, WORLD: 0}
    assert page.summary() == "3 claims: 1 hold, 2 reversed, 0 undecided for want of seeds"
    assert page.held(["t"]) == "1 of 3" and page.held(["t", "untranscribed"]) == "1 of 3"
    assert page.held(["untranscribed"]) == "—"  # a table without claims
    text = page.markdown
    assert "synthetic data, not COCO" in text and "95% confidence" in text and "Welch's t-test" in text
    assert "[^pooled]: Judged with the seed spread of the claim's world" in text and "[^recipe]" not in text
    assert "[^cpu]: The difference is smaller than the cross-CPU spread of Up-Down's test CIDEr-D (25.0 points" in text
    assert '"New is better."' in text


def test_an_undecided_claim_gives_the_minimum_detectable_effect_and_the_runs_that_would_decide(tmp_path):
    table = _load(tmp_path, [CLAIM])
    metrics = _metrics(tmp_path, {"a": 180.0, "a_seed1": 195.0, "a_seed2": 170.0, "b": 186.0})
    page = _build([table], _config(), metrics)
    result = page.results["t"]["b_over_a"]
    spread = pooled_spread({"a": [180.0, 195.0, 170.0]})
    assert (result.outcome, result.reason, result.world) == (UNCLEAR, SEEDS, "images")
    assert result.mde == pytest.approx(mde(spread.std, 1, 3, spread.df, 0.95))
    assert result.runs_needed == runs_to_decide(5.5, spread.std, 0.95)
    cell = _page_rows(page.markdown)["b > a"][4]
    assert cell == (f"**undecided (seeds)**[^pooled]: `b` ahead by +4.3 [{result.verdict.low:+.1f}, "
                    f"{result.verdict.high:+.1f}]; detectable at these n: {result.mde:.1f}; the paper's gap of 5.5 "
                    f"needs {result.runs_needed} runs a side").replace("-", "−")
    assert page.summary() == "1 claims: 0 hold, 0 reversed, 1 undecided for want of seeds"
    assert page.sentence() == ("Of the 1 claim the worlds can test, 0 hold, 0 are reversed and 1 is undecided for want "
                               "of seeds.")
    missing = _build([table], _config(), _metrics(tmp_path / "other", {"a": 180.0}))
    assert _page_rows(missing.markdown)["b > a"][3:5] == ["`a` 180.0 (1 run)", "pending"]
    assert missing.counts[PENDING] == 1 and missing.held(["t"]) == "0 of 1"  # a pending claim counts, holds not


def test_a_recipe_known_to_be_wrong_is_read_from_the_runs_histories(tmp_path):
    table = _load(tmp_path, [{**CLAIM, "id": "s_over_a", "better": "s"}])
    metrics = _metrics(tmp_path, {"a": 180.0, "a_seed1": 195.0, "a_seed2": 170.0, "s": 186.0, "s_seed1": 180.0})
    page = _build([table], _config(), metrics)
    assert page.results["t"]["s_over_a"].reason == SEEDS  # no history: nothing known against the recipe
    for key, reason in ((SAMPLED_SCST, RECIPE), ("train_CIDEr_beam", SEEDS)):
        data = json.loads((metrics / "s_seed1.json").read_text())
        (metrics / "s_seed1.json").write_text(json.dumps({**data, "history": [{"epoch": 1, key: 1.2}]}))
        result = _build([table], _config(), metrics).results["t"]["s_over_a"]
        assert result.reason == reason and (result.link is not None) == (reason == RECIPE)
    from crossmodal.tasks.objectives.scst import REWARD_KEYS
    assert SAMPLED_SCST == REWARD_KEYS["sample"]


def _worlds_config() -> Config:
    video = {**BASE, "vocabulary": "msvd"}
    return from_data({"vocabularies": {"min5": {}, "msvd": {"corpus": "msvd"}}, "xlan": {"systems": {
        "a": BASE, "a_seed1": {"of": "a", "train": {"seed": 1}}, "a_seed2": {"of": "a", "train": {"seed": 2}},
        "b": {**BASE, "model_args": {"dim": 8}}, "b_seed1": {"of": "b", "train": {"seed": 1}},
        "v": video, "w": {**video, "model_args": {"dim": 8}}}}})


def test_one_spread_per_world_and_a_world_without_seeds_has_none(tmp_path):
    cfg = _worlds_config()
    assert {n: w for n, w in worlds(cfg).items()} == {"a": "images", "a_seed1": "images", "a_seed2": "images",
                                                       "b": "images", "b_seed1": "images", "v": "msvd", "w": "msvd"}
    path = tmp_path / "t.yaml"
    table = _table([CLAIM, {**CLAIM, "id": "v_over_w", "better": "v", "worse": "w"}])
    table["sections"][0]["rows"] += [{"label": "V", "values": {"xe:CIDEr": 90.0, "scst:CIDEr": None}, "variant": "v"},
                                     {"label": "W", "values": {"xe:CIDEr": 80.0, "scst:CIDEr": None}, "variant": "w"}]
    table["columns"] = [{"key": "CIDEr", "label": "C", "group": "xe"}, {"key": "CIDEr", "label": "C", "group": "scst"}]
    table["sections"][0]["rows"][-2]["variant"] = {"xe": "v"}
    table["sections"][0]["rows"][-1]["variant"] = {"xe": "w"}
    table["sections"][0]["rows"][1]["variant"] = {"xe": "b"}
    path.write_text(yaml.safe_dump(table, sort_keys=False))
    metrics = _metrics(tmp_path, {"a": 180.0, "a_seed1": 184.0, "a_seed2": 170.0, "b": 200.0, "b_seed1": 190.0,
                                  "v": 100.0, "w": 10.0})
    page = _build([load_table(path)], cfg, metrics)
    # the image world's spread, by hand: a's variance (df 2) and b's (df 1) pooled
    a, b = np.array([180.0, 184.0, 170.0]), np.array([200.0, 190.0])
    by_hand = math.sqrt((2 * a.var(ddof=1) + 1 * b.var(ddof=1)) / 3)
    assert f"image captioning, CIDEr-D {by_hand:.1f} points (3 degrees of freedom" in " ".join(page.markdown.split())
    assert "video captioning, MSVD-like, CIDEr-D: no seeds in this world" in " ".join(page.markdown.split())
    video = page.results["t"]["v_over_w"]  # 90 points apart, yet no other world's spread judges it
    assert (video.outcome, video.reason, video.world, video.mde) == (UNCLEAR, SEEDS, "msvd", None)
    assert _page_rows(page.markdown)["v > w"][4] == ("**undecided (seeds)**: `v` ahead by +90.0; no seeds in this "
                                                      "world: no minimum detectable effect")


def test_a_claim_the_world_cannot_test_is_listed_apart_and_leaves_the_denominator(tmp_path):
    untestable = {"reason": "Nothing to act on.",
                  "link": "docs/synthetic-worlds.md#semantic-attributes-eta-transformer"}
    table = _load(tmp_path, [CLAIM, {**CLAIM, "id": "s_over_a", "better": "s", "untestable": untestable}])
    metrics = _metrics(tmp_path, {"a": 180.0, "a_seed1": 182.0, "a_seed2": 178.0, "b": 200.0, "s": 130.0})
    page = _build([table], _config(), metrics)
    result = page.results["t"]["s_over_a"]
    assert (result.outcome, result.reason, result.why) == (UNTESTABLE, WORLD, "Nothing to act on.")
    assert page.held(["t"]) == "1 of 1" and page.counts[WORLD] == 1
    assert page.tally(["t"]) == {"Testable claims": "1", "Hold": "1", "Reversed": "0", "Undecided: seeds": "0",
                                 "Untestable on the world": "1"}
    assert page.sentence() == ("Of the 1 claim the worlds can test, 1 holds, 0 are reversed and 0 are undecided for "
                               "want of seeds; 1 more is untestable on these worlds.")
    apart = page.markdown.split("## Claims these worlds cannot test", 1)[1]
    assert "Nothing to act on. ([docs/synthetic-worlds.md](../docs/synthetic-worlds.md#semantic-attributes-eta-" \
           "transformer))" in apart and "s > a" in _page_rows(apart) and "s > a" not in _page_rows(
               page.markdown.split("## Claims these worlds cannot test", 1)[0])
    with pytest.raises(InputError, match="link must name a Markdown page and its section"):
        _load(tmp_path, [{**CLAIM, "untestable": {**untestable, "link": "docs/synthetic-worlds.md"}}])


def test_a_claim_the_world_cannot_test_on_systems_not_trained_yet_is_listed_apart_as_pending(tmp_path):
    untestable = {"reason": "Nothing to act on.",
                  "link": "docs/synthetic-worlds.md#semantic-attributes-eta-transformer"}
    table = _load(tmp_path, [CLAIM, {**CLAIM, "id": "s_over_a", "better": "s", "untestable": untestable}])
    page = _build([table], _config(), _metrics(tmp_path, {"a": 180.0, "a_seed1": 182.0, "a_seed2": 178.0, "b": 200.0}))
    assert page.results["t"]["s_over_a"].verdict is None
    row = _page_rows(page.markdown.split("## Claims these worlds cannot test", 1)[1])["s > a"]
    assert "pending" in row and any("Nothing to act on." in cell for cell in row)


# ---------------------------------------------------------------- the page as data (reports/claims.json)


def _no_constant(name: str):
    raise AssertionError(f"reports/claims.json holds {name}, which JSON does not have")


def _page_cells(markdown: str) -> dict[str, tuple[list[str], str]]:
    """{"better > worse": (the row's cells, the cell that says which of ours came out ahead)}, main tables and the
    claims listed apart alike."""
    return {key: (cells, next(c for c in cells if " ahead by " in c or " tied" in c or c == PENDING))
            for key, cells in _page_rows(markdown).items()}


def _world_claims_table(tmp_path: Path) -> PaperTable:
    """A table of _worlds_config's systems: b over a and its converse, v over w (a world without seeds) and w over v,
    which the world cannot test."""
    untestable = {"reason": "Nothing to act on.",
                  "link": "docs/synthetic-worlds.md#semantic-attributes-eta-transformer"}
    table = _table([CLAIM, {**CLAIM, "id": "a_over_b", "better": "a", "worse": "b"},
                    {**CLAIM, "id": "v_over_w", "better": "v", "worse": "w"},
                    {**CLAIM, "id": "w_over_v", "better": "w", "worse": "v", "untestable": untestable}])
    table["sections"][0]["rows"][1]["variant"] = {"xe": "b"}
    table["sections"][0]["rows"] += [{"label": "V", "values": {"xe:CIDEr": 90.0, "scst:CIDEr": None},
                                      "variant": {"xe": "v"}},
                                     {"label": "W", "values": {"xe:CIDEr": 80.25, "scst:CIDEr": None},
                                      "variant": {"xe": "w"}}]
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(table, sort_keys=False))
    return load_table(path)


def test_the_json_and_the_page_agree_claim_by_claim_and_the_counts_add_up(tmp_path):
    table, cfg = _world_claims_table(tmp_path), _worlds_config()
    metrics = _metrics(tmp_path, {"a": 180.0, "a_seed1": 182.0, "a_seed2": 178.0, "b": 200.0, "b_seed1": 197.0,
                                  "v": 100.0, "w": 10.0})
    page = _build([table], cfg, metrics, cpu_spread=25.0)
    write_json(tmp_path / "claims.json", page.data)  # as the index stage writes it
    data = json.loads((tmp_path / "claims.json").read_text(), parse_constant=_no_constant)
    claims, cells = data["claims"], _page_cells(page.markdown)
    assert [(c["table"], c["id"]) for c in claims] == [(t, c) for t, r in page.results.items() for c in r]
    assert [c["verdict"] for c in claims] == [HOLDS, REVERSED, UNCLEAR, UNTESTABLE]
    for claim in claims:
        better, worse = claim["better"], claim["worse"]
        row, ahead = cells[f"{better['system']} > {worse['system']}"]
        lead = (claim["ahead"], 1) if claim["ahead"] == better["system"] else (claim["ahead"], -1)
        shown = f"`{lead[0]}` ahead by {lead[1] * claim['diff']:+.1f}".replace("-", "−")
        if None not in claim["ci"]:
            low, high = sorted(lead[1] * x for x in claim["ci"])
            shown += f" [{low:+.1f}, {high:+.1f}]".replace("-", "−")
        assert shown in ahead, (claim["id"], ahead)
        if claim["verdict"] != UNTESTABLE:
            verdict = claim["verdict"] + (f" ({claim['reason']['kind']})" if claim["reason"] else "")
            d = "n/a" if claim["cohens_d"] is None else f"{claim['cohens_d']:.2f}".replace("-", "−")
            assert ahead.startswith(f"**{verdict}**") and row[5] == d
        paper = claim["paper_values"]  # as printed: 80.25 keeps its decimals, the gap is rounded to them
        assert row[-5] == f"{paper['better']} vs {paper['worse']} ({paper['gap']:+})".replace("-", "−")
        for side, cell in ((better, row[-4]), (worse, row[-3])):
            assert (cell == f"`{side['system']}` {side['mean']:.1f} ({side['n']} run)" if side["n"] == 1 else
                    cell == f"`{side['system']}` {side['mean']:.1f} ± {side['sd']:.1f} ({side['n']})")
            assert len(side["values"]) == side["n"] and side["mean"] == pytest.approx(np.mean(side["values"]))
    b_over_a, _, v_over_w, w_over_v = claims
    assert (b_over_a["test"], b_over_a["ahead"], b_over_a["notes"]) == ("welch", "b", ["cpu"])
    assert b_over_a["better"]["values"] == pytest.approx([200.0, 197.0]) and b_over_a["diff"] == pytest.approx(18.5)
    assert b_over_a["paper_values"] == {"better": 115.5, "worse": 110.0, "gap": 5.5}
    assert v_over_w["ci"] == [None, None] and v_over_w["cohens_d"] is None  # no spread: no interval, no d
    assert v_over_w["reason"] == {"kind": SEEDS, "why": "no seeds in this world", "link": None, "mde": None,
                                  "runs_needed": None}
    assert v_over_w["paper_values"]["gap"] == 9.75 and v_over_w["world"] == "msvd"
    assert w_over_v["reason"]["kind"] == WORLD and w_over_v["reason"]["why"] == "Nothing to act on."
    assert [(s["world"], s["std"] is None, s["groups"]) for s in data["spreads"]] == [
        ("images", False, ["a", "b"]), ("msvd", True, [])]
    counts = data["counts"]
    assert sum(counts.values()) == len(claims) and counts == {HOLDS: 1, REVERSED: 1, UNCLEAR: 1, UNTESTABLE: 1,
                                                               PENDING: 0}
    assert sum(data["undecided_by_reason"].values()) == counts[UNCLEAR]
    assert (counts[HOLDS], counts[UNTESTABLE], data["undecided_by_reason"][SEEDS]) == (
        page.counts[HOLDS], page.counts[WORLD], page.counts[SEEDS])


def test_a_pending_claim_is_data_without_a_verdict_and_an_undecided_one_carries_its_numbers(tmp_path):
    table = _load(tmp_path, [CLAIM])
    pending = _build([table], _config(), _metrics(tmp_path / "pending", {"a": 180.0})).data["claims"][0]
    assert (pending["verdict"], pending["diff"], pending["ci"], pending["test"], pending["ahead"]) == (
        PENDING, None, None, None, None)
    assert pending["better"] == {"system": "b", "values": [], "mean": None, "sd": None, "n": 0}
    page = _build([table], _config(), _metrics(tmp_path, {"a": 180.0, "a_seed1": 195.0, "a_seed2": 170.0,
                                                          "b": 186.0}))
    result, (claim,) = page.results["t"]["b_over_a"], json.loads(json.dumps(page.data, allow_nan=False))["claims"]
    assert claim["reason"] == {"kind": SEEDS, "why": None, "link": None, "mde": pytest.approx(result.mde),
                               "runs_needed": result.runs_needed}
    assert claim["ci"] == pytest.approx([result.verdict.low, result.verdict.high]) and claim["test"] == "pooled"


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in markdown.splitlines() if line.startswith("#")}


def test_every_untestable_claim_links_a_section_of_the_docs_that_exists():
    tables = [load_table(p) for p in sorted(paper_tables("*").parent.parent.glob("*/tables/*.yaml"))]
    links = {c.untestable.link for t in tables for c in t.claims if c.untestable}
    assert links, "no claim is marked untestable"
    root = Path(__file__).resolve().parents[2]
    for link in links:
        page, anchor = link.split("#")
        assert anchor in _anchors((root / page).read_text()), f"{link}: no such section"
    assert "missing-section" not in _anchors((root / "docs/synthetic-worlds.md").read_text())


def test_the_minimum_detectable_effect_has_the_power_it_promises():
    """The MDE formula against the exact power of the two-sided t-test (noncentral t), and the runs a side."""
    for std, n1, n2, df in ((10.0, 1, 4, 24), (11.3, 3, 3, 24), (1.4, 1, 3, 12), (5.0, 4, 4, 6)):
        effect = mde(std, n1, n2, df, 0.95)
        ncp = effect / (std * math.sqrt(1 / n1 + 1 / n2))
        crit = stats.t.ppf(0.975, df)
        power = 1 - stats.nct.cdf(crit, df, ncp) + stats.nct.cdf(-crit, df, ncp)
        assert power == pytest.approx(0.8, abs=0.03)
    n = runs_to_decide(6.0, 11.3, 0.95)
    assert mde(11.3, n, n, 2 * n - 2, 0.95) <= 6.0 < mde(11.3, n - 1, n - 1, 2 * n - 4, 0.95)
    assert runs_to_decide(0.01, 11.3, 0.95) is None and runs_to_decide(0.0, 11.3, 0.95) is None


def test_a_real_split_tables_claims_are_judged_on_that_split_under_a_real_profile(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({**_table([CLAIM]), "real_split": "val"}, sort_keys=False))
    table, cfg = load_table(path), _config()
    metrics = _metrics(tmp_path, {"a": 180.0, "a_seed1": 182.0, "a_seed2": 178.0, "b": 200.0})
    for name, val in {"a": 2.0, "a_seed1": 2.02, "a_seed2": 1.98, "b": 1.5}.items():  # on val, b is worse
        data = json.loads((metrics / f"{name}.json").read_text())
        (metrics / f"{name}.json").write_text(json.dumps({**data, "val": {"CIDEr": val}}))
    synthetic = _build([table], cfg, metrics)
    assert _page_rows(synthetic.markdown)["b > a"][4].startswith("**holds**")  # test, as on synthetic data
    (metrics / "data_profile.json").write_text(json.dumps({"profile": "real", "synthetic": False}))
    real = _build([table], cfg, metrics)
    row = _page_rows(real.markdown)["b > a"]
    assert row[0] == "New over Base (on val)" and row[2:4] == ["`b` 150.0 (1 run)", "`a` 200.0 ± 2.0 (3)"]
    assert row[4].startswith("**reversed**[^pooled]: `a` ahead by +50.0")


def test_the_index_links_the_claims_page_first_and_counts_each_tables_claims_that_hold(tmp_path):
    from crossmodal.reports.index_page import build_index

    summary = tmp_path / "tables" / "p.summary.json"
    summary.parent.mkdir()
    summary.write_text(json.dumps([{"id": "t", "table": "Table 9", "paper": "P", "reproduced": 1},
                                   {"id": "u", "table": "Table 10", "paper": "P", "cited": 2}]))
    metrics = _metrics(tmp_path, {})
    (metrics / "a.json").write_text(json.dumps({"variant": "a", "test": {"BLEU-4": 0.3, "METEOR": 0.2, "CIDEr": 1.8}}))
    index = tmp_path / "index.md"
    page = ClaimsPage("", {"t": {"x": ClaimResult(HOLDS, None, "images"), "y": ClaimResult(REVERSED, None, "images"),
                                 "z": ClaimResult(UNCLEAR, SEEDS, "images"), "w": ClaimResult(PENDING, None, "images"),
                                 "v": ClaimResult(UNTESTABLE, WORLD, "images")}})  # u records no claims
    build_index([summary], summary.parent, index, metrics, {"a": "xlan"}, "| status |", (tmp_path / "claims.md", page))
    lines = [line for line in index.read_text().splitlines() if line]
    assert lines[:2] == ["# Reproduced tables", "**Start here: [the papers' claims, tested over seeds](claims.md)** "
                         "(5 claims: 1 hold, 1 reversed, 1 undecided for want of seeds, 1 untestable on the worlds, "
                         "1 pending)."]
    assert lines[2].startswith("**Computed on:") and lines[3] == "## Status of the papers"
    assert "| Table | Source | Paper | Rows run | Server only | Pending | Cited | Claims that hold |" in lines
    assert "| [t](tables/t.md) | Table 9 | P | 1 | 0 | 0 | 0 | 1 of 4 |" in lines  # the untestable one left out
    assert "| [u](tables/u.md) | Table 10 | P | 0 | 0 | 0 | 2 | — |" in lines
