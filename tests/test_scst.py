"""Self-critical training: the token mask and loss against a direct computation, config checks, and a model
that learns a tiny task from CIDEr-D rewards alone."""
import pytest
import torch

from crossmodal.config import Config, build
from crossmodal.data.inputs import Padded
from crossmodal.decoding.search import greedy_decode
from crossmodal.io import InputError
from crossmodal.metrics.cider import CiderD
from crossmodal.models.updown import UpDown
from crossmodal.training.scst import self_critical_batch, self_critical_loss, token_mask

WORDS = ["<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c", "d"]


def test_token_mask_covers_words_and_the_eos_only():
    seqs = torch.tensor([[4, 5, 0, 0], [6, 0, 0, 0], [0, 0, 0, 0], [4, 5, 6, 7]])
    expected = [[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]]  # last: cut at max length, no eos
    assert token_mask(seqs).int().tolist() == expected


def test_self_critical_loss_matches_direct_computation():
    torch.manual_seed(0)
    seqs = torch.tensor([[4, 5, 0, 0], [6, 0, 0, 0]])
    token_logprobs = -torch.rand(2, 4)
    rewards = torch.tensor([0.5, -2.0])
    direct = -(0.5 * token_logprobs[0, :3].sum() - 2.0 * token_logprobs[1, :2].sum()) / 5
    torch.testing.assert_close(self_critical_loss(token_logprobs, seqs, rewards), direct)


def _config(**systems) -> Config:
    base = {"model": "updown", "vocabulary": "min5"}
    return build(Config, {"vocabularies": {"min5": {}}, "aoanet": {"systems": {"base": base, **systems}}})


def test_scst_config_must_continue_a_declared_cross_entropy_system():
    cfg = _config(base_scst={"objective": "scst", "init": "base", "train": {"schedule": "plateau"}})
    assert set(cfg.systems()) == {"base", "base_scst"} and cfg.model_of("base_scst") == cfg.systems()["base"]
    with pytest.raises(InputError, match="'aoanet.systems.x.init' is 'bse', not a cross-entropy system"):
        _config(x={"objective": "scst", "init": "bse"})
    with pytest.raises(InputError, match="an scst system needs `init`"):
        _config(x={"objective": "scst"})
    with pytest.raises(InputError, match="samples_per_image"):
        _config(x={"objective": "scst", "init": "base", "train": {"samples_per_image": 0}})


def test_model_learns_a_tiny_task_from_cider_rewards_alone():
    torch.manual_seed(0)
    args = UpDown.Args(embed_dim=16, hidden_dim=16, att_hidden_dim=8, dropout=0.0, feature_dropout=0.0)
    model = UpDown(args, len(WORDS), {"regions": 4})
    feats = torch.zeros(2, 2, 4)
    feats[0, 0, 0] = feats[1, 1, 1] = 1.0
    inputs = {"regions": Padded(feats, torch.ones(2, 2, dtype=torch.bool))}
    references = [["a b", "a b b"], ["c d", "c d d"]]
    cider = CiderD(corpus=references)
    generator = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    first = None
    for _ in range(150):
        loss, sample_scores, greedy_scores = self_critical_batch(model, inputs, references, cider, WORDS, 8, 4,
                                                                 generator)
        assert sample_scores.shape == (16,) and greedy_scores.shape == (2,)
        first = greedy_scores.mean() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    seqs, _ = greedy_decode(model.eval(), inputs, 4)
    final = cider.score([" ".join(WORDS[i] for i in s if i) for s in seqs.tolist()], references)
    assert first < 1.0 and final.min() > 3.0, (first, final)
