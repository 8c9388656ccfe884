"""The grounding task and its stages (BAN on Flickr30k Entities): stage prepro_grounding decodes a generated world
exactly, positives are IoU >= 0.5 with a box of the phrase's entity, the loss and the recalls are the direct
computations, a small model learns to ground, and the stages under the real profile stop with one line."""
from __future__ import annotations

import json
import math
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from crossmodal import paths
from crossmodal.config.loader import from_data
from crossmodal.data.flickr30k_entities import ENTITY_TYPES, EntityRelease, grounding_phrases
from crossmodal.features.word_vectors import write_word_vectors
from crossmodal.io import InputError, read_json
from crossmodal.stages import prepro_grounding, synthesize_grounding
from crossmodal.tasks.grounding import (Grounding, grounding_loss_sum, load_grounding_split, phrase_positives,
                                        tracked_name)
from crossmodal.training import distributed
from crossmodal.training.trainer import Trainer
from crossmodal.worlds import image_world
from scene_regions import scene_regions

pytestmark = pytest.mark.usefixtures("one_thread")

SYSTEM = {"task": "grounding", "model": "ban", "inputs": {"regions": "regions"},
          "model_args": {"embed_dim": 16, "hidden_dim": 32, "attention_rank": 2, "dropout": 0.0, "map_dropout": 0.0},
          "train": {"max_epochs": 6, "patience": 0, "batch_size": 16, "optimizer": "adam", "lr": 0.005,
                    "schedule": "constant"}}
