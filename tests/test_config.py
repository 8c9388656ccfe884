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
        ({"captions": {"max_length": 1.5}}, "'captions.max_length' must be an integer"),
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
