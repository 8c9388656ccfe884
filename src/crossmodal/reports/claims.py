"""The papers' claims tested over seeds: the verdicts and the page `reports/claims.md`.

A claim (a transcribed table's `claims:`, tables.py) says that system `better` beats system `worse` on a metric. Each
side is measured as the seed group of its system (`seed_groups`): the system and every system that differs from it
only by `train.seed` (and, for an SCST system, by `init`, the same cross-entropy system under another seed). An
ensemble is one run. A side's values are the test metric of each run in `<metrics_dir>/<system>.json`, on the paper's
scale (x100 for CIDEr-D).

Verdict at CONFIDENCE (95%), on the difference of means (better - worse):

- both sides with at least 2 runs: Welch's t-test (`scipy.stats.ttest_ind(..., equal_var=False)`) and its confidence
  interval of the difference;
- a side with a single run: the pooled seed spread instead, i.e. the standard deviation pooled (weighted by n - 1)
  over every seed group with at least 2 runs, standard error s_p * sqrt(1/n_better + 1/n_worse) and a t interval with
  the pooled degrees of freedom.

**holds** when the interval lies above 0, **reversed** when below, else **not distinguishable with** the two n's.
The effect size is always given: the difference of means and Cohen's d (the difference over the pooled standard
deviation: of the two sides under Welch, the pooled seed spread otherwise). A decided verdict whose difference is
smaller than the cross-CPU spread (`cross_cpu_spread`: how far Up-Down's test CIDEr-D moves across CPUs and kernel
paths) says so.
"""
from __future__ import annotations

import dataclasses
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from crossmodal.io import InputError, read_json
from crossmodal.reports.tables import Claim, PaperTable, _decimals_of, _md_row, _profile_line, _Results

CONFIDENCE = 0.95
# Paths here, not in paths.py: every training stage's code closure holds paths.py, and a page of the index must not
# rerun them.
CLAIMS = Path("reports/claims.md")  # this page, linked first from reports/index.md
SPREAD = Path("benchmarks/results/spread.json")  # how results move across CPUs and kernel paths (bench_spread.py)
HOLDS, REVERSED, UNCLEAR = "holds", "reversed", "not distinguishable"
PENDING = "pending"  # a claim whose systems are not all trained yet: no verdict
METRIC_NAMES = {"CIDEr": "CIDEr-D"}  # our metric keys as the reader knows them
SCST_NOTE = ("SCST over cross-entropy: on this world SCST raises test CIDEr-D for the X-LAN family but lowers it for "
             "the LSTM captioners; [docs/results.md](../docs/results.md) reports it and the convergence issue's probes "
             "([benchmarks/results/scst.md](../benchmarks/results/scst.md)) look for the cause")


# ---------------------------------------------------------------- seed groups


def _seedless(cfg, name: str) -> tuple:
    """What a system is apart from its seed: its resolved config's fields, `train` with the seed set to 0, and in
    place of `init` the seedless form of the init system."""
    system = cfg.systems()[name]
    fields = {f.name: getattr(system, f.name) for f in dataclasses.fields(system) if f.name not in ("train", "init")}
    init = None if system.init is None else _seedless(cfg, system.init)
    return fields, dataclasses.replace(system.train, seed=0), init


def seed_groups(cfg) -> dict[str, tuple[str, ...]]:
    """{system or ensemble: the names of its seed group}, the system first, then the other seeds in params order
    (one system per seed: a system identical to another, seed included, is the same run). An ensemble, and a row of
    a study stage's measured table (`Config.measured_rows`), is its own group of one."""
    systems = cfg.systems()
    seedless = {name: _seedless(cfg, name) for name in systems}
    groups = {}
    for name in systems:
        seeds, members = {systems[name].train.seed}, [name]
        for other in systems:
            if other != name and systems[other].train.seed not in seeds and seedless[other] == seedless[name]:
                seeds.add(systems[other].train.seed)
                members.append(other)
        groups[name] = tuple(members)
    measured = [*cfg.ensembles(), *cfg.measured_rows()]
    return {**groups, **{name: (name,) for name in measured}}


def objectives(cfg) -> dict[str, str]:
    """{system or ensemble: xe | scst}; an ensemble has its members' objective."""
    systems = cfg.systems()
    return {**{n: s.objective for n, s in systems.items()},
            **{n: systems[e.members[0]].objective for n, e in cfg.ensembles().items()}}


# ---------------------------------------------------------------- statistics


@dataclass(frozen=True)
class Spread:
    """The seed standard deviation pooled over several groups (weighted by n - 1), its degrees of freedom and the
    groups it pools (each named by its first system)."""
    std: float
    df: int
    groups: tuple[str, ...]


