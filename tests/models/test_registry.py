"""The model registry: lazy, file-per-model lookup; every model it lists builds, decodes and round-trips its weights."""
import inspect
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from crossmodal.data.inputs import Padded
from crossmodal.decoding.search import beam_search, greedy_decode
from crossmodal.io import InputError
from crossmodal.models import registry
from crossmodal.models.base import Captioner
from crossmodal.models.registry import available_models, build_model, load_state, model_class, model_module

# small sizes for the known models; a model added later runs at its defaults until it gets an entry here
SMALL = {
    "showtell": {"embed_dim": 12, "hidden_dim": 16},
    "att2in": {"embed_dim": 12, "hidden_dim": 16, "att_hidden_dim": 8},
    "updown": {"embed_dim": 12, "hidden_dim": 16, "att_hidden_dim": 8},
    "aoanet": {"embed_dim": 16, "hidden_dim": 16, "heads": 2, "refiner_layers": 2},
    "xlan": {"embed_dim": 16, "hidden_dim": 16, "heads": 2, "encoder_blocks": 2},
    "transformer": {"dim": 16, "heads": 2, "encoder_layers": 1, "decoder_layers": 2, "ffn_dim": 32},
    "xtransformer": {"dim": 16, "heads": 2, "encoder_layers": 1, "decoder_layers": 2, "ffn_dim": 32},
    "hoca": {"embed_dim": 12, "hidden_dim": 8, "att_dim": 8, "steps": {"frames": 6, "motion": 6, "audio": 6}},
    "eta": {"dim": 16, "heads": 2, "encoder_layers": 1, "decoder_layers": 2, "ffn_dim": 32},
    "softatt": {"embed_dim": 12, "hidden_dim": 16, "att_hidden_dim": 8},
    "convcap": {"embed_dim": 16, "layers": 2, "kernel_size": 3},
}
FEATURE_DIMS = {"regions": 6, "grid": 5, "frames": 7, "motion": 4, "audio": 3, "attributes": 1}  # per input name
WORD_INPUTS = {"attributes"}  # word ids [B, N] (of the 11-word vocabulary) instead of features [B, N, D]


def _spec(model, **model_args):
    return SimpleNamespace(model=model, model_args=model_args)  # any object with .model and .model_args


def _inputs(names, batch=3):
    gen = torch.Generator().manual_seed(0)
    out = {}
    for i, name in enumerate(names):
        n = 4 + i
        mask = torch.arange(n)[None] < torch.tensor([n, 2, 1][:batch])[:, None]
        values = (torch.randint(2, 11, (batch, n), generator=gen) if name in WORD_INPUTS
                  else torch.randn(batch, n, FEATURE_DIMS[name], generator=gen))
        out[name] = Padded(values, mask)
    return out


def test_the_listing_finds_the_model_files_without_importing_them():
    assert set(available_models()) >= set(SMALL)
    assert not {"base", "registry", "ensemble", "__init__"} & set(available_models())
    assert model_module("xlan") == "crossmodal.models.xlan"


@pytest.mark.slow  # a Python process
def test_importing_the_registry_imports_no_model_module():
    code = ("import sys; from crossmodal.models import registry; names = registry.available_models(); "
            "print(sorted(n for n in names if registry.model_module(n) in sys.modules)); "
            "registry.model_class('showtell'); "
            "print(sorted(n for n in names if registry.model_module(n) in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:2] == ["[]", "['showtell']"]  # and looking one model up imports that one only


@pytest.mark.parametrize("name", available_models())
def test_every_listed_model_builds_decodes_and_round_trips_its_weights(name):
    cls = model_class(name)
    assert issubclass(cls, Captioner) and cls.__module__ == model_module(name)
    assert isinstance(cls.INPUTS, tuple) and cls.INPUTS and set(cls.INPUTS) <= set(FEATURE_DIMS)
    assert list(inspect.signature(cls).parameters) == ["args", "vocab_size", "input_dims"]
    dims = {input_name: FEATURE_DIMS[input_name] for input_name in cls.INPUTS}
    torch.manual_seed(0)
    model = build_model("t", _spec(name, **SMALL.get(name, {})), 11, dims).eval()
    inputs = _inputs(cls.INPUTS)
    targets = torch.tensor([[4, 5, 6], [7, 0, 0], [8, 9, 0]])
    with torch.no_grad():
        out = model(inputs, targets)
        seqs, _ = beam_search(model, inputs, beam_size=2, max_length=5)
    assert out.shape == (3, 4, 11) and torch.isfinite(out).all() and seqs.shape == (3, 5)
    torch.manual_seed(1)
    other = build_model("t", _spec(name, **SMALL.get(name, {})), 11, dims).eval()
    load_state(other, model.state_dict(), "model.pt", "t")
    assert torch.equal(greedy_decode(other, inputs, 5)[0], greedy_decode(model, inputs, 5)[0])


def test_an_unknown_model_name_is_an_input_error_with_a_suggestion():
    with pytest.raises(InputError, match=r"'xlan\.systems\.sys1\.model' is 'updwn' \(did you mean 'updown'\?\); "
                                         r"available models: .*\bxlan\b"):
        build_model("xlan.systems.sys1", _spec("updwn"), 11, {"regions": 6})
    with pytest.raises(InputError, match="did you mean 'transformer'"):
        model_class("transfomer")
    with pytest.raises(InputError, match="unknown model 'nothing_like_it'; available models: "):
        model_module("nothing_like_it")


@pytest.mark.parametrize("name", ["base", "registry", "ensemble", "a.b", "../showtell", ""])
def test_modules_that_define_no_model_are_not_models(name):
    with pytest.raises(InputError, match="available models"):
        build_model("xlan.systems.sys1", _spec(name), 11, {"regions": 6})


def test_a_listed_module_without_a_model_class_is_an_input_error(monkeypatch):
    monkeypatch.setattr(registry, "available_models", lambda task="captioning": ["base", "showtell"])  # no MODEL
    with pytest.raises(InputError, match="'xlan.systems.sys1.model' is 'base'"):
        build_model("xlan.systems.sys1", _spec("base"), 11, {"regions": 6})


def test_model_args_and_inputs_are_checked():
    with pytest.raises(InputError, match=r"unknown key 'xlan\.systems\.sys1\.model_args\.hiden_dim'"):
        build_model("xlan.systems.sys1", _spec("updown", hiden_dim=8), 11, {"regions": 6})
    with pytest.raises(InputError, match="'xlan.systems.sys1': model 'updown' consumes input.s. regions"):
        build_model("xlan.systems.sys1", _spec("updown"), 11, {"grid": 6})
