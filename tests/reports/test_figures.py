"""Training curves as figures (reports/figures.py): one PNG per trained system and one overview per paper, the same
bytes on every run and without a time stamp; the `dvc plots` data equal to the history; SCST's reward curves;
systems without a history skipped; a malformed metrics file named in a one-line error; the index section."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest

from crossmodal.io import InputError
from crossmodal.reports import figures
from qualitative_examples import chunks

XE_HISTORY = [{"epoch": 1, "train_loss": 2.93, "lr": 0.001, "val_CIDEr": 0.38},
              {"epoch": 2, "train_loss": 2.41, "lr": 0.001, "val_CIDEr": 0.91},
              {"epoch": 3, "train_loss": 2.20, "lr": 0.0008, "val_CIDEr": 0.87}]
SCST_HISTORY = [{"epoch": 1, "train_loss": -0.16, "train_CIDEr_sample": 2.13, "train_CIDEr_greedy": 2.22, "lr": 4e-05,
                 "val_CIDEr": 2.06},
                {"epoch": 2, "train_loss": -0.03, "train_CIDEr_sample": 2.28, "train_CIDEr_greedy": 2.22, "lr": 4e-05,
                 "val_CIDEr": 2.12}]


def metrics(history: list[dict] | None, best: int | None = None, objective: str = "xe", **extra) -> dict:
    data = {"variant": "x", "objective": objective, "test": {"CIDEr": 1.0}, **extra}
    if history is not None:
        data |= {"best_epoch": best if best is not None else max(history, key=lambda r: r["val_CIDEr"])["epoch"],
                 "best_val_CIDEr": max(r["val_CIDEr"] for r in history), "stopped_by": "patience",
                 "history": history}
    return data


@pytest.fixture
def metrics_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "reports" / "metrics"
    folder.mkdir(parents=True)
    files = {"updown": metrics(XE_HISTORY), "updown_scst": metrics(SCST_HISTORY, objective="scst"),
             "updown_seed1": metrics([{**r, "val_CIDEr": r["val_CIDEr"] - 0.05} for r in XE_HISTORY]),
             "updown_ensemble": metrics(None, members=["updown", "updown_seed1"]),
             "reference_points": {"constant_caption": {"CIDEr": 0.1}, "human_ceiling": {"CIDEr": 3.0}}}
    for name, data in files.items():
        (folder / f"{name}.json").write_text(json.dumps(data))
    return folder


PAPERS = {"baselines": ["updown", "updown_seed1", "updown_ensemble", "updown_scst"], "eta": ["updown_ensemble"]}
SEEDS = {"updown": ("updown", "updown_seed1"), "updown_seed1": ("updown_seed1", "updown"),
         "updown_scst": ("updown_scst",), "updown_ensemble": ("updown_ensemble",)}


def write(metrics_dir: Path, out: Path, **kwargs) -> dict[str, list[Path]]:
    return figures.write_figures(metrics_dir, out / "figures", PAPERS, seeds=SEEDS, **kwargs)


@pytest.mark.slow
def test_the_same_inputs_give_the_same_png_bytes_without_a_time_stamp(metrics_dir, tmp_path):
    first = write(metrics_dir, tmp_path / "one")
    second = write(metrics_dir, tmp_path / "two")
    one, two = tmp_path / "one" / "figures", tmp_path / "two" / "figures"
    systems = ("updown", "updown_seed1", "updown_scst")
    assert first == {"baselines": [one / "baselines_curves.png", *(one / "curves" / f"{n}.png" for n in systems)]}
    assert [p.relative_to(one) for p in first["baselines"]] == [p.relative_to(two) for p in second["baselines"]]
    for a, b in zip(first["baselines"], second["baselines"]):
        assert a.read_bytes() == b.read_bytes(), a.name
        assert chunks(a.read_bytes()) == ["IHDR", "IDAT", "IEND"]  # no tIME, tEXt (matplotlib's Software) or pHYs
    assert not [f for d in (one, one / "curves") for f in d.iterdir() if f.name.startswith(".")]  # no temporaries
    # different data, different picture
    curves = figures.read_curves(metrics_dir / "updown.json")
    assert figures.system_png(curves) == (one / "curves" / "updown.png").read_bytes()
    changed = figures.Curves("updown", curves.rows[:2], 2, "max_epochs", "xe")
    assert figures.system_png(changed) != figures.system_png(curves)


@pytest.mark.slow
def test_the_cache_gives_the_drawn_bytes_redraws_what_changed_and_keeps_only_the_last_calls(metrics_dir, tmp_path,
                                                                                             monkeypatch):
    """The index's cache of drawn figures: a second call draws nothing and writes the first call's bytes; a changed
    history redraws its system and its paper's overview only; a change of the drawing code (its digest) redraws all;
    the cache then holds exactly the figures of the last call."""
    cache = tmp_path / "cache"
    drawn = write(metrics_dir, tmp_path / "plain")["baselines"]
    first = write(metrics_dir, tmp_path / "one", cache=cache)["baselines"]
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in drawn]
    assert len(list(cache.iterdir())) == 4  # the overview and three systems' curves
    calls = []
    for name in ("system_figure", "overview_figure"):
        def counted(*args, _draw=getattr(figures, name), _name=name):
            calls.append((_name, args[0]))
            return _draw(*args)

        monkeypatch.setattr(figures, name, counted)
    second = write(metrics_dir, tmp_path / "two", cache=cache)["baselines"]
    assert calls == [] and [p.read_bytes() for p in second] == [p.read_bytes() for p in drawn]

    history = [{**r, "val_CIDEr": r["val_CIDEr"] + 0.1} for r in XE_HISTORY]
    (metrics_dir / "updown_seed1.json").write_text(json.dumps(metrics(history)))
    third = write(metrics_dir, tmp_path / "three", cache=cache)["baselines"]
    assert [(n, getattr(a, "system", a)) for n, a in calls] == [("overview_figure", "baselines"),
                                                                 ("system_figure", "updown_seed1")]
    assert [p.read_bytes() for p in third] == [p.read_bytes() for p in write(metrics_dir, tmp_path / "plain2")
                                               ["baselines"]]
    assert len(list(cache.iterdir())) == 4  # the two replaced are gone

    calls.clear()
    monkeypatch.setattr(figures, "_drawing_digest", lambda: "other code")
    write(metrics_dir, tmp_path / "four", cache=cache)
    assert len(calls) == 4 and len(list(cache.iterdir())) == 4


@pytest.mark.slow
def test_a_shared_cache_is_added_to_without_pruning_and_survives_a_file_pruned_under_it(metrics_dir, tmp_path,
                                                                                      monkeypatch):
    """A queued experiment's index shares its repository's cache (stages/index.py): with `prune_cache=False` it
    keeps the repository's figures beside its own; a figure pruned by another process between the lookup and the
    read is drawn again, with the same bytes."""
    cache = tmp_path / "cache"
    write(metrics_dir, tmp_path / "repository", cache=cache)
    before = set(cache.iterdir())
    history = [{**r, "val_CIDEr": r["val_CIDEr"] + 0.1} for r in XE_HISTORY]
    (metrics_dir / "updown_seed1.json").write_text(json.dumps(metrics(history)))
    write(metrics_dir, tmp_path / "experiment", cache=cache, prune_cache=False)
    assert before < set(cache.iterdir()) and len(list(cache.iterdir())) == 6  # two new: its system and overview

    read_bytes = Path.read_bytes

    def pruned_first(path):
        if path.parent == cache:
            path.unlink(missing_ok=True)  # another process's prune, just before this read
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", pruned_first)
    got = write(metrics_dir, tmp_path / "raced", cache=cache)["baselines"]
    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    plain = write(metrics_dir, tmp_path / "plain")["baselines"]
    assert [p.read_bytes() for p in got] == [p.read_bytes() for p in plain]
    assert len(list(cache.iterdir())) == 4  # a pruning call keeps only its own


def test_a_users_matplotlib_settings_do_not_change_the_bytes(metrics_dir):
    curves = figures.read_curves(metrics_dir / "updown_scst.json")
    plain = figures.system_png(curves)
    with matplotlib.rc_context({"lines.linewidth": 5, "font.size": 20, "axes.facecolor": "black",
                                "figure.dpi": 300, "axes.grid": False}):
        assert figures.system_png(curves) == plain
    width, height = int.from_bytes(plain[16:20], "big"), int.from_bytes(plain[20:24], "big")
    assert (width, height) == tuple(round(v * figures.DPI) for v in figures.SYSTEM_SIZE)


@pytest.mark.slow
def test_the_plots_files_hold_the_history_records(metrics_dir, tmp_path):
    noted = [{**XE_HISTORY[0], "note": "resumed here", "flag": True}, *XE_HISTORY[1:]]
    (metrics_dir / "updown.json").write_text(json.dumps(metrics(noted)))
    write(metrics_dir, tmp_path)
    plots = tmp_path / "plots"  # beside reports/figures by default
    assert sorted(p.name for p in plots.iterdir()) == ["updown.json", "updown_scst.json", "updown_seed1.json"]
    assert json.loads((plots / "updown.json").read_text()) == XE_HISTORY  # only numbers: the note and flag dropped
    records = json.loads((plots / "updown_scst.json").read_text())
    assert records == SCST_HISTORY and all(list(r)[0] == "epoch" for r in records)
    assert figures.plots_json(figures.read_curves(metrics_dir / "updown_scst.json")).count("\n") == len(records) + 2
    elsewhere = tmp_path / "elsewhere"
    write(metrics_dir, tmp_path / "again", plots_dir=elsewhere)
    assert (elsewhere / "updown.json").read_bytes() == (plots / "updown.json").read_bytes()


def test_scst_runs_get_the_reward_curves(metrics_dir):
    scst = figures.read_curves(metrics_dir / "updown_scst.json")
    xe = figures.read_curves(metrics_dir / "updown.json")
    assert scst.scst and not xe.scst
    drawn = figures.system_series(scst)
    assert list(drawn[figures.TOP]) == ["val_CIDEr", "train_CIDEr_sample", "train_CIDEr_greedy"]
    assert drawn[figures.TOP]["train_CIDEr_sample"].y == pytest.approx([213.0, 228.0])  # x100, as the tables
    assert drawn[figures.TOP]["train_CIDEr_greedy"].y == pytest.approx([222.0, 222.0])
    assert drawn[figures.TOP]["val_CIDEr"].y == pytest.approx([206.0, 212.0])
    assert drawn[figures.BOTTOM]["train_loss"].y == pytest.approx([-0.16, -0.03])
    assert list(figures.system_series(xe)[figures.TOP]) == ["val_CIDEr"]
    assert figures.system_series(xe)[figures.TOP]["val_CIDEr"].y == pytest.approx([38.0, 91.0, 87.0])

    # what the figure itself holds: lines by their gid, the best epoch starred, the stop reason in the title
    fig = figures.system_figure(scst)
    top, bottom, lr_axis = fig.axes
    lines = {line.get_gid(): line for line in top.get_lines()}
    assert {"val_CIDEr", "train_CIDEr_sample", "train_CIDEr_greedy", "best"} <= set(lines)
    assert list(lines["train_CIDEr_sample"].get_ydata()) == pytest.approx([213.0, 228.0])
    assert list(lines["best"].get_xdata()) == [2] and list(lines["best"].get_ydata()) == pytest.approx([212.0])
    assert "stopped by patience after 2 epochs" in top.get_title()
    assert [line.get_gid() for line in bottom.get_lines()] == ["train_loss"]
    assert [line.get_gid() for line in lr_axis.get_lines()] == ["lr"]
    xe_lines = {line.get_gid() for line in figures.system_figure(xe).axes[0].get_lines()}
    assert "train_CIDEr_sample" not in xe_lines and "val_CIDEr" in xe_lines


def test_scst_from_beams_draws_the_beams_reward_and_no_greedy_line(tmp_path):
    """Under the mean baseline SCST decodes no greedy caption (tasks/objectives/scst.py): its history has the beam
    candidates' reward only, and the figure labels it so."""
    history = [{k.replace("sample", "beam"): v for k, v in row.items() if k != "train_CIDEr_greedy"}
               for row in SCST_HISTORY]
    path = tmp_path / "x_scst.json"
    path.write_text(json.dumps(metrics(history, objective="scst")))
    curves = figures.read_curves(path)
    assert curves.scst
    drawn = figures.system_series(curves)[figures.TOP]
    assert list(drawn) == ["val_CIDEr", "train_CIDEr_beam"]
    assert drawn["train_CIDEr_beam"].label == "reward: beam candidates"
    assert drawn["train_CIDEr_beam"].y == pytest.approx([213.0, 228.0])
    lines = {line.get_gid() for line in figures.system_figure(curves).axes[0].get_lines()}
    assert "train_CIDEr_beam" in lines and "train_CIDEr_greedy" not in lines


