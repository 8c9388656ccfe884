"""Decoding tests on tiny hand-built models: greedy, sampling, and batched beam search against brute force
and a plain Python beam search."""
from __future__ import annotations

import functools
import itertools
import math
from collections import namedtuple
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from crossmodal.data.inputs import Padded
from crossmodal.decoding.search import (
    BOS,
    EOS,
    PAD,
    StepModel,
    beam_search,
    greedy_decode,
    map_tensors,
    sample_decode,
)
from crossmodal.models.base import Captioner
from crossmodal.models.ensemble import Ensemble
from crossmodal.modules.additive import masked_softmax

NEG = -1e4  # logit for <pad>/<bos>/<unk>: never chosen, keeps brute force small

History = namedtuple("History", ["words", "length"])


class PrefixModel:
    """Log-probabilities are an arbitrary function of (image vector, generated prefix).

    The model keeps the generated prefix in its state, so a decoder that reorders states wrongly feeds it
    the wrong prefix and the result differs from the references. The image vector is the masked mean of
    the regions, so padded regions (filled with garbage) must be ignored through the mask.
    """

    def __init__(self, fn, max_length):
        self.fn = fn  # fn(image_vec: Tensor[D], prefix: tuple[int, ...]) -> log-probs Tensor[V]
        self.max_length = max_length

    def encode(self, inputs):
        return {"image": _mean(*inputs["regions"])}

    def init_state(self, encoded, batch_size):
        words = torch.zeros(batch_size, self.max_length + 1, dtype=torch.long)
        return History(words, torch.zeros(batch_size, dtype=torch.long))

    def step(self, words, state, encoded):
        hist = state.words.clone()
        hist[torch.arange(len(words)), state.length] = words
        length = state.length + 1
        out = [
            self.fn(encoded["image"][r], tuple(hist[r, 1 : length[r]].tolist())) for r in range(len(words))
        ]
        return torch.stack(out), History(hist, length)

    def logprobs(self, image_vec, prefix):
        return self.fn(image_vec, tuple(prefix))


def _mean(values, mask):
    m = mask.unsqueeze(-1).float()
    return (values * m).sum(1) / m.sum(1)


class TwoInputPrefixModel(PrefixModel):
    """PrefixModel whose image vector is the masked mean of the regions plus that of a second input, a grid."""

    INPUTS = ("regions", "grid")

    def encode(self, inputs):
        return {"image": _mean(*inputs["regions"]) + _mean(*inputs["grid"])}


def random_table_fn(vocab, seed, sharpness=2.0, eos_bias=0.0):
    """A fixed random distribution per prefix (hashed), shifted by the image vector; eos_bias < 0 lengthens."""
    gen = torch.Generator().manual_seed(seed)
    cache = {}

    def fn(image_vec, prefix):
        if EOS in prefix or PAD in prefix:  # after the end: decoders must ignore whatever comes out
            return torch.log_softmax(torch.zeros(vocab), 0)
        if prefix not in cache:
            cache[prefix] = torch.randn(vocab, generator=gen) * sharpness
        logits = cache[prefix] + image_vec[:vocab]
        logits[[PAD, BOS]] = NEG
        logits[EOS] += eos_bias
        return torch.log_softmax(logits, 0)

    return fn


def explicit_fn(vocab, table, default_eos=0.9):
    """Distributions given per prefix as {word: prob}; unlisted prefixes end with prob `default_eos`."""

    def fn(image_vec, prefix):
        probs = table.get(prefix)
        if probs is None:
            probs = {EOS: default_eos, vocab - 1: 1 - default_eos}
        logits = torch.full((vocab,), NEG)
        for w, p in probs.items():
            logits[w] = math.log(p)
        return torch.log_softmax(logits, 0)

    return fn


def region_inputs(feats, mask):
    return {"regions": Padded(feats, mask)}


