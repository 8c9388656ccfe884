"""ETA-Transformer modules (Li, Zhu, Liu & Yang, "Entangled Transformer for Image Captioning", ICCV 2019, §3-4):
EnTangled Attention (ETA), the Gated Bilateral Controller (GBC), the multimodal decoder layer and the sub-encoder
layer. No public code exists for the paper: its text is the specification, Vaswani et al. 2017 ([37]) fills its
silences. Rows are [B, N, D] (the paper writes d x n columns); every multi-head attention is the one shared
`modules.multihead.MultiHeadAttention` (W^Q, [W^K; W^V], W^O, scaled dot product).

Equations:
- Eqs. 2-3, scaled dot-product and multi-head attention: `MultiHeadAttention` itself (eq. 2's d is the width of the
  head's inputs, d/h, as W_i^Q in R^{d/h x d} makes them).
- Eq. 4, sub-encoder self-attention M^{l+1} = MultiHead(O^l, O^l, O^l), and eq. 5, the position-wise FFN
  W_2 ReLU(W_1 x + b_1) + b_2, each followed by a residual connection and layer normalization "Same to [37]":
  the dual-way encoder's two sub-encoders (§4.1) are stacks of plain Vaswani encoder layers, so
  `SubEncoderLayer` IS the repository Transformer's encoder layer (`modules.sublayers.EncoderLayer`).
- Eq. 6, the decoder inputs W_<t = [w_0; ...; w_{t-1}] (word embedding + positional encoding): the model's part.
- Eq. 7, the decoder's masked self-attention A_{:,t} = MultiHead(H_{:,t}, H_<t, H_<t): `EntangledDecoderLayer`'s
  `self_attention` (a `ResidualAttention`), causal, with a cache of the past words' keys and values.
- Eq. 8, E_{:,t} = ETA(A_{:,t}, V^N, S^N): `EntangledAttention` then `GatedBilateralController`; eq. 12's e_t is
  "the output of ETA", and h_t = FFN(e_t) (§4.2) is the layer's output (`EntangledDecoderLayer`).
- Eq. 9, preliminary-information injection g_t^(s) = MultiHead(a_t, S^N, S^N), and eq. 10, the attention over the
  target modality v_t = MultiHead(g_t^(s), V^N, V^N): `EntangledPathway` (the paper's "visual pathway";
  `EntangledAttention.visual`). "In a similar manner but reversed order" the semantic pathway gives
  g_t^(v) = MultiHead(a_t, V^N, V^N) and s_t = MultiHead(g_t^(v), S^N, S^N) (`EntangledAttention.semantic`).
  "All the attention layers in ETA are followed with residual connection and layer normalization", so (with
  Vaswani's residual dropout) g = LN(a + Drop(MultiHead(a, P, P))) and v = LN(g + Drop(MultiHead(g, T, T))): the
  residual of eq. 10 carries the preliminary guidance g into v, the skip connection that "equally combines the
  preliminary and target representations" (§5.4.2).
- Eq. 11, the context gate c_t = sigmoid(W_c [g_t^(s), g_t^(v), a_t]), W_c in R^{d x 3d}, and eq. 12,
  e_t = f(v_t) ⊙ c_t + f(s_t) ⊙ (1 - c_t): `GatedBilateralController`. f is a parameter (`activation`): "identity"
  (the paper's choice, Table 6's "Linear"), "sigmoid", "tanh" or "relu" (Table 6's rows, `TABLE6_ACTIVATIONS`).
  Eq. 13 (the gradient through f) is analysis, not a computation.

Ablation modes (`DECODER_MODES`, §5.4.2 and Tables 2, 4, 5): one decoder layer class builds only the attentions
each variant needs, between the same eq. 7 self-attention and the same FFN; every attention is a `ResidualAttention`
LN(q + Drop(MultiHead(q, M, M))) as in ETA.
- "entangled": ETA and GBC as above.
- "parallel", Parallel Attention (PA): "remove the preliminary information injection blocks in ETA and simply use
  GBC to integrate the outputs of encoder (S^N and V^N) directly". Our reading: each pathway keeps one attention,
  v_t = MultiHead(a_t, V^N, V^N) and s_t = MultiHead(a_t, S^N, S^N). Eq. 11 still needs three inputs; with the
  injections gone, these single attentions are exactly what ETA computes as g_t^(v) and g_t^(s) (the same query
  a_t over the same memory), so c_t = sigmoid(W_c [s_t, v_t, a_t]) and e_t = f(v_t) ⊙ c_t + f(s_t) ⊙ (1 - c_t).
- "stacked_visual" / "stacked_semantic", Stacked Attention SA_v / SA_s: "remove the GBC module and extract one
  pathway of ETA": g^(s) = MultiHead(a, S^N), v = MultiHead(g^(s), V^N), e_t = v_t (no GBC, so no f); SA_s the
  reverse, g^(v) = MultiHead(a, V^N), s = MultiHead(g^(v), S^N), e_t = s_t. Both modalities are read.
- "visual" / "semantic", Transformer_v / Transformer_s: Vaswani's decoder layer, masked self-attention, ONE
  cross-attention over V^N (or S^N) with its residual and layer norm, then the FFN: e_t = LN(a + MultiHead(a, V^N)).
`activation` is validated in every mode and used only where GBC exists (entangled, parallel).

Masks: padded regions and padded attribute words (mask False) get exactly zero weight in every ETA attention;
future words get exactly zero weight in the self-attention, so changing word t+1 changes nothing at t.

Choices where the paper is silent (each stated as ours):
- Eq. 7 writes the keys as H_<t while the layer's inputs are H_<=t = (h_1, ..., h_t), h_t = w_{t-1}: read
  literally the query would not see itself and the first step would have no key. We follow Vaswani: position t
  attends to h_1 .. h_t (the inputs w_0 .. w_{t-1}, i.e. the words before t, which is what "<t" counts).
- The four attentions of ETA (two per pathway) have their own parameters and their own layer norms; the paper does
  not say whether any are shared. The self-attention's output a_t fed to ETA and to eq. 11 is the sublayer's
  output after its residual and layer norm.
- No residual connection or layer norm around the ETA + GBC block as a whole: ETA's attention layers carry them
  already ("followed with residual connection and layer normalization", §4.3), and §4.2 feeds e_t straight into
  the FFN, h_t = FFN(e_t), whose own residual and layer norm follow (Vaswani's post-LN). No dropout on e_t.
- Dropout (default 0.1, Vaswani's P_drop; the paper says only "We follow the same hyperparameter settings in
  [37]") on every attention's output before its residual and on the FFN's output, as in [37]; none on attention
  weights, none inside the FFN, none in GBC. Biases everywhere ("the bias terms in linear layers are omitted for
  the sake of concise expression"), W_c included. PyTorch's default initialisation.
- The columns of W_c read [g^(s), g^(v), a] in eq. 11's order; c_t gates the visual stream v_t, 1 - c_t the
  semantic one (eq. 12).
- The FFN sublayer is the repository Transformer's (`modules.sublayers.FeedForward`, post-LN), shared rather
  than written again; the sub-encoder layer likewise.
- The ablation modes: the readings above are ours (the paper gives PA and SA one sentence each, and Transformer_v/s
  only as "the standard transformer model"). In every mode each attention keeps its own parameters and layer norm,
  the self-attention and FFN are ETA's, and the layer's pathways live in `EntangledAttention` (attribute
  `entangled`) whatever the mode; SA keeps eq. 10's residual, so its guidance g also flows into e_t.

Not here (the model file's part): the region projection V^0 ("a linear transformation"), the attribute embedding
S^0 shared with the decoder's word embedding, positional encodings, the classifier, which sub-encoders a mode
builds, and the encoder-removed rows of Table 4.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from .multihead import MultiHeadAttention
from .sublayers import EncoderLayer, FeedForward, causal_mask

KeysValues = tuple[torch.Tensor, torch.Tensor]

GBC_ACTIVATIONS = {"identity": nn.Identity, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh, "relu": nn.ReLU}
TABLE6_ACTIVATIONS = {"Sigmoid": "sigmoid", "Tanh": "tanh", "ReLU": "relu", "Linear": "identity"}


class SubEncoderLayer(EncoderLayer):
    """One block of the visual or the semantic sub-encoder (eqs. 4-5): O^{l+1} = LN(M + Drop(FFN(M))),
    M = LN(O^l + Drop(MultiHead(O^l, O^l, O^l))), padded rows masked as keys. `forward(x [B, N, D], mask [B, N])`."""

    def __init__(self, dim: int = 512, heads: int = 8, ffn_dim: int = 2048, dropout: float = 0.1):
        super().__init__(dim, heads, ffn_dim, dropout)


class ResidualAttention(nn.Module):
    """LN(x + Drop(MultiHead(x, K, V))): a multi-head attention followed by its residual and layer norm."""

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.attention = MultiHeadAttention(dim, heads)
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(dim)

    def project_kv(self, memory: torch.Tensor) -> KeysValues:
        return self.attention.project_kv(memory)

    def forward(self, x, keys, values, mask):
        """x [B, Nq, D], keys/values from `project_kv`, mask [B, N] or [B or 1, Nq, N] (True = visible)
        -> (output [B, Nq, D], weights [B, H, Nq, N])."""
        attended, weights = self.attention(x, keys, values, mask)
        return self.norm(x + self.dropout(attended)), weights


class PathwayMemory(NamedTuple):
    """One pathway's per-image keys and values, each ([B, H, N, d], [B, H, N, d])."""
    preliminary: KeysValues | None  # of the injection attention (eq. 9), over the preliminary modality; None without
    target: KeysValues  # of the target attention (eq. 10), over the target modality