def test_the_overview_puts_cross_entropy_and_scst_apart_and_seeds_together(metrics_dir):
    curves = [figures.read_curves(metrics_dir / f"{n}.json") for n in ("updown_seed1", "updown", "updown_scst")]
    groups = figures.overview_groups(curves, SEEDS)
    assert [[c.system for c in g] for g in groups] == [["updown_seed1", "updown"], ["updown_scst"]]
    alone = figures.overview_groups(curves)
    assert [[c.system for c in g] for g in alone] == [["updown_seed1"], ["updown"], ["updown_scst"]]
    fig = figures.overview_figure("baselines", curves, SEEDS)
    xe_axis, scst_axis = fig.axes
    assert {line.get_gid() for line in xe_axis.get_lines()} >= {"updown", "updown_seed1"}
    assert {"updown_seed1:mean", "updown_seed1:band"} <= {a.get_gid() for a in xe_axis.get_children()}
    assert [t.get_text() for t in xe_axis.get_legend().get_texts()] == ["updown_seed1: 2 seeds, mean ± sd"]
    assert [t.get_text() for t in scst_axis.get_legend().get_texts()] == ["updown_scst: one run"]
    only_xe = figures.overview_figure("baselines", curves[:2], SEEDS)
    assert len(only_xe.axes) == 1