def one_image(dim=6, grid=False):
    """One image's regions (2, all zero); with `grid`, also a grid input of 3 cells, the last one padding."""
    inputs = region_inputs(torch.zeros(1, 2, dim), torch.ones(1, 2, dtype=torch.bool))
    if grid:
        cells = torch.randn(1, 3, dim, generator=torch.Generator().manual_seed(0)) * 0.3
        cells[0, 2] = 50.0
        inputs["grid"] = Padded(cells, torch.tensor([[True, True, False]]))
    return inputs


def brute_force(model, image_vec, vocab, max_length):
    """Best (score, words) over every sequence of <= max_length words (with <eos> unless cut)."""
    words = list(range(EOS + 1, vocab))
    best = (-math.inf, None)
    for n in range(max_length + 1):
        for seq in itertools.product(words, repeat=n):
            score = sum(float(model.logprobs(image_vec, seq[:i])[seq[i]]) for i in range(n))
            if n < max_length:
                score += float(model.logprobs(image_vec, seq)[EOS])
            best = max(best, (score, list(seq)))
    return best


def reference_beam(model, image_vec, vocab, beam, max_length, every=False):
    """Obviously-correct per-hypothesis beam search: (score, words, finished) lists, sorted each step; the best
    (score, words), or with `every` all final (score, words), best first."""
    hyps = [(0.0, [], False)]
    for _ in range(max_length):
        cands = []
        for score, words, done in hyps:
            if done:
                cands.append((score, words, True))
                continue
            lp = model.logprobs(image_vec, words)
            for w in range(EOS, vocab):
                if w == EOS:
                    cands.append((score + float(lp[w]), words, True))
                else:
                    cands.append((score + float(lp[w]), words + [w], False))
        hyps = sorted(cands, key=lambda h: -h[0])[:beam]
    if every:
        return [(score, words) for score, words, _ in hyps]
    score, words, _ = hyps[0]
    return score, words


def caption(row):
    row = row.tolist()
    return row[: row.index(0)] if 0 in row else row


class TinyLSTM(nn.Module):
    """Randomly initialised attention LSTM captioner (state is a nested tuple, encoded a dict).

    It reads the inputs named in `input_dims` (by default "regions" of size `dim`), each through its own
    projection; the LSTM state queries each by dot-product attention over its real elements and the contexts are
    summed into the next LSTM input. It declares no INPUTS: a test double of the bare `StepModel` protocol.
    """

    def __init__(self, vocab=7, dim=8, seed=0, input_dims=None):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(vocab, dim)
        self.proj = nn.ModuleDict({name: nn.Linear(d, dim) for name, d in (input_dims or {"regions": dim}).items()})
        self.cell = nn.LSTMCell(2 * dim, dim)
        self.att = nn.Linear(dim, dim)
        self.out = nn.Linear(2 * dim, vocab)
        with torch.no_grad():
            self.out.weight.mul_(6.0)

    def encode(self, inputs):
        embedded = {name: (torch.tanh(proj(inputs[name].values)), inputs[name].mask)
                    for name, proj in self.proj.items()}
        return {"inputs": embedded, "mean": _mean(*next(iter(embedded.values())))}

    def init_state(self, encoded, batch_size):
        h = encoded["mean"].new_zeros(batch_size, self.cell.hidden_size)
        return ((h, h.clone()), [encoded["mean"].clone()])

    def step(self, words, state, encoded):
        (h, c), (ctx,) = state
        h, c = self.cell(torch.cat([self.embed(words), ctx], -1), (h, c))
        query = self.att(h)
        ctx = sum(torch.einsum("bn,bnd->bd", masked_softmax(torch.einsum("bd,bnd->bn", query, values), mask), values)
                  for values, mask in encoded["inputs"].values())
        return torch.log_softmax(self.out(torch.cat([h, ctx], -1)), -1), ((h, c), [ctx])


def padded_batch(n_images=4, dim=8, seed=1):
    """Images with different region counts, padding filled with large garbage."""
    gen = torch.Generator().manual_seed(seed)
    counts = [3, 1, 5, 2][:n_images]
    feats = torch.randn(n_images, max(counts), dim, generator=gen)
    mask = torch.zeros(n_images, max(counts), dtype=torch.bool)
    for i, n in enumerate(counts):
        mask[i, :n] = True
    feats[~mask] = 50.0
    return feats, mask, counts


