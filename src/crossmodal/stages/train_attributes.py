"""Stage `train_attributes`: the attribute detector (features/attributes.py) trained on the world's captions, its
test precision@k and mAP in reports/metrics/attributes.json and its MLflow run, and the feature sets
`attributes` (detected words) and `attributes_oracle` (the images' own caption words) that ETA's systems read.
Under the real profile the COCO detector (VGG-16, K = 1000) is not built yet: the stage stops with one line."""
from __future__ import annotations

from pathlib import Path

from .. import paths
from ..config import flatten
from ..io import InputError, write_json
from .common import progress, real, record_environment, set_threads, split_file


def run(cfg, root: Path, args) -> None:
    if real(cfg):
        raise InputError("the attribute detector under profile real (VGG-16 on the COCO images, K = 1000) is not "
                         "built yet; the ETA pipeline runs on the synthetic profile only (docs/real-data.md)")
    from ..tracking import Run

    params = {**flatten(cfg.attributes, "attributes"), "grid.size": cfg.grid.size}
    with Run("train_attributes", params) as run:
        from ..data.captions import load_vocabulary
        from ..data.karpathy import read_karpathy
        from ..features.attributes import train_detector
        from ..features.backbone import load_backbone, read_scene_graphs

        set_threads(cfg)
        captions = read_karpathy(root / split_file(cfg))
        words = load_vocabulary(root / paths.vocabulary(cfg.attributes.vocabulary) / "vocab.json")
        entries = {int(e["image_id"]): e for e in read_scene_graphs(root / paths.WORLD)["images"]}
        backbone, _ = load_backbone(root / paths.BACKBONE)
        result = train_detector(cfg.attributes, cfg.grid.size, backbone, root / paths.WORLD, captions, entries, words,
                                {name: root / paths.features(name) for name in ("attributes", "attributes_oracle")},
                                log=lambda m, step: run.log_metrics({k: v for k, v in m.items() if k != "epoch"},
                                                                    step=step),
                                progress=progress(cfg))
        run.log_metrics({f"test_{k}": v for k, v in result["test"].items()})
        run.log_metrics({"train_seconds": result.pop("seconds")})
        write_json(root / paths.METRICS / "attributes.json",
                   {"mlflow_run_id": run.run_id, **result, "environment": record_environment(run)})
