"""Transformer and X-Transformer: parallel teacher forcing equals cached step-by-step decoding, masking, causality,
beam search over the caches; the Transformer's layers against torch's, the X-Transformer's against its equations."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from captioning_checks import assert_beam_one_is_greedy, assert_learns_tiny_task, region_inputs

from crossmodal.data.captions import EOS
from crossmodal.decoding.search import beam_search
from crossmodal.models.base import Captioner
from crossmodal.models.transformer import Transformer, TransformerArgs, scaled_word_embedding
from crossmodal.models.xtransformer import XDecoderLayer, XTransformer, XTransformerArgs
from crossmodal.modules.sublayers import causal_mask, sinusoid

MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]], dtype=torch.bool)
TARGETS = torch.tensor([[4, 5, 6, 7], [8, 4, 0, 0], [5, 5, 9, 0], [6, 0, 0, 0], [7, 8, 9, 10], [4, 9, 0, 0]])
SIZES = dict(dim=32, heads=4, encoder_layers=2, decoder_layers=2, ffn_dim=64)


def _transformer(vocab=12, feature_dim=6):
    return Transformer(TransformerArgs(**SIZES, dropout=0.0), vocab, {"regions": feature_dim})


def _xargs():
    return XTransformerArgs(**SIZES, feature_dropout=0.0, word_dropout=0.0, dropout=0.0, attention_dropout=0.0,
                            update_dropout=0.0, ffn_dropout=0.0, output_dropout=0.0)


def _xtransformer(vocab=12, feature_dim=6):
    return XTransformer(_xargs(), vocab, {"regions": feature_dim})


MODELS = [pytest.param(_transformer, id="transformer"), pytest.param(_xtransformer, id="xtransformer")]


@pytest.mark.parametrize("make", MODELS)
def test_parallel_forward_equals_cached_step_by_step_decoding(make):
    torch.manual_seed(0)
    model = make().eval()
    feats = torch.randn(3, 5, 6)
    with torch.no_grad():
        parallel = model(region_inputs(feats, MASK), TARGETS, seq_per_img=2)
        stepwise = Captioner.forward(model, region_inputs(feats, MASK), TARGETS, seq_per_img=2)
    assert parallel.shape == (6, 5, 12)
    torch.testing.assert_close(parallel, stepwise, atol=1e-5, rtol=0)


@pytest.mark.parametrize("make", MODELS)
def test_scheduled_sampling_in_training_falls_back_to_the_step_loop(make):
    torch.manual_seed(0)
    model = make().train()
    feats = torch.randn(3, 5, 6)
    inputs = region_inputs(feats, MASK)
    got = model(inputs, TARGETS, 2, ss_prob=0.5, generator=torch.Generator().manual_seed(1))
    want = Captioner.forward(model, inputs, TARGETS, 2, ss_prob=0.5, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert not torch.allclose(got, model(inputs, TARGETS, 2))  # sampled words were fed back


@pytest.mark.parametrize("make", MODELS)
def test_padded_regions_get_no_gradient_and_do_not_matter(make):
    torch.manual_seed(0)
    model = make().eval()
    feats = torch.randn(3, 5, 6, requires_grad=True)
    targets = TARGETS[::2]
    out = model(region_inputs(feats, MASK), targets)
    assert torch.isfinite(out).all()
    out[:, :, 4].sum().backward()
    assert torch.all(feats.grad[~MASK] == 0) and torch.all(feats.grad[MASK].abs().sum(-1) > 0)
    altered = feats.detach().clone()
    altered[~MASK] = 1e3
    torch.testing.assert_close(model(region_inputs(altered, MASK), targets), out.detach())
    for b in range(3):  # an image alone with only its real regions: padding is as good as absent
        n = int(MASK[b].sum())
        alone = model(region_inputs(feats[b:b + 1, :n].detach(), MASK[b:b + 1, :n]), targets[b:b + 1])
        torch.testing.assert_close(alone, out[b:b + 1].detach())


@pytest.mark.parametrize("make", MODELS)
def test_later_words_do_not_change_earlier_positions(make):
    torch.manual_seed(0)
    model = make().eval()
    feats = torch.randn(3, 5, 6)
    changed = TARGETS.clone()
    changed[:, 2] = 11  # the input at position 3
    with torch.no_grad():
        inputs = region_inputs(feats, MASK)
        out, out_changed = model(inputs, TARGETS, 2), model(inputs, changed, 2)
    torch.testing.assert_close(out_changed[:, :3], out[:, :3])
    assert (out_changed[:, 3] - out[:, 3]).abs().amax(-1).min() > 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("make", MODELS)
def test_learns_the_tiny_task(make):
    torch.manual_seed(0)
    assert_learns_tiny_task(make(feature_dim=4), 4)


@pytest.mark.parametrize("make", MODELS)
def test_beam_search_over_the_caches_is_consistent(make):
    torch.manual_seed(0)
    model = make().eval()
    feats = torch.randn(3, 5, 6)
    inputs = region_inputs(feats, MASK)
    assert_beam_one_is_greedy(model, inputs)
    seqs, scores = beam_search(model, inputs, beam_size=3, max_length=6)
    with torch.no_grad():  # rescore the chosen captions by teacher forcing: reordered caches must not mix beams
        logprobs = model(inputs, seqs)
    lengths = (seqs > 0).sum(1)
    for b in range(3):
        n = int(lengths[b])
        rescored = logprobs[b, torch.arange(n), seqs[b, :n]].sum() + (logprobs[b, n, EOS] if n < 6 else 0.0)
        torch.testing.assert_close(scores[b], rescored)
        alone, alone_score = beam_search(model, region_inputs(feats[b:b + 1], MASK[b:b + 1]), beam_size=3, max_length=6)
        assert torch.equal(seqs[b:b + 1], alone)
        torch.testing.assert_close(scores[b:b + 1], alone_score)


def _copy_attention(ours, theirs: nn.MultiheadAttention):
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.query.weight, ours.kv.weight]))  # rows: W^Q, W^K, W^V
        theirs.in_proj_bias.copy_(torch.cat([ours.query.bias, ours.kv.bias]))
        theirs.out_proj.load_state_dict(ours.out.state_dict())


def test_transformer_layers_are_torch_post_ln_transformer_layers():
    """Vaswani's layers as torch builds them (post-LN, ReLU FFN), given our weights: padding and causal masks."""
    torch.manual_seed(0)
    model = _transformer().eval()
    ours_enc, ours_dec = model.encoder[0], model.decoder[0]
    enc = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
    dec = nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
    _copy_attention(ours_enc.attention, enc.self_attn)
    _copy_attention(ours_dec.self_attention, dec.self_attn)
    _copy_attention(ours_dec.cross_attention, dec.multihead_attn)
    for ffn, ref in [(ours_enc.ffn, enc), (ours_dec.ffn, dec)]:
        ref.linear1.load_state_dict(ffn.net[0].state_dict())
        ref.linear2.load_state_dict(ffn.net[3].state_dict())
    for ours, theirs in [(ours_enc.norm, enc.norm1), (ours_enc.ffn.norm, enc.norm2), (ours_dec.self_norm, dec.norm1),
                         (ours_dec.cross_norm, dec.norm2), (ours_dec.ffn.norm, dec.norm3)]:
        theirs.load_state_dict(ours.state_dict())
    regions, words = torch.randn(3, 5, 32), torch.randn(3, 4, 32)
    with torch.no_grad():
        encoded = ours_enc(regions, MASK)
        torch.testing.assert_close(encoded[MASK], enc(regions, src_key_padding_mask=~MASK)[MASK])
        empty = torch.zeros(3, 4, 0, 8)
        got, _ = ours_dec(words, (empty, empty), ours_dec.cross_attention.project_kv(encoded), MASK,
                          causal_mask(4, 0, "cpu"))
        want = dec(words, encoded, tgt_mask=~causal_mask(4, 0, "cpu"), memory_key_padding_mask=~MASK)
        torch.testing.assert_close(got, want)