# --------------------------------------------------------------------------------------------------- greedy


def test_models_satisfy_protocol():
    assert isinstance(TinyLSTM(), StepModel)
    assert isinstance(PrefixModel(random_table_fn(6, 0), 3), StepModel)


def test_greedy_stops_at_eos_and_sums_logprobs_including_eos():
    v = 6
    table = {(): {4: 0.5, 5: 0.3, EOS: 0.2}, (4,): {5: 0.7, EOS: 0.3}, (4, 5): {EOS: 0.6, 4: 0.4}}
    model = PrefixModel(explicit_fn(v, table), 4)
    seqs, lp = greedy_decode(model, one_image(), max_length=4)
    assert seqs.tolist() == [[4, 5, 0, 0]]
    assert lp.item() == pytest.approx(math.log(0.5 * 0.7 * 0.6), abs=1e-5)


def test_greedy_cut_at_max_length_has_no_eos_cost():
    v = 6
    model = PrefixModel(lambda x, p: _always(v, 4, 0.8), 3)
    seqs, lp = greedy_decode(model, one_image(), max_length=3)
    assert seqs.tolist() == [[4, 4, 4]]
    assert lp.item() == pytest.approx(3 * math.log(0.8), abs=1e-5)


def _always(vocab, word, p):
    logits = torch.full((vocab,), NEG)
    logits[word] = math.log(p)
    logits[EOS] = math.log(1 - p)
    return torch.log_softmax(logits, 0)


# ---------------------------------------------------------------------------------------------- beam search


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_size_one_equals_greedy_on_lstm(seed):
    model = TinyLSTM(seed=seed)
    feats, mask, _ = padded_batch(dim=8, seed=seed)
    g_seqs, g_lp = greedy_decode(model, region_inputs(feats, mask), max_length=6)
    b_seqs, b_lp = beam_search(model, region_inputs(feats, mask), beam_size=1, max_length=6)
    assert torch.equal(g_seqs, b_seqs)
    assert torch.allclose(g_lp, b_lp, atol=1e-6)


def test_beam_size_one_equals_greedy_on_table_model_with_early_eos():
    model = PrefixModel(random_table_fn(6, seed=3, sharpness=3.0), 4)
    feats, mask, _ = padded_batch(dim=6, seed=3)
    g_seqs, g_lp = greedy_decode(model, region_inputs(feats, mask), max_length=4)
    b_seqs, b_lp = beam_search(model, region_inputs(feats, mask), beam_size=1, max_length=4)
    assert torch.equal(g_seqs, b_seqs)
    assert torch.allclose(g_lp, b_lp, atol=1e-6)


@functools.lru_cache(maxsize=None)
def _suboptimal_greedy_setup(two_inputs=False):
    """Search seeds for a random table model where greedy, beam-2 and the exact optimum all differ."""
    v, length = 6, 4
    inputs = one_image(v, grid=two_inputs)
    for seed in range(200):
        model = (TwoInputPrefixModel if two_inputs else PrefixModel)(random_table_fn(v, seed, sharpness=1.5), length)
        image = model.encode(inputs)["image"][0]
        best = brute_force(model, image, v, length)
        greedy = caption(greedy_decode(model, inputs, length)[0][0])
        narrow = reference_beam(model, image, v, 2, length)
        if len(best[1]) >= 2 and greedy != best[1] and narrow[1] != best[1]:
            return model, inputs, image, v, length, best
    raise AssertionError("no seed gives a suboptimal greedy and beam-2")


@pytest.mark.parametrize("two_inputs", [False, True], ids=["regions", "regions+grid"])
def test_wide_beam_finds_brute_force_optimum_where_greedy_fails(two_inputs):
    model, inputs, image, v, length, best = _suboptimal_greedy_setup(two_inputs)
    # (v - 2) ** length exceeds the number of real candidates at every step: nothing is ever pruned
    seqs, score = beam_search(model, inputs, beam_size=(v - 2) ** length, max_length=length)
    assert caption(seqs[0]) == best[1]
    assert score.item() == pytest.approx(best[0], abs=1e-4)


