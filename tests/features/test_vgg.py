"""ETA's grid features under the real profile (features/vgg.py): VGG-16's layout and weights file, the images'
preparation and the feature set, against direct computations on a narrow stand-in."""
from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch
from PIL import Image
from torch.nn import functional as F

from crossmodal.data.karpathy import KarpathyImage
from crossmodal.features.attributes import AttributeDetector, ImageFiles
from crossmodal.data.regions import RegionFeatures
from crossmodal.features.grid import cell_boxes
from crossmodal.features.vgg import MEAN, STD, Vgg16Conv, conv_indices, extract, load_image, load_vgg16
from crossmodal.io import InputError

WIDTHS = (2, 3, 4, 4, 5)


@pytest.fixture
def weights(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "vgg16-397923af.pth"
    torch.save(Vgg16Conv(WIDTHS).state_dict(), path)
    return path


def test_the_layers_sit_at_torchvisions_indices():
    assert conv_indices() == [0, 2, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28]  # torchvision's vgg16().features
    names = set(Vgg16Conv(WIDTHS).state_dict())
    assert names == {f"features.{i}.{p}" for i in conv_indices() for p in ("weight", "bias")}


def test_conv5_equals_the_layers_applied_one_by_one(weights):
    """Configuration D by hand: 2, 2, 3, 3, 3 convolutions (3x3, padding 1) with ReLUs, a 2x2 max-pooling after the
    first four blocks, none after the fifth."""
    model, state = load_vgg16(weights), torch.load(weights, weights_only=True)
    x = torch.randn(2, 3, 64, 48)
    expected, k = x, 0
    for block, count in enumerate((2, 2, 3, 3, 3)):
        for _ in range(count):
            i = conv_indices()[k]
            expected = F.relu(F.conv2d(expected, state[f"features.{i}.weight"], state[f"features.{i}.bias"], padding=1))
            k += 1
        if block < 4:
            expected = F.max_pool2d(expected, 2)
    with torch.inference_mode():
        out = model(x)
    assert out.shape == (2, WIDTHS[-1], 4, 3) and torch.allclose(out, expected, atol=1e-6)


class Hostile:
    def __reduce__(self):
        return (os.system, ("touch hostile-ran",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # the hostile file's: refused all the same
@pytest.mark.parametrize("content, message", [
    ({"features.0.weight": torch.zeros(2, 3, 3, 3)}, "not VGG-16's weights"),
    (None, "not a PyTorch weights file"),
])
def test_a_wrong_or_hostile_weights_file_fails_with_one_line(tmp_path, monkeypatch, content, message):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "w.pth"
    if content is None:
        path.write_bytes(pickle.dumps(Hostile()))
    else:
        torch.save(content, path)
    with pytest.raises(InputError, match=message) as err:
        load_vgg16(path)
    assert "\n" not in str(err.value) and not (tmp_path / "hostile-ran").exists()
    with pytest.raises(InputError, match="missing VGG-16 weights"):
        load_vgg16(tmp_path / "absent.pth")


def test_an_image_is_resized_to_224_and_normalised_as_imagenet(tmp_path):
    Image.fromarray(np.full((30, 50), 128, np.uint8), "L").save(tmp_path / "grey.png")  # COCO has grey images
    image, size = load_image(tmp_path / "grey.png")
    assert size == (50, 30) and image.shape == (3, 224, 224)
    expected = (128 / 255 - torch.tensor(MEAN)) / torch.tensor(STD)
    assert torch.allclose(image[:, 100, 100], expected)


def test_extract_writes_each_images_pooled_conv5_in_its_own_pixels(tmp_path, weights):
    rng = np.random.default_rng(0)
    images = []
    for k, (w, h) in enumerate([(64, 48), (40, 80)]):
        (tmp_path / "val2014").mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(tmp_path / f"val2014/{k}.png")
        images.append(KarpathyImage(image_id=100 + k, imgid=k, split="val", filepath="val2014", filename=f"{k}.png",
                                    sentences=[]))
    summary = extract(2, weights, tmp_path, images, tmp_path / "grid.h5", progress=False)
    assert summary["images"] == 2 and summary["cells"] == 4 and summary["feature_dim"] == WIDTHS[-1]
    model = load_vgg16(weights)
    with RegionFeatures(tmp_path / "grid.h5") as grid:
        assert grid.ids.tolist() == [100, 101] and grid.source == "VGG-16 conv5 grid"
        for image in images:
            pixels, (w, h) = load_image(tmp_path / image.path)
            with torch.inference_mode():
                conv5 = model(pixels[None])[0]  # [C, 14, 14]: 2 x 2 cells of 7 x 7 positions each
            cells = conv5.reshape(WIDTHS[-1], 2, 7, 2, 7).mean((2, 4)).reshape(WIDTHS[-1], 4).T
            features, boxes = grid.get(image.image_id)
            assert torch.allclose(torch.from_numpy(features), cells, atol=1e-6)
            assert np.array_equal(boxes, cell_boxes(2, w, h)) and boxes[-1].tolist() == [w // 2, h // 2, w, h]
    images.append(KarpathyImage(102, 2, "val", "val2014", "absent.png", []))
    with pytest.raises(InputError, match="missing image file: .*val2014/absent.png"):
        extract(2, weights, tmp_path, images, tmp_path / "other.h5", progress=False)
    assert not (tmp_path / "other.h5").exists()


def test_the_attribute_detector_fine_tunes_vgg16_on_images_read_per_batch(tmp_path, weights):
    """The real profile's detector: VGG-16's conv5 as its trunk, its cells the grid's, images read from disk as the
    batches' rows ask (a tensor of indices, or a slice when predicting)."""
    rng = np.random.default_rng(1)
    paths = []
    for k in range(3):
        paths.append(tmp_path / f"{k}.png")
        Image.fromarray(rng.integers(0, 256, (30 + 10 * k, 40, 3), dtype=np.uint8)).save(paths[-1])
    files = ImageFiles(paths, load_image)
    assert len(files) == 3 and torch.equal(files[torch.tensor([2, 0])], torch.stack([load_image(p)[0] for p in
                                                                                        (paths[2], paths[0])]))
    assert torch.equal(files[1:3], files[torch.tensor([1, 2])])
    detector = AttributeDetector(load_vgg16(weights), grid_size=7, words=4, hidden_dim=6)
    logits = detector.cell_logits(files[0:3])
    assert logits.shape == (3, 49, 4) and detector.hidden[0].in_features == WIDTHS[-1]
    logits.sum().backward()  # fine-tuned: the trunk gets gradients
    assert detector.backbone.features[0].weight.grad.abs().sum() > 0
