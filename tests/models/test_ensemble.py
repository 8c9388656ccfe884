"""Ensembles: the averaged log-probabilities against the members', decoding through the shared beam search, and
the params.yaml sections that declare reseeded members and ensembles."""
import pytest
import torch

from crossmodal.config.loader import Config, from_data
from crossmodal.data.inputs import Padded
from crossmodal.decoding.search import beam_search
from crossmodal.io import InputError
from crossmodal.models.ensemble import Ensemble
from crossmodal.models.updown import UpDown, UpDownArgs
from crossmodal.models.xlan import XLAN, XLANArgs

MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)


def _members():
    torch.manual_seed(0)
    dims = {"regions": 6}
    return [UpDown(UpDownArgs(8, 8, 8), 12, dims).eval(), UpDown(UpDownArgs(8, 8, 8), 12, dims).eval(),
            XLAN(XLANArgs(embed_dim=8, hidden_dim=8, heads=2, encoder_blocks=1), 12, dims).eval()]


def _inputs(feats, mask=MASK):
    return {"regions": Padded(feats, mask)}


def test_step_averages_the_members_log_probabilities():
    members, feats, words = _members(), torch.randn(3, 4, 6), torch.tensor([4, 5, 6])
    ensemble = Ensemble(members)
    encoded = ensemble.encode(_inputs(feats))
    logprobs, state = ensemble.step(words, ensemble.init_state(encoded, 3), encoded)
    per_member = []
    for m in members:
        own = m.encode(_inputs(feats))
        out, own_state = m.step(words, m.init_state(own, 3), own)
        per_member.append(out)
    torch.testing.assert_close(logprobs, torch.stack(per_member).mean(0))
    assert len(state) == len(members)


def test_beam_search_over_an_ensemble_decodes_each_image_alone_and_one_member_is_that_model():
    members, feats = _members(), torch.randn(3, 4, 6)
    seqs, scores = beam_search(Ensemble(members), _inputs(feats), beam_size=3, max_length=6)
    for b in range(3):
        alone, alone_scores = beam_search(Ensemble(members), _inputs(feats[b:b + 1], MASK[b:b + 1]), 3, 6)
        assert torch.equal(seqs[b:b + 1], alone)
        torch.testing.assert_close(scores[b:b + 1], alone_scores)
    single, single_scores = beam_search(members[0], _inputs(feats), 3, 6)
    one, one_scores = beam_search(Ensemble(members[:1]), _inputs(feats), 3, 6)
    assert torch.equal(single, one)
    torch.testing.assert_close(single_scores, one_scores)


BASE = {"a": {"model": "updown", "vocabulary": "min5", "train": {"seed": 0, "lr": 0.001}},
        "b": {"model": "xlan", "vocabulary": "min5"},
        "c": {"model": "xlan", "vocabulary": "min6"},
        "d": {"model": "xlan", "vocabulary": "min5", "inputs": {"regions": "grid"}},
        "a_scst": {"objective": "scst", "init": "a"},
        **{f"a_seed{k}": {"of": "a", "train": {"seed": k}} for k in (1, 2, 3)},
        **{f"a_scst_seed{k}": {"of": "a_scst", "init": f"a_seed{k}", "train": {"seed": k}} for k in (1, 2, 3)}}


def _xlan(ensembles: dict) -> Config:
    return from_data({"vocabularies": {"min5": {}, "min6": {}}, "xlan": {"systems": BASE, "ensembles": ensembles}})


def test_reseeded_members_share_every_param_but_the_seed():
    cfg = _xlan({"a_ens": {"members": ["a", "a_seed1", "a_seed2", "a_seed3"]},
                 "a_scst_ens": {"members": ["a_scst", "a_scst_seed1", "a_scst_seed2", "a_scst_seed3"]}})
    systems = cfg.systems()
    assert systems["a_seed2"].train.seed == 2 and systems["a_seed2"].train.lr == 0.001
    assert systems["a_scst_seed3"].objective == "scst" and systems["a_scst_seed3"].init == "a_seed3"
    assert systems["a_scst_seed3"].train.seed == 3 and cfg.model_of("a_scst_seed3") == systems["a_seed3"]
    assert cfg.stage("a_ens") == "pipelines/xlan/dvc.yaml:a_ens" and set(cfg.ensembles()) == {"a_ens", "a_scst_ens"}


@pytest.mark.parametrize("ensembles, message", [
    ({"e": {"members": ["a"]}}, "members must be at least 2 distinct"),
    ({"e": {"members": ["a", "a_seed1", "a"]}}, "members must be at least 2 distinct"),
    ({"e": {"members": ["a", "c"]}}, "share one vocabulary"),
    ({"e": {"members": ["a", "d"]}}, "feed one named input from different feature sets"),
    ({"e": {"members": ["a", "a_seed1", "a_seed2", "a_scst"]}}, "mix cross-entropy and SCST"),
    ({"e": {"members": ["a", "a_seed1", "a_seed2", "z"]}}, "'z' is not a trained system"),
    ({"a": {"members": ["a", "a_seed1", "a_seed2", "a_seed3"]}}, "'xlan.ensembles.a' reuses the name"),
])
def test_bad_ensemble_declarations_name_the_key(ensembles, message):
    """Members may be seeds of one system or different systems (a late fusion, ETA's "T_v & T_s fuse") as long as
    one vocabulary decodes them and each named input comes from one feature set."""
    with pytest.raises(InputError, match=message):
        _xlan(ensembles)


def test_a_late_fusion_of_different_models_reads_the_union_of_their_inputs():
    base = {**BASE, "v": {"model": "eta", "vocabulary": "min5", "model_args": {"mode": "visual"}},
            "s": {"model": "eta", "vocabulary": "min5", "model_args": {"mode": "semantic"},
                  "inputs": {"attributes": "attributes"}}}
    cfg = from_data({"vocabularies": {"min5": {}, "min6": {}}, "eta": {"systems": base, "ensembles": {
        "fuse": {"members": ["v", "s"]}, "mixed": {"members": ["a", "b"]}}}})
    assert cfg.ensemble_inputs("fuse") == {"regions": "regions", "attributes": "attributes"}
    assert cfg.ensemble_inputs("mixed") == {"regions": "regions"}
