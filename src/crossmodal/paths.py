"""Where every stage reads and writes, relative to the repository root (dvc.yaml names the same paths)."""
from __future__ import annotations

from pathlib import Path

WORLD = Path("data/raw/image_world")
DATASET_JSON = WORLD / "dataset_coco.json"
SCENE_GRAPHS = WORLD / "scene_graphs.json"
CAPTIONS = Path("data/processed/captions")
BACKBONE = Path("data/models/backbone.pt")
REGIONS = Path("data/features/regions.h5")
MODELS = Path("data/models")
PREDICTIONS = Path("data/predictions")
CHECKPOINTS = Path("data/checkpoints")
METRICS = Path("reports/metrics")
TABLES = Path("reports/tables")
INDEX = Path("reports/index.md")


def annotations(split: str) -> Path:
    """COCO-format caption annotations of an evaluation split."""
    return WORLD / "annotations" / f"captions_{split}.json"


def submission(variant: str) -> Path:
    """The test-server caption file of a variant, named as the COCO server expects
    (`captions_test2014_<alg>_results.json`); on synthetic data the test split stands in for test2014."""
    return PREDICTIONS / variant / f"captions_test2014_{variant}_results.json"