class EntangledMemory(NamedTuple):
    visual: PathwayMemory | None  # the visual pathway: S^N injects, V^N is attended (None: the mode has none)
    semantic: PathwayMemory | None  # the semantic pathway: V^N injects, S^N is attended


class DecoderMode(NamedTuple):
    """Which pathways a decoder layer keeps and whether each starts with the injection attention (eq. 9)."""
    pathways: tuple[str, ...]  # "visual" (ends in an attention over V^N), "semantic" (over S^N)
    inject: bool  # eq. 9 before eq. 10 in every pathway; without it a pathway is one attention over its target

    @property
    def gated(self) -> bool:
        """GBC (eqs. 11-12) combines two pathways; a single pathway's output is e_t itself."""
        return len(self.pathways) == 2

    @property
    def modalities(self) -> tuple[str, ...]:
        """The encoder outputs the layer reads: each pathway's target, and with injection the other one too."""
        return ("visual", "semantic") if self.inject or self.gated else self.pathways


DECODER_MODES = {
    "entangled": DecoderMode(("visual", "semantic"), inject=True),  # ETA + GBC (eqs. 9-12)
    "parallel": DecoderMode(("visual", "semantic"), inject=False),  # PA: GBC over MultiHead(a, V^N), (a, S^N)
    "stacked_visual": DecoderMode(("visual",), inject=True),  # SA_v: the visual pathway alone, e_t = v_t
    "stacked_semantic": DecoderMode(("semantic",), inject=True),  # SA_s: the semantic pathway alone, e_t = s_t
    "visual": DecoderMode(("visual",), inject=False),  # Transformer_v: one cross-attention over V^N
    "semantic": DecoderMode(("semantic",), inject=False),  # Transformer_s: one cross-attention over S^N
}


