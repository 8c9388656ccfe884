"""The phrase-grounding task (BAN on Flickr30k Entities, Kim et al. 2018): a sentence's entity phrases and an image's
region proposals -> a score for every (phrase, proposal) pair; a phrase is grounded by its best-scoring proposal.

Data: stage prepro_grounding's arrays (data/processed/grounding/: the sentence words, per split the encoded
sentences and, per kept phrase, its last word's position, entity types and entity boxes; stages/prepro_grounding.py)
and the feature set the system's `inputs` maps `regions` to, whose boxes are the proposals. A batch holds, per
sentence, the named inputs `sentence` (word ids, masked, cut to the batch's longest sentence: the GRU's states at the
real words do not depend on padding after them), `phrases` (each phrase's last-word position, masked) and `regions`
(its image's proposals, read once per image and shared by the image's sentences).

Positives (the official `utils.get_match_index`): a proposal is positive for a phrase when its IoU with any box of
the phrase's entity is >= 0.5 (metrics/grounding.py `box_iou`: areas without the +1 of inclusive pixel corners, as
the official `calculate_iou`; the entity boxes as the XML writes them, pixels from 1, against the proposals' pixel
boxes, as the official code compares them). Computed once per split, against every proposal of the image (the
official targets stop at 100 proposals; a region file here holds at most 100 per image).

Loss, the official `train_flickr.py`: binary cross-entropy of every (phrase, proposal) logit of the batch against
its positive label, summed, divided by the batch's number of sentences (`instance_bce_with_logits(logits, labels,
'sum') / v.size(0)`), phrases without a positive proposal included (all their labels are 0). The official sum also
runs over padded proposals, whose logits it sets to -99 and whose labels are 0, adding about 1e-43 each; here the
padded pairs are left out (their logits are -inf).

Validation metric (`val_recall`): Recall@1 over the val phrases, the first of the official evaluation's scores.
Test: Recall@1, 5 and 10 over every test phrase, those without a positive proposal included (the official
`compute_recall_with_logits` summed and divided by all phrases), and Recall@1 per entity type (people, clothing,
bodyparts, animals, vehicles, instruments, scene, other; a type no test phrase has is left out; the official code
does not compute it, metrics/grounding.py does); the metrics file also gets `upper_bound`, the share of test phrases
with a positive proposal (the official `bound`). Outputs: per test phrase its top-ranked proposal
(`grounding_test_<system>.json`: image, sentence, chain, phrase, types, box in pixels, whether it is positive).

MLflow gets the recalls ×100, as the tables print them, named `test_R_at_1`, … (MLflow refuses "@" in a name)
and `test_<type>`; the metrics files keep 0-1 and the tables' keys (`R@1`, …).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .. import paths
from ..data.feature_sets import Batch, SplitInputs, feature_dims, to_device
from ..data.flickr30k_entities import ENTITY_TYPES
from ..data.inputs import Padded
from ..io import InputError, read_json, write_json
from ..metrics.grounding import box_iou, grounded_at, recall
from ..models.registry import build_model
from .base import Task, on_scale
from .common import padded_boxes, start_word_vectors
from ..task_specs import GROUNDING

SCALE = 100  # recalls in MLflow, as in the tables (the metrics files keep 0-1)
SPLITS = ("train", "val", "test")
PAD = 0  # the padding word id (stages/prepro_grounding.py)
IOU_THRESHOLD = 0.5


def tracked_name(key: str) -> str:
    """A test metric's name as MLflow takes it ("R@1" -> "R_at_1": MLflow refuses "@" in names)."""
    return key.replace("@", "_at_")


@dataclass(frozen=True)
class GroundingSplit:
    """One split's arrays as stage prepro_grounding writes them (its docstring lists shapes and meanings)."""

    image_ids: np.ndarray
    sentence_ids: np.ndarray
    tokens: np.ndarray
    phrase_starts: np.ndarray
    phrase_ends: np.ndarray
    phrase_mask: np.ndarray
    chains: np.ndarray
    types: np.ndarray
    boxes: np.ndarray
    box_mask: np.ndarray


def load_grounding_split(folder: Path, split: str) -> GroundingSplit:
    path = folder / f"{split}.npz"
    if not path.is_file():
        raise InputError(f"missing file: {path} (run `dvc repro prepro_grounding` first)")
    names = [f.name for f in fields(GroundingSplit)]
    with np.load(path) as data:
        missing = [name for name in names if name not in data]
        if missing:
            raise InputError(f"{path}: no array {missing[0]!r} (rerun prepro_grounding)")
        return GroundingSplit(**{name: data[name] for name in names})


