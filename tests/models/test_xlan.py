"""X-LAN: the stacked X-Linear layer (eqs. 7-8), the encoder and global feature (eq. 10), the decoder step
(section 3.3.3), masking of padded regions, and the behaviour every captioner shows."""
import pytest
import torch
import torch.nn.functional as F
from captioning_checks import assert_beam_one_is_greedy, assert_learns_tiny_task, region_inputs

from crossmodal.decoding.search import beam_search
from crossmodal.models.xlan import XLAN, XLANArgs
from crossmodal.modules.xlinear import XLinearEncoderLayer

MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)


def _update(linear, norm, attended, row):
    return F.layer_norm(F.relu(linear.weight @ torch.cat([attended, row]) + linear.bias) + row, row.shape,
                        norm.weight, norm.bias)


@pytest.mark.parametrize("separate_values", [True, False])
def test_encoder_layer_is_equations_7_and_8(separate_values):
    torch.manual_seed(0)
    layer = XLinearEncoderLayer(8, heads=2, groups=2, separate_values=separate_values).eval()
    query, keys, values = torch.randn(3, 8), torch.randn(3, 5, 8), torch.randn(3, 5, 8)
    attended, new_keys, new_values = layer(query, keys, values, MASK)
    torch.testing.assert_close(attended, layer.attention(query, keys, values, MASK)[0])  # eq. 7
    value_linear = layer.value_update[0] if separate_values else layer.key_update[0]
    value_norm = layer.value_norm if separate_values else layer.key_norm
    value_rows = values if separate_values else keys  # the official code: one tensor for keys and values
    for b in range(3):
        for i in range(5):
            torch.testing.assert_close(new_keys[b, i], _update(layer.key_update[0], layer.key_norm, attended[b],
                                                               keys[b, i]))  # eq. 8
            torch.testing.assert_close(new_values[b, i], _update(value_linear, value_norm, attended[b],
                                                                 value_rows[b, i]))


def _xlan(blocks=2, activation="celu", vocab=7, feature_dim=6):
    args = XLANArgs(embed_dim=16, hidden_dim=16, heads=2, encoder_blocks=blocks, activation=activation, dropout=0.0,
                    feature_dropout=0.0, ctx_dropout=0.0, attention_dropout=0.0, block_dropout=0.0)
    return XLAN(args, vocab, {"regions": feature_dim})


@pytest.mark.parametrize("blocks", [0, 1, 3])
def test_encoder_and_decoder_step_follow_section_3_3(blocks):
    torch.manual_seed(0)
    model = _xlan(blocks).eval()
    feats, words = torch.randn(3, 5, 6), torch.tensor([4, 5, 6])
    h, m, ctx = torch.randn(3, 16), torch.randn(3, 16), torch.randn(3, 16)
    with torch.no_grad():
        logprobs, (h1, m1, ctx1) = model.step(words, (h, m, ctx), model.encode(region_inputs(feats, MASK)))
        regions = model.feature_embed(feats)
        query = torch.stack([regions[b, MASK[b]].mean(0) for b in range(3)])  # v^(0)
        keys = values = regions
        attended = [query]
        for layer in model.encoder:  # v^(m) and the updated keys/values, eqs. 7-8
            query, keys, values = layer(query, keys, values, MASK)
            attended.append(query)
        global_feature = model.global_embed(torch.cat(attended, 1))  # eq. 10
        h_ref, m_ref = model.lstm(torch.cat([model.word_embed(words), global_feature, ctx], 1), (h, m))
        v_d = model.attention(h_ref, values, values, MASK)[0]  # decoder X-Linear over V^(1+M)
        gate_in = model.context(torch.cat([v_d, h_ref], 1))
        ctx_ref = gate_in[:, :16] * torch.sigmoid(gate_in[:, 16:])  # GLU
    for got, want in [(h1, h_ref), (m1, m_ref), (ctx1, ctx_ref), (logprobs, torch.log_softmax(model.logits(ctx_ref), -1))]:
        torch.testing.assert_close(got, want)
    assert len(model.encoder) == blocks and model.global_embed[0].in_features == 16 * (1 + blocks)


def test_padded_regions_get_no_gradient_and_do_not_matter():
    torch.manual_seed(0)
    model = _xlan(3).eval()
    feats = torch.randn(3, 5, 6, requires_grad=True)
    targets = torch.tensor([[4, 5, 6], [5, 4, 0], [6, 0, 0]])
    out = model(region_inputs(feats, MASK), targets)
    out[:, :, 4].sum().backward()
    assert torch.all(feats.grad[~MASK] == 0) and torch.all(feats.grad[MASK].abs().sum(-1) > 0)
    altered = feats.detach().clone()
    altered[~MASK] = 1e3
    torch.testing.assert_close(model(region_inputs(altered, MASK), targets), out.detach())


@pytest.mark.slow
@pytest.mark.parametrize("blocks,activation", [(0, "relu"), (2, "celu")])
def test_xlan_learns_a_tiny_captioning_task(blocks, activation):
    torch.manual_seed(0)
    assert_learns_tiny_task(_xlan(blocks, activation), 6, steps=100)


def test_beam_search_with_one_beam_is_greedy_and_rows_are_independent():
    torch.manual_seed(0)
    model = _xlan(2, vocab=12).eval()
    feats = torch.randn(3, 5, 6)
    assert_beam_one_is_greedy(model, region_inputs(feats, MASK))
    seqs, scores = beam_search(model, region_inputs(feats, MASK), beam_size=3, max_length=6)
    for b in range(3):
        alone, alone_score = beam_search(model, region_inputs(feats[b:b + 1], MASK[b:b + 1]), beam_size=3, max_length=6)
        assert torch.equal(seqs[b:b + 1], alone)
        torch.testing.assert_close(scores[b:b + 1], alone_score)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="activation"):
        XLANArgs(activation="tanh")
    with pytest.raises(ValueError, match="encoder_blocks"):
        XLANArgs(encoder_blocks=-1)