@pytest.mark.parametrize("two_inputs", [False, True], ids=["regions", "regions+grid"])
@pytest.mark.parametrize("beam", [2, 3, 5])
def test_narrow_beam_matches_plain_python_beam_search(beam, two_inputs):
    model, inputs, image, v, length, best = _suboptimal_greedy_setup(two_inputs)
    ref_score, ref_words = reference_beam(model, image, v, beam, length)
    seqs, score = beam_search(model, inputs, beam_size=beam, max_length=length)
    assert caption(seqs[0]) == ref_words
    assert score.item() == pytest.approx(ref_score, abs=1e-4)
    if beam == 2:
        assert ref_words != best[1]  # the narrow beam really misses the optimum here


def test_many_seeds_match_reference_beam():
    # long-lived beams that swap parents often: a wrong reorder of state or parent index shows up here. With
    # `all_beams` every final hypothesis comes back best first (SCST's beam candidates, tasks/objectives/scst.py).
    v, length = 7, 5
    inputs = one_image(v)
    for seed in range(12):
        model = PrefixModel(random_table_fn(v, 100 + seed, sharpness=1.0, eos_bias=-1.5), length)
        image = model.encode(inputs)["image"][0]
        for beam in (2, 3, 4):
            ref_score, ref_words = reference_beam(model, image, v, beam, length)
            seqs, score = beam_search(model, inputs, beam_size=beam, max_length=length)
            assert caption(seqs[0]) == ref_words, (seed, beam)
            assert score.item() == pytest.approx(ref_score, abs=1e-4)
            expected = reference_beam(model, image, v, beam, length, every=True)
            every, scores = beam_search(model, inputs, beam_size=beam, max_length=length, all_beams=True)
            assert every.shape == (1, beam, length) and scores.shape == (1, beam)
            assert [caption(row) for row in every[0]] == [words for _, words in expected], (seed, beam)
            assert scores[0].tolist() == pytest.approx([s for s, _ in expected], abs=1e-4)
            assert torch.equal(every[0, 0], seqs[0]) and scores[0, 0] == score[0]


def test_eos_at_first_step_gives_empty_caption_with_its_score():
    v = 6
    model = PrefixModel(explicit_fn(v, {(): {EOS: 0.7, 4: 0.2, 5: 0.1}}), 3)
    for decode in (lambda inputs: greedy_decode(model, inputs, 3), lambda inputs: beam_search(model, inputs, 3, 3)):
        seqs, score = decode(one_image())
        assert seqs.tolist() == [[0, 0, 0]]
        assert score.item() == pytest.approx(math.log(0.7), abs=1e-5)


def test_early_finished_hypothesis_wins_when_its_score_is_higher():
    # greedy takes 4 (0.6) but every continuation costs more than stopping at once (0.4).
    v = 6
    table = {(): {4: 0.6, EOS: 0.4}, (4,): {5: 0.5, EOS: 0.5}, (4, 5): {EOS: 0.5, 4: 0.5}}
    model = PrefixModel(explicit_fn(v, table, default_eos=0.5), 4)
    g_seqs, _ = greedy_decode(model, one_image(), max_length=4)
    assert caption(g_seqs[0]) != []
    seqs, score = beam_search(model, one_image(), beam_size=2, max_length=4)
    assert seqs.tolist() == [[0, 0, 0, 0]]
    assert score.item() == pytest.approx(math.log(0.4), abs=1e-5)


def test_early_finished_hypothesis_loses_when_its_score_is_lower():
    v = 6
    table = {(): {4: 0.7, EOS: 0.3}, (4,): {EOS: 0.9, 5: 0.1}}
    model = PrefixModel(explicit_fn(v, table), 4)
    seqs, score = beam_search(model, one_image(), beam_size=2, max_length=4)
    assert seqs.tolist() == [[4, 0, 0, 0]]
    assert score.item() == pytest.approx(math.log(0.7 * 0.9), abs=1e-5)