def check_mode(mode: str) -> DecoderMode:
    if mode not in DECODER_MODES:
        raise ValueError(f"mode must be one of {', '.join(DECODER_MODES)}, not {mode!r}")
    return DECODER_MODES[mode]


def check_activation(activation: str) -> None:
    if activation not in GBC_ACTIVATIONS:
        raise ValueError(f"GBC activation must be one of {', '.join(GBC_ACTIVATIONS)}, not {activation!r}")


class EntangledPathway(nn.Module):
    """One direction of ETA (eqs. 9-10): g = LN(a + MultiHead(a, P, P)) injects the preliminary modality P into
    the self-attention output a; out = LN(g + MultiHead(g, T, T)) attends to the target modality T under g.
    Without injection (`inject=False`: PA, Transformer_v/s) there is no g: out = LN(a + MultiHead(a, T, T))."""

    def __init__(self, dim: int, heads: int, dropout: float, inject: bool = True):
        super().__init__()
        self.injection = ResidualAttention(dim, heads, dropout) if inject else None  # eq. 9
        self.target = ResidualAttention(dim, heads, dropout)  # eq. 10

    def project_memory(self, preliminary: torch.Tensor | None, target: torch.Tensor) -> PathwayMemory:
        return PathwayMemory(None if self.injection is None else self.injection.project_kv(preliminary),
                             self.target.project_kv(target))

    def forward(self, a, memory: PathwayMemory, preliminary_mask, target_mask):
        """a [B, Nq, D] -> (guidance g [B, Nq, D] or None, output [B, Nq, D], (injection weights [B, H, Nq, N_P]
        or None, target weights [B, H, Nq, N_T]))."""
        guidance, injection_weights = (None, None) if self.injection is None else \
            self.injection(a, *memory.preliminary, preliminary_mask)
        out, target_weights = self.target(a if guidance is None else guidance, *memory.target, target_mask)
        return guidance, out, (injection_weights, target_weights)


