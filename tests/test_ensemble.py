"""Ensembles: the averaged log-probabilities against the members', decoding through the shared beam search, and
the params.yaml sections that declare reseeded members and ensembles."""
import pytest
import torch

from crossmodal.config import Config, ScstConfig, build
from crossmodal.decoding.search import beam_search
from crossmodal.io import InputError
from crossmodal.models.ensemble import Ensemble
from crossmodal.models.updown import UpDown, UpDownArgs
from crossmodal.models.xlan import XLAN, XLANArgs

MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)


def _members():
    torch.manual_seed(0)
    return [UpDown(UpDownArgs(8, 8, 8), 12, 6).eval(), UpDown(UpDownArgs(8, 8, 8), 12, 6).eval(),
            XLAN(XLANArgs(embed_dim=8, hidden_dim=8, heads=2, encoder_blocks=1), 12, 6).eval()]


def test_step_averages_the_members_log_probabilities():
    members, feats, words = _members(), torch.randn(3, 4, 6), torch.tensor([4, 5, 6])
    ensemble = Ensemble(members)
    encoded = ensemble.encode(feats, MASK)
    logprobs, state = ensemble.step(words, ensemble.init_state(encoded, 3), encoded)
    per_member = []
    for m in members:
        own = m.encode(feats, MASK)
        out, own_state = m.step(words, m.init_state(own, 3), own)
        per_member.append(out)
    torch.testing.assert_close(logprobs, torch.stack(per_member).mean(0))
    assert len(state) == len(members)


def test_beam_search_over_an_ensemble_decodes_each_image_alone_and_one_member_is_that_model():
    members, feats = _members(), torch.randn(3, 4, 6)
    seqs, scores = beam_search(Ensemble(members), feats, MASK, beam_size=3, max_length=6)
    for b in range(3):
        alone, alone_scores = beam_search(Ensemble(members), feats[b:b + 1], MASK[b:b + 1], 3, 6)
        assert torch.equal(seqs[b:b + 1], alone)
        torch.testing.assert_close(scores[b:b + 1], alone_scores)
    single, single_scores = beam_search(members[0], feats, MASK, 3, 6)
    one, one_scores = beam_search(Ensemble(members[:1]), feats, MASK, 3, 6)
    assert torch.equal(single, one)
    torch.testing.assert_close(single_scores, one_scores)


BASE = {"variants": {"a": {"model": "updown", "vocabulary": "min5", "train": {"seed": 0, "lr": 0.001}},
                     "b": {"model": "xlan", "vocabulary": "min5"}},
        "scst": {"a_scst": {"init": "a"}}}


def _reseeded(**sections):
    return build(Config, {**BASE, **sections})


MEMBERS = {"reseeds": {f"a_seed{k}": {"of": "a", "seed": k} for k in (1, 2, 3)},
           "scst_reseeds": {f"a_scst_seed{k}": {"of": "a_scst", "seed": k, "init": f"a_seed{k}"} for k in (1, 2, 3)}}


def test_reseeded_members_share_every_param_but_the_seed():
    cfg = _reseeded(**MEMBERS, ensembles={"a_ens": {"members": ["a", "a_seed1", "a_seed2", "a_seed3"]},
                                          "a_scst_ens": {"members": ["a_scst", *MEMBERS["scst_reseeds"]]}})
    trained = cfg.trained()
    assert trained["a_seed2"].train.seed == 2 and trained["a_seed2"].train.lr == 0.001
    assert isinstance(trained["a_scst_seed3"], ScstConfig) and trained["a_scst_seed3"].init == "a_seed3"
    assert trained["a_scst_seed3"].train.seed == 3 and cfg.model_of("a_scst_seed3") == cfg.model_of("a")
    assert cfg.stage_of("a_seed1") == "reseed@a_seed1" and cfg.stage_of("a_scst_seed1") == "reseed_scst@a_scst_seed1"
    assert cfg.stage_of("a_ens") == "ensemble@a_ens" and cfg.stage_of("a_scst") == "scst@a_scst"


@pytest.mark.parametrize("sections, message", [
    ({"reseeds": {"x": {"of": "c", "seed": 1}}}, "'reseeds.x.of' is 'c', not a key of variants"),
    ({"reseeds": {"x": {"of": "a", "seed": 0}}}, "needs a seed other than a's"),
    ({"reseeds": {"a": {"of": "a", "seed": 1}}}, "'reseeds.a' reuses the name of 'variants.a'"),
    ({**MEMBERS, "scst_reseeds": {"y": {"of": "a_scst", "seed": 2, "init": "a_seed1"}}},
     "'scst_reseeds.y.init' must name the reseeds entry of a with seed 2"),
    ({**MEMBERS, "ensembles": {"e": {"members": ["a", "a_seed1", "a_seed2"]}}}, "members must be 4 distinct"),
    ({**MEMBERS, "ensembles": {"e": {"members": ["a", "a_seed1", "a_seed2", "b"]}}}, "share one model"),
    ({**MEMBERS, "ensembles": {"e": {"members": ["a", "a_seed1", "a_seed2", "a_scst"]}}}, "mix cross-entropy and SCST"),
    ({**MEMBERS, "ensembles": {"e": {"members": ["a", "a_seed1", "a_seed2", "z"]}}}, "'z' is not a trained system"),
])
def test_bad_member_and_ensemble_declarations_name_the_key(sections, message):
    with pytest.raises(InputError, match=message):
        _reseeded(**sections)
