"""The test split decoded by an ensemble of trained systems (params.yaml `ensembles`, the papers' Σ rows), in one
process on `compute.device`, the features read as `compute.lazy_features` says."""
from __future__ import annotations

from pathlib import Path

from .. import paths
from ..config import Config
from ..data.captions import load_labels, load_vocabulary
from ..data.coco import read_coco_captions
from ..data.regions import RegionFeatures
from ..metrics.captions import evaluate_captions
from ..models.ensemble import Ensemble
from ..models.registry import build_model, load_state, read_model_file
from .distributed import resolve_device
from .xe import decode_split, load_split, read_features


def run_ensemble(cfg: Config, name: str, root: Path) -> dict:
    """Beam search over the members' averaged log-probabilities; returns predictions, test metrics, refs."""
    captions = root / paths.vocabulary(cfg.model_of(cfg.ensembles[name].members[0]).vocabulary)
    words = load_vocabulary(captions / "vocab.json")
    with RegionFeatures(root / paths.REGIONS) as regions:
        test = load_split(regions, load_labels(captions / "labels.h5", "test"))
        feature_dim = regions.feature_dim
    device, members = resolve_device(cfg.compute), []
    for member in cfg.ensembles[name].members:
        path = root / paths.MODELS / member / "model.pt"
        _, saved = read_model_file(path, cfg.stage_of(member))
        model = build_model(member, cfg.model_of(member), len(words), feature_dim)
        members.append(load_state(model, saved.get("state_dict", {}), path, member).to(device))
    ev = cfg.evaluation
    refs = read_coco_captions(root / paths.references("test"))
    predictions = decode_split(Ensemble(members), read_features(test, cfg.compute), words, ev.beam_size,
                               ev.max_length, ev.batch_size)
    return {"predictions": predictions, "test": evaluate_captions(predictions, refs), "refs": refs}
