"""The counting component of Zhang, Hare & Prügel-Bennett (ICLR 2018, "Learning to Count Objects in Natural Images
for Visual Question Answering", arXiv 1802.05766), which BAN adds to its residual updates (`bilinear.py`).

From attention logits over n object boxes, the K = `objects` most attended boxes are kept (top-K by attention,
K = 10 in both papers' code) and a = sigmoid(logits) ∈ [0, 1]^K. Equations of the counting paper:
- Eq. 1: A = a aᵀ, the attention graph (edge i-j weighted by both ends' relevance).
- Eq. 2: D_ij = 1 − IoU(b_i, b_j), the distance between boxes (`box_iou`).
- Eq. 3, intra-object de-duplication: Ã = f_1(A) ⊙ f_2(D), which drops the edges between overlapping proposals
  (D_ii = 0 drops the self-loops too).
- Eq. 4, inter-object de-duplication: proposals i, j are alike when their attention and their rows of
  X = f_4(A) ⊙ f_5(D) agree: s_ij = f_3(1 − |a_i − a_j|) Π_k f_3(1 − |X_ik − X_jk|).
- Eq. 5: C_ij = Ã_ij / (Σ_k s_ik · Σ_k s_jk) off the diagonal; eq. 6: the self-loops come back, scaled the same
  way, C_ii = f_1(a_i a_i) / Σ_k s_ik.
- Eq. 7: c = sqrt(Σ_ij C_ij), the count (edges grow quadratically with the number of objects).
- Eq. 8: o_i = max(0, 1 − |c − i|), i = 0..K: the (K+1)-way one-hot of c, interpolated linearly between the two
  nearest integers (`count_feature`).
- Eqs. 9-10, confidence: p_a = (1/K) Σ_i |f_6(a_i) − 0.5| and p_D = (1/K²) Σ_ij |f_7(D_ij) − 0.5|, how far the
  attention and the distances are from the undecided 0.5; eq. 11: the output õ = f_8(p_a + p_D) · o.
- Eq. 12: each f_k is a monotone piecewise-linear function on [0, 1] with d = 16 learned pieces:
  f_k(x) = Σ_{i ≤ ⌊dx⌋} w_{k,i} + (dx − ⌊dx⌋) w_{k,⌊dx⌋+1}, w_k = |w'_k| / Σ|w'_k| (so f_k(0) = 0, f_k(1) = 1),
  initialised with equal weights: the identity (`PiecewiseLinear`). Eight such functions, f_1..f_8 = `f[0]..f[7]`.

Choices and deviations:
- The official code allocates 16 piecewise functions and uses 8, and keeps a 17th weight per function pinned at 0
  (w_{k,0}); here there are 8 functions of exactly 16 learned weights each, written as
  f(x) = Σ_i w_i · clamp(dx − (i − 1), 0, 1), which equals eq. 12 on [0, 1] and is 0 below, 1 above.
- The diagonal of Ã is set to zero explicitly before eq. 6 puts the self-loops back; the official code relies on
  D_ii = 0, which fails only for zero-area boxes.
- Fewer than K boxes: the logits are padded with -inf (a = 0) and the boxes with zero boxes, so the output is
  always K+1 wide. A zero-area box has IoU 0 with everything (D = 1).
- c = sqrt(Σ C + 1e-20) as the official code, so that c = 0 still has a finite gradient; IoU's denominator has
  +1e-12 (zero-area boxes). c is clamped to [0, K] before eq. 8 (c never exceeds K in exact arithmetic).
- Boxes are [B, n, 4] rows (x1, y1, x2, y2); the official code takes [B, 4, n].

Equation numbers follow the counting paper's order as far as they could be checked here (its full text was not
readable with this project's tools; a third-party annotated implementation numbers them the same way); the
equations are checked against the official Cyanogenoid/vqa-counting code, which BAN's code carries unchanged.
"""
from __future__ import annotations

import torch
from torch import nn


