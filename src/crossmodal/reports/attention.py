"""Attention figures: per paper, one test image with its decoder's attention over the image's regions for each
generated word, as a static PNG (`<figures>/<paper>_attention.png`).

What is drawn. The paper's system (its record's `attention`, papers/<paper>/paper.py: X-LAN's `xlan`, AoANet's
`aoanet`; `Mechanism` here) is loaded from its model file
and captions the first qualitative example (data/processed/captions/examples/examples.json, the image prepro_captions
copied there) greedily, the validation decoder, on the CPU; the test predictions use beam search, so this caption may
differ from the image's test prediction. While it decodes, the decoder's attention module (not the encoder's or the
refiner's self-attention) is recorded: `recording` wraps that one instance's method and removes the wrapper on
leaving, so no model code changes and no other module is touched. The weights are those the method returns, [B, H, Nq,
N] with exactly 0 on padded regions: X-LAN's β^s (eq. 4, `XLinearAttention.attend`), AoANet's softmax(QK^T/sqrt(d))
of the decoder's f_mh-att (eqs. 3-5 and 8, `MultiHeadAttention.forward`); for the figure they are averaged over the
heads, a distribution over the image's regions at each step. The keys are the regions after the encoder (X-LAN's
X-Linear blocks, AoANet's refiner), which mix content across regions: a box marks where a row's region lies, and the
row carries more than that region's own features.

The figure: the image with every region box outlined, then one panel per word of the caption (all of them: the grid
grows with the caption), titled with the word: each pixel keeps `FLOOR` of its brightness plus the rest in proportion
to the attention mass on it (the summed weights of the boxes that cover its centre, relative to the panel's largest),
every box is outlined in the colour of its weight (one colour scale for all panels, its bar on the right, 1/N,
uniform attention, marked on it) and the heaviest box is labelled with its weight. The suptitle names the mechanism,
the image, the data and the caption; the footer says how to read the panels and what they do not show
(`NOT_GROUNDING`): attention is not grounding, and a word's heaviest box is often not the object the word names.

Boxes. The model reads the regions of the feature set its `regions` input names (data/features/<set>.h5,
data/regions.py): boxes x1, y1, x2, y2 in pixels of the original image, whose (width, height) the file stores, in the
order the model reads them. The example image is a byte copy of that original (data/captions.py `write_examples`), so
the scale factors picture size / stored size are 1 on the synthetic world; they are applied anyway. The picture is
drawn with `imshow(extent=(0, W, H, 0))`, so axis coordinates are the continuous pixel coordinates the boxes are in
(pixel (row i, column j) covers [j, j + 1) x [i, i + 1), as the backbone's RoI-align reads them: no half-pixel shift).
Under the real profile, whose images are not downloaded, the boxes are drawn on a blank canvas of the stored size.

Deterministic: drawn as reports/figures.py draws (matplotlib's default style plus its STYLE, fixed size and dpi, PNG
without metadata), so an unchanged rerun writes the same bytes. A paper whose system is not configured or whose model
file is missing (not trained yet) gets no figure and no error.
"""
from __future__ import annotations

import math
import os
import textwrap
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

import matplotlib
import numpy as np
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from PIL import Image

from .. import paths
from ..config.data import REAL_DATA
from ..io import InputError, atomic_path, read_json
from .figures import DPI, drawn

SYNTHETIC = "synthetic image world"
COLUMNS = 4  # panels per row: the image's, then one per word of the caption, every word
PANEL = 2.4  # inches per panel side (240 pixels at figures.DPI)
HEADER = 0.3  # inches per line of the suptitle
FOOTER = 0.7
WRAP = 80  # characters per line of the caption in the suptitle
COLOUR_BAR = 0.9  # inches of width for the colour bar
FLOOR = 0.3  # brightness a pixel without attention keeps
COLOURS = "viridis"
SUFFIX = "_attention.png"
NOT_GROUNDING = ("Attention is not grounding: a word's weights say which encoded regions the decoder read when it "
                 "chose the word,\nnot where the word's object is (the encoder mixes the regions), and its heaviest "
                 "box is often another object or the background.")


@dataclass(frozen=True)
class Mechanism:
    """How to find a paper's attention: the trained `system` whose model is drawn, the dotted path of the decoder's
    attention module in that model (`nn.Module.get_submodule`), its `method` that the decoder calls once per step and
    that returns (output, weights [B, H, Nq, N]), the named `input` whose regions it attends over, and the name the
    figure gives it."""
    system: str
    module: str
    method: str
    title: str
    input: str = "regions"


