"""ETA Table 4's LSTM (Xu et al.'s soft attention, `softatt`) and convolutional (Aneja et al., `convcap`) captioners:
their equations against direct loops (float64), padded grid cells, ConvCap's causality, step-by-step decoding
against teacher forcing, learning, and the registry."""
import math
from types import SimpleNamespace

import pytest
import torch
from captioning_checks import assert_beam_one_is_greedy, assert_learns_tiny_task, fit, region_inputs

from crossmodal.data.captions import BOS, EOS
from crossmodal.decoding.search import beam_search, greedy_decode
from crossmodal.io import InputError
from crossmodal.models.base import Captioner
from crossmodal.models.convcap import ConvCap
from crossmodal.models.registry import build_model, model_class
from crossmodal.models.softatt import SoftAttention
from crossmodal.tasks.objectives.xe import sequence_loss

VOCAB, FEAT = 9, 6
MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]], dtype=torch.bool)
TARGETS = torch.tensor([[4, 5, 6, 7], [8, 4, 0, 0], [5, 5, 6, 0], [6, 0, 0, 0], [7, 8, 4, 5], [4, 6, 0, 0]])


def _softatt(annotation_dim=0, dropout=0.0, feature_dim=FEAT):
    args = SoftAttention.Args(embed_dim=8, hidden_dim=10, att_hidden_dim=7, annotation_dim=annotation_dim,
                              dropout=dropout)
    return SoftAttention(args, VOCAB, {"regions": feature_dim})


def _convcap(dropout=0.0, feature_dim=FEAT, layers=2, kernel_size=3):
    return ConvCap(ConvCap.Args(embed_dim=8, layers=layers, kernel_size=kernel_size, dropout=dropout),
                   VOCAB, {"regions": feature_dim})


pytestmark = pytest.mark.usefixtures("one_thread")

MODELS = [pytest.param(_softatt, id="softatt"), pytest.param(_convcap, id="convcap")]


def _feats(batch=3):
    feats = torch.randn(batch, 5, FEAT)
    feats[~MASK[:batch]] = 1e3  # padding holds garbage
    return feats


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("annotation_dim", [0, 4])
def test_soft_attention_step_is_xu_et_al_equations(annotation_dim):
    torch.manual_seed(0)
    model = _softatt(annotation_dim, dropout=0.5).eval()
    feats, words = _feats(2), torch.tensor([4, 5])
    encoded = model.encode(region_inputs(feats, MASK[:2]))
    h0, c0 = model.init_state(encoded, 2)
    z, alpha, beta = model.attend(h0, encoded)
    logprobs, (h1, c1) = model.step(words, (h0, c0), encoded)

    att, lstm, sig = model.attention, model.lstm, torch.sigmoid
    for b in range(2):
        n = int(MASK[b].sum())
        a = [model.annotate.weight @ feats[b, i] + model.annotate.bias if annotation_dim else feats[b, i]
             for i in range(n)]
        mean = sum(a) / n
        torch.testing.assert_close(h0[b], torch.tanh(model.init_h[0].weight @ mean + model.init_h[0].bias))
        torch.testing.assert_close(c0[b], torch.tanh(model.init_c[0].weight @ mean + model.init_c[0].bias))
        e = torch.stack([att.score.weight[0] @ torch.tanh(att.key_proj.weight @ a_i + att.query_proj.weight @ h0[b]
                                                          + att.query_proj.bias) + att.score.bias[0] for a_i in a])
        al = torch.exp(e) / torch.exp(e).sum()
        be = sig(model.gate.weight[0] @ h0[b] + model.gate.bias[0])
        zz = be * sum(al[i] * a[i] for i in range(n))
        torch.testing.assert_close(alpha[b, :n], al)
        assert torch.all(alpha[b, n:] == 0)
        torch.testing.assert_close(beta[b, 0], be)
        torch.testing.assert_close(z[b], zz)
        ey = model.word_embed.weight[words[b]]
        gates = lstm.weight_ih @ torch.cat([ey, zz]) + lstm.bias_ih + lstm.weight_hh @ h0[b] + lstm.bias_hh
        i, f, g, o = gates.chunk(4)
        c = sig(f) * c0[b] + sig(i) * torch.tanh(g)
        h = sig(o) * torch.tanh(c)
        torch.testing.assert_close(c1[b], c)
        torch.testing.assert_close(h1[b], h)
        deep = ey + model.out_h.weight @ h + model.out_h.bias + model.out_z.weight @ zz
        logits = model.logits.weight @ deep + model.logits.bias
        torch.testing.assert_close(logprobs[b], logits - torch.logsumexp(logits, 0))


