"""Show and Tell and Att2in: equations against direct computations, padding, learning, beam 1 = greedy."""
import pytest
import torch
from captioning_checks import assert_beam_one_is_greedy, assert_learns_tiny_task, region_inputs

from crossmodal.models.att2in import Att2in
from crossmodal.models.showtell import ShowTell
from crossmodal.modules.additive import masked_mean

VOCAB, FEAT = 7, 6
MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=torch.bool)


def _showtell(dropout=0.0):
    return ShowTell(ShowTell.Args(embed_dim=12, hidden_dim=16, dropout=dropout), VOCAB, {"regions": FEAT})


def _att2in(dropout=0.0):
    args = Att2in.Args(embed_dim=12, hidden_dim=16, att_hidden_dim=8, dropout=dropout, feature_dropout=dropout)
    return Att2in(args, VOCAB, {"regions": FEAT})


def test_att2in_step_matches_the_paper_equations():
    torch.manual_seed(0)
    model = _att2in(dropout=0.5).eval()
    E, H = 12, 16
    feats = torch.randn(2, 5, FEAT)
    feats[1, 2:] = 1e3  # padding
    words = torch.tensor([4, 5])
    h0, c0 = torch.randn(2, H), torch.randn(2, H)
    logprobs, (h1, c1) = model.step(words, (h0, c0), model.encode(region_inputs(feats, MASK)))

    lin, att = model.feature_embed[0], model.attention
    Wg, bg, WzI = model.gates.weight, model.gates.bias, model.context_to_candidate.weight
    sig = torch.sigmoid
    for b in range(2):
        n = int(MASK[b].sum())
        regions = [torch.relu(lin.weight @ feats[b, i] + lin.bias) for i in range(n)]
        a = torch.stack([att.score.weight[0] @ torch.tanh(att.key_proj.weight @ r + att.query_proj.weight @ h0[b]
                                                         + att.query_proj.bias) + att.score.bias[0] for r in regions])
        alpha = torch.softmax(a, 0)
        context = sum(alpha[i] * regions[i] for i in range(n))  # I_t
        x, h = model.word_embed.weight[words[b]], h0[b]

        def pre(rows):  # W_.x x_t + W_.h h_{t-1} + b_. for the given rows of the fused gate matrix
            return Wg[rows, :E] @ x + Wg[rows, E:] @ h + bg[rows]

        i_t, f_t, o_t = (sig(pre(slice(k * H, (k + 1) * H))) for k in range(3))
        z = [pre(slice((3 + k) * H, (4 + k) * H)) + WzI[k * H:(k + 1) * H] @ context for k in range(2)]
        c = i_t * torch.maximum(z[0], z[1]) + f_t * c0[b]
        h = o_t * torch.tanh(c)
        torch.testing.assert_close(c1[b], c)
        torch.testing.assert_close(h1[b], h)
        torch.testing.assert_close(logprobs[b], torch.log_softmax(model.logits.weight @ h + model.logits.bias, 0))


def test_showtell_image_enters_only_before_bos():
    torch.manual_seed(0)
    model = _showtell().eval()
    feats = torch.randn(2, 5, FEAT)
    encoded = model.encode(region_inputs(feats, MASK))
    image = model.image_embed(masked_mean(feats, MASK))
    zeros = torch.zeros(2, 16)
    for got, want in zip(model.init_state(encoded, 2), model.lstm(image, (zeros, zeros))):
        torch.testing.assert_close(got, want)
    # after the image step, the per-step "encoded" is never read again
    state = model.init_state(encoded, 2)
    words = torch.tensor([1, 4])
    lp, _ = model.step(words, state, encoded)
    torch.testing.assert_close(model.step(words, state, encoded + 1e3)[0], lp)


@pytest.mark.parametrize("make", [_showtell, _att2in])
def test_padded_regions_get_no_gradient_and_change_nothing(make):
    torch.manual_seed(0)
    model = make().eval()
    feats = torch.randn(2, 5, FEAT, requires_grad=True)
    targets = torch.tensor([[4, 5, 6], [5, 4, 0]])
    out = model(region_inputs(feats, MASK), targets)
    out[:, :, 4].sum().backward()
    assert torch.all(feats.grad[1, 2:] == 0) and torch.any(feats.grad[1, :2] != 0)
    altered = feats.detach().clone()
    altered[1, 2:] = 1e3
    torch.testing.assert_close(model(region_inputs(altered, MASK), targets), out.detach())


def test_att2in_padded_regions_get_no_attention():
    torch.manual_seed(0)
    model = _att2in().eval()
    embedded, mask, keys = model.encode(region_inputs(torch.randn(2, 5, FEAT), MASK))
    _, weights = model.attention(torch.randn(2, 16), embedded, mask, keys)
    assert torch.all(weights[1, 2:] == 0) and torch.all(weights[1, :2] > 0)


@pytest.mark.slow
@pytest.mark.parametrize("make", [_showtell, _att2in])
def test_learns_a_tiny_captioning_task(make):
    torch.manual_seed(0)
    assert_learns_tiny_task(make(), FEAT)


@pytest.mark.parametrize("make", [_showtell, _att2in])
def test_beam_one_equals_greedy(make):
    torch.manual_seed(0)
    model = make().eval()
    feats = torch.randn(3, 5, FEAT)
    assert_beam_one_is_greedy(model, region_inputs(feats, torch.cat([MASK, torch.ones(1, 5, dtype=torch.bool)])))
