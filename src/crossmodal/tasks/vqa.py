"""The VQA task (BAN, Kim et al. 2018): a question and an image's objects -> a score for every answer of the
vocabulary, trained on BAN's soft targets.

Data: stage prepro_vqa's arrays (data/processed/vqa/: the question words, the answer vocabulary, per split the
encoded questions and soft targets; data/vqa.py) and the image feature set the system's `inputs` maps `regions` to.
A batch holds, per question, the named inputs `question` (word ids, masked), `regions` (its image's objects, read
once per image and shared by the image's questions) and `boxes` (their boxes as fractions of the image's width and
height, x1, y1, x2, y2: what the counter reads).

Loss: binary cross-entropy of every answer's logit against its soft score, summed over answers and averaged over
questions (the official `instance_bce_with_logits`: the mean over all entries times the number of answers).

Validation metric (`val_score`): the official code's evaluation score, the soft target of each question's top answer
(min(1, 0.3 x the annotators who gave it)), averaged over val. Test: the top answer of every test-dev question, scored
by the official VQA accuracy (metrics/vqa.py) against the ten human answers of the evaluation server's copy, which
no training or selection step reads; overall and per answer type (`test`), and per question type
(`question_types`, "how many", "is there a", ...). Under the real profile test-dev's answers stay with the server
(EvalAI): every accuracy of `test` is null, its `<key>_status` says why (the tables print "n/a" with that note), the
official code's score on val2014 is `best_val_score`, and the official VQA accuracy on val2014 is `val` (overall and per
answer type) and `val_question_types`, against the `vqa_v2` download's val annotations: the paper's ablations are on
val, but here val also selected the epoch, so these are optimistic. Outputs: the results file
in the server's format and name (`vqa_OpenEnded_mscoco_test-dev2015_<system>_results.json`: [{question_id, answer}]),
the file to submit.

MLflow gets the score and the accuracies ×100, as the tables print them; the metrics files keep 0-1.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .. import paths
from ..data.feature_sets import Batch, SplitInputs, feature_dims, to_device
from ..data.inputs import Padded
from ..data.vqa import ANSWER_TYPES, QUESTION_PAD, annotations_file, load_vqa_split, read_vqa_annotations
from ..io import InputError, read_json, write_json
from ..metrics.vqa import vqa_accuracy
from ..models.registry import build_model
from .base import Task, on_scale
from .common import padded_boxes, start_word_vectors
from ..task_specs import VQA

SCALE = 100  # accuracies in MLflow, as in the tables (the metrics files keep 0-1)
SPLITS = ("train", "val", "test")
SERVER_ONLY = ("test-dev2015's answers stay with the evaluation server: submit the results file; the accuracy on "
               "val2014, which selected the epoch, is `val` in the metrics file")


def image_boxes(path: Path, image_ids: np.ndarray) -> torch.Tensor:
    """[N, n, 4] each image's boxes as fractions of its width and height (padding rows zero)."""
    boxes, _, sizes = padded_boxes(path, image_ids)
    scale = torch.from_numpy(np.tile(sizes, 2)).unsqueeze(1)  # (width, height, width, height)
    return boxes / scale


class QuestionInputs:
    """The named inputs of one split's questions: `batches(row_lists)` yields (rows, {question, regions, boxes}) per
    list of question rows. Each image's features are read once (in memory or lazily, data/feature_sets.py)."""

    def __init__(self, root: Path, feature_set: str, tokens: np.ndarray, image_ids: np.ndarray, lazy: bool,
                 workers: int):
        self.tokens = torch.from_numpy(tokens)
        images, self.image_row = np.unique(image_ids, return_inverse=True)
        self.images = SplitInputs(root, {"regions": feature_set}, images, lazy, workers)
        self.boxes = image_boxes(root / paths.features(feature_set), images)

    def batches(self, row_lists: list[np.ndarray]) -> Iterator[Batch]:
        image_lists = [self.image_row[rows] for rows in row_lists]
        for rows, (image_rows, inputs) in zip(row_lists, self.images.batches(image_lists)):
            regions = inputs["regions"]
            tokens = self.tokens[rows]
            yield rows, {"question": Padded(tokens, tokens != QUESTION_PAD), "regions": regions,
                         "boxes": Padded(self.boxes[image_rows][:, :regions.mask.size(1)], regions.mask)}


