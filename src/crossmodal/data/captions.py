"""Caption preprocessing as the captioning papers do it, and the caption data used by training.

Lower-case, tokenise (the Karpathy `tokens` field when present, else the raw sentence split on
non-alphanumerics), build the vocabulary from the training split, map rare words to `<unk>`, truncate to a
maximum length, store the encoded labels in HDF5.

Deviation from Karpathy's `prepro_labels.py`: a word is kept when it occurs *at least* `min_word_count`
times (the script keeps words occurring more than the threshold); the issue asks for "at least".

`labels.h5` layout: `image_ids` int64 [N] (dataset order), `split` bytes [N], `label_start_ix` /
`label_end_ix` int64 [N] (rows start:end of image i), `labels` int32 [S, max_length] (word ids, 0-padded,
no `<bos>`/`<eos>`), `label_length` int32 [S].
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from ..config import CaptionsConfig
from ..io import InputError, atomic_path, read_json, write_json
from .karpathy import KarpathyImage, read_karpathy

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


def preprocess(cfg: CaptionsConfig, dataset_json: Path, out_dir: Path) -> dict:
    images = read_karpathy(dataset_json)
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
    out_dir = Path(out_dir)
    with atomic_path(out_dir / "labels.h5") as tmp, h5py.File(tmp, "w") as f:
        f["image_ids"] = np.array([img.image_id for img in images], dtype=np.int64)
        f["split"] = np.array([img.split.encode() for img in images])
        f["label_start_ix"] = np.array(starts, dtype=np.int64)
        f["label_end_ix"] = np.array(ends, dtype=np.int64)
        f["labels"] = np.array(rows, dtype=np.int32).reshape(-1, cfg.max_length)
        f["label_length"] = np.array(lengths, dtype=np.int32)
    write_json(out_dir / "vocab.json", {"words": words, "min_word_count": cfg.min_word_count, "max_length": cfg.max_length})
    return {"vocab_size": len(words), "captions": len(rows), "images": len(images), "unk_rate": unk / max(total, 1)}


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
