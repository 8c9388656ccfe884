"""Teney et al.'s Bottom-Up VQA model (models/bottomup_vqa.py), BAN's "Bottom-Up" row: its equations against a direct
computation, padding as good as absent, a gradient for every parameter, and a model that learns answers needing
both the question and the objects."""
import pytest
import torch

from crossmodal.models.bottomup_vqa import BottomUpArgs, BottomUpVqa
from vqa_checks import assert_learns_red_or_blue, assert_padding_is_as_good_as_absent, batch

pytestmark = pytest.mark.usefixtures("one_thread")


def make(answers=3, **changes) -> BottomUpVqa:
    return BottomUpVqa(BottomUpArgs(**(dict(embed_dim=8, hidden_dim=12) | changes)), 10, answers, {"regions": 5})


def gated(layer, x):
    return torch.tanh(x @ layer.value.weight.T + layer.value.bias) * torch.sigmoid(x @ layer.gate.weight.T +
                                                                                  layer.gate.bias)


@pytest.mark.usefixtures("float64")
def test_logits_and_attention_equal_the_papers_equations_computed_object_by_object():
    torch.manual_seed(0)
    model = make().double().eval()
    inputs = batch()
    logits, alpha = model.attend(inputs)
    for b in range(2):
        length = int(inputs["question"].mask[b].sum())
        _, h = model.question(model.word_embed(inputs["question"].values[b:b + 1, :length]))
        q = h[0, 0]  # the GRU's state after the last real word
        objects = [inputs["regions"].values[b, i] for i in range(3) if inputs["regions"].mask[b, i]]
        v = [x / x.norm() for x in objects]  # L2-normalised
        a = torch.stack([model.attention_score.weight[0] @ gated(model.attention, torch.cat([x, q])) for x in v])
        weights = torch.softmax(a, 0)
        attended = sum(w * x for w, x in zip(weights, v))
        joint = gated(model.question_proj, q) * gated(model.image_proj, attended)
        expected = model.classifier.weight @ gated(model.output, joint) + model.classifier.bias
        torch.testing.assert_close(logits[b], expected)
        torch.testing.assert_close(alpha[b, :len(v)], weights)
        assert not alpha[b, len(v):].any()


def test_padding_is_as_good_as_absent():
    torch.manual_seed(0)
    assert_padding_is_as_good_as_absent(make().eval())


def test_every_parameter_gets_a_gradient():
    torch.manual_seed(0)
    model = make()
    model(batch()).sum().backward()
    assert not [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]


def test_learns_answers_that_need_question_and_objects():
    """BAN's toy task (vqa_checks.red_or_blue): the answer needs the question word and the object's colour."""
    torch.manual_seed(0)
    assert_learns_red_or_blue(make(answers=2))


def test_bad_args_are_refused():
    with pytest.raises(ValueError, match=">= 1"):
        BottomUpArgs(hidden_dim=0)
