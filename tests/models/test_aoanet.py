"""AoA (eq. 1), multi-head attention and the refiner (eq. 2) against direct computations; masking; AoANet decoding."""
import math

import pytest
import torch
import torch.nn.functional as F
from captioning_checks import assert_beam_one_is_greedy, assert_learns_tiny_task, region_inputs

from crossmodal.decoding.search import beam_search
from crossmodal.models.aoanet import AoANet, AoANetArgs
from crossmodal.modules.aoa import AoARefiner, AttentionOnAttention, aoa_attention

MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)


def _eq1(aoa, attended, query):
    """Eq. 1 with the explicit weight slices of AttentionOnAttention.linear."""
    d = attended.size(-1)
    w, b = aoa.linear.weight, aoa.linear.bias
    w_v_i, w_q_i, w_v_g, w_q_g = w[:d, :d], w[:d, d:], w[d:, :d], w[d:, d:]
    gate = torch.sigmoid(query @ w_q_g.T + attended @ w_v_g.T + b[d:])
    return gate * (query @ w_q_i.T + attended @ w_v_i.T + b[:d])


def _direct_attention(att, query, x, mask):
    """Loops over images, heads, query rows: softmax(q_h . k_h / sqrt(d)) over real regions -> (out, weights)."""
    dim, heads = x.size(-1), att.heads
    d = dim // heads
    w_k, w_v = att.kv_proj.weight[:dim], att.kv_proj.weight[dim:]
    b_k, b_v = att.kv_proj.bias[:dim], att.kv_proj.bias[dim:]
    out = torch.zeros(query.size(0), query.size(1), dim)
    weights = torch.zeros(query.size(0), heads, query.size(1), x.size(1))
    for b in range(x.size(0)):
        real = [j for j in range(x.size(1)) if mask[b, j]]
        for h in range(heads):
            s = slice(h * d, (h + 1) * d)
            for i in range(query.size(1)):
                q = (att.query_proj.weight @ query[b, i] + att.query_proj.bias)[s]
                keys = [(w_k @ x[b, j] + b_k)[s] for j in real]
                alpha = torch.softmax(torch.stack([q @ k for k in keys]) / math.sqrt(d), 0)
                out[b, i, s] = sum(a * (w_v @ x[b, j] + b_v)[s] for a, j in zip(alpha, real))
                weights[b, h, i, real] = alpha
    return out, weights


def test_aoa_is_equation_1_with_information_first_and_gate_second():
    torch.manual_seed(0)
    aoa = AttentionOnAttention(4)
    attended, query = torch.randn(3, 4), torch.randn(3, 4)
    torch.testing.assert_close(aoa(attended, query), _eq1(aoa, attended, query))


def test_multi_head_attention_matches_per_head_loop_and_masks_padding():
    torch.manual_seed(0)
    att = aoa_attention(6, 2)
    x, query = torch.randn(3, 5, 6), torch.randn(3, 4, 6)
    out, weights = att(query, *att.project_kv(x), MASK)
    expected_out, expected_weights = _direct_attention(att, query, x, MASK)
    torch.testing.assert_close(out, expected_out)
    torch.testing.assert_close(weights, expected_weights)
    assert torch.all(weights[~MASK[:, None, None, :].expand_as(weights)] == 0)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_one_refiner_layer_is_layer_norm_of_residual_aoa(pre_norm):
    torch.manual_seed(0)
    refiner = AoARefiner(8, 2, layers=1, pre_norm=pre_norm).eval()
    x = torch.randn(3, 5, 8)
    with torch.no_grad():
        norm = refiner.norms[0]
        a = F.layer_norm(x, (8,), norm.weight, norm.bias) if pre_norm else x
        update = _eq1(refiner.aoas[0], _direct_attention(refiner.attentions[0], a, a, MASK)[0], a)
        if pre_norm:  # official code: A + AoA(LN(A)), then the final LayerNorm
            fn = refiner.final_norm
            expected = F.layer_norm(x + update, (8,), fn.weight, fn.bias)
        else:  # eq. 2: LayerNorm(A + AoA(f_mh-att, W^Q A, W^K A, W^V A))
            expected = F.layer_norm(x + update, (8,), norm.weight, norm.bias)
        torch.testing.assert_close(refiner(x, MASK), expected)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_refiner_padded_regions_do_not_reach_real_rows(pre_norm):
    torch.manual_seed(0)
    refiner = AoARefiner(8, 2, layers=2, pre_norm=pre_norm).eval()
    x = torch.randn(3, 5, 8, requires_grad=True)
    out = refiner(x, MASK)
    assert out.shape == (3, 5, 8) and torch.isfinite(out).all()
    (out[MASK] * torch.randn(int(MASK.sum()), 8)).sum().backward()  # a plain sum is flat through LayerNorm
    assert torch.all(x.grad[~MASK] == 0) and torch.all(x.grad[MASK].abs().sum(-1) > 0)
    altered = x.detach().clone()
    altered[~MASK] = 1e3
    torch.testing.assert_close(refiner(altered, MASK)[MASK], out.detach()[MASK])


