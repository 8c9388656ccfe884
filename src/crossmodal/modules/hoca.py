"""Low-Rank HOCA (Jin et al., EMNLP 2019): unary, high-order (HOCA) and low-rank cross-modal attention over the
time steps of n video modalities, the multiple attentive fusion (MAF) of them and the hierarchical fusion.

Notation: I_l [B, t_l, d_l] are the features of modality l (time-major rows; the paper writes d_l x t_l),
h_t [B, Dq] the decoder query, Ĩ_l [B, t_l, d] the features in the common d-space (the paper drops the tilde).

- Common space (§4.1, "the nonlinear mapping similar to Eqn. 3 with query h_t"): Ĩ_l = tanh(W h_t + U I_l + b)
  (`CommonSpaceProjection`; U I_l is query-independent, `project_keys`, computed once per clip).
- Eqs. 2-3, unary attention = Bahdanau: α_r = softmax_r(w_1ᵀ Ĩ_r) (`UnaryAttention` after a
  `CommonSpaceProjection`).
- Eqs. 4-5: φ(I_l) = Σ_r α_r (I_l)_r over the ORIGINAL features (`MultipleAttentiveFusion`).
- Eqs. 7-8: (C_n)_{r1..rn} = Σ_d Π_i (Ĩ_i)_{r_i,d} (`correlation_tensor`, one einsum for any n).
- Eq. 9: α^{I_l}_{r_l} = softmax_{r_l} Σ[W^{I_l}_{n-1} ∘ (C_n)_{..r_l..}], W^{I_l}_{n-1} a learned tensor over the
  other modalities' time steps (`HOCA`). C_n is built once and read by all n targets, as in Fig. 2(b), so HOCA holds
  the Π_i t_i correlations per clip and step (80³ for the paper's ternary head) and einsum's pairwise contraction an
  intermediate of t_1 t_2 d: the space §4.3 and Table 3 charge it with.
- Eq. 11: W^{I_l}_{n-1} = Σ_j ⊗_{i≠l} w_j^{I_i} (`LowRankHOCA.full_weight_tensor`, the tensor the factors stand for).
  For n = 2 it is any vector over the other modality's steps: binary L-HOCA differs from HOCA only by eq. 17's w_{I_l}.
- Eq. 14: (I'_i)_j = Σ_r (w_j^{I_i})_r (Ĩ_i)_r ∈ R^d (`LowRankHOCA.global_vectors`).
- Eq. 16: B_l = Σ_j Π_{i≠l} (I'_i)_j, element-wise over the other modalities (`LowRankHOCA.bilinear_pools`).
- Eq. 15: Σ[W^{I_l} ∘ (C_n^{I_l})_{r_l}] = 1_dᵀ[(Ĩ_l)_r ∘ B_l] (`LowRankHOCA(learned_readout=False)`): exactly
  eq. 9's score with W set to eq. 11's tensor (the derivation 12 -> 15, the appendix's propositions, eqs. 25-32).
- Eq. 17: the score w_{I_l}ᵀ[(Ĩ_l)_r ∘ B_l] with a learned w_{I_l} ∈ R^d in place of 1_d (`LowRankHOCA`, by
  default). §6.1's discussion of eq. 17 writes w_{I_t}: a slip for w_{I_l}.
- Eq. 18: each attention type is a head over a group of modalities: 1 (unary), 2 (binary), 3 (ternary) of them;
  one binary head per pair serves both of its modalities (Fig. 3(b)'s "Binary(f,m)").
- Eq. 19: α^l = softmax(θ_1 α_1^l + θ_2 α_2^{l,·} + θ_3 α_2^{l,·} + θ_4 α_3^l) with learned scalars θ per modality
  (`MultipleAttentiveFusion`). `variant` picks the types, Table 1's rows: "U", "B", "T", "UB", "UBT"; `low_rank`
  picks HOCA (HOCA-*) or Low-Rank HOCA (L-HOCA-*) for the binary and ternary heads.
- Eqs. 20-21: β^k = softmax_k(w_eᵀ tanh(W_e h_t + U_e φ(k) + b_e)); eqs. 22-23: the pre-softmax output
  W_p^h h_t + Σ_k β^k W_p^k φ(k) + b_p (`HierarchicalFusion`). Eq. 6 is eq. 22 with every β^k = 1.
- `HOCAAttentionFusion` is one decoder step: h_t and the features -> (eq. 22's logits, α per modality, β).
  Not here: the decoder LSTM (eq. 1), the Bi-LSTM encoder, the loss (eq. 24).

Choices where the paper is silent:
- Projections: each head owns one `CommonSpaceProjection` per modality it reads, as eq. 18 writes every attention as
  a function of (h_t, raw features); `share_projection=True` gives one projection per modality shared by all heads
  (Fig. 2 only says the "front structures" of the three mechanisms are the same). The tanh's bias b sits with W h_t.
- Unary parameters are per modality, although eq. 3 writes w_1, W_1, U_1, b_1 without l: the modalities' widths
  differ (1536 / 1024 / 128 for the paper's extractors). w_1, W^{I_l}, w_{I_l} and w_e have no bias: a bias adds the
  same constant to every score of a softmax and cancels.
- The low-rank factors w_j^{I_i} are SHARED between the target modalities l of a head: eq. 11 writes w_j^{I_i}
  without an l index, and §4.3 counts the linear(t) layer as Σ_i t_i × k trainable values with n × k × d outputs
  (one (I'_i)_j per modality and rank, read by every B_l with l ≠ i); per-target factors would be
  (n - 1) Σ_i t_i × k.
  The readout w_{I_l} is per target modality, as eq. 17 indexes it by l (§4.3 counts d for it, once).
- Initialisation, as nn.Linear initialises the layer the paper names: W^{I_l} ("a linear layer in multiple
  dimensions") uniform in ±1/sqrt(Π_{i≠l} t_i), each w_j^{I_i} ("linear(t)") in ±1/sqrt(t_i), w_{I_l} in ±1/sqrt(d);
  θ starts at `theta_init` = 1. Eq. 19 applies a softmax to a sum of weights that are themselves probabilities (each
  in [0, 1]): with θ near 1 the fused weights are close to uniform over the t_l steps, and θ must grow to the order
  of t_l to sharpen them; we implement eq. 19 as printed and leave the scale to `theta_init`.
- A modality with a single weight vector (variants U and T) uses it as is, without eq. 19's softmax: §6.3 calls
  HOCA-U "Bahdanau Attention", which a second softmax would not be. θ exists only when a modality has >= 2 terms.
- In eq. 19 a modality's terms are ordered unary, binary heads, ternary, each group of modalities in
  itertools.combinations order (F: (F,M) then (F,S); M: (F,M) then (M,S)); for n modalities "binary" and "ternary"
  mean every pair and triple containing l.
- The t_i are fixed at construction (W^{I_l} and w_j^{I_i} have t_i entries). A clip with fewer steps (the feature
  files allow T < t_i) is padded, with masks [B, t_i] (True = real step), or simply shorter: the parameters are cut to
  the first T_i steps, which equals zero padding. Padded rows of Ĩ are zeroed before C_n and eq. 14, so they add
  nothing to any score, and take zero weight in every softmax. The paper always samples 80 steps and has no masks.
- Hierarchical fusion: W_e, b_e, w_e are shared by the modalities and U_e is per modality (eq. 21 writes all four
  without k; the φ(k) widths differ), with d hidden units; W_p^k per modality without bias, one b_p. `out_dim` is the
  vocabulary size for eq. 22's logits.
- No dropout and no 1/sqrt(d) scaling anywhere in these modules (the paper names dropout only around the LSTM).
"""
from __future__ import annotations