@dataclass(frozen=True)
class Reads:
    """The files a paper's figure reads, relative to the repository root (the index stage depends on them): its
    system's model file and vocabulary, the feature file of each of its model's named inputs, the examples folder."""
    model: Path
    vocabulary: Path
    features: dict[str, Path]
    examples: Path = paths.EXAMPLES

    @property
    def files(self) -> list[Path]:
        return [self.model, self.examples, self.vocabulary, *self.features.values()]


def reads(cfg, mechanism: Mechanism) -> Reads | None:
    """What a paper's figure reads; None when params.yaml does not train the mechanism's system."""
    if mechanism.system not in cfg.systems():
        return None
    spec = cfg.model_of(mechanism.system)
    return Reads(paths.MODELS / mechanism.system / "model.pt", paths.vocabulary(spec.vocabulary) / "vocab.json",
                 {name: paths.features(feature_set) for name, feature_set in spec.inputs.items()})


# ---------------------------------------------------------------- capture


@dataclass(frozen=True)
class Call:
    """One recorded call: the arguments the decoder passed (the tensors themselves) and a detached copy of the
    weights the call returned (its second output)."""
    args: tuple
    kwargs: dict
    weights: object  # torch.Tensor [B, H, Nq, N]


@contextmanager
def recording(module, method: str) -> Iterator[list[Call]]:
    """Within the block, every call of `module.<method>` (this instance only) appends a `Call` to the yielded list;
    the call itself is unchanged. The wrapper is an instance attribute, removed on leaving (also on an error), so the
    class's method is the module's again. ValueError when the instance already has its own `<method>`."""
    if method in vars(module):
        raise ValueError(f"{type(module).__name__}.{method} is already replaced on this instance")
    original, calls = getattr(module, method), []

    def recorded(*args, **kwargs):
        out = original(*args, **kwargs)
        calls.append(Call(args, kwargs, out[1].detach().clone()))
        return out

    object.__setattr__(module, method, recorded)
    try:
        yield calls
    finally:
        object.__delattr__(module, method)


@dataclass(frozen=True)
class Captioned:
    """A greedy caption of one image and its attention: `tokens` the word ids (no <eos>), `weights` [steps, H, N]
    per decoding step (step t chose tokens[t]; the last step may be the one that chose <eos>)."""
    tokens: tuple[int, ...]
    weights: np.ndarray

    def word_weights(self) -> np.ndarray:
        """[words, N]: each word's attention, mean over the heads."""
        return self.weights[:len(self.tokens)].mean(axis=1)


def caption_attention(model, mechanism: Mechanism, inputs, max_length: int) -> Captioned:
    """Decode one image greedily (`inputs`: its named inputs, a batch of one) while recording `mechanism`'s module
    of `model`; its weights per step, the query of the one image."""
    import torch

    from ..decoding.search import greedy_decode

    model.eval()
    module = model.get_submodule(mechanism.module)
    with torch.no_grad(), recording(module, mechanism.method) as calls:
        seqs, _ = greedy_decode(model, inputs, max_length)
    seq = seqs[0].tolist()
    tokens = tuple(seq[:seq.index(0)] if 0 in seq else seq)
    weights = np.stack([call.weights[0, :, -1].float().numpy() for call in calls])  # [steps, H, N]
    return Captioned(tokens, weights)


# ---------------------------------------------------------------- one example


@dataclass(frozen=True)
class Example:
    """What one figure draws: the image (None: not downloaded), the region boxes in its pixels [N, 4], the caption's
    words and their attention [words, N] (mean over `heads` heads)."""
    image_id: int
    picture: Image.Image | None
    size: tuple[int, int]  # width, height of the canvas the boxes are in
    boxes: np.ndarray
    words: tuple[str, ...]
    weights: np.ndarray
    heads: int
    data: str = SYNTHETIC


def picture_boxes(boxes: np.ndarray, stored: tuple[int, int], picture: tuple[int, int]) -> np.ndarray:
    """Boxes [N, 4] (x1, y1, x2, y2 in the pixels of an image of `stored` (width, height)) in the pixels of a picture
    of size `picture`: x times picture width / stored width, y likewise (identity for the world's copies)."""
    sx, sy = picture[0] / stored[0], picture[1] / stored[1]
    return np.asarray(boxes, dtype=np.float64) * np.array([sx, sy, sx, sy])