def box_iou(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """IoU of boxes a [B, n, 4] and b [B, m, 4] (x1, y1, x2, y2) -> [B, n, m]."""
    top_left = torch.maximum(a[:, :, None, :2], b[:, None, :, :2])
    bottom_right = torch.minimum(a[:, :, None, 2:], b[:, None, :, 2:])
    intersection = (bottom_right - top_left).clamp(min=0).prod(-1)
    area_a = (a[..., 2:] - a[..., :2]).clamp(min=0).prod(-1)
    area_b = (b[..., 2:] - b[..., :2]).clamp(min=0).prod(-1)
    return intersection / (area_a[:, :, None] + area_b[:, None, :] - intersection + eps)


def count_feature(count: torch.Tensor, objects: int) -> torch.Tensor:
    """Eq. 8: counts [B] -> [B, objects + 1], o_i = max(0, 1 − |c − i|) with c clamped to [0, objects]."""
    steps = torch.arange(objects + 1, dtype=count.dtype, device=count.device)
    return (1 - (count.clamp(0, objects).unsqueeze(-1) - steps).abs()).clamp(min=0)


class PiecewiseLinear(nn.Module):
    """Eq. 12: a monotone piecewise-linear map of [0, 1] onto [0, 1] with `pieces` learned slopes, the identity at
    initialisation.

    Eq. 12 as printed is a lookup: the weights' cumulative sum below the piece x falls in, plus that piece's covered
    fraction, f(x) = Σ_{i < ⌊d·x⌋} w_i + (d·x − ⌊d·x⌋) w_⌊d·x⌋ (w normalised to sum 1), which is computed here. Its
    gradients are d · w_⌊d·x⌋ for x and the pieces' coverage for w. The same function as a sum over all pieces,
    Σ_i w_i · clamp(d·x − i, 0, 1), multiplies every input with all d pieces' coverage: 16 times the elements on the
    counter's [B, K, K, K] tensor. The first results used that sum; the lookup rounds differently in float32 and is
    2.2-2.4x faster a counter call (benchmarks/bench_counter.py sets the two side by side)."""

    def __init__(self, pieces: int = 16):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(pieces))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight.abs()
        w = w / w.sum()
        pieces = w.numel()
        scaled = (pieces * x).clamp(0, pieces)
        index = scaled.detach().floor().clamp(max=pieces - 1).long()  # the piece x falls in (x = 1: the last)
        below = torch.cat([w.new_zeros(1), w.cumsum(0)])  # Σ of the pieces left of each index
        return below[index] + (scaled - index) * w[index]


class Counter(nn.Module):
    """The counting component: boxes [B, n, 4] and attention logits [B, n] -> the count feature õ [B, K + 1].

    `count(boxes, logits)` gives eq. 7's c [B] and eq. 11's confidence f_8(p_a + p_D) [B] separately.
    """

    def __init__(self, objects: int = 10, pieces: int = 16):
        super().__init__()
        self.objects = objects
        self.f = nn.ModuleList(PiecewiseLinear(pieces) for _ in range(8))  # f_1 .. f_8

    def most_attended(self, boxes: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The top-K boxes by attention and their attention a = sigmoid(logit): ([B, K, 4], [B, K])."""
        missing = self.objects - logits.size(1)
        if missing > 0:
            logits = torch.cat([logits, logits.new_full((logits.size(0), missing), float("-inf"))], 1)
            boxes = torch.cat([boxes, boxes.new_zeros(boxes.size(0), missing, 4)], 1)
        top, index = logits.topk(self.objects, dim=1)
        return boxes.gather(1, index.unsqueeze(-1).expand(-1, -1, 4)), torch.sigmoid(top)

    def count(self, boxes: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.f
        boxes, a = self.most_attended(boxes, logits)
        attention = a.unsqueeze(-1) * a.unsqueeze(-2)  # eq. 1
        distance = 1 - box_iou(boxes, boxes)  # eq. 2
        off_diagonal = 1 - torch.eye(self.objects, dtype=a.dtype, device=a.device)
        intra = f[0](attention) * f[1](distance) * off_diagonal  # eq. 3
        rows = f[3](attention) * f[4](distance)  # X of eq. 4
        attention_alike = 1 - (a.unsqueeze(-1) - a.unsqueeze(-2)).abs()  # 1 − |a_i − a_j|
        rows_alike = 1 - (rows.unsqueeze(-2) - rows.unsqueeze(-3)).abs()  # 1 − |X_ik − X_jk| as [B, i, j, k]
        similarity = f[2](attention_alike) * f[2](rows_alike).prod(-1)  # s_ij
        alike = similarity.sum(-1)  # Σ_k s_ik
        edges = intra / (alike.unsqueeze(-1) * alike.unsqueeze(-2))  # eq. 5
        loops = f[0](a * a) / alike  # eq. 6
        count = (edges.sum((1, 2)) + loops.sum(1) + 1e-20).sqrt()  # eq. 7
        p_a = (f[5](a) - 0.5).abs().mean(1)  # eq. 9
        p_d = (f[6](distance) - 0.5).abs().mean((1, 2))  # eq. 10
        return count, f[7](p_a + p_d)

    def forward(self, boxes: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        count, confidence = self.count(boxes, logits)
        return count_feature(count, self.objects) * confidence.unsqueeze(-1)  # eqs. 8, 11