class Entangled(NamedTuple):
    """ETA's outputs for queries [B, Nq]: eq. 10's v_t and its mirror s_t, eq. 9's guidances, the attention weights
    (None where the mode has no such pathway or no injection)."""
    visual: torch.Tensor | None  # v_t, semantic-guided attention over V^N
    semantic: torch.Tensor | None  # s_t, visual-guided attention over S^N
    semantic_guidance: torch.Tensor | None  # g_t^(s)
    visual_guidance: torch.Tensor | None  # g_t^(v)
    visual_weights: tuple | None  # the visual pathway's: over S^N (eq. 9), over V^N (eq. 10)
    semantic_weights: tuple | None  # the semantic pathway's: over V^N, over S^N


class EntangledAttention(nn.Module):
    """EnTangled Attention (§4.3): the visual pathway (S^N -> g^(s) -> v_t) and the semantic pathway
    (V^N -> g^(v) -> s_t) from one self-attention output a_t. In an ablation `mode` (`DECODER_MODES`) it holds
    only the pathways the mode keeps, with or without their injection attention; the others are None."""

    def __init__(self, dim: int, heads: int, dropout: float, mode: str = "entangled"):
        super().__init__()
        spec = check_mode(mode)
        self.visual = EntangledPathway(dim, heads, dropout, spec.inject) if "visual" in spec.pathways else None
        self.semantic = EntangledPathway(dim, heads, dropout, spec.inject) if "semantic" in spec.pathways else None

    def project_memory(self, visual: torch.Tensor | None, semantic: torch.Tensor | None) -> EntangledMemory:
        """V^N [B, n_v, D], S^N [B, n_s, D] (None where the mode reads no such modality) -> the keys and values of
        all the attentions, once per image."""
        return EntangledMemory(None if self.visual is None else self.visual.project_memory(semantic, visual),
                               None if self.semantic is None else self.semantic.project_memory(visual, semantic))

    def forward(self, a, memory: EntangledMemory, visual_mask, semantic_mask) -> Entangled:
        """a [B, Nq, D]; masks [B, n_v], [B, n_s] (True = a real region / attribute word; None if unread)."""
        semantic_guidance = visual = visual_weights = visual_guidance = semantic = semantic_weights = None
        if self.visual is not None:
            semantic_guidance, visual, visual_weights = self.visual(a, memory.visual, semantic_mask, visual_mask)
        if self.semantic is not None:
            visual_guidance, semantic, semantic_weights = self.semantic(a, memory.semantic, visual_mask,
                                                                         semantic_mask)
        return Entangled(visual, semantic, semantic_guidance, visual_guidance, visual_weights, semantic_weights)


class GatedBilateralController(nn.Module):
    """GBC (§4.4): c = sigmoid(W_c [g^(s), g^(v), a]) (eq. 11), e = f(v) ⊙ c + f(s) ⊙ (1 - c) (eq. 12), with f
    one of `GBC_ACTIVATIONS` (the paper's is the identity)."""

    def __init__(self, dim: int, activation: str = "identity"):
        super().__init__()
        check_activation(activation)
        self.gate = nn.Linear(3 * dim, dim)  # W_c (with its bias)
        self.activation = GBC_ACTIVATIONS[activation]()

    def forward(self, visual, semantic, semantic_guidance, visual_guidance, a):
        """v_t, s_t, g_t^(s), g_t^(v), a_t, each [B, Nq, D] -> e_t [B, Nq, D]."""
        gate = torch.sigmoid(self.gate(torch.cat([semantic_guidance, visual_guidance, a], -1)))
        return self.activation(visual) * gate + self.activation(semantic) * (1 - gate)


