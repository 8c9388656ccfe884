"""Reader for COCO caption annotation files (`captions_val2014.json` layout), the references of evaluation.

Strict mode (the default, used by evaluation) rejects an annotation whose `image_id` is not in `images`:
a reference without its image means a cut or mixed-up file, and scoring against it would be wrong.
`strict=False` keeps such annotations under their own image id; it exists for excerpts like the test
fixture, whose first 100 annotations were cut independently of its first 100 images.
Images listed without any annotation map to an empty list (evaluation decides what to do with them).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..io import InputError


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_coco_captions(path: str | Path, strict: bool = True) -> dict[int, list[str]]:
    """image_id -> captions in file order, for every image in `images` (plus, non-strict, annotated ids)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"missing COCO caption file: {path}")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: top level must be an object with 'images' and 'annotations'")
    for key in ("images", "annotations"):
        if not isinstance(data.get(key), list):
            raise InputError(f"{path}: field '{key}' is missing or not a list")
    captions: dict[int, list[str]] = {}
    for k, image in enumerate(data["images"]):
        if not isinstance(image, dict) or not _int(image.get("id")):
            raise InputError(f"{path}: images[{k}] has no integer field 'id'")
        if image["id"] in captions:
            raise InputError(f"{path}: images[{k}] repeats image id {image['id']}")
        captions[image["id"]] = []
    for k, ann in enumerate(data["annotations"]):
        if not isinstance(ann, dict) or not _int(ann.get("image_id")):
            raise InputError(f"{path}: annotations[{k}] has no integer field 'image_id'")
        if not isinstance(ann.get("caption"), str):
            raise InputError(f"{path}: annotations[{k}] has no string field 'caption'")
        image_id = ann["image_id"]
        if image_id not in captions:
            if strict:
                raise InputError(f"{path}: annotations[{k}] refers to image {image_id}, which is not in 'images'")
            captions[image_id] = []
        captions[image_id].append(ann["caption"])
    return captions
