"""The ETA-Transformer captioner (models/eta.py) in each mode (ETA, Parallel, Stacked_v/s, Transformer_v/s) and
without sub-encoder layers: teacher forcing equals cached step-by-step decoding, padding of either input is as good
as absent, future words are invisible, a single-modality mode reads only its input, the attribute rows (id,
probability) are read by id, the attribute words share the decoder's embedding, and every mode learns a toy task."""
import pytest
import torch
from captioning_checks import assert_beam_one_is_greedy, fit

from crossmodal.data.inputs import Padded
from crossmodal.decoding.search import greedy_decode
from crossmodal.models.base import Captioner
from crossmodal.models.eta import ETAArgs, ETATransformer
from crossmodal.modules.sublayers import sinusoid
from crossmodal.tasks.objectives.xe import sequence_loss

pytestmark = pytest.mark.usefixtures("one_thread")

REGION_MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
ATTRIBUTE_MASK = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0]], dtype=torch.bool)
TARGETS = torch.tensor([[4, 5, 6, 7], [8, 4, 0, 0], [5, 5, 9, 0], [6, 0, 0, 0], [7, 8, 9, 10], [4, 9, 0, 0]])


MODES = ["entangled", "parallel", "stacked_visual", "stacked_semantic", "visual", "semantic"]
READS = {"visual": ("regions",), "semantic": ("attributes",)}  # every other mode reads both


def reads(mode):
    return READS.get(mode, ("regions", "attributes"))


def make(vocab=12, feature_dim=6, **changes) -> ETATransformer:
    """A small model built with the feature sizes of only the inputs its mode reads."""
    args = dict(dim=32, heads=4, encoder_layers=2, decoder_layers=2, ffn_dim=64, dropout=0.0) | changes
    dims = {"regions": feature_dim, "attributes": 1}
    return ETATransformer(ETAArgs(**args), vocab, {name: dims[name] for name in reads(args.get("mode", "entangled"))})


def inputs(regions, attributes, region_mask=REGION_MASK, attribute_mask=ATTRIBUTE_MASK, mode="entangled"):
    """The named inputs the mode reads, and only those."""
    given = {"regions": Padded(regions, region_mask), "attributes": Padded(attributes, attribute_mask)}
    return {name: given[name] for name in reads(mode)}


def sample(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, 4, 6, generator=g), torch.randint(2, 12, (3, 3), generator=g)


@pytest.mark.parametrize("encoder_layers", [2, 0])
@pytest.mark.parametrize("mode", MODES)
def test_parallel_forward_equals_cached_step_by_step_decoding(mode, encoder_layers):
    torch.manual_seed(0)
    model = make(mode=mode, encoder_layers=encoder_layers).eval()
    batch = inputs(*sample(), mode=mode)
    with torch.no_grad():
        parallel = model(batch, TARGETS, seq_per_img=2)
        stepwise = Captioner.forward(model, batch, TARGETS, seq_per_img=2)
    assert parallel.shape == (6, 5, 12) and torch.isfinite(parallel).all()
    torch.testing.assert_close(parallel, stepwise, atol=1e-5, rtol=0)
    assert_beam_one_is_greedy(model, batch)


@pytest.mark.parametrize("mode", MODES)
def test_padding_of_either_input_is_as_good_as_absent(mode):
    torch.manual_seed(0)
    model = make(mode=mode).eval()
    regions, attributes = sample()
    targets = TARGETS[::2]
    with torch.no_grad():
        out = model(inputs(regions, attributes, mode=mode), targets)
        regions2, attributes2 = regions.clone(), attributes.clone()
        regions2[~REGION_MASK] = 1e3
        attributes2[~ATTRIBUTE_MASK] = 11
        torch.testing.assert_close(model(inputs(regions2, attributes2, mode=mode), targets), out)
        for b in range(3):
            n, k = int(REGION_MASK[b].sum()), int(ATTRIBUTE_MASK[b].sum())
            alone = model(inputs(regions[b:b + 1, :n], attributes[b:b + 1, :k], REGION_MASK[b:b + 1, :n],
                                 ATTRIBUTE_MASK[b:b + 1, :k], mode=mode), targets[b:b + 1])
            torch.testing.assert_close(alone, out[b:b + 1])
        changed_attributes, changed_regions = attributes.clone(), regions.clone()
        changed_attributes[0, 0] = 3  # a real attribute word matters, where the mode reads attributes
        changed_regions[0, 0] += 1.0  # a real region matters, where the mode reads regions
        for name, changed in [("attributes", (regions, changed_attributes)),
                              ("regions", (changed_regions, attributes))]:
            matters = not torch.allclose(model(inputs(*changed, mode=mode), targets)[0], out[0])
            assert matters == (name in reads(mode)), name


