"""Attention figures (reports/attention.py): the recorded weights are those the decoder's attention module returns at
each step (a distribution over the real regions, 0 on padding), the wrapper is gone afterwards, the PNG has the same
bytes on every render and no metadata, and a paper whose model file is missing gets no figure. Tiny randomly
initialised models built by `build_model`; nothing is trained."""
from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from crossmodal import paths
from crossmodal.config.loader import load
from crossmodal.data.captions import EOS
from crossmodal.data.inputs import Padded
from crossmodal.data.regions import write_region_file
from crossmodal.decoding.search import greedy_decode
from crossmodal.models.registry import build_model
from crossmodal.reports import attention
from crossmodal.papers.registry import papers
from crossmodal.reports.figures import figure_index_lines
from qualitative_examples import chunks

MECHANISMS = {name: attention.Mechanism(**r.attention) for name, r in papers().items() if r.attention}

ROOT = Path(__file__).resolve().parents[2]
TINY = {"xlan": {"embed_dim": 16, "hidden_dim": 16, "heads": 2, "encoder_blocks": 1},
        "aoanet": {"embed_dim": 16, "hidden_dim": 16, "heads": 2, "refiner_layers": 1}}
MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
STEPS = 4


def tiny(paper: str, vocab: int = 9, feature_dim: int = 6):
    """The paper's system's model at tiny size, random weights, in eval mode; it never emits <eos>, so greedy
    decoding runs every step."""
    torch.manual_seed(0)
    model = build_model(paper, SimpleNamespace(model=paper, model_args=TINY[paper]), vocab, {"regions": feature_dim})
    with torch.no_grad():
        model.logits.bias[EOS] = -1e4
    return model.eval()


def regions(feature_dim: int = 6) -> dict[str, Padded]:
    torch.manual_seed(1)
    return {"regions": Padded(torch.randn(2, 5, feature_dim), MASK)}


@pytest.mark.parametrize("paper", list(MECHANISMS))
def test_recorded_weights_are_the_decoder_attention_of_each_step(paper):
    mechanism, model, inputs = MECHANISMS[paper], tiny(paper), regions()
    module = model.get_submodule(mechanism.module)
    with torch.no_grad():
        plain, _ = greedy_decode(model, inputs, STEPS)
        with attention.recording(module, mechanism.method) as calls:
            seqs, _ = greedy_decode(model, inputs, STEPS)
    assert torch.equal(seqs, plain)  # recording changes nothing
    assert len(calls) == STEPS  # one call per step: the decoder's module only, not the encoder's or refiner's
    direct = getattr(type(module), mechanism.method)
    for call in calls:
        assert call.weights.shape == (2, model.args.heads, 1, 5)
        with torch.no_grad():  # the class's method on the same inputs returns the same weights
            assert torch.equal(call.weights, direct(module, *call.args, **call.kwargs)[1])
        torch.testing.assert_close(call.weights.sum(-1), torch.ones(2, model.args.heads, 1))
        assert torch.all(call.weights[1, ..., 3:] == 0) and torch.all(call.weights[1, ..., :3] > 0)
    assert not torch.equal(calls[0].weights, calls[1].weights)  # each step's own query


@pytest.mark.parametrize("paper", list(MECHANISMS))
def test_the_wrapper_is_removed_afterwards(paper):
    mechanism, model, inputs = MECHANISMS[paper], tiny(paper), regions()
    module = model.get_submodule(mechanism.module)
    with pytest.raises(RuntimeError), attention.recording(module, mechanism.method) as calls:
        raise RuntimeError("inside the block")
    assert mechanism.method not in vars(module)
    assert getattr(module, mechanism.method).__func__ is getattr(type(module), mechanism.method)
    with torch.no_grad():
        greedy_decode(model, inputs, STEPS)
    assert calls == []  # nothing recorded once the block is left


def test_caption_attention_is_a_distribution_over_the_image_regions():
    model, mechanism = tiny("xlan"), MECHANISMS["xlan"]
    one = {"regions": Padded(regions()["regions"].values[1:, :3], MASK[1:, :3])}  # the second image, unpadded
    captioned = attention.caption_attention(model, mechanism, one, STEPS)
    with torch.no_grad():
        seqs, _ = greedy_decode(model, one, STEPS)
    assert captioned.tokens == tuple(seqs[0].tolist())
    assert captioned.weights.shape == (STEPS, 2, 3)
    word = captioned.word_weights()
    np.testing.assert_allclose(word.sum(1), np.ones(STEPS), rtol=1e-6)
    np.testing.assert_allclose(word, captioned.weights.mean(1))


def example(words=("a", "red", "circle", "on", "a", "blue", "square")) -> attention.Example:
    rng = np.random.default_rng(0)
    picture = Image.fromarray(rng.integers(0, 255, size=(32, 40, 3), dtype=np.uint8))
    boxes = np.array([[2, 3, 12, 15], [20, 4, 38, 30], [0, 0, 40, 32], [10.5, 10.5, 21.25, 22]])
    weights = rng.dirichlet(np.ones(4), size=len(words))
    return attention.Example(7, picture, picture.size, boxes, tuple(words), weights, 2)


