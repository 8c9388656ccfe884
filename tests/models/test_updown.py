"""Additive attention against a direct computation, masking of padded regions, and Up-Down learning."""
from types import SimpleNamespace

import pytest
import torch
from captioning_checks import assert_learns_tiny_task, region_inputs

from crossmodal.config.training import TrainConfig
from crossmodal.models.registry import build_model
from crossmodal.modules.additive import AdditiveAttention
from crossmodal.tasks.objectives.xe import sequence_loss


def test_additive_attention_matches_direct_computation():
    torch.manual_seed(0)
    att = AdditiveAttention(5, 4, 3)
    query, values = torch.randn(2, 5), torch.randn(2, 6, 4)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    context, weights = att(query, values, mask, att.project_keys(values))
    for b in range(2):
        n = int(mask[b].sum())
        scores = torch.stack([
            att.score.weight[0] @ torch.tanh(att.key_proj.weight @ values[b, i] + att.query_proj.weight @ query[b]
                                             + att.query_proj.bias) + att.score.bias[0]
            for i in range(n)
        ])
        alpha = torch.softmax(scores, 0)
        torch.testing.assert_close(weights[b, :n], alpha)
        torch.testing.assert_close(context[b], (alpha[:, None] * values[b, :n]).sum(0))
    assert torch.all(weights[1, 3:] == 0)


def _updown(vocab=7, feature_dim=6, dropout=0.0):
    variant = SimpleNamespace(model="updown", model_args={"embed_dim": 16, "hidden_dim": 16, "att_hidden_dim": 8,
                                                          "dropout": dropout, "feature_dropout": 0.0})
    return build_model("t", variant, vocab, {"regions": feature_dim})


def test_padded_regions_get_no_weight_and_no_gradient():
    torch.manual_seed(0)
    model = _updown().eval()
    feats = torch.randn(2, 5, 6, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=torch.bool)
    targets = torch.tensor([[4, 5, 6], [5, 4, 0]])
    out = model(region_inputs(feats, mask), targets)
    out[:, :, 4].sum().backward()
    assert torch.all(feats.grad[1, 2:] == 0) and torch.any(feats.grad[1, :2] != 0)
    altered = feats.detach().clone()
    altered[1, 2:] = 1e3  # garbage in padded rows must not change anything
    torch.testing.assert_close(model(region_inputs(altered, mask), targets), out.detach())


@pytest.mark.slow
def test_updown_learns_a_tiny_captioning_task():
    torch.manual_seed(0)
    assert_learns_tiny_task(_updown(), 6)


def test_sequence_loss_counts_words_and_one_eos():
    logprobs = torch.log_softmax(torch.randn(1, 3, 7), -1)
    targets = torch.tensor([[4, 5]])
    expected = -(logprobs[0, 0, 4] + logprobs[0, 1, 5] + logprobs[0, 2, 2]) / 3
    torch.testing.assert_close(sequence_loss(logprobs, targets, 0.0), expected)
    assert TrainConfig().label_smoothing == 0.0