import math
import string
from itertools import combinations
from typing import Sequence

import torch
from torch import nn

from .additive import masked_softmax

ORDERS = {"U": 1, "B": 2, "T": 3}  # attention type -> how many modalities one head reads
TABLE1_VARIANTS = ("U", "B", "T", "UB", "UBT")
_BATCH, _DIM = "Z", "Y"  # einsum letters; a-z index the modalities' time steps

Masks = Sequence[torch.Tensor | None] | None


def _uniform(shape: Sequence[int], fan_in: int) -> nn.Parameter:
    bound = 1.0 / math.sqrt(fan_in)
    return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))


def _softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return torch.softmax(scores, -1) if mask is None else masked_softmax(scores, mask)


def _zero_padding(common: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return common if mask is None else common * mask.unsqueeze(-1).to(common.dtype)


def _masks(masks: Masks, n: int) -> list[torch.Tensor | None]:
    return [None] * n if masks is None else list(masks)


def _others(items: Sequence, l: int) -> list:
    return [x for i, x in enumerate(items) if i != l]


def _check_steps(common: Sequence[torch.Tensor], lengths: Sequence[int]) -> list[int]:
    steps = [c.size(1) for c in common]
    if len(steps) != len(lengths) or any(s > t for s, t in zip(steps, lengths)):
        raise ValueError(f"time steps {steps} do not fit the head's {list(lengths)}")
    return steps


class CommonSpaceProjection(nn.Module):
    """Ĩ = tanh(W h_t + U I + b): features [B, t, d_l] and query [B, Dq] -> [B, t, d]."""

    def __init__(self, query_dim: int, feature_dim: int, dim: int):
        super().__init__()
        self.query_proj = nn.Linear(query_dim, dim)  # W, b
        self.key_proj = nn.Linear(feature_dim, dim, bias=False)  # U

    def project_keys(self, features: torch.Tensor) -> torch.Tensor:
        """U I, once per clip."""
        return self.key_proj(features)

    def forward(self, query: torch.Tensor, projected_keys: torch.Tensor) -> torch.Tensor:
        return torch.tanh(projected_keys + self.query_proj(query).unsqueeze(1))


class _Head(nn.Module):
    """An attention head over a group of modalities: `scores(common, masks)` -> one softmax per modality.

    `forward(common, masks)`: the projected features [B, T_i, d] of the group -> the weight vectors [B, T_i].
    """

    def forward(self, common: Sequence[torch.Tensor], masks: Masks = None) -> list[torch.Tensor]:
        return [_softmax(s, m) for s, m in zip(self.scores(common, masks), _masks(masks, len(common)))]


class UnaryAttention(_Head):
    """Eqs. 2-3 after the projection: α = softmax_r(w_1ᵀ Ĩ_r). A head over one modality."""

    def __init__(self, dim: int):
        super().__init__()
        self.score = nn.Linear(dim, 1, bias=False)  # w_1

    def scores(self, common: Sequence[torch.Tensor], masks: Masks = None) -> list[torch.Tensor]:
        return [self.score(common[0]).squeeze(-1)]



def correlation_tensor(common: Sequence[torch.Tensor]) -> torch.Tensor:
    """Eqs. 7-8: n tensors [B, t_i, d] -> C_n [B, t_1, ..., t_n], (C_n)_{r1..rn} = Σ_d Π_i (Ĩ_i)_{r_i, d}."""
    steps = string.ascii_lowercase[:len(common)]
    operands = ",".join(f"{_BATCH}{s}{_DIM}" for s in steps)
    return torch.einsum(f"{operands}->{_BATCH}{steps}", *common)


class HOCA(_Head):
    """Eq. 9 for n >= 2 modalities with t_i = lengths[i] steps (T_i <= t_i given): one learned (n-1)-order
    W^{I_l} per target l."""

    def __init__(self, lengths: Sequence[int]):
        super().__init__()
        if len(lengths) < 2:
            raise ValueError("HOCA correlates at least two modalities")
        self.lengths = tuple(lengths)
        self.weights = nn.ParameterList(
            _uniform(others, math.prod(others)) for others in (_others(self.lengths, l) for l in range(len(lengths))))

    def scores(self, common: Sequence[torch.Tensor], masks: Masks = None) -> list[torch.Tensor]:
        """The exponents of eq. 9, Σ over the other indices of W^{I_l} ∘ C_n, per target l: [B, T_l]."""
        steps = _check_steps(common, self.lengths)
        masks = _masks(masks, len(common))
        corr = correlation_tensor([_zero_padding(c, m) for c, m in zip(common, masks)])
        letters = string.ascii_lowercase[:len(common)]
        out = []
        for l, weight in enumerate(self.weights):
            others = "".join(_others(letters, l))
            weight = weight[tuple(slice(0, s) for s in _others(steps, l))]
            out.append(torch.einsum(f"{_BATCH}{letters},{others}->{_BATCH}{letters[l]}", corr, weight))
        return out


class LowRankHOCA(_Head):
    """Eqs. 14-17 with rank k for n >= 2 modalities of t_i = lengths[i] steps in a d-space.

    Factors w_j^{I_i} ∈ R^{t_i} (`factors[i]`, [k, t_i]) shared by all targets; readouts w_{I_l} ∈ R^d per target
    (eq. 17), or 1_d with `learned_readout=False` (eq. 15, exactly eq. 9 with W = `full_weight_tensor(l)`).
    """

    def __init__(self, lengths: Sequence[int], dim: int, rank: int = 1, learned_readout: bool = True):
        super().__init__()
        if len(lengths) < 2 or rank < 1:
            raise ValueError("Low-Rank HOCA needs at least two modalities and rank >= 1")
        self.lengths = tuple(lengths)
        self.factors = nn.ParameterList(_uniform((rank, t), t) for t in lengths)
        self.readouts = nn.ParameterList(_uniform((dim,), dim) for _ in lengths) if learned_readout else None

    def full_weight_tensor(self, l: int) -> torch.Tensor:
        """Eq. 11: W^{I_l}_{n-1} = Σ_j ⊗_{i≠l} w_j^{I_i}, shape [t_i for i ≠ l]."""
        factors = _others(self.factors, l)
        letters = string.ascii_lowercase[:len(factors)]
        operands = ",".join(f"{_DIM}{s}" for s in letters)  # Y: the rank index j
        return torch.einsum(f"{operands}->{letters}", *factors)

    def global_vectors(self, common: Sequence[torch.Tensor], masks: Masks = None) -> list[torch.Tensor]:
        """Eq. 14: (I'_i)_j = Σ_r (w_j^{I_i})_r (Ĩ_i)_r per modality: [B, k, d]."""
        steps = _check_steps(common, self.lengths)
        return [torch.einsum("kt,btd->bkd", w[:, :s], _zero_padding(c, m))
                for w, c, m, s in zip(self.factors, common, _masks(masks, len(common)), steps)]

    def bilinear_pools(self, common: Sequence[torch.Tensor], masks: Masks = None) -> list[torch.Tensor]:
        """Eq. 16: B_l = Σ_j Π_{i≠l} (I'_i)_j per target l: [B, d]."""
        pooled = self.global_vectors(common, masks)
        return [math.prod(_others(pooled, l)).sum(1) for l in range(len(pooled))]

    def scores(self, common: Sequence[torch.Tensor], masks: Masks = None) -> list[torch.Tensor]:
        """Eq. 17's exponents w_{I_l}ᵀ[(Ĩ_l)_r ∘ B_l] (eq. 15's 1_dᵀ[...] without learned readouts): [B, T_l]."""
        pools = self.bilinear_pools(common, masks)
        if self.readouts is None:
            return [(c * b.unsqueeze(1)).sum(-1) for c, b in zip(common, pools)]
        return [(c * b.unsqueeze(1)) @ w for c, b, w in zip(common, pools, self.readouts)]


def _parse_variant(variant: str, n: int) -> list[int]:
    orders = sorted(ORDERS[c] for c in variant if c in ORDERS)
    if not orders or len(orders) != len(variant) or len(set(orders)) != len(orders) or orders[-1] > n:
        raise ValueError(f"variant must be distinct letters of U, B, T (at most {n} modalities), not {variant!r}")
    return orders


class MultipleAttentiveFusion(nn.Module):
    """Eqs. 18-19 and 4-5: the heads of `variant` over n modalities, their weights fused per modality by eq. 19, and
    the context vectors over the original features.

    `forward(query [B, Dq], features [[B, T_l, d_l]], masks, keys)` -> (contexts [[B, d_l]], weights [[B, T_l]]);
    `keys = precompute(features)` once per clip saves the U I_l products.
    """

    def __init__(self, query_dim: int, feature_dims: Sequence[int], lengths: Sequence[int], dim: int = 512,
                 variant: str = "UBT", low_rank: bool = True, rank: int = 1, share_projection: bool = False,
                 theta_init: float = 1.0):
        super().__init__()
        n = len(feature_dims)
        if len(lengths) != n:
            raise ValueError("one length per modality")
        self.groups = [g for order in _parse_variant(variant, n) for g in combinations(range(n), order)]
        self.heads = nn.ModuleList(self._head([lengths[i] for i in g], dim, low_rank, rank) for g in self.groups)
        # one projection per modality, or per (head, modality of its group); _projection[(h, l)] is its index
        pairs = [(h, l) for h, g in enumerate(self.groups) for l in g]
        self._modality_of = list(range(n)) if share_projection else [l for _, l in pairs]
        self._projection = {(h, l): (l if share_projection else i) for i, (h, l) in enumerate(pairs)}
        self.projections = nn.ModuleList(CommonSpaceProjection(query_dim, feature_dims[l], dim)
                                         for l in self._modality_of)
        # terms[l]: (head, position of l in its group) in eq. 19's order
        self.terms = [[(h, g.index(l)) for h, g in enumerate(self.groups) if l in g] for l in range(n)]
        count = len(self.terms[0])
        self.theta = nn.Parameter(torch.full((n, count), float(theta_init))) if count > 1 else None

    @staticmethod
    def _head(lengths: list[int], dim: int, low_rank: bool, rank: int) -> nn.Module:
        if len(lengths) == 1:
            return UnaryAttention(dim)
        return LowRankHOCA(lengths, dim, rank) if low_rank else HOCA(lengths)

    def precompute(self, features: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """U I_l of every projection, query-independent: once per clip."""
        return [proj.project_keys(features[l]) for proj, l in zip(self.projections, self._modality_of)]

    def head_weights(self, query: torch.Tensor, features: Sequence[torch.Tensor], masks: Masks = None,
                     keys: Sequence[torch.Tensor] | None = None) -> list[list[torch.Tensor]]:
        """Eq. 18: each head's weight vectors, one per modality of its group."""
        keys = self.precompute(features) if keys is None else keys
        common = [proj(query, k) for proj, k in zip(self.projections, keys)]
        masks = _masks(masks, len(features))
        return [head([common[self._projection[h, l]] for l in g], [masks[l] for l in g])
                for h, (head, g) in enumerate(zip(self.heads, self.groups))]

    def forward(self, query, features, masks: Masks = None, keys=None):
        per_head = self.head_weights(query, features, masks, keys)
        masks = _masks(masks, len(features))
        weights = []
        for l, terms in enumerate(self.terms):
            alphas = [per_head[h][pos] for h, pos in terms]
            if self.theta is None:
                weights.append(alphas[0])
            else:  # eq. 19
                weights.append(_softmax(sum(theta * a for theta, a in zip(self.theta[l], alphas)), masks[l]))
        contexts = [torch.bmm(a.unsqueeze(1), f).squeeze(1) for a, f in zip(weights, features)]  # eq. 5
        return contexts, weights


class HierarchicalFusion(nn.Module):
    """Eqs. 20-23: β over the modalities' context vectors and the pre-softmax output of eq. 22.

    `forward(query [B, Dq], contexts [[B, d_k]])` -> (logits [B, out_dim], β [B, n]).
    """

    def __init__(self, query_dim: int, feature_dims: Sequence[int], dim: int, out_dim: int):
        super().__init__()
        self.query_proj = nn.Linear(query_dim, dim)  # W_e, b_e
        self.context_proj = nn.ModuleList(nn.Linear(d, dim, bias=False) for d in feature_dims)  # U_e per modality
        self.score = nn.Linear(dim, 1, bias=False)  # w_e
        self.query_out = nn.Linear(query_dim, out_dim)  # W_p^h, b_p
        self.context_out = nn.ModuleList(nn.Linear(d, out_dim, bias=False) for d in feature_dims)  # W_p^k

    def forward(self, query: torch.Tensor, contexts: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.query_proj(query)
        energies = torch.stack([self.score(torch.tanh(q + u(c))).squeeze(-1)
                                for u, c in zip(self.context_proj, contexts)], 1)  # eq. 21
        beta = torch.softmax(energies, 1)  # eq. 20
        fused = torch.stack([w(c) for w, c in zip(self.context_out, contexts)], 1)  # D_t(k), eq. 23
        return self.query_out(query) + (beta.unsqueeze(-1) * fused).sum(1), beta  # eq. 22


class HOCAAttentionFusion(nn.Module):
    """One decoder step of Fig. 3(a): MAF (eqs. 18-19, 4-5) then the hierarchical fusion (eqs. 20-23).

    `forward(h_t, features, masks, keys)` -> (eq. 22's logits [B, out_dim], α per modality [[B, T_l]], β [B, n]);
    `keys = precompute(features)` once per clip.
    """

    def __init__(self, query_dim: int, feature_dims: Sequence[int], lengths: Sequence[int], out_dim: int,
                 dim: int = 512, variant: str = "UBT", low_rank: bool = True, rank: int = 1,
                 share_projection: bool = False, theta_init: float = 1.0):
        super().__init__()
        self.maf = MultipleAttentiveFusion(query_dim, feature_dims, lengths, dim, variant, low_rank, rank,
                                           share_projection, theta_init)
        self.fusion = HierarchicalFusion(query_dim, feature_dims, dim, out_dim)

    def precompute(self, features: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return self.maf.precompute(features)

    def forward(self, query, features, masks: Masks = None, keys=None):
        contexts, weights = self.maf(query, features, masks, keys)
        logits, beta = self.fusion(query, contexts)
        return logits, weights, beta
