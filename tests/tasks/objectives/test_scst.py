"""Self-critical training: the token mask, the rewards' baselines and the loss against a direct computation, beam
candidates against the beam search, config checks, one update that favours the better caption (sampled or a beam),
and a model that learns a tiny task from CIDEr-D rewards alone."""
import numpy as np
import pytest
import torch

from crossmodal.config.loader import Config, from_data
from crossmodal.data.inputs import Padded
from crossmodal.decoding.search import beam_search, greedy_decode
from crossmodal.io import InputError
from crossmodal.metrics.cider import CiderD
from crossmodal.models.updown import UpDown
from crossmodal.tasks.objectives import scst
from crossmodal.tasks.objectives.scst import (advantages, beam_candidates, self_critical_batch, self_critical_loss,
                                            token_mask)
from crossmodal.tasks.objectives.xe import with_eos

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


def test_advantages_match_a_direct_loop_for_both_baselines():
    rng = np.random.default_rng(0)
    samples, greedy, n = rng.random(12), rng.random(3), 4  # 3 images, 4 contiguous samples each
    for baseline in ("greedy", "mean"):
        direct = []
        for k, score in enumerate(samples):
            image, own = divmod(k, n)
            others = [samples[image * n + j] for j in range(n) if j != own]
            direct.append(score - (greedy[image] if baseline == "greedy" else sum(others) / len(others)))
        np.testing.assert_allclose(advantages(samples, greedy, n, baseline), direct)
        assert advantages(np.zeros(0), np.zeros(0), n, baseline).shape == (0,)  # a process's empty share of a batch
    assert abs(advantages(samples, greedy, n, "mean").reshape(3, n).sum(1)).max() < 1e-12  # centred per image


