"""params.yaml validation and derivation: every mistake is one line naming the key, the CLI exits non-zero, and a
derived entry (`of:`) resolves to its base with only its own knobs changed, under both profiles."""
import dataclasses
import functools
from pathlib import Path

import pytest
import yaml

from crossmodal import cli
from crossmodal.config.loader import MOVED_KEYS, apply_profile, build, from_data, load
from crossmodal.config.training import TrainConfig
from crossmodal.io import InputError

ROOT = Path(__file__).resolve().parents[2]
BASE = {"model": "updown", "vocabulary": "min5", "train": {"max_epochs": 4, "lr": 0.001}}


def test_repository_params_load():
    cfg = load(ROOT / "params.yaml")
    assert cfg.systems()["updown"].train.schedule in ("step", "noam")
    assert cfg.where("xlan_enc1") == "xlan.systems.xlan_enc1" and cfg.stage("xlan") == "pipelines/xlan/dvc.yaml:xlan"


@pytest.mark.parametrize(
    "data, message",
    [
        ({"world": {"imagez": {}}}, "unknown key 'world.imagez' (did you mean 'images'?)"),
        ({"world": {"images": {"train": "many"}}}, "'world.images.train' must be an integer"),
        ({"xlan": {"systems": {"a": {"model_args": {}}}}}, "'xlan.systems.a': a cross-entropy system needs `model`"),
        ({"xlan": {"systems": {"a": {**BASE, "train": {"schedule": "cosine"}}}}}, "schedule must be one of step, noam"),
        ({"xlan": {"systems": {"a": {**BASE, "train": {"max_epocs": 2}}}}},
         "unknown key 'xlan.systems.a.train.max_epocs' (did you mean 'max_epochs'?)"),
        ({"vocabularies": {"v": {"max_length": 1.5}}}, "'vocabularies.v.max_length' must be an integer"),
        ({"xlan": {"systems": {"a": {**BASE, "vocabulary": "min9"}}}}, "'xlan.systems.a.vocabulary' is 'min9'"),
        ({"xlan": {"systems": {"a": BASE, "b": {"of": "aa"}}}}, "'xlan.systems.b.of' is 'aa', not a system or recipe (did you mean 'a'?)"),
        ({"xlan": {"systems": {"a": {"of": "b"}, "b": {"of": "a"}}}}, "derives from itself"),
        ({"xlan": {"systems": {"a": BASE}}, "aoanet": {"systems": {"a": BASE}}}, "reuses the name"),
        ({"xlan": {"systems": {"a": BASE, "s": {"objective": "scst", "init": "a", "model": "xlan"}}}},
         "'xlan.systems.s.model': an scst system uses the model of its init"),
        ({"xlan": {"systems": {"a": BASE, "s": {"objective": "scst", "init": "zz"}}}}, "'xlan.systems.s.init' is 'zz'"),
        ({"xlan": {"systemz": {}}}, "unknown key 'xlan.systemz' (did you mean 'systems'?)"),
        ({"profile": "coco"}, "profile must be one of synthetic, real"),
        ({"recipes": {"r": {"train": {"max_epocs": 2}}}}, "unknown key 'recipes.r.train.max_epocs' (did you mean 'max_epochs'?)"),
        ({"recipes": {"r": {"modle": "x"}}}, "unknown key 'recipes.r.modle' (did you mean 'model'?)"),
        ({"recipes": {"r": {"train": {"schedule": "cosine"}}}}, "'recipes.r.train': schedule must be one of step"),
        ({"xlan": {"recipes": {"r": {"paper": {"train": {"lr": "high"}}}}}}, "'xlan.recipes.r.paper.train.lr' must be a number"),
        ({"xlan": {"systems": {"a": BASE}, "recipes": {"r": {"of": "a"}}}},
         "'xlan.recipes.r.of' is the trained system 'a'; a recipe derives only from recipes"),
        ({"baselines": {"systems": {"a": BASE}}, "xlan": {"systems": {"b": {"of": "a"}}}},
         "'xlan.systems.b.of' is 'a', a trained system of another paper (baselines); derive from the recipe"),
        ({"recipes": {"a": {}}, "xlan": {"systems": {"a": BASE}}}, "'xlan.systems.a' reuses the name of 'recipes.a'"),
        ({"xlan": {"systems": {"a": {**BASE, "seeds": 0}}}}, "'xlan.systems.a.seeds' must be an integer of at least 1"),
        ({"xlan": {"recipes": {"r": {"seeds": 2}}}}, "'xlan.recipes.r.seeds': a recipe trains nothing to seed"),
        ({"xlan": {"systems": {"a": {**BASE, "seeds": 2}, "a_seed1": {"of": "a"}}}},
         "'xlan.systems.a_seed1' is the name of a seed copy of 'a' (seeds: 2)"),
        ({"xlan": {"systems": {"a": BASE, "s": {"objective": "scst", "init": "a", "seeds": 2}}}},
         "'xlan.systems.s_seed1.init' is 'a_seed1', not a cross-entropy system (a seed copy of 'xlan.systems.s.seeds'"),
        ({"xlan": {"systems": {"a": {**BASE, "beam_size": 0}}}}, "'xlan.systems.a': beam_size is a captioning"),
        ({"xlan": {"systems": {"a": BASE, "s": {"objective": "scst", "init": "a", "beam_size": 5}}}},
         "'xlan.systems.s.beam_size': an scst system uses the model of its init"),
        ({"xlan": {"systems": {"a": BASE, "b": {"of": "a", "beam_size": 5}},
                   "ensembles": {"e": {"members": ["a", "b"]}}}}, "'xlan.ensembles.e.members' decode with different"),
        ({"xlan": {"systems": {"a": {**BASE, "train": {"val_beam": 0}}}}}, "val_beam is a beam width (1: greedy)"),
        ({"ban": {"systems": {"v": {"task": "vqa", "model": "ban", "train": {"val_beam": 3}}}}},
         "'ban.systems.v': train.val_beam decodes captions; a vqa system validates by its own metric"),
        ({"xlan": {"systems": {"a": {**BASE, "train": {"caption_rows": "twice"}}}}},
         "caption_rows must be repeat or once, not 'twice'"),
        ({"xlan": {"systems": {"a": BASE, "s": {"objective": "scst", "init": "a", "train": {"caption_rows": "once"}}}}},
         "'xlan.systems.s': train.caption_rows chooses cross-entropy captioning's rows, not a captioning scst"),
    ],
)
def test_bad_params_name_the_key(data, message):
    with pytest.raises(InputError) as err:
        from_data({"vocabularies": {"min5": {}}, **data})
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_seeds_add_reseeded_copies_that_take_their_base_keys():
    cfg = from_data({"vocabularies": {"min5": {}}, "xlan": {"systems": {
        "a": {**BASE, "seeds": 3}, "b": BASE, "s": {"objective": "scst", "init": "a", "seeds": 3}}}})
    assert list(cfg.paper("xlan").systems) == ["a", "a_seed1", "a_seed2", "b", "s", "s_seed1", "s_seed2"]  # table order
    systems = cfg.systems()
    for k in (1, 2):
        copy, base = systems[f"a_seed{k}"], systems["a"]
        assert copy == dataclasses.replace(base, train=dataclasses.replace(base.train, seed=k))
        assert systems[f"s_seed{k}"].init == f"a_seed{k}" and systems[f"s_seed{k}"].train.seed == k
        # no key states a copy's seed: its stage takes its base's keys, so raising `seeds` reruns no stage
        assert cfg.sources(f"a_seed{k}") == cfg.sources("a") == ["xlan.systems.a.model", "xlan.systems.a.vocabulary",
                                                                  "xlan.systems.a.train.max_epochs",
                                                                  "xlan.systems.a.train.lr"]
        assert cfg.where(f"s_seed{k}") == f"xlan.systems.s_seed{k}"
    assert cfg.systems() == dataclasses.replace(cfg).systems()  # expanding twice changes nothing


