"""The captioning task: an item's named inputs -> a caption, trained by cross-entropy or self-critically. An item
is an image (the image world, COCO) or a video clip (the video world's MSVD- and MSR-VTT-like datasets): the
vocabulary's `corpus` says which, and nothing else here differs between them.

Data: the processed captions of the system's vocabulary (`paths.vocabulary`: data/processed/captions/<vocabulary>/
for images, data/processed/video/<dataset>/<vocabulary>/ for clips), the named inputs its `inputs` param maps to
feature sets (data/feature_sets.py), and the corpus's val/test references in COCO layout.

Objectives, each a module of tasks/objectives/ loaded by name: cross-entropy (`objective: xe`, objectives/xe.py)
and self-critical training (`objective: scst`, objectives/scst.py: per image `train.scst.samples` candidate
captions, sampled or the best beams, rewarded by CIDEr-D against a baseline).

Validation metric: CIDEr-D of the val split's captions (`val_CIDEr`), greedy unless `train.val_beam` > 1. Test: beam
search with the chosen model; coco-caption metrics; outputs are the results file, the COCO server's submission file
and qualitative examples (a page, `qualitative.md`, embedding one picture per example: the image with the model's
and the reference captions). Ensembles (stages/ensemble.py) decode the test split with several trained systems
through the same code.

MLflow gets every caption metric ×100 (`SCALE`), as the tables print them: `test_*`, `val_CIDEr`, `best_val_CIDEr`
and SCST's `train_CIDEr_*`; the metrics files keep pycocoevalcap's 0–1 scale.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import nn

from .. import paths
from ..config.data import REAL_DATA
from ..config.loader import Config
from ..data.captions import decode, load_labels, load_vocabulary
from ..data.coco import read_coco_captions
from ..data.feature_sets import Batch, SplitInputs, feature_dims, to_device
from ..decoding.search import beam_search, greedy_decode
from ..features.word_vectors import start_embedding
from ..io import InputError, atomic_path, read_json, write_text
from ..metrics.captions import cider_only, evaluate_captions, start_meteor, write_results
from ..models.registry import build_model
from ..pipeline import manifests
from ..drawing import caption_panel, save_png
from .base import Task, on_scale
from ..task_specs import CAPTIONING

SCALE = 100  # caption metrics in MLflow, as in the tables (the metrics files keep 0-1)
NO_PICTURE = "No picture: profile real reads COCO's region features; its images are not downloaded."
NO_CLIP = "No picture: the item is a video clip ({path})."


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
        self.corpus = corpus = cfg.vocabularies[vocabulary].corpus
        folder = root / paths.vocabulary(vocabulary, corpus)
        for read in (folder, root / paths.corpus(corpus) / "references"):  # as their manifests, the stage's deps, list
            manifests.check(read)
        self.files = [folder / "vocab.json", folder / "labels.h5", *(root / paths.features(s) for s in sets.values())]
        self.words = load_vocabulary(folder / "vocab.json")
        self.labels = {split: load_labels(folder / "labels.h5", split) for split in splits}
        lazy, workers = cfg.runtime.lazy_features, cfg.runtime.loader_workers
        self.inputs = {split: SplitInputs(root, sets, self.labels[split].image_ids, lazy, workers) for split in splits}
        self.dims = feature_dims(root, sets)
        self.refs = {split: read_coco_captions(root / paths.references(split, corpus))
                     for split in splits if split != "train"}
        self.files += [root / paths.references(split, corpus) for split in self.refs]


class Captioning(Task):
    metric = CAPTIONING.metric
    metric_scale = SCALE
    scaled_values = ("train_CIDEr_sample", "train_CIDEr_beam", "train_CIDEr_greedy")  # SCST's (objectives/scst.py)

    def __init__(self, cfg, name, root, dist):
        super().__init__(cfg, name, root, dist)
        self.data = CaptionData(cfg, root, self.model_system.vocabulary, self.model_system.inputs,
                                ("train", "val", "test"))
        self.words, self.train_labels = self.data.words, self.data.labels["train"]
        if self.model_system.model_args.get("word_vectors"):
            self.data.files.append(root / paths.WORD2VEC)
        self.max_length = cfg.vocabularies[self.model_system.vocabulary].max_length
        # the objective's module (objectives/xe.py, objectives/scst.py), by name: a stage depends on its own only
        self.objective = importlib.import_module(f"crossmodal.tasks.objectives.{self.system.objective}").Objective(self)
        if dist.main:
            start_meteor()  # its JVM loads while the model trains

    def build_model(self) -> nn.Module:
        where = self.cfg.where(self.cfg.model_name(self.name))
        model = build_model(where, self.model_system, len(self.words), self.data.dims)
        if self.model_system.model_args.get("word_vectors"):  # HOCA: its embedding starts from word2vec's vectors
            start_embedding(model, self.root / paths.WORD2VEC, self.words, model.word_embed.embedding_dim)
        return model

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
        predictions = decode_split(model, self.data.inputs["val"], self.words, self.system.train.val_beam,
                                   ev.max_length, ev.batch_size)
        return cider_only(predictions, self.data.refs["val"])

    def test(self, model) -> dict:
        ev = self.cfg.evaluation
        predictions = decode_split(model, self.data.inputs["test"], self.words, self.cfg.beam_size(self.name),
                                   ev.max_length, ev.batch_size)
        return {"predictions": predictions, "test": evaluate_captions(predictions, self.data.refs["test"])}

    def data_files(self) -> list[Path]:
        return self.data.files

    def model_file_extra(self) -> dict:
        return {"vocab_size": len(self.words), "input_dims": self.data.dims}

    def write_outputs(self, run, result: dict) -> dict:
        return write_captions(self.cfg, self.root, self.name, run, self.data.refs["test"], {
            "variant": self.name, "model": self.model_system.model, "objective": self.system.objective, **result},
            self.data.corpus)


TASK = Captioning


def write_captions(cfg, root: Path, name: str, run, refs: dict[int, list[str]], metrics: dict,
                   corpus: str = "images") -> dict:
    """A finished system's outputs: test predictions (also as the COCO server's submission file) and qualitative
    examples, logged to its MLflow run with the test metrics (×100); returns the metrics without the predictions."""
    predictions = metrics.pop("predictions")
    run.log_metrics({f"test_{k}": on_scale(v, SCALE) for k, v in metrics["test"].items() if isinstance(v, float)})
    run.set_tags({"SPICE_status": metrics["test"]["SPICE_status"],
                  "metric_scale": f"caption metrics x{SCALE}, as in the tables (reports/metrics/*.json: 0-1)"})
    pred_path = root / paths.PREDICTIONS / name / f"captions_test_{name}_results.json"
    write_results(pred_path, predictions)
    write_results(root / paths.submission(name), predictions)
    run.log_artifact(pred_path)
    examples_path = root / paths.PREDICTIONS / name / "qualitative.md"
    text, pictures = qualitative(cfg, root, predictions, refs, examples_path.with_suffix(""), corpus)
    write_text(examples_path, text)
    run.log_artifact(examples_path)
    for picture in pictures:  # beside the page in the run's artifacts (its links work there), and among its charts
        run.log_artifact(picture, picture.parent.name)
        run.log_image(picture, f"example_{picture.stem}")
    return metrics


def qualitative(cfg, root: Path, predictions: dict[int, str], refs: dict[int, list[str]], folder: Path,
                corpus: str = "images") -> tuple[str, list[Path]]:
    """The qualitative examples `prepro_captions` (or `prepro_video`) set aside (`paths.examples(corpus)`): a
    markdown page, and the pictures it embeds, one PNG per item in `folder` (drawing.py: the image with the
    model's and the reference captions; under the real profile, whose images are not downloaded, and for video
    clips, the captions with a note). Returns the page and the PNGs."""
    manifests.check(root / paths.examples(corpus))  # as its manifest, the stage's dependency, lists it
    examples = read_json(root / paths.examples(corpus) / "examples.json")
    real = cfg.profile == "real"
    data = (REAL_DATA if real else "synthetic image world") if corpus == "images" else \
        f"{corpus}{'' if real else '-like, synthetic video world'}"
    lines = [f"# Qualitative examples (test split, {data})", ""]
    with atomic_path(folder) as tmp:  # the whole folder at once: no picture of an earlier run stays behind
        tmp.mkdir(parents=True)
        for example in examples:
            image_id, path = example["image_id"], example["path"]
            if image_id not in predictions:
                raise InputError(f"qualitative example {image_id} has no test prediction; "
                                 "run `dvc repro prepro_captions` after changing the split")
            picture = example_image(root, example["file"]) if example["file"] else None
            note = NO_CLIP.format(path=path) if corpus != "images" else NO_PICTURE if real else None
            save_png(caption_panel(picture, predictions[image_id], refs[image_id], note), tmp / f"{image_id}.png")
            lines += [f"## image {image_id} (`{path}`)", "",
                      f"![image {image_id} with its captions]({folder.name}/{image_id}.png)", "",
                      f"- **model:** {predictions[image_id]}"]
            lines += [f"- reference: {r}" for r in refs[image_id]] + [""]
    return "\n".join(lines), [folder / f"{e['image_id']}.png" for e in examples]


def example_image(root: Path, name: str):
    """The copy of a test image among the qualitative examples."""
    from PIL import Image

    file = root / paths.EXAMPLES / name
    if not file.is_file():
        raise InputError(f"missing example image {file}; run `dvc repro prepro_captions`")
    with Image.open(file) as image:
        return image.convert("RGB")
