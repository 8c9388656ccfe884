"""The VQA task and BAN's data path: prepro_vqa's arrays decode the VQA v2 files exactly, the loss and the
accuracies equal direct computations (val2014's under the real profile, where test-dev's stay with the server), the
boxes the counter reads are fractions of the image, BAN's warm-up and decay schedule, and a clear refusal under the
real profile."""
from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from crossmodal import paths
from crossmodal.config.data import SplitSizes, WorldConfig
from crossmodal.config.loader import from_data
from crossmodal.config.training import TrainConfig
from crossmodal.data.regions import write_region_file
from crossmodal.data.vqa import (QUESTION_PAD, annotations_file, answer_vocabulary, load_vqa_split, preprocess_vqa,
                                 questions_file, read_vqa, soft_scores, tokenize_question)
from crossmodal.metrics.vqa import vqa_accuracy
from crossmodal.stages import prepro_vqa, synthesize_vqa
from crossmodal.tasks.vqa import Vqa, accuracy_by_type, image_boxes
from crossmodal.training.schedules import warmup_step
from crossmodal.training.trainer import Trainer
from crossmodal.worlds import image_world
from crossmodal.worlds.vqa_world import VqaWorldConfig, generate
from scene_regions import scene_regions


@pytest.fixture(scope="module")
def vqa(tmp_path_factory):
    root = tmp_path_factory.mktemp("vqa")
    image_world.generate(WorldConfig(images=SplitSizes(train=40, val=10, test=10), image_size=48), root / "world",
                         progress=False)
    generate(VqaWorldConfig(questions_per_image=4), json.loads((root / "world/scene_graphs.json").read_text()),
             root / "vqa_world")
    summary = preprocess_vqa(root / "vqa_world", root / "processed", min_answer_count=2, question_length=6)
    return root, summary


def test_preprocessing_decodes_the_files_exactly(vqa):
    root, summary = vqa
    answers = json.loads((root / "processed/answers.json").read_text())
    words = json.loads((root / "processed/words.json").read_text())
    train = read_vqa(questions_file(root / "vqa_world", "train"), annotations_file(root / "vqa_world", "train"))
    val = read_vqa(questions_file(root / "vqa_world", "val"), annotations_file(root / "vqa_world", "val"))
    assert answers == answer_vocabulary([q.annotation for q in train + val], 2)
    assert summary["questions"] == {"train": len(train), "val": len(val), "test": 40}
    split = load_vqa_split(root / "processed", "train")
    for row, question in enumerate(train):
        assert split.question_ids[row] == question.question_id and split.image_ids[row] == question.image_id
        tokens = tokenize_question(question.question)[:6]
        assert [words[i - 2] for i in split.tokens[row] if i != QUESTION_PAD] == tokens  # every word is known
        assert np.all(split.tokens[row, len(tokens):] == QUESTION_PAD)  # back-padded
        expected = soft_scores(question.annotation.answers, answers)
        assert {answers[k]: float(v) for k, v in enumerate(split.targets[row]) if v} == pytest.approx(expected)
    test = load_vqa_split(root / "processed", "test")
    assert test.targets is None and len(test.question_ids) == 40  # test-dev answers stay with the server


def test_loss_is_binary_cross_entropy_summed_over_answers_and_averaged_over_questions():
    task = Vqa.__new__(Vqa)
    task.device, task.targets = torch.device("cpu"), torch.tensor([[0.0, 0.3, 1.0], [0.6, 0.0, 0.0], [1.0, 1.0, 0.9]])
    logits = torch.tensor([[0.5, -1.0, 2.0], [0.1, 0.2, -0.3], [1.5, 0.0, 0.7]])
    rows = np.array([2, 0])
    loss, logged = task.loss(lambda fn: logits[rows], None, rows, None, None)
    direct = 0.0
    for i, r in enumerate(rows):
        for a in range(3):
            p, t = torch.sigmoid(logits[r, a]), task.targets[r, a]
            direct -= float(t * torch.log(p) + (1 - t) * torch.log(1 - p))
    assert float(loss) == pytest.approx(direct / 2, rel=1e-6)
    assert logged["train_loss"] == (pytest.approx(direct / 2, rel=1e-6), 1.0)
    assert float(loss) == pytest.approx(float(F.binary_cross_entropy_with_logits(logits[rows], task.targets[rows])) * 3)


