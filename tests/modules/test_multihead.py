"""The shared multi-head attention (modules/multihead.py): head split/merge, masks, injected scores, parameter names."""
import math

import pytest
import torch
from torch import nn

from crossmodal.modules.multihead import MultiHeadAttention, head_mask, merge_heads, split_heads

MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=torch.bool)


def test_split_gives_each_head_its_channel_block_and_merge_inverts_it():
    x = torch.arange(2 * 3 * 8.0).view(2, 3, 8)
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2)
    assert torch.equal(heads[1, 2, 0], x[1, 0, 4:6])
    assert torch.equal(merge_heads(heads), x)


def test_head_masks_broadcast_per_key_and_per_query():
    assert head_mask(MASK).shape == (2, 1, 1, 5)
    causal = torch.ones(2, 3, 5, dtype=torch.bool)
    assert head_mask(causal).shape == (2, 1, 3, 5)


def test_default_attention_is_torch_multihead_attention():
    torch.manual_seed(0)
    ours = MultiHeadAttention(8, 2).eval()
    theirs = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.query.weight, ours.kv.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.query.bias, ours.kv.bias]))
        theirs.out_proj.load_state_dict(ours.out.state_dict())
    query, x = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    out, weights = ours(query, *ours.project_kv(x), MASK)
    want, want_weights = theirs(query, x, x, key_padding_mask=~MASK, average_attn_weights=False)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(weights, want_weights)


def test_injected_scores_replace_the_scaled_dot_product():
    def unscaled(q, keys):
        return q @ keys.transpose(-1, -2)

    torch.manual_seed(0)
    att = MultiHeadAttention(8, 2, scores=unscaled, projections=("q", "kv"))
    query, x = torch.randn(2, 1, 8), torch.randn(2, 5, 8)
    out, weights = att(query, *att.project_kv(x), MASK)
    keys, values = att.kv(x).chunk(2, -1)
    q = att.q(query)
    for b in range(2):
        real = MASK[b].nonzero().squeeze(1)
        for h in range(2):
            s = slice(4 * h, 4 * h + 4)
            alpha = torch.softmax(keys[b, real, s] @ q[b, 0, s], 0)  # no 1/sqrt(d)
            torch.testing.assert_close(weights[b, h, 0, real], alpha)
            torch.testing.assert_close(out[b, 0, s], alpha @ values[b, real, s])
    scaled = MultiHeadAttention(8, 2, projections=("q", "kv"))
    scaled.load_state_dict(att.state_dict())
    assert not torch.allclose(scaled(query, *scaled.project_kv(x), MASK)[1], weights)


def test_a_scoring_module_with_parameters_is_part_of_the_model():
    class Bilinear(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.weight = nn.Parameter(torch.eye(d) / math.sqrt(d))

        def forward(self, q, keys):
            return q @ self.weight @ keys.transpose(-1, -2)

    torch.manual_seed(0)
    att = MultiHeadAttention(8, 2, scores=Bilinear(4))
    query, x = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    reference = MultiHeadAttention(8, 2)  # the same weights, scaled dot product: Bilinear starts as that
    reference.load_state_dict({k: v for k, v in att.state_dict().items() if not k.startswith("scores.")})
    torch.testing.assert_close(att(query, *att.project_kv(x), MASK)[0],
                               reference(query, *reference.project_kv(x), MASK)[0])
    assert "scores.weight" in att.state_dict()


def test_projection_names_are_the_state_dict_keys():
    aoa_like = MultiHeadAttention(8, 2, dropout=0.1, projections=("query_proj", "kv_proj"))
    assert list(aoa_like.state_dict()) == ["query_proj.weight", "query_proj.bias", "kv_proj.weight", "kv_proj.bias"]
    assert isinstance(aoa_like.dropout, nn.Dropout)
    vaswani = MultiHeadAttention(8, 2)
    assert [k.split(".")[0] for k in vaswani.state_dict()][::2] == ["query", "kv", "out"]
    assert vaswani.dropout is None and "dropout" not in dict(vaswani.named_modules())
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match="projections"):
        MultiHeadAttention(8, 2, projections=("q",))