def test_a_seed_band_is_the_mean_and_sd_where_two_runs_or_more_reached_the_epoch(metrics_dir):
    """Runs stop at different epochs: the band covers the epochs that two or more runs reached, and a lone run has
    none."""
    short = figures.read_curves(metrics_dir / "updown_seed1.json")
    long = figures.read_curves(metrics_dir / "updown.json")
    short = figures.Curves("short", short.rows[:2], 1, "patience")
    band = figures.seed_band([long, short])
    assert band.epochs == [1, 2] and band.n == [2, 2]
    assert band.mean == pytest.approx([35.5, 88.5])  # (38 + 33) / 2, (91 + 86) / 2
    assert band.sd == pytest.approx([5 / 2 ** 0.5] * 2)  # two values 5 apart: sd = 5 / sqrt(2)
    assert figures.seed_band([long]).epochs == []


def test_every_axis_starts_at_0_and_the_legend_hides_no_line(metrics_dir):
    curves = [figures.read_curves(metrics_dir / f"{n}.json") for n in ("updown", "updown_seed1", "updown_scst")]
    fig = figures.overview_figure("baselines", curves, SEEDS)
    figures.figure_png(fig)  # lays the figure out
    for ax in fig.axes:
        assert ax.get_ylim()[0] == 0
        legend, plot = ax.get_legend().get_window_extent(), ax.get_window_extent()
        assert legend.x0 >= plot.x1  # outside the plotting area, to its right
    system = figures.system_figure(curves[0])
    assert system.axes[0].get_ylim()[0] == 0 and system.axes[1].get_ylim()[0] == 0
    scst = figures.system_figure(curves[2])  # SCST's loss is negative: its axis reaches below 0
    low, high = scst.axes[1].get_ylim()
    assert low < -0.16 and high >= 0