def load_example(cfg, root: Path, mechanism: Mechanism) -> Example | None:
    """The first qualitative example captioned by `paper`'s system with its attention; None when the paper has no
    mechanism, its system is not in params.yaml or its model file is missing."""
    # every import before the checks: the index stage imports this code whether or not a figure is drawn (its
    # code closure lists it; models.registry imports decoding.search, which caption_attention uses)
    from ..data.captions import load_vocabulary
    from ..data.inputs import Padded
    from ..data.regions import RegionFeatures
    from ..models.registry import build_model, load_state, read_model_file

    files = reads(cfg, mechanism)
    if files is None or not (root / files.model).is_file():
        return None
    system, path, folder = mechanism.system, root / files.model, root / files.examples
    examples = read_json(folder / "examples.json")
    if not isinstance(examples, list) or not examples:
        raise InputError(f"{folder / 'examples.json'}: no qualitative examples")
    example, spec = examples[0], cfg.model_of(system)
    image_id = int(example["image_id"])
    words = load_vocabulary(root / files.vocabulary)
    inputs, dims, boxes, stored = {}, {}, None, None
    for name, feature_file in files.features.items():
        with RegionFeatures(root / feature_file) as reader:
            values, mask, rows = reader.load_padded([image_id])  # the rows in the order the model reads them
            dims[name] = reader.feature_dim
            if name == mechanism.input:  # boxes of the original image, whose (width, height) the file stores
                boxes, stored = rows[0].numpy(), tuple(int(v) for v in reader.image_sizes[reader.index_of(image_id)])
        inputs[name] = Padded(values, mask)
    if boxes is None:
        raise InputError(f"params.yaml: '{cfg.where(system)}' has no input {mechanism.input!r} to draw")
    _, saved = read_model_file(path, cfg.stage(system))
    model = build_model(cfg.where(cfg.model_name(system)), spec, len(words), dims)
    load_state(model, saved.get("state_dict", {}), path, system)
    captioned = caption_attention(model, mechanism, inputs, cfg.evaluation.max_length)
    picture = None
    if example.get("file"):
        with Image.open(folder / example["file"]) as image:
            picture = image.convert("RGB")
    size = picture.size if picture is not None else stored
    return Example(image_id, picture, size, picture_boxes(boxes, stored, size),
                   tuple(words[t] for t in captioned.tokens), captioned.word_weights(),
                   captioned.weights.shape[1], REAL_DATA if cfg.profile == "real" else SYNTHETIC)


# ---------------------------------------------------------------- the figure


