"""The synthetic image world written out as the published files of the real profile.

Serving these files (from a loopback HTTP server, say) and pointing params.yaml `datasets` at them runs the real
data path end to end without the internet: download, extraction, conversion and training see the exact formats
of the publishers' archives, and the converted result can be checked against the synthetic profile's own files.

    caption_datasets.zip            dataset_coco.json (the Karpathy split file)
    annotations_trainval2014.zip    annotations/captions_train2014.json (train images),
                                    annotations/captions_val2014.json (val and test images), COCO layout
    trainval.zip                    trainval/synthetic_resnet101_faster_rcnn_genome.tsv.0, bottom-up TSV layout
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

from ..data.butd_tsv import ButdRow, write_butd_tsv
from ..data.karpathy import read_karpathy
from ..data.regions import RegionFeatures
from ..io import atomic_path

ARCHIVES = {
    "karpathy": "caption_datasets.zip",
    "coco_captions": "annotations_trainval2014.zip",
    "butd_adaptive": "trainval.zip",
}


def _coco_captions(images, description: str) -> dict:
    annotations = [{"image_id": img.image_id, "id": 0, "caption": s.raw} for img in images for s in img.sentences]
    for k, ann in enumerate(annotations):
        ann["id"] = k
    return {"info": {"description": description}, "licenses": [],
            "images": [{"id": img.image_id, "file_name": img.filename} for img in images],
            "annotations": annotations}


def _write_zip(path: Path, members: dict[str, Path | bytes]) -> None:
    with atomic_path(path) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in members.items():
            if isinstance(content, Path):
                archive.write(content, name)
            else:
                archive.writestr(name, content)


def export_real_formats(world_dir: Path, regions_path: Path, out_dir: Path) -> dict[str, Path]:
    """Write the three archives of the module docstring into `out_dir`; returns dataset name -> archive path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    split_file = world_dir / "dataset_coco.json"
    images = read_karpathy(split_file)
    _write_zip(out_dir / ARCHIVES["karpathy"], {"dataset_coco.json": split_file})
    train = [img for img in images if img.split == "train"]
    held_out = [img for img in images if img.split != "train"]
    _write_zip(out_dir / ARCHIVES["coco_captions"], {
        "annotations/captions_train2014.json": json.dumps(_coco_captions(train, "synthetic world, train")).encode(),
        "annotations/captions_val2014.json": json.dumps(_coco_captions(held_out, "synthetic world, val+test")).encode(),
    })
    tsv = out_dir / "synthetic_resnet101_faster_rcnn_genome.tsv.0"
    with RegionFeatures(regions_path) as regions:
        def rows():
            for k, image_id in enumerate(regions.ids.tolist()):
                features, boxes = regions.get(image_id)
                width, height = regions.image_sizes[k].tolist()
                yield ButdRow(image_id=image_id, image_w=width, image_h=height, boxes=boxes, features=features)

        write_butd_tsv(tsv, rows())
    _write_zip(out_dir / ARCHIVES["butd_adaptive"], {f"trainval/{tsv.name}": tsv})
    tsv.unlink()
    return {name: out_dir / archive for name, archive in ARCHIVES.items()}
