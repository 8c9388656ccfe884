"""Caption preprocessing as the captioning papers do it, and the caption data used by training.

Lower-case, tokenise (the Karpathy `tokens` field when present, else the raw sentence split on
non-alphanumerics), build the vocabulary from the training split, map rare words to `<unk>`, truncate to a
maximum length, store the encoded labels in HDF5.

Deviation from Karpathy's `prepro_labels.py`: a word is kept when it occurs *at least* `min_word_count`
times (the script keeps words occurring more than the threshold); the issue asks for "at least".

Each paper built its own vocabulary (X-LAN: words seen >= 6 times; AoANet, ETA: >= 5), so the processed
directory holds one set per convention in params.yaml `vocabularies`, beside what every convention shares:

    data/processed/captions/<vocabulary>/labels.h5, vocab.json
    data/processed/captions/references/captions_{val,test}.json   COCO layout, the raw captions evaluation scores against
    data/processed/captions/images.json                           [{image_id, path, split}] of the split file
    data/processed/captions/examples/examples.json, <id>.<ext>    the qualitative examples: the first test images
                                                                  by id, and a copy of each (synthetic world only)

The examples folder lets every captioning stage draw its qualitative pictures from a few files instead of
depending on the whole image world (2,000 files that DVC would check once per stage).

`labels.h5` layout: `image_ids` int64 [N] (dataset order), `split` bytes [N], `label_start_ix` /
`label_end_ix` int64 [N] (rows start:end of image i), `labels` int32 [S, max_length] (word ids, 0-padded,
no `<bos>`/`<eos>`), `label_length` int32 [S].
"""
from __future__ import annotations

import re
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from ..config.data import CaptionsConfig
from .hdf5 import refuse_outside_data
from ..io import InputError, atomic_path, read_json, write_json
from ..pipeline import manifests
from .karpathy import KarpathyImage, by_split

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
_NON_WORD = re.compile(r"[^a-z0-9]+")


def tokenize(raw: str) -> list[str]:
    return [t for t in _NON_WORD.split(raw.lower()) if t]


def sentence_tokens(tokens: list[str] | None, raw: str) -> list[str]:
    if tokens:
        return [w for t in tokens for w in tokenize(t)]
    return tokenize(raw)


def build_vocabulary(images: list[KarpathyImage], min_word_count: int) -> list[str]:
    counts = Counter(
        w for img in images if img.split == "train" for s in img.sentences for w in sentence_tokens(s.tokens, s.raw)
    )
    if not counts:
        raise InputError("caption preprocessing: the training split has no captions")
    kept = sorted((w for w, c in counts.items() if c >= min_word_count), key=lambda w: (-counts[w], w))
    return SPECIALS + kept


def encode(tokens: list[str], word_to_ix: dict[str, int], max_length: int) -> list[int]:
    return [word_to_ix.get(w, UNK) for w in tokens[:max_length]]


def decode(ids, words: list[str]) -> str:
    """Word ids -> caption text, stopping at the first pad/eos."""
    out = []
    for i in ids:
        i = int(i)
        if i in (PAD, EOS):
            break
        out.append(words[i])
    return " ".join(out)


def encode_vocabulary(cfg: CaptionsConfig, images: list[KarpathyImage], out_dir: Path) -> dict:
    """One vocabulary convention: `vocab.json` and `labels.h5` of every image in `out_dir`; returns a summary."""
    words = build_vocabulary(images, cfg.min_word_count)
    word_to_ix = {w: i for i, w in enumerate(words)}
    rows, lengths, starts, ends = [], [], [], []
    unk = total = 0
    for img in images:
        starts.append(len(rows))
        for s in img.sentences:
            ids = encode(sentence_tokens(s.tokens, s.raw), word_to_ix, cfg.max_length)
            unk += ids.count(UNK)
            total += len(ids)
            lengths.append(len(ids))
            rows.append(ids + [PAD] * (cfg.max_length - len(ids)))
        ends.append(len(rows))
    out_dir.mkdir(parents=True, exist_ok=True)
    with h5py.File(out_dir / "labels.h5", "w") as f:
        f["image_ids"] = np.array([img.image_id for img in images], dtype=np.int64)
        f["split"] = np.array([img.split.encode() for img in images])
        f["label_start_ix"] = np.array(starts, dtype=np.int64)
        f["label_end_ix"] = np.array(ends, dtype=np.int64)
        f["labels"] = np.array(rows, dtype=np.int32).reshape(-1, cfg.max_length)
        f["label_length"] = np.array(lengths, dtype=np.int32)
    write_json(out_dir / "vocab.json", {"words": words, "min_word_count": cfg.min_word_count, "max_length": cfg.max_length})
    return {"vocab_size": len(words), "captions": len(rows), "images": len(images), "unk_rate": unk / max(total, 1)}


