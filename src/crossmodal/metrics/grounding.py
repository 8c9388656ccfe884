"""Phrase-grounding scores (BAN on Flickr30k Entities): Recall@k, its upper bound, and recall per entity type.

A phrase is grounded at k when one of its k highest-scoring proposals is positive: IoU >= 0.5 with any box of the
phrase's entity (`positives`). Recall@k is the share of phrases grounded at k, over every phrase evaluated, also
those without a positive proposal, which no ranking can ground (the official `compute_recall_with_logits`, divided by
all phrases); the upper bound is the share of phrases with at least one positive (the official `bound`). Ties in
the scores are broken by the proposal's index, as a stable descending sort does. Per-type recall (the official code
does not compute it) is Recall@k over the phrases of each Flickr30k type; a phrase of several types counts in each.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

RECALL_AT = (1, 5, 10)


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of every box of a [N, 4] with every box of b [M, 4] (x1, y1, x2, y2), areas (x2 - x1)(y2 - y1) as the
    official `calculate_iou` computes them (no +1 for inclusive pixel corners) -> [N, M]."""
    top_left = torch.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    intersection = (bottom_right - top_left).clamp(min=0).prod(-1)

    def area(boxes: torch.Tensor) -> torch.Tensor:
        return (boxes[:, 2:] - boxes[:, :2]).clamp(min=0).prod(-1)

    return intersection / (area(a)[:, None] + area(b)[None, :] - intersection)


def positives(proposals: torch.Tensor, entity_boxes: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    """[M] bool: the proposals [M, 4] whose IoU with any of the entity's boxes [K, 4] is >= `threshold`."""
    if entity_boxes.numel() == 0:
        return torch.zeros(len(proposals), dtype=torch.bool)
    return (box_iou(proposals, entity_boxes) >= threshold).any(1)


def grounded_at(scores: torch.Tensor, positive: torch.Tensor, ks: Sequence[int] = RECALL_AT) -> torch.Tensor:
    """scores [P, M] (-inf on padded proposals), positive [P, M] bool -> [P, len(ks)] bool: phrase p grounded at k."""
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices
    hits = positive.gather(1, order) & torch.isfinite(scores.gather(1, order))
    return torch.stack([hits[:, :k].any(1) for k in ks], 1)


def recall(scores: torch.Tensor, positive: torch.Tensor, types: Sequence[Sequence[str]],
           ks: Sequence[int] = RECALL_AT) -> dict:
    """{"R@k": ..., "upper_bound": ..., "per_type": {type: {"R@k": ..., "phrases": n}}} over the P phrases."""
    grounded = grounded_at(scores, positive, ks).double()
    out = {f"R@{k}": float(grounded[:, i].mean()) for i, k in enumerate(ks)}
    out["upper_bound"] = float((positive & torch.isfinite(scores)).any(1).double().mean())
    per_type: dict[str, dict] = {}
    for name in sorted({t for phrase_types in types for t in phrase_types}):
        rows = torch.tensor([name in phrase_types for phrase_types in types])
        per_type[name] = {**{f"R@{k}": float(grounded[rows, i].mean()) for i, k in enumerate(ks)},
                          "phrases": int(rows.sum())}
    out["per_type"] = per_type
    return out