@pytest.mark.usefixtures("float64")
def test_convcap_teacher_forced_pass_is_the_equations_as_loops():
    torch.manual_seed(0)
    k, d = 3, 8
    model = _convcap(dropout=0.3, layers=2, kernel_size=k).eval()
    feats, targets = _feats(), TARGETS[:3]
    weights = []
    encoded = model.encode(region_inputs(feats, MASK))
    words = torch.cat([torch.full((3, 1), BOS), targets], 1)
    logprobs, _ = model._decode(words, model.init_state(encoded, 3), encoded, weights)
    torch.testing.assert_close(logprobs, model(region_inputs(feats, MASK), targets))

    lin = lambda layer, x: layer.weight @ x + layer.bias  # noqa: E731
    r = math.sqrt(0.5)
    for b in range(3):
        n = int(MASK[b].sum())
        image = torch.relu(lin(model.image_embed, sum(feats[b, j] for j in range(n)) / n))
        cells = [lin(model.cell_proj, feats[b, j]) for j in range(n)]
        g = [lin(model.word_proj, model.word_embed.weight[w]) for w in words[b]]
        x = [torch.cat([g_t, image]) for g_t in g]
        residual = [lin(model.res_proj, x_t) for x_t in x]
        for l, layer in enumerate(model.layers):
            out = []
            for t in range(len(x)):
                taps = [layer.conv.weight[:, :, k - 1 - s] @ x[t - s] for s in range(k) if t - s >= 0]  # zeros before
                conv = layer.conv.bias + sum(taps)
                h = conv[:d] * torch.sigmoid(conv[d:])
                q = (lin(layer.query, h) + g[t]) * r
                scores = torch.stack([q @ u for u in cells])
                alpha = torch.softmax(scores, 0)
                torch.testing.assert_close(weights[l][b, t, :n], alpha)
                assert torch.all(weights[l][b, t, n:] == 0)
                c = math.sqrt(n) * sum(alpha[j] * cells[j] for j in range(n))
                out.append(((lin(layer.out, c) + h) * r + residual[t]) * r)
            x = residual = out
        for t in range(len(x)):
            logits = lin(model.classifier[2], lin(model.classifier[0], x[t]))
            torch.testing.assert_close(logprobs[b, t], logits - torch.logsumexp(logits, 0))


@pytest.mark.parametrize("make", MODELS)
def test_padded_grid_cells_get_no_weight_and_change_nothing(make):
    torch.manual_seed(0)
    model = make().eval()
    feats = torch.randn(3, 5, FEAT, requires_grad=True)
    out = model(region_inputs(feats, MASK), TARGETS, seq_per_img=2)
    out[:, :, 4].sum().backward()
    assert torch.all(feats.grad[~MASK] == 0) and torch.all(feats.grad[MASK].abs().sum(-1) > 0)
    altered = feats.detach().clone()
    altered[~MASK] = 1e3
    torch.testing.assert_close(model(region_inputs(altered, MASK), TARGETS, seq_per_img=2), out.detach())
    for b in range(3):  # an image alone with only its real cells: padding is as good as absent
        n = int(MASK[b].sum())
        alone = model(region_inputs(feats[b:b + 1, :n].detach(), MASK[b:b + 1, :n]), TARGETS[2 * b:2 * b + 2], 2)
        torch.testing.assert_close(alone, out[2 * b:2 * b + 2].detach())


def test_convcap_later_words_do_not_change_earlier_positions():
    torch.manual_seed(0)
    model = _convcap().eval()
    inputs = region_inputs(_feats(), MASK)
    with torch.no_grad():
        out = model(inputs, TARGETS, 2)
        for t in range(TARGETS.size(1)):  # targets[:, t] is the input at position t + 1
            changed = TARGETS.clone()
            changed[:, t] = 3
            out_changed = model(inputs, changed, 2)
            torch.testing.assert_close(out_changed[:, :t + 1], out[:, :t + 1], atol=0, rtol=0)
            moved = TARGETS[:, t] != 3
            assert (out_changed[moved, t + 1] - out[moved, t + 1]).abs().amax(-1).min() > 1e-4