def test_one_quantity_per_axis_and_many_systems_as_small_multiples(tmp_path):
    """A second validation metric (BAN's grounding recall) gets its own section and axis; a section with more systems
    than ONE_AXIS draws one small axis per system, each titled with its runs."""
    folder = tmp_path / "metrics"
    folder.mkdir()
    vqa = [{"epoch": e, "train_loss": 1.0, "val_score": 0.1 * e} for e in (1, 2, 3)]
    recall = [{"epoch": e, "train_loss": 1.0, "val_recall": 0.2 * e} for e in (1, 2)]
    names = [f"ban_{k}" for k in range(figures.ONE_AXIS + 1)]
    for name in names:
        (folder / f"{name}.json").write_text(json.dumps({"history": vqa, "best_epoch": 3}))
    (folder / "ban_flickr.json").write_text(json.dumps({"history": recall, "best_epoch": 2}))
    curves = [figures.read_curves(folder / f"{n}.json") for n in [*names, "ban_flickr"]]
    assert [(m, len(c)) for m, _, c in figures.overview_sections(curves)] == [("val_score", len(names)),
                                                                             ("val_recall", 1)]
    fig = figures.overview_figure("ban", curves)
    used = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    assert len(used) == len(names) + 1
    assert [ax.get_title() for ax in used[:2]] == ["ban_0: one run", "ban_1: one run"]
    assert used[-1].get_ylabel() == "R@1 (x100)"
    assert [t.get_text() for t in used[-1].get_legend().get_texts()] == ["ban_flickr: one run"]