def test_the_png_has_the_same_bytes_on_every_render_and_no_metadata():
    first = attention.attention_png(example(), "X-LAN: X-Linear attention")
    assert first == attention.attention_png(example(), "X-LAN: X-Linear attention")
    assert first != attention.attention_png(example(words=("a", "red")), "X-LAN: X-Linear attention")
    assert [c for c in chunks(first) if c != "IDAT"] == ["IHDR", "IEND"]
    with Image.open(io.BytesIO(first)) as image:
        assert image.size == (int(100 * (attention.COLUMNS * attention.PANEL + attention.COLOUR_BAR)),
                              int(100 * (2 * attention.PANEL + 3 * attention.HEADER + attention.FOOTER)))


def test_every_word_gets_a_panel_and_the_footer_says_attention_is_not_grounding():
    words = tuple("a small blue circle with a small blue diamond to its right on the grey ground".split())
    fig = attention.attention_figure(example(words), "X-LAN")
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles[1:] == [f"{k}: “{w}”" for k, w in enumerate(words, 1)]  # after the image's panel, all 16 words
    assert "Attention is not grounding" in fig.get_supxlabel()
    text = attention.caption(MECHANISMS["xlan"])
    assert "does not show grounding" in text and "`xlan`" in text


def test_attention_mass_and_box_scaling_are_in_picture_pixels():
    boxes = np.array([[0, 0, 2, 1], [1, 0, 3, 2]], dtype=np.float64)
    mass = attention.attention_mass(boxes, np.array([0.25, 0.75]), (4, 2))
    np.testing.assert_allclose(mass, [[0.25, 1.0, 0.75, 0], [0, 0.75, 0.75, 0]])
    np.testing.assert_allclose(attention.picture_boxes(boxes, (4, 2), (8, 6)), [[0, 0, 4, 3], [2, 0, 6, 6]])


def workspace(root: Path, cfg) -> None:
    """What the index stage's attention figures read, at tiny size: X-LAN's model file (random weights, the params'
    architecture), vocabularies, a region feature file and one qualitative example; no AoANet model file."""
    words = ["<pad>", "<bos>", "<eos>", "<unk>", "a", "red", "blue", "circle", "square", "on"]
    for system in ("xlan", "aoanet"):
        vocab = root / paths.vocabulary(cfg.model_of(system).vocabulary) / "vocab.json"
        vocab.parent.mkdir(parents=True, exist_ok=True)
        vocab.write_text(json.dumps({"words": words}))
    rng = np.random.default_rng(0)
    boxes = [np.array([[1, 2, 10, 12], [14, 3, 30, 20], [5, 18, 25, 30]], dtype=np.float32)] * 2
    write_region_file(root / paths.features("regions"), [7, 8], boxes,
                      [rng.standard_normal((3, 8)).astype(np.float32) for _ in boxes], [(32, 32)] * 2, "test")
    (root / paths.EXAMPLES).mkdir(parents=True)
    (root / paths.EXAMPLES / "examples.json").write_text(json.dumps([{"image_id": 7, "path": "x.png",
                                                                     "file": "7.png"}]))
    Image.fromarray(rng.integers(0, 255, size=(32, 32, 3), dtype=np.uint8)).save(root / paths.EXAMPLES / "7.png")
    torch.manual_seed(0)
    model = build_model("xlan", cfg.model_of("xlan"), len(words), {"regions": 8})
    (root / paths.MODELS / "xlan").mkdir(parents=True)
    torch.save({"state_dict": model.state_dict()}, root / paths.MODELS / "xlan" / "model.pt")


@pytest.mark.slow
def test_a_missing_model_file_skips_the_paper(tmp_path):
    cfg = load(ROOT / "params.yaml")
    workspace(tmp_path, cfg)
    out = tmp_path / "reports" / "figures"
    out.mkdir(parents=True)
    (out / "aoanet_attention.png").write_bytes(b"stale")
    written = attention.write_attention_figures(cfg, tmp_path, out, MECHANISMS)
    assert written == {"xlan": out / "xlan_attention.png"}  # aoanet: no model file, no figure, no error
    assert sorted(p.name for p in out.iterdir()) == ["xlan_attention.png"]  # the stale figure is gone
    first = written["xlan"].read_bytes()
    attention.write_attention_figures(cfg, tmp_path, out, MECHANISMS)
    assert written["xlan"].read_bytes() == first
    lines = figure_index_lines({}, tmp_path / paths.INDEX, {"xlan": "X-LAN"}, attention=written)
    assert lines[-1] == "![X-LAN: attention](figures/xlan_attention.png)"  # shown; no caption given
    captioned = figure_index_lines({}, tmp_path / paths.INDEX, {"xlan": "X-LAN"}, attention=written,
                                   captions={"xlan_attention.png": attention.caption(MECHANISMS["xlan"])})
    assert captioned[-1] == f"*X-LAN: attention.* {attention.caption(MECHANISMS['xlan'])}"
