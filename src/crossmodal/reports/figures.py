"""Training curves as figures: per-epoch validation metric (CIDEr-D; BAN's VQA systems: the VQA score) of every
trained system, as static PNGs for the repository and as per-epoch data files for `dvc plots show` / `dvc plots diff`
(whose HTML needs a CDN; the PNGs do not; the captioners' only: `dvc plots` draws one field of every file).

Inputs are the metrics files the training stages write (`reports/metrics/<system>.json`): `history` (one row per
epoch: `epoch`, `train_loss`, `lr`, `val_CIDEr`, and for SCST the mean rewards of its candidates, `train_CIDEr_sample`
or `train_CIDEr_beam`, and of the greedy baseline where it has one, `train_CIDEr_greedy`), `best_epoch` and
`stopped_by`. Ensembles and reference points have no history: skipped.
Caption metrics are on the metrics files' 0-10 scale there; the figures print them x100, as the tables do.

Outputs (`write_figures`):

- `<figures>/curves/<system>.png`: validation CIDEr-D per epoch with the best epoch marked and what stopped the run
  in the title; for SCST runs also the rewards; below, the training loss and the learning rate;
- `<figures>/<paper>_curves.png`: every run of a paper, one section per validation metric and objective (BAN's
  grounding recall apart from its VQA score; cross-entropy apart from SCST), every y axis from 0; a system's seeds
  (`seeds`) as their mean ± sd band; a section of many systems as small multiples, the others in grey behind each;
- captions for the index (`OVERVIEW_CAPTION`, `CURVES_CAPTION`), which `figure_index_lines` shows under the figures;
- `<plots>/<system>.json`: the history as a top-level list of records (epoch first, numeric values only), the form
  `dvc plots` reads.

The PNG bytes are a pure function of the inputs and the pinned matplotlib and Pillow: drawn on the Agg canvas with
matplotlib's default style (a user's matplotlibrc changes nothing), at a fixed size and dpi, then encoded by
`drawing.png_bytes`, which writes no metadata chunk (matplotlib's own PNG writer adds a `Software` text chunk with
its version). So an unchanged rerun leaves git and DVC with the same files. Every file is written atomically.

Since the bytes are such a function, `write_figures` can keep them (`cache`: the index stage's is data/cache/figures/):
one file per figure, named by the SHA-256 of what draws it (the kind of figure, its curves, seeds and title, the
source of this module and of everything it imports in the package, the matplotlib, Pillow and NumPy versions). A
figure whose digest is there is read instead of drawn: the index stage, which reruns after every trained system,
went from 18.0 to 11.0-12.6 s on the tests' tiny pipeline (15 curves, about 0.4 s each, on a 2-core machine). The
cache keeps exactly the figures of the last call: nothing accumulates, and deleting it only costs the drawing.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Sequence

import matplotlib
import matplotlib.style
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from PIL import Image

from ..pipeline import closures
from ..io import InputError, atomic_path, read_json, write_text
from ..drawing import png_bytes
from ..task_specs import DEFAULT, SPECS

SCALE = 100  # the tables' scale of the tasks' metrics (the task modules' SCALE; not imported: they pull in torch)
METRIC = DEFAULT.metric  # the validation metric of a history that names none, and the one `dvc plots` draws
METRICS = {spec.metric: spec.metric_labels for spec in SPECS.values()}  # each task's: (axis label, short label)
REWARDS = {"train_CIDEr_sample": "reward: sampled captions", "train_CIDEr_beam": "reward: beam candidates",
           "train_CIDEr_greedy": "reward: greedy (baseline)"}  # SCST's, as tasks/objectives/scst.py logs them
LOSS, LR = "train_loss", "lr"
STOPPED = ("patience", "max_epochs")  # the trainer's `stopped_by` values

FIGURES = Path("reports/figures")
PLOTS = Path("reports/plots")
CURVES = "curves"  # the per-system PNGs' folder under the figures folder
DPI = 100
SYSTEM_SIZE = (7.2, 5.6)  # inches: 720 x 560 pixels
OVERVIEW_SIZE = (12.0, 5.6)  # 1200 pixels wide; the height grows with the overview's sections
ONE_AXIS = 6  # a section of an overview with at most this many systems draws them on one axis, more as small multiples
ONE_AXIS_HEIGHT = 4.2  # inches of a one-axis section
COLUMNS = 4  # small multiples per row
SMALL_HEIGHT = 2.2  # inches per row of small multiples
CONTEXT = "0.8"  # the grey of the other systems' curves behind a small multiple
STYLE = {"font.size": 10, "axes.titlesize": 10, "legend.fontsize": 8.5, "axes.grid": True, "grid.alpha": 0.3,
         "figure.facecolor": "white", "axes.facecolor": "white"}

TOP, BOTTOM = "metric", "loss"  # the panels of a system's figure (system_series)


@dataclass(frozen=True)
class Curves:
    """One trained system's per-epoch history, checked: `rows` are the history's records with numeric values only
    (epoch first), `best_epoch` one of their epochs, `stopped_by` the trainer's reason (None when not recorded)."""
    system: str
    rows: tuple[dict, ...]
    best_epoch: int
    stopped_by: str | None
    objective: str | None = None
    path: Path | None = field(default=None, compare=False)
    metric: str = METRIC  # the task's validation metric (a key of METRICS)

    @property
    def epochs(self) -> list[int]:
        return [row["epoch"] for row in self.rows]

    def values(self, key: str, scale: float = 1.0) -> list[float]:
        """The values of `key` per epoch (times `scale`), NaN where a row lacks it (matplotlib leaves a gap)."""
        return [row[key] * scale if key in row else math.nan for row in self.rows]

    def has(self, key: str) -> bool:
        return any(key in row for row in self.rows)

    @property
    def scst(self) -> bool:
        """Whether the run logged SCST's rewards (an SCST run does; the objective field is not needed)."""
        return any(self.has(key) for key in REWARDS)

    @property
    def best_value(self) -> float:
        return self.rows[self.epochs.index(self.best_epoch)][self.metric]

    @property
    def stop_note(self) -> str:
        epochs = f"{len(self.rows)} epoch{'s' if len(self.rows) != 1 else ''}"
        if self.stopped_by is None:
            return f"{epochs}, stop reason not recorded"
        return f"stopped by {self.stopped_by.replace('_', ' ')} after {epochs}"


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_curves(path: str | os.PathLike, system: str | None = None) -> Curves | None:
    """The checked history of a metrics file, or None when it has none (an ensemble, the reference points).

    InputError, naming the file, when the file is missing or not JSON, not an object, or its history is not a
    non-empty list of rows that each carry an integer `epoch` (increasing) and a numeric `val_CIDEr`, or its
    `best_epoch` is not one of those epochs, or `stopped_by` is not a string. Keys whose value is not a number (or
    is not finite) are left out of the rows."""
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object (a metrics file), found {type(data).__name__}")
    if "history" not in data:
        return None
    history = data["history"]
    if not isinstance(history, list) or not history:
        raise InputError(f"{path}: 'history' must be a non-empty list of per-epoch rows, found "
                         f"{json.dumps(history)[:60] if not isinstance(history, list) else 'an empty list'}")
    rows, previous = [], 0
    first = history[0] if isinstance(history[0], dict) else {}
    metric = next((key for key in METRICS if key in first), METRIC)  # the task's validation metric
    for k, row in enumerate(history):
        where = f"history[{k}]"
        if not isinstance(row, dict):
            raise InputError(f"{path}: {where} is not an object ({type(row).__name__})")
        epoch = row.get("epoch")
        if not isinstance(epoch, int) or isinstance(epoch, bool):
            raise InputError(f"{path}: {where} has no integer 'epoch' (found {epoch!r})")
        if epoch <= previous:
            raise InputError(f"{path}: {where}.epoch is {epoch}, not after the previous row's {previous}")
        if not _number(row.get(metric)) or not math.isfinite(row[metric]):
            raise InputError(f"{path}: {where} has no numeric '{metric}' (found {row.get(metric)!r})")
        rows.append({"epoch": epoch, **{key: value for key, value in row.items()
                                        if key != "epoch" and _number(value) and math.isfinite(value)}})
        previous = epoch
    best = data.get("best_epoch")
    if not isinstance(best, int) or isinstance(best, bool) or best not in [row["epoch"] for row in rows]:
        raise InputError(f"{path}: 'best_epoch' must be one of the history's epochs "
                         f"({rows[0]['epoch']}-{rows[-1]['epoch']}), found {best!r}")
    stopped = data.get("stopped_by")
    if stopped is not None and not isinstance(stopped, str):
        raise InputError(f"{path}: 'stopped_by' must be a string ({' or '.join(STOPPED)}), found {stopped!r}")
    objective = data.get("objective") if isinstance(data.get("objective"), str) else None
    return Curves(system or path.stem, tuple(rows), best, stopped, objective, path, metric)


