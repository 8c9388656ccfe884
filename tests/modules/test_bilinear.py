"""BAN's modules (Kim et al., NeurIPS 2018) against loops over (object, word) pairs and the glimpses by hand; masks,
gradients, and a toy task that needs a word paired with an object."""
import math

import pytest
import torch
from torch import nn

from crossmodal.modules.bilinear import (BilinearAttentionMap, BilinearAttentionNetwork, BilinearPooling,
                                         WeightNormLinear)
from crossmodal.modules.counter import Counter

WORD_MASK = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
OBJECT_MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)


pytestmark = pytest.mark.usefixtures("one_thread")


def _fc(layer, x):
    """Dropout (off) -> x (g·V/‖V‖)ᵀ + b -> ReLU, for a row or rows."""
    linear = layer[1]
    y = x @ (linear.scale * linear.direction / linear.direction.norm()).T + linear.bias
    return torch.relu(y) if len(layer) == 3 else y


def _inputs(dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    words, objects = torch.randn(2, 3, 4, dtype=dtype), torch.randn(2, 4, 5, dtype=dtype)
    corner = torch.rand(2, 4, 2, dtype=dtype)
    return words, objects, torch.cat([corner, corner + 0.4], -1)


def test_weight_norm_linear_is_torchs_weight_norm_with_dim_none():
    torch.manual_seed(0)
    layer = WeightNormLinear(5, 3).double()
    with torch.no_grad():
        layer.scale.fill_(2.5)
    reference = nn.Linear(5, 3).double()
    with torch.no_grad():
        reference.weight.copy_(layer.direction)
        reference.bias.copy_(layer.bias)
    reference = torch.nn.utils.parametrizations.weight_norm(reference, dim=None)
    with torch.no_grad():
        reference.parametrizations.weight.original0.fill_(2.5)
    x = torch.randn(7, 5, dtype=torch.float64)
    torch.testing.assert_close(layer(x), reference(x))
    assert math.isclose(layer.weight.norm().item(), 2.5)


def test_attention_logits_and_joint_softmax_match_loops():
    words, objects, _ = _inputs()
    attention = BilinearAttentionMap(4, 5, hidden_dim=2, glimpses=2).double().eval()
    maps, logits = attention(words, objects, WORD_MASK, OBJECT_MASK)
    p = attention.p_scale * attention.p_direction / attention.p_direction.norm()
    for b in range(2):
        real = [(j, i) for j in range(4) for i in range(3) if OBJECT_MASK[b, j] and WORD_MASK[b, i]]
        for g in range(2):
            scores = {(j, i): p[g] @ (_fc(attention.words, words[b, i]) * _fc(attention.objects, objects[b, j]))
                      + attention.bias[g] for j, i in real}
            total = sum(torch.exp(s) for s in scores.values())  # one softmax over the whole grid
            for j in range(4):
                for i in range(3):
                    if (j, i) in scores:
                        torch.testing.assert_close(logits[b, g, j, i], scores[j, i])
                        torch.testing.assert_close(maps[b, g, j, i], torch.exp(scores[j, i]) / total)
                    else:
                        assert logits[b, g, j, i] == float("-inf") and maps[b, g, j, i] == 0
    torch.testing.assert_close(maps.sum((2, 3)), torch.ones(2, 2, dtype=torch.float64))
    assert torch.all(maps[1, :, 3, :] == 0) and torch.all(maps[1, :, :, 2] == 0)


def test_low_rank_bilinear_pooling_matches_loops():
    words, objects, _ = _inputs()
    pool = BilinearPooling(4, 5, hidden_dim=3).double().eval()
    grid = torch.rand(2, 4, 3, dtype=torch.float64) * (OBJECT_MASK[:, :, None] & WORD_MASK[:, None, :])
    joint = pool.joint(words, objects, grid)
    for b in range(2):
        x = [_fc(pool.words, words[b, i]) for i in range(3)]
        y = [_fc(pool.objects, objects[b, j]) for j in range(4)]
        for k in range(3):
            expected = sum(grid[b, j, i] * x[i][k] * y[j][k] for i in range(3) for j in range(4))
            torch.testing.assert_close(joint[b, k], expected)
        torch.testing.assert_close(pool(words, objects, grid)[b], _fc(pool.project, joint[b]))


def _real_max_over_words(scores, g):
    """max_i of glimpse g's logits over the real words; -inf for padded objects."""
    out = torch.full((2, 4), float("-inf"), dtype=scores.dtype)
    for b in range(2):
        for j in range(4):
            if OBJECT_MASK[b, j]:
                out[b, j] = max(scores[b, g, j, i] for i in range(3) if WORD_MASK[b, i])
    return out


@pytest.mark.parametrize("with_counter", [False, True])
def test_residual_across_glimpses_by_hand(with_counter):
    words, objects, boxes = _inputs()
    counter = Counter(objects=3) if with_counter else None
    ban = BilinearAttentionNetwork(4, 5, hidden_dim=3, glimpses=3, counter=counter).double().eval()
    out = ban(words, objects, WORD_MASK, OBJECT_MASK, boxes)
    maps, _ = ban.attention(words, objects, WORD_MASK, OBJECT_MASK)  # eq. 9, once, from f_0 = X
    scores = ban.attention.scores(words, objects)
    boxes = boxes * OBJECT_MASK[..., None]
    f = words
    for g in range(3):
        update = ban.pool[g](f, objects, maps[:, g])  # BAN_g(f_g, Y; 𝒜_g)
        if with_counter:
            count = counter(boxes, _real_max_over_words(scores, g))
            torch.testing.assert_close(out.counts[:, g], count)
            update = update + _fc(ban.count_projection[g], count)
        f = f + update[:, None, :]  # eq. 10: the same vector added to every word
    torch.testing.assert_close(out.features, f)
    torch.testing.assert_close(out.pooled, torch.stack([f[0].sum(0), f[1, :2].sum(0)]))
    torch.testing.assert_close(out.maps, maps)
    assert (out.counts is not None) == with_counter


@pytest.mark.parametrize("fusion", ["sum", "concat"])
def test_sum_and_concat_pool_every_glimpse_from_the_question_itself(fusion):
    words, objects, boxes = _inputs(seed=1)
    counter = Counter(objects=3)
    ban = BilinearAttentionNetwork(4, 5, hidden_dim=3, glimpses=3, counter=counter, fusion=fusion).double().eval()
    out = ban(words, objects, WORD_MASK, OBJECT_MASK, boxes)
    maps, _ = ban.attention(words, objects, WORD_MASK, OBJECT_MASK)
    scores = ban.attention.scores(words, objects)
    boxes = boxes * OBJECT_MASK[..., None]
    outputs = [ban.pool[g](words, objects, maps[:, g]) + _fc(ban.count_projection[g],
                                                               counter(boxes, _real_max_over_words(scores, g)))
               for g in range(3)]
    want = sum(outputs) if fusion == "sum" else torch.cat(outputs, -1)
    torch.testing.assert_close(out.pooled, want)
    assert out.pooled.shape == (2, 4 if fusion == "sum" else 12) and torch.equal(out.features, words)
    with pytest.raises(ValueError, match="fusion must be one of"):
        BilinearAttentionNetwork(4, 5, hidden_dim=3, fusion="product")


@pytest.mark.parametrize("with_counter", [False, True])
def test_padding_changes_nothing(with_counter):
    words, objects, boxes = _inputs(seed=3)
    ban = BilinearAttentionNetwork(4, 5, hidden_dim=3, glimpses=2,
                                   counter=Counter(objects=10) if with_counter else None).double().eval()
    short = ban(words[1:, :2], objects[1:, :3], WORD_MASK[1:, :2], OBJECT_MASK[1:, :3], boxes[1:, :3])
    garbage = [t.clone() for t in (words, objects, boxes)]
    garbage[0][1, 2], garbage[1][1, 3] = 50.0, -70.0
    garbage[2][1, 3] = torch.tensor([0.1, 0.1, 0.9, 0.9])  # a real-looking box over the others
    padded = ban(*garbage[:2], WORD_MASK, OBJECT_MASK, garbage[2])
    torch.testing.assert_close(padded.pooled[1:], short.pooled)


def test_gradients_reach_every_parameter():
    words, objects, boxes = _inputs(dtype=torch.float32)
    ban = BilinearAttentionNetwork(4, 5, hidden_dim=3, glimpses=2, counter=Counter(objects=3)).eval()
    out = ban(words, objects, WORD_MASK, OBJECT_MASK, boxes)
    (out.pooled * torch.randn_like(out.pooled)).sum().backward()
    for name, parameter in ban.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    plain = BilinearAttentionNetwork(4, 5, hidden_dim=3, glimpses=2).double().eval()
    plain(words.double(), objects.double(), WORD_MASK, OBJECT_MASK).pooled.sum().backward()
    assert plain.attention.bias.grad.abs().max() < 1e-12  # b_g cancels in the grid's softmax: it serves the counter


def _pairing_batch(generator, embeddings, size):
    """Four objects of distinct types (one-hot) with a random attribute each; three words, one of them naming a
    type among two fillers at a random place. The answer is the attribute of the object of the named type."""
    types = torch.argsort(torch.rand(size, 4, generator=generator), 1)
    attributes = torch.randint(0, 4, (size, 4), generator=generator)
    objects = torch.cat([nn.functional.one_hot(types, 4), nn.functional.one_hot(attributes, 4)], -1).float()
    objects = objects + 0.1 * torch.randn(objects.shape, generator=generator)
    query = torch.randint(0, 4, (size,), generator=generator)
    tokens = torch.randint(4, 8, (size, 3), generator=generator)
    tokens[torch.arange(size), torch.randint(0, 3, (size,), generator=generator)] = query
    answer = attributes[torch.arange(size), (types == query[:, None]).float().argmax(1)]
    return embeddings[tokens], objects, answer


def test_learns_a_word_object_pairing():
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    embeddings = torch.randn(8, 16, generator=generator)
    ban = BilinearAttentionNetwork(16, 8, hidden_dim=16, glimpses=2, dropout=0.0, map_dropout=0.0)
    classifier = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    optimiser = torch.optim.Adam([*ban.parameters(), *classifier.parameters()], lr=3e-3)
    word_mask, object_mask = torch.ones(64, 3, dtype=torch.bool), torch.ones(64, 4, dtype=torch.bool)
    for _ in range(300):
        words, objects, answer = _pairing_batch(generator, embeddings, 64)
        loss = nn.functional.cross_entropy(classifier(ban(words, objects, word_mask, object_mask).pooled), answer)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    words, objects, answer = _pairing_batch(generator, embeddings, 512)
    with torch.no_grad():
        pooled = ban(words, objects, torch.ones(512, 3, dtype=torch.bool), torch.ones(512, 4, dtype=torch.bool)).pooled
    accuracy = (classifier(pooled).argmax(1) == answer).float().mean().item()
    assert accuracy > 0.9, accuracy  # chance is 0.25; with the maps held uniform it reaches about 0.57


@pytest.mark.parametrize("kind", ["coattention", "unitary"])
def test_coattention_and_unitary_maps_are_separate_distributions_by_loops(kind):
    """Co-attention: 𝒜 = β αᵀ, a softmax over the objects (guided by the mean word feature) times one over the words
    (guided by the mean object feature); unitary attention: the same β with the real words weighted evenly."""
    words, objects, _ = _inputs(seed=2)
    attention = BilinearAttentionMap(4, 5, hidden_dim=2, glimpses=2, attention=kind).double().eval()
    maps, logits = attention(words, objects, WORD_MASK, OBJECT_MASK)
    p = attention.p_scale * attention.p_direction / attention.p_direction.norm()
    for b in range(2):
        words_real = [i for i in range(3) if WORD_MASK[b, i]]
        objects_real = [j for j in range(4) if OBJECT_MASK[b, j]]
        x = {i: _fc(attention.words, words[b, i]) for i in words_real}
        y = {j: _fc(attention.objects, objects[b, j]) for j in objects_real}
        x_bar, y_bar = sum(x.values()) / len(x), sum(y.values()) / len(y)
        for g in range(2):
            beta = torch.softmax(torch.stack([p[g] @ (x_bar * y[j]) for j in objects_real]), 0)
            alpha = torch.softmax(torch.stack([p[g] @ (x[i] * y_bar) for i in words_real]), 0) \
                if kind == "coattention" else torch.full((len(words_real),), 1 / len(words_real), dtype=torch.float64)
            for a, j in enumerate(objects_real):
                for c, i in enumerate(words_real):
                    torch.testing.assert_close(maps[b, g, j, i], beta[a] * alpha[c])
            assert torch.all(maps[b, g][~OBJECT_MASK[b]] == 0) and torch.all(maps[b, g][:, ~WORD_MASK[b]] == 0)
    assert torch.isinf(logits[1, :, 3]).all() and torch.isinf(logits[1, :, :, 2]).all()
    with pytest.raises(ValueError, match="attention must be one of"):
        BilinearAttentionMap(4, 5, hidden_dim=2, attention="co")