def test_systems_without_a_history_are_skipped(metrics_dir, tmp_path):
    assert figures.read_curves(metrics_dir / "updown_ensemble.json") is None
    assert figures.read_curves(metrics_dir / "reference_points.json") is None
    written = figures.write_figures(metrics_dir, tmp_path / "figures",
                                    {"baselines": ["updown_ensemble", "updown"], "eta": ["updown_ensemble"]})
    assert written == {"baselines": [tmp_path / "figures" / "baselines_curves.png",
                                     tmp_path / "figures" / "curves" / "updown.png"]}
    assert not (tmp_path / "figures" / "curves" / "updown_ensemble.png").exists()
    assert not (tmp_path / "figures" / "eta_curves.png").exists()
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["updown.json"]


def test_files_of_a_system_no_longer_listed_are_removed(metrics_dir, tmp_path):
    out = tmp_path / "figures"
    write(metrics_dir, tmp_path)
    (out / "attention").mkdir()
    (out / "attention" / "keep.png").write_bytes(b"x")  # another kind of figure: not this module's
    (out / "xlan_attention.png").write_bytes(b"x")
    figures.write_figures(metrics_dir, out, {"baselines": ["updown"]})
    assert sorted(p.name for p in (out / "curves").iterdir()) == ["updown.png"]
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["updown.json"]
    assert sorted(p.name for p in out.iterdir()) == ["attention", "baselines_curves.png", "curves",
                                                     "xlan_attention.png"]


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    (json.dumps({"history": {}}), "'history' must be a non-empty list"),
    (json.dumps({"history": []}), "'history' must be a non-empty list"),
    (json.dumps({**metrics(XE_HISTORY), "history": [XE_HISTORY[0], "epoch 2"]}), "history[1] is not an object"),
    (json.dumps(metrics([{"train_loss": 2.9, "val_CIDEr": 0.3}], best=1)), "history[0] has no integer 'epoch'"),
    (json.dumps(metrics([XE_HISTORY[1], XE_HISTORY[0]], best=1)), "history[1].epoch is 1, not after"),
    (json.dumps(metrics([{"epoch": 1, "train_loss": 2.9, "val_CIDEr": "0.3"}], best=1)),
     "history[0] has no numeric 'val_CIDEr'"),
    (json.dumps(metrics(XE_HISTORY, best=7)), "'best_epoch' must be one of the history's epochs (1-3), found 7"),
    (json.dumps({**metrics(XE_HISTORY), "best_epoch": None}), "'best_epoch' must be one of"),
    (json.dumps({**metrics(XE_HISTORY), "stopped_by": 3}),
     "'stopped_by' must be a string (patience or max_epochs), found 3"),
])
def test_a_malformed_metrics_file_is_a_clear_error_naming_it(metrics_dir, tmp_path, content, message):
    (metrics_dir / "updown_scst.json").write_text(content)
    with pytest.raises(InputError) as err:
        write(metrics_dir, tmp_path)
    assert str(err.value).startswith(f"{metrics_dir / 'updown_scst.json'}: ")
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "figures").exists()  # every file is checked before anything is written


