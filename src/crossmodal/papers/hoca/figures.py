"""The figures of the Low-Rank HOCA paper (Jin et al., EMNLP 2019) from our runs: Fig. 5 (rank), Fig. 6 (learning
curves) and Fig. 7 (the hierarchical fusion's modality weights), one PNG each.

- Fig. 5 (§6.4, `rank_png`, `hoca_fig5_rank.png`): test CIDEr-D (x100) of L-HOCA-UBT against its rank k, one point
  per rank given, with HOCA-UBT (the full weight tensor, no rank) as a horizontal line; green and red as the paper
  draws them; on an axis from 0, a seeded system's mean ± sd, a single run marked "one run". Read from the systems'
  metrics files (`test.CIDEr`, 0-1 in the file), and their seeds' (claims.seed_groups). The paper's data is MSVD.
- Fig. 6 (appendix A.3, `curves_png`, `hoca_fig6_curves.png`): validation CIDEr-D (x100) per epoch of HOCA-U,
  HOCA-UBT and L-HOCA-UBT (or whichever systems are given), each system's best epoch (the model kept) starred. Read
  from the metrics files' `history` and `best_epoch` (reports/figures.py `read_curves`). The paper's data is MSR-VTT.
  As in the paper, the validation captions are greedy (the trainer's) and the test captions beam-searched.
- Fig. 7 (appendix A.4, `maf_png`, `hoca_fig7_maf.png`): for one test clip, per word of the caption a system decodes
  greedily, β of eqs. 20-21 (the softmax over the three modalities' context vectors, modules/hoca.py
  `HierarchicalFusion`) as three bars: red the image (frames), green motion, blue audio, the paper's colours; one
  panel per system (HOCA-U and HOCA-UBT in the paper), the same clip in both. `maf_weights` decodes and records β.

What is recorded for Fig. 7. `HOCAAttentionFusion.forward` returns (logits, α, β); the β it returns is the second
output of its `fusion` submodule (`HierarchicalFusion.forward` -> (logits, β)), called once per decoder step. So the
`fusion` instance's forward is wrapped for the decode by reports/attention.py `recording`, which stores that second
output and removes the wrapper on leaving: no model code changes and the model decodes exactly as it does unwrapped.
Step t's β belongs to the word chosen at step t; a step that chose <eos> has no word and is left out.

Drawn as reports/figures.py draws (`figures.drawn`: the Agg canvas, matplotlib's default style plus its STYLE, a fixed
size and dpi, PNG bytes without metadata from drawing.png_bytes), so an unchanged rerun writes the same bytes; files
are written atomically. The figures name the data they were made from ("MSVD-like synthetic video world" and the
like); the numbers are ours, never the paper's.
"""
from __future__ import annotations

import math
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ...io import InputError, atomic_path, read_json
from ...reports.attention import recording
from ...reports.figures import DPI, METRIC, SCALE, Curves, draw_group, drawn, from_zero, read_curves
from .captions import FIG5, FIG6, FIG7  # their captions live there, for the index
from .paper import maf_reads

WORLD = "synthetic video world"
DATASET_NAMES = {"msvd": "MSVD", "msrvtt": "MSR-VTT"}  # config.data.VIDEO_DATASETS as the papers write them
MSVD_LIKE, MSRVTT_LIKE = f"MSVD-like {WORLD}", f"MSR-VTT-like {WORLD}"
MODALITIES = ("frames", "motion", "audio")  # β's columns, eq. 19's order (models/hoca.py MODALITIES)
MODALITY_LABELS = ("image (frames)", "motion", "audio")
MODALITY_COLOURS = ("tab:red", "tab:green", "tab:blue")  # the paper's Fig. 7: red image, green motion, blue audio
LOW_RANK_COLOUR, FULL_COLOUR = "tab:green", "tab:red"  # the paper's Fig. 5: green L-HOCA-UBT, red HOCA-UBT
RANK_SIZE = (6.4, 4.6)  # inches: 640 x 460 pixels at figures.DPI
CURVES_SIZE = (7.6, 5.0)
MAF_SIZE = (10.0, 8.0)  # two panels, one above the other
BAR = 0.27  # width of one modality's bar; a word's three bars span 0.81
WRAP = 100  # characters per line of a panel's caption




# ---------------------------------------------------------------- what the figures read


def read_test_cider(path: str | os.PathLike) -> float:
    """The test CIDEr-D of a metrics file (`test.CIDEr`, 0-1 scale). InputError naming the file when it is missing,
    not JSON or has no finite number there."""
    path = Path(path)
    data = read_json(path)
    test = data.get("test") if isinstance(data, dict) else None
    value = test.get("CIDEr") if isinstance(test, dict) else None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise InputError(f"{path}: no numeric 'test.CIDEr' (found {value!r}); a trained system's metrics file "
                         f"has one")
    return float(value)