@dataclass(frozen=True)
class Verdict:
    """The judgement of one claim: the verdict, the difference of means (better - worse) with its CONFIDENCE
    interval, Cohen's d (None when the spread is 0), the test ("welch" or "pooled") and the runs of each side."""
    verdict: str
    diff: float
    low: float
    high: float
    d: float | None
    test: str
    n_better: int
    n_worse: int

    def label(self) -> str:
        """The verdict as the page prints it, e.g. "not distinguishable with 1 and 4 seeds" (worse, better)."""
        return f"{UNCLEAR} with {self.n_worse} and {self.n_better} seeds" if self.verdict == UNCLEAR else self.verdict


def pooled_spread(groups: dict[str, Sequence[float]]) -> Spread | None:
    """The pooled standard deviation of the groups ({name: values}) that have at least 2 values; None without one."""
    used = {name: np.asarray(v, dtype=float) for name, v in groups.items() if len(v) >= 2}
    if not used:
        return None
    df = sum(len(v) - 1 for v in used.values())
    std = math.sqrt(sum((len(v) - 1) * v.var(ddof=1) for v in used.values()) / df)
    return Spread(std, df, tuple(used))


def _decide(diff: float, low: float, high: float, d: float | None, test: str, n_better: int, n_worse: int) -> Verdict:
    verdict = HOLDS if low > 0 else REVERSED if high < 0 else UNCLEAR
    return Verdict(verdict, diff, low, high, d, test, n_better, n_worse)