def test_a_missing_metrics_file_is_named(metrics_dir, tmp_path):
    with pytest.raises(InputError, match="missing file: .*aoanet.json"):
        figures.write_figures(metrics_dir, tmp_path / "figures", {"aoanet": ["aoanet"]})


def test_a_run_without_a_recorded_stop_reason_says_so(metrics_dir):
    data = metrics(XE_HISTORY)
    del data["stopped_by"]
    (metrics_dir / "old.json").write_text(json.dumps(data))
    curves = figures.read_curves(metrics_dir / "old.json")
    assert curves.stopped_by is None and curves.best_epoch == 2 and curves.system == "old"
    assert "one run: 3 epochs, stop reason not recorded" in figures.system_figure(curves).axes[0].get_title()


def test_the_index_section_shows_each_figure_with_its_caption_and_links_relative_to_the_index(metrics_dir, tmp_path):
    reports = tmp_path / "reports"
    written = figures.write_figures(metrics_dir, reports / "figures", PAPERS, seeds=SEEDS)
    extra = reports / "hoca_figures" / "fig5.png"
    extra.parent.mkdir()
    extra.write_bytes(b"png")
    lines = figures.figure_index_lines(written, reports / "index.md", titles={"baselines": "Baselines"},
                                       plots_dir=reports / "plots", paper_figures={"baselines": [("Fig. 5", extra)]},
                                       captions={"fig5.png": "What Fig. 5 shows."})
    assert lines[0] == "## Figures" and "[plots/](plots/)" in lines[2] and figures.CURVES_CAPTION in lines[2]
    body = lines[lines.index("### Baselines"):]
    assert body[2:6] == ["![Baselines: training curves](figures/baselines_curves.png)", "",
                         f"*Baselines: training curves.* {figures.OVERVIEW_CAPTION}", ""]
    assert body[6:10] == ["![Baselines, Fig. 5](hoca_figures/fig5.png)", "", "*Baselines, Fig. 5.* What Fig. 5 shows.",
                          ""]
    assert body[-1] == ("Each system's curves: [`updown`](figures/curves/updown.png) · "
                        "[`updown_seed1`](figures/curves/updown_seed1.png) · "
                        "[`updown_scst`](figures/curves/updown_scst.png)")
    for line in lines:  # every link resolves from the index's folder
        for target in [part.split(")")[0] for part in line.split("](")[1:]]:
            assert (reports / target).exists(), target
    assert figures.figure_index_lines({}, reports / "index.md") == []
    assert figures.figure_index_lines({"eta": []}, reports / "index.md") == []


def test_the_dvc_plot_definitions_name_the_plots_files():
    definitions = figures.dvc_plot_definitions({"baselines": ["updown", "updown_scst"], "eta": []})
    assert definitions[0] == {"reports/plots": {
        "template": "linear", "x": "epoch", "y": "val_CIDEr", "x_label": "epoch",
        "y_label": "validation CIDEr-D (metrics files' 0-10 scale; the tables print x100)"}}
    assert len(definitions) == 2 and definitions[1]["baselines_val_CIDEr"]["y"] == {
        "reports/plots/updown.json": "val_CIDEr", "reports/plots/updown_scst.json": "val_CIDEr"}
    assert figures.plots_path(figures.PLOTS, "updown").as_posix() == "reports/plots/updown.json"