def data_label(corpus: str, real: bool = False) -> str:
    """What a figure says its data is: the video dataset a vocabulary's `corpus` names ("msvd" -> MSVD), with
    "-like synthetic video world" unless the profile is real."""
    name = DATASET_NAMES.get(corpus, corpus)
    return name if real else f"{name}-like {WORLD}"


def hoca_label(args) -> str:
    """The paper's name of a HOCA model (models/hoca.py `HOCAArgs`): HOCA-<variant>, or L-HOCA-<variant>, k=<rank>
    when low-rank; "U" has no high-order head, so HOCA-U and L-HOCA-U are one model, named HOCA-U."""
    if args.low_rank and args.variant != "U":
        return f"L-HOCA-{args.variant}, k={args.rank}"
    return f"HOCA-{args.variant}"


# ---------------------------------------------------------------- Fig. 5: rank


def _runs(value: float | Sequence[float]) -> list[float]:
    """A point's runs: one value, or the values of a system's seeds."""
    return [float(value)] if isinstance(value, (int, float)) else [float(v) for v in value]


def spread_note(runs: Sequence[float]) -> str:
    """What a point's runs give: "one run" or "n runs, sd <x100>" (n - 1 in the sd's denominator)."""
    if len(runs) == 1:
        return "one run"
    return f"{len(runs)} runs, sd {np.std(runs, ddof=1) * SCALE:.1f}"


def rank_figure(points: Sequence[tuple[int, float | Sequence[float]]], full: float | Sequence[float],
                data: str = MSVD_LIKE) -> Figure:
    """Fig. 5: test CIDEr-D x100 of L-HOCA-UBT at each rank of `points` ((rank, its runs' CIDEr 0-1: one value, or
    one per seed), drawn in rank order at the runs' mean, with ± sd bars where a rank has two runs or more, each
    point labelled with its mean and `spread_note`) and HOCA-UBT's `full` (the same kinds of value) as a horizontal
    line at its mean, shaded ± sd when seeded. The y axis starts at 0; a note says when every point is one run. The
    x axis ticks at the ranks given. Gids: "low_rank", "low_rank:sd" (the bars) and "full"."""
    points = sorted((int(k), _runs(v)) for k, v in points)
    full_runs = _runs(full)
    ranks = [k for k, _ in points]
    means = [float(np.mean(runs)) * SCALE for _, runs in points]
    sds = [float(np.std(runs, ddof=1)) * SCALE if len(runs) > 1 else 0.0 for _, runs in points]
    full_mean = float(np.mean(full_runs)) * SCALE
    fig = Figure(figsize=RANK_SIZE, dpi=DPI, layout="constrained")
    ax = fig.subplots()
    ax.axhline(full_mean, color=FULL_COLOUR, linewidth=1.8, gid="full",
               label=f"HOCA-UBT (full tensor, no rank): {full_mean:.1f}, {spread_note(full_runs)}")
    if len(full_runs) > 1:
        sd = float(np.std(full_runs, ddof=1)) * SCALE
        ax.axhspan(full_mean - sd, full_mean + sd, color=FULL_COLOUR, alpha=0.15, linewidth=0)
    ax.plot(ranks, means, color=LOW_RANK_COLOUR, marker="o", linewidth=1.8, gid="low_rank", label="L-HOCA-UBT")
    if any(len(runs) > 1 for _, runs in points):
        ax.errorbar(ranks, means, yerr=sds, color=LOW_RANK_COLOUR, linestyle="none", capsize=4, gid="low_rank:sd")
    for k, mean, sd, (_, runs) in zip(ranks, means, sds, points):
        ax.annotate(f"{mean:.1f}\n{spread_note(runs)}", (k, mean + sd), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=8)
    ax.set_xticks(ranks)
    ax.set_xlabel("rank k of Low-Rank HOCA")
    ax.set_ylabel("test CIDEr-D (x100)")
    ax.set_ylim(0, max([m + s for m, s in zip(means, sds)] + [full_mean]) * 1.3 or 1.0)
    ax.legend(loc="lower right")
    if all(len(runs) == 1 for _, runs in [*points, (0, full_runs)]):
        fig.supxlabel("One run per point: no seed spread is measured for these systems, so gaps between points may be "
                      "noise.", fontsize=8, color="0.3")
    ax.set_title(f"Fig. 5 (Jin et al. 2019, §6.4): CIDEr-D against the rank\n{data}, beam search on test")
    return fig


