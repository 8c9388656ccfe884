"""Phrase-grounding scores (metrics/grounding.py): IoU as the official code computes it, positives at IoU >= 0.5,
and Recall@k, its upper bound and per-type recall against a direct loop."""
from __future__ import annotations

import pytest
import torch

from crossmodal.metrics.grounding import box_iou, grounded_at, positives, recall


def test_iou_is_the_official_formula():
    a = torch.tensor([[0.0, 0.0, 10.0, 10.0]])
    b = torch.tensor([[5.0, 0.0, 15.0, 10.0], [10.0, 10.0, 20.0, 20.0], [0.0, 0.0, 10.0, 10.0],
                      [20.0, 20.0, 30.0, 30.0]])
    assert box_iou(a, b)[0].tolist() == pytest.approx([50 / 150, 0.0, 1.0, 0.0])
    assert positives(b, a).tolist() == [False, False, True, False]
    assert positives(b, torch.zeros(0, 4)).tolist() == [False] * 4


def test_recall_matches_a_direct_count():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(40, 12, generator=g)
    scores[:, 10:] = float("-inf")  # padded proposals
    positive = torch.rand(40, 12, generator=g) < 0.15
    positive[:3] = False  # phrases no proposal grounds
    positive[5, 11] = True  # a positive only among padding does not count
    types = [("people",) if p % 3 else ("other", "people") for p in range(40)]
    got = recall(scores, positive, types)
    for k in (1, 5, 10):
        want = 0
        for p in range(40):
            ranked = sorted(range(10), key=lambda j: -float(scores[p, j]))[:k]
            want += any(bool(positive[p, j]) for j in ranked)
        assert got[f"R@{k}"] == want / 40
    assert got["upper_bound"] == sum(bool(positive[p, :10].any()) for p in range(40)) / 40
    other = [p for p in range(40) if p % 3 == 0]
    assert got["per_type"]["other"]["phrases"] == len(other) and got["per_type"]["people"]["phrases"] == 40
    assert got["per_type"]["other"]["R@1"] == float(grounded_at(scores[other], positive[other])[:, 0].double().mean())