PARAMS = {"world": {"images": {"train": 60, "val": 12, "test": 12}, "image_size": 48},
          "evaluation": {"batch_size": 7}, "runtime": {"threads": 1, "progress": False},
          "ban": {"systems": {"g": SYSTEM}}}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A tiny image world, its grounding world and processed arrays (the stages' own `run`), and proposals."""
    root = tmp_path_factory.mktemp("grounding_task")
    cfg = from_data(PARAMS)
    image_world.generate(cfg.world, root / paths.WORLD, progress=False)
    synthesize_grounding.run(cfg, root, None)
    prepro_grounding.run(cfg, root, None)
    graphs = json.loads((root / paths.SCENE_GRAPHS).read_text())["images"]
    scene_regions(root, graphs, cfg)
    return root, cfg


def _iou(a, b) -> float:
    """IoU of two boxes, areas (x2 - x1)(y2 - y1) (the official calculate_iou), by hand."""
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return w * h / union


def _bce(x: float, y: float) -> float:
    p = 1 / (1 + math.exp(-x))
    return -(y * math.log(p) + (1 - y) * math.log(1 - p))


# ---------------------------------------------------------------- preprocessing


def test_preprocessing_decodes_the_world_exactly(world):
    root, _ = world
    source, folder = root / paths.GROUNDING_WORLD, root / paths.GROUNDING
    words = read_json(folder / "words.json")
    word = ["<pad>", "<unk>", *words]
    seen, left_out = Counter(), 0
    release = EntityRelease(source)
    for split in ("train", "val", "test"):
        data = load_grounding_split(folder, split)
        expected = []
        for image_id in release.split_ids(split):
            image = release.image(image_id)
            for k, sentence in enumerate(image.sentences):
                kept = grounding_phrases(sentence, image.annotation)
                left_out += len(sentence.phrases) - len(kept)
                if kept:
                    expected.append((image_id, k, sentence, kept, image.annotation))
        assert len(data.image_ids) == len(expected)
        for row, (image_id, k, sentence, kept, annotation) in enumerate(expected):
            assert (data.image_ids[row], data.sentence_ids[row]) == (image_id, k)
            tokens = [word[t] for t in data.tokens[row] if t]
            assert tokens == [w.lower() for w in sentence.words]
            assert not data.tokens[row, len(tokens):].any()  # back-padded
            assert data.phrase_mask[row].sum() == len(kept) and not data.phrase_mask[row, len(kept):].any()
            for e, phrase in enumerate(kept):
                end, start = data.phrase_ends[row, e], data.phrase_starts[row, e]
                assert tokens[end] == phrase.text.split(" ")[-1].lower()  # the GRU state of the phrase's last word
                assert " ".join(tokens[start:end + 1]) == phrase.text.lower()
                assert data.chains[row, e] == phrase.chain_id
                assert [t for t, on in zip(ENTITY_TYPES, data.types[row, e]) if on] == list(phrase.types)
                got = data.boxes[row, e][data.box_mask[row, e]]
                assert got.tolist() == [list(b) for b in annotation.boxes[phrase.chain_id]]  # the XML's boxes
                seen[phrase.types[0]] += 1
    assert left_out > 50  # not-visual and scene-flagged chains are left out
    assert seen["scene"] > 10 and seen["people"] > 10  # boxed scene chains stay
    counts = Counter(w for split in ("train", "val", "test")
                     for row in load_grounding_split(folder, split).tokens for w in row if w)
    assert [counts[k + 2] for k in range(len(words))] == sorted(counts.values(), reverse=True)


def test_a_phrase_past_the_sentence_length_is_left_out(world, tmp_path):
    root, _ = world
    summary = prepro_grounding.preprocess_grounding(root / paths.GROUNDING_WORLD, tmp_path / "g", 5)
    assert summary["left_out"]["cut"] > 0
    data = load_grounding_split(tmp_path / "g", "train")
    assert data.tokens.shape[1] == 5 and data.phrase_ends[data.phrase_mask].max() <= 4


def test_prepro_grounding_reads_flickr30k_entities_from_its_download_under_the_real_profile(world, tmp_path):
    """The real profile's source is the `flickr30k_entities` download, in the world's layout: the same arrays."""
    import shutil

    root, _ = world
    cfg = from_data({**PARAMS, "profile": "real"})
    with pytest.raises(InputError, match="annotations.zip"):
        prepro_grounding.run(cfg, tmp_path, None)  # not downloaded yet: one line naming the missing file
    assert not (tmp_path / paths.GROUNDING).exists()
    shutil.copytree(root / paths.GROUNDING_WORLD, tmp_path / paths.raw("flickr30k_entities"))
    prepro_grounding.run(cfg, tmp_path, None)
    assert (tmp_path / paths.GROUNDING / "words.json").read_text() == (root / paths.GROUNDING / "words.json").read_text()
    for split in ("train", "val", "test"):
        with np.load(root / paths.GROUNDING / f"{split}.npz") as a, np.load(tmp_path / paths.GROUNDING / f"{split}.npz") as b:
            assert sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------- positives and loss


def test_positives_are_iou_of_at_least_a_half_with_any_box_of_the_entity():
    proposals = torch.tensor([[[0, 0, 10, 10], [0, 0, 10, 5], [0, 0, 10, 3.3], [20, 20, 30, 30], [0, 0, 0, 0]]],
                             dtype=torch.float32)  # IoU with [0, 0, 10, 10]: 1, 0.5, 0.33; a far box; padding
    proposal_mask = torch.tensor([[True, True, True, True, False]])
    boxes = torch.tensor([[[[0, 0, 10, 10], [0, 0, 0, 0]], [[21, 21, 30, 30], [0, 0, 10, 10]],
                           [[0, 0, 0, 0], [0, 0, 0, 0]]]], dtype=torch.float32)
    box_mask = torch.tensor([[[True, False], [True, True], [False, False]]])
    got = phrase_positives(proposals, proposal_mask, boxes, box_mask)
    assert got.tolist() == [[[True, True, False, False, False], [True, True, False, True, False],
                             [False, False, False, False, False]]]


def test_the_loss_is_the_summed_bce_of_every_real_pair_per_sentence(world):
    root, cfg = world
    task = Grounding(cfg, "g", root, distributed.current(cfg.compute))
    torch.manual_seed(0)
    model = task.build_model().eval()
    data, inputs = task.splits["train"], task.inputs["train"]
    rows = np.array([3, 0, 17, 8, 41])
    (_, batch), = task.train_batches([rows])
    loss, logged = task.loss(lambda fn: fn(model), model, rows, batch, None)
    with torch.no_grad():
        logits = model(batch)
    proposals, mask = inputs.proposals, batch["regions"].mask
    expected = 0.0
    for b, s in enumerate(rows):
        for e in np.nonzero(data.phrase_mask[s])[0]:
            entity = data.boxes[s, e][data.box_mask[s, e]].tolist()
            for j in np.nonzero(mask[b].numpy())[0]:
                box = proposals[inputs.image_row[s], j].tolist()
                positive = any(_iou(box, other) >= 0.5 for other in entity)
                expected += _bce(float(logits[b, e, j]), float(positive))
    assert loss.item() == pytest.approx(expected / len(rows), rel=1e-5)
    assert logged["train_loss"] == (loss.item(), 1.0)


def test_the_loss_sum_leaves_padded_pairs_out():
    logits = torch.tensor([[[0.5, -1.0, -float("inf")], [2.0, 0.0, -float("inf")]]])
    positive = torch.tensor([[[True, False, False], [False, True, False]]])
    phrases, regions = torch.tensor([[True, False]]), torch.tensor([[True, True, False]])
    assert grounding_loss_sum(logits, positive, phrases, regions).item() == pytest.approx(_bce(0.5, 1) + _bce(-1, 0))


# ---------------------------------------------------------------- evaluation


def test_recalls_are_the_direct_computation_per_sentence(world):
    root, cfg = world
    task = Grounding(cfg, "g", root, distributed.current(cfg.compute))
    torch.manual_seed(1)
    model = task.build_model().eval()
    result = {}
    for split in ("val", "test"):
        data, inputs = task.splits[split], task.inputs[split]
        hits: dict[str, list[list[bool]]] = {}
        for s in range(len(data.image_ids)):  # one sentence at a time: no padding of other sentences
            (_, batch), = inputs.batches([np.array([s])])
            with torch.no_grad():
                logits = model(batch)[0]
            n = int(batch["regions"].mask[0].sum())
            for e in np.nonzero(data.phrase_mask[s])[0]:
                entity = data.boxes[s, e][data.box_mask[s, e]].tolist()
                ranked = sorted(range(n), key=lambda j: -float(logits[e, j]))
                boxes = inputs.proposals[inputs.image_row[s]]
                positive = [any(_iou(boxes[j].tolist(), b) >= 0.5 for b in entity) for j in ranked]
                row = [any(positive[:k]) for k in (1, 5, 10)]
                for name in ["all", *(t for t, on in zip(ENTITY_TYPES, data.types[s, e]) if on)]:
                    hits.setdefault(name, []).append(row)
        result[split] = {name: np.mean(rows, 0) for name, rows in hits.items()}
    assert task.validate(model) == pytest.approx(result["val"]["all"][0], abs=1e-12)
    test = task.test(model)["test"]
    expected = dict(zip(("R@1", "R@5", "R@10"), result["test"]["all"]))
    expected.update({t: result["test"][t][0] for t in ENTITY_TYPES if t in result["test"]})
    assert list(test) == list(expected) and test == pytest.approx(expected, abs=1e-12)
    assert set(test) - {"R@1", "R@5", "R@10"} <= set(ENTITY_TYPES)


# ---------------------------------------------------------------- training, outputs, word vectors


def test_a_small_model_learns_to_ground_and_writes_its_outputs(world):
    root, cfg = world
    trainer = Trainer(cfg, "g", root, progress=False)
    positives = trainer.task.positives("val")
    real = torch.isfinite(trainer.task.phrase_scores(trainer.model, "val"))
    chance = float((positives.sum(1) / real.sum(1)).mean())  # expected R@1 of a random ranking
    result = trainer.run()
    curve = [row["val_recall"] for row in result["history"]]
    losses = [row["train_loss"] for row in result["history"]]
    assert losses[-1] < 0.6 * losses[0]
    assert max(curve) > chance + 0.3 and max(curve) > 0.7, (chance, curve)
    logged = {}
    run = SimpleNamespace(log_metrics=logged.update, set_tags=lambda tags: None, log_artifact=lambda path: None)
    metrics = trainer.task.write_outputs(run, result)
    assert metrics["task"] == "grounding" and metrics["variant"] == "g" and "predictions" not in metrics
    assert metrics["test"]["R@1"] <= metrics["test"]["R@5"] <= metrics["test"]["R@10"] <= metrics["upper_bound"]
    assert "test_R_at_1" in logged and tracked_name("R@10") == "R_at_10"
    predictions = json.loads((root / paths.PREDICTIONS / "g" / "grounding_test_g.json").read_text())
    data = trainer.task.splits["test"]
    assert len(predictions) == data.phrase_mask.sum()
    assert np.mean([p["positive"] for p in predictions]) == pytest.approx(metrics["test"]["R@1"])
    first = predictions[0]
    assert first["image_id"] == data.image_ids[0] and first["chain_id"] == data.chains[0, 0]


def test_word_vectors_start_the_embedding(world):
    root, cfg = world
    words = read_json(root / paths.GROUNDING / "words.json")
    write_word_vectors(root / paths.WORD_VECTORS, {words[0]: np.full(16, 0.5, np.float32)})
    system = {**SYSTEM, "model_args": {**SYSTEM["model_args"], "word_vectors": True}}
    glove = from_data({**PARAMS, "ban": {"systems": {"g": system}}})
    model = Grounding(glove, "g", root, distributed.current(glove.compute)).build_model()
    weight = model.word_embed.weight
    assert torch.all(weight[2] == 0.5) and torch.all(weight[3] == 0) and torch.all(weight[0] == 0)


# ---------------------------------------------------------------- real profile


def test_the_stages_under_the_real_profile(world, tmp_path):
    cfg = from_data({**PARAMS, "profile": "real"})
    with pytest.raises(InputError) as err:
        prepro_grounding.run(cfg, tmp_path, None)
    assert "\n" not in str(err.value) and "Flickr30k Entities" in str(err.value)
    synthesize_grounding.run(cfg, tmp_path, None)
    note = read_json(tmp_path / paths.GROUNDING_WORLD / "PROFILE.json")
    assert note["profile"] == "real" and "Flickr30k Entities" in note["note"]