@pytest.mark.parametrize("mode", MODES)
def test_word_t_plus_1_changes_nothing_at_t(mode):
    torch.manual_seed(0)
    model = make(mode=mode).eval()
    batch = inputs(*sample(), mode=mode)
    targets = TARGETS[::2]
    with torch.no_grad():
        out = model(batch, targets)
        for t in range(targets.size(1)):
            changed = targets.clone()
            changed[:, t] = 11  # the input at position t + 1
            out_changed = model(batch, changed)
            assert torch.equal(out_changed[:, :t + 1], out[:, :t + 1])
            assert not torch.allclose(out_changed[:, t + 1], out[:, t + 1])


@pytest.mark.parametrize("mode", ["visual", "semantic"])
def test_single_modality_modes_read_only_their_input(mode):
    """Transformer_v / Transformer_s: built from that input's feature size alone, `INPUTS` names it alone, no
    modules of the other modality exist, and the other input, when given, changes nothing."""
    torch.manual_seed(0)
    model = make(mode=mode).eval()  # input_dims holds only the mode's input
    own = {"visual": "regions", "semantic": "attributes"}[mode]
    assert model.INPUTS == (own,) == ETATransformer.consumes(model.args)
    assert ETATransformer.INPUTS == ("regions", "attributes") == make().INPUTS
    assert (model.region_embed is None, model.visual_encoder is None) == ((mode == "semantic"),) * 2
    assert (model.semantic_encoder is None, model.attribute_dropout is None) == ((mode == "visual"),) * 2
    regions, attributes = sample()
    targets = TARGETS[::2]
    with torch.no_grad():
        out = model(inputs(regions, attributes, mode=mode), targets)
        both = inputs(regions, attributes)  # what a system with both inputs hands it
        torch.testing.assert_close(model(both, targets), out)
        other = "attributes" if own == "regions" else "regions"
        both[other] = Padded(torch.full_like(both[other].values, 5) * 1e3 if other == "regions"
                             else torch.full_like(attributes, 11), both[other].mask)
        torch.testing.assert_close(model(both, targets), out)
        assert_beam_one_is_greedy(model, inputs(regions, attributes, mode=mode))


@pytest.mark.parametrize("mode", ["entangled", "stacked_semantic", "semantic"])
def test_attribute_rows_are_read_by_their_word_id_not_their_probability(mode):
    """The feature set's [B, N, 2] rows (word id, detector probability) give what [B, N] ids give; the
    probability changes nothing."""
    torch.manual_seed(0)
    model = make(mode=mode).eval()
    regions, attributes = sample()
    rows = torch.stack([attributes.float(), torch.rand(attributes.shape)], -1)
    targets = TARGETS[::2]
    with torch.no_grad():
        out = model(inputs(regions, attributes, mode=mode), targets)
        torch.testing.assert_close(model(inputs(regions, rows, mode=mode), targets), out)
        rows[..., 1] = torch.rand(attributes.shape)
        torch.testing.assert_close(model(inputs(regions, rows, mode=mode), targets), out)


