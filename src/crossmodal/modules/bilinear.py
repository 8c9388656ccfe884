"""Bilinear Attention Networks (Kim, Jun & Zhang, NeurIPS 2018, arXiv 1805.07932), with the official
jnhwkim/ban-vqa code for what the paper leaves out.

Notation of the paper: X ∈ R^{N×ρ} are the ρ question words (the GRU's outputs at every step), Y ∈ R^{M×φ} the φ
detected objects; here both are row-major, words [B, ρ, N] and objects [B, φ, M]. The maps are returned as
[B, G, φ, ρ] (objects × words, the official code's layout), i.e. maps[b, g, j, i] = (𝒜_g)_{i,j} of the paper.

- Eqs. 1-2 (low-rank bilinear pooling): f = Pᵀ(Uᵀx ∘ Vᵀy), the building block of everything below.
- Eqs. 7-9 (bilinear attention map): (𝒜_g)_{i,j} = p_gᵀ(σ(UᵀX_i) ∘ σ(VᵀY_j)) + b_g, then a softmax over the whole
  ρ × φ grid at once (not per row) for each glimpse g (`BilinearAttentionMap`). U, V are shared by the glimpses,
  p_g is not (eq. 9). σ = ReLU, per the paper's paragraph on nonlinearity and the official code.
- Eqs. 4-5 (bilinear attention network): f'_k = σ(XᵀU')_kᵀ 𝒜 σ(YᵀV')_k = Σ_i Σ_j 𝒜_{i,j} σ(X_iᵀU'_k) σ(V'_kᵀY_j),
  low-rank bilinear pooling of every (word, object) pair under the map; eq. 6: BAN(X, Y; 𝒜) = Pᵀf'
  (`BilinearPooling`; P is the official `q_prj`, a weight-normed linear layer without activation).
- Eq. 10 (residual learning of attention): f_{i+1} = BAN_i(f_i, Y; 𝒜_i)·𝟙ᵀ + f_i, f_0 = X: glimpse i pools with its
  own U'_i, V'_i, P_i on the words as updated by the glimpses before it and adds the result to every word
  (the slides' shortcut weight α_i is fixed to 1). The classifier's input is Σ_i (f_G)_i, the sum over words
  (`BilinearAttentionNetwork`; the classifier itself, a 2-layer MLP in the paper, belongs to the model).
- Appendix A.2 (counting module, Zhang et al. 2018, `counter.Counter`): per glimpse the counter reads the objects'
  boxes and max_i of that glimpse's attention logits over the words ("maxout" from the bilinear to a unitary
  distribution; the official `logits[:, g].max(2)`), and its (K+1)-way count feature c_i enters the residual:
  f_{i+1} = (BAN_i(f_i, Y; 𝒜_i) + g_i(c_i))·𝟙ᵀ + f_i, g_i a weight-normed linear layer + ReLU (official `c_prj`).

Equation numbers are those of arXiv 1805.07932 as far as they could be reconstructed here (its full text was not
readable with this project's tools; the order agrees with a third-party summary); the equations themselves are
checked against the slides (shared/papers/004) and the official code.

Weight normalisation (Salimans & Kingma 2016) as the official code: W = g·V/‖V‖_F with ONE scalar g per weight
matrix (torch's weight_norm with dim=None). `fc_layer` = Dropout -> weight-normed Linear -> ReLU (the official
FCNet, in its order). It builds σ(XᵀU), σ(YᵀV) of the maps, σ(XᵀU'), σ(YᵀV') and P of each glimpse (P without
ReLU) and g_i (no dropout); the p_g vectors are weight-normed together as one [G, 3K] matrix.

Facts from the official code (the paper does not give them):
- The maps use a 3× wider joint space than the pooling: U, V are N×3K and M×3K (`attention_rank=3`, the official
  k=3); U'_i, V'_i are N×K, M×K.
- Dropout 0.2 before every weight-normed layer but g_i, and 0.5 on σ(YᵀV) inside the maps only (`map_dropout`).
- Every map is computed once from f_0 = X; only the pooling sees the updated f_i.
- A per-glimpse bias b_g is added to the logits (official `h_bias`). It cancels in the softmax over the grid, so it
  matters only for the counter, which reads the logits; p_g and b_g start from N(0, 1) as in the official code.

The co-attention comparison (the slides' "Comparison with Co-attention": BAN-1 against co-attention and unitary
attention, parameters controlled). The paper's abstract: "co-attention builds two separate attention distributions
for each modality neglecting the interaction between multimodal inputs". Our reading, in BAN's own terms (its code
for these baselines is not public): the same map module and pooling, with logits that do not couple a word with
an object (`attention`):
- "coattention": (𝒜_g)_{i,j} logits = p_gᵀ(σ(UᵀX_i) ∘ ȳ) + p_gᵀ(x̄ ∘ σ(VᵀY_j)) + b_g, x̄ and ȳ the means of σ(UᵀX_i)
  over the real words and of σ(VᵀY_j) over the real objects. A softmax over the grid of a sum of a word term and an
  object term is the product of a softmax over the words and one over the objects: 𝒜_g = β_g α_gᵀ, two separate
  distributions, and the pooling f'_k = (Σ_i α_i σ(X_iᵀU'_k))(Σ_j β_j σ(V'_kᵀY_j)) joins the two attended vectors.
- "unitary": the object term alone, so the words are weighted evenly: attention over the objects guided by the
  question's mean word feature (MLB-style unitary attention, Kim et al. 2017).
Same parameters as "bilinear" (p_g and b_g serve both terms).

Choices where the paper and the code are silent or differ:
- Masks: padded objects AND padded words get logit -inf, hence exactly zero weight in the joint softmax. The
  official code masks only objects (found as all-zero feature rows) and lets the padded question steps (after the
  question: its dataset pads at the back) take weight; we mask both with explicit masks. The returned logits carry the -inf.
- Padded word rows are updated by the residual like the others (every row gets the same vector) but are left out
  of the sum over words; the official code sums all 14 positions.
- P maps the K-dim pooled feature back to X's width N, so f_i keeps X's shape for any K (the paper's f_0 = X
  "if N = K"; the official code has N = K = 1280).
- The counter reads the maximum over the real words only; a padded object's logit stays -inf, i.e. attention
  sigmoid(-inf) = 0 in the counter, and its box is replaced by a zero box (what the counter pads with when there
  are fewer than K boxes), so whatever padding holds changes nothing (it would move the distance confidence).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from .additive import masked_softmax
from .counter import Counter


def weight_normalised(direction: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """g·V/‖V‖_F: weight normalisation over the whole tensor (torch's weight_norm with dim=None)."""
    return scale * direction / direction.norm()


class WeightNormLinear(nn.Module):
    """A Linear layer whose weight is g·V/‖V‖_F with a single learned scale g (initialised to ‖V‖_F, so the layer
    starts as torch's default Linear)."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        linear = nn.Linear(in_dim, out_dim)
        self.direction = nn.Parameter(linear.weight.detach().clone())
        self.scale = nn.Parameter(linear.weight.detach().norm())
        self.bias = nn.Parameter(linear.bias.detach().clone())

    @property
    def weight(self) -> torch.Tensor:
        return weight_normalised(self.direction, self.scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


def fc_layer(in_dim: int, out_dim: int, activation: bool = True, dropout: float = 0.0) -> nn.Sequential:
    """Dropout -> weight-normed Linear -> ReLU (without the ReLU if `activation` is False): the official FCNet."""
    layers = [nn.Dropout(dropout), WeightNormLinear(in_dim, out_dim)]
    return nn.Sequential(*layers, nn.ReLU()) if activation else nn.Sequential(*layers)


ATTENTIONS = ("bilinear", "coattention", "unitary")


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, n, D] averaged over the real rows of `mask` [B, n] -> [B, D]."""
    weights = mask.to(values.dtype).unsqueeze(-1)
    return (values * weights).sum(1) / weights.sum(1).clamp(min=1)


def pair_mask(word_mask: torch.Tensor, object_mask: torch.Tensor) -> torch.Tensor:
    """[B, ρ] and [B, φ] -> [B, 1, φ, ρ]: True where both the object and the word are real."""
    return object_mask[:, None, :, None] & word_mask[:, None, None, :]


class BilinearAttentionMap(nn.Module):
    """Eqs. 7-9: G bilinear attention maps over the objects × words grid.

    `forward(words [B, ρ, N], objects [B, φ, M], word_mask [B, ρ], object_mask [B, φ])` returns the maps
    [B, G, φ, ρ] (each sums to 1 over its real grid) and the logits [B, G, φ, ρ] (-inf on padded pairs).
    """

    def __init__(self, word_dim: int, object_dim: int, hidden_dim: int, glimpses: int = 8, attention_rank: int = 3,
                 dropout: float = 0.2, map_dropout: float = 0.5, attention: str = "bilinear"):
        super().__init__()
        if attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTIONS)}, not {attention!r}")
        self.kind = attention
        width = hidden_dim * attention_rank
        self.glimpses = glimpses
        self.words = fc_layer(word_dim, width, dropout=dropout)  # σ(XᵀU)
        self.objects = fc_layer(object_dim, width, dropout=dropout)  # σ(YᵀV)
        self.object_dropout = nn.Dropout(map_dropout)
        self.p_direction = nn.Parameter(torch.randn(glimpses, width))  # p_g, one row per glimpse
        self.p_scale = nn.Parameter(self.p_direction.detach().norm())
        self.bias = nn.Parameter(torch.randn(glimpses))  # b_g

    @property
    def p(self) -> torch.Tensor:
        """The weight-normed [G, 3K] matrix of the p_g."""
        return weight_normalised(self.p_direction, self.p_scale)

    def scores(self, words: torch.Tensor, objects: torch.Tensor) -> torch.Tensor:
        """(𝒜_g)_{i,j} before the softmax, unmasked: [B, G, φ, ρ]."""
        x = self.words(words)
        y = self.object_dropout(self.objects(objects))
        return torch.einsum("gk,bjk,bik->bgji", self.p, y, x) + self.bias[:, None, None]

    def separate_scores(self, words, objects, word_mask, object_mask) -> torch.Tensor:
        """Co-attention's and unitary attention's logits (module docstring): a word term plus an object term,
        [B, G, φ, ρ]; the word term is zero for unitary attention."""
        x = self.words(words)
        y = self.object_dropout(self.objects(objects))
        object_term = torch.einsum("gk,bjk,bk->bgj", self.p, y, masked_mean(x, word_mask)) + self.bias[:, None]
        if self.kind == "unitary":
            return object_term.unsqueeze(-1).expand(-1, -1, -1, x.size(1))
        word_term = torch.einsum("gk,bk,bik->bgi", self.p, masked_mean(y, object_mask), x)
        return object_term.unsqueeze(-1) + word_term.unsqueeze(-2)

    def forward(self, words, objects, word_mask, object_mask):
        mask = pair_mask(word_mask, object_mask)
        scores = self.scores(words, objects) if self.kind == "bilinear" else \
            self.separate_scores(words, objects, word_mask, object_mask)
        logits = scores.masked_fill(~mask, float("-inf"))
        batch, glimpses, n_objects, n_words = logits.shape
        maps = masked_softmax(logits.reshape(batch, glimpses, -1), mask.reshape(batch, 1, -1))
        return maps.view(batch, glimpses, n_objects, n_words), logits


