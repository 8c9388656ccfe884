"""The synthetic image world written out as the published files of the real profile: a helper of the tests
(end_to_end/test_real_profile.py), not of the pipeline.

Serving these files (from a loopback HTTP server, say) and pointing params.yaml `datasets` at them runs the real
data path end to end without the internet: download, extraction, conversion and training see the exact formats
of the publishers' archives, and the converted result can be checked against the synthetic profile's own files.

    caption_datasets.zip            dataset_coco.json (the Karpathy split file, each image named as COCO names its
                                    own: train2014/COCO_train2014_<12-digit id>, val and test in val2014/)
    annotations_trainval2014.zip    annotations/captions_train2014.json (train images),
                                    annotations/captions_val2014.json (val and test images), COCO layout
    trainval.zip                    trainval/synthetic_resnet101_faster_rcnn_genome.tsv.0, bottom-up TSV layout

and, given the VQA world's folder and the word vectors (BAN's real path):

    v2_Questions_{Train,Val}_mscoco.zip     v2_OpenEnded_mscoco_{train,val}2014_questions.json
    v2_Annotations_{Train,Val}_mscoco.zip   v2_mscoco_{train,val}2014_annotations.json
    v2_Questions_Test_mscoco.zip            v2_OpenEnded_mscoco_test-dev2015_questions.json (the published archive
                                            also holds test2015's, a superset no stage reads)
    glove.6B.zip                            glove.6B.300d.txt (the world's vectors under GloVe's name; the published
                                            archive also holds the 50-, 100- and 200-d files)

Test-dev's annotations (the world's `server/` copy) are not exported: VQA v2 does not publish them. For BAN's phrase
grounding, given the grounding world:

    annotations.zip                 Sentences/<id>.txt, Annotations/<id>.xml (Flickr30k Entities)
    train.txt, val.txt, test.txt    the split lists
    flickr30k_resnet101_faster_rcnn_genome.tsv   the images' region features, bottom-up TSV layout (no stable link:
                                    placed by hand)

For ETA's grid features, given a VGG-16 weights file (the tests' narrow stand-in):

    train2014.zip, val2014.zip      the world's train images, and its val and test images (COCO's val2014 holds
                                    Karpathy's val and test), at the exported split file's paths
    vgg16-397923af.pth              the weights file under torchvision's name
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

from crossmodal.data.butd_tsv import ButdRow, write_butd_tsv
from crossmodal.data.karpathy import read_karpathy
from crossmodal.data.regions import RegionFeatures
from crossmodal.data.vqa import annotations_file, questions_file
from crossmodal.features.vgg import WEIGHTS_FILE
from crossmodal.io import atomic_path

ARCHIVES = {
    "karpathy": "caption_datasets.zip",
    "coco_captions": "annotations_trainval2014.zip",
    "butd_adaptive": "trainval.zip",
}
VQA_ARCHIVES = {  # archive -> (split, questions or annotations)
    "v2_Questions_Train_mscoco.zip": ("train", questions_file), "v2_Questions_Val_mscoco.zip": ("val", questions_file),
    "v2_Annotations_Train_mscoco.zip": ("train", annotations_file),
    "v2_Annotations_Val_mscoco.zip": ("val", annotations_file),
    "v2_Questions_Test_mscoco.zip": ("test", questions_file),
}
GLOVE_ARCHIVE, GLOVE_FILE = "glove.6B.zip", "glove.6B.300d.txt"
IMAGE_ARCHIVES = ("train2014.zip", "val2014.zip")
FLICKR_ARCHIVE, FLICKR_TSV = "annotations.zip", "flickr30k_resnet101_faster_rcnn_genome.tsv"
SPLIT_LISTS = ("train.txt", "val.txt", "test.txt")
FLICKR_ID_OFFSET = 1_000_000_000  # Flickr30k's ids are Flickr's photo ids, ten digits


def coco_path(split: str, image_id: int, suffix: str) -> str:
    """Where COCO keeps an image of a Karpathy split: train2014/ for train, val2014/ for the rest."""
    folder = "train2014" if split == "train" else "val2014"
    return f"{folder}/COCO_{folder}_{image_id:012d}{suffix}"


def _coco_captions(images, description: str) -> dict:
    annotations = [{"image_id": img.image_id, "id": 0, "caption": s.raw} for img in images for s in img.sentences]
    for k, ann in enumerate(annotations):
        ann["id"] = k
    return {"info": {"description": description}, "licenses": [],
            "images": [{"id": img.image_id, "file_name": coco_path(img.split, img.image_id, Path(img.filename).suffix)
                        .split("/")[1]} for img in images],
            "annotations": annotations}


def _write_zip(path: Path, members: dict[str, Path | bytes]) -> None:
    with atomic_path(path) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in members.items():
            if isinstance(content, Path):
                archive.write(content, name)
            else:
                archive.writestr(name, content)


def _write_tsv(regions_path: Path, tsv: Path, ids: dict[int, int] | None = None) -> None:
    """The feature set's images (those of `ids`, renumbered by it, if given) as a bottom-up-attention TSV."""
    with RegionFeatures(regions_path) as regions:
        def rows():
            for k, image_id in enumerate(regions.ids.tolist()):
                if ids is None or image_id in ids:
                    features, boxes = regions.get(image_id)
                    width, height = regions.image_sizes[k].tolist()
                    yield ButdRow(image_id=image_id if ids is None else ids[image_id], image_w=width, image_h=height,
                                  boxes=boxes, features=features)

        write_butd_tsv(tsv, rows())