def rank_png(ranks: Sequence[tuple[int, str | os.PathLike | Sequence[str | os.PathLike]]],
             full: str | os.PathLike | Sequence[str | os.PathLike], data: str = MSVD_LIKE) -> bytes:
    """Fig. 5's PNG from metrics files: `ranks` [(rank, the L-HOCA-UBT system's metrics file, or its seeds' files)],
    `full` HOCA-UBT's file (or its seeds'). InputError when `ranks` is empty or names a rank twice or below 1, or a
    file lacks its test CIDEr-D."""
    seen = [k for k, _ in ranks]
    if not seen or len(set(seen)) != len(seen) or min(seen) < 1:
        raise InputError(f"Fig. 5 needs distinct ranks >= 1, one metrics file each; got ranks {seen}")
    return drawn(rank_figure, [(int(k), _test_ciders(p)) for k, p in ranks], _test_ciders(full), data)


def _test_ciders(files: str | os.PathLike | Sequence[str | os.PathLike]) -> list[float]:
    """The test CIDEr-D of one metrics file, or of each of several (a system's seeds)."""
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    return [read_test_cider(path) for path in files]


# ---------------------------------------------------------------- Fig. 6: learning curves


def curves_label(label: str, runs: Sequence[Curves]) -> str:
    """A Fig. 6 legend entry: the system's best validation CIDEr-D x100 and its epoch (one run), or the mean ± sd of
    its seeds' bests."""
    if len(runs) == 1:
        return f"{label}: best {runs[0].best_value * SCALE:.1f} at epoch {runs[0].best_epoch}, one run"
    bests = [c.best_value * SCALE for c in runs]
    return f"{label}: best {np.mean(bests):.1f} ± {np.std(bests, ddof=1):.1f} over {len(runs)} seeds"


def curves_figure(curves: Mapping[str, Curves | Sequence[Curves]], data: str = MSRVTT_LIKE) -> Figure:
    """Fig. 6: validation CIDEr-D x100 per epoch of each system ({label: its Curves, or its seeds' Curves}, in order,
    one colour each; figures.draw_group: seeds as their mean ± sd), every run's best epoch starred, the best in the
    legend (`curves_label`). The y axis starts at 0. Each run's line's gid is its system's name."""
    fig = Figure(figsize=CURVES_SIZE, dpi=DPI, layout="constrained")
    ax = fig.subplots()
    for k, (label, runs) in enumerate(curves.items()):
        runs = [runs] if isinstance(runs, Curves) else list(runs)
        draw_group(ax, runs, f"C{k % 10}", curves_label(label, runs))
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation CIDEr-D (x100)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    from_zero(ax)
    ax.legend(loc="lower right")
    ax.set_title(f"Fig. 6 (Jin et al. 2019, A.3): learning curves, {data}\n"
                 "greedy decoding on validation (the test scores use beam search); star: best epoch, the model kept")
    return fig


def curves_png(curves: Mapping[str, str | os.PathLike | Sequence[str | os.PathLike]], data: str = MSRVTT_LIKE
               ) -> bytes:
    """Fig. 6's PNG from metrics files ({label: metrics file, or its seeds' files}). InputError when none is given,
    or a file is missing, malformed (figures.read_curves) or has no history, or its validation metric is not
    CIDEr-D."""
    if not curves:
        raise InputError("Fig. 6 needs at least one system's metrics file")
    loaded = {}
    for label, files in curves.items():
        loaded[label] = []
        for path in [files] if isinstance(files, (str, os.PathLike)) else files:
            c = read_curves(path)
            if c is None or c.metric != METRIC:
                raise InputError(f"{path}: no per-epoch {METRIC} history to draw (a trained captioner's metrics file "
                                 f"has one)")
            loaded[label].append(c)
    return drawn(curves_figure, loaded, data)


# ---------------------------------------------------------------- Fig. 7: the modality weights β


@dataclass(frozen=True)
class MafCaption:
    """One panel of Fig. 7: the system's `label`, its greedy caption's `words` and their β [words, 3] (columns:
    frames, motion, audio)."""
    label: str
    words: tuple[str, ...]
    beta: np.ndarray


