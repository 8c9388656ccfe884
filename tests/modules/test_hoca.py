"""Low-Rank HOCA modules against loops over the paper's equations (7-9, 11, 14-17, 19-22), the rank-k equivalence of
eq. 9 and eq. 15, the Table 1 variants, padding masks and gradients. Everything in float64 with tiny sizes."""
import itertools
import math

import pytest
import torch

from crossmodal.modules.additive import AdditiveAttention
from crossmodal.modules.hoca import (
    HOCA, TABLE1_VARIANTS, HierarchicalFusion, HOCAAttentionFusion, LowRankHOCA, MultipleAttentiveFusion,
    correlation_tensor,
)

DIM, QUERY = 5, 4
LENGTHS, FEATURE_DIMS = (3, 4, 2), (6, 3, 2)


pytestmark = pytest.mark.usefixtures("float64")


def _common(lengths, batch=2, seed=0):
    torch.manual_seed(seed)
    return [torch.tanh(torch.randn(batch, t, DIM)) for t in lengths]


def _direct_correlation(common, b, index):
    """Eq. 7: 1_dᵀ[(I_1)_{r1} ∘ ... ∘ (I_n)_{rn}]."""
    return sum(math.prod(c[b, r, d] for c, r in zip(common, index)) for d in range(DIM))


def _direct_hoca_scores(common, weights):
    """Eq. 9's exponents by looping over every index tuple of the other modalities."""
    lengths = [c.size(1) for c in common]
    out = []
    for l, w in enumerate(weights):
        scores = torch.zeros(common[0].size(0), lengths[l])
        for b, r in itertools.product(range(scores.size(0)), range(lengths[l])):
            for others in itertools.product(*[range(t) for i, t in enumerate(lengths) if i != l]):
                index = others[:l] + (r,) + others[l:]
                scores[b, r] += w[others] * _direct_correlation(common, b, index)
        out.append(scores)
    return out


@pytest.mark.parametrize("lengths", [(3, 4), LENGTHS])
def test_correlation_tensor_and_hoca_weights_match_loops_over_index_tuples(lengths):
    common = _common(lengths)
    corr = correlation_tensor(common)
    assert corr.shape == (2, *lengths)
    for b in range(2):
        for index in itertools.product(*map(range, lengths)):
            torch.testing.assert_close(corr[(b, *index)], _direct_correlation(common, b, index))
    hoca = HOCA(lengths)
    assert [tuple(w.shape) for w in hoca.weights] == [tuple(t for i, t in enumerate(lengths) if i != l)
                                                      for l in range(len(lengths))]
    expected = _direct_hoca_scores(common, hoca.weights)
    for got, want, alpha in zip(hoca.scores(common), expected, hoca(common)):
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(alpha, torch.softmax(want, -1))


def _direct_low_rank_scores(module, common, readout=True):
    """Eqs. 14, 16, 17 with explicit sums over time steps, ranks and the other modalities."""
    n, rank = len(common), module.factors[0].size(0)
    batch = common[0].size(0)
    out = []
    for l in range(n):
        scores = torch.zeros(batch, common[l].size(1))
        for b in range(batch):
            pool = torch.zeros(DIM)  # B_l, eq. 16
            for j in range(rank):
                term = torch.ones(DIM)
                for i in range(n):
                    if i != l:  # (I'_i)_j, eq. 14
                        term = term * sum(module.factors[i][j, r] * common[i][b, r] for r in range(common[i].size(1)))
                pool = pool + term
            w = module.readouts[l] if readout else torch.ones(DIM)
            for r in range(common[l].size(1)):
                scores[b, r] = sum(w[d] * common[l][b, r, d] * pool[d] for d in range(DIM))
        out.append(scores)
    return out


def test_low_rank_hoca_weights_match_a_loop_over_eqs_14_to_17():
    common = _common(LENGTHS)
    module = LowRankHOCA(LENGTHS, DIM, rank=2)
    assert [tuple(f.shape) for f in module.factors] == [(2, t) for t in LENGTHS]  # shared by all targets
    for got, want, alpha in zip(module.scores(common), _direct_low_rank_scores(module, common), module(common)):
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(alpha, torch.softmax(want, -1))


@pytest.mark.parametrize("lengths", [(3, 4), LENGTHS])
def test_eq_9_with_a_rank_k_tensor_equals_eq_15(lengths):
    common = _common(lengths, seed=1)
    low_rank = LowRankHOCA(lengths, DIM, rank=3, learned_readout=False)
    hoca = HOCA(lengths)
    with torch.no_grad():
        for l, w in enumerate(hoca.weights):
            full = low_rank.full_weight_tensor(l)  # eq. 11 against its outer products written out
            others = [f for i, f in enumerate(low_rank.factors) if i != l]
            for index in itertools.product(*[range(f.size(1)) for f in others]):
                want = sum(math.prod(f[j, r] for f, r in zip(others, index)) for j in range(3))
                torch.testing.assert_close(full[index], want)
            w.copy_(full)
    eq15 = low_rank.scores(common)
    for got, want in zip(eq15, hoca.scores(common)):
        torch.testing.assert_close(got, want)
    for got, want in zip(eq15, _direct_low_rank_scores(low_rank, common, readout=False)):
        torch.testing.assert_close(got, want)