def _ln(x, norm):
    return F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias)


def test_x_decoder_layer_follows_its_equations():
    """h_t = x_t + XLin(g_t; x_<=t), g'_t = LN(h_t + XLin(LN(h_t); regions)),
    x'_t = FFN(LN(ReLU(W_u [g'_t; x_t]) + x_t)), FFN(z) = LN(z + W_2 ReLU(W_1 z))."""
    torch.manual_seed(0)
    layer = XDecoderLayer(_xargs(), last=False).eval()
    query, x, regions = torch.randn(3, 4, 32), torch.randn(3, 4, 32), torch.randn(3, 5, 32)
    memory = layer.cross_attention.project_kv(regions, regions)
    empty = torch.zeros(3, 4, 0, 8)
    with torch.no_grad():
        got_query, got_x, (keys, values) = layer(query, x, (empty, empty), memory, MASK, causal_mask(4, 0, "cpu"))
        everywhere = torch.ones(3, 5, dtype=torch.bool)
        for t in range(4):
            seen = x[:, :t + 1]
            h = x[:, t] + layer.word_attention(query[:, t], seen, seen, everywhere[:, :t + 1])[0]
            g = _ln(h + layer.cross_attention(_ln(h, layer.cross_norm), regions, regions, MASK)[0], layer.query_norm)
            update = layer.word_update[0]
            z = _ln(F.relu(F.linear(torch.cat([g, x[:, t]], -1), update.weight, update.bias)) + x[:, t],
                    layer.word_norm)
            w1, w2 = layer.ffn.net[0], layer.ffn.net[3]
            ffn = F.linear(F.relu(F.linear(z, w1.weight, w1.bias)), w2.weight, w2.bias)
            torch.testing.assert_close(got_query[:, t], g)
            torch.testing.assert_close(got_x[:, t], _ln(z + ffn, layer.ffn.norm))
        want_keys, want_values = layer.word_attention.project_kv(x, x)
        torch.testing.assert_close(keys, want_keys)
        torch.testing.assert_close(values, want_values)