def test_a_derived_entry_changes_only_its_own_knobs():
    cfg = from_data({"vocabularies": {"min5": {}}, "xlan": {"systems": {
        "b": {"of": "a", "model_args": {"blocks": 2}, "train": {"seed": 3}},  # order does not matter
        "a": {**BASE, "model_args": {"blocks": 0, "dim": 8}},
        "c": {"of": "b", "model": "xlan", "model_args": {"heads": 2}},  # another model: a's args do not pass on
        "s": {"objective": "scst", "init": "b", "train": {"lr": 1e-5}},
        "t": {"of": "s", "init": "c"},
    }}})
    a, b, c, s, t = (cfg.systems()[k] for k in "abcst")
    assert b.model_args == {"blocks": 2, "dim": 8} and (b.train.seed, b.train.max_epochs, b.train.lr) == (3, 4, 0.001)
    assert a.train.seed == 0 and c.model_args == {"heads": 2} and c.train.seed == 3
    assert cfg.chain("c") == ["c", "b", "a"] and cfg.model_of("t") == c and cfg.model_of("s") == b
    assert (t.objective, t.init, t.train.lr) == ("scst", "c", 1e-5)


def test_a_system_decodes_with_its_own_beam_else_the_shared_one_and_its_continuations_with_its_models():
    cfg = from_data({"vocabularies": {"min5": {}}, "evaluation": {"beam_size": 3}, "xlan": {
        "systems": {"a": BASE, "b": {"of": "a", "beam_size": 5}, "c": {"of": "b", "train": {"seed": 1}},
                    "s": {"objective": "scst", "init": "b"}},
        "ensembles": {"e": {"members": ["b", "c"]}}}})
    assert [cfg.beam_size(n) for n in ("a", "b", "c", "s", "e")] == [3, 5, 5, 5, 5]
    assert "xlan.systems.b.beam_size" in cfg.model_sources("s")  # the continuation's stage depends on the key