def phrase_positives(proposals: torch.Tensor, proposal_mask: torch.Tensor, boxes: torch.Tensor,
                     box_mask: torch.Tensor) -> torch.Tensor:
    """[S, E, φ] bool: proposal j is positive for phrase e of sentence s when its IoU with a real box of the phrase's
    entity is >= 0.5. proposals [S, φ, 4] and proposal_mask [S, φ] are each sentence's image's; boxes [S, E, K, 4],
    box_mask [S, E, K]."""
    count, width, most = boxes.size(0), boxes.size(1), boxes.size(2)
    out = torch.zeros(count, width, proposals.size(1), dtype=torch.bool)
    for s in range(count):
        iou = box_iou(proposals[s], boxes[s].reshape(-1, 4)).reshape(-1, width, most)  # [φ, E, K]
        hit = ((iou >= IOU_THRESHOLD) & box_mask[s]).any(-1)  # NaN (two empty boxes) compares False
        out[s] = hit.T & proposal_mask[s]
    return out


def grounding_loss_sum(logits: torch.Tensor, positive: torch.Tensor, phrase_mask: torch.Tensor,
                       region_mask: torch.Tensor) -> torch.Tensor:
    """Summed binary cross-entropy of the logits [B, E, φ] of every real (phrase, proposal) pair against `positive`
    [B, E, φ] (fp32)."""
    real = phrase_mask[:, :, None] & region_mask[:, None, :]
    return F.binary_cross_entropy_with_logits(logits.float()[real], positive[real].float(), reduction="sum")


class SentenceInputs:
    """The named inputs of one split's sentences, and each phrase's positive proposals: `batches(row_lists)` yields
    (rows, {sentence, phrases, regions}) per list of sentence rows. Each image's features are read once (in memory
    or lazily, data/feature_sets.py)."""

    def __init__(self, root: Path, feature_set: str, split: GroundingSplit, lazy: bool, workers: int):
        images, self.image_row = np.unique(split.image_ids, return_inverse=True)
        self.images = SplitInputs(root, {"regions": feature_set}, images, lazy, workers)
        self.tokens = torch.from_numpy(split.tokens)
        self.lengths = (split.tokens != PAD).sum(1)
        self.ends, self.mask = torch.from_numpy(split.phrase_ends), torch.from_numpy(split.phrase_mask)
        self.proposals, proposal_mask, _ = padded_boxes(root / paths.features(feature_set), images)
        rows = torch.from_numpy(self.image_row)
        self.positives = phrase_positives(self.proposals[rows], proposal_mask[rows], torch.from_numpy(split.boxes),
                                          torch.from_numpy(split.box_mask))

    def batches(self, row_lists: list[np.ndarray]) -> Iterator[Batch]:
        image_lists = [self.image_row[rows] for rows in row_lists]
        for rows, (_, inputs) in zip(row_lists, self.images.batches(image_lists)):
            tokens = self.tokens[rows, :max(1, int(self.lengths[rows].max(initial=0)))]
            yield rows, {"sentence": Padded(tokens, tokens != PAD), "phrases": Padded(self.ends[rows], self.mask[rows]),
                         "regions": inputs["regions"]}


