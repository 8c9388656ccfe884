"""The captioning task: images' named inputs -> a caption, trained by cross-entropy or self-critically.

Data: the processed captions of the system's vocabulary (data/processed/captions/<vocabulary>/), the named inputs
its `inputs` param maps to feature sets (data/feature_sets.py), and the val/test references in COCO layout.

Objectives, each a module loaded by name: cross-entropy (`objective: xe`, training/xe.py) and self-critical
training (`objective: scst`, training/scst.py: per image `samples_per_image` sampled captions rewarded by CIDEr-D
against the greedy caption).

Validation metric: CIDEr-D of greedy captions of the val split (`val_CIDEr`). Test: beam search with the chosen
model; coco-caption metrics; outputs are the results file, the COCO server's submission file and qualitative
examples. Ensembles (stages/ensemble.py) decode the test split with several trained systems through the same code.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import nn

from .. import paths
from ..config import Config
from ..data.captions import decode, load_labels, load_vocabulary
from ..data.coco import read_coco_captions
from ..data.feature_sets import Batch, SplitInputs, feature_dims, to_device
from ..decoding.search import beam_search, greedy_decode
from ..io import read_json, write_text
from ..metrics.captions import cider_only, evaluate_captions, start_meteor, write_results
from ..models.registry import build_model
from ..stages.common import REAL_DATA
from .base import Task


@torch.no_grad()
def decode_split(model: nn.Module, inputs: SplitInputs, words: list[str], beam_size: int, max_length: int,
                 batch_size: int) -> dict[int, str]:
    """Captions of every image of a split, decoded on the model's device (fp32)."""
    model.eval()
    device, count = next(model.parameters()).device, len(inputs.ids)
    out = {}
    row_lists = [np.arange(start, min(start + batch_size, count)) for start in range(0, count, batch_size)]
    for rows, batch in inputs.batches(row_lists):
        batch = to_device(batch, device)
        if beam_size > 1:
            seqs, _ = beam_search(model, batch, beam_size, max_length)
        else:
            seqs, _ = greedy_decode(model, batch, max_length)
        for image_id, seq in zip(inputs.ids[rows].tolist(), seqs.tolist()):
            out[int(image_id)] = decode(seq, words)
    return out


class CaptionData:
    """A vocabulary's words and labels, and the named inputs of its val/test (and, when asked, train) splits."""

    def __init__(self, cfg: Config, root: Path, vocabulary: str, sets: dict[str, str], splits: tuple[str, ...]):
        folder = root / paths.vocabulary(vocabulary)
        self.files = [folder / "vocab.json", folder / "labels.h5", *(root / paths.features(s) for s in sets.values())]
        self.words = load_vocabulary(folder / "vocab.json")
        self.labels = {split: load_labels(folder / "labels.h5", split) for split in splits}
        lazy, workers = cfg.runtime.lazy_features, cfg.runtime.loader_workers
        self.inputs = {split: SplitInputs(root, sets, self.labels[split].image_ids, lazy, workers) for split in splits}
        self.dims = feature_dims(root, sets)
        self.refs = {split: read_coco_captions(root / paths.references(split)) for split in splits if split != "train"}
        self.files += [root / paths.references(split) for split in self.refs]


class Captioning(Task):
    metric = "val_CIDEr"

    def __init__(self, cfg, name, root, dist):
        super().__init__(cfg, name, root, dist)
        self.data = CaptionData(cfg, root, self.model_system.vocabulary, self.model_system.inputs,
                                ("train", "val", "test"))
        self.words, self.train_labels = self.data.words, self.data.labels["train"]
        self.max_length = cfg.vocabularies[self.model_system.vocabulary].max_length
        # the objective's module (training/xe.py, training/scst.py), by name: a stage depends on its own only
        self.objective = importlib.import_module(f"crossmodal.training.{self.system.objective}").Objective(self)
        if dist.main:
            start_meteor()  # its JVM loads while the model trains

    def build_model(self) -> nn.Module:
        where = self.cfg.where(self.cfg.model_name(self.name))
        return build_model(where, self.model_system, len(self.words), self.data.dims)

    def train_size(self) -> int:
        return len(self.train_labels.image_ids)

    def train_batches(self, row_lists) -> Iterator[Batch]:
        return self.data.inputs["train"].batches(row_lists)

    def start_epoch(self, epoch: int) -> None:
        self.objective.start_epoch(epoch)

    def loss(self, net, model, rows, inputs, share):
        return self.objective.loss(net, model, rows, inputs, share)

    def validate(self, model) -> float:
        ev = self.cfg.evaluation
        predictions = decode_split(model, self.data.inputs["val"], self.words, 1, ev.max_length, ev.batch_size)
        return cider_only(predictions, self.data.refs["val"])

    def test(self, model) -> dict:
        ev = self.cfg.evaluation
        predictions = decode_split(model, self.data.inputs["test"], self.words, ev.beam_size, ev.max_length,
                                   ev.batch_size)
        return {"predictions": predictions, "test": evaluate_captions(predictions, self.data.refs["test"])}

    def data_files(self) -> list[Path]:
        return self.data.files

    def model_file_extra(self) -> dict:
        return {"vocab_size": len(self.words), "input_dims": self.data.dims}

    def write_outputs(self, run, result: dict) -> dict:
        return write_captions(self.cfg, self.root, self.name, run, self.data.refs["test"], {
            "variant": self.name, "model": self.model_system.model, "objective": self.system.objective, **result})


TASK = Captioning


def write_captions(cfg, root: Path, name: str, run, refs: dict[int, list[str]], metrics: dict) -> dict:
    """A finished system's outputs: test predictions (also as the COCO server's submission file) and qualitative
    examples, logged to its MLflow run with the test metrics; returns the metrics without the predictions."""
    predictions = metrics.pop("predictions")
    run.log_metrics({f"test_{k}": v for k, v in metrics["test"].items() if isinstance(v, float)})
    run.set_tag("SPICE_status", metrics["test"]["SPICE_status"])
    pred_path = root / paths.PREDICTIONS / name / f"captions_test_{name}_results.json"
    write_results(pred_path, predictions)
    write_results(root / paths.submission(name), predictions)
    run.log_artifact(pred_path)
    examples_path = root / paths.PREDICTIONS / name / "qualitative.md"
    write_text(examples_path, qualitative(cfg, root, predictions, refs))
    run.log_artifact(examples_path)
    return metrics


def qualitative(cfg, root: Path, predictions: dict[int, str], refs: dict[int, list[str]]) -> str:
    files = {img["image_id"]: img["path"] for img in read_json(root / paths.IMAGES)}
    data = REAL_DATA if cfg.profile == "real" else "synthetic image world"
    lines = [f"# Qualitative examples (test split, {data})", ""]
    for image_id in sorted(predictions)[: cfg.evaluation.qualitative_examples]:
        lines += [f"## image {image_id} (`{files.get(image_id, '?')}`)", "", f"- **model:** {predictions[image_id]}"]
        lines += [f"- reference: {r}" for r in refs[image_id]] + [""]
    return "\n".join(lines)