class BilinearPooling(nn.Module):
    """One BAN_i (eqs. 4-6): f'_k = Σ_i Σ_j 𝒜_{i,j} σ(X_iᵀU'_k) σ(V'_kᵀY_j), then Pᵀf' back to the words' width."""

    def __init__(self, word_dim: int, object_dim: int, hidden_dim: int, dropout: float = 0.2):
        super().__init__()
        self.words = fc_layer(word_dim, hidden_dim, dropout=dropout)  # σ(XᵀU')
        self.objects = fc_layer(object_dim, hidden_dim, dropout=dropout)  # σ(YᵀV')
        self.project = fc_layer(hidden_dim, word_dim, activation=False, dropout=dropout)  # P

    def joint(self, words: torch.Tensor, objects: torch.Tensor, attention_map: torch.Tensor) -> torch.Tensor:
        """f' [B, K] from words [B, ρ, N], objects [B, φ, M] and one map [B, φ, ρ]."""
        return torch.einsum("bjk,bji,bik->bk", self.objects(objects), attention_map, self.words(words))

    def forward(self, words, objects, attention_map):
        return self.project(self.joint(words, objects, attention_map))


FUSIONS = ("residual", "sum", "concat")


class BANOutput(NamedTuple):
    pooled: torch.Tensor  # the classifier's input: [B, N] (residual, sum), [B, G·N] (concat)
    features: torch.Tensor  # f_G [B, ρ, N]
    maps: torch.Tensor  # 𝒜_g [B, G, φ, ρ]
    logits: torch.Tensor  # the maps' logits [B, G, φ, ρ], -inf on padded pairs
    counts: torch.Tensor | None  # the counter's features c_i [B, G, K + 1], None without a counter


