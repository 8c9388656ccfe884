"""Reader for Karpathy split files (`dataset_coco.json`, `dataset_flickr8k.json`, `dataset_flickr30k.json`).

These files fix the train/val/test split every captioning paper since 2015 uses, and carry the
pre-tokenised references. The synthetic image world writes the same layout, so one reader serves both.
Splits in the COCO file are train, restval, val and test; the papers train on train + restval
(113,287 images), hence `restval_to_train=True` by default.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..io import InputError, json_field

SPLITS = ("train", "restval", "val", "test")


@dataclass(frozen=True)
class KarpathySentence:
    sentid: int
    tokens: list[str]
    raw: str


@dataclass(frozen=True)
class KarpathyImage:
    """One image; `image_id` is the COCO id (`cocoid`) or, in files without one (Flickr), `imgid`."""

    image_id: int
    imgid: int
    split: str
    filepath: str | None
    filename: str
    sentences: list[KarpathySentence]

    @property
    def path(self) -> str:
        """Where the image lies under the image root (`val2014/COCO_val2014_….jpg`), so a reader can open it."""
        return f"{self.filepath}/{self.filename}" if self.filepath else self.filename



def _sentence(entry: object, path: Path, where: str) -> KarpathySentence:
    if not isinstance(entry, dict):
        raise InputError(f"{path}: {where} must be an object")
    tokens = json_field(entry, "tokens", list, path, where)
    if not all(isinstance(t, str) for t in tokens):
        raise InputError(f"{path}: {where}.tokens must be a list of strings")
    return KarpathySentence(sentid=json_field(entry, "sentid", int, path, where), tokens=list(tokens),
                            raw=json_field(entry, "raw", str, path, where))


def _image(entry: object, path: Path, where: str, restval_to_train: bool) -> KarpathyImage:
    if not isinstance(entry, dict):
        raise InputError(f"{path}: {where} must be an object")
    imgid = json_field(entry, "imgid", int, path, where)
    split = json_field(entry, "split", str, path, where)
    if split not in SPLITS:
        raise InputError(f"{path}: {where}.split is {split!r}, expected one of {', '.join(SPLITS)}")
    if split == "restval" and restval_to_train:
        split = "train"
    image_id = json_field(entry, "cocoid", int, path, where) if "cocoid" in entry else imgid
    filepath = json_field(entry, "filepath", str, path, where, required=False)
    raw_sentences = json_field(entry, "sentences", list, path, where)
    sentences = [_sentence(s, path, f"{where}.sentences[{k}]") for k, s in enumerate(raw_sentences)]
    if not sentences:
        raise InputError(f"{path}: {where} has no sentences")
    return KarpathyImage(image_id=image_id, imgid=imgid, split=split, filepath=filepath,
                         filename=json_field(entry, "filename", str, path, where), sentences=sentences)


def read_karpathy(path: str | Path, restval_to_train: bool = True) -> list[KarpathyImage]:
    """All images of a Karpathy split file, in file order; raises InputError naming file and field."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"missing Karpathy split file: {path}")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: top level must be an object with field 'images'")
    entries = json_field(data, "images", list, path, "top level")
    images = [_image(e, path, f"images[{k}]", restval_to_train) for k, e in enumerate(entries)]
    seen: set[int] = set()
    for im in images:
        if im.image_id in seen:
            raise InputError(f"{path}: image id {im.image_id} appears twice")
        seen.add(im.image_id)
    return images


def by_split(images: list[KarpathyImage]) -> dict[str, list[KarpathyImage]]:
    """Images grouped by split name, file order kept within each split."""
    out: dict[str, list[KarpathyImage]] = {}
    for im in images:
        out.setdefault(im.split, []).append(im)
    return out
