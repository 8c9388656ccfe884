"""The counting component (Zhang et al., ICLR 2018) against its equations written as loops, and on inputs whose
count is known: separated objects, duplicate proposals, the count feature's interpolation."""
import math

import pytest
import torch

from crossmodal.modules.counter import Counter, PiecewiseLinear, box_iou, count_feature

SURE = 40.0  # sigmoid(±40) is 1 / 0 to float64 precision


def _separated(n: int) -> torch.Tensor:
    """n unit boxes in a row, one unit apart: every pair has IoU 0."""
    return torch.tensor([[2.0 * i, 0.0, 2.0 * i + 1, 1.0] for i in range(n)], dtype=torch.float64)


def _eq12(weight: torch.Tensor, x: float) -> float:
    """Eq. 12 as printed: Σ_{i ≤ ⌊dx⌋} w_i + (dx − ⌊dx⌋) w_{⌊dx⌋+1}, with w_0 = 0 and w = |w'| / Σ|w'|."""
    w = [0.0] + (weight.abs() / weight.abs().sum()).tolist()
    d = len(w) - 1
    y = min(max(d * x, 0.0), float(d))
    m = min(math.floor(y), d - 1)
    return sum(w[: m + 1]) + (y - m) * w[m + 1]


def _iou(a, b) -> float:
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = width * height
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _loop_count(counter: Counter, boxes: torch.Tensor, logits: torch.Tensor) -> tuple[float, float]:
    """Eqs. 1-11 for one image, entry by entry."""
    f = [lambda x, m=m: _eq12(m.weight.detach(), x) for m in counter.f]
    order = sorted(range(len(logits)), key=lambda i: -float(logits[i]))[: counter.objects]
    a = [1 / (1 + math.exp(-float(logits[i]))) for i in order]
    b = [boxes[i].tolist() for i in order]
    n = len(a)
    dist = [[1 - _iou(b[i], b[j]) for j in range(n)] for i in range(n)]  # eq. 2
    x = [[f[3](a[i] * a[j]) * f[4](dist[i][j]) for j in range(n)] for i in range(n)]  # eq. 4's X
    sim = [[f[2](1 - abs(a[i] - a[j])) * math.prod(f[2](1 - abs(x[i][k] - x[j][k])) for k in range(n))
            for j in range(n)] for i in range(n)]  # eq. 4
    alike = [sum(row) for row in sim]
    total = 0.0
    for i in range(n):
        total += f[0](a[i] * a[i]) / alike[i]  # eq. 6
        for j in range(n):
            if i != j:
                total += f[0](a[i] * a[j]) * f[1](dist[i][j]) / (alike[i] * alike[j])  # eqs. 1, 3, 5
    p_a = sum(abs(f[5](v) - 0.5) for v in a) / n  # eq. 9
    p_d = sum(abs(f[6](dist[i][j]) - 0.5) for i in range(n) for j in range(n)) / n**2  # eq. 10
    return math.sqrt(total), f[7](p_a + p_d)  # eqs. 7, 11


def test_iou_against_hand_calculation():
    a = torch.tensor([[[0.0, 0, 2, 2], [0, 0, 4, 4], [10, 10, 11, 12]]])
    b = torch.tensor([[[1.0, 1, 3, 3], [1, 1, 2, 2], [0, 0, 2, 2]]])
    iou = box_iou(a, b)[0]
    # overlap 1 of union 4 + 4 - 1; containment 1 of 16; disjoint
    torch.testing.assert_close(iou[0], torch.tensor([1 / 7, 1 / 4, 1.0]))
    torch.testing.assert_close(iou[1], torch.tensor([4 / 16, 1 / 16, 4 / 16]))
    torch.testing.assert_close(iou[2], torch.tensor([0.0, 0.0, 0.0]))


def test_piecewise_linear_is_eq_12_and_starts_as_the_identity():
    f = PiecewiseLinear(16).double()
    x = torch.linspace(0, 1, 37, dtype=torch.float64)
    torch.testing.assert_close(f(x), x)
    torch.manual_seed(0)
    with torch.no_grad():
        f.weight.copy_(torch.randn(16))  # signs are taken off by |w'|
    values = f(x)
    printed = [_eq12(f.weight.detach(), float(v)) for v in x]
    torch.testing.assert_close(values, torch.tensor(printed, dtype=torch.float64))
    assert values[0] == 0 and torch.isclose(values[-1], torch.tensor(1.0, dtype=torch.float64))
    assert torch.all(values[1:] >= values[:-1])  # monotone
    assert f.weight.numel() == 16