def welch(better: Sequence[float], worse: Sequence[float], confidence: float = CONFIDENCE) -> Verdict:
    """Welch's t-test of mean(better) - mean(worse), both sides with at least 2 values."""
    a, b = np.asarray(better, dtype=float), np.asarray(worse, dtype=float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError("Welch's test needs at least 2 values a side")
    diff = float(a.mean() - b.mean())
    pooled = pooled_spread({"better": a, "worse": b}).std
    d = diff / pooled if pooled > 0 else None
    if a.var() == 0 and b.var() == 0:  # no spread at all: the interval is the difference itself
        return _decide(diff, diff, diff, d, "welch", len(a), len(b))
    from scipy import stats  # here, not at the top: the stages that only plan (code, params) skip its 0.7 s import

    interval = stats.ttest_ind(a, b, equal_var=False).confidence_interval(confidence)
    return _decide(diff, float(interval.low), float(interval.high), d, "welch", len(a), len(b))


def against_spread(better: Sequence[float], worse: Sequence[float], spread: Spread,
                   confidence: float = CONFIDENCE) -> Verdict:
    """mean(better) - mean(worse) judged with the pooled seed spread: standard error s_p * sqrt(1/n_a + 1/n_b), a t
    interval with the spread's degrees of freedom."""
    from scipy import stats

    a, b = np.asarray(better, dtype=float), np.asarray(worse, dtype=float)
    diff = float(a.mean() - b.mean())
    half = stats.t.ppf(0.5 + confidence / 2, spread.df) * spread.std * math.sqrt(1 / len(a) + 1 / len(b))
    d = diff / spread.std if spread.std > 0 else None
    return _decide(diff, diff - half, diff + half, d, "pooled", len(a), len(b))


def judge(better: Sequence[float], worse: Sequence[float], spread: Spread | None) -> Verdict:
    """Welch when both sides have at least 2 runs, else the pooled seed spread; without one (no group has 2 runs),
    not distinguishable."""
    if len(better) >= 2 and len(worse) >= 2:
        return welch(better, worse)
    if spread is None:
        diff = float(np.mean(better) - np.mean(worse))
        return Verdict(UNCLEAR, diff, -math.inf, math.inf, None, "pooled", len(better), len(worse))
    return against_spread(better, worse, spread)


def cross_cpu_spread(path: Path) -> float:
    """Max - min of Up-Down's test CIDEr-D (x100) over the rows of benchmarks/results/spread.json (bench_spread.py:
    one row per CPU capability, kernel path and thread count)."""
    rows = read_json(path)
    if not isinstance(rows, list) or len(rows) < 2:
        raise InputError(f"{path}: expected a list of at least 2 runs")
    values = []
    for i, row in enumerate(rows):
        test = row.get("updown_test") if isinstance(row, dict) else None
        value = test.get("CIDEr") if isinstance(test, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"{path}: run {i} has no number at updown_test.CIDEr")
        values.append(float(value))
    return max(values) - min(values)


# ---------------------------------------------------------------- the page


@dataclass(frozen=True)
class ClaimsPage:
    """The page's Markdown and the verdict of every claim ({table id: {claim id: HOLDS, REVERSED, UNCLEAR or
    PENDING}}, in the page's order)."""
    markdown: str
    verdicts: dict[str, dict[str, str]]

    @property
    def counts(self) -> dict[str, int]:
        """Claims per verdict (HOLDS, REVERSED, UNCLEAR, PENDING)."""
        found = [v for table in self.verdicts.values() for v in table.values()]
        return {verdict: found.count(verdict) for verdict in (HOLDS, REVERSED, UNCLEAR, PENDING)}

    def held(self, table_ids: Sequence[str]) -> str:
        """"k of m": of the m claims of the tables `table_ids`, the k that hold; "—" when they have none."""
        found = [v for t in table_ids for v in self.verdicts.get(t, {}).values()]
        return f"{found.count(HOLDS)} of {len(found)}" if found else "—"

    def summary(self) -> str:
        """One line of counts for the index, e.g. "14 claims: 3 hold, 1 reversed, 10 not distinguishable"."""
        c = self.counts
        parts = [f"{c[HOLDS]} hold", f"{c[REVERSED]} reversed", f"{c[UNCLEAR]} not distinguishable"]
        parts += [f"{c[PENDING]} pending"] * bool(c[PENDING])
        return f"{sum(c.values())} claims: " + ", ".join(parts)


def _ours(values: list[float]) -> str:
    if not values:
        return "pending"
    if len(values) == 1:
        return f"{values[0]:.1f} (1 run)"
    return f"{np.mean(values):.1f} ± {np.std(values, ddof=1):.1f} ({len(values)})"


def _printed(value: float) -> str:
    """A paper's value as it printed it (at least one decimal: 120.0, not 120)."""
    return f"{value:.{max(1, _decimals_of(value))}f}"


def _signed(value: float) -> str:
    return "−∞" if value == -math.inf else "+∞" if value == math.inf else f"{value:+.1f}".replace("-", "−")


class _Seeds:
    """The runs of each seed group in the metrics files (each read once), and the pooled seed spread per metric."""

    def __init__(self, groups: dict[str, tuple[str, ...]], metrics_dir: Path):
        self.groups, self.results, self._spreads = groups, _Results(metrics_dir, set(groups)), {}

    def values(self, name: str, metric: str, scale: float, split: str = "test") -> list[float]:
        """The values (x scale) on `split` of the runs of `name`'s seed group that have the metric; none while `name`
        itself has no metrics file (pending)."""
        if name not in self.groups or self.results.test(name, split) is None:
            return []
        tests = [self.results.test(m, split) for m in self.groups[name]]
        return [scale * t[metric] for t in tests if t is not None and t.get(metric) is not None]

    def spread(self, metric: str, scale: float, split: str = "test") -> Spread | None:
        """The pooled spread of every distinct seed group with at least 2 runs (each named by its first system)."""
        if (metric, scale, split) not in self._spreads:
            distinct: dict[frozenset, str] = {}
            for name, members in self.groups.items():
                distinct.setdefault(frozenset(members), name)
            self._spreads[metric, scale, split] = pooled_spread(
                {n: self.values(n, metric, scale, split) for n in distinct.values()})
        return self._spreads[metric, scale, split]


def _claim_row(claim: Claim, seeds: _Seeds, objective: dict[str, str], cpu_spread: float | None,
               split: str = "test") -> tuple[list[str], str, list[str]]:
    """The table row of one claim, its verdict (or "pending") and the footnote marks it carries; ours on `split`."""
    better = seeds.values(claim.better, claim.metric, claim.scale, split)
    worse = seeds.values(claim.worse, claim.metric, claim.scale, split)
    metric = "" if claim.metric == "CIDEr" else f", {METRIC_NAMES.get(claim.metric, claim.metric)}"
    metric += "" if split == "test" else f", on {split}"
    cells = [f"{claim.text} (`{claim.better}` > `{claim.worse}`{metric})",
             f"{_printed(claim.paper_worse)} → {_printed(claim.paper_better)}", _ours(worse), _ours(better)]
    if not better or not worse:
        return cells + [PENDING, ""], PENDING, []
    verdict = judge(better, worse, seeds.spread(claim.metric, claim.scale, split))
    marks = ["[^pooled]"] * (verdict.test == "pooled")
    if (verdict.verdict != UNCLEAR and claim.metric == "CIDEr" and cpu_spread is not None
            and abs(verdict.diff) < cpu_spread):
        marks.append("[^cpu]")
    if objective.get(claim.better) == "scst" and objective.get(claim.worse) == "xe":
        marks.append("[^scst]")
    d = "n/a" if verdict.d is None else f"{verdict.d:.2f}".replace("-", "−")
    effect = f"{_signed(verdict.diff)} [{_signed(verdict.low)}, {_signed(verdict.high)}], d {d}"
    return cells + [f"**{verdict.label()}**{''.join(marks)}", effect], verdict.verdict, marks


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, width=116, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def _source(table: PaperTable, claim: Claim) -> list[str]:
    """A claim's list item under its paper's table: the paper's words and where they stand."""
    return _wrap(f"- {claim.text}, {table.source_table}, {claim.where}: \"{claim.quote}\""
                 + (f" {claim.note}" if claim.note else ""), "  ")


def build_claims(papers: dict[str, list[PaperTable]], groups: dict[str, tuple[str, ...]], objective: dict[str, str],
                 metrics_dir: Path, cpu_spread: float | None, cpu_source: str = "") -> ClaimsPage:
    """reports/claims.md from the claims of every paper's tables ({paper: tables}), the seed groups (`seed_groups`)
    and objectives (`objectives`) of the trained systems, their metrics files and the cross-CPU spread in CIDEr-D
    points (None: not compared; `cpu_source` names where it was measured)."""
    seeds = _Seeds(groups, metrics_dir)
    verdicts: dict[str, dict[str, str]] = {}
    sections, used = [], set()
    for tables in papers.values():
        claims = [(t, c) for t in tables for c in t.claims]
        if not claims:
            continue
        rows, sources = [], []
        for table, claim in claims:
            split = table.split(read_json(metrics_dir / table.data_profile) if table.real_split else None)
            cells, verdict, marks = _claim_row(claim, seeds, objective, cpu_spread, split)
            verdicts.setdefault(table.id, {})[claim.id] = verdict
            used.update(marks)
            rows.append(_md_row(cells))
            sources += _source(table, claim)
        sections += [f"## {tables[0].paper}", "",
                     "| Claim (better > worse) | Paper: worse → better | Ours: worse | Ours: better | Verdict "
                     "| Δ [95% CI], Cohen's d |", "|---|---|---|---|---|---|", *rows, "", "Sources:", "", *sources, ""]

    lines = ["# The papers' claims, tested over seeds", ""]
    first = next((t for tables in papers.values() for t in tables), None)
    if first is not None:
        profile_path = metrics_dir / first.data_profile
        lines += [_profile_line(read_json(profile_path), profile_path, first.dataset), ""]
    if (environment := seeds.results.environment_line()) is not None:
        lines += [environment, ""]
    lines += [*_wrap(_method(papers, seeds, cpu_spread, cpu_source), ""), "", *sections]
    where = f", {cpu_source}" if cpu_source else ""
    notes = {"[^pooled]": "Judged with the pooled seed spread: a side has a single run.",
             "[^cpu]": f"The difference is smaller than the cross-CPU spread of Up-Down's test CIDEr-D "
                       f"({cpu_spread or 0:.1f} points{where}): another machine could move a result that far.",
             "[^scst]": f"{SCST_NOTE}."}
    for mark, note in notes.items():
        if mark in used:
            lines += [*_wrap(f"{mark}: {note}", "    "), ""]
    return ClaimsPage("\n".join(lines).rstrip("\n") + "\n", verdicts)


def _method(papers: dict[str, list[PaperTable]], seeds: _Seeds, cpu_spread: float | None, cpu_source: str) -> str:
    """The paragraph that states the test once, with the pooled seed spread of each metric the claims use."""
    metrics = dict.fromkeys((c.metric, c.scale) for tables in papers.values() for t in tables for c in t.claims)
    pooled = []
    for metric, scale in metrics:
        spread = seeds.spread(metric, scale)
        name = METRIC_NAMES.get(metric, metric)
        pooled.append(f"{name} {spread.std:.1f} points ({spread.df} degrees of freedom, from the seeds of "
                      f"{', '.join(f'`{g}`' for g in spread.groups)})" if spread else f"{name}: none measured")
    text = (f"Each claim says a system beats another on a test metric (CIDEr-D unless it says otherwise); XE = "
            f"cross-entropy, SCST = continued by self-critical training. Ours: the "
            f"mean ± standard deviation over the runs of the system's seeds (n), values x100 as in the papers. "
            f"Verdict at {CONFIDENCE:.0%} confidence on the difference of means, better − worse: Welch's t-test "
            f"(scipy) when both sides have at least 2 runs; when a side has a single run, a t interval from the "
            f"pooled seed spread of every system trained with several seeds (pooled standard deviation: "
            f"{'; '.join(pooled) or 'none'}). **holds**: the interval lies above 0; **reversed**: below 0; else "
            f"**not distinguishable** with the n of each side (worse, better). Effect size: Δ, the difference of "
            f"means in points, with its interval, and Cohen's d, Δ over the pooled standard deviation (of the two "
            f"sides under Welch, the pooled seed spread otherwise).")
    if cpu_spread is not None:
        text += (f" A decided verdict whose Δ is smaller than the cross-CPU spread ({cpu_spread:.1f} CIDEr-D points"
                 f"{f', {cpu_source}' if cpu_source else ''}) says so.")
    return text
