"""The ETA-Transformer captioner (models/eta.py): teacher forcing equals cached step-by-step decoding, padding of
either input is as good as absent, the attribute words share the decoder's embedding, and the model learns captions
that only the attributes, or only the regions, can tell."""
import pytest
import torch
from captioning_checks import assert_beam_one_is_greedy, fit

from crossmodal.data.inputs import Padded
from crossmodal.decoding.search import greedy_decode
from crossmodal.models.base import Captioner
from crossmodal.models.eta import ETAArgs, ETATransformer

pytestmark = pytest.mark.usefixtures("one_thread")

REGION_MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
ATTRIBUTE_MASK = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0]], dtype=torch.bool)
TARGETS = torch.tensor([[4, 5, 6, 7], [8, 4, 0, 0], [5, 5, 9, 0], [6, 0, 0, 0], [7, 8, 9, 10], [4, 9, 0, 0]])


def make(vocab=12, feature_dim=6, **changes) -> ETATransformer:
    args = dict(dim=32, heads=4, encoder_layers=2, decoder_layers=2, ffn_dim=64, dropout=0.0) | changes
    return ETATransformer(ETAArgs(**args), vocab, {"regions": feature_dim, "attributes": 1})


def inputs(regions, attributes, region_mask=REGION_MASK, attribute_mask=ATTRIBUTE_MASK):
    return {"regions": Padded(regions, region_mask), "attributes": Padded(attributes, attribute_mask)}


def sample(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, 4, 6, generator=g), torch.randint(2, 12, (3, 3), generator=g)


def test_parallel_forward_equals_cached_step_by_step_decoding():
    torch.manual_seed(0)
    model = make().eval()
    batch = inputs(*sample())
    with torch.no_grad():
        parallel = model(batch, TARGETS, seq_per_img=2)
        stepwise = Captioner.forward(model, batch, TARGETS, seq_per_img=2)
    assert parallel.shape == (6, 5, 12)
    torch.testing.assert_close(parallel, stepwise, atol=1e-5, rtol=0)
    assert_beam_one_is_greedy(model, batch)


def test_padding_of_either_input_is_as_good_as_absent():
    torch.manual_seed(0)
    model = make().eval()
    regions, attributes = sample()
    targets = TARGETS[::2]
    with torch.no_grad():
        out = model(inputs(regions, attributes), targets)
        regions2, attributes2 = regions.clone(), attributes.clone()
        regions2[~REGION_MASK] = 1e3
        attributes2[~ATTRIBUTE_MASK] = 11
        torch.testing.assert_close(model(inputs(regions2, attributes2), targets), out)
        for b in range(3):
            n, k = int(REGION_MASK[b].sum()), int(ATTRIBUTE_MASK[b].sum())
            alone = model(inputs(regions[b:b + 1, :n], attributes[b:b + 1, :k], REGION_MASK[b:b + 1, :n],
                                 ATTRIBUTE_MASK[b:b + 1, :k]), targets[b:b + 1])
            torch.testing.assert_close(alone, out[b:b + 1])
        changed = attributes.clone()
        changed[0, 0] = 3  # a real attribute word matters
        assert not torch.allclose(model(inputs(regions, changed), targets)[0], out[0])


def test_attribute_words_share_the_decoders_embedding():
    torch.manual_seed(0)
    model = make()
    regions, _ = sample()
    attributes = torch.full((3, 3), 11)  # word 11 is never a target below
    out = model(inputs(regions, attributes), TARGETS[::2])
    out.sum().backward()
    assert model.word_embed.weight.grad[11].abs().sum() > 0
    assert not any("attribute_embed" in name for name, _ in model.named_parameters())


@pytest.mark.parametrize("signal", ["attributes", "regions"])
def test_learns_captions_that_one_input_alone_tells(signal):
    """Image 0 -> "4 5", image 1 -> "6 4 5": told by its attribute word (regions equal) or by its regions."""
    torch.manual_seed(0)
    model = make(vocab=10, feature_dim=4)
    regions = torch.zeros(2, 3, 4)
    attributes = torch.full((2, 2), 7)
    if signal == "attributes":
        attributes[1, 0] = 8
    else:
        regions[0, 0, 0] = regions[1, 1, 1] = 1.0
    batch = inputs(regions, attributes, torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 2, dtype=torch.bool))
    targets = torch.tensor([[4, 5, 0], [6, 4, 5]])
    fit(model, batch, targets, steps=120)
    seqs, _ = greedy_decode(model.eval(), batch, max_length=4)
    assert seqs[0, :3].tolist() == [4, 5, 0] and seqs[1, :3].tolist() == [6, 4, 5]


def test_bad_args_are_refused():
    with pytest.raises(ValueError, match="activation must be one of"):
        ETAArgs(activation="gelu")
    with pytest.raises(ValueError, match="divisible"):
        ETAArgs(dim=30, heads=4)
