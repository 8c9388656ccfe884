"""BAN for VQA (models/ban.py): padding of the question or the objects is as good as absent, GloVe rows load into
the embedding, every fusion and the counter train end to end, and the model learns answers that need both the
question and the objects."""
import pytest
import torch
from vqa_checks import assert_learns_red_or_blue, assert_padding_is_as_good_as_absent, batch, fit

from crossmodal.data.inputs import Padded
from crossmodal.models.ban import BANArgs, BanGrounding, BanVqa

pytestmark = pytest.mark.usefixtures("one_thread")


def make(answers=3, **changes) -> BanVqa:
    args = dict(embed_dim=8, hidden_dim=12, glimpses=2, count_objects=4, dropout=0.0, map_dropout=0.0,
                classifier_dropout=0.0) | changes
    return BanVqa(BANArgs(**args), 10, answers, {"regions": 5})


@pytest.mark.parametrize("changes", [{}, {"counter": True}, {"fusion": "sum"}, {"fusion": "concat", "counter": True}])
def test_padding_is_as_good_as_absent(changes):
    torch.manual_seed(0)
    assert assert_padding_is_as_good_as_absent(make(**changes).eval()).shape == (2, 3)


def test_glove_rows_load_and_padding_stays_zero():
    model = make()
    matrix = torch.arange(80, dtype=torch.float32).view(10, 8)
    model.load_word_vectors(matrix)
    assert torch.equal(model.word_embed.weight[1:], matrix[1:]) and not model.word_embed.weight[0].any()
    with pytest.raises(ValueError, match="do not fit"):
        model.load_word_vectors(torch.zeros(10, 7))


@pytest.mark.parametrize("changes", [{"counter": True}, {"fusion": "sum"}, {"fusion": "concat"}])
def test_every_parameter_gets_a_gradient(changes):
    torch.manual_seed(0)
    model = make(**changes)
    model(batch()).sum().backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing


def test_learns_answers_that_need_question_and_objects():
    torch.manual_seed(0)
    assert_learns_red_or_blue(make(answers=2))


def test_bad_args_are_refused():
    with pytest.raises(ValueError, match="fusion must be one of"):
        BANArgs(fusion="mean")
    with pytest.raises(ValueError, match="at least|>= 1"):
        BANArgs(glimpses=0)


def grounding_inputs(sentence, sentence_mask, phrases, phrase_mask, regions, region_mask):
    return {"sentence": Padded(sentence, sentence_mask), "phrases": Padded(phrases, phrase_mask),
            "regions": Padded(regions, region_mask)}


def test_grounding_scores_each_phrase_from_the_state_at_its_last_word():
    torch.manual_seed(0)
    model = BanGrounding(BANArgs(embed_dim=8, hidden_dim=12, dropout=0.0, map_dropout=0.0), 10, {"regions": 5}).eval()
    g = torch.Generator().manual_seed(1)
    sentence = torch.randint(2, 10, (2, 6), generator=g)
    mask = lambda rows: torch.tensor(rows, dtype=torch.bool)  # noqa: E731
    inputs = grounding_inputs(sentence, mask([[1] * 6, [1] * 4 + [0] * 2]), torch.tensor([[1, 4, 5], [3, 0, 0]]),
                              mask([[1, 1, 1], [1, 0, 0]]), torch.randn(2, 3, 5, generator=g), mask([[1, 1, 1], [1, 1, 0]]))
    with torch.no_grad():
        logits = model(inputs)
        steps, _ = model.question(model.word_embed(sentence))
        states = model.phrase_states(inputs)
    assert logits.shape == (2, 3, 3)
    assert torch.equal(states[0, 1], steps[0, 4]) and torch.equal(states[1, 0], steps[1, 3])
    assert torch.isinf(logits[1, :, 2]).all() and torch.isinf(logits[1, 1:]).all()  # padded object, phrases
    assert torch.isfinite(logits[0]).all() and torch.isfinite(logits[1, 0, :2]).all()


def test_grounding_learns_which_object_a_phrase_names():
    """Word 2 names the object whose feature 0 is on, word 3 the one whose feature 1 is on; objects in both orders."""
    torch.manual_seed(0)
    model = BanGrounding(BANArgs(embed_dim=8, hidden_dim=12, dropout=0.0, map_dropout=0.0), 10, {"regions": 5})
    sentence = torch.tensor([[2], [3], [2], [3]])
    regions = torch.zeros(4, 2, 5)
    regions[[0, 1], 0, 0] = regions[[0, 1], 1, 1] = 1.0
    regions[[2, 3], 0, 1] = regions[[2, 3], 1, 0] = 1.0
    ones = torch.ones(4, 1, dtype=torch.bool)
    inputs = grounding_inputs(sentence, ones, torch.zeros(4, 1, dtype=torch.long), ones, regions,
                              torch.ones(4, 2, dtype=torch.bool))
    targets = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]], [[0.0, 1.0]], [[1.0, 0.0]]])
    fit(model, inputs, targets, steps=100)
    assert model.eval()(inputs)[:, 0].argmax(1).tolist() == [0, 1, 1, 0]
