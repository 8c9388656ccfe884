"""Behaviour every captioning model must show, shared by the per-model test files."""
from __future__ import annotations

import torch

from crossmodal.data.inputs import Inputs, Padded
from crossmodal.decoding.search import beam_search, greedy_decode
from crossmodal.tasks.objectives.xe import sequence_loss


def region_inputs(feats: torch.Tensor, mask: torch.Tensor) -> dict[str, Padded]:
    """The named inputs of a model that reads only region features."""
    return {"regions": Padded(feats, mask)}


def fit(model: torch.nn.Module, inputs: Inputs, targets: torch.Tensor, steps: int, lr: float = 1e-2) -> None:
    """`steps` full-batch Adam steps of the teacher-forced cross-entropy on `targets`."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        loss = sequence_loss(model(inputs, targets), targets, 0.0)
        opt.zero_grad()
        loss.backward()
        opt.step()


def assert_learns_tiny_task(model: torch.nn.Module, feature_dim: int, steps: int = 150) -> None:
    """The caption depends on which region carries the signal: region 0 -> "4 5", region 1 -> "6 4 5"."""
    feats = torch.zeros(2, 3, feature_dim)
    feats[0, 0, 0] = 1.0
    feats[1, 1, 1] = 1.0
    inputs = region_inputs(feats, torch.ones(2, 3, dtype=torch.bool))
    targets = torch.tensor([[4, 5, 0], [6, 4, 5]])
    fit(model, inputs, targets, steps)
    seqs, _ = greedy_decode(model.eval(), inputs, max_length=4)
    assert seqs[0, :3].tolist() == [4, 5, 0] and seqs[1, :3].tolist() == [6, 4, 5]


def assert_beam_one_is_greedy(model: torch.nn.Module, inputs: Inputs) -> None:
    greedy, greedy_scores = greedy_decode(model.eval(), inputs, max_length=6)
    beam, beam_scores = beam_search(model, inputs, beam_size=1, max_length=6)
    assert torch.equal(beam, greedy)
    torch.testing.assert_close(beam_scores, greedy_scores)
