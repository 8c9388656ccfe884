"""ETA-Transformer modules (Li et al., ICCV 2019) against the paper's equations written out here with plain tensor
ops and loops over heads: eqs. 2-3 (multi-head), 4-5 (sub-encoder), 7 (causal self-attention), 9-10 (both ETA
pathways), 11-12 (GBC with each activation), 5 again (the FFN after GBC); the ablation modes' decoder layers
(Parallel, Stacked_v/s, Transformer_v/s, §5.4.2) likewise; masks, caching, gradients, parameter counts at the
paper's size and a tiny task that needs both modalities. Float64 where exactness matters."""
import math

import pytest
import torch
from torch import nn

from crossmodal.models.transformer import TransformerArgs, _DecoderLayer
from crossmodal.modules.entangled import (
    DECODER_MODES, GBC_ACTIVATIONS, TABLE6_ACTIVATIONS, EntangledAttention, EntangledDecoderLayer,
    GatedBilateralController, SubEncoderLayer,
)

DIM, HEADS, FFN = 8, 2, 12
VISUAL_MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)  # n_v = 4
SEMANTIC_MASK = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.bool)  # n_s = 3
MODES = sorted(DECODER_MODES)
READS = {"entangled": "VS", "parallel": "VS", "stacked_visual": "VS", "stacked_semantic": "VS", "visual": "V",
         "semantic": "S"}  # the modalities each mode's layer reads, written out


pytestmark = pytest.mark.usefixtures("float64")


def _inputs(seed=0, words=5):
    """Words x [3, words, D], V^N [3, 4, D], S^N [3, 3, D]."""
    torch.manual_seed(seed)
    return torch.randn(3, words, DIM), torch.randn(3, 4, DIM), torch.randn(3, 3, DIM)


def _randomised(module):
    """Random layer-norm gains and biases too, so that a swapped norm shows."""
    torch.manual_seed(1)
    with torch.no_grad():
        for norm in (m for m in module.modules() if isinstance(m, nn.LayerNorm)):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.normal_()
    return module.eval()


def _linear(layer, x, rows=slice(None)):
    return x @ layer.weight[rows].T + layer.bias[rows]


def _layer_norm(norm, x):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def _multihead(attention, query, memory, mask):
    """Eqs. 2-3 head by head and query by query: softmax over the visible keys only (mask [B, N] or [B, Nq, N]).
    The shared class stores W^Q as `query`, [W^K; W^V] as `kv` and W^O as `out`."""
    batch, nq, width = query.shape
    d = width // attention.heads
    outs, weights = [], torch.zeros(batch, attention.heads, nq, memory.size(1))
    for i in range(attention.heads):
        rows = slice(i * d, (i + 1) * d)
        q = _linear(attention.query, query, rows)
        k = _linear(attention.kv, memory, rows)
        v = _linear(attention.kv, memory, slice(width + i * d, width + (i + 1) * d))
        out = torch.zeros(batch, nq, d)
        for b in range(batch):
            for n in range(nq):
                visible = (mask[b] if mask.dim() == 2 else mask[b, n]).nonzero().flatten()
                scores = k[b, visible] @ q[b, n] / math.sqrt(d)
                p = torch.exp(scores - scores.max())
                p = p / p.sum()
                weights[b, i, n, visible] = p
                out[b, n] = p @ v[b, visible]
        outs.append(out)
    return _linear(attention.out, torch.cat(outs, -1)), weights


def _residual(sublayer, query, memory, mask):
    """LN(x + MultiHead(x, M, M)) (dropout off)."""
    out, weights = _multihead(sublayer.attention, query, memory, mask)
    return _layer_norm(sublayer.norm, query + out), weights


def _eta(eta, a, visual, semantic, visual_mask, semantic_mask):
    """Eqs. 9-10 and their mirror: g^(s) from S^N, v from V^N under g^(s); g^(v) from V^N, s from S^N under g^(v)."""
    g_s, w_gs = _residual(eta.visual.injection, a, semantic, semantic_mask)
    v, w_v = _residual(eta.visual.target, g_s, visual, visual_mask)
    g_v, w_gv = _residual(eta.semantic.injection, a, visual, visual_mask)
    s, w_s = _residual(eta.semantic.target, g_v, semantic, semantic_mask)
    return dict(visual=v, semantic=s, semantic_guidance=g_s, visual_guidance=g_v,
                visual_weights=(w_gs, w_v), semantic_weights=(w_gv, w_s))