class Grounding(Task):
    metric = GROUNDING.metric
    metric_scale = SCALE

    def __init__(self, cfg, name, root, dist):
        super().__init__(cfg, name, root, dist)
        folder = root / paths.GROUNDING
        self.words = read_json(folder / "words.json")
        feature_set = self.model_system.inputs["regions"]
        self.splits = {split: load_grounding_split(folder, split) for split in SPLITS}
        for split, data in self.splits.items():
            if not data.phrase_mask.any():
                raise InputError(f"{folder / f'{split}.npz'}: no phrase to ground in the {split} split")
        runtime = cfg.runtime
        self.inputs = {split: SentenceInputs(root, feature_set, data, runtime.lazy_features, runtime.loader_workers)
                       for split, data in self.splits.items()}
        self.dims = feature_dims(root, {"regions": feature_set})
        self.files = [folder / f for f in ("words.json", *(f"{s}.npz" for s in SPLITS))]
        self.files.append(root / paths.features(feature_set))
        if self.model_system.model_args.get("word_vectors"):
            self.files.append(root / paths.WORD_VECTORS)

    def build_model(self) -> nn.Module:
        model = build_model(self.cfg.where(self.cfg.model_name(self.name)), self.model_system, len(self.words) + 2,
                            self.dims, "grounding")  # the words plus the padding and unknown ids
        start_word_vectors(self, model, self.words)
        return model

    def train_size(self) -> int:
        return len(self.splits["train"].image_ids)

    def train_batches(self, row_lists) -> Iterator[Batch]:
        return self.inputs["train"].batches(row_lists)

    def start_epoch(self, epoch: int) -> None:
        pass

    def loss(self, net, model, rows, inputs, share):
        positive = self.inputs["train"].positives[rows].to(self.device)
        logits = net(lambda m: m(inputs))
        total = grounding_loss_sum(logits, positive, inputs["phrases"].mask, inputs["regions"].mask)
        count = torch.tensor(float(len(rows)), device=self.device)
        loss = total / (count if share is None else share(count))
        return loss, {"train_loss": (loss.item(), 1.0)}

    @torch.no_grad()
    def phrase_scores(self, model: nn.Module, split: str) -> torch.Tensor:
        """[P, φ] the logits of every real phrase of the split (sentence by sentence, phrases in order) against its
        image's proposals, -inf on padded proposals (fp32, on the CPU)."""
        model.eval()
        device, count = next(model.parameters()).device, len(self.splits[split].image_ids)
        size = self.cfg.evaluation.batch_size
        row_lists = [np.arange(start, min(start + size, count)) for start in range(0, count, size)]
        out = []
        for _, inputs in self.inputs[split].batches(row_lists):
            logits = model(to_device(inputs, device)).float().cpu()
            logits = logits.masked_fill(~inputs["regions"].mask[:, None, :], -float("inf"))
            out.append(logits[inputs["phrases"].mask])
        return torch.cat(out)

    def positives(self, split: str) -> torch.Tensor:
        """[P, φ] the positive proposals of every real phrase of the split, in `phrase_scores`' order."""
        return self.inputs[split].positives[self.inputs[split].mask]

    def validate(self, model) -> float:
        hits = grounded_at(self.phrase_scores(model, "val"), self.positives("val"), (1,))
        return float(hits[:, 0].double().mean())

    def test(self, model) -> dict:
        scores, positive, data = self.phrase_scores(model, "test"), self.positives("test"), self.splits["test"]
        types = [tuple(t for t, on in zip(ENTITY_TYPES, row) if on) for row in data.types[data.phrase_mask]]
        result = recall(scores, positive, types)
        test = {k: result[k] for k in ("R@1", "R@5", "R@10")}
        test.update({t: result["per_type"][t]["R@1"] for t in ENTITY_TYPES if t in result["per_type"]})
        return {"predictions": self.top_boxes(scores, positive, types), "test": test,
                "upper_bound": result["upper_bound"]}

    def top_boxes(self, scores: torch.Tensor, positive: torch.Tensor, types: list[tuple[str, ...]]) -> list[dict]:
        """Per test phrase its top-ranked proposal (ties to the lower index, as `grounded_at` breaks them)."""
        data, inputs = self.splits["test"], self.inputs["test"]
        top = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, 0]
        sentences, phrases = np.nonzero(data.phrase_mask)
        out = []
        for k, (s, e) in enumerate(zip(sentences.tolist(), phrases.tolist())):
            words = [self.word(i) for i in data.tokens[s, data.phrase_starts[s, e]:data.phrase_ends[s, e] + 1]]
            box = inputs.proposals[inputs.image_row[s], int(top[k])]
            out.append({"image_id": int(data.image_ids[s]), "sentence": int(data.sentence_ids[s]),
                        "chain_id": int(data.chains[s, e]), "phrase": " ".join(words), "types": list(types[k]),
                        "box": [round(float(v), 2) for v in box], "positive": bool(positive[k, top[k]])})
        return out

    def word(self, token: int) -> str:
        return self.words[token - 2] if token >= 2 else ("<pad>", "<unk>")[token]

    def data_files(self) -> list[Path]:
        return self.files

    def model_file_extra(self) -> dict:
        return {"vocab_size": len(self.words) + 2, "input_dims": self.dims}

    def write_outputs(self, run, result: dict) -> dict:
        predictions = result.pop("predictions")
        run.log_metrics({f"test_{tracked_name(k)}": on_scale(v, SCALE) for k, v in result["test"].items()})
        run.log_metrics({"test_upper_bound": on_scale(result["upper_bound"], SCALE)})
        run.set_tags({"metric_scale": f"recall x{SCALE}, as in the tables (reports/metrics/*.json: 0-1)"})
        path = self.root / paths.PREDICTIONS / self.name / f"grounding_test_{self.name}.json"
        write_json(path, predictions, indent=None)
        run.log_artifact(path)
        return {"variant": self.name, "model": self.model_system.model, "task": "grounding", **result}


TASK = Grounding
