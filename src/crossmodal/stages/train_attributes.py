"""Stage `train_attributes`: the attribute detector (features/attributes.py) trained on the world's captions, its
test precision@k and mAP in reports/metrics/attributes.json and its MLflow run, and the feature sets
`attributes` (detected words) and `attributes_oracle` (the images' own caption words) that ETA's systems read.
Under the real profile the detector is VGG-16 (the `vgg16` download) fine-tuned on COCO's images (`coco_images`),
K = 1000 (the `paper:` block), read per batch from disk."""
from __future__ import annotations

from pathlib import Path

from .. import paths
from ..config.loader import flatten
from ..io import write_json
from ..pipeline import manifests
from ..stage_common import progress, real, record_environment, set_threads, split_file


def run(cfg, root: Path, args) -> None:
    if not real(cfg):
        manifests.check(root / paths.WORLD)  # the world this stage reads, as its manifest lists it
    from ..tracking import Run

    params = {**flatten(cfg.attributes, "attributes"), "grid.size": cfg.grid.size}
    with Run("train_attributes", params) as run:
        from ..data.captions import load_vocabulary
        from ..data.karpathy import read_karpathy
        from ..features.attributes import train_detector

        set_threads(cfg)
        captions = read_karpathy(root / split_file(cfg))
        words = load_vocabulary(root / paths.vocabulary(cfg.attributes.vocabulary) / "vocab.json")
        if real(cfg):
            from ..features.attributes import ImageFiles
            from ..features.vgg import WEIGHTS_FILE, image_size, load_image, load_vgg16

            image_root = root / paths.raw("coco_images")
            sizes = {im.image_id: image_size(image_root / im.path) for im in captions}
            backbone = load_vgg16(root / paths.raw("vgg16") / WEIGHTS_FILE)

            def load(items):
                return ImageFiles([image_root / im.path for im in items], load_image)
        else:
            from ..features.backbone import load_backbone, load_images, read_scene_graphs

            entries = {int(e["image_id"]): e for e in read_scene_graphs(root / paths.WORLD)["images"]}
            sizes = {image_id: (int(e["width"]), int(e["height"])) for image_id, e in entries.items()}
            backbone, _ = load_backbone(root / paths.BACKBONE)

            def load(items):
                return load_images(root / paths.WORLD, [entries[im.image_id] for im in items])
        result = train_detector(cfg.attributes, cfg.grid.size, backbone, load, captions, sizes, words,
                                {name: root / paths.features(name) for name in ("attributes", "attributes_oracle")},
                                log=lambda m, step: run.log_metrics({k: v for k, v in m.items() if k != "epoch"},
                                                                    step=step),
                                progress=progress(cfg))
        run.log_metrics({f"test_{k}": v for k, v in result["test"].items()})
        run.log_metrics({"train_seconds": result.pop("seconds")})
        write_json(root / paths.METRICS / "attributes.json",
                   {"mlflow_run_id": run.run_id, **result, "environment": record_environment(run)})
