"""The Low-Rank HOCA video captioner (models/hoca.py): teacher forcing against the paper's steps by hand (Bi-LSTM per
clip, eq. 1, the attention module, dropout around the decoder LSTM), decoding, padding masks in every modality, the
Table 1 variants through the registry, a tiny task that needs all three modalities, and gradients. float64, tiny."""
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from crossmodal.data.captions import BOS, EOS
from crossmodal.data.inputs import Padded
from crossmodal.decoding.search import beam_search, greedy_decode
from crossmodal.io import InputError
from crossmodal.models.hoca import MODALITIES, HOCAArgs, LowRankHOCACaptioner
from crossmodal.models.registry import build_model
from crossmodal.modules.hoca import HOCA, TABLE1_VARIANTS, LowRankHOCA, UnaryAttention
from crossmodal.tasks.objectives.xe import sequence_loss
from captioning_checks import assert_beam_one_is_greedy, fit

DIMS = {"frames": 5, "motion": 4, "audio": 3}
STEPS = 6
VOCAB = 9
LENGTHS = {"frames": [6, 3, 1], "motion": [5, 5, 2], "audio": [4, 1, 3]}  # a batch of three clips
TARGETS = torch.tensor([[4, 5, 6], [7, 0, 0], [8, 4, 0]])


pytestmark = pytest.mark.usefixtures("float64")


def _args(**overrides):
    args = dict(embed_dim=6, hidden_dim=5, att_dim=4, steps=dict.fromkeys(MODALITIES, STEPS), dropout=0.0)
    return {**args, **overrides}


def _model(seed=0, **overrides):
    torch.manual_seed(seed)
    return LowRankHOCACaptioner(HOCAArgs(**_args(**overrides)), VOCAB, DIMS)


def _inputs(lengths=LENGTHS, seed=1, garbage=1e3):
    """Random features; the steps past each clip's length hold `garbage` and are masked out."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, dim in DIMS.items():
        n = max(lengths[name])
        mask = torch.arange(n)[None] < torch.tensor(lengths[name])[:, None]
        values = torch.randn(len(lengths[name]), n, dim, generator=gen)
        out[name] = Padded(torch.where(mask[..., None], values, torch.full_like(values, garbage)), mask)
    return out


def test_teacher_forcing_is_the_bi_lstms_and_eq_1_run_step_by_step():
    """forward (base.Captioner, 2 captions per clip) against each clip's Bi-LSTM over its real steps alone, the
    decoder LSTM on the word embedding (eq. 1) from zeros, and the attention module's logits (eqs. 2-23)."""
    model = _model().eval()
    inputs = _inputs()
    targets = torch.tensor([[4, 5, 6], [6, 5, 0], [7, 0, 0], [8, 8, 4], [8, 4, 0], [5, 0, 0]])
    with torch.no_grad():
        out = model(inputs, targets, seq_per_img=2)
        for row in range(6):
            clip = row // 2
            features, masks = [], []
            for name in MODALITIES:  # §3.1: the clip alone, no padding at all
                real = inputs[name].values[clip:clip + 1, :LENGTHS[name][clip]]
                features.append(model.encoders[name](real)[0])
                masks.append(torch.ones(1, real.size(1), dtype=torch.bool))
                assert features[-1].shape == (1, real.size(1), 2 * 5)  # both directions
            h, c = torch.zeros(1, 5), torch.zeros(1, 5)
            words = [BOS, *targets[row].tolist()]
            for t, word in enumerate(words):
                h, c = model.decoder(model.word_embed(torch.tensor([word])), (h, c))  # eq. 1
                logits, _, _ = model.attention(h, features, masks)
                torch.testing.assert_close(out[row, t], torch.log_softmax(logits, -1)[0])


def test_dropout_is_on_the_decoder_lstms_input_and_output_only():
    """§5.2: dropout on the word embedding entering the LSTM and on h_t leaving it (query and W_p^h h_t); the
    recurrent state keeps the undropped h_t."""
    model = _model(dropout=0.5).train()
    inputs = _inputs()
    encoded = model.encode(inputs)
    state = (torch.randn(3, 5), torch.randn(3, 5))
    words = torch.tensor([BOS, 4, 5])
    torch.manual_seed(7)
    logprobs, (h, c) = model.step(words, state, encoded)
    torch.manual_seed(7)
    h_ref, c_ref = model.decoder(F.dropout(model.word_embed(words), 0.5, True), state)
    logits, _, _ = model.attention(F.dropout(h_ref, 0.5, True), *encoded)
    torch.testing.assert_close(h, h_ref)
    torch.testing.assert_close(c, c_ref)
    torch.testing.assert_close(logprobs, torch.log_softmax(logits, -1))
    model.eval()
    assert not torch.allclose(model.step(words, state, encoded)[0], logprobs)  # the dropout did act