# ---------------------------------------------------------------- what is drawn


@dataclass(frozen=True)
class Series:
    """One line of a figure: its label, the epochs and the values (on the scale drawn)."""
    label: str
    x: list[int]
    y: list[float]


def system_series(curves: Curves) -> dict[str, dict[str, Series]]:
    """What a system's figure draws, by panel: TOP holds the validation metric x100 and, for SCST runs, the rewards
    the run logged x100; BOTTOM the training loss and the learning rate (each when logged). Keyed by the history's
    keys."""
    x = curves.epochs
    top = {curves.metric: Series(METRICS[curves.metric][0], x, curves.values(curves.metric, SCALE))}
    top |= {key: Series(label, x, curves.values(key, SCALE)) for key, label in REWARDS.items() if curves.has(key)}
    bottom = {key: Series(label, x, curves.values(key)) for key, label in ((LOSS, "training loss"),
                                                                            (LR, "learning rate"))
              if curves.has(key)}
    return {TOP: top, BOTTOM: bottom}


def _title(curves: Curves) -> str:
    kind = {"xe": "cross-entropy", "scst": "SCST"}.get(curves.objective or "", curves.objective)
    return f"{curves.system}" + (f" ({kind})" if kind else "") + f", one run: {curves.stop_note}"


def system_figure(curves: Curves) -> Figure:
    """A system's figure: validation CIDEr-D x100 per epoch with the best epoch marked (and SCST's rewards) above,
    the training loss (left axis) and the learning rate (right axis, log scale) below. The left axes hold 0 (the
    loss's from its lowest value when SCST's is negative); the title says it is one run. Each line's gid is its history
    key (the best-epoch marker's is "best")."""
    series = system_series(curves)
    fig = Figure(figsize=SYSTEM_SIZE, dpi=DPI, layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    metric = curves.metric
    colours = {metric: "C0", "train_CIDEr_sample": "C1", "train_CIDEr_beam": "C4", "train_CIDEr_greedy": "C2",
               LOSS: "C3", LR: "0.45"}
    for key, line in series[TOP].items():
        top.plot(line.x, line.y, marker="o" if key == metric else ".", markersize=4 if key == metric else 3,
                 linewidth=2 if key == metric else 1.2, color=colours[key], label=line.label, gid=key,
                 linestyle="-" if key == metric else "--")
    best = curves.best_value * SCALE
    top.axvline(curves.best_epoch, color="C0", linestyle=":", linewidth=1)
    top.plot([curves.best_epoch], [best], marker="*", markersize=14, color="C0", markeredgecolor="black",
             linestyle="none", gid="best", label=f"best: epoch {curves.best_epoch}, {best:.1f}")
    top.set_ylabel(METRICS[metric][1])
    from_zero(top)
    top.legend(loc="best")
    top.set_title(_title(curves))
    if LOSS in series[BOTTOM]:
        line = series[BOTTOM][LOSS]
        bottom.plot(line.x, line.y, marker=".", color=colours[LOSS], label=line.label, gid=LOSS)
        bottom.set_ylabel("training loss")
        from_zero(bottom)
    if LR in series[BOTTOM]:
        line = series[BOTTOM][LR]
        lr_axis = bottom.twinx()
        lr_axis.step(line.x, line.y, where="mid", color=colours[LR], linestyle="--", linewidth=1, label=line.label,
                     gid=LR)
        if all(v > 0 for v in line.y if not math.isnan(v)):
            lr_axis.set_yscale("log")
        lr_axis.set_ylabel("learning rate" + (" (log scale)" if lr_axis.get_yscale() == "log" else ""),
                           color=colours[LR])
        lr_axis.grid(False)
        handles = bottom.get_legend_handles_labels()[0] + lr_axis.get_legend_handles_labels()[0]
        bottom.legend(handles=handles, loc="best")
    elif LOSS in series[BOTTOM]:
        bottom.legend(loc="best")
    bottom.set_xlabel("epoch")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    return fig


def overview_groups(curves: Sequence[Curves], seeds: Mapping[str, Sequence[str]] | None = None
                    ) -> list[list[Curves]]:
    """`curves` grouped by seed group (`seeds`: {system: its group}, as claims.seed_groups gives), each group led by
    its member that comes first in `curves` (the table order), the groups in the order of their leads. A system
    that `seeds` does not name is a group of one."""
    order = {c.system: k for k, c in enumerate(curves)}
    groups: dict[str, list[Curves]] = {}
    for c in curves:
        group = [name for name in (seeds or {}).get(c.system, ()) if name in order] or [c.system]
        groups.setdefault(min(group + [c.system], key=order.__getitem__), []).append(c)
    return list(groups.values())


@dataclass(frozen=True)
class Band:
    """A seed group's spread per epoch: at each epoch that at least two of its runs reached, the number of those
    runs `n`, their `mean` and their standard deviation `sd` (n - 1 in the denominator), on the scale drawn. Runs stop
    at different epochs (patience), so `n` can fall along the curve; an epoch with one run left has no band."""
    epochs: list[int]
    mean: list[float]
    sd: list[float]
    n: list[int]


def seed_band(group: Sequence[Curves], scale: float = SCALE) -> Band:
    """The `Band` of `group`'s validation metric (each run's own, x `scale`); empty for a group of one run."""
    reached: dict[int, list[float]] = {}
    for c in group:
        for epoch, value in zip(c.epochs, c.values(c.metric, scale)):
            reached.setdefault(epoch, []).append(value)
    epochs = [e for e in sorted(reached) if len(reached[e]) >= 2]
    return Band(epochs, [float(np.mean(reached[e])) for e in epochs],
                [float(np.std(reached[e], ddof=1)) for e in epochs], [len(reached[e]) for e in epochs])


def group_label(group: Sequence[Curves]) -> str:
    """A group's name on a figure: its lead system and how many runs it has ("one run" when one)."""
    return f"{group[0].system}: " + (f"{len(group)} seeds, mean ± sd" if len(group) > 1 else "one run")


def draw_group(ax, group: Sequence[Curves], colour, label: str | None = None) -> None:
    """A seed group on `ax`: each run's validation metric x100 (gid: its system), its best epoch starred; with two or
    more runs also their mean (bold, gid "<lead>:mean", labelled) over the `seed_band` (gid "<lead>:band") and each
    run thin; a single run is itself bold and labelled. `label` defaults to `group_label`."""
    band, label = seed_band(group), label if label is not None else group_label(group)
    alone = len(group) == 1
    for c in group:
        ax.plot(c.epochs, c.values(c.metric, SCALE), color=colour, linewidth=1.8 if alone else 0.8,
                alpha=1.0 if alone else 0.55, marker="." if alone else None, markersize=3, gid=c.system,
                label=label if alone else None)
        ax.plot([c.best_epoch], [c.best_value * SCALE], marker="*", markersize=9 if alone else 6, color=colour,
                markeredgecolor="black", markeredgewidth=0.5, linestyle="none")
    if band.epochs:
        low = [m - s for m, s in zip(band.mean, band.sd)]
        high = [m + s for m, s in zip(band.mean, band.sd)]
        ax.fill_between(band.epochs, low, high, color=colour, alpha=0.22, linewidth=0, gid=f"{group[0].system}:band")
        ax.plot(band.epochs, band.mean, color=colour, linewidth=2.2, gid=f"{group[0].system}:mean", label=label)


def from_zero(ax, top: float | None = None) -> None:
    """`ax`'s y axis with 0 in it: from 0 up (to `top` when given), or from its lowest value to 0 or above when that
    is negative (SCST's loss)."""
    low, high = ax.get_ylim()
    ax.set_ylim(min(0.0, low), max(0.0, high) if top is None else top)


def overview_sections(curves: Sequence[Curves]) -> list[tuple[str, bool, list[Curves]]]:
    """The sections of a paper's overview: one per validation metric (METRICS' order: one quantity per axis) and
    objective (cross-entropy, then SCST), as (metric, scst, its runs in `curves` order); empty ones left out."""
    sections = [(metric, scst, [c for c in curves if c.metric == metric and c.scst == scst])
                for metric in METRICS for scst in (False, True)]
    return [section for section in sections if section[2]]


def _section_title(metric: str, scst: bool, groups: Sequence[Sequence[Curves]]) -> str:
    runs, seeded = sum(len(g) for g in groups), sum(len(g) > 1 for g in groups)
    kind = "SCST" if scst else "cross-entropy"
    return (f"{kind}, {METRICS[metric][0]}: {runs} run{'s' if runs != 1 else ''} of {len(groups)} "
            f"system{'s' if len(groups) != 1 else ''}"
            + (f"; {seeded} with seeds (bold: their mean, shaded: ± sd)" if seeded else "; one run each"))


def _top(groups: Sequence[Sequence[Curves]]) -> float:
    """The y axis's top for `groups`: 5% above their largest value x100."""
    values = [v for g in groups for c in g for v in c.values(c.metric, SCALE) if not math.isnan(v)]
    return max(values + [0.0]) * 1.05 or 1.0


def _one_axis(sub, metric: str, groups: Sequence[Sequence[Curves]]) -> None:
    """Every group on one axis, one colour each, the legend outside the axis (it hides no line)."""
    ax = sub.subplots()
    palette = matplotlib.colormaps["tab10"]
    for k, group in enumerate(groups):
        draw_group(ax, group, palette(k % palette.N))
    ax.set_xlabel("epoch")
    ax.set_ylabel(METRICS[metric][1])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    from_zero(ax, _top(groups))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _small_multiples(sub, metric: str, groups: Sequence[Sequence[Curves]]) -> None:
    """One small axis per group, all on one scale from 0: the group in colour (its band when seeded), every other
    group's curve (its mean, or its one run) in light grey behind it for comparison."""
    rows = math.ceil(len(groups) / COLUMNS)
    axes = sub.subplots(rows, COLUMNS, sharex=True, sharey=True, squeeze=False).ravel()
    top = _top(groups)
    bands = [seed_band(g) for g in groups]
    context = [(b.epochs, b.mean) if len(g) > 1 else (g[0].epochs, g[0].values(metric, SCALE))
               for g, b in zip(groups, bands)]
    for k, (ax, group) in enumerate(zip(axes, groups)):
        for j, (x, y) in enumerate(context):
            if j != k:
                ax.plot(x, y, color=CONTEXT, linewidth=0.8, zorder=1)
        draw_group(ax, group, "C0")
        ax.set_title(group_label(group), fontsize=9)
        from_zero(ax, top)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes[len(groups):]:
        ax.axis("off")
    sub.supxlabel("epoch", fontsize=9)
    sub.supylabel(METRICS[metric][1], fontsize=9)


def overview_figure(paper: str, curves: Sequence[Curves], seeds: Mapping[str, Sequence[str]] | None = None,
                    title: str | None = None) -> Figure:
    """A paper's runs by section (`overview_sections`: one validation metric and objective each), stacked: a section
    of at most ONE_AXIS systems (seed groups, `overview_groups`) draws them on one axis in distinct colours, a larger
    one as small multiples, one per system with the others in grey behind it. Every y axis starts at 0. A system
    with seeds is drawn as their mean ± sd (`draw_group`), its runs thin; every run's best epoch is starred."""
    sections = [(metric, scst, overview_groups(members, seeds)) for metric, scst, members in overview_sections(curves)]
    heights = [ONE_AXIS_HEIGHT if len(groups) <= ONE_AXIS else math.ceil(len(groups) / COLUMNS) * SMALL_HEIGHT + 0.7
               for _, _, groups in sections]
    fig = Figure(figsize=(OVERVIEW_SIZE[0], sum(heights) + 0.5), dpi=DPI, layout="constrained")
    subs = fig.subfigures(len(sections), 1, height_ratios=heights, squeeze=False)[:, 0]
    for sub, (metric, scst, groups) in zip(subs, sections):
        (_one_axis if len(groups) <= ONE_AXIS else _small_multiples)(sub, metric, groups)
        sub.suptitle(_section_title(metric, scst, groups), fontsize=10)
    shown = " and ".join(dict.fromkeys(METRICS[m][0].removesuffix(" (x100)") for m, _, _ in sections))
    fig.suptitle(f"{title or paper}: {shown} per epoch (star: a run's best epoch, the model kept)")
    return fig


def figure_png(fig: Figure) -> bytes:
    """`fig` drawn on the Agg canvas at its own size and dpi, as PNG bytes without metadata chunks."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    image = Image.fromarray(np.asarray(canvas.buffer_rgba())).convert("RGB")  # the figure is opaque (white)
    return png_bytes(image)


def drawn(draw, *args, **kwargs) -> bytes:
    """The PNG of `draw(*args, **kwargs)` under matplotlib's default style plus STYLE, whatever the user's rc."""
    with matplotlib.style.context("default"), matplotlib.rc_context(STYLE):
        return figure_png(draw(*args, **kwargs))


def system_png(curves: Curves) -> bytes:
    return drawn(system_figure, curves)


def overview_png(paper: str, curves: Sequence[Curves], seeds: Mapping[str, Sequence[str]] | None = None,
                 title: str | None = None) -> bytes:
    return drawn(overview_figure, paper, curves, seeds, title)


# ---------------------------------------------------------------- the cache of drawn figures


@lru_cache(maxsize=1)
def _drawing_digest() -> str:
    """What draws the bytes besides the inputs: this module's source and everything it imports in the package
    (pipeline/closures.py), and the versions of the libraries that draw and encode."""
    import PIL

    digest = hashlib.sha256(json.dumps([matplotlib.__version__, PIL.__version__, np.__version__]).encode())
    for name in closures.closure([__name__]):
        digest.update(name.encode() + b"\0" + (closures.SRC.parent / name).read_bytes())
    return digest.hexdigest()


def _curves_key(curves: Curves) -> dict:
    return {f.name: getattr(curves, f.name) for f in dataclasses.fields(curves) if f.compare}


def _png(cache: Path | None, used: set[Path], kind: str, inputs: object, draw) -> bytes:
    """`draw()`'s PNG bytes, read from `cache` where a call with the same inputs left them, else drawn (and kept
    there); `used` collects the cache's files of this call."""
    if cache is None:
        return draw()
    key = json.dumps([_drawing_digest(), kind, inputs], sort_keys=True, default=str)
    path = cache / f"{hashlib.sha256(key.encode()).hexdigest()}.png"
    used.add(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:  # not drawn yet, or pruned just now by another process sharing the cache
        pass
    data = draw()
    _write_bytes(path, data)
    return data


# ---------------------------------------------------------------- files


def plots_json(curves: Curves) -> str:
    """The `dvc plots` data of a system: its history as a top-level JSON list of records, one per line."""
    return "[\n" + ",\n".join(f"  {json.dumps(row)}" for row in curves.rows) + "\n]\n"


def _write_bytes(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def curve_path(out_dir: Path, system: str) -> Path:
    return Path(out_dir) / CURVES / f"{system}.png"


def overview_path(out_dir: Path, paper: str) -> Path:
    return Path(out_dir) / f"{paper}_curves.png"


def plots_path(plots_dir: Path, system: str) -> Path:
    return Path(plots_dir) / f"{system}.json"


def write_figures(metrics_dir: str | os.PathLike, out_dir: str | os.PathLike, papers: Mapping[str, Sequence[str]],
                  plots_dir: str | os.PathLike | None = None, seeds: Mapping[str, Sequence[str]] | None = None,
                  titles: Mapping[str, str] | None = None, cache: str | os.PathLike | None = None,
                  prune_cache: bool = True) -> dict[str, list[Path]]:
    """Write every trained system's curve PNG and `dvc plots` file and every paper's overview PNG.

    `papers`: {paper: its systems (and ensembles) in table order}; each system's metrics file is
    `metrics_dir/<system>.json` (a missing or malformed one is an InputError naming it; one without history is
    skipped). `plots_dir` defaults to `out_dir`'s sibling `plots` (reports/figures -> reports/plots). `seeds`:
    {system: its seed group} (claims.seed_groups) to colour seeds alike in the overviews; `titles`: {paper: the
    name its overview shows}. Files of this module's kinds that no longer belong to a system or paper (a removed
    system) are deleted: `out_dir/curves/*.png`, `out_dir/*_curves.png`, `plots_dir/*.json`. `cache`: a folder
    that keeps the PNGs drawn by this call, to read instead of drawing next time (the module's doc), and only them
    unless `prune_cache` is false (a call that shares another's cache adds to it and leaves the pruning to that one).

    Returns {paper: [its overview, then each system's curve PNG in `papers` order]}, papers without a trained
    system left out; the `dvc plots` files are `plots_path(plots_dir, system)` of the same systems."""
    metrics_dir, out_dir = Path(metrics_dir), Path(out_dir)
    plots_dir = Path(plots_dir) if plots_dir is not None else out_dir.parent / "plots"
    loaded = {paper: [c for c in (read_curves(metrics_dir / f"{name}.json", name) for name in names) if c]
              for paper, names in papers.items()}  # every file checked before anything is written
    cache = Path(cache) if cache is not None else None
    written: dict[str, list[Path]] = {}
    keep: set[Path] = set()
    cached: set[Path] = set()
    for paper, curves in loaded.items():
        if not curves:
            continue
        files = [overview_path(out_dir, paper)]
        title = (titles or {}).get(paper)
        group = {c.system: list(seeds.get(c.system, ())) for c in curves} if seeds else None
        _write_bytes(files[0], _png(cache, cached, "overview", [paper, [_curves_key(c) for c in curves], group, title],
                                    lambda: overview_png(paper, curves, seeds, title)))
        for c in curves:
            files.append(curve_path(out_dir, c.system))
            _write_bytes(files[-1], _png(cache, cached, "system", _curves_key(c), lambda: system_png(c)))
            if c.metric == METRIC:  # `dvc plots` draws one field of every file: the captioners' curves only
                write_text(plots_path(plots_dir, c.system), plots_json(c))
                keep.add(plots_path(plots_dir, c.system))
        written[paper] = files
        keep.update(files)
    for stale in [*(out_dir / CURVES).glob("*.png"), *out_dir.glob("*_curves.png"), *plots_dir.glob("*.json")]:
        if stale not in keep:
            stale.unlink()
    for stale in cache.glob("*.png") if cache is not None and prune_cache else ():
        if stale not in cached:
            stale.unlink(missing_ok=True)
    return written


def dvc_plot_definitions(papers: Mapping[str, Sequence[str]] | None = None, plots_dir: str | os.PathLike = PLOTS
                         ) -> list[dict]:
    """The top-level `plots:` entries of a dvc.yaml at the repository root (DVC 3): one definition for the whole
    `plots_dir` (DVC draws each file in it as its own plot: validation CIDEr-D per epoch), then, for each paper of
    `papers` ({paper: its trained systems, those with a history}), one plot of all its systems' curves together."""
    folder = Path(plots_dir).as_posix()
    labels = {"x_label": "epoch", "y_label": "validation CIDEr-D (metrics files' 0-10 scale; the tables print x100)"}
    definitions = [{folder: {"template": "linear", "x": "epoch", "y": METRIC, **labels}}]
    for paper, systems in (papers or {}).items():
        if systems:
            definitions.append({f"{paper}_{METRIC}": {
                "title": f"{paper}: validation CIDEr-D per epoch", "template": "linear", "x": "epoch",
                "y": {plots_path(Path(folder), name).as_posix(): METRIC for name in systems}, **labels}})
    return definitions


# ---------------------------------------------------------------- the index


OVERVIEW_CAPTION = (
    "What it shows: every trained run of the paper, its validation metric per epoch (the split and decoding the best "
    "epoch is chosen on), one section per metric and objective, every axis from 0; a system trained with several "
    "seeds as their mean (bold) ± sd (shaded) over the epochs that two or more of them reached, its runs thin; every "
    "other system marked \"one run\"; a star at each run's best epoch, the model kept. What it does not show: test "
    "scores (the tables give them), nor whether a gap between two systems exceeds the seed spread (reports/claims.md "
    "judges that); a starred value is the best of many epochs on that split, so it flatters the run.")
CURVES_CAPTION = (
    "Each system's own figure, one run each: its validation metric per epoch with the best epoch starred and what "
    "stopped the run; below, the training loss and the learning rate (log scale); for SCST runs the rewards (CIDEr-D "
    "of the candidates and of the greedy baseline on the training batches). A seed's spread is not in these: the "
    "overview draws it.")


def figure_index_lines(written: Mapping[str, Sequence[Path]], index_path: str | os.PathLike,
                       titles: Mapping[str, str] | None = None, plots_dir: str | os.PathLike | None = None,
                       attention: Mapping[str, Path] | None = None,
                       paper_figures: Mapping[str, Sequence[tuple[str, Path]]] | None = None,
                       captions: Mapping[str, str] | None = None) -> list[str]:
    """The Markdown section of reports/index.md that shows the figures (`written`, as `write_figures` returns it): per
    paper, its overview, its attention figure (`attention`: {paper: its PNG}, reports/attention.py) and the paper's
    own figures that a stage of its pipeline draws (`paper_figures`: {paper: [(label, PNG)]}, e.g. HOCA's Figs. 5-7),
    each shown with its caption under it (the overview's OVERVIEW_CAPTION; the others' from `captions`, {file name:
    caption}, none when absent), then links to each system's curve (CURVES_CAPTION says what they hold), relative to
    `index_path`; `titles`: {paper: the name shown}. No lines when nothing was written. `plots_dir` (when given) is
    named as the `dvc plots` data."""
    attention, paper_figures, captions = attention or {}, paper_figures or {}, captions or {}
    if not any(written.values()) and not attention and not paper_figures:
        return []
    base = Path(index_path).parent

    def link(path: Path) -> str:
        return Path(os.path.relpath(path, base)).as_posix()

    def shown(label: str, path: Path, caption: str | None) -> list[str]:
        return [f"![{label}]({link(path)})", ""] + ([f"*{label}.* {caption}", ""] if caption else [])

    lines = ["## Figures", "", "Each figure is shown with a caption under it: what it shows and what it does not. "
             + CURVES_CAPTION]
    if plots_dir is not None:
        lines[-1] += (f" The same per-epoch data, for `dvc plots show` and `dvc plots diff`: "
                      f"[{link(Path(plots_dir))}/]({link(Path(plots_dir))}/).")
    lines.append("")
    for paper in dict.fromkeys([*written, *attention, *paper_figures]):
        files = list(written.get(paper, ()))
        if not files and paper not in attention and paper not in paper_figures:
            continue
        name = (titles or {}).get(paper, paper)
        overviews = [f for f in files if f.name == f"{paper}_curves.png"]
        systems = [f for f in files if f not in overviews]
        lines += [f"### {name}", ""]
        for f in overviews:
            lines += shown(f"{name}: training curves", f, OVERVIEW_CAPTION)
        if paper in attention:
            lines += shown(f"{name}: attention", attention[paper], captions.get(attention[paper].name))
        for label, path in paper_figures.get(paper, ()):
            lines += shown(f"{name}, {label}", path, captions.get(path.name))
        if systems:
            lines += ["Each system's curves: " + " · ".join(f"[`{f.stem}`]({link(f)})" for f in systems), ""]
    return lines[:-1] if lines[-1] == "" else lines
