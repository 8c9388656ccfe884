"""The papers' claims tested over seeds: the verdicts and the page `reports/claims.md`.

A claim (a table's `claims:`, table_schema.py) says that system `better` beats system `worse` on a metric. Each
side is measured as the seed group of its system (`seed_groups`): the system and every system that differs from it
only by `train.seed` (and, for an SCST system, by `init`, the same cross-entropy system under another seed). An
ensemble is one run. A side's values are the test metric of each run in `<metrics_dir>/<system>.json`, on the paper's
scale (x100 for CIDEr-D).

1. Worlds. Each system belongs to one world (`worlds`, from its config: the corpus of a captioner's vocabulary, the
   image world or one video dataset; VQA; grounding). The spread of a world and metric is the standard deviation
   pooled (weighted by n - 1) over that world's seed groups with at least 2 runs; a claim is judged with its own
   world's spread only, never another's.
2. Verdict at CONFIDENCE (95%), on the difference of means (better - worse): Welch's t-test
   (`scipy.stats.ttest_ind(..., equal_var=False)`) when both sides have at least 2 runs; otherwise a t interval from
   the world's spread, standard error s * sqrt(1/n_better + 1/n_worse). **holds** when the interval lies above 0,
   **reversed** when below, else **undecided**. The effect size is always given: which of ours is ahead, by how
   much, and Cohen's d.
3. Reasons. An undecided claim carries one reason: `recipe` when a side's runs were trained by a recipe known to be
   wrong (RECIPE_FLAW: SCST from sampled captions, read from the runs' own histories), else `seeds`, with the minimum
   detectable effect at its n and the runs a side that would decide the paper's gap (power.py), both from the
   world's spread, or "no seeds in this world" when the world has no spread. A claim whose YAML says `untestable`
   (the world cannot express the mechanism) is **untestable**, reason `world`: listed apart on the page and left out
   of the claims that can hold.
4. A decided verdict whose difference is smaller than the cross-CPU spread (`cross_cpu_spread`: how far Up-Down's
   test CIDEr-D moves across CPUs and kernel paths) says so.
5. The same results as data: `ClaimsPage.data`, written to `reports/claims.json` beside the page, is built in the
   same pass from the same results and rows (`_entry`), so the two cannot disagree.
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
from crossmodal.reports.power import N_CAP, POWER, mde, runs_to_decide
from crossmodal.reports.results import Results, decimals_of, md_row, profile_line
from crossmodal.reports.table_schema import Claim, PaperTable
from crossmodal.task_specs import SPECS

CONFIDENCE = 0.95
# Paths here, not in paths.py: every training stage's code closure holds paths.py, and a page of the index must not
# rerun them.
CLAIMS = Path("reports/claims.md")  # this page, linked first from reports/index.md
CLAIMS_JSON = CLAIMS.with_suffix(".json")  # the same results as data (ClaimsPage.data)
SPREAD = Path("benchmarks/results/spread.json")  # how results move across CPUs and kernel paths (bench_spread.py)
SELECTION = "benchmarks/results/selection.md"  # what part of a run's seed spread the epoch's selection makes
HOLDS, REVERSED, UNCLEAR, UNTESTABLE = "holds", "reversed", "undecided", "untestable"
PENDING = "pending"  # a claim whose systems are not all trained yet: no verdict
SEEDS, RECIPE, WORLD = "seeds", "recipe", "world"  # why a claim is undecided (SEEDS, RECIPE) or untestable (WORLD)
METRIC_NAMES = {"CIDEr": "CIDEr-D"}  # our metric keys as the reader knows them
WORLD_NAMES = {world: name for spec in SPECS.values() for world, name in spec.worlds.items()}  # task_specs.py
# A recipe known to be wrong, as a run's history shows it: SCST whose candidates are multinomial samples logs their
# reward under this key (tasks/objectives/scst.py REWARD_KEYS["sample"]); the sentence and the evidence the page links.
SAMPLED_SCST = "train_CIDEr_sample"
RECIPE_FLAW = ("SCST from multinomial samples (`train.scst.candidates: sample`) lowers the beam-decoded captions that "
               "the tables score on these worlds", "benchmarks/results/scst.md")


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


def worlds(cfg) -> dict[str, str]:
    """{system, ensemble or measured row: its world}: a captioner's is the corpus of its vocabulary (`images`, or a
    video dataset: `msvd`, `msrvtt`: its task's spec says `per_corpus`), a VQA or grounding system's its task; an
    ensemble's that of its members, a measured row's that of the system it measures."""
    systems = cfg.systems()

    def world(name: str) -> str:
        model = cfg.model_of(name)
        return cfg.vocabularies[model.vocabulary].corpus if SPECS[model.task].per_corpus else model.task

    found = {name: world(name) for name in systems}
    found.update({name: found[e.members[0]] for name, e in cfg.ensembles().items()})
    return {**found, **{row: found[system] for row, system in cfg.measured_rows().items()}}


@dataclass(frozen=True)
class Systems:
    """What the verdicts read of the config: each system's seed group (`seed_groups`), its world (`worlds`) and the
    trained systems behind it (an ensemble's members; itself otherwise)."""
    groups: dict[str, tuple[str, ...]]
    world: dict[str, str]
    members: dict[str, tuple[str, ...]]

    @classmethod
    def of(cls, cfg) -> "Systems":
        groups = seed_groups(cfg)
        members = {name: (name,) for name in groups}
        return cls(groups, worlds(cfg), {**members, **{n: e.members for n, e in cfg.ensembles().items()}})


# ---------------------------------------------------------------- statistics


@dataclass(frozen=True)
class Spread:
    """The seed standard deviation pooled over several groups (weighted by n - 1), its degrees of freedom and the
    groups it pools (each named by its first system): the spread of one world and metric."""
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

    def leader(self, better: str, worse: str) -> str | None:
        """Which of ours came out ahead (`better`, `worse`: the two systems as the paper ranks them); None when tied."""
        return None if self.diff == 0 else better if self.diff > 0 else worse

    def ahead(self, better: str, worse: str) -> str:
        """Which of ours came out ahead and by how much, with the interval of that lead, e.g. "`b` ahead by +6.5
        [+3.8, +9.3]" (`better`, `worse`: the two systems as the paper ranks them)."""
        name = self.leader(better, worse)
        if name is None:
            return f"{better} and {worse} tied"
        sign = 1 if self.diff > 0 else -1
        low, high = sorted((sign * self.low, sign * self.high))
        interval = "" if math.isinf(low) or math.isinf(high) else f" [{_signed(low)}, {_signed(high)}]"
        return f"{name} ahead by {_signed(sign * self.diff)}{interval}"


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
    """Welch when both sides have at least 2 runs, else the pooled seed spread of the claim's world; without one (no
    group of that world has 2 runs), undecided."""
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


# ---------------------------------------------------------------- the results


@dataclass(frozen=True)
class ClaimResult:
    """One claim judged, as data: its outcome (HOLDS, REVERSED, UNCLEAR, UNTESTABLE or PENDING); the reason of an
    undecided or untestable one (SEEDS, RECIPE or WORLD; None otherwise), in a sentence (`why`) with the link to its
    evidence where it has one; the claim's world; the test (None while pending); and for reason SEEDS the minimum
    detectable effect at its n (None: no spread in this world) and the runs a side that would decide the paper's gap
    (None: no spread, no gap, or more than power.N_CAP); and the values it was judged on, of the paper's better
    and worse system's seed groups (empty while a side is pending)."""
    outcome: str
    reason: str | None
    world: str
    verdict: Verdict | None = None
    mde: float | None = None
    runs_needed: int | None = None
    why: str | None = None
    link: str | None = None
    better_values: tuple[float, ...] = ()
    worse_values: tuple[float, ...] = ()

    @property
    def category(self) -> str:
        """What the counts count it as: HOLDS, REVERSED or PENDING, else its reason (SEEDS, RECIPE, WORLD)."""
        return self.reason or self.outcome


# the status table's claim columns, by category; RECIPE and PENDING only where the page has such claims
COLUMNS = {HOLDS: "Hold", REVERSED: "Reversed", SEEDS: "Undecided: seeds", RECIPE: "Undecided: recipe",
           PENDING: "Pending", WORLD: "Untestable on the world"}
TESTABLE = "Testable claims"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


@dataclass(frozen=True)
class ClaimsPage:
    """The page's Markdown, every claim's result ({table id: {claim id: ClaimResult}}, in the page's order) and the
    same results as JSON-ready data (reports/claims.json: `build_claims` fills it from the objects it renders; numbers
    as numbers, None for what is not finite)."""
    markdown: str
    results: dict[str, dict[str, ClaimResult]]
    data: dict = dataclasses.field(default_factory=dict)

    def _found(self, table_ids: Sequence[str] | None = None) -> list[str]:
        return [r.category for t in (self.results if table_ids is None else table_ids)
                for r in self.results.get(t, {}).values()]

    @property
    def counts(self) -> dict[str, int]:
        """Claims per category (the keys of COLUMNS)."""
        found = self._found()
        return {category: found.count(category) for category in COLUMNS}

    def held(self, table_ids: Sequence[str]) -> str:
        """"k of m": of the m claims of the tables `table_ids` that the worlds can test, the k that hold; "—" when
        they have none."""
        testable = [c for c in self._found(table_ids) if c != WORLD]
        return f"{testable.count(HOLDS)} of {len(testable)}" if testable else "—"

    def tally(self, table_ids: Sequence[str]) -> dict[str, str]:
        """{column: cell} of the status table's claims for the tables `table_ids`: how many the worlds can test,
        then the count of each category ("—" for tables without claims)."""
        found, counts = self._found(table_ids), self.counts
        shown = [c for c in COLUMNS if c not in (RECIPE, PENDING) or counts[c]]
        testable = sum(c != WORLD for c in found)
        return {TESTABLE: str(testable) if found else "—",
                **{COLUMNS[c]: str(found.count(c)) if found else "—" for c in shown}}

    def tally_note(self) -> str:
        """What the claim columns of `tally` count."""
        recipe = " (recipe: a side trained by a recipe known to be wrong)" if self.counts[RECIPE] else ""
        pending = ", or waits for a system (pending)" if self.counts[PENDING] else ""
        return ("Claims (`reports/claims.md`): each ordering a paper asserts holds, is reversed, is undecided for want "
                f"of seeds{recipe}{pending}, or is untestable on the world and left out of the testable ones.")

    def summary(self) -> str:
        """One line of counts for the index, e.g. "14 claims: 3 hold, 1 reversed, 10 undecided for want of seeds"."""
        c = self.counts
        parts = [f"{c[HOLDS]} hold", f"{c[REVERSED]} reversed", f"{c[SEEDS]} undecided for want of seeds"]
        parts += [f"{c[RECIPE]} undecided by a recipe known to be wrong"] * bool(c[RECIPE])
        parts += [f"{c[WORLD]} untestable on the worlds"] * bool(c[WORLD])
        parts += [f"{c[PENDING]} pending"] * bool(c[PENDING])
        return f"{sum(c.values())} claims: " + ", ".join(parts)

    def sentence(self) -> str:
        """The counts in plain words (the README's first lines), e.g. "Of the 61 claims the worlds can test, 9 hold,
        2 are reversed and 50 are undecided for want of seeds; 15 more are untestable on these worlds."."""
        c = self.counts
        parts = [_count(c[HOLDS], "holds", "hold"), _count(c[REVERSED], "is reversed", "are reversed"),
                 _count(c[SEEDS], "is undecided for want of seeds", "are undecided for want of seeds")]
        parts += [_count(c[RECIPE], "is undecided because a side was trained by a recipe known to be wrong",
                         "are undecided because a side was trained by a recipe known to be wrong")] * bool(c[RECIPE])
        parts += [_count(c[PENDING], "waits for systems not trained yet",
                         "wait for systems not trained yet")] * bool(c[PENDING])
        testable = sum(c.values()) - c[WORLD]
        text = f"Of the {_count(testable, 'claim', 'claims')} the worlds can test, {_join(parts)}"
        return text + (f"; {c[WORLD]} more {'is' if c[WORLD] == 1 else 'are'} untestable on these worlds."
                       if c[WORLD] else ".")


class _Seeds:
    """The runs of each seed group in the metrics files (each read once), the spread per world and metric, and which
    systems a recipe known to be wrong trained."""

    def __init__(self, systems: Systems, metrics_dir: Path):
        self.systems, self.results, self._spreads = systems, Results(metrics_dir, set(systems.groups)), {}

    def values(self, name: str, metric: str, scale: float, split: str = "test") -> list[float]:
        """The values (x scale) on `split` of the runs of `name`'s seed group that have the metric; none while `name`
        itself has no metrics file (pending)."""
        if name not in self.systems.groups or self.results.test(name, split) is None:
            return []
        tests = [self.results.test(m, split) for m in self.systems.groups[name]]
        return [scale * t[metric] for t in tests if t is not None and t.get(metric) is not None]

    def spread(self, world: str, metric: str, scale: float, split: str = "test") -> Spread | None:
        """The pooled spread of every distinct seed group of `world` with at least 2 runs (each named by its first
        system)."""
        if (world, metric, scale, split) not in self._spreads:
            distinct: dict[frozenset, str] = {}
            for name, members in self.systems.groups.items():
                if self.systems.world.get(name) == world:
                    distinct.setdefault(frozenset(members), name)
            self._spreads[world, metric, scale, split] = pooled_spread(
                {n: self.values(n, metric, scale, split) for n in distinct.values()})
        return self._spreads[world, metric, scale, split]

    def sampled(self, name: str) -> bool:
        """Whether a run behind `name` (its seeds, or an ensemble's members' seeds) logged the reward of SCST from
        sampled captions in its history."""
        runs = {run for m in self.systems.members.get(name, (name,)) for run in self.systems.groups.get(m, (m,))}
        return any(SAMPLED_SCST in epoch for run in sorted(runs) if self.results.test(run) is not None
                   for epoch in self.results.metrics(run).get("history") or [] if isinstance(epoch, dict))

    def judge(self, claim: Claim, split: str) -> ClaimResult:
        """1-3 of the module's docstring for one claim, ours on `split`, with the values it was judged on."""
        better = self.values(claim.better, claim.metric, claim.scale, split)
        worse = self.values(claim.worse, claim.metric, claim.scale, split)
        result = self._judge(claim, better, worse, split)
        return dataclasses.replace(result, better_values=tuple(better), worse_values=tuple(worse))

    def _judge(self, claim: Claim, better: list[float], worse: list[float], split: str) -> ClaimResult:
        """The result of `judge` without its values: `better` and `worse` are the two sides' values on `split`."""
        world, other = self.systems.world.get(claim.better, ""), self.systems.world.get(claim.worse, "")
        world = world if world == other else f"{world} / {other}"  # two worlds: no spread judges them
        spread = self.spread(world, claim.metric, claim.scale, split)
        verdict = judge(better, worse, spread) if better and worse else None
        if claim.untestable is not None:
            return ClaimResult(UNTESTABLE, WORLD, world, verdict, why=claim.untestable.reason,
                               link=claim.untestable.link)
        if verdict is None or verdict.verdict != UNCLEAR:
            return ClaimResult(PENDING if verdict is None else verdict.verdict, None, world, verdict)
        if self.sampled(claim.better) or self.sampled(claim.worse):
            return ClaimResult(UNCLEAR, RECIPE, world, verdict, why=RECIPE_FLAW[0], link=RECIPE_FLAW[1])
        if spread is None:
            return ClaimResult(UNCLEAR, SEEDS, world, verdict, why="no seeds in this world")
        return ClaimResult(UNCLEAR, SEEDS, world, verdict, mde(spread.std, len(better), len(worse), spread.df,
                                                              CONFIDENCE),
                           runs_to_decide(claim.paper_better - claim.paper_worse, spread.std, CONFIDENCE))


# ---------------------------------------------------------------- the page


def _ours(name: str, values: list[float]) -> str:
    if not values:
        return f"`{name}` pending"
    if len(values) == 1:
        return f"`{name}` {values[0]:.1f} (1 run)"
    return f"`{name}` {np.mean(values):.1f} ± {np.std(values, ddof=1):.1f} ({len(values)})"


def _printed(value: float, decimals: int | None = None) -> str:
    """A paper's value as it printed it (at least one decimal: 120.0, not 120)."""
    return f"{value:.{max(1, decimals_of(value) if decimals is None else decimals)}f}"


def _paper(claim: Claim) -> str:
    """The paper's two values, better first, and its gap, e.g. "119.8 vs 113.5 (+6.3)"."""
    decimals = max(1, decimals_of(claim.paper_better), decimals_of(claim.paper_worse))
    gap = _printed(claim.paper_better - claim.paper_worse, decimals)
    return (f"{_printed(claim.paper_better)} vs {_printed(claim.paper_worse)} "
            f"({'+' if not gap.startswith('-') else ''}{gap.replace('-', '−')})")


def _signed(value: float) -> str:
    return "−∞" if value == -math.inf else "+∞" if value == math.inf else f"{value:+.1f}".replace("-", "−")


def _verdict_cell(claim: Claim, result: ClaimResult, marks: str) -> str:
    """The verdict column: the outcome, which of ours came out ahead, and for reason SEEDS what the seeds can tell."""
    ahead = result.verdict.ahead(f"`{claim.better}`", f"`{claim.worse}`")
    if result.outcome != UNCLEAR:
        return f"**{result.outcome}**{marks}: {ahead}"
    cell = f"**{UNCLEAR} ({result.reason})**{marks}: {ahead}"
    if result.reason == SEEDS and result.mde is None:
        return f"{cell}; {result.why}: no minimum detectable effect"
    if result.reason == SEEDS:
        decimals = max(1, decimals_of(claim.paper_better), decimals_of(claim.paper_worse))
        gap = f"{abs(claim.paper_better - claim.paper_worse):.{decimals}f}"
        needed = ("the paper prints no gap" if claim.paper_better == claim.paper_worse else
                  f"the paper's gap of {gap} needs "
                  + (f"{result.runs_needed} runs a side" if result.runs_needed else f"over {N_CAP} runs a side"))
        return f"{cell}; detectable at these n: {result.mde:.1f}; {needed}"
    return cell


def _claim_row(claim: Claim, seeds: _Seeds, result: ClaimResult, cpu_spread: float | None,
               split: str = "test") -> tuple[list[str], list[str]]:
    """The table row of one claim (the two systems as the paper ranks them) and the footnote marks it carries; ours
    on `split`, the values the result was judged on."""
    better, worse = list(result.better_values), list(result.worse_values)
    metric = "" if claim.metric == "CIDEr" else f" ({METRIC_NAMES.get(claim.metric, claim.metric)}"
    metric += "" if split == "test" else (", " if metric else " (") + f"on {split}"
    cells = [claim.text + metric + (")" if metric else ""), _paper(claim), _ours(claim.better, better),
             _ours(claim.worse, worse)]
    if result.outcome == PENDING:
        return cells + [PENDING, ""], []
    verdict = result.verdict
    if verdict is None:  # untestable, and a side not trained yet
        return cells + [PENDING, f"{result.why} ([{result.link.split('#')[0]}](../{result.link}))"], []
    marks = ["[^pooled]"] * (verdict.test == "pooled" and math.isfinite(verdict.low) and result.outcome != UNTESTABLE)
    if (verdict.verdict != UNCLEAR and result.outcome != UNTESTABLE and claim.metric == "CIDEr"
            and cpu_spread is not None and abs(verdict.diff) < cpu_spread):
        marks.append("[^cpu]")
    if result.reason == RECIPE or (result.outcome in (HOLDS, REVERSED)
                                   and (seeds.sampled(claim.better) or seeds.sampled(claim.worse))):
        marks.append("[^recipe]")
    d = "n/a" if verdict.d is None else f"{verdict.d:.2f}".replace("-", "−")
    if result.outcome == UNTESTABLE:  # listed apart
        why = f"{result.why} ([{result.link.split('#')[0]}](../{result.link}))"
        return cells + [verdict.ahead(f"`{claim.better}`", f"`{claim.worse}`"), why], marks
    return cells + [_verdict_cell(claim, result, "".join(marks)), d], marks


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, width=116, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def _source(table: PaperTable, claim: Claim) -> list[str]:
    """A claim's list item under its paper's table: the paper's words and where they stand."""
    return _wrap(f"- {claim.text}, {table.source_table}, {claim.where}: \"{claim.quote}\""
                 + (f" {claim.note}" if claim.note else ""), "  ")


HEADER = ["Claim", "Paper: better vs worse", "The paper's better system: ours",
          "The paper's worse system: ours"]
VERDICT_HEADER = ["Verdict: which of ours came out ahead, Δ [95% CI]", "Cohen's d"]
APART_HEADER = ["Which of ours came out ahead", "What the world cannot express"]


def _table(header: list[str], rows: list[str]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *rows]


def build_claims(papers: dict[str, list[PaperTable]], systems: Systems, metrics_dir: Path, cpu_spread: float | None,
                 cpu_source: str = "") -> ClaimsPage:
    """reports/claims.md from the claims of every paper's tables ({paper: tables}), the trained systems' seed groups,
    worlds and members (`Systems.of`), their metrics files and the cross-CPU spread in CIDEr-D points (None: not
    compared; `cpu_source` names where it was measured)."""
    seeds = _Seeds(systems, metrics_dir)
    results: dict[str, dict[str, ClaimResult]] = {}
    sections, apart, used, entries = [], [], set(), []
    for paper, tables in papers.items():
        rows, sources = [], []
        for table in tables:
            split = table.split(read_json(metrics_dir / table.data_profile) if table.real_split else None)
            for claim in table.claims:
                result = results.setdefault(table.id, {})[claim.id] = seeds.judge(claim, split)
                cells, marks = _claim_row(claim, seeds, result, cpu_spread, split)
                entries.append(_entry(paper, table, claim, split, result, marks))
                used.update(marks)
                (apart if result.outcome == UNTESTABLE else rows).append(md_row(
                    [tables[0].paper, *cells] if result.outcome == UNTESTABLE else cells))
                sources += _source(table, claim)
        if sources:
            sections += [f"## {tables[0].paper}", "", *_table(HEADER + VERDICT_HEADER, rows), "", "Sources:", "",
                         *sources, ""]
    if apart:
        sections += ["## Claims these worlds cannot test", "", *_wrap(
            "The mechanism each of these claims is about has nothing to act on in its world, so no number of seeds "
            "could decide it; they are left out of the claims that hold, everywhere they are counted. Their sources "
            "are listed under their papers above.", ""), "", *_table(["Paper", *HEADER, *APART_HEADER], apart), ""]
    lines = ["# The papers' claims, tested over seeds", ""]
    first = next((t for tables in papers.values() for t in tables), None)
    if first is not None:
        profile_path = metrics_dir / first.data_profile
        lines += [profile_line(read_json(profile_path), profile_path, first.dataset), ""]
    if (environment := seeds.results.environment_line()) is not None:
        lines += [environment, ""]
    spreads = _world_spreads(papers, seeds)
    lines += [*_wrap(_method(spreads, cpu_spread, cpu_source), ""), "", *sections]
    lines += _notes(used, cpu_spread, cpu_source)
    return ClaimsPage("\n".join(lines).rstrip("\n") + "\n", results, _data(entries, results, spreads, cpu_spread))


def _notes(used: set[str], cpu_spread: float | None, cpu_source: str) -> list[str]:
    """The footnotes that the page's rows mark."""
    where = f", {cpu_source}" if cpu_source else ""
    notes = {"[^pooled]": "Judged with the seed spread of the claim's world: a side has a single run.",
             "[^cpu]": f"The difference is smaller than the cross-CPU spread of Up-Down's test CIDEr-D "
                       f"({cpu_spread or 0:.1f} points{where}): another machine could move a result that far.",
             "[^recipe]": f"A side's runs were trained by a recipe known to be wrong: {RECIPE_FLAW[0]} "
                          f"([{RECIPE_FLAW[1]}](../{RECIPE_FLAW[1]}))."}
    return [line for mark, note in notes.items() if mark in used for line in [*_wrap(f"{mark}: {note}", "    "), ""]]


def _world_spreads(papers: dict[str, list[PaperTable]], seeds: _Seeds) -> list[tuple[str, str, float, Spread | None]]:
    """(world, metric, scale, its spread or None) for each world and metric the claims use (a claim's world taken as
    its better system's), in the order the claims first use them: what the page's method paragraph states and
    reports/claims.json lists."""
    used = dict.fromkeys((seeds.systems.world.get(c.better, ""), c.metric, c.scale)
                         for tables in papers.values() for t in tables for c in t.claims)
    return [(world, metric, scale, seeds.spread(world, metric, scale)) for world, metric, scale in used]


def _method(world_spreads: list[tuple[str, str, float, Spread | None]], cpu_spread: float | None,
            cpu_source: str) -> str:
    """The paragraph that states the test once, with the spread of each world and metric the claims use
    (`_world_spreads`)."""
    spreads = []
    for world, metric, _, spread in world_spreads:
        label = f"{WORLD_NAMES.get(world, world)}, {METRIC_NAMES.get(metric, metric)}"
        spreads.append(f"{label} {spread.std:.1f} points ({spread.df} degrees of freedom, from the seeds of "
                       f"{', '.join(f'`{g}`' for g in spread.groups)})" if spread
                       else f"{label}: no seeds in this world")
    q = f"{0.5 + CONFIDENCE / 2:g}"
    text = (f"Each claim says a system beats another on a test metric (CIDEr-D unless it says otherwise); XE = "
            f"cross-entropy, SCST = continued by self-critical training. The two systems stand as the paper ranks "
            f"them, the paper's better system first, each with ours: the mean ± standard deviation over the runs "
            f"of its seeds (n), values x100 as in the papers. Verdict at {CONFIDENCE:.0%} confidence on the "
            f"difference of means, better − worse: Welch's t-test (scipy) when both sides have at least 2 runs; when "
            f"a side has a single run, a t interval from the seed spread of the claim's world. One spread per world "
            f"and metric, pooled over that world's systems trained with several seeds: "
            f"{'; '.join(spreads) or 'none'}. It is mostly the training run's own spread, not the test sample's "
            f"([{SELECTION}](../{SELECTION}) measures the share of the test sample and of the epoch's choice). "
            f"**holds**: the interval lies above 0; **reversed**: below 0; else **undecided**, with its reason: "
            f"*seeds*, the minimum detectable effect at the claim's n, (t_({q}, df) + t_({POWER:g}, df)) · s · "
            f"√(1/n₁ + 1/n₂) with the world's spread s and its degrees of freedom ({CONFIDENCE:.0%} confidence, "
            f"{POWER:.0%} power), and the runs a side at which the same formula (df = 2n − 2) reaches the gap the "
            f"paper prints; or *recipe*, a side trained by a recipe known to be wrong. The verdict names which of "
            f"ours came out ahead and by how much (Δ), with the interval of that lead; Cohen's d is better − worse "
            f"over the pooled standard deviation (of the two sides under Welch, the world's spread otherwise). "
            f"Claims that the worlds cannot test are listed apart, last.")
    if cpu_spread is not None:
        text += (f" A decided verdict whose Δ is smaller than the cross-CPU spread ({cpu_spread:.1f} CIDEr-D points"
                 f"{f', {cpu_source}' if cpu_source else ''}) says so.")
    return text


# ---------------------------------------------------------------- the data (reports/claims.json)


def _number(value: float | None) -> float | None:
    """A JSON number: a float, or None for what is missing or not finite (JSON has no NaN or infinity)."""
    return None if value is None or not math.isfinite(value) else float(value)


def _side(name: str, values: Sequence[float]) -> dict:
    """One side of a claim as data: our system, the values of its seed group, their mean, their standard deviation
    (n - 1, as the page prints it; None under 2 values) and n."""
    return {"system": name, "values": [float(v) for v in values],
            "mean": _number(float(np.mean(values))) if len(values) else None,
            "sd": _number(float(np.std(values, ddof=1))) if len(values) >= 2 else None, "n": len(values)}


def _entry(paper: str, table: PaperTable, claim: Claim, split: str, result: ClaimResult, marks: list[str]) -> dict:
    """One claim as data, from the result and the footnote marks its row on the page was rendered from: `ci` is the
    CONFIDENCE interval of `diff` (better - worse; null ends where no spread bounds it), `test` "welch" or "pooled"
    (a t interval from the world's spread), `ahead` the system of ours that came out ahead (null when tied or
    pending), `reason` the kind (seeds, recipe, world) and evidence of an undecided or untestable verdict, `notes`
    the page's footnotes on the row (pooled, cpu, recipe)."""
    verdict = result.verdict
    decimals = max(1, decimals_of(claim.paper_better), decimals_of(claim.paper_worse))
    reason = None if result.reason is None else {
        "kind": result.reason, "why": result.why, "link": result.link, "mde": _number(result.mde),
        "runs_needed": result.runs_needed}
    return {
        "paper": paper, "paper_title": table.paper, "table": table.id, "source_table": table.source_table,
        "id": claim.id, "text": claim.text, "quote": claim.quote, "where": claim.where,
        "metric": claim.metric, "metric_name": METRIC_NAMES.get(claim.metric, claim.metric),
        "scale": float(claim.scale), "split": split, "world": result.world,
        "paper_values": {"better": float(claim.paper_better), "worse": float(claim.paper_worse),
                         "gap": round(claim.paper_better - claim.paper_worse, decimals)},
        "better": _side(claim.better, result.better_values), "worse": _side(claim.worse, result.worse_values),
        "diff": None if verdict is None else _number(verdict.diff),
        "ci": None if verdict is None else [_number(verdict.low), _number(verdict.high)],
        "cohens_d": None if verdict is None else _number(verdict.d),
        "test": None if verdict is None else verdict.test,
        "verdict": result.outcome, "reason": reason,
        "ahead": None if verdict is None else verdict.leader(claim.better, claim.worse),
        "notes": [mark.strip("[^]") for mark in marks]}


def _data(entries: list[dict], results: dict[str, dict[str, ClaimResult]],
          world_spreads: list[tuple[str, str, float, Spread | None]], cpu_spread: float | None) -> dict:
    """reports/claims.json: the test's settings, the counts by verdict (and of the undecided by reason), the spread
    of each world and metric the page states, and the claims (`_entry`) in the page's order."""
    outcomes = [r.outcome for claims in results.values() for r in claims.values()]
    reasons = [r.reason for claims in results.values() for r in claims.values() if r.outcome == UNCLEAR]
    spreads = [{"world": world, "world_name": WORLD_NAMES.get(world, world), "metric": metric,
                "metric_name": METRIC_NAMES.get(metric, metric), "scale": float(scale),
                "std": None if spread is None else _number(spread.std), "df": None if spread is None else spread.df,
                "groups": [] if spread is None else list(spread.groups)}
               for world, metric, scale, spread in world_spreads]
    return {"page": CLAIMS.as_posix(), "confidence": CONFIDENCE, "power": POWER, "runs_cap": N_CAP,
            "cross_cpu_spread": _number(cpu_spread),
            "counts": {outcome: outcomes.count(outcome) for outcome in (HOLDS, REVERSED, UNCLEAR, UNTESTABLE, PENDING)},
            "undecided_by_reason": {reason: reasons.count(reason) for reason in (SEEDS, RECIPE)},
            "spreads": spreads, "claims": entries}