@pytest.mark.parametrize("mode", MODES)
def test_without_encoder_layers_the_decoder_attends_to_the_embedded_inputs(mode):
    """Table 4's "- Encoder": encoder_layers 0 builds no sub-encoder layers and the decoder's memory is V^0 / S^0."""
    torch.manual_seed(0)
    model = make(mode=mode, encoder_layers=0).eval()
    regions, attributes = sample()
    with torch.no_grad():
        _, _, memories = model.encode(inputs(regions, attributes, mode=mode))
        v0 = model.region_embed(regions) if model.region_embed is not None else None
        s0 = model.word_embed(attributes) * 32 ** 0.5 if model.semantic_encoder is not None else None
        for layer, memory in zip(model.decoder, memories):
            torch.testing.assert_close(memory, layer.project_memory(v0, s0))
    assert all(len(e) == 0 for e in (model.visual_encoder, model.semantic_encoder) if e is not None)


@pytest.mark.parametrize("mode", MODES)
def test_each_mode_learns_a_toy_task(mode):
    """Two images told apart by both their regions and their attribute word: the loss falls to a tenth within 40
    steps and greedy decoding gives each image its caption."""
    torch.manual_seed(0)
    model = make(vocab=10, feature_dim=4, mode=mode, dim=16, heads=2, encoder_layers=1, decoder_layers=1,
                 ffn_dim=32)
    regions = torch.zeros(2, 3, 4)
    regions[0, 0, 0] = regions[1, 1, 1] = 1.0
    attributes = torch.tensor([[7, 7], [8, 7]])
    batch = inputs(regions, attributes, torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 2, dtype=torch.bool),
                   mode=mode)
    targets = torch.tensor([[4, 5, 0], [6, 4, 5]])
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(40):
        loss = sequence_loss(model(batch, targets), targets, 0.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.1 * losses[0], losses
    seqs, _ = greedy_decode(model.eval(), batch, max_length=4)
    assert seqs[0, :3].tolist() == [4, 5, 0] and seqs[1, :3].tolist() == [6, 4, 5]


def test_attribute_words_share_the_decoders_embedding():
    torch.manual_seed(0)
    model = make()
    regions, _ = sample()
    attributes = torch.full((3, 3), 11)  # word 11 is never a target below
    out = model(inputs(regions, attributes), TARGETS[::2])
    out.sum().backward()
    assert model.word_embed.weight.grad[11].abs().sum() > 0
    assert not any("attribute_embed" in name for name, _ in model.named_parameters())


@pytest.mark.slow
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
    with pytest.raises(ValueError, match="activation must be one of"):
        ETAArgs(activation="gelu", mode="visual")  # validated where no GBC uses it, too
    with pytest.raises(ValueError, match="divisible"):
        ETAArgs(dim=30, heads=4)
    with pytest.raises(ValueError, match="mode must be one of entangled, parallel, stacked_visual, stacked_semantic, "
                                         "visual, semantic, not 'fuse'"):
        ETAArgs(mode="fuse")
    with pytest.raises(ValueError, match="decoder_layers >= 1"):
        ETAArgs(decoder_layers=0)
    with pytest.raises(ValueError, match="encoder_layers must be >= 0"):
        ETAArgs(encoder_layers=-1)
    assert ETAArgs(encoder_layers=0).encoder_layers == 0 and ETAArgs().mode == "entangled"


def test_words_and_attributes_start_at_unit_scale():
    """The shared embedding times sqrt(d), as the decoder's words and as S^0, starts with std ~1 at the default
    profile's width (64; N(0, 1) gave 8 against positions within ±1)."""
    torch.manual_seed(0)
    model = make(vocab=1000, dim=64, heads=8, encoder_layers=0, decoder_layers=1).eval()
    ids = torch.arange(1000)
    s0 = []
    model.attribute_dropout.register_forward_hook(lambda module, args, out: s0.append(out))  # S^0 (dropout off)
    with torch.no_grad():
        x, _, _ = model._word_inputs(ids.unsqueeze(1), 0)  # each word at position 0
        model.encode(inputs(torch.zeros(1, 4, 6), ids.unsqueeze(0), REGION_MASK[:1],
                            torch.ones(1, 1000, dtype=torch.bool)))
    assert 0.95 < (x - sinusoid(torch.zeros(1), 64)).std().item() < 1.05
    assert 0.95 < s0[0].std().item() < 1.05