def test_accuracy_by_type_is_the_official_accuracy_averaged_per_answer_type(vqa):
    root, _ = vqa
    annotations = {q.question_id: q.annotation for q in read_vqa(
        questions_file(root / "vqa_world", "test"), annotations_file(root / "vqa_world", "test"))}
    rng = np.random.default_rng(0)
    predictions = {qid: a.answers[int(rng.integers(10))] if rng.random() < 0.6 else "purple"
                   for qid, a in annotations.items()}
    scores = accuracy_by_type(predictions, annotations_file(root / "vqa_world", "test"))
    by_type: dict[str, list[float]] = {}
    for qid, answer in predictions.items():
        by_type.setdefault(annotations[qid].answer_type, []).append(vqa_accuracy(answer, annotations[qid].answers))
    assert scores["overall"] == pytest.approx(np.mean([s for v in by_type.values() for s in v]))
    for kind, values in by_type.items():
        assert scores[kind] == pytest.approx(np.mean(values))
    assert 0 < scores["overall"] < 1
    per_question_type = accuracy_by_type(predictions, annotations_file(root / "vqa_world", "test"), "question_type")
    for kind in {a.question_type for a in annotations.values()}:
        assert per_question_type[kind] == pytest.approx(np.mean([vqa_accuracy(predictions[q], a.answers)
                                                                 for q, a in annotations.items()
                                                                 if a.question_type == kind]))
    with pytest.raises(Exception, match="no annotation of question 7"):
        accuracy_by_type({7: "yes"}, annotations_file(root / "vqa_world", "test"))


def test_under_the_real_profile_test_dev_is_the_servers_and_val_gets_the_official_accuracy(vqa, tmp_path):
    """test-dev's accuracies are null (its answers stay with the server); val2014's are the official accuracy of the
    model's answers against the `vqa_v2` download's val annotations, overall and per answer type."""
    root, _ = vqa
    download = tmp_path / "data/raw/vqa_v2"
    download.mkdir(parents=True)
    shutil.copy(annotations_file(root / "vqa_world", "val"), annotations_file(download, "val"))
    annotations = {q.question_id: q.annotation for q in read_vqa(
        questions_file(root / "vqa_world", "val"), annotations_file(root / "vqa_world", "val"))}
    task = Vqa.__new__(Vqa)
    task.cfg, task.root = SimpleNamespace(profile="real"), tmp_path
    task.answers = json.loads((root / "processed/answers.json").read_text())
    task.splits = {s: load_vqa_split(root / "processed", s) for s in ("val", "test")}
    rng = np.random.default_rng(1)
    top = {s: rng.integers(len(task.answers), size=len(task.splits[s].question_ids)) for s in task.splits}
    top["val"][::2] = [task.answers.index(annotations[int(q)].multiple_choice_answer)  # some right, some not
                       if annotations[int(q)].multiple_choice_answer in task.answers else 0
                       for q in task.splits["val"].question_ids[::2]]
    task.top_answers = lambda model, split: top[split]
    result = task.test(None)
    assert [v for k, v in result["test"].items() if not k.endswith("_status")] == [None] * 4
    assert "server" in result["test"]["overall_status"]
    scores = {int(q): vqa_accuracy(task.answers[a], annotations[int(q)].answers)
              for q, a in zip(task.splits["val"].question_ids, top["val"])}
    assert result["val"]["overall"] == pytest.approx(np.mean(list(scores.values()))) and result["val"]["overall"] > 0
    for kind in {a.answer_type for a in annotations.values()}:
        assert result["val"][kind] == pytest.approx(np.mean([s for q, s in scores.items()
                                                             if annotations[q].answer_type == kind]))
    assert set(result["val_question_types"]) == {a.question_type for a in annotations.values()} | {"overall"}


def test_the_counter_reads_boxes_as_fractions_of_each_image(tmp_path):
    boxes = [np.array([[0, 0, 50, 20], [10, 10, 100, 40]], np.float32), np.array([[5, 5, 10, 30]], np.float32)]
    features = [np.ones((2, 3), np.float32), np.ones((1, 3), np.float32)]
    write_region_file(tmp_path / "r.h5", [7, 9], boxes, features, [(100, 40), (20, 60)], source="test")
    out = image_boxes(tmp_path / "r.h5", np.array([9, 7]))
    assert out.shape == (2, 2, 4)
    assert torch.allclose(out[0, 0], torch.tensor([0.25, 5 / 60, 0.5, 0.5]))
    assert torch.allclose(out[1], torch.tensor([[0, 0, 0.5, 0.5], [0.1, 0.25, 1.0, 1.0]]))
    assert torch.all(out[0, 1] == 0)  # padding