class Vqa(Task):
    metric = VQA.metric
    metric_scale = SCALE

    def __init__(self, cfg, name, root, dist):
        super().__init__(cfg, name, root, dist)
        folder = root / paths.VQA
        self.answers, self.words = read_json(folder / "answers.json"), read_json(folder / "words.json")
        feature_set = self.model_system.inputs["regions"]
        self.splits = {split: load_vqa_split(folder, split) for split in SPLITS}
        runtime = cfg.runtime
        self.inputs = {split: QuestionInputs(root, feature_set, data.tokens, data.image_ids, runtime.lazy_features,
                                             runtime.loader_workers) for split, data in self.splits.items()}
        self.dims = feature_dims(root, {"regions": feature_set})
        self.files = [folder / f for f in ("answers.json", "words.json", *(f"{s}.npz" for s in SPLITS))]
        self.files.append(root / paths.features(feature_set))
        self.server = annotations_file(root / paths.VQA_WORLD, "test")  # read by `test` only
        self.targets = torch.from_numpy(self.splits["train"].targets)

    def build_model(self) -> nn.Module:
        model = build_model(self.cfg.where(self.cfg.model_name(self.name)), self.model_system, len(self.words) + 2,
                            self.dims, "vqa", (len(self.answers),))  # the words plus the padding and unknown ids
        start_word_vectors(self, model, self.words)
        return model

    def train_size(self) -> int:
        return len(self.splits["train"].question_ids)

    def train_batches(self, row_lists) -> Iterator[Batch]:
        return self.inputs["train"].batches(row_lists)

    def start_epoch(self, epoch: int) -> None:
        pass

    def loss(self, net, model, rows, inputs, share):
        targets = self.targets[rows].to(self.device)
        logits = net(lambda m: m(inputs))
        total = F.binary_cross_entropy_with_logits(logits.float(), targets, reduction="sum")
        count = torch.tensor(float(len(rows)), device=self.device)
        loss = total / (count if share is None else share(count))
        return loss, {"train_loss": (loss.item(), 1.0)}

    @torch.no_grad()
    def top_answers(self, model: nn.Module, split: str) -> np.ndarray:
        """[Q] the index of each question's highest-scoring answer (fp32, on the model's device)."""
        model.eval()
        device, count = next(model.parameters()).device, len(self.splits[split].question_ids)
        size = self.cfg.evaluation.batch_size
        row_lists = [np.arange(start, min(start + size, count)) for start in range(0, count, size)]
        out = [model(to_device(inputs, device)).argmax(1).cpu() for _, inputs in self.inputs[split].batches(row_lists)]
        return torch.cat(out).numpy() if out else np.zeros(0, np.int64)

    def validate(self, model) -> float:
        top = self.top_answers(model, "val")
        targets = self.splits["val"].targets
        return float(targets[np.arange(len(top)), top].mean())

    def predicted(self, model: nn.Module, split: str) -> dict[int, str]:
        """{question id: the model's top answer} over a split."""
        top = self.top_answers(model, split)
        return {int(q): self.answers[a] for q, a in zip(self.splits[split].question_ids.tolist(), top.tolist())}

    def test(self, model) -> dict:
        predictions = self.predicted(model, "test")
        if self.cfg.profile == "real":
            keys = ("overall", *ANSWER_TYPES)
            val, annotations = self.predicted(model, "val"), annotations_file(self.root / paths.raw("vqa_v2"), "val")
            return {"predictions": predictions, "test": {**dict.fromkeys(keys), **{f"{k}_status": SERVER_ONLY
                                                                                    for k in keys}},
                    "val": accuracy_by_type(val, annotations),
                    "val_question_types": accuracy_by_type(val, annotations, "question_type")}
        test = accuracy_by_type(predictions, self.server)
        return {"predictions": predictions, "test": test,
                "question_types": accuracy_by_type(predictions, self.server, "question_type")}

    def data_files(self) -> list[Path]:
        return self.files

    def model_file_extra(self) -> dict:
        return {"vocab_size": len(self.words) + 2, "answers": len(self.answers), "input_dims": self.dims}

    def write_outputs(self, run, result: dict) -> dict:
        predictions = result.pop("predictions")
        for split in ("test", "val"):
            run.log_metrics({f"{split}_{k}": on_scale(v, SCALE) for k, v in result.get(split, {}).items()
                             if not k.endswith("_status") and v is not None})
        run.set_tags({"metric_scale": f"VQA accuracy x{SCALE}, as in the tables (reports/metrics/*.json: 0-1)"})
        path = self.root / paths.PREDICTIONS / self.name / f"vqa_OpenEnded_mscoco_test-dev2015_{self.name}_results.json"
        write_json(path, [{"question_id": q, "answer": a} for q, a in predictions.items()], indent=None)
        run.log_artifact(path)
        return {"variant": self.name, "model": self.model_system.model, "task": "vqa", **result}


TASK = Vqa


def accuracy_by_type(predictions: dict[int, str], annotations_path: Path, by: str = "answer_type"
                     ) -> dict[str, float]:
    """The official VQA accuracy of `predictions` ({question id: answer}), overall and per answer type (or per
    question type, `by="question_type"`), against the annotations file (every predicted question must be in it)."""
    annotations = {a.question_id: a for a in read_vqa_annotations(annotations_path)}
    scores: dict[str, list[float]] = {t: [] for t in ANSWER_TYPES} if by == "answer_type" else {}
    for question_id, answer in predictions.items():
        annotation = annotations.get(question_id)
        if annotation is None:
            raise InputError(f"{annotations_path}: no annotation of question {question_id}")
        scores.setdefault(getattr(annotation, by), []).append(vqa_accuracy(answer, annotation.answers))
    every = [s for values in scores.values() for s in values]
    return {"overall": float(np.mean(every)), **{t: float(np.mean(v)) for t, v in scores.items() if v}}