def _direct_projection(proj, query, features):
    """Ĩ = tanh(W h + U I + b), one row at a time."""
    return torch.stack([torch.stack([torch.tanh(proj.query_proj.weight @ query[b] + proj.query_proj.bias
                                                + proj.key_proj.weight @ features[b, r])
                                     for r in range(features.size(1))]) for b in range(features.size(0))])


def _inputs(batch=2, seed=3):
    torch.manual_seed(seed)
    return torch.randn(batch, QUERY), [torch.randn(batch, t, d) for t, d in zip(LENGTHS, FEATURE_DIMS)]


@pytest.mark.parametrize("low_rank", [True, False])
def test_multiple_attentive_fusion_matches_eq_19_and_eq_5(low_rank):
    query, features = _inputs()
    maf = MultipleAttentiveFusion(QUERY, FEATURE_DIMS, LENGTHS, DIM, "UBT", low_rank=low_rank)
    with torch.no_grad():
        maf.theta.copy_(torch.randn(3, 4) * 3)
    assert [maf.groups[h] for h, _ in maf.terms[0]] == [(0,), (0, 1), (0, 2), (0, 1, 2)]  # F: U, (F,M), (F,S), T
    assert [maf.groups[h] for h, _ in maf.terms[1]] == [(1,), (0, 1), (1, 2), (0, 1, 2)]
    assert len(maf.projections) == 3 + 6 + 3
    contexts, weights = maf(query, features)
    proj = iter(maf.projections)
    per_head = [head([_direct_projection(next(proj), query, features[l]) for l in group])
                for head, group in zip(maf.heads, maf.groups)]
    for l in range(3):
        alphas = [per_head[h][pos] for h, pos in maf.terms[l]]
        fused = torch.softmax(sum(maf.theta[l, j] * a for j, a in enumerate(alphas)), -1)
        torch.testing.assert_close(weights[l], fused)
        torch.testing.assert_close(contexts[l], (fused.unsqueeze(-1) * features[l]).sum(1))
    kept = maf(query, features, keys=maf.precompute(features))
    torch.testing.assert_close(kept, (contexts, weights))


def test_hierarchical_fusion_matches_eqs_20_to_22():
    torch.manual_seed(4)
    fusion = HierarchicalFusion(QUERY, FEATURE_DIMS, DIM, out_dim=7)
    query, contexts = torch.randn(2, QUERY), [torch.randn(2, d) for d in FEATURE_DIMS]
    logits, beta = fusion(query, contexts)
    for b in range(2):
        q = fusion.query_proj.weight @ query[b] + fusion.query_proj.bias
        e = torch.stack([fusion.score.weight[0] @ torch.tanh(q + u.weight @ c[b])
                         for u, c in zip(fusion.context_proj, contexts)])
        want_beta = torch.exp(e) / torch.exp(e).sum()
        torch.testing.assert_close(beta[b], want_beta)
        want = fusion.query_out.weight @ query[b] + fusion.query_out.bias + sum(
            want_beta[k] * (w.weight @ c[b]) for k, (w, c) in enumerate(zip(fusion.context_out, contexts)))
        torch.testing.assert_close(logits[b], want)


@pytest.mark.parametrize("low_rank", [True, False])
def test_weights_sum_to_one_and_gradients_reach_every_parameter(low_rank):
    query, features = _inputs(seed=5)
    model = HOCAAttentionFusion(QUERY, FEATURE_DIMS, LENGTHS, out_dim=7, dim=DIM, variant="UBT", low_rank=low_rank,
                                rank=2)
    logits, weights, beta = model(query, features)
    for alpha in [*weights, beta]:
        torch.testing.assert_close(alpha.sum(-1), torch.ones(2))
        assert torch.all(alpha > 0)
    (logits * torch.randn_like(logits)).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.all(torch.isfinite(p.grad)) and p.grad.abs().sum() > 0, name
    names = {n for n, _ in model.named_parameters()}
    assert "maf.theta" in names and any(".factors." in n for n in names) == low_rank
    assert any(".weights." in n for n in names) != low_rank