def test_rewards_are_cider_d_of_hand_made_captions_against_the_image_references():
    references = [["a b c", "a b d"], ["c d", "d c"]]
    cider = CiderD(corpus=references)
    candidates = ["a b c", "d d", "c d", "a"]  # image 0: two samples; image 1: two samples
    direct = np.array([cider.score([c], [references[k // 2]])[0] for k, c in enumerate(candidates)])
    batch = cider.score(candidates, [r for r in references for _ in range(2)])
    np.testing.assert_allclose(batch, direct)
    assert direct[0] > direct[1] and direct[2] > direct[3]
    np.testing.assert_allclose(advantages(direct, np.zeros(2), 2, "mean"),
                               [direct[0] - direct[1], direct[1] - direct[0], direct[2] - direct[3], direct[3] - direct[2]])


@pytest.mark.parametrize("baseline", ["greedy", "mean"])
def test_one_update_raises_the_probability_of_the_higher_reward_sample(baseline):
    torch.manual_seed(0)
    args = UpDown.Args(embed_dim=16, hidden_dim=16, att_hidden_dim=8, dropout=0.0, feature_dropout=0.0)
    model = UpDown(args, len(WORDS), {"regions": 4})
    inputs = {"regions": Padded(torch.randn(1, 2, 4), torch.ones(1, 2, dtype=torch.bool))}
    references = [["a b", "a b b"]]
    cider = CiderD(corpus=references + [["c c", "d d"], ["b d", "c"]])  # document frequencies need other images
    seqs = torch.tensor([[4, 5, 0], [6, 7, 0]])  # "a b" (matches the references) and "c d" (does not)
    scores = cider.score(["a b", "c d"], references * 2)
    greedy = cider.score(["a"], references)  # a greedy caption between the two
    assert scores[0] > greedy[0] > scores[1]

    def token_logprobs() -> torch.Tensor:
        logprobs = model(inputs, seqs[:, :2], seq_per_img=2)  # [2, 3, V]: a word, a word, <eos>
        return logprobs.gather(2, torch.cat([seqs[:, :2], torch.full((2, 1), 2)], 1).unsqueeze(2)).squeeze(2)

    before = token_logprobs().sum(1).detach()
    rewards = torch.from_numpy(advantages(scores, greedy, 2, baseline)).float()
    loss = self_critical_loss(token_logprobs(), seqs, rewards)
    torch.optim.SGD(model.parameters(), lr=0.1).zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
    after = token_logprobs().sum(1).detach()
    assert after[0] > before[0] and after[1] < before[1], (before, after)


def _updown(dropout: float = 0.0, seed: int = 0) -> UpDown:
    torch.manual_seed(seed)
    args = UpDown.Args(embed_dim=16, hidden_dim=16, att_hidden_dim=8, dropout=dropout, feature_dropout=dropout)
    return UpDown(args, len(WORDS), {"regions": 4})


def test_beam_candidates_are_the_beams_with_their_teacher_forced_token_logprobs():
    model = _updown(dropout=0.3)
    gen = torch.Generator().manual_seed(1)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1, 2:] = False  # padded regions are read as the beam search reads them
    inputs = {"regions": Padded(torch.randn(3, 4, 4, generator=gen), mask)}
    beams, length = 4, 5
    model.train()
    seqs, token_logprobs = beam_candidates(model, inputs, length, beams)
    assert model.training  # left in the mode it was in
    searched, scores = beam_search(model.eval(), inputs, beams, length, all_beams=True)
    assert torch.equal(seqs, searched.reshape(-1, length))  # rows image-major, best beam first
    assert token_logprobs.shape == (3 * beams, length) and token_logprobs.requires_grad
    assert (token_logprobs[~token_mask(seqs)] == 0).all()  # nothing after each caption's <eos>
    _, eval_logprobs = beam_candidates(model, inputs, length, beams)  # in eval mode: the search's own scores
    torch.testing.assert_close(eval_logprobs.sum(1), scores.reshape(-1), rtol=0, atol=1e-5)
    for row, seq in enumerate(seqs.tolist()):  # each position: log p(word | prefix), then <eos>, from `step` directly
        words = [w for w in seq if w] + ([] if all(seq) else [2])
        encoded = model.encode({"regions": Padded(inputs["regions"].values[row // beams: row // beams + 1],
                                                      mask[row // beams: row // beams + 1])})
        state, previous = model.init_state(encoded, 1), torch.tensor([1])
        for t, word in enumerate(words):
            logprobs, state = model.step(previous, state, encoded)
            assert eval_logprobs[row, t].item() == pytest.approx(logprobs[0, word].item(), abs=1e-5)
            previous = torch.tensor([word])


def test_one_beam_update_raises_the_probability_of_the_higher_reward_beam():
    model = _updown()
    inputs = {"regions": Padded(torch.randn(1, 2, 4, generator=torch.Generator().manual_seed(0)),
                                torch.ones(1, 2, dtype=torch.bool))}
    seqs, _ = beam_search(model.eval(), inputs, 2, 3, all_beams=True)
    second = " ".join(WORDS[w] for w in seqs[0, 1].tolist() if w)
    references = [[second, second]]  # the second beam is the references' caption, the first is not
    cider = CiderD(corpus=references + [["c c", "d d"], ["b d", "c"]])

    def beam_logprobs() -> torch.Tensor:  # of the two captions found before the update
        tokens, mask = with_eos(seqs[0])
        logprobs = model.eval()(inputs, seqs[0], seq_per_img=2).gather(2, tokens.unsqueeze(2)).squeeze(2)
        return logprobs.masked_fill(~mask, 0.0)[:, :3].sum(1).detach()

    before = beam_logprobs()
    loss, scores, _ = self_critical_batch(model, inputs, references, cider, WORDS, 2, 3, baseline="mean",
                                          candidates="beam")
    assert scores[1] > scores[0]
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
    after = beam_logprobs()
    assert after[1] > before[1] and after[0] < before[0], (before, after)


def _config(**systems) -> Config:
    base = {"model": "updown", "vocabulary": "min5"}
    return from_data({"vocabularies": {"min5": {}}, "aoanet": {"systems": {"base": base, **systems}}})


def test_scst_config_must_continue_a_declared_cross_entropy_system():
    cfg = _config(base_scst={"objective": "scst", "init": "base", "train": {"schedule": "plateau"}})
    assert set(cfg.systems()) == {"base", "base_scst"} and cfg.model_of("base_scst") == cfg.systems()["base"]
    with pytest.raises(InputError, match="'aoanet.systems.x.init' is 'bse', not a cross-entropy system"):
        _config(x={"objective": "scst", "init": "bse"})
    with pytest.raises(InputError, match="an scst system needs `init`"):
        _config(x={"objective": "scst"})
    scst = lambda **values: {"objective": "scst", "init": "base", "train": {"scst": values}}  # noqa: E731
    with pytest.raises(InputError, match="'aoanet.systems.x.train.scst': samples must be at least 1, not 0"):
        _config(x=scst(samples=0))
    with pytest.raises(InputError, match="'aoanet.systems.x.train.scst': baseline: mean needs samples of at least 2"):
        _config(x=scst(baseline="mean", samples=1))
    with pytest.raises(InputError, match="candidates must be sample or beam, not 'beams'"):
        _config(x=scst(candidates="beams"))
    with pytest.raises(InputError, match="baseline must be greedy or mean"):
        _config(x=scst(baseline="average"))


@pytest.mark.slow
@pytest.mark.parametrize("candidates,baseline", [("sample", "greedy"), ("beam", "mean")])
def test_model_learns_a_tiny_task_from_cider_rewards_alone(candidates, baseline):
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

    def greedy_scores_now():
        seqs, _ = greedy_decode(model.eval(), inputs, 4)
        return cider.score([" ".join(WORDS[i] for i in s if i) for s in seqs.tolist()], references)

    first = greedy_scores_now().mean()
    for _ in range(150):
        loss, sample_scores, greedy_scores = self_critical_batch(model, inputs, references, cider, WORDS, 8, 4,
                                                                 generator, baseline=baseline, candidates=candidates)
        assert sample_scores.shape == (16,)
        assert greedy_scores.shape == (2,) if baseline == "greedy" else greedy_scores is None
        opt.zero_grad()
        loss.backward()
        opt.step()
    final = greedy_scores_now()
    assert first < 1.0 and final.min() > 3.0, (first, final)


@pytest.mark.parametrize("candidates", ["sample", "beam"])
def test_the_mean_baseline_decodes_no_greedy_caption_and_keeps_the_candidates_rewards(monkeypatch, candidates):
    """Under `scst_baseline: mean` no greedy caption is decoded (nothing reads it); the candidates, their rewards and
    the loss are those of a batch that decoded and scored the greedy captions too: greedy decoding draws no random
    numbers and the reward's document frequencies come from the corpus, not from the call."""
    references = [["a b", "a b b"], ["c d", "c d d"]]
    cider = CiderD(corpus=references)
    inputs = {"regions": Padded(torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1)),
                                torch.ones(2, 3, dtype=torch.bool))}

    def run(**kwargs):
        model = _updown(dropout=0.3)  # seeds torch, whose stream the candidates' dropout then draws from
        generator = torch.Generator().manual_seed(0)
        loss, scores, greedy = self_critical_batch(model, inputs, references, cider, WORDS, 3, 4, generator,
                                                   candidates=candidates, **kwargs)
        loss.backward()
        return loss.detach(), scores, greedy, [p.grad.clone() for p in model.parameters()]

    with_greedy = run(baseline="greedy")
    mean_loss, mean_scores, mean_greedy, mean_grads = run(baseline="mean")
    assert mean_greedy is None and with_greedy[2].shape == (2,)
    np.testing.assert_array_equal(mean_scores, with_greedy[1])  # the same candidates and the same rewards
    monkeypatch.setattr(scst, "greedy_decode", lambda *a, **k: pytest.fail("greedy decoded under the mean baseline"))
    again = run(baseline="mean")
    assert torch.equal(again[0], mean_loss) and all(torch.equal(a, b) for a, b in zip(again[3], mean_grads))


def test_validation_decodes_with_the_systems_val_beam(monkeypatch):
    """`train.val_beam` reaches the val split's decoding (1, the default, is greedy: captioning.decode_split), and
    the validation value is the CIDEr-D of what that decoding gave."""
    from types import SimpleNamespace

    from crossmodal.tasks import captioning

    beams = []

    def decoded(model, inputs, words, beam_size, max_length, batch_size):
        beams.append(beam_size)
        return {1: "a b c", 2: "a c"}

    monkeypatch.setattr(captioning, "decode_split", decoded)
    monkeypatch.setattr(captioning, "cider_only", lambda predictions, refs: (predictions, refs))
    for val_beam in (1, 3):
        task = captioning.Captioning.__new__(captioning.Captioning)
        task.cfg = SimpleNamespace(evaluation=SimpleNamespace(max_length=16, batch_size=100))
        task.system = SimpleNamespace(train=SimpleNamespace(val_beam=val_beam))
        task.data = SimpleNamespace(inputs={"val": None}, refs={"val": {1: ["a b"], 2: ["a c"]}})
        task.words = WORDS
        assert task.validate(None) == ({1: "a b c", 2: "a c"}, {1: ["a b"], 2: ["a c"]})
    assert beams == [1, 3]