def _aoanet(vocab=7, feature_dim=6, pre_norm=False):
    args = AoANetArgs(embed_dim=16, hidden_dim=16, heads=2, refiner_layers=2, pre_norm=pre_norm, dropout=0.0,
                      feature_dropout=0.0, ctx_dropout=0.0, attention_dropout=0.0, aoa_dropout=0.0,
                      residual_dropout=0.0)
    return AoANet(args, vocab, {"regions": feature_dim})


def test_decoder_step_follows_equations_6_to_8():
    torch.manual_seed(0)
    model = _aoanet().eval()
    feats, words = torch.randn(3, 5, 6), torch.tensor([4, 5, 6])
    h, m, ctx = torch.randn(3, 16), torch.randn(3, 16), torch.randn(3, 16)
    with torch.no_grad():
        logprobs, (h1, m1, ctx1) = model.step(words, (h, m, ctx), model.encode(region_inputs(feats, MASK)))
        regions = model.refiner(model.feature_embed(feats), MASK)
        mean = torch.stack([regions[b, MASK[b]].mean(0) for b in range(3)])
        x = torch.cat([model.word_embed(words), mean + ctx], 1)  # eq. 6
        h_ref, m_ref = model.lstm(x, (h, m))  # eq. 7
        query = F.layer_norm(h_ref, (16,), model.query_norm.weight, model.query_norm.bias)[:, None]
        ctx_ref = _eq1(model.aoa, _direct_attention(model.attention, query, regions, MASK)[0][:, 0], h_ref)  # eq. 8
    expected_logprobs = torch.log_softmax(model.logits(ctx_ref), -1)
    for got, want in [(h1, h_ref), (m1, m_ref), (ctx1, ctx_ref), (logprobs, expected_logprobs)]:
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_padded_regions_get_no_weight_and_no_gradient(pre_norm):
    torch.manual_seed(0)
    model = _aoanet(pre_norm=pre_norm).eval()
    feats = torch.randn(3, 5, 6, requires_grad=True)
    targets = torch.tensor([[4, 5, 6], [5, 4, 0], [6, 0, 0]])
    out = model(region_inputs(feats, MASK), targets)
    assert torch.isfinite(out).all()
    out[:, :, 4].sum().backward()
    assert torch.all(feats.grad[~MASK] == 0) and torch.all(feats.grad[MASK].abs().sum(-1) > 0)
    altered = feats.detach().clone()
    altered[~MASK] = 1e3  # garbage in padded rows must not change anything
    torch.testing.assert_close(model(region_inputs(altered, MASK), targets), out.detach())


@pytest.mark.slow
def test_aoanet_learns_a_tiny_captioning_task():
    torch.manual_seed(0)
    assert_learns_tiny_task(_aoanet(), 6, steps=100)


def test_beam_search_with_one_beam_is_greedy_and_rows_are_independent():
    torch.manual_seed(0)
    model = _aoanet(vocab=12).eval()
    feats = torch.randn(3, 5, 6)
    assert_beam_one_is_greedy(model, region_inputs(feats, MASK))
    seqs, scores = beam_search(model, region_inputs(feats, MASK), beam_size=3, max_length=6)
    for b in range(3):  # beams of one image never read another image's encoded rows
        alone, alone_score = beam_search(model, region_inputs(feats[b:b + 1], MASK[b:b + 1]), beam_size=3, max_length=6)
        assert torch.equal(seqs[b:b + 1], alone)
        torch.testing.assert_close(scores[b:b + 1], alone_score)