F_DIRECT = {"identity": lambda x: x, "sigmoid": lambda x: 1 / (1 + torch.exp(-x)),
            "tanh": lambda x: (torch.exp(x) - torch.exp(-x)) / (torch.exp(x) + torch.exp(-x)),
            "relu": lambda x: torch.where(x > 0, x, torch.zeros_like(x))}


def _gbc(gbc, activation, v, s, g_s, g_v, a):
    """Eq. 11: c = sigmoid(W_c [g^(s), g^(v), a]) with W_c's column blocks; eq. 12: e = f(v) c + f(s) (1 - c)."""
    w = gbc.gate.weight
    pre = g_s @ w[:, :DIM].T + g_v @ w[:, DIM:2 * DIM].T + a @ w[:, 2 * DIM:].T + gbc.gate.bias
    c = 1 / (1 + torch.exp(-pre))
    f = F_DIRECT[activation]
    return f(v) * c + f(s) * (1 - c)


def _ffn(ffn, x):
    """Eq. 5 with its residual and layer norm: LN(x + W_2 ReLU(W_1 x + b_1) + b_2)."""
    inner, outer = [m for m in ffn.net if isinstance(m, nn.Linear)]
    return _layer_norm(ffn.norm, x + _linear(outer, _linear(inner, x).clamp(min=0)))


def _self_attention(layer, x):
    """Eq. 7 over the whole sequence, word t seeing words 0..t."""
    causal = torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril().expand(x.size(0), -1, -1)
    return _residual(layer.self_attention, x, x, causal)[0]


def _decoder_layer(layer, x, visual, semantic, activation="identity"):
    """Eqs. 7-12 and the FFN over the whole sequence, word t seeing words 0..t."""
    a = _self_attention(layer, x)
    eta = _eta(layer.entangled, a, visual, semantic, VISUAL_MASK, SEMANTIC_MASK)
    e = _gbc(layer.controller, activation, eta["visual"], eta["semantic"], eta["semantic_guidance"],
             eta["visual_guidance"], a)
    return _ffn(layer.ffn, e)


def _ablation_layer(layer, mode, x, visual, semantic, activation="identity"):
    """§5.4.2's variants of the layer: eq. 7, then the mode's attentions (each LN(q + MultiHead(q, M, M))), then
    the FFN. PA: v = MH(a, V), s = MH(a, S), GBC with [s, v, a] in eq. 11's slots; SA_v: v = MH(MH(a, S), V);
    SA_s: s = MH(MH(a, V), S); Transformer_v/s: one MH(a, V) / MH(a, S)."""
    a = _self_attention(layer, x)
    eta = layer.entangled
    if mode == "parallel":
        v, _ = _residual(eta.visual.target, a, visual, VISUAL_MASK)
        s, _ = _residual(eta.semantic.target, a, semantic, SEMANTIC_MASK)
        e = _gbc(layer.controller, activation, v, s, s, v, a)
    elif mode == "stacked_visual":
        g_s, _ = _residual(eta.visual.injection, a, semantic, SEMANTIC_MASK)
        e, _ = _residual(eta.visual.target, g_s, visual, VISUAL_MASK)
    elif mode == "stacked_semantic":
        g_v, _ = _residual(eta.semantic.injection, a, visual, VISUAL_MASK)
        e, _ = _residual(eta.semantic.target, g_v, semantic, SEMANTIC_MASK)
    elif mode == "visual":
        e, _ = _residual(eta.visual.target, a, visual, VISUAL_MASK)
    else:
        assert mode == "semantic"
        e, _ = _residual(eta.semantic.target, a, semantic, SEMANTIC_MASK)
    return _ffn(layer.ffn, e)


def _memory_and_masks(layer, mode, visual, semantic):
    """The layer's memory and masks, with None for the modality the mode does not read."""
    visual, semantic = (m if key in READS[mode] else None for key, m in zip("VS", (visual, semantic)))
    masks = (VISUAL_MASK if visual is not None else None, SEMANTIC_MASK if semantic is not None else None)
    return layer.project_memory(visual, semantic), *masks