def test_short_finished_beats_long_finished_found_later():
    # "5" finishes at step 1 with 0.45*0.9; the other path "4 4 4" (cut) is at most 0.55*0.6^2.
    v = 6
    table = {(): {4: 0.55, 5: 0.45}, (5,): {EOS: 0.9, 4: 0.1}, (4,): {4: 0.6, EOS: 0.4}, (4, 4): {4: 0.6, EOS: 0.4}}
    model = PrefixModel(explicit_fn(v, table), 3)
    seqs, score = beam_search(model, one_image(), beam_size=2, max_length=3)
    assert seqs.tolist() == [[5, 0, 0]]
    assert score.item() == pytest.approx(math.log(0.45 * 0.9), abs=1e-5)


def test_max_length_cut_without_eos():
    v = 6
    model = PrefixModel(lambda x, p: _always(v, 5, 0.9), 3)
    seqs, score = beam_search(model, one_image(), beam_size=3, max_length=3)
    assert seqs.tolist() == [[5, 5, 5]]
    assert score.item() == pytest.approx(3 * math.log(0.9), abs=1e-5)


def test_length_normalization_prefers_longer_caption():
    # raw: empty (0.5) beats "4 4 4" (0.5 * 0.95^2, cut); per token (eos counts as one) the long one wins.
    v = 6
    table = {(): {EOS: 0.5, 4: 0.5}, (4,): {4: 0.95, EOS: 0.05}, (4, 4): {4: 0.95, EOS: 0.05}}
    model = PrefixModel(explicit_fn(v, table), 3)
    raw_seqs, raw = beam_search(model, one_image(), beam_size=3, max_length=3)
    norm_seqs, norm = beam_search(model, one_image(), beam_size=3, max_length=3, length_normalization=True)
    assert raw_seqs.tolist() == [[0, 0, 0]]
    assert norm_seqs.tolist() == [[4, 4, 4]]
    assert norm.item() == pytest.approx(math.log(0.5 * 0.95 * 0.95) / 3, abs=1e-5)


@pytest.mark.parametrize("beam", [1, 3])
def test_batch_equals_each_image_alone_lstm(beam):
    model = TinyLSTM(seed=4)
    feats, mask, counts = padded_batch(dim=8, seed=5)
    seqs, scores = beam_search(model, region_inputs(feats, mask), beam_size=beam, max_length=6)
    for i, n in enumerate(counts):
        image = region_inputs(feats[i : i + 1, :n], mask[i : i + 1, :n])
        alone = beam_search(model, image, beam_size=beam, max_length=6)
        assert torch.equal(seqs[i], alone[0][0])
        assert scores[i].item() == pytest.approx(alone[1][0].item(), abs=1e-5)
    assert len({tuple(s) for s in seqs.tolist()}) > 1  # images really decode differently


def test_batch_equals_each_image_alone_table_model():
    v, length = 6, 4
    model = PrefixModel(random_table_fn(v, seed=7, sharpness=1.0), length)
    feats, mask, counts = padded_batch(dim=v, seed=8)
    feats = feats * 2
    feats[~mask] = 50.0
    seqs, scores = beam_search(model, region_inputs(feats, mask), beam_size=3, max_length=length)
    for i, n in enumerate(counts):
        alone = region_inputs(feats[i : i + 1, :n], mask[i : i + 1, :n])
        one, s = beam_search(model, alone, beam_size=3, max_length=length)
        image = model.encode(alone)["image"][0]
        assert torch.equal(seqs[i], one[0])
        assert caption(seqs[i]) == reference_beam(model, image, v, 3, length)[1]
        assert scores[i].item() == pytest.approx(s.item(), abs=1e-5)