def attention_mass(boxes: np.ndarray, weights: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """[height, width]: per pixel the summed weight of the boxes that hold its centre (j + 0.5, i + 0.5)."""
    x = np.arange(size[0]) + 0.5
    y = np.arange(size[1]) + 0.5
    inside_x = (x[None, :] >= boxes[:, 0:1]) & (x[None, :] < boxes[:, 2:3])  # [N, W]
    inside_y = (y[None, :] >= boxes[:, 1:2]) & (y[None, :] < boxes[:, 3:4])  # [N, H]
    return np.einsum("n,nh,nw->hw", weights, inside_y.astype(np.float64), inside_x.astype(np.float64))


def _canvas(example: Example) -> np.ndarray:
    if example.picture is not None:
        return np.asarray(example.picture, dtype=np.float64) / 255.0
    return np.full((example.size[1], example.size[0], 3), 0.85)


def _panel(ax, example: Example, shade: np.ndarray) -> None:
    width, height = example.size
    ax.imshow(np.clip(shade, 0, 1), extent=(0, width, height, 0), interpolation="nearest")
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.set_xticks([])
    ax.set_yticks([])


def attention_figure(example: Example, heading: str) -> Figure:
    """The image with its region boxes, then one panel per word of the caption: see the module docstring.
    `heading`: the suptitle's first line (paper and mechanism)."""
    shown = len(example.words)
    weights = example.weights[:shown]
    rows = math.ceil((1 + shown) / COLUMNS)
    title = [heading, f"test image {example.image_id} ({example.data}), greedy caption:",
             *textwrap.wrap(f"“{' '.join(example.words)}”", WRAP)]
    fig = Figure(figsize=(COLUMNS * PANEL + COLOUR_BAR, rows * PANEL + HEADER * len(title) + FOOTER), dpi=DPI,
                 layout="constrained")
    axes = fig.subplots(rows, COLUMNS, squeeze=False).ravel()
    canvas, boxes, count = _canvas(example), example.boxes, len(example.boxes)
    norm = Normalize(0.0, float(weights.max()) if weights.size else 1.0)
    colours = matplotlib.colormaps[COLOURS]
    _panel(axes[0], example, canvas)
    for x1, y1, x2, y2 in boxes:
        axes[0].add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor="white", linewidth=1.6))
        axes[0].add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor="black", linewidth=0.6))
    axes[0].set_title(f"test image {example.image_id}: {count} regions")
    for k in range(shown if count else 0):
        ax, w = axes[1 + k], weights[k]
        mass = attention_mass(boxes, w, example.size)
        _panel(ax, example, canvas * (FLOOR + (1 - FLOOR) * mass / max(mass.max(), 1e-12))[..., None])
        order = np.argsort(w, kind="stable")  # the heaviest box drawn last, on top
        for i in order:
            x1, y1, x2, y2 = boxes[i]
            ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor=colours(norm(w[i])),
                                   linewidth=0.8 + 2.2 * w[i] / norm.vmax))
        top = order[-1]
        ax.text(boxes[top, 0] + 1, boxes[top, 1] + 1, f"{w[top]:.2f}", fontsize=8, va="top", ha="left",
                color="black", bbox={"facecolor": colours(norm(w[top])), "edgecolor": "none", "pad": 1.5})
        ax.set_title(f"{k + 1}: “{example.words[k]}”")
    for ax in axes[1 + shown:]:
        ax.axis("off")
    bar = fig.colorbar(ScalarMappable(norm=norm, cmap=colours), ax=list(axes), shrink=0.6,
                       label=f"attention weight (mean over {example.heads} heads)")
    if count:
        bar.ax.axhline(1 / count, color="white", linewidth=1.5)
        bar.ax.text(-0.15, 1 / count, f"uniform 1/{count}", transform=bar.ax.get_yaxis_transform(), va="center",
                    ha="right", fontsize=8)
    fig.suptitle("\n".join(title))
    fig.supxlabel("Brightness: the attention mass on each pixel (the summed weights of the boxes covering it, "
                  "relative to the panel's largest).\nOutlines: every region box, coloured and thickened by its "
                  "weight; the heaviest box labelled with its weight.\n" + NOT_GROUNDING, fontsize=8)
    return fig


def attention_png(example: Example, heading: str) -> bytes:
    return drawn(attention_figure, example, heading)


def caption(mechanism: Mechanism) -> str:
    """The index's caption of a paper's attention figure: what it shows and what it does not."""
    system = mechanism.system
    return (f"One test image captioned greedily by `{system}`, and for every word of that caption the attention of its "
            f"decoder over the image's regions, averaged over the heads (brightness and box outlines). It shows which "
            f"encoded regions the decoder read for each word. It does not show grounding: the encoder mixes the "
            f"regions, so a box's weight is not evidence that the word names that box's object, and the heaviest box "
            f"is often another object or the background. One image and one run, decoded greedily (the test "
            f"predictions use beam search, so their caption may differ); it measures nothing across the test set.")


# ---------------------------------------------------------------- files


def attention_path(out_dir: Path, paper: str) -> Path:
    return Path(out_dir) / f"{paper}{SUFFIX}"


def write_attention_figures(cfg, root: Path, out_dir: str | os.PathLike, mechanisms: Mapping[str, Mechanism],
                            titles: Mapping[str, str] | None = None) -> dict[str, Path]:
    """Every paper's attention figure (`mechanisms`: {paper: its mechanism}, in their order) whose system is trained,
    into `out_dir`; files `*_attention.png` of papers without one now are deleted. `titles`: {paper: the name its
    figure shows}. Returns {paper: its figure}."""
    out_dir, written = Path(out_dir), {}
    for paper, mechanism in mechanisms.items():
        example = load_example(cfg, root, mechanism)
        if example is None:
            continue
        written[paper] = attention_path(out_dir, paper)
        heading = f"{(titles or {}).get(paper, paper)}, system {mechanism.system}: {mechanism.title}"
        with atomic_path(written[paper]) as tmp:
            tmp.write_bytes(attention_png(example, heading))
    for stale in out_dir.glob(f"*{SUFFIX}"):
        if stale not in written.values():
            stale.unlink()
    return written