def test_convcap_parallel_forward_equals_step_by_step_decoding():
    torch.manual_seed(0)
    for layers, kernel_size in [(3, 5), (2, 1), (1, 2)]:  # kernel 5: longer than the 5-word inputs
        model = _convcap(layers=layers, kernel_size=kernel_size).eval()
        inputs = region_inputs(_feats(), MASK)
        with torch.no_grad():
            parallel = model(inputs, TARGETS, seq_per_img=2)
            stepwise = Captioner.forward(model, inputs, TARGETS, seq_per_img=2)
        assert parallel.shape == (6, 5, VOCAB)
        torch.testing.assert_close(parallel, stepwise, atol=1e-5, rtol=0)
        state = model.init_state(model.encode(inputs), 3)
        assert [tuple(s.shape) for s in state] == [(3, kernel_size - 1, 16)] + [(3, kernel_size - 1, 8)] * (layers - 1)


def test_convcap_scheduled_sampling_in_training_falls_back_to_the_step_loop():
    torch.manual_seed(0)
    model = _convcap().train()
    inputs = region_inputs(_feats(), MASK)
    got = model(inputs, TARGETS, 2, ss_prob=0.5, generator=torch.Generator().manual_seed(1))
    want = Captioner.forward(model, inputs, TARGETS, 2, ss_prob=0.5, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("make", MODELS)
def test_decoding_step_by_step_scores_what_teacher_forcing_scores(make):
    """Greedy and beam captions rescored by the teacher-forced pass: the same log-probabilities; beam 1 = greedy."""
    torch.manual_seed(0)
    model = make().eval()
    feats = _feats()
    inputs = region_inputs(feats, MASK)
    assert_beam_one_is_greedy(model, inputs)
    for seqs, scores in [greedy_decode(model, inputs, 6), beam_search(model, inputs, beam_size=3, max_length=6)]:
        with torch.no_grad():
            logprobs = model(inputs, seqs)
        for b in range(3):
            n = int((seqs[b] > 0).sum())
            rescored = logprobs[b, torch.arange(n), seqs[b, :n]].sum() + (logprobs[b, n, EOS] if n < 6 else 0.0)
            torch.testing.assert_close(scores[b], rescored)
    beam, _ = beam_search(model, inputs, beam_size=3, max_length=6)
    alone, _ = beam_search(model, region_inputs(feats[1:2], MASK[1:2]), beam_size=3, max_length=6)
    assert torch.equal(beam[1:2], alone)  # reordered states do not mix images


@pytest.mark.parametrize("make", MODELS)
def test_tiny_model_loss_falls_on_a_fixed_batch(make):
    torch.manual_seed(0)
    model = make(dropout=0.1).train()
    inputs, targets = region_inputs(_feats(), MASK), TARGETS[::2]
    before = sequence_loss(model(inputs, targets), targets, 0.0).item()
    fit(model, inputs, targets, steps=40)
    after = sequence_loss(model(inputs, targets), targets, 0.0).item()
    assert after < 0.4 * before, (before, after)


@pytest.mark.parametrize("make", MODELS)
def test_learns_the_tiny_task(make):
    torch.manual_seed(0)
    assert_learns_tiny_task(make(feature_dim=4), 4)


def test_the_registry_finds_both_and_validates_their_args():
    assert model_class("softatt") is SoftAttention and model_class("convcap") is ConvCap
    variant = SimpleNamespace(model="convcap", model_args={"embed_dim": 8, "layers": 1, "kernel_size": 2})
    assert isinstance(build_model("t", variant, VOCAB, {"regions": FEAT}), ConvCap)
    assert ConvCap.Args() == ConvCap.Args(embed_dim=512, layers=3, kernel_size=5)
    for name, bad in [("convcap", {"kernel_size": 0}), ("convcap", {"layers": 0}), ("convcap", {"dropout": 1.0}),
                      ("softatt", {"annotation_dim": -1}), ("softatt", {"hidden_dim": 0})]:
        with pytest.raises(InputError, match=next(iter(bad))):
            build_model("t", SimpleNamespace(model=name, model_args=bad), VOCAB, {"regions": FEAT})