def test_early_stop_when_all_beams_finished():
    calls = []
    v = 6
    inner = explicit_fn(v, {(): {EOS: 0.6, 4: 0.4}}, default_eos=0.99)

    def fn(x, p):
        calls.append(p)
        return inner(x, p)

    model = PrefixModel(fn, 10)
    beam_search(model, one_image(), beam_size=2, max_length=10)
    assert max(len(p) for p in calls) == 1  # only steps 0 and 1 ran


# ----------------------------------------------------------------------------------------------- sampling


def test_sample_decode_shape_reproducibility_and_logprobs():
    v, length, n = 6, 4, 5
    model = PrefixModel(random_table_fn(v, seed=9, sharpness=1.0), length)
    feats, mask, _ = padded_batch(n_images=2, dim=v, seed=9)
    a = sample_decode(model, region_inputs(feats, mask), length, n, generator=torch.Generator().manual_seed(3))
    b = sample_decode(model, region_inputs(feats, mask), length, n, generator=torch.Generator().manual_seed(3))
    c = sample_decode(model, region_inputs(feats, mask), length, n, generator=torch.Generator().manual_seed(4))
    assert a[0].shape == (2 * n, length) and a[1].shape == (2 * n, length)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])
    images = model.encode(region_inputs(feats, mask))["image"]
    for r in range(2 * n):
        words = caption(a[0][r])
        expect = [float(model.logprobs(images[r // n], words[:i])[w]) for i, w in enumerate(words)]
        if len(words) < length:
            expect.append(float(model.logprobs(images[r // n], words)[EOS]))
        expect += [0.0] * (length - len(expect))
        assert a[1][r].tolist() == pytest.approx(expect, abs=1e-5)


def test_sample_rows_are_contiguous_per_image():
    # image 0 (vector[4] large) can only say 4, image 1 only 5.
    v = 6

    def fn(x, p):
        logits = torch.full((v,), NEG)
        logits[4 if x[4] > x[5] else 5] = 0.0
        logits[EOS] = 0.0
        return torch.log_softmax(logits, 0)

    model = PrefixModel(fn, 3)
    feats = torch.zeros(2, 1, v)
    feats[0, 0, 4] = 1.0
    feats[1, 0, 5] = 1.0
    inputs = region_inputs(feats, torch.ones(2, 1, dtype=torch.bool))
    seqs, _ = sample_decode(model, inputs, 3, 4, torch.Generator().manual_seed(0))
    assert set(seqs[:4].flatten().tolist()) <= {0, 4} and set(seqs[4:].flatten().tolist()) <= {0, 5}
    assert seqs[:4].max() == 4 and seqs[4:].max() == 5


def test_sample_frequencies_follow_model_and_low_temperature_is_greedy():
    v = 6
    probs = {4: 0.5, 5: 0.3, EOS: 0.2}
    model = PrefixModel(explicit_fn(v, {(): probs}), 1)
    seqs, lps = sample_decode(model, one_image(), 1, 4000, torch.Generator().manual_seed(0))
    first = seqs[:, 0]
    for w, p in probs.items():
        assert (first == (0 if w == EOS else w)).float().mean().item() == pytest.approx(p, abs=0.03)
    assert torch.allclose(lps[first == 4, 0], torch.tensor(math.log(0.5)), atol=1e-5)

    table_model = PrefixModel(random_table_fn(v, seed=11, sharpness=1.0), 4)
    feats, mask, _ = padded_batch(dim=v, seed=11)
    g_seqs, _ = greedy_decode(table_model, region_inputs(feats, mask), 4)
    s_seqs, _ = sample_decode(table_model, region_inputs(feats, mask), 4, 3, torch.Generator().manual_seed(0),
                              temperature=1e-3)
    assert torch.equal(s_seqs, g_seqs.repeat_interleave(3, dim=0))


def test_sample_logprobs_carry_gradients():
    model = TinyLSTM(seed=2)
    feats, mask, _ = padded_batch(dim=8, seed=2)
    _, lps = sample_decode(model, region_inputs(feats, mask), 5, 2, torch.Generator().manual_seed(0))
    lps.sum().backward()
    assert model.out.weight.grad is not None and model.out.weight.grad.abs().sum() > 0


# ------------------------------------------------------------------------------------------------- helpers


def test_map_tensors_keeps_structure():
    nt = History(torch.arange(3), torch.tensor(5))
    obj = {"a": (torch.arange(3), [torch.arange(3) * 2, None]), "b": nt, "c": 7}
    out = map_tensors(lambda t: t.flip(0), obj)
    assert out["a"][0].tolist() == [2, 1, 0] and out["a"][1][0].tolist() == [4, 2, 0]
    assert out["a"][1][1] is None and out["c"] == 7
    assert isinstance(out["b"], History) and out["b"].words.tolist() == [2, 1, 0] and out["b"].length.item() == 5


def test_bad_arguments_raise():
    model = TinyLSTM()
    feats, mask, _ = padded_batch(dim=8)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, region_inputs(feats, mask), beam_size=0, max_length=3)
    with pytest.raises(ValueError, match="mask"):
        greedy_decode(model, region_inputs(feats, mask[:, :1]), 3)
    with pytest.raises(ValueError, match="max_length"):
        sample_decode(model, region_inputs(feats, mask), 0, 2)


def test_pad_and_bos_are_never_emitted():
    # the model prefers <pad> then <bos>; decoders must skip both and report the model's own logprob.
    def fn(x, p):
        return torch.log(torch.tensor([0.4, 0.3, 0.001, 0.05, 0.2, 0.049]))

    model = PrefixModel(fn, 3)
    seqs, lp = greedy_decode(model, one_image(), 3)
    assert seqs.tolist() == [[4, 4, 4]] and lp.item() == pytest.approx(3 * math.log(0.2), abs=1e-5)
    b_seqs, _ = beam_search(model, one_image(), beam_size=4, max_length=3)
    assert caption(b_seqs[0]) == [4, 4, 4]
    s_seqs, _ = sample_decode(model, one_image(), 3, 200, torch.Generator().manual_seed(0))
    assert not (s_seqs == BOS).any()
    assert all(caption(r) + [0] * (3 - len(caption(r))) == r.tolist() for r in s_seqs)  # no 0 inside a caption


# ------------------------------------------------------------------------------------------ two named inputs


@dataclass(frozen=True)
class TwoInputArgs:
    dim: int = 8
    seed: int = 0


class TwoInputCaptioner(TinyLSTM, Captioner):
    """A test-only Captioner over two named inputs: TinyLSTM attending over "regions" and over "grid", each with
    its own projection, length and mask. It reads the inputs named in INPUTS, so a subclass may consume fewer."""

    Args = TwoInputArgs
    INPUTS = ("regions", "grid")

    def __init__(self, args, vocab_size, input_dims):
        super().__init__(vocab_size, args.dim, args.seed, {name: input_dims[name] for name in self.INPUTS})


def two_input_batch(seed=0, grid_dim=5):
    """Regions (dim 8) and a grid (dim `grid_dim`) with their own lengths per image, padding filled with garbage."""
    feats, mask, region_counts = padded_batch(dim=8, seed=seed)
    gen = torch.Generator().manual_seed(seed + 100)
    grid_counts = [4, 2, 1, 3]
    cells = torch.randn(4, 4, grid_dim, generator=gen)
    grid_mask = torch.arange(4)[None] < torch.tensor(grid_counts)[:, None]
    cells[~grid_mask] = -50.0
    return {"regions": Padded(feats, mask), "grid": Padded(cells, grid_mask)}, region_counts, grid_counts


def _two_input_model(seed=0):
    return TwoInputCaptioner(TwoInputArgs(seed=seed), 9, {"regions": 8, "grid": 5}).eval()


def test_two_input_model_decodes_through_the_same_code():
    model = _two_input_model()
    inputs, region_counts, grid_counts = two_input_batch()
    g_seqs, g_lp = greedy_decode(model, inputs, max_length=6)
    b1_seqs, b1_lp = beam_search(model, inputs, beam_size=1, max_length=6)
    assert torch.equal(g_seqs, b1_seqs) and torch.allclose(g_lp, b1_lp, atol=1e-6)
    seqs, scores = beam_search(model, inputs, beam_size=3, max_length=6)
    assert (scores >= g_lp - 1e-5).all()  # a wider beam never scores below greedy here
    for i, (n, m) in enumerate(zip(region_counts, grid_counts)):  # each image alone, each input cut to its length
        alone = {"regions": Padded(inputs["regions"].values[i:i + 1, :n], inputs["regions"].mask[i:i + 1, :n]),
                 "grid": Padded(inputs["grid"].values[i:i + 1, :m], inputs["grid"].mask[i:i + 1, :m])}
        one, one_score = beam_search(model, alone, beam_size=3, max_length=6)
        assert torch.equal(seqs[i], one[0]) and scores[i].item() == pytest.approx(one_score.item(), abs=1e-5)
    with torch.no_grad():  # the beam's scores are the teacher-forced log-probabilities of its captions
        logprobs = model(inputs, seqs)
    for i in range(4):
        words = caption(seqs[i])
        rescored = sum(logprobs[i, t, w] for t, w in enumerate(words))
        rescored = rescored + (logprobs[i, len(words), EOS] if len(words) < 6 else 0.0)
        assert scores[i].item() == pytest.approx(float(rescored), abs=1e-4)
    samples, _ = sample_decode(model, inputs, 6, 2, torch.Generator().manual_seed(0))
    assert samples.shape == (8, 6)


def test_two_input_model_reads_both_inputs_and_ignores_their_padding():
    model = _two_input_model(seed=1)
    inputs, _, _ = two_input_batch(seed=1)
    targets = torch.tensor([[4, 5, 6], [5, 4, 0], [6, 7, 8], [4, 0, 0]])
    with torch.no_grad():
        out = model(inputs, targets)
        for name in ("regions", "grid"):
            values, mask = inputs[name]
            garbage = values.clone()
            garbage[~mask] = 1e3
            torch.testing.assert_close(model({**inputs, name: Padded(garbage, mask)}, targets), out)
            changed = values.clone()
            changed[mask] += 1.0
            assert not torch.allclose(model({**inputs, name: Padded(changed, mask)}, targets), out)


def test_missing_or_inconsistent_inputs_are_refused_by_decoders_and_forward():
    model = _two_input_model()
    inputs, _, _ = two_input_batch()
    only_regions = {"regions": inputs["regions"]}
    for call in (lambda x: greedy_decode(model, x, 4), lambda x: beam_search(model, x, 2, 4),
                 lambda x: sample_decode(model, x, 4, 2), lambda x: model(x, torch.tensor([[4, 5]] * 4))):
        with pytest.raises(ValueError, match="missing input.*'grid'"):
            call(only_regions)
        with pytest.raises(ValueError, match="batch size"):
            call({**inputs, "grid": Padded(inputs["grid"].values[:2], inputs["grid"].mask[:2])})
    # a model without INPUTS (a test double) reads what it likes; only the shapes are checked
    assert greedy_decode(TinyLSTM(), inputs, 4)[0].shape == (4, 4)


def test_an_ensemble_consumes_the_union_of_its_members_inputs():
    class RegionsOnly(TwoInputCaptioner):
        INPUTS = ("regions",)

    one_input = RegionsOnly(TwoInputArgs(), 9, {"regions": 8})
    two_inputs = _two_input_model()
    ensemble = Ensemble([one_input, two_inputs]).eval()
    assert ensemble.INPUTS == ("regions", "grid") and Ensemble([two_inputs, one_input]).INPUTS == ("regions", "grid")
    inputs, _, _ = two_input_batch()
    seqs, scores = beam_search(ensemble, inputs, beam_size=3, max_length=6)
    assert seqs.shape == (4, 6)
    with pytest.raises(ValueError, match="'grid'"):
        beam_search(ensemble, {"regions": inputs["regions"]}, beam_size=3, max_length=6)
