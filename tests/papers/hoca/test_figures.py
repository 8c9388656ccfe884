"""The Low-Rank HOCA paper's figures (papers/hoca/figures.py, commands/hoca_figures.py): Figs. 5 and 6 draw the values
of the metrics files (x100) and render the same bytes twice, without metadata; Fig. 7's β is the hierarchical
fusion's output at each greedy step (a distribution over the three modalities), for the words greedy decoding gives,
with the model's forward restored afterwards; the stage writes the three PNGs from trained-system files. Tiny
randomly initialised models; nothing is trained."""
from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
import torch
from matplotlib.colors import to_rgb
from PIL import Image

from crossmodal import cli, paths
from crossmodal.data.captions import EOS, SPECIALS
from crossmodal.data.inputs import Padded
from crossmodal.data.regions import write_region_file
from crossmodal.decoding.search import greedy_decode
from crossmodal.io import InputError, save_torch, write_json
from crossmodal.models.hoca import MODALITIES, HOCAArgs, LowRankHOCACaptioner
from crossmodal.modules.hoca import HierarchicalFusion, HOCAAttentionFusion
from crossmodal.papers.hoca import figures as figs
from crossmodal.papers.hoca.commands import hoca_figures as stage
from crossmodal.reports import claims

pytestmark = pytest.mark.usefixtures("one_thread")

DIMS = {"frames": 5, "motion": 6, "audio": 7}
WORDS = [*SPECIALS, "a", "red", "ball", "rolls", "left", "metal"]  # 10 words
MAX_LENGTH = 5


def metrics(cider: float, history: list[float] | None = None, best: int | None = None) -> dict:
    """A training stage's metrics file: test CIDEr-D (0-1) and, when given, the validation CIDEr-D per epoch."""
    data = {"variant": "x", "test": {"BLEU-4": 0.4, "METEOR": 0.3, "ROUGE-L": 0.6, "CIDEr": cider}}
    if history is not None:
        data |= {"history": [{"epoch": e, "train_loss": 3.0 / e, "lr": 1e-4, "val_CIDEr": v}
                             for e, v in enumerate(history, 1)],
                 "best_epoch": best, "stopped_by": "patience"}
    return data


def write_metrics(folder: Path, name: str, data: dict) -> Path:
    path = folder / f"{name}.json"
    write_json(path, data)
    return path