def reference_file(images: list[KarpathyImage], references: dict[int, list[str]]) -> dict:
    """COCO caption-annotation layout of `images` (what evaluation reads); every image needs references."""
    annotations = []
    for img in images:
        captions = references.get(img.image_id)
        if not captions:
            raise InputError(f"image {img.image_id} ({img.filename}) of the {img.split} split has no reference "
                             "captions in the COCO annotation files")
        annotations += [{"image_id": img.image_id, "id": len(annotations) + k, "caption": c}
                        for k, c in enumerate(captions)]
    return {"images": [{"id": img.image_id, "file_name": img.filename} for img in images], "annotations": annotations}


def preprocess(vocabularies: dict[str, CaptionsConfig], images: list[KarpathyImage],
               references: dict[int, list[str]], out_dir: Path, examples: int, image_root: Path | None) -> dict:
    """The processed caption directory, written atomically as a whole: one labels/vocabulary set per vocabulary
    convention (`<name>/`), the val and test references in COCO layout (`references/`), the image list
    (`images.json`: id, path under the image root, split) and the first `examples` test images (`examples/`,
    copied from `image_root`; None: the images are not at hand, the list only). `references` maps image ids to
    their raw COCO captions."""
    splits = by_split(images)
    for split in ("train", "val", "test"):
        if not splits.get(split):
            raise InputError(f"caption preprocessing: the split file has no {split} images")
    summary = {"images": {split: len(splits[split]) for split in ("train", "val", "test")}}
    with atomic_path(out_dir) as tmp:
        for name, cfg in vocabularies.items():
            summary[name] = encode_vocabulary(cfg, images, tmp / name)
        for split in ("val", "test"):
            write_json(tmp / "references" / f"captions_{split}.json", reference_file(splits[split], references), indent=None)
        write_json(tmp / "images.json", [{"image_id": img.image_id, "path": img.path, "split": img.split}
                                         for img in images], indent=None)
        write_examples(sorted(splits["test"], key=lambda img: img.image_id)[:examples], image_root, tmp / "examples")
        for folder in [*vocabularies, "references", "examples"]:  # what a captioning stage reads, each by its
            manifests.write(tmp / folder)  # manifest (pipeline/manifests.py): one file for DVC to check, not a folder
    return summary


def write_examples(images: list[KarpathyImage], image_root: Path | None, folder: Path) -> None:
    """`examples.json` ([{image_id, path, file}]: `file` is the copy beside it, or null) and the copies."""
    folder.mkdir(parents=True)
    listed = []
    for img in images:
        file = None
        if image_root is not None:
            source = image_root / img.path
            if not source.is_file():
                raise InputError(f"image {img.image_id}: missing file {source}")
            file = f"{img.image_id}{source.suffix}"
            shutil.copyfile(source, folder / file)
        listed.append({"image_id": img.image_id, "path": img.path, "file": file})
    write_json(folder / "examples.json", listed, indent=None)


@dataclass
class CaptionLabels:
    """Encoded captions of one split: `labels[start[i]:end[i]]` are the references of `image_ids[i]`."""

    image_ids: np.ndarray
    labels: np.ndarray
    start: np.ndarray
    end: np.ndarray


def load_vocabulary(path: Path) -> list[str]:
    data = read_json(path)
    if not isinstance(data, dict) or "words" not in data or data["words"][:4] != SPECIALS:
        raise InputError(f"{path}: not a vocabulary file (expected 'words' starting with {SPECIALS})")
    return data["words"]


def load_labels(path: Path, split: str) -> CaptionLabels:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"missing caption label file: {path}")
    try:
        with h5py.File(path, "r") as f:
            refuse_outside_data(f, f"caption label file {path}")
            splits = f["split"][:].astype(str)
            keep = np.flatnonzero(splits == split)
            start, end = f["label_start_ix"][:][keep], f["label_end_ix"][:][keep]
            labels = f["labels"][:]
            ids = f["image_ids"][:][keep]
    except OSError as err:
        raise InputError(f"{path}: truncated or not an HDF5 file ({err})") from None
    except KeyError as err:
        raise InputError(f"{path}: missing dataset {err}") from None
    return CaptionLabels(ids, labels, start, end)