def test_beam_search_and_greedy_decode_it():
    model = _model(seed=3).eval()
    inputs = _inputs()
    with torch.no_grad():
        assert_beam_one_is_greedy(model, inputs)
        seqs, scores = beam_search(model, inputs, beam_size=3, max_length=6)
        greedy, _ = greedy_decode(model, inputs, max_length=6)
    for s in (seqs, greedy):
        assert s.shape == (3, 6) and bool(((s >= 0) & (s < VOCAB) & (s != BOS) & (s != EOS)).all())
        ended = (s == 0).long().cummax(1).values.bool()  # after the first 0, only 0s
        assert bool((s[ended] == 0).all())
    assert torch.isfinite(scores).all() and bool((scores <= 0).all())


@pytest.mark.parametrize("name", MODALITIES)
def test_padded_steps_of_any_modality_change_nothing(name):
    """Clip 0 alone vs in a batch where `name` is padded past its length with garbage: same Bi-LSTM outputs on its
    real steps (no leak into the backward direction), same log-probabilities, and no gradient reaches the padding."""
    model = _model().eval()
    alone_lengths = {m: [3] for m in MODALITIES}
    batch_lengths = {m: [3, 3] for m in MODALITIES}
    batch_lengths[name] = [3, STEPS]  # the other clip is longer, so clip 0 has STEPS - 3 garbage steps
    alone, batch = _inputs(alone_lengths), _inputs(batch_lengths)
    for m in MODALITIES:  # clip 0 has the same real features in both
        values = batch[m].values.detach().clone()
        values[0, :3] = alone[m].values[0]
        batch[m] = Padded(values.requires_grad_(True), batch[m].mask)
    targets = TARGETS[:1]
    out = model(batch, targets.expand(2, -1))
    torch.testing.assert_close(out[0], model(alone, targets)[0], rtol=0, atol=1e-6)
    encoded_alone, encoded_batch = model.encode(alone), model.encode(batch)
    for features_alone, features_batch in zip(encoded_alone[0], encoded_batch[0]):
        torch.testing.assert_close(features_batch[0, :3], features_alone[0], rtol=0, atol=1e-12)
    assert bool((encoded_batch[0][MODALITIES.index(name)][0, 3:] == 0).all())
    out[0].exp().mul(torch.arange(VOCAB)).sum().backward()
    grad = batch[name].values.grad
    assert bool((grad[0, 3:] == 0).all()) and grad[0, :3].abs().sum() > 0


def test_masks_must_be_prefixes_and_clips_must_fit_the_steps():
    model = _model().eval()
    inputs = _inputs()
    holes = dict(inputs, motion=Padded(inputs["motion"].values, inputs["motion"].mask.flip(1)))
    with pytest.raises(ValueError, match="'motion': the mask must mark a prefix"):
        model.encode(holes)
    longer = _inputs({**LENGTHS, "audio": [STEPS + 1, 1, 3]})
    with pytest.raises(ValueError, match=f"'audio': a clip has {STEPS + 1} steps, more than steps.audio = {STEPS}"):
        model.encode(longer)


HEADS = {"U": [1, 1, 1], "B": [2, 2, 2], "T": [3], "UB": [1, 1, 1, 2, 2, 2], "UBT": [1, 1, 1, 2, 2, 2, 3]}


@pytest.mark.parametrize("low_rank", [True, False])
@pytest.mark.parametrize("variant", TABLE1_VARIANTS)
def test_every_table_1_variant_builds_through_the_registry_and_runs(variant, low_rank):
    spec = SimpleNamespace(model="hoca", model_args=_args(variant=variant, low_rank=low_rank, rank=2))
    model = build_model("hoca.systems.s", spec, VOCAB, DIMS).eval()
    heads = model.attention.maf.heads
    assert [len(g) for g in model.attention.maf.groups] == HEADS[variant]
    pair_type = LowRankHOCA if low_rank else HOCA
    assert all(isinstance(h, UnaryAttention if len(g) == 1 else pair_type)
               for h, g in zip(heads, model.attention.maf.groups))
    with torch.no_grad():
        out = model(_inputs(), TARGETS)
    assert out.shape == (3, 4, VOCAB) and torch.isfinite(out).all()
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(3, 4))


