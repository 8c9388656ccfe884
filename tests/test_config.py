"""params.yaml validation: every mistake is one line naming the key, and the CLI exits non-zero."""
from pathlib import Path

import pytest
import yaml

from crossmodal import cli
from crossmodal.config import Config, TrainConfig, build, load
from crossmodal.io import InputError

ROOT = Path(__file__).resolve().parents[1]


def test_repository_params_load():
    cfg = load(ROOT / "params.yaml")
    assert "updown" in cfg.variants
    assert cfg.variants["updown"].train.schedule in ("step", "noam")


@pytest.mark.parametrize(
    "data, message",
    [
        ({"world": {"imagez": {}}}, "unknown key 'world.imagez' (did you mean 'images'?)"),
        ({"world": {"images": {"train": "many"}}}, "'world.images.train' must be an integer"),
        ({"variants": {"a": {"model_args": {}}}}, "'variants.a' is missing required key 'model'"),
        ({"variants": {"a": {"model": "updown", "train": {"schedule": "cosine"}}}}, "schedule must be step, noam"),
        ({"vocabularies": {"v": {"max_length": 1.5}}}, "'vocabularies.v.max_length' must be an integer"),
        ({"variants": {"a": {"model": "updown", "vocabulary": "min9"}}}, "'variants.a.vocabulary' is 'min9'"),
        ({"profile": "coco"}, "profile must be one of synthetic, real"),
    ],
)
def test_bad_params_name_the_key(data, message):
    with pytest.raises(InputError) as err:
        build(Config, data)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_tuple_and_float_fields_are_converted():
    cfg = build(TrainConfig, {"betas": [0.9, 0.98], "lr": 1})
    assert cfg.betas == (0.9, 0.98) and isinstance(cfg.lr, float)


def test_cli_reports_mistyped_key_and_exits_nonzero(tmp_path, capsys):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["variants"]["updown"]["train"]["epocs"] = 3
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    assert cli.main(["--params", str(path), "prepro-captions"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: params.yaml: unknown key 'variants.updown.train.epocs' (did you mean 'epochs'?)"


def _with_profile(tmp_path, profile):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["profile"] = profile
    path = tmp_path / f"{profile}.yaml"
    path.write_text(yaml.safe_dump(params))
    return load(path)


def test_one_switch_turns_every_paper_block_on(tmp_path):
    synthetic, real = _with_profile(tmp_path, "synthetic"), _with_profile(tmp_path, "real")
    assert synthetic.variants["xlan"].model_args["hidden_dim"] == 128 and synthetic.variants["xlan"].train.epochs == 10
    xlan = real.variants["xlan"]
    assert xlan.model_args["hidden_dim"] == 1024 and xlan.model_args["encoder_blocks"] == 4  # merged, not replaced
    assert (xlan.train.schedule, xlan.train.warmup_steps, xlan.train.batch_size, xlan.train.epochs) == ("noam", 10000, 40, 70)
    assert xlan.train.seed == 0 and xlan.vocabulary == "min6"  # values without a paper override are kept
    assert real.scst["xlan_scst"].train.lr == 1e-5 and real.trained()["xlan_scst_seed1"].train.lr == 1e-5
    assert real.variants["aoanet"].train.lr == 2e-4 and real.variants["aoanet"].vocabulary == "min5"
    assert real.compute.lazy_features and not synthetic.compute.lazy_features
    assert set(real.variants) == set(synthetic.variants)


def test_a_paper_block_must_be_a_mapping():
    from crossmodal.config import apply_profile

    with pytest.raises(InputError, match="'variants.x.paper' must be a mapping"):
        apply_profile({"variants": {"x": {"paper": [1]}}}, real=True)