@pytest.mark.parametrize("pathway", ["visual", "semantic"])
def test_each_eta_pathway_matches_eqs_9_and_10_by_hand(pathway):
    """The visual pathway (semantic-guided attention over regions) and the semantic pathway (visual-guided
    attention over attribute words), outputs, guidances and all four weight tensors."""
    a, visual, semantic = _inputs()
    eta = _randomised(EntangledAttention(DIM, HEADS, dropout=0.0))
    got = eta(a, eta.project_memory(visual, semantic), VISUAL_MASK, SEMANTIC_MASK)
    want = _eta(eta, a, visual, semantic, VISUAL_MASK, SEMANTIC_MASK)
    guidance = {"visual": "semantic_guidance", "semantic": "visual_guidance"}[pathway]
    for field in (pathway, guidance):
        torch.testing.assert_close(getattr(got, field), want[field])
    for got_w, want_w in zip(getattr(got, f"{pathway}_weights"), want[f"{pathway}_weights"]):
        torch.testing.assert_close(got_w, want_w)


@pytest.mark.parametrize("activation", sorted(GBC_ACTIVATIONS))
def test_gbc_matches_eqs_11_and_12_for_each_activation(activation):
    torch.manual_seed(2)
    v, s, g_s, g_v, a = (torch.randn(3, 5, DIM) for _ in range(5))
    gbc = GatedBilateralController(DIM, activation)
    torch.testing.assert_close(gbc(v, s, g_s, g_v, a), _gbc(gbc, activation, v, s, g_s, g_v, a))


def test_gbc_rejects_an_unknown_activation_and_table6_names_the_paper_rows():
    with pytest.raises(ValueError, match="identity, sigmoid, tanh, relu.*'gelu'"):
        GatedBilateralController(DIM, "gelu")
    assert set(TABLE6_ACTIVATIONS.values()) == set(GBC_ACTIVATIONS)
    assert TABLE6_ACTIVATIONS["Linear"] == "identity"
    assert isinstance(EntangledDecoderLayer(DIM, HEADS, FFN).controller.activation, nn.Identity)  # paper default


@pytest.mark.parametrize("activation", ["identity", "relu"])
def test_decoder_layer_matches_eqs_7_to_12_and_the_ffn_by_hand(activation):
    x, visual, semantic = _inputs()
    layer = _randomised(EntangledDecoderLayer(DIM, HEADS, FFN, dropout=0.0, activation=activation))
    got, _ = layer(x, None, layer.project_memory(visual, semantic), VISUAL_MASK, SEMANTIC_MASK)
    torch.testing.assert_close(got, _decoder_layer(layer, x, visual, semantic, activation))


def test_sub_encoder_layer_is_eqs_4_and_5_with_post_ln_residuals():
    _, visual, _ = _inputs()
    layer = _randomised(SubEncoderLayer(DIM, HEADS, FFN, dropout=0.0))
    m, _ = _residual(layer, visual, visual, VISUAL_MASK)  # the encoder layer's W^Q.. are `attention`, LN `norm`
    want = _ffn(layer.ffn, m)
    got = layer(visual, VISUAL_MASK)
    torch.testing.assert_close(got[VISUAL_MASK], want[VISUAL_MASK])


@pytest.mark.parametrize("mode", MODES)
def test_padded_regions_and_attribute_words_get_exactly_zero_weight_and_change_nothing(mode):
    x, visual, semantic = _inputs()
    layer = _randomised(EntangledDecoderLayer(DIM, HEADS, FFN, dropout=0.0, mode=mode))
    garbage_v = torch.where(VISUAL_MASK[..., None], visual, 1e3 * torch.randn_like(visual))
    garbage_s = torch.where(SEMANTIC_MASK[..., None], semantic, 1e3 * torch.randn_like(semantic))
    out, _ = layer(x, None, *_memory_and_masks(layer, mode, visual, semantic))
    memory, visual_mask, semantic_mask = _memory_and_masks(layer, mode, garbage_v, garbage_s)
    out_garbage, _ = layer(x, None, memory, visual_mask, semantic_mask)
    assert torch.equal(out, out_garbage)
    a = torch.randn(3, 5, DIM)
    eta = layer.entangled(a, memory, visual_mask, semantic_mask)
    over = {"S": SEMANTIC_MASK, "V": VISUAL_MASK}
    checked = ""
    for pathway_weights, modalities in [(eta.visual_weights, "SV"), (eta.semantic_weights, "VS")]:
        for weights, modality in zip(pathway_weights or (None, None), modalities):
            if weights is None:
                continue
            checked += modality
            hidden = ~over[modality][:, None, None, :].expand_as(weights)
            assert (weights[hidden] == 0).all() and weights[~hidden].gt(0).all()
            torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    # the attentions each mode has: ETA four, PA two, SA two (over both), Transformer_v/s one
    assert sorted(checked) == sorted({"entangled": "SVVS", "parallel": "VS", "stacked_visual": "SV",
                                      "stacked_semantic": "VS", "visual": "V", "semantic": "S"}[mode])