def test_tuple_and_float_fields_are_converted():
    cfg = build(TrainConfig, {"betas": [0.9, 0.98], "lr": 1})
    assert cfg.betas == (0.9, 0.98) and isinstance(cfg.lr, float)


def test_cli_reports_mistyped_key_and_exits_nonzero(tmp_path, capsys):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["recipes"]["lstm_xe"]["train"]["max_epocs"] = 3
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    assert cli.main(["--params", str(path), "prepro-captions"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: params.yaml: unknown key 'recipes.lstm_xe.train.max_epocs' (did you mean 'max_epochs'?)"


@pytest.mark.parametrize("where, old, value, new", [
    ("xlan.recipes.xlan_scst_recipe.train", "scst_candidates", "beam", "scst.candidates"),
    ("recipes.scst.train", "samples_per_image", 5, "scst.samples"),
    ("recipes.scst_beam.paper.train", "scst_baseline", "greedy", "scst.baseline"),
])
def test_a_moved_key_fails_naming_the_key_it_moved_to(tmp_path, capsys, where, old, value, new):
    """An old params.yaml, or `dvc exp run -S <where>.<old>=...` (which writes the key in), fails on one line naming
    the key's new path (loader.MOVED_KEYS): difflib finds no `scst.candidates` near `scst_candidates`."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    section = functools.reduce(lambda tree, key: tree.setdefault(key, {}), where.split("."), params)
    section[old] = value
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    assert cli.main(["--params", str(path), "prepro-captions"]) == 2
    assert capsys.readouterr().err.strip() == (f"error: params.yaml: unknown key '{where}.{old}' (did you mean "
                                               f"'{where}.{new}'? the key moved there)")


def test_each_moved_key_is_gone_and_its_new_path_is_a_key():
    for cls, moved in MOVED_KEYS.items():
        for old, new in moved.items():
            assert old not in {f.name for f in dataclasses.fields(cls)}
            *sections, leaf = new.split(".")
            default = functools.reduce(getattr, new.split("."), cls())
            stated = functools.reduce(lambda tree, key: {key: tree}, reversed(sections), {leaf: default})
            assert build(cls, stated) == cls()


def _with_profile(tmp_path, profile):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["profile"] = profile
    path = tmp_path / f"{profile}.yaml"
    path.write_text(yaml.safe_dump(params))
    return load(path)


def test_one_switch_turns_every_paper_block_on(tmp_path):
    synthetic, real = _with_profile(tmp_path, "synthetic").systems(), _with_profile(tmp_path, "real")
    assert synthetic["xlan"].model_args["hidden_dim"] == 128 and synthetic["xlan"].train.max_epochs == 60
    assert synthetic["xlan"].train.patience == 3 and synthetic["updown_scst"].train.patience == 2
    xlan = real.systems()["xlan"]
    assert xlan.model_args["hidden_dim"] == 1024 and xlan.model_args["encoder_blocks"] == 4  # merged, not replaced
    assert xlan.model_args["activation"] == "celu"  # the rung's own knob holds at paper scale too
    assert (xlan.train.schedule, xlan.train.warmup_steps, xlan.train.batch_size, xlan.train.max_epochs) == ("noam", 10000, 40, 70)
    assert xlan.train.seed == 0 and xlan.vocabulary == "min6"  # values without a paper override are kept
    assert xlan.train.patience == 0 and real.systems()["updown_scst"].train.patience == 0  # the papers' fixed epochs
    assert real.systems()["xlan_scst"].train.lr == 1e-5 and real.systems()["xlan_scst_seed1"].train.lr == 1e-5
    assert real.systems()["xlan_scst_seed1"].train.seed == 1
    assert real.systems()["aoanet"].train.lr == 2e-4 and real.systems()["aoanet"].vocabulary == "min5"
    assert real.systems()["showtell"].train.max_epochs == 30 and synthetic["showtell"].train.max_epochs == 60
    assert real.systems()["xtransformer"].train.noam_model_size == 768
    assert real.runtime.lazy_features and not _with_profile(tmp_path, "synthetic").runtime.lazy_features
    assert set(real.systems()) == set(synthetic)


def test_the_scst_from_beams_recipe_differs_from_scst_only_where_it_says_and_not_at_paper_scale(tmp_path):
    for profile in ("synthetic", "real"):
        params = yaml.safe_load((ROOT / "params.yaml").read_text())
        params["profile"] = profile
        params["baselines"]["systems"]["updown_sampled"] = {"of": "scst", "init": "updown"}
        path = tmp_path / f"{profile}.yaml"
        path.write_text(yaml.safe_dump(params))
        systems = load(path).systems()
        beams, sampled = systems["updown_scst"], systems["updown_sampled"]  # the tables' SCST takes the beams'
        assert params["baselines"]["systems"]["updown_scst"]["of"] == "scst_beam"
        assert beams.objective == "scst" and beams.init == "updown"
        changed = {f.name for f in dataclasses.fields(TrainConfig)
                   if getattr(beams.train, f.name) != getattr(sampled.train, f.name)}
        if profile == "synthetic":
            assert changed == {"scst", "batch_size", "lr", "max_epochs", "val_beam"}
            assert (beams.train.scst.candidates, beams.train.scst.baseline, beams.train.val_beam) == ("beam", "mean", 3)
            assert beams.train.scst.samples == sampled.train.scst.samples == 5
            assert (beams.train.batch_size, beams.train.lr, beams.train.max_epochs, beams.train.patience) == \
                (50, 2e-4, 30, 2)
        else:  # the paper block restores the papers' sampled SCST at 2e-5, validated greedily, for 15 fixed epochs
            assert changed == set() and sampled.train.scst.candidates == "sample" and sampled.train.max_epochs == 15


def test_a_paper_block_must_be_a_mapping():
    with pytest.raises(InputError, match="'runtime.paper' must be a mapping"):
        apply_profile({"runtime": {"paper": [1]}}, real=True)
    with pytest.raises(InputError, match="'xlan.systems.a.paper' must be a mapping"):
        from_data({"vocabularies": {"min5": {}}, "xlan": {"systems": {"a": {**BASE, "paper": [1]}}}})


def test_recipes_train_nothing_and_each_value_names_the_key_that_states_it():
    data = {"vocabularies": {"min5": {}}, "recipes": {
        "xe": {"vocabulary": "min5", "train": {"max_epochs": 4, "lr": 0.001}, "paper": {"train": {"max_epochs": 30}}},
        "rl": {"objective": "scst", "train": {"lr": 1e-5}}}, "xlan": {"systems": {
            "a": {"of": "xe", "model": "updown", "model_args": {"dim": 8}, "train": {"max_epochs": 6}},
            "b": {"of": "a", "model_args": {"blocks": 2}},
            "s": {"of": "rl", "init": "b"}}}}
    cfg = from_data(data)
    assert set(cfg.systems()) == {"a", "b", "s"} and cfg.chain("b") == ["b", "a", "xe"]
    assert cfg.systems()["b"].train.max_epochs == 6 and cfg.systems()["b"].train.lr == 0.001
    assert cfg.sources("b") == ["recipes.xe.vocabulary", "xlan.systems.a.train.max_epochs", "recipes.xe.train.lr",
                                "xlan.systems.a.model", "xlan.systems.a.model_args.dim", "xlan.systems.b.model_args.blocks"]
    assert cfg.sources("s") == ["recipes.rl.objective", "recipes.rl.train.lr", "xlan.systems.s.init",
                                *cfg.model_sources("b")]
    real = from_data({**data, "profile": "real"})  # the recipe's paper block beats a's synthetic epochs
    assert "recipes.xe.paper.train.max_epochs" in real.sources("b") and real.systems()["b"].train.max_epochs == 30


@pytest.mark.parametrize("key, message", [
    ("hoca_figures", "unknown key 'hoca_figures' (did you mean 'hoca.studies.figures'? a paper's own sections moved "
                     "there)"),
    ("xlann", "unknown key 'xlann' (did you mean 'xlan'?)"),  # a paper's section is named as its package
])
def test_an_unknown_top_level_key_names_the_section_or_paper_it_should_be(tmp_path, capsys, key, message):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params[key] = {}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    assert cli.main(["--params", str(path), "prepro-captions"]) == 2
    assert capsys.readouterr().err.strip() == f"error: params.yaml: {message}"


def test_the_papers_sections_are_their_packages_folders_in_params_order():
    cfg = load(ROOT / "params.yaml")
    assert list(cfg.papers) == ["baselines", "aoanet", "xlan", "eta", "hoca", "ban"]  # params.yaml's order
    assert set(cfg.papers) == {p.parent.name for p in (ROOT / "src/crossmodal/papers").glob("*/paper.py")}
    assert cfg.paper("nothing") == cfg.paper("nothing") and not cfg.paper("nothing").systems  # an empty section