def test_ban_schedule_warms_up_then_decays_as_the_official_code():
    cfg = TrainConfig(schedule="warmup_step", lr=1e-3, decay_start=10, step_size=2, gamma=0.25)
    multipliers = [warmup_step(cfg, epoch) for epoch in range(15)]
    assert multipliers == [0.5, 1.0, 1.5, 2.0, *[2.0] * 6, 0.5, 0.5, 0.125, 0.125, 0.03125]
    with pytest.raises(ValueError, match="schedule must be one of"):
        TrainConfig(schedule="warmup")


def test_prepro_vqa_reads_vqa_v2_from_its_download_under_the_real_profile(vqa, tmp_path):
    """The real profile's source is the `vqa_v2` download, whose files have the world's names: the same arrays."""
    import shutil

    from crossmodal import paths
    from crossmodal.config.data import VqaConfig
    from crossmodal.config.loader import Config
    from crossmodal.io import InputError
    from crossmodal.stages import prepro_vqa

    root, _ = vqa
    cfg = Config(profile="real", vqa=VqaConfig(min_answer_count=2, question_length=6))
    with pytest.raises(InputError, match="v2_OpenEnded_mscoco_train2014_questions.json"):
        prepro_vqa.run(cfg, tmp_path, None)  # not downloaded yet: one line naming the missing file, no output
    assert not (tmp_path / paths.VQA).exists()
    download = tmp_path / paths.raw("vqa_v2")
    download.mkdir(parents=True)
    for file in (root / "vqa_world").glob("*.json"):  # not server/: VQA v2 does not publish test-dev's answers
        shutil.copy(file, download)
    prepro_vqa.run(cfg, tmp_path, None)
    for name in ("answers.json", "words.json"):
        assert (tmp_path / paths.VQA / name).read_text() == (root / "processed" / name).read_text()
    for split in ("train", "val", "test"):
        ours, theirs = (load_vqa_split(folder, split) for folder in (root / "processed", tmp_path / paths.VQA))
        assert all(np.array_equal(getattr(ours, k), getattr(theirs, k)) for k in ("question_ids", "image_ids", "tokens"))
        assert (ours.targets is None and theirs.targets is None) or np.array_equal(ours.targets, theirs.targets)


@pytest.mark.slow
def test_a_small_ban_with_the_counter_learns_through_the_shared_trainer(tmp_path, one_thread):
    """The VQA task on the shared trainer, on this machine's device (`compute.device: auto`: a GPU where there is
    one): the stages' own world and arrays, hand-made regions; BAN-2 with the counter beats always answering the
    most frequent training answer on val."""
    system = {"task": "vqa", "model": "ban", "inputs": {"regions": "regions"},
              "model_args": {"embed_dim": 16, "hidden_dim": 32, "glimpses": 2, "attention_rank": 2, "counter": True,
                             "dropout": 0.0, "map_dropout": 0.0, "classifier_dropout": 0.0},
              "train": {"max_epochs": 8, "patience": 0, "batch_size": 32, "optimizer": "adam", "lr": 0.005,
                        "schedule": "constant"}}
    cfg = from_data({"world": {"images": {"train": 80, "val": 16, "test": 16}, "image_size": 48},
                     "evaluation": {"batch_size": 16}, "runtime": {"threads": 1, "progress": False},
                     "ban": {"systems": {"v": system}}})
    image_world.generate(cfg.world, tmp_path / paths.WORLD, progress=False)
    synthesize_vqa.run(cfg, tmp_path, None)
    prepro_vqa.run(cfg, tmp_path, None)
    scene_regions(tmp_path, json.loads((tmp_path / paths.SCENE_GRAPHS).read_text())["images"], cfg)
    trainer = Trainer(cfg, "v", tmp_path, progress=False)
    train, val = trainer.task.splits["train"].targets, trainer.task.splits["val"].targets
    majority = float(val[:, int(np.argmax((train > 0).sum(0)))].mean())  # always the most frequent training answer
    result = trainer.run()
    losses, scores = [r["train_loss"] for r in result["history"]], [r["val_score"] for r in result["history"]]
    print(f"device {trainer.device}: majority {majority:.3f}, val scores {scores}")
    assert losses[-1] < 0.8 * losses[0] and max(scores) > majority + 0.1, (majority, scores)
    assert 0 <= result["test"]["overall"] <= 1 and result["best_epoch"] == 1 + int(np.argmax(scores))