@pytest.mark.parametrize("mode", MODES)
def test_future_words_are_invisible(mode):
    x, visual, semantic = _inputs(words=6)
    layer = _randomised(EntangledDecoderLayer(DIM, HEADS, FFN, dropout=0.0, mode=mode))
    memory = _memory_and_masks(layer, mode, visual, semantic)
    out, _ = layer(x, None, *memory)
    for t in range(5):
        changed = x.clone()
        changed[:, t + 1:] = torch.randn(3, 5 - t, DIM)
        out_changed, _ = layer(changed, None, *memory)
        assert torch.equal(out[:, :t + 1], out_changed[:, :t + 1])
        assert not torch.allclose(out[:, t + 1:], out_changed[:, t + 1:])


@pytest.mark.parametrize("mode", MODES)
def test_full_sequence_equals_step_by_step_decoding_with_the_cache(mode):
    """Two stacked layers: teacher forcing over all words at once equals feeding one word (then two) at a time."""
    x, visual, semantic = _inputs(words=6)
    layers = [_randomised(EntangledDecoderLayer(DIM, HEADS, FFN, dropout=0.0, mode=mode)) for _ in range(2)]
    memories = [_memory_and_masks(layer, mode, visual, semantic) for layer in layers]

    def run(chunk, caches):
        new_caches = []
        for layer, memory, cache in zip(layers, memories, caches):
            chunk, cache = layer(chunk, cache, *memory)
            new_caches.append(cache)
        return chunk, new_caches

    full, full_caches = run(x, [None, None])
    caches, steps = [None, None], []
    for start, stop in [(0, 1), (1, 2), (2, 4), (4, 5), (5, 6)]:
        out, caches = run(x[:, start:stop], caches)
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps, 1), full)
    for (keys, values), (full_keys, full_values) in zip(caches, full_caches):
        assert keys.shape == (3, HEADS, 6, DIM // HEADS)
        torch.testing.assert_close((keys, values), (full_keys, full_values))


@pytest.mark.parametrize("mode, activation", [("entangled", a) for a in sorted(GBC_ACTIVATIONS)]
                         + [(m, "identity") for m in MODES if m != "entangled"])
def test_gradients_reach_every_parameter(mode, activation):
    x, visual, semantic = _inputs()
    encoders = {key: SubEncoderLayer(DIM, HEADS, FFN, dropout=0.0) for key in READS[mode]}
    layer = EntangledDecoderLayer(DIM, HEADS, FFN, dropout=0.0, activation=activation, mode=mode)
    memory = _memory_and_masks(layer, mode, encoders["V"](visual, VISUAL_MASK) if "V" in encoders else None,
                               encoders["S"](semantic, SEMANTIC_MASK) if "S" in encoders else None)
    out, _ = layer(x, None, *memory)
    (out * torch.randn_like(out)).sum().backward()
    for module in (layer, *encoders.values()):
        for name, param in module.named_parameters():
            assert param.grad is not None and param.grad.abs().sum() > 0, name


@pytest.mark.parametrize("mode, attentions, gbc", [("entangled", 5, 1), ("parallel", 3, 1), ("stacked_visual", 3, 0),
                                                   ("stacked_semantic", 3, 0), ("visual", 2, 0), ("semantic", 2, 0)])
def test_parameter_count_at_the_paper_size(mode, attentions, gbc):
    """d = 512, h = 8, d_m = 2048: multi-heads of 4 (d^2 + d) with a layer norm (2d) each (ETA: eq. 7 and two
    per pathway; PA: eq. 7 and one per pathway; SA: eq. 7 and one pathway's two; Transformer_v/s: eq. 7 and one
    cross-attention), W_c of 3d^2 + d where GBC exists, the FFN's 2 d d_m + d_m + d with its layer norm."""
    torch.set_default_dtype(torch.float32)
    d, d_m = 512, 2048
    layer = EntangledDecoderLayer(d, 8, d_m, mode=mode)
    count = sum(p.numel() for p in layer.parameters())
    assert count == attentions * (4 * (d * d + d) + 2 * d) + gbc * (3 * d * d + d) + (2 * d * d_m + d_m + d + 2 * d)
    assert (layer.controller is not None) == bool(gbc)
    if mode == "entangled":
        assert count == 8_145_920
    if mode == "visual":  # Transformer_v's layer is the repository Transformer's decoder layer, size for size
        vaswani = _DecoderLayer(TransformerArgs(dim=d, heads=8, ffn_dim=d_m))
        assert count == sum(p.numel() for p in vaswani.parameters())


@pytest.mark.parametrize("mode, activation", [("parallel", "identity"), ("parallel", "relu"),
                                              ("stacked_visual", "identity"), ("stacked_semantic", "identity"),
                                              ("visual", "identity"), ("semantic", "identity")])
def test_ablation_decoder_layers_match_their_attentions_by_hand(mode, activation):
    """PA, SA_v, SA_s, Transformer_v/s (§5.4.2): the layer equals eq. 7, the mode's attentions and the FFN written
    out with loops over heads from the layer's own weights."""
    x, visual, semantic = _inputs()
    layer = _randomised(EntangledDecoderLayer(DIM, HEADS, FFN, dropout=0.0, activation=activation, mode=mode))
    got, _ = layer(x, None, *_memory_and_masks(layer, mode, visual, semantic))
    torch.testing.assert_close(got, _ablation_layer(layer, mode, x, visual, semantic, activation))


@pytest.mark.parametrize("activation", sorted(GBC_ACTIVATIONS))
def test_parallel_gbc_gates_v_and_s_with_s_v_a(activation):
    """PA's e_t (the FFN's input) = f(v) c + f(s) (1 - c), c = sigmoid(W_c [s, v, a]): v = MH(a, V^N), s = MH(a, S^N)
    fill eq. 11's g^(s), g^(v) slots; the other order would give another e."""
    x, visual, semantic = _inputs()
    layer = _randomised(EntangledDecoderLayer(DIM, HEADS, FFN, dropout=0.0, activation=activation, mode="parallel"))
    with torch.no_grad():
        layer.controller.gate.weight.normal_(0.0, 1.0)
    seen = []
    layer.ffn.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    layer(x, None, layer.project_memory(visual, semantic), VISUAL_MASK, SEMANTIC_MASK)
    a = _self_attention(layer, x)
    v, _ = _residual(layer.entangled.visual.target, a, visual, VISUAL_MASK)
    s, _ = _residual(layer.entangled.semantic.target, a, semantic, SEMANTIC_MASK)
    w, b, f = layer.controller.gate.weight, layer.controller.gate.bias, F_DIRECT[activation]

    def e(first, second):
        c = 1 / (1 + torch.exp(-(first @ w[:, :DIM].T + second @ w[:, DIM:2 * DIM].T + a @ w[:, 2 * DIM:].T + b)))
        return f(v) * c + f(s) * (1 - c)

    torch.testing.assert_close(seen[0], e(s, v))
    assert not torch.allclose(seen[0], e(v, s))


def test_transformer_v_layer_is_the_repository_transformers_decoder_layer():
    """The "visual" layer with a Vaswani decoder layer's weights (`models/transformer.py`) gives its outputs."""
    x, visual, _ = _inputs()
    layer = _randomised(EntangledDecoderLayer(DIM, HEADS, FFN, dropout=0.0, mode="visual"))
    vaswani = _DecoderLayer(TransformerArgs(dim=DIM, heads=HEADS, ffn_dim=FFN, dropout=0.0)).eval()
    names = {"self_attention.attention.": "self_attention.", "self_attention.norm.": "self_norm.",
             "entangled.visual.target.attention.": "cross_attention.", "entangled.visual.target.norm.": "cross_norm.",
             "ffn.": "ffn."}
    state = {}
    for key, value in layer.state_dict().items():
        prefix = next(p for p in names if key.startswith(p))
        state[names[prefix] + key[len(prefix):]] = value
    vaswani.load_state_dict(state)
    empty = torch.zeros(3, HEADS, 0, DIM // HEADS)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    want, _ = vaswani(x, (empty, empty), vaswani.cross_attention.project_kv(visual), VISUAL_MASK, causal)
    got, _ = layer(x, None, layer.project_memory(visual, None), VISUAL_MASK, None)
    torch.testing.assert_close(got, want)


def test_modes_build_only_the_attentions_they_need_and_refuse_unknown_ones():
    built = {mode: EntangledDecoderLayer(DIM, HEADS, FFN, mode=mode) for mode in MODES}
    for mode, layer in built.items():
        eta = layer.entangled
        pathways = "".join(key for key, p in zip("VS", (eta.visual, eta.semantic)) if p is not None)
        injects = {p.injection is not None for p in (eta.visual, eta.semantic) if p is not None}
        assert (pathways, injects, layer.controller is not None) == {
            "entangled": ("VS", {True}, True), "parallel": ("VS", {False}, True),
            "stacked_visual": ("V", {True}, False), "stacked_semantic": ("S", {True}, False),
            "visual": ("V", {False}, False), "semantic": ("S", {False}, False)}[mode]
    with pytest.raises(ValueError, match="mode must be one of entangled, parallel.*'late'"):
        EntangledDecoderLayer(DIM, HEADS, FFN, mode="late")
    with pytest.raises(ValueError, match="activation must be one of"):
        EntangledDecoderLayer(DIM, HEADS, FFN, activation="gelu", mode="visual")  # validated without GBC too


class _Toy(nn.Module):
    """Regions (one-hot class features) -> Linear -> V^N; attribute words -> embedding -> S^N (shared with the
    <bos> word, as §5.2 shares them); one ETA decoder layer on <bos>; a classifier."""

    def __init__(self, classes, dim=32):
        super().__init__()
        self.regions = nn.Linear(classes, dim)
        self.words = nn.Embedding(classes + 1, dim)  # attribute words 0..K-1, <bos> = K
        self.layer = EntangledDecoderLayer(dim, 4, 64, dropout=0.0)
        self.logits = nn.Linear(dim, classes)

    def forward(self, regions, region_mask, attributes, attribute_mask, visual=True, semantic=True):
        memory = self.layer.project_memory(self.regions(regions) * visual, self.words(attributes) * semantic)
        bos = self.words(torch.full((regions.size(0), 1), self.words.num_embeddings - 1))
        return self.logits(self.layer(bos, None, memory, region_mask, attribute_mask)[0][:, 0])


def _toy_batch(classes, generator):
    """Every (region class c, attribute a) pair 4 times; target (c + a) mod K, so either input alone predicts the
    target with chance accuracy 1/K. 1-3 real regions of class c and 1-2 real attribute slots holding a; the
    padded slots hold other classes and words."""
    c, a = torch.cartesian_prod(torch.arange(classes), torch.arange(classes)).repeat(4, 1).T
    n = c.numel()
    region_mask = torch.arange(3) < torch.randint(1, 4, (n, 1), generator=generator)
    attribute_mask = torch.arange(2) < torch.randint(1, 3, (n, 1), generator=generator)
    region_class = torch.where(region_mask, c[:, None], torch.randint(0, classes, (n, 3), generator=generator))
    attributes = torch.where(attribute_mask, a[:, None], torch.randint(0, classes, (n, 2), generator=generator))
    regions = nn.functional.one_hot(region_class, classes).float()
    return (regions, region_mask, attributes, attribute_mask), (c + a) % classes


@pytest.mark.slow
def test_tiny_task_needs_both_visual_and_semantic_inputs():
    torch.set_default_dtype(torch.float32)
    classes = 4
    generator = torch.Generator().manual_seed(0)
    accuracy = {}
    for use in [(True, True), (True, False), (False, True)]:
        torch.manual_seed(0)
        model = _Toy(classes)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        for _ in range(200):
            inputs, target = _toy_batch(classes, generator)
            loss = nn.functional.cross_entropy(model(*inputs, *use), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        inputs, target = _toy_batch(classes, generator)
        with torch.no_grad():
            accuracy[use] = (model(*inputs, *use).argmax(-1) == target).float().mean().item()
    assert accuracy[True, True] > 0.95, accuracy
    assert accuracy[True, False] < 0.45 and accuracy[False, True] < 0.45, accuracy
