"""ETA's attribute detector (features/attributes.py), checked against direct computations of what its docstrings
define: the noisy-OR and its loss, the detection metrics, the vocabulary and oracle words, learning and stopping."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from crossmodal.config.features import AttributesConfig
from crossmodal.data.karpathy import KarpathyImage, KarpathySentence
from crossmodal.features.attributes import (
    AttributeDetector, average_precision, detection_metrics, detector_words, mil_loss, noisy_or_log, oracle_words,
    train_detector, word_labels,
)
from crossmodal.features.backbone import Backbone


def test_noisy_or_and_its_loss_equal_the_products_written_out():
    logits = torch.randn(3, 5, 4, dtype=torch.float64) * 3
    labels = torch.tensor([[1, 0, 1, 0], [0, 0, 0, 1], [1, 1, 1, 1]], dtype=torch.float64)
    p = torch.sigmoid(logits)
    none = torch.ones(3, 4, dtype=torch.float64)
    for j in range(5):
        none = none * (1 - p[:, j])
    log_any, log_none = noisy_or_log(logits)
    torch.testing.assert_close(log_none.exp(), none)
    torch.testing.assert_close(log_any.exp(), 1 - none)
    expected = -(labels * torch.log(1 - none) + (1 - labels) * torch.log(none)).sum(1).mean()
    torch.testing.assert_close(mil_loss(logits, labels), expected)


def test_noisy_or_stays_finite_where_the_product_underflows():
    logits = torch.tensor([[[-60.0], [-60.0]], [[40.0], [40.0]]])  # P ~ 1e-26 and P ~ 1 - 1e-35
    log_any, log_none = noisy_or_log(logits)
    assert torch.isfinite(log_any).all() and torch.isfinite(log_none).all()
    assert log_any[0, 0] < -50 and log_none[1, 0] < -70


def test_average_precision_and_precision_at_k_by_hand():
    assert average_precision(np.array([0.9, 0.8, 0.7, 0.6]), np.array([True, False, True, False])) == \
        pytest.approx((1 / 1 + 2 / 3) / 2)
    probs = np.array([[0.9, 0.1, 0.5], [0.2, 0.8, 0.7]])
    labels = np.array([[1, 0, 0], [0, 0, 1]], dtype=np.float32)
    metrics = detection_metrics(probs, labels, top_k=2)
    assert metrics["precision_at_2"] == pytest.approx((1 / 2 + 1 / 2) / 2)
    # word 0: positive image ranked first (AP 1); word 1: no positive (skipped); word 2: positive ranked first
    assert metrics["mAP"] == pytest.approx(1.0) and metrics["words_with_positives"] == 2


def _image(image_id: int, split: str, *captions: str) -> KarpathyImage:
    return KarpathyImage(image_id, image_id, split, None, f"{image_id}.png",
                         [KarpathySentence(k, c.split(), c) for k, c in enumerate(captions)])


def test_vocabulary_labels_and_oracle_words_come_from_the_captions():
    images = [_image(1, "train", "a red circle and a red square", "a red circle"),
              _image(2, "train", "a blue star"),
              _image(3, "test", "a green star near a star")]
    cfg = AttributesConfig(words=3, exclude="a and", top_k=2)
    vocab = ["<pad>", "<bos>", "<eos>", "<unk>", "a", "red", "circle", "and", "square", "blue", "star", "green"]
    words = detector_words(images, vocab, cfg)
    assert words == ["red", "circle", "blue"]  # train counts 3, 2, then ties by word; never test's words
    np.testing.assert_array_equal(word_labels(images, words), [[1, 1, 0], [0, 0, 1], [0, 0, 0]])
    assert oracle_words(images[0], ["circle", "square", "red"], top_k=2) == ["red", "circle"]
    assert oracle_words(images[2], ["green", "star"], top_k=5) == ["star", "green"]  # by count, then rank


@pytest.mark.slow
def test_the_detector_learns_which_images_hold_a_word():
    torch.manual_seed(0)
    backbone = Backbone(2, {"color": 2, "size": 2, "texture": 2}, channels=4, feature_dim=8)
    detector = AttributeDetector(backbone, grid_size=2, words=2, hidden_dim=8)
    images = torch.zeros(16, 3, 16, 16, dtype=torch.uint8)
    labels = torch.zeros(16, 2)
    images[:8, 0, 2:6, 2:6] = 255  # a red patch: word 0
    labels[:8, 0] = 1
    images[4:12, 2, 10:14, 10:14] = 255  # a blue patch: word 1
    labels[4:12, 1] = 1
    optimizer = torch.optim.Adam(detector.parameters(), lr=0.01)
    losses = []
    for _ in range(60):
        loss = mil_loss(detector.cell_logits(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]
    detector.eval()
    probs = noisy_or_log(detector.cell_logits(images))[0].exp().detach().numpy()
    assert detection_metrics(probs, labels.numpy(), top_k=1)["mAP"] == pytest.approx(1.0)


def _patch_world(n: int) -> tuple[list[KarpathyImage], torch.Tensor]:
    """n images per split: a red patch where the captions say red, a blue one where they say blue."""
    images, pixels = [], torch.zeros(3 * n, 3, 16, 16, dtype=torch.uint8)
    for k in range(3 * n):
        red, blue = k % 2 == 0, k % 3 == 0
        pixels[k, 0, 2:6, 2:6] = 255 * red
        pixels[k, 2, 10:14, 10:14] = 255 * blue
        words = ["red"] * red + ["blue"] * blue + ["shape"]
        images.append(_image(k, ("train", "val", "test")[k // n], " ".join(["a", *words])))
    return images, pixels


def test_the_detector_stops_by_patience_on_validation_map_and_patience_0_runs_every_epoch(tmp_path):
    images, pixels = _patch_world(12)
    vocab = ["<pad>", "<bos>", "<eos>", "<unk>", "a", "red", "blue", "shape"]
    rows = {im.image_id: k for k, im in enumerate(images)}

    def train(**knobs):
        torch.manual_seed(0)
        backbone = Backbone(2, {"color": 2, "size": 2, "texture": 2}, channels=4, feature_dim=8)
        cfg = AttributesConfig(words=3, exclude="a", top_k=2, hidden_dim=8, batch_size=4, lr=0.03, trunk_lr=0.003,
                              **knobs)
        out = {name: tmp_path / f"{name}.h5" for name in ("attributes", "attributes_oracle")}
        return train_detector(cfg, 2, backbone, lambda items: pixels[[rows[im.image_id] for im in items]], images,
                              {im.image_id: (16, 16) for im in images}, vocab, out, progress=False)

    stopped = train(epochs=40, patience=2, min_delta=0.001)
    curve = [h["val_mAP"] for h in stopped["history"]]
    best = max(range(len(curve)), key=lambda k: (curve[k], -k))
    assert len(curve) < 40 and stopped["best_epoch"] == best + 1  # the best epoch's model, by validation alone
    level, last_gain = -1.0, 0
    for k, value in enumerate(curve):  # the rule written out: a gain beats the last gain's value by > min_delta
        if value > level + 0.001:
            level, last_gain = value, k
    assert len(curve) - 1 - last_gain == 2 and curve[-1] <= max(curve[:-1])  # 2 without a gain, the last no best
    assert curve[0] < 0.8 < 0.9 < max(curve)  # it learned the colours before it stopped
    fixed = train(epochs=len(curve) + 1)  # patience 0: every epoch, and the same epochs as the stopped run's
    assert [h["val_mAP"] for h in fixed["history"][:len(curve)]] == curve and len(fixed["history"]) == len(curve) + 1