def export_grounding_formats(grounding_world: Path, regions_path: Path, out_dir: Path) -> dict[str, list[Path]]:
    """Write Flickr30k Entities' files and the Flickr30k images' TSV of the module docstring into `out_dir`; returns
    dataset name -> files (`flickr30k_entities`, `flickr30k_features`). Every image id is raised by
    `FLICKR_ID_OFFSET`, so that the grounding world's images (the image world's) are new images beside COCO's."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lists = {name: (grounding_world / name).read_text().split() for name in SPLIT_LISTS}
    ids = {int(i): int(i) + FLICKR_ID_OFFSET for names in lists.values() for i in names}
    members: dict[str, Path | bytes] = {}
    with zipfile.ZipFile(grounding_world / FLICKR_ARCHIVE) as world:
        for old, new in ids.items():
            members[f"Sentences/{new}.txt"] = world.read(f"Sentences/{old}.txt")
            xml = world.read(f"Annotations/{old}.xml").decode()
            members[f"Annotations/{new}.xml"] = xml.replace(f"<filename>{old}.jpg<", f"<filename>{new}.jpg<").encode()
    _write_zip(out_dir / FLICKR_ARCHIVE, members)
    for name, names in lists.items():
        (out_dir / name).write_text("".join(f"{ids[int(i)]}\n" for i in names))
    _write_tsv(regions_path, out_dir / FLICKR_TSV, ids)
    return {"flickr30k_entities": [out_dir / FLICKR_ARCHIVE, *(out_dir / name for name in SPLIT_LISTS)],
            "flickr30k_features": [out_dir / FLICKR_TSV]}


def export_vqa_formats(vqa_world: Path, word_vectors: Path, out_dir: Path) -> dict[str, list[Path]]:
    """Write VQA v2's five archives and GloVe's of the module docstring into `out_dir`; returns dataset name ->
    archive paths (`vqa_v2`, `glove`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for archive, (split, file_of) in VQA_ARCHIVES.items():
        member = file_of(vqa_world, split)
        _write_zip(out_dir / archive, {member.name: member})
    _write_zip(out_dir / GLOVE_ARCHIVE, {GLOVE_FILE: word_vectors})
    return {"vqa_v2": [out_dir / archive for archive in VQA_ARCHIVES], "glove": [out_dir / GLOVE_ARCHIVE]}


def export_grid_formats(world_dir: Path, weights: Path, out_dir: Path) -> dict[str, list[Path]]:
    """Write COCO's two image archives and the VGG-16 weights file of the module docstring into `out_dir`; returns
    dataset name -> files (`coco_images`, `vgg16`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    images = read_karpathy(world_dir / "dataset_coco.json")
    named = {coco_path(image.split, image.image_id, Path(image.filename).suffix): world_dir / image.path
             for image in images}
    for archive in IMAGE_ARCHIVES:
        folder = Path(archive).stem + "/"
        _write_zip(out_dir / archive, {name: path for name, path in named.items() if name.startswith(folder)})
    (out_dir / WEIGHTS_FILE).write_bytes(weights.read_bytes())
    return {"coco_images": [out_dir / archive for archive in IMAGE_ARCHIVES], "vgg16": [out_dir / WEIGHTS_FILE]}


def export_real_formats(world_dir: Path, regions_path: Path, out_dir: Path) -> dict[str, list[Path]]:
    """Write the three captioning archives of the module docstring into `out_dir`; returns dataset name -> files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    split_file = world_dir / "dataset_coco.json"
    images = read_karpathy(split_file)
    karpathy = json.loads(split_file.read_text())
    for entry in karpathy["images"]:
        path = coco_path(entry["split"], entry["cocoid"], Path(entry["filename"]).suffix)
        entry["filepath"], entry["filename"] = path.split("/")
    _write_zip(out_dir / ARCHIVES["karpathy"], {"dataset_coco.json": json.dumps(karpathy).encode()})
    train = [img for img in images if img.split == "train"]
    held_out = [img for img in images if img.split != "train"]
    _write_zip(out_dir / ARCHIVES["coco_captions"], {
        "annotations/captions_train2014.json": json.dumps(_coco_captions(train, "synthetic world, train")).encode(),
        "annotations/captions_val2014.json": json.dumps(_coco_captions(held_out, "synthetic world, val+test")).encode(),
    })
    tsv = out_dir / "synthetic_resnet101_faster_rcnn_genome.tsv.0"
    _write_tsv(regions_path, tsv)
    _write_zip(out_dir / ARCHIVES["butd_adaptive"], {f"trainval/{tsv.name}": tsv})
    tsv.unlink()
    return {name: [out_dir / archive] for name, archive in ARCHIVES.items()}