def check_png(data: bytes, size: tuple[int, int]) -> None:
    """A valid PNG of `size` pixels, without the text chunks matplotlib's own writer adds."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(io.BytesIO(data)) as image:
        image.verify()
    with Image.open(io.BytesIO(data)) as image:
        assert image.format == "PNG" and image.size == size
        assert not {"Software", "Creation Time", "date:create"} & set(image.info)
    assert b"tEXt" not in data and b"iTXt" not in data


def pixels(size: tuple[float, float]) -> tuple[int, int]:
    return round(size[0] * figs.DPI), round(size[1] * figs.DPI)


def line(fig, gid: str):
    return next(l for ax in fig.axes for l in ax.get_lines() if l.get_gid() == gid)


# ---------------------------------------------------------------- Fig. 5


def test_fig5_draws_each_rank_and_the_full_tensor_line_and_renders_the_same_bytes(tmp_path):
    ranks = [(k, write_metrics(tmp_path, f"l_hoca_ubt_rank{k}", metrics(c))) for k, c in
             [(4, 0.79), (1, 0.83), (2, 0.81)]]
    full = write_metrics(tmp_path, "hoca_ubt", metrics(0.86))
    png = figs.rank_png(ranks, full)
    check_png(png, pixels(figs.RANK_SIZE))
    assert figs.rank_png(ranks, full) == png  # same bytes on a second draw
    out = figs.write_png(tmp_path / "out" / figs.FIG5, png)
    assert out.read_bytes() == png and not list(out.parent.glob(".*tmp"))
    fig = figs.rank_figure([(4, 0.79), (1, 0.83), (2, 0.81)], 0.86)
    low_rank, flat = line(fig, "low_rank"), line(fig, "full")
    assert list(low_rank.get_xdata()) == [1, 2, 4]  # in rank order
    np.testing.assert_allclose(low_rank.get_ydata(), [83.0, 81.0, 79.0])  # x100
    np.testing.assert_allclose(flat.get_ydata(), [86.0, 86.0])
    assert list(fig.axes[0].get_xticks()) == [1, 2, 4]
    write_metrics(tmp_path, "l_hoca_ubt_rank4", metrics(0.70))
    assert figs.rank_png(ranks, full) != png  # the values are drawn


def test_fig5_starts_at_0_and_says_one_run_or_draws_the_seeds_mean_and_sd(tmp_path):
    single = figs.rank_figure([(1, 0.83), (2, 0.81)], 0.86)
    assert single.axes[0].get_ylim()[0] == 0
    notes = [t.get_text() for t in single.axes[0].texts]
    assert notes == ["83.0\none run", "81.0\none run"] and "One run per point" in single.get_supxlabel()
    assert "one run" in single.axes[0].get_legend().get_texts()[0].get_text()
    seeds = [write_metrics(tmp_path, f"l_seed{k}", metrics(c)) for k, c in enumerate((0.80, 0.84, 0.88))]
    png = figs.rank_png([(1, seeds), (2, write_metrics(tmp_path, "l2", metrics(0.81)))], seeds[:2])
    check_png(png, pixels(figs.RANK_SIZE))
    seeded = figs.rank_figure([(1, (0.80, 0.84, 0.88)), (2, 0.81)], (0.80, 0.84))
    np.testing.assert_allclose(line(seeded, "low_rank").get_ydata(), [84.0, 81.0])  # the seeds' mean, x100
    bars, = seeded.axes[0].containers  # the one errorbar
    segments = bars.lines[2][0].get_segments()
    np.testing.assert_allclose([s[:, 1] for s in segments], [[80.0, 88.0], [81.0, 81.0]])  # mean ± sd 4; none
    assert [t.get_text() for t in seeded.axes[0].texts] == ["84.0\n3 runs, sd 4.0", "81.0\none run"]
    assert "One run per point" not in seeded.get_supxlabel()


def test_fig5_refuses_bad_inputs(tmp_path):
    good = write_metrics(tmp_path, "good", metrics(0.8))
    no_cider = write_metrics(tmp_path, "bad", {"variant": "bad", "test": {"BLEU-4": 0.4}})
    with pytest.raises(InputError, match="bad.json: no numeric 'test.CIDEr'"):
        figs.rank_png([(1, no_cider)], good)
    with pytest.raises(InputError, match="missing file"):
        figs.rank_png([(1, good)], tmp_path / "absent.json")
    with pytest.raises(InputError, match="distinct ranks"):
        figs.rank_png([(1, good), (1, good)], good)
    with pytest.raises(InputError, match="distinct ranks"):
        figs.rank_png([], good)


# ---------------------------------------------------------------- Fig. 6


def test_fig6_draws_each_systems_validation_curve_and_renders_the_same_bytes(tmp_path):
    curves = {"HOCA-U": write_metrics(tmp_path, "u", metrics(0.5, [0.2, 0.35, 0.33], best=2)),
              "HOCA-UBT": write_metrics(tmp_path, "ubt", metrics(0.5, [0.25, 0.3, 0.4, 0.38], best=3)),
              "L-HOCA-UBT, k=1": write_metrics(tmp_path, "l", metrics(0.5, [0.3, 0.42], best=2))}
    png = figs.curves_png(curves)
    check_png(png, pixels(figs.CURVES_SIZE))
    assert figs.curves_png(curves) == png
    loaded = {label: figs.read_curves(path, label) for label, path in curves.items()}
    fig = figs.curves_figure(loaded)
    np.testing.assert_allclose(line(fig, "HOCA-UBT").get_ydata(), [25.0, 30.0, 40.0, 38.0])
    assert list(line(fig, "HOCA-U").get_xdata()) == [1, 2, 3]
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["HOCA-U: best 35.0 at epoch 2, one run", "HOCA-UBT: best 40.0 at epoch 3, one run",
                      "L-HOCA-UBT, k=1: best 42.0 at epoch 2, one run"]
    assert fig.axes[0].get_ylim()[0] == 0
    write_metrics(tmp_path, "l", metrics(0.5, [0.3, 0.42], best=1))
    assert figs.curves_png(curves) != png


def test_fig6_refuses_a_file_without_history(tmp_path):
    with pytest.raises(InputError, match="no per-epoch val_CIDEr history"):
        figs.curves_png({"x": write_metrics(tmp_path, "x", metrics(0.5))})
    with pytest.raises(InputError, match="best_epoch"):
        figs.curves_png({"x": write_metrics(tmp_path, "y", metrics(0.5, [0.1], best=4))})
    with pytest.raises(InputError, match="at least one"):
        figs.curves_png({})


# ---------------------------------------------------------------- Fig. 7


def tiny(seed: int = 0, variant: str = "UBT", eos_bias: float | None = -1e4) -> LowRankHOCACaptioner:
    """A tiny HOCA captioner; by default it never emits <eos> (eq. 22's bias), so greedy decoding runs every step."""
    torch.manual_seed(seed)
    model = LowRankHOCACaptioner(HOCAArgs(embed_dim=8, hidden_dim=8, att_dim=8, variant=variant,
                                          steps=dict.fromkeys(MODALITIES, 4), dropout=0.0), len(WORDS), DIMS)
    if eos_bias is not None:
        with torch.no_grad():
            model.attention.fusion.query_out.bias[EOS] = eos_bias
    return model.eval()


def clip(seed: int = 1, lengths=(4, 3, 2)) -> dict[str, Padded]:
    gen = torch.Generator().manual_seed(seed)
    return {name: Padded(torch.randn(1, n, DIMS[name], generator=gen), torch.ones(1, n, dtype=torch.bool))
            for name, n in zip(MODALITIES, lengths)}


def stepwise_beta(model, inputs, tokens: list[int]) -> np.ndarray:
    """β of each step by hand: the decoder run on the chosen words, HOCAAttentionFusion's third output."""
    with torch.no_grad():
        features, masks, keys = model.encode(inputs)
        state, words, rows = model.init_state((features, masks, keys), 1), torch.tensor([1]), []
        for token in tokens:
            h, c = model.decoder(model.word_embed(words), state)
            _, _, beta = model.attention(h, features, masks, keys)
            rows.append(beta[0].numpy())
            state, words = (h, c), torch.tensor([token])
    return np.array(rows)


@pytest.mark.parametrize("variant", ["U", "UBT"])
def test_maf_weights_are_the_fusions_beta_for_the_greedy_words(variant):
    model, inputs = tiny(variant=variant).train(), clip()
    with torch.no_grad():
        seqs, _ = greedy_decode(tiny(variant=variant), inputs, MAX_LENGTH)
    tokens = seqs[0].tolist()
    assert 0 not in tokens  # <eos> suppressed: every step has a word
    words, beta = figs.maf_weights(model, inputs, MAX_LENGTH, WORDS)
    assert words == [WORDS[t] for t in tokens]
    assert beta.shape == (MAX_LENGTH, 3) and beta.dtype == np.float64
    np.testing.assert_allclose(beta.sum(1), 1.0, rtol=0, atol=1e-6)
    assert bool((beta > 0).all())
    np.testing.assert_allclose(beta, stepwise_beta(model, inputs, tokens), rtol=0, atol=1e-6)
    assert len({tuple(np.round(row, 6)) for row in beta}) > 1  # β changes with the step
    assert model.training  # the mode is restored
    for module in (model.attention, model.attention.fusion):  # no instance attribute left behind
        assert "forward" not in vars(module)
    assert model.attention.fusion.forward.__func__ is HierarchicalFusion.forward
    assert model.attention.forward.__func__ is HOCAAttentionFusion.forward
    assert figs.maf_weights(model, inputs, MAX_LENGTH)[0] == [str(t) for t in tokens]  # without a vocabulary


def test_maf_weights_leave_out_the_step_that_chose_eos_and_restore_forward_on_error():
    model, inputs = tiny(eos_bias=1e4), clip()
    words, beta = figs.maf_weights(model, inputs, MAX_LENGTH, WORDS)
    assert words == [] and beta.shape == (0, 3)
    with pytest.raises(ValueError, match="batch of one"):
        figs.maf_weights(model, {k: Padded(v.values.repeat(2, 1, 1), v.mask.repeat(2, 1))
                                 for k, v in inputs.items()}, MAX_LENGTH)
    broken = {**inputs, "audio": Padded(torch.randn(1, 9, DIMS["audio"]), torch.ones(1, 9, dtype=torch.bool))}
    with pytest.raises(ValueError, match="more than steps.audio"):
        figs.maf_weights(model, broken, MAX_LENGTH)
    assert "forward" not in vars(model.attention.fusion)


def test_fig7_draws_beta_as_red_green_blue_bars_per_word_and_renders_the_same_bytes():
    inputs = clip()
    panels = []
    for seed, variant, label in ((0, "U", "HOCA-U"), (1, "UBT", "HOCA-UBT")):
        words, beta = figs.maf_weights(tiny(seed, variant), inputs, MAX_LENGTH, WORDS)
        panels.append(figs.MafCaption(label, tuple(words), beta))
    png = figs.maf_png(panels, 7)
    check_png(png, pixels(figs.MAF_SIZE))
    assert figs.maf_png(panels, 7) == png
    fig = figs.maf_figure(panels, 7)
    for ax, panel in zip(fig.axes, panels):
        for m, container in enumerate(ax.containers):  # one bar group per modality, in β's column order
            np.testing.assert_allclose([bar.get_height() for bar in container], panel.beta[:, m])
            assert container.patches[0].get_facecolor()[:3] == pytest.approx(to_rgb(figs.MODALITY_COLOURS[m]))
        assert [t.get_text() for t in ax.get_xticklabels()] == list(panel.words)
    assert "test clip 7" in fig._suptitle.get_text()
    empty = figs.maf_png([figs.MafCaption("HOCA-U", (), np.zeros((0, 3)))], 7)  # an empty caption still draws
    check_png(empty, pixels(figs.MAF_SIZE))


def test_labels_name_the_data_and_the_model():
    assert figs.data_label("msvd") == "MSVD-like synthetic video world"
    assert figs.data_label("msrvtt") == "MSR-VTT-like synthetic video world"
    assert figs.data_label("msrvtt", real=True) == "MSR-VTT"
    assert figs.hoca_label(HOCAArgs(variant="UBT", low_rank=True, rank=2)) == "L-HOCA-UBT, k=2"
    assert figs.hoca_label(HOCAArgs(variant="UBT", low_rank=False)) == "HOCA-UBT"
    assert figs.hoca_label(HOCAArgs(variant="U", low_rank=True)) == "HOCA-U"


# ---------------------------------------------------------------- the stage


ARGS = {"variant": "UBT", "embed_dim": 8, "hidden_dim": 8, "att_dim": 8, "dropout": 0.0,
        "steps": dict.fromkeys(MODALITIES, 4)}
SYSTEMS = {"hoca_u": {**ARGS, "variant": "U"}, "hoca_ubt": {**ARGS, "low_rank": False},
           "l_hoca_ubt": ARGS, "l_hoca_ubt_rank2": {**ARGS, "rank": 2}}
CLIPS = [11, 12, 13]  # 11 is train; 12 is the first test clip


def fake_cfg() -> SimpleNamespace:
    """The part of a loaded params.yaml the stage reads: four HOCA systems on one MSVD-like vocabulary."""
    specs = {name: SimpleNamespace(model="hoca", vocabulary="hoca_msvd", inputs={m: f"video_{m}" for m in MODALITIES},
                                   model_args=args) for name, args in SYSTEMS.items()}
    return SimpleNamespace(systems=lambda: specs, model_of=specs.__getitem__, model_name=lambda n: n,
                           where=lambda n: f"hoca.systems.{n}", stage=lambda n: f"pipelines/hoca/dvc.yaml:{n}",
                           vocabularies={"hoca_msvd": SimpleNamespace(corpus="msvd")}, profile="synthetic",
                           evaluation=SimpleNamespace(max_length=MAX_LENGTH), runtime=SimpleNamespace(threads=1))


def write_trained_files(root: Path, cfg) -> None:
    """What the stage reads: vocabulary, labels, one feature file per modality, model files and metrics files."""
    folder = root / paths.vocabulary("hoca_msvd", "msvd")
    folder.mkdir(parents=True)
    write_json(folder / "vocab.json", {"words": WORDS})
    with h5py.File(folder / "labels.h5", "w") as f:
        f["image_ids"] = np.array(CLIPS, dtype=np.int64)
        f["split"] = np.array([b"train", b"test", b"test"])
        f["label_start_ix"], f["label_end_ix"] = np.arange(3), np.arange(1, 4)
        f["labels"] = np.full((3, MAX_LENGTH), 4, dtype=np.int32)
    rng = np.random.default_rng(0)
    for m, n in zip(MODALITIES, (4, 3, 2)):
        write_region_file(root / paths.features(f"video_{m}"), CLIPS, [np.zeros((n, 4), np.float32)] * 3,
                          [rng.standard_normal((n, DIMS[m])).astype(np.float32) for _ in CLIPS], [(64, 64)] * 3,
                          "test")
    for k, name in enumerate(SYSTEMS):
        torch.manual_seed(k)
        model = LowRankHOCACaptioner(HOCAArgs(**SYSTEMS[name]), len(WORDS), DIMS)
        save_torch({"state_dict": model.state_dict()}, root / paths.MODELS / name / "model.pt")
        write_metrics(root / paths.METRICS, name, metrics(0.8 + k / 100, [0.3, 0.4 + k / 100], best=2))
    write_metrics(root / paths.METRICS, "hoca_ubt_seed1", metrics(0.79, [0.32, 0.38], best=2))  # the `seeds` fixture's


@pytest.fixture
def seeds(monkeypatch):
    """The fake params' seed groups (claims.seed_groups reads a real config): hoca_ubt has a second seed."""
    groups = {name: (name,) for name in SYSTEMS} | {"hoca_ubt": ("hoca_ubt", "hoca_ubt_seed1")}
    monkeypatch.setattr(claims, "seed_groups", lambda cfg: groups)


def test_the_stage_writes_the_three_figures_from_trained_systems(tmp_path, capsys, seeds):
    commands = cli.stage_commands()
    assert commands["hoca-figures"][0] == "papers.hoca.commands.hoca_figures"  # found in the paper's package
    assert set(commands["hoca-figures"][1]) == {"--out", "--ranks", "--full", "--curves", "--maf"}
    cfg = fake_cfg()
    write_trained_files(tmp_path, cfg)
    args = SimpleNamespace(out="reports/hoca_figures", ranks="1:l_hoca_ubt,2:l_hoca_ubt_rank2", full="hoca_ubt",
                           curves="hoca_u,hoca_ubt,l_hoca_ubt", maf="hoca_u,hoca_ubt")
    stage.run(cfg, tmp_path, args)
    summary = json.loads(capsys.readouterr().out)
    out = tmp_path / "reports/hoca_figures"
    assert sorted(p.name for p in out.iterdir()) == sorted([figs.FIG5, figs.FIG6, figs.FIG7])
    first = {name: (out / name).read_bytes() for name in summary["files"]}
    for name, size in ((figs.FIG5, figs.RANK_SIZE), (figs.FIG6, figs.CURVES_SIZE), (figs.FIG7, figs.MAF_SIZE)):
        check_png(first[name], pixels(size))
    assert summary["fig5"]["ranks"]["2"] == {"system": "l_hoca_ubt_rank2", "test_CIDEr": 83.0}
    assert summary["fig5"]["full"] == {"system": "hoca_ubt", "test_CIDEr": 81.0}
    assert summary["fig6"]["hoca_u"] == {"best_epoch": 2, "val_CIDEr": 40.0, "epochs": 2}
    assert summary["fig7"]["clip"] == 12  # the first test clip, not the first clip
    captions = summary["fig7"]["captions"]
    assert list(captions) == ["HOCA-U (hoca_u)", "HOCA-UBT (hoca_ubt)"]
    for caption in captions.values():
        assert len(caption["beta"]) == len(caption["words"])
        np.testing.assert_allclose([sum(row) for row in caption["beta"]], 1.0, atol=2e-3)
    stage.run(cfg, tmp_path, args)  # a rerun writes the same bytes
    capsys.readouterr()
    assert {name: (out / name).read_bytes() for name in first} == first
    (tmp_path / paths.METRICS / "hoca_ubt_seed1.json").unlink()  # Figs. 5 and 6 read a system's seeds too
    with pytest.raises(InputError, match="missing file: .*hoca_ubt_seed1.json"):
        stage.run(cfg, tmp_path, args)


def test_the_stage_refuses_bad_arguments(tmp_path, seeds):
    cfg = fake_cfg()
    good = dict(out="o", ranks="1:l_hoca_ubt", full="hoca_ubt", curves="hoca_u", maf="hoca_u,hoca_ubt")
    for change, message in (({"ranks": "one:l_hoca_ubt"}, "is not rank:system"),
                            ({"ranks": "1:nope"}, "unknown system"),
                            ({"full": "hoca_ubt,hoca_u"}, "one system"),
                            ({"curves": "hoca_u,hoca_u"}, "distinct"),
                            ({"maf": ""}, "distinct")):
        with pytest.raises(InputError, match=message):
            stage.run(cfg, tmp_path, SimpleNamespace(**{**good, **change}))
    with pytest.raises(InputError, match="missing file"):  # nothing trained yet
        stage.run(cfg, tmp_path, SimpleNamespace(**good))