def test_unary_only_variant_is_bahdanau_attention_per_modality():
    query, features = _inputs(seed=6)
    maf = MultipleAttentiveFusion(QUERY, FEATURE_DIMS, LENGTHS, DIM, variant="U")
    assert maf.theta is None and len(maf.heads) == 3
    contexts, weights = maf(query, features)
    for l, (head, proj) in enumerate(zip(maf.heads, maf.projections)):
        bahdanau = AdditiveAttention(QUERY, FEATURE_DIMS[l], DIM)
        with torch.no_grad():
            bahdanau.query_proj.load_state_dict(proj.query_proj.state_dict())
            bahdanau.key_proj.load_state_dict(proj.key_proj.state_dict())
            bahdanau.score.weight.copy_(head.score.weight)
        mask = torch.ones(2, LENGTHS[l], dtype=torch.bool)
        context, alpha = bahdanau(query, features[l], mask, bahdanau.project_keys(features[l]))
        torch.testing.assert_close(weights[l], alpha)
        torch.testing.assert_close(contexts[l], context)


def test_binary_and_ternary_variants_and_their_theta():
    query, features = _inputs(seed=7)
    expected_terms = {"U": 1, "B": 2, "T": 1, "UB": 3, "UBT": 4}
    assert tuple(expected_terms) == TABLE1_VARIANTS
    for variant, terms in expected_terms.items():
        maf = MultipleAttentiveFusion(QUERY, FEATURE_DIMS, LENGTHS, DIM, variant, low_rank=False)
        assert all(len(t) == terms for t in maf.terms)
        assert (maf.theta is None) == (terms == 1)
    ternary = MultipleAttentiveFusion(QUERY, FEATURE_DIMS, LENGTHS, DIM, "T", low_rank=False)
    _, weights = ternary(query, features)
    direct = ternary.heads[0]([_direct_projection(p, query, f) for p, f in zip(ternary.projections, features)])
    torch.testing.assert_close(weights, direct)  # one term: the head's weights as they are, no second softmax
    binary = MultipleAttentiveFusion(QUERY, FEATURE_DIMS, LENGTHS, DIM, "B", share_projection=True)
    assert len(binary.projections) == 3 and binary.groups == [(0, 1), (0, 2), (1, 2)]
    with torch.no_grad():
        binary.theta.copy_(torch.tensor([[2.0, -1.0], [0.5, 3.0], [-2.0, 1.0]]))
    _, weights = binary(query, features)
    common = [_direct_projection(p, query, f) for p, f in zip(binary.projections, features)]
    fm, fs, ms = (head([common[i] for i in g]) for head, g in zip(binary.heads, binary.groups))
    for l, (first, second) in enumerate([(fm[0], fs[0]), (fm[1], ms[0]), (fs[1], ms[1])]):
        want = torch.softmax(binary.theta[l, 0] * first + binary.theta[l, 1] * second, -1)
        torch.testing.assert_close(weights[l], want)
    for bad in ("", "UU", "X", "UBTT"):
        with pytest.raises(ValueError):
            MultipleAttentiveFusion(QUERY, FEATURE_DIMS, LENGTHS, DIM, bad)
    with pytest.raises(ValueError):
        MultipleAttentiveFusion(QUERY, FEATURE_DIMS[:2], LENGTHS[:2], DIM, "T")


@pytest.mark.parametrize("low_rank", [True, False])
def test_padded_steps_take_no_weight_and_equal_a_shorter_clip(low_rank):
    query, features = _inputs(seed=8)
    model = HOCAAttentionFusion(QUERY, FEATURE_DIMS, LENGTHS, out_dim=7, dim=DIM, low_rank=low_rank, rank=2)
    masks = [torch.ones(2, t, dtype=torch.bool) for t in LENGTHS]
    masks[1][1, 2:] = False  # clip 1 has 2 of the 4 motion steps
    noisy = [f.clone() for f in features]
    noisy[1][1, 2:] = 100.0
    logits, weights, beta = model(query, noisy, masks)
    assert torch.all(weights[1][1, 2:] == 0)
    for alpha in weights:
        torch.testing.assert_close(alpha.sum(-1), torch.ones(2))
    clean = model(query, features, masks)
    torch.testing.assert_close((logits, weights, beta), clean)
    short = [f[1:] for f in features]
    short[1] = short[1][:, :2]
    s_logits, s_weights, s_beta = model(query[1:], short)
    torch.testing.assert_close(s_logits, logits[1:])
    torch.testing.assert_close(s_beta, beta[1:])
    for s, w in zip(s_weights, weights):
        torch.testing.assert_close(s, w[1:, :s.size(1)])
    unmasked = model(query, noisy)[1]
    assert not torch.allclose(unmasked[0], weights[0])  # the padding would leak into the other modalities
    with pytest.raises(ValueError):
        model(query, [torch.randn(2, t + 1, d) for t, d in zip(LENGTHS, FEATURE_DIMS)])
