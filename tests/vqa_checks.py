"""Behaviour every VQA model must show, shared by the per-model test files (BAN, Bottom-Up): padding as good as
absent, and a toy task whose answers need both the question and the objects."""
from __future__ import annotations

import torch

from crossmodal.data.inputs import Padded


def fit(model, inputs, targets, steps: int) -> None:
    """Full-batch Adamax (BAN's optimiser) on the binary cross-entropy of the logits."""
    optimizer = torch.optim.Adamax(model.parameters(), lr=0.01)
    for _ in range(steps):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def batch(seed=0, question_mask=None, region_mask=None):
    """Two random questions with their images' objects and boxes, padded as the masks say (by default the first
    question's last word and the second image's last object)."""
    g = torch.Generator().manual_seed(seed)
    if question_mask is None:
        question_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    if region_mask is None:
        region_mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    b, n = region_mask.shape
    corners = torch.rand(b, n, 2, generator=g) * 0.5
    boxes = torch.cat([corners, corners + 0.3], -1)
    return {"question": Padded(torch.randint(2, 10, question_mask.shape, generator=g), question_mask),
            "regions": Padded(torch.randn(b, n, 5, generator=g), region_mask),
            "boxes": Padded(boxes, region_mask)}


def assert_padding_is_as_good_as_absent(model) -> torch.Tensor:
    """Garbage in the padded question word and region (and box) changes no logit, and a batch cut to its unpadded
    part gives the same logits as the padded one; returns the logits."""
    inputs = batch()
    with torch.no_grad():
        logits = model(inputs)
        garbage = {k: Padded(v.values.clone(), v.mask) for k, v in inputs.items()}
        garbage["question"].values[0, 3] = 9
        garbage["regions"].values[1, 2] = 40.0
        garbage["boxes"].values[1, 2] = torch.tensor([0.0, 0.0, 1.0, 1.0])
        torch.testing.assert_close(model(garbage), logits)
        short = {k: Padded(v.values[1:, :2], v.mask[1:, :2]) for k, v in inputs.items()}
        torch.testing.assert_close(model(short), logits[1:])
    return logits


def red_or_blue() -> tuple[dict, torch.Tensor]:
    """Question word 2 asks "is there a red one?", word 3 "is there a blue one?"; one object per image is red or
    blue. Answer 0 = yes, 1 = no: neither the question nor the objects alone tell. (inputs, soft targets [4, 2])"""
    questions = torch.tensor([[2], [2], [3], [3]])
    regions = torch.zeros(4, 2, 5)
    regions[[0, 2], 0, 0] = 1.0  # red
    regions[[1, 3], 0, 1] = 1.0  # blue
    regions[:, 1, 4] = 1.0  # a grey distractor in every image
    mask = torch.ones(4, 2, dtype=torch.bool)
    inputs = {"question": Padded(questions, torch.ones(4, 1, dtype=torch.bool)), "regions": Padded(regions, mask),
              "boxes": Padded(torch.tensor([[0.1, 0.1, 0.4, 0.4], [0.5, 0.5, 0.9, 0.9]]).expand(4, 2, 4), mask)}
    return inputs, torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])


def assert_learns_red_or_blue(model) -> None:
    """`model` (two answers) fitted on `red_or_blue` answers all four questions right."""
    inputs, targets = red_or_blue()
    fit(model, inputs, targets, steps=150)
    assert model.eval()(inputs).argmax(1).tolist() == [0, 1, 1, 0]