def maf_weights(model, inputs, max_length: int, vocabulary: Sequence[str] | None = None
                ) -> tuple[list[str], np.ndarray]:
    """Decode one clip greedily (decoding/search.py `greedy_decode`; `inputs`: its named inputs {frames, motion,
    audio}, a batch of one) with a Low-Rank HOCA captioner (models/hoca.py) and record the hierarchical fusion's
    β at each step (module docstring). Returns (the caption's words, β [words, 3] float64), the words looked up in
    `vocabulary` (None: the token ids as text), the steps after the caption's last word left out. Runs in eval mode
    without gradients; the model's mode is restored afterwards."""
    import torch

    from ...decoding.search import greedy_decode

    if next(iter(inputs.values())).mask.size(0) != 1:
        raise ValueError("maf_weights decodes one clip: inputs must be a batch of one")
    training = model.training
    model.eval()
    try:
        with torch.no_grad(), recording(model.attention.fusion, "forward") as calls:
            seqs, _ = greedy_decode(model, inputs, max_length)
    finally:
        model.train(training)
    seq = seqs[0].tolist()
    tokens = seq[:seq.index(0)] if 0 in seq else seq
    beta = np.array([call.weights[0].double().cpu().numpy() for call in calls[:len(tokens)]], dtype=np.float64)
    words = [vocabulary[t] for t in tokens] if vocabulary is not None else [str(t) for t in tokens]
    return words, beta.reshape(len(tokens), len(MODALITIES))


def _maf_panel(ax, caption: MafCaption) -> None:
    """One system's grouped bars: per word, β of each modality, with 1/3 (equal weights) dotted; each bar's gid is
    "<label>:<modality>"."""
    x = np.arange(len(caption.words))
    for m, (label, colour) in enumerate(zip(MODALITY_LABELS, MODALITY_COLOURS)):
        ax.bar(x + (m - 1) * BAR, caption.beta[:, m], BAR, color=colour, label=label,
               gid=f"{caption.label}:{MODALITIES[m]}")
    ax.axhline(1 / 3, color="0.4", linestyle=":", linewidth=1, label="equal weights (1/3)")
    ax.set_xticks(x, caption.words, rotation=30 if len(x) > 10 else 0, ha="right" if len(x) > 10 else "center")
    ax.set_xlim(-0.6, max(len(x), 1) - 0.4)
    ax.set_ylim(0, 1)
    ax.set_ylabel("β (modality weight)")
    text = " ".join(caption.words) if caption.words else "(empty: <eos> first)"
    ax.set_title("\n".join(textwrap.wrap(f"{caption.label}: “{text}”", WRAP)))


def maf_figure(captions: Sequence[MafCaption], clip: int, data: str = WORLD) -> Figure:
    """Fig. 7: one panel per system (`captions`, top to bottom) of the same test `clip`: per word of its greedy
    caption the three β as bars (red image, green motion, blue audio); one legend below the panels."""
    fig = Figure(figsize=MAF_SIZE, dpi=DPI, layout="constrained")
    axes = fig.subplots(len(captions), 1, squeeze=False)[:, 0]
    for ax, caption in zip(axes, captions):
        _maf_panel(ax, caption)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=4)
    fig.suptitle(f"Fig. 7 (Jin et al. 2019, A.4): hierarchical-fusion weights β (eqs. 20-21) per word of the "
                 f"greedy caption\ntest clip {clip}, {data}")
    return fig


def maf_png(captions: Sequence[MafCaption], clip: int, data: str = WORLD) -> bytes:
    if not captions:
        raise InputError("Fig. 7 needs at least one system")
    return drawn(maf_figure, captions, clip, data)


def load_maf(cfg, root: Path, system: str, clip: int | None = None, label: str | None = None
             ) -> tuple[int, MafCaption]:
    """Fig. 7's panel of a trained `system` (params.yaml): its model (data/models/<system>/model.pt), vocabulary
    and feature sets (`cfg.model_of(system)`), decoding `clip` (None: the first item of its vocabulary's test split)
    with `cfg.evaluation.max_length` on the CPU. Returns (the clip's id, the panel); `label` defaults to the
    system's name. InputError for a missing or foreign model file, vocabulary, labels or features."""
    from ...data.captions import load_labels, load_vocabulary
    from ...data.feature_sets import SplitInputs, feature_dims
    from ...models.registry import build_model, load_state, read_model_file

    spec = cfg.model_of(system)
    path, vocabulary, labels = (root / f for f in maf_reads(cfg, system)[:3])
    words = load_vocabulary(vocabulary)
    if clip is None:
        ids = load_labels(labels, "test").image_ids
        if not len(ids):
            raise InputError(f"{labels}: the test split has no items")
        clip = int(ids[0])
    _, inputs = next(SplitInputs(root, spec.inputs, np.array([clip])).batches([np.array([0])]))
    _, saved = read_model_file(path, cfg.stage(system))
    model = build_model(cfg.where(cfg.model_name(system)), spec, len(words), feature_dims(root, spec.inputs))
    load_state(model, saved.get("state_dict", {}), path, system)
    tokens, beta = maf_weights(model, inputs, cfg.evaluation.max_length, words)
    return clip, MafCaption(label or system, tuple(tokens), beta)


# ---------------------------------------------------------------- files


def write_png(path: str | os.PathLike, png: bytes) -> Path:
    """`png` written to `path` atomically (its folder created)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(png)
    return Path(path)