def test_an_unknown_variant_or_bad_steps_are_input_errors():
    for args, message in [(_args(variant="UT"), r"variant must be one of U, B, T, UB, UBT \(Table 1\), not 'UT'"),
                          (_args(steps={"frames": 4, "motion": 4}), "steps must give each of frames, motion, audio"),
                          (_args(steps={"frames": 4, "motion": 4, "audio": "x"}), r"steps\.audio' must be an integer")]:
        with pytest.raises(InputError, match=r"params.yaml: 'hoca\.systems\.s(\.model_args)?.*" + message):
            build_model("hoca.systems.s", SimpleNamespace(model="hoca", model_args=args), VOCAB, DIMS)


def _video_task(n, seed):
    """Each modality carries a class (0/1) at one random real step of its clip (noise elsewhere); the caption is one
    word per modality, in order: frames -> 4/5, motion -> 6/7, audio -> 8/9. The classes are independent, so no
    modality tells another's word."""
    gen = torch.Generator().manual_seed(seed)
    classes = torch.randint(0, 2, (n, 3), generator=gen)
    inputs = {}
    for l, (name, dim) in enumerate(DIMS.items()):
        lengths = torch.randint(2, 5, (n,), generator=gen)
        mask = torch.arange(4)[None] < lengths[:, None]
        values = 0.3 * torch.randn(n, 4, dim, generator=gen)
        where = (torch.rand(n, generator=gen) * lengths).long()  # one real step carries the class
        values[torch.arange(n), where, l] += 2.0 * (2.0 * classes[:, l] - 1.0)
        inputs[name] = Padded(values * mask[..., None], mask)
    return inputs, 4 + 2 * torch.arange(3) + classes


def _train(inputs, targets, steps):
    torch.manual_seed(0)
    model = LowRankHOCACaptioner(HOCAArgs(**_args(embed_dim=8, hidden_dim=12, att_dim=8,
                                                  steps=dict.fromkeys(MODALITIES, 4))), 10, DIMS)
    fit(model, inputs, targets, steps)
    return model.eval()


def _accuracy(model, inputs, targets):
    with torch.no_grad():
        seqs, _ = greedy_decode(model, inputs, max_length=4)
    return (seqs[:, :3] == targets).double().mean(0)  # per word: frames', motion's, audio's


def _zeroed(inputs, name):
    return dict(inputs, **{name: Padded(torch.zeros_like(inputs[name].values), inputs[name].mask)})


@pytest.mark.slow
def test_it_learns_a_tiny_task_that_needs_all_three_modalities():
    train, train_targets = _video_task(128, seed=0)
    test, test_targets = _video_task(64, seed=1)
    model = _train(train, train_targets, steps=100)
    assert bool((_accuracy(model, test, test_targets) >= 0.95).all())  # held-out clips: every word right
    for l, name in enumerate(MODALITIES):  # without a modality's features its word is a guess, the others hold
        accuracy = _accuracy(model, _zeroed(test, name), test_targets)
        assert accuracy[l] <= 0.75 and bool((accuracy[torch.arange(3) != l] >= 0.9).all())
    # a model that never sees the audio learns the other two words but not the audio one
    blind = _train(_zeroed(train, "audio"), train_targets, steps=60)
    accuracy = _accuracy(blind, _zeroed(test, "audio"), test_targets)
    assert bool((accuracy[:2] >= 0.95).all()) and accuracy[2] <= 0.75


@pytest.mark.parametrize("low_rank", [True, False])
def test_gradients_reach_every_parameter(low_rank):
    model = _model(low_rank=low_rank, rank=2).train()
    inputs = _inputs({m: [STEPS, 3, 2] for m in MODALITIES})
    sequence_loss(model(inputs, TARGETS), TARGETS, 0.0).backward()
    names = [name for name, p in model.named_parameters() if p.grad is None or not bool(p.grad.abs().sum() > 0)]
    assert not names
    assert model.attention.maf.theta is not None and len(list(model.parameters())) > 40


def test_word_vectors_load_into_the_embedding():
    model = _model()
    matrix = torch.arange(model.word_embed.weight.numel(), dtype=torch.float32).view_as(model.word_embed.weight)
    model.load_word_vectors(matrix)
    assert torch.equal(model.word_embed.weight, matrix)
    with pytest.raises(ValueError, match="do not fit the embedding"):
        model.load_word_vectors(matrix[:, :-1])