def test_x_transformer_decoder_input_first_query_and_output_follow_the_official_code():
    """x_t = LN(sqrt(D) E w_t + PE_t), g^0_t = CELU-LN(W_1 g) * CELU-LN(W_2 mean_{s<=t} x_s), with g the
    encoder's LN(W_g [g^0; ...; g^M]); log p_t = log_softmax(W_o LN(GLU(W_p [g^0_t; ...; g^L_t])))."""
    torch.manual_seed(0)
    model = _xtransformer().eval()
    feats, words = torch.randn(3, 5, 6), torch.tensor([[1, 4, 5, 6], [1, 7, 0, 0], [1, 8, 9, 4]])
    seen = []
    hooks = [layer.register_forward_hook(lambda m, args, out: seen.append((args, out))) for layer in model.decoder]
    with torch.no_grad():
        encoded = model.encode(region_inputs(feats, MASK))
        logprobs, _ = model._decode(words, model.init_state(encoded, 3), encoded)
        for hook in hooks:
            hook.remove()
        x = model.feature_embed(feats)
        queries = [torch.stack([x[b, MASK[b]].mean(0) for b in range(3)])]  # g^0: mean of the real regions
        for layer, ffn in zip(model.encoder, model.encoder_ffns):
            query, x, _ = layer(queries[-1], x, x, MASK)
            queries.append(query)
            x = ffn(x)
        image = model.image_gate(_ln(model.global_proj[0](torch.cat(queries, -1)), model.global_proj[1]))
        pe = torch.zeros(4, 32)
        for p in range(4):
            for i in range(16):
                pe[p, 2 * i] = torch.sin(torch.tensor(p / 10000 ** (2 * i / 32)))
                pe[p, 2 * i + 1] = torch.cos(torch.tensor(p / 10000 ** (2 * i / 32)))
        inputs = _ln(model.word_embed(words) * 32 ** 0.5 + pe, model.word_norm)
        means = torch.stack([inputs[:, :t + 1].mean(1) for t in range(4)], 1)
        first = image[:, None] * model.word_gate(means)
        torch.testing.assert_close(seen[0][0][0], first)  # decoder layer 1's query and word inputs
        torch.testing.assert_close(seen[0][0][1], inputs)
        torch.testing.assert_close(encoded[2][0][0], model.decoder[0].cross_attention.project_kv(x, x)[0])
        stacked = torch.cat([first] + [out[0] for _, out in seen], -1)
        proj = model.output_proj[0](stacked)
        hidden = _ln(proj[..., :32] * torch.sigmoid(proj[..., 32:]), model.output_proj[2])
        torch.testing.assert_close(logprobs, torch.log_softmax(model.logits(hidden), -1))


def embedded_word_std(model, vocab: int) -> float:
    """The standard deviation of sqrt(D) E w over every word, as the decoder's input carries it (PE taken away)."""
    with torch.no_grad():
        x, _, _ = model._word_inputs(torch.arange(vocab).unsqueeze(1), 0)  # each word at position 0
        return (x - sinusoid(torch.zeros(1), model.args.dim)).std().item()


@pytest.mark.parametrize("dim", [64, 512])  # the default profile's width, the paper's
def test_words_enter_the_decoder_at_unit_scale(dim):
    """sqrt(D) E w starts with std ~1, the positions' order (N(0, 1) gave sqrt(D): 8 at D 64, 22.6 at 512)."""
    torch.manual_seed(0)
    model = Transformer(TransformerArgs(dim=dim, heads=8, encoder_layers=1, decoder_layers=1, ffn_dim=dim), 1000,
                        {"regions": 6})
    assert 0.95 < embedded_word_std(model, 1000) < 1.05  # 1000 * D draws: the sample std is within 1-2 %


def test_the_scaled_embedding_keeps_the_random_stream():
    """The N(0, 1/D) init is nn.Embedding's draw times D^-1/2 and takes no further numbers from the generator, so
    every parameter built after the embedding starts where it did under PyTorch's default init."""
    torch.manual_seed(3)
    reference, after_reference = nn.Embedding(50, 64), torch.randn(5)
    torch.manual_seed(3)
    ours, after_ours = scaled_word_embedding(50, 64), torch.randn(5)
    torch.testing.assert_close(ours.weight, reference.weight / 8, atol=0, rtol=0)  # 64^-1/2 = 1/8: exact
    torch.testing.assert_close(after_ours, after_reference, atol=0, rtol=0)