class BilinearAttentionNetwork(nn.Module):
    """BAN with residual learning of attention over `glimpses` maps (eq. 10), optionally with a counter (App. A.2).

    `forward(words [B, ρ, N], objects [B, φ, M], word_mask, object_mask, boxes [B, φ, 4] or None)` -> BANOutput.
    `boxes` (x1, y1, x2, y2) are needed only with a counter. One counter serves all glimpses (the official code's
    single `Counter`), each glimpse has its own g_i.

    `fusion` combines the glimpses (the slides' residual-learning table; Sum and Concat are our reading of its two
    baselines, which the slides name but do not define): "residual" is eq. 10 and the sum over real words of f_G;
    "sum" gives every glimpse the question X itself, b_i = BAN_i(X, Y; 𝒜_i), and passes Σ_i b_i (plus, with a
    counter, Σ_i g_i(c_i)); "concat" passes [b_1; ...; b_G] (each with its g_i(c_i)), G times as wide. For sum and
    concat, `features` is X.
    """

    def __init__(self, word_dim: int, object_dim: int, hidden_dim: int, glimpses: int = 8,
                 counter: Counter | None = None, attention_rank: int = 3, dropout: float = 0.2,
                 map_dropout: float = 0.5, fusion: str = "residual", attention: str = "bilinear"):
        super().__init__()
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {', '.join(FUSIONS)}, not {fusion!r}")
        self.fusion = fusion
        self.attention = BilinearAttentionMap(word_dim, object_dim, hidden_dim, glimpses, attention_rank, dropout,
                                              map_dropout, attention)
        self.pool = nn.ModuleList(BilinearPooling(word_dim, object_dim, hidden_dim, dropout) for _ in range(glimpses))
        self.counter = counter
        if counter is not None:
            self.count_projection = nn.ModuleList(fc_layer(counter.objects + 1, word_dim) for _ in range(glimpses))

    def count_features(self, logits: torch.Tensor, boxes: torch.Tensor, object_mask: torch.Tensor) -> torch.Tensor:
        """The counter's feature per glimpse from max_j of its logits over the real words: [B, G, K + 1]."""
        per_object = logits.max(dim=-1).values  # [B, G, φ]; -inf for padded objects
        boxes = boxes.masked_fill(~object_mask.unsqueeze(-1), 0)  # padded objects: the counter's own zero boxes
        return torch.stack([self.counter(boxes, per_object[:, g]) for g in range(per_object.size(1))], 1)

    def forward(self, words, objects, word_mask, object_mask, boxes=None):
        maps, logits = self.attention(words, objects, word_mask, object_mask)
        counts = None
        if self.counter is not None:
            if boxes is None:
                raise ValueError("a BilinearAttentionNetwork with a counter needs the objects' boxes")
            counts = self.count_features(logits, boxes, object_mask)
        features, glimpse_outputs = words, []
        for g, pool in enumerate(self.pool):
            update = pool(features if self.fusion == "residual" else words, objects, maps[:, g])
            if counts is not None:
                update = update + self.count_projection[g](counts[:, g])
            if self.fusion == "residual":
                features = features + update.unsqueeze(1)
            glimpse_outputs.append(update)
        if self.fusion == "residual":
            pooled = (features * word_mask.unsqueeze(-1).to(features.dtype)).sum(1)
        elif self.fusion == "sum":
            pooled = torch.stack(glimpse_outputs).sum(0)
        else:
            pooled = torch.cat(glimpse_outputs, -1)
        return BANOutput(pooled, features, maps, logits, counts)
