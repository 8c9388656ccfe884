"""Stage `prepro_grounding`: BAN's preprocessing of Flickr30k Entities files for phrase grounding, as arrays in
data/processed/grounding/. It reads, through data/flickr30k_entities.py, the synthetic grounding world or under the
real profile Flickr30k Entities itself (the `flickr30k_entities` download: `annotations.zip` with `Sentences/` and
`Annotations/`, and the split lists, the same layout).

What is kept, after the official loader (jnhwkim/ban-vqa `dataset.py`, `_load_flickr30k`): the phrases that
`grounding_phrases` keeps (chain not 0, at least one box in the image's XML; scene-flagged, no-box and unannotated
chains are left out, as Flickr30k Entities evaluation leaves them out), and the sentences with at least one kept
phrase. A phrase is read by the GRU state at its last word (the official `find_sublist` returns the last token's
index; ours is the annotated position, data/flickr30k_entities.py says why). Sentences are cut to
`grounding.sentence_length` tokens (the official `max_length`, 82); a phrase whose last word falls beyond the cut is
left out too (the official code asserts that none does), and the summary counts it under `cut`.

Tokens: one per annotated word, lower-cased (the official `Dictionary.tokenize` lower-cases too, but it also drops
commas and splits off "'s", which moves its tokens against the phrase positions it finds in the untokenised words;
one token per word keeps them aligned). The word list holds every word of the kept sentences of all splits (inputs,
never labels, as prepro_vqa's question words), most frequent first, ties alphabetically; id 0 is padding, 1 an
unknown word, word k of the list id k + 2. Sentences are padded at the back.

Files: `words.json`, and per split `<split>.npz` with S sentences, at most E kept phrases per sentence and K boxes
per phrase (E and K: the split's largest):
    image_ids      int64   [S]           the sentence's image
    sentence_ids   int64   [S]           its line among the image's sentences (0-based)
    tokens         int64   [S, L]        word ids, back-padded with 0
    phrase_starts  int64   [S, E]        position of each phrase's first word (0 on padding)
    phrase_ends    int64   [S, E]        position of its last word: where the GRU state is read (0 on padding)
    phrase_mask    bool    [S, E]        real phrases
    chains         int64   [S, E]        the phrase's chain id (0 on padding)
    types          bool    [S, E, 8]     its entity types, columns in `ENTITY_TYPES` order (a phrase may have several)
    boxes          float32 [S, E, K, 4]  its entity's boxes, x1, y1, x2, y2 as the XML writes them (pixels from 1)
    box_mask       bool    [S, E, K]     real boxes
The task compares the boxes with the proposals (IoU >= 0.5, tasks/grounding.py), so a different proposal set needs no
rerun of this stage.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import paths
from ..data.flickr30k_entities import ENTITY_TYPES, EntityPhrase, EntityRelease, check_splits, phrase_status
from ..io import InputError, atomic_path, write_json
from ..pipeline import manifests
from ..stage_common import real

SPLITS = ("train", "val", "test")
PAD, UNK = 0, 1


@dataclass(frozen=True)
class GroundedSentence:
    """One sentence with at least one kept phrase: its tokens (lower-cased words), the kept phrases and each one's
    entity boxes."""

    image_id: int
    sentence_id: int
    tokens: tuple[str, ...]
    phrases: tuple[EntityPhrase, ...]
    boxes: tuple[tuple[tuple[int, int, int, int], ...], ...]


def grounded_sentences(release: EntityRelease, image_ids: list[int], sentence_length: int,
                       dropped: Counter) -> list[GroundedSentence]:
    """The kept sentences of the images, in image then line order; `dropped` counts each left-out phrase by
    `phrase_status` or as `cut` (last word beyond `sentence_length`)."""
    out = []
    for image_id in image_ids:
        image = release.image(image_id)
        for k, sentence in enumerate(image.sentences):
            kept = []
            for phrase in sentence.phrases:
                status = phrase_status(phrase, image.annotation)
                if status == "boxed" and phrase.last_word_index >= sentence_length:
                    status = "cut"
                if status != "boxed":
                    dropped[status] += 1
                    continue
                kept.append(phrase)
            if kept:
                out.append(GroundedSentence(image_id, k, tuple(w.lower() for w in sentence.words), tuple(kept),
                                            tuple(image.annotation.boxes[p.chain_id] for p in kept)))
    return out


def sentence_words(sentences: list[GroundedSentence]) -> list[str]:
    """Every token of the sentences, most frequent first, ties alphabetically (id = UNK + 1 + position)."""
    counts = Counter(token for s in sentences for token in s.tokens)
    return sorted(counts, key=lambda word: (-counts[word], word))


def encode(sentences: list[GroundedSentence], words: list[str], sentence_length: int) -> dict[str, np.ndarray]:
    """The arrays of one split (module docstring)."""
    index = {word: UNK + 1 + k for k, word in enumerate(words)}
    count = len(sentences)
    width = max((len(s.phrases) for s in sentences), default=1)
    most = max((len(b) for s in sentences for b in s.boxes), default=1)
    arrays = {"image_ids": np.array([s.image_id for s in sentences], np.int64),
              "sentence_ids": np.array([s.sentence_id for s in sentences], np.int64),
              "tokens": np.full((count, sentence_length), PAD, np.int64),
              "phrase_starts": np.zeros((count, width), np.int64), "phrase_ends": np.zeros((count, width), np.int64),
              "phrase_mask": np.zeros((count, width), bool), "chains": np.zeros((count, width), np.int64),
              "types": np.zeros((count, width, len(ENTITY_TYPES)), bool),
              "boxes": np.zeros((count, width, most, 4), np.float32), "box_mask": np.zeros((count, width, most), bool)}
    for row, sentence in enumerate(sentences):
        tokens = sentence.tokens[:sentence_length]
        arrays["tokens"][row, :len(tokens)] = [index.get(token, UNK) for token in tokens]
        for e, (phrase, boxes) in enumerate(zip(sentence.phrases, sentence.boxes)):
            arrays["phrase_starts"][row, e] = phrase.first_word_index
            arrays["phrase_ends"][row, e] = phrase.last_word_index
            arrays["phrase_mask"][row, e] = True
            arrays["chains"][row, e] = phrase.chain_id
            arrays["types"][row, e] = [t in phrase.types for t in ENTITY_TYPES]
            arrays["boxes"][row, e, :len(boxes)] = boxes
            arrays["box_mask"][row, e, :len(boxes)] = True
    return arrays


def preprocess_grounding(source: Path, out: Path, sentence_length: int) -> dict:
    """Read Flickr30k Entities files from `source` and write `out` (replaced atomically): `words.json` and
    `<split>.npz` per split. Returns a summary (sentences and phrases per split, left-out phrases by reason, words)."""
    with EntityRelease(source) as release:
        ids = {split: release.split_ids(split) for split in SPLITS}
        check_splits(ids, excerpt=True)  # disjoint; the synthetic world has its own sizes
        dropped: Counter = Counter()
        splits = {split: grounded_sentences(release, ids[split], sentence_length, dropped) for split in SPLITS}
    if not splits["train"]:
        raise InputError(f"{source}: no training sentence has a phrase with a box")
    words = sentence_words([s for sentences in splits.values() for s in sentences])
    with atomic_path(out) as tmp:
        tmp.mkdir(parents=True)
        write_json(tmp / "words.json", words)
        for split, sentences in splits.items():
            np.savez(tmp / f"{split}.npz", **encode(sentences, words, sentence_length))
    return {"sentences": {s: len(v) for s, v in splits.items()},
            "phrases": {s: sum(len(x.phrases) for x in v) for s, v in splits.items()},
            "left_out": dict(sorted(dropped.items())), "words": len(words)}


def run(cfg, root: Path, args) -> None:
    if not real(cfg):
        manifests.check(root / paths.GROUNDING_WORLD)  # the world this stage reads, as its manifest lists it
    source = root / (paths.raw("flickr30k_entities") if real(cfg) else paths.GROUNDING_WORLD)
    summary = preprocess_grounding(source, root / paths.GROUNDING, cfg.grounding.sentence_length)
    print(json.dumps(summary))