def test_piecewise_linear_gradients_are_eq_12s():
    """The lookup form's gradients for x and the weights are those of eq. 12's sum, x = 0 and 1 and piece
    boundaries included."""
    torch.manual_seed(1)
    f = PiecewiseLinear(16).double()
    with torch.no_grad():
        f.weight.copy_(torch.rand(16) + 0.1)
    x = torch.cat([torch.rand(40, dtype=torch.float64), torch.tensor([0.0, 1.0, 0.5, 3 / 16])]).requires_grad_()
    f(x).sum().backward()
    got_x, got_w = x.grad.clone(), f.weight.grad.clone()
    x.grad, f.weight.grad = None, None
    w = f.weight.abs() / f.weight.abs().sum()
    sum_form = sum(w[i] * (16 * x - i).clamp(0, 1) for i in range(16))
    sum_form.sum().backward()
    inside = (16 * x.detach()) % 1 != 0  # at a boundary the two forms take the left or right slope
    torch.testing.assert_close(got_x[inside], x.grad[inside])
    torch.testing.assert_close(got_w, f.weight.grad)


def test_counter_matches_the_equations_written_as_loops():
    torch.manual_seed(0)
    counter = Counter(objects=10).double()
    with torch.no_grad():
        for m in counter.f:
            m.weight.copy_(torch.rand(16) + 0.1)
    corner = torch.rand(2, 12, 2, dtype=torch.float64)
    boxes = torch.cat([corner, corner + 0.2 + 0.5 * torch.rand(2, 12, 2, dtype=torch.float64)], -1)
    logits = 2 * torch.randn(2, 12, dtype=torch.float64)  # 12 boxes: the top 10 are kept
    count, confidence = counter.count(boxes, logits)
    for b in range(2):
        expected_count, expected_confidence = _loop_count(counter, boxes[b], logits[b])
        assert count[b].item() == pytest.approx(expected_count, rel=1e-10)
        assert confidence[b].item() == pytest.approx(expected_confidence, rel=1e-10)
    torch.testing.assert_close(counter(boxes, logits), count_feature(count, 10) * confidence.unsqueeze(-1))


@pytest.mark.parametrize("overlapping_background", [False, True])
def test_three_separated_objects_count_three(overlapping_background):
    boxes = _separated(10)
    if overlapping_background:  # the unattended boxes sit on the attended ones: they must not matter
        boxes[3:] = boxes[torch.tensor([0, 1, 2, 0, 1, 2, 0])] + 0.3
    logits = torch.tensor([SURE] * 3 + [-SURE] * 7, dtype=torch.float64)
    count, confidence = Counter(objects=10).double().count(boxes[None], logits[None])
    assert count.item() == pytest.approx(3.0, abs=1e-9)
    if not overlapping_background:  # every a and every D is 0 or 1: fully confident
        assert confidence.item() == pytest.approx(1.0, abs=1e-9)
        feature = Counter(objects=10).double()(boxes[None], logits[None])[0]
        torch.testing.assert_close(feature, torch.eye(11, dtype=torch.float64)[3])


@pytest.mark.parametrize("extra, expected", [(0, 1.0), (1, 2.0)])
def test_duplicate_boxes_count_once(extra, expected):
    boxes = _separated(10)
    boxes[1] = boxes[0]  # two identical proposals of one object
    logits = torch.tensor([SURE] * (2 + extra) + [-SURE] * (8 - extra), dtype=torch.float64)
    count, _ = Counter(objects=10).double().count(boxes[None], logits[None])
    assert count.item() == pytest.approx(expected, abs=1e-9)


def test_top_k_and_fewer_boxes_than_k():
    boxes = _separated(14)
    logits = torch.full((14,), -SURE, dtype=torch.float64)
    logits[[4, 11, 13]] = SURE  # three attended objects, two of them past the first ten boxes
    count, _ = Counter(objects=10).double().count(boxes[None], logits[None])
    assert count.item() == pytest.approx(3.0, abs=1e-9)
    few = Counter(objects=10).double()(boxes[None, :4], logits[None, [4, 11, 13, 0]])  # 4 boxes < K = 10
    assert few.shape == (1, 11) and few[0].argmax().item() == 3


def test_count_feature_interpolates_linearly():
    counts = torch.tensor([0.0, 2.25, 3.0, 1.5, 4.7, -0.2])
    expected = torch.tensor([[1.0, 0, 0, 0], [0, 0, 0.75, 0.25], [0, 0, 0, 1], [0, 0.5, 0.5, 0], [0, 0, 0, 1],
                             [1, 0, 0, 0]])
    torch.testing.assert_close(count_feature(counts, 3), expected)


def test_gradients_reach_every_piecewise_function():
    torch.manual_seed(1)
    counter = Counter(objects=6)
    corner = torch.rand(3, 8, 2)
    boxes = torch.cat([corner, corner + 0.3], -1)
    logits = torch.randn(3, 8, requires_grad=True)
    (counter(boxes, logits) * torch.randn(3, 7)).sum().backward()
    for k, f in enumerate(counter.f, 1):
        assert f.weight.grad is not None and torch.all(f.weight.grad != 0), f"f_{k}"
    assert logits.grad.abs().sum() > 0