class EntangledDecoderLayer(nn.Module):
    """One multimodal decoder block (§4.2, eqs. 7-12): causal self-attention LN(x + Drop(MultiHead(x, x, x)))
    (eq. 7), ETA (eqs. 8-10), GBC (eqs. 11-12), then the FFN sublayer LN(e + Drop(FFN(e))).

    `mode` (`DECODER_MODES`) builds only the attentions the variant needs, between the same self-attention and FFN:
    "entangled" (ETA), "parallel" (PA: each pathway one attention, GBC on [s_t, v_t, a_t]), "stacked_visual" /
    "stacked_semantic" (SA: one ETA pathway, e_t = v_t / s_t, no GBC), "visual" / "semantic" (Vaswani's decoder
    layer with one cross-attention over V^N / S^N). `activation` is validated in every mode, used only with GBC.

    `project_memory(V^N, S^N)` projects an image's keys and values for the ETA attentions once; `forward`
    takes the new words' inputs, the past words' cached self-attention keys and values (None before the first
    word) and returns the outputs and the cache with the new words appended, so that step-by-step decoding equals
    the teacher-forced run over the whole sequence.
    """

    def __init__(self, dim: int = 512, heads: int = 8, ffn_dim: int = 2048, dropout: float = 0.1,
                 activation: str = "identity", mode: str = "entangled"):
        super().__init__()
        self.mode = check_mode(mode)
        check_activation(activation)
        self.self_attention = ResidualAttention(dim, heads, dropout)
        self.entangled = EntangledAttention(dim, heads, dropout, mode)
        self.controller = GatedBilateralController(dim, activation) if self.mode.gated else None
        self.ffn = FeedForward(dim, ffn_dim, dropout)

    def project_memory(self, visual: torch.Tensor | None, semantic: torch.Tensor | None) -> EntangledMemory:
        return self.entangled.project_memory(visual, semantic)

    def combine(self, eta: Entangled, a: torch.Tensor) -> torch.Tensor:
        """e_t: GBC over the two pathways (eqs. 11-12), or the single pathway's output (SA, Transformer_v/s).
        ETA gates on eq. 11's [g^(s), g^(v), a]; PA has no injection, and its single attentions MultiHead(a, S^N)
        and MultiHead(a, V^N) are what ETA computes as g^(s) and g^(v), so they fill those slots: [s, v, a]."""
        if self.controller is None:
            return eta.visual if eta.semantic is None else eta.semantic
        if self.mode.inject:
            return self.controller(eta.visual, eta.semantic, eta.semantic_guidance, eta.visual_guidance, a)
        return self.controller(eta.visual, eta.semantic, eta.semantic, eta.visual, a)

    def forward(self, x, cache: KeysValues | None, memory: EntangledMemory, visual_mask, semantic_mask,
                causal: torch.Tensor | None = None):
        """x [B, T, D] for the words after the cached ones; cache ([B, H, P, d], [B, H, P, d]) or None; masks
        [B, n_v], [B, n_s] (None where unread); causal [T, P + T] or [B, T, P + T] (default: word i sees the P past
        words and the new words up to itself) -> (h [B, T, D], (keys, values) [B, H, P + T, d])."""
        new = self.self_attention.project_kv(x)
        keys, values = new if cache is None else (torch.cat([old, now], 2) for old, now in zip(cache, new))
        if causal is None:
            causal = causal_mask(x.size(1), keys.size(2) - x.size(1), x.device)
        a, _ = self.self_attention(x, keys, values, causal if causal.dim() == 3 else causal.unsqueeze(0))
        eta = self.entangled(a, memory, visual_mask, semantic_mask)
        return self.ffn(self.combine(eta, a)), (keys, values)
