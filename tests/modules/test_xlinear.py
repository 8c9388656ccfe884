"""X-Linear attention block against a loop-based computation of eqs. 2-6, and masking of padded regions."""
import pytest
import torch
import torch.nn.functional as F

from crossmodal.modules.xlinear import XLinearAttention

MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)


def _project(p, x):
    """Linear -> activation -> GroupNorm for one row, written out."""
    y = p.activation(p.linear.weight @ x + p.linear.bias)
    groups, out = p.norm.num_groups, y.numel()
    y = y.view(groups, out // groups)
    y = (y - y.mean(1, keepdim=True)) / torch.sqrt(y.var(1, unbiased=False, keepdim=True) + p.norm.eps)
    return y.reshape(out) * p.norm.weight + p.norm.bias


def _direct(block, query, keys, values, mask):
    """Eqs. 2-6 per image, head and query, looping over the real regions."""
    heads, dim = block.heads, keys.size(-1)
    d = dim // heads
    out = torch.zeros(query.size(0), query.size(1), dim)
    for b in range(query.size(0)):
        real = [i for i in range(keys.size(1)) if mask[b, i]]
        for qi in range(query.size(1)):
            q, u = _project(block.query_key, query[b, qi]), _project(block.query_value, query[b, qi])
            ks = [_project(block.key, keys[b, i]) for i in real]
            vs = [_project(block.value, values[b, i]) for i in real]
            for h in range(heads):
                s = slice(h * d, (h + 1) * d)
                emb = [F.relu(block.embed[0].weight @ (q[s] * k[s]) + block.embed[0].bias) for k in ks]
                scores = torch.stack([block.spatial.weight[0] @ e + block.spatial.bias[0] for e in emb])
                alpha = torch.softmax(scores, 0)
                gate = torch.sigmoid(block.channel.weight @ torch.stack(emb).mean(0) + block.channel.bias)
                out[b, qi, s] = gate * sum(a * (u[s] * v[s]) for a, v in zip(alpha, vs))
    return out


@pytest.mark.parametrize("activation", ["relu", "celu"])
@pytest.mark.parametrize("queries", [1, 3])
def test_block_matches_loop_based_equations(activation, queries):
    torch.manual_seed(0)
    block = XLinearAttention(8, heads=2, query_dim=6, mid_dim=3, activation=activation, groups=2).eval()
    query, keys, values = torch.randn(2, queries, 6), torch.randn(2, 4, 8), torch.randn(2, 4, 8)
    out, weights = block(query, keys, values, MASK)
    torch.testing.assert_close(out, _direct(block, query, keys, values, MASK))
    assert weights.shape == (2, 2, queries, 4) and torch.all(weights[1, :, :, 2:] == 0)
    single, _ = block(query[:, 0], keys, values, MASK)  # a [B, D] query gives [B, D]
    torch.testing.assert_close(single, out[:, 0])


def test_padded_regions_get_no_gradient_and_do_not_matter():
    torch.manual_seed(0)
    block = XLinearAttention(8, heads=2, groups=2).eval()
    query = torch.randn(2, 8)
    keys, values = torch.randn(2, 4, 8, requires_grad=True), torch.randn(2, 4, 8, requires_grad=True)
    out, _ = block(query, keys, values, MASK)
    out.sum().backward()
    for grad in (keys.grad, values.grad):
        assert torch.all(grad[~MASK] == 0) and torch.all(grad[MASK].abs().sum(-1) > 0)
    garbage_k, garbage_v = keys.detach().clone(), values.detach().clone()
    garbage_k[~MASK], garbage_v[~MASK] = 1e3, -1e3
    torch.testing.assert_close(block(query, garbage_k, garbage_v, MASK)[0], out.detach())


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="activation"):
        XLinearAttention(8, heads=2, activation="tanh")
    with pytest.raises(ValueError, match="divisible"):
        XLinearAttention(10, heads=4)
