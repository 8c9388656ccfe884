"""Flickr30k Entities: entity-annotated sentences, their boxes, and the official image splits.

BAN's phrase-grounding experiment reads these files, and the synthetic grounding world writes them, so
one reader serves both. Layout of the release (BryanPlummer/flickr30k_entities, facts from its README
and `flickr30k_entities_utils.py`):

- `Sentences/<image_id>.txt`: one caption per line (five per image); each annotated phrase is written
  ``[/EN#<chain id>/<type>[/<type>...] word word ...]``. Phrases sharing a chain id corefer. The types are
  people, clothing, bodyparts, animals, vehicles, instruments, scene, other, and notvisual; a phrase may
  carry several. Chain 0 is the null chain of "notvisual" phrases, which were not annotated with boxes.
- `Annotations/<image_id>.xml`: PASCAL-VOC-like; `<size>` (width, height, depth) and `<object>`s with one
  or more `<name>` (chain ids, the object belongs to each) and either a `<bndbox>` (xmin, ymin, xmax,
  ymax, integer pixels) or the flags `<scene>` and `<nobndbox>` (0/1) for chains that refer to the whole
  scene or were judged to need no box.
- `train.txt`, `val.txt`, `test.txt`: image ids, one per line (29,783 / 1,000 / 1,000).

The release ships `Sentences/` and `Annotations/` in one `annotations.zip`; `EntityRelease` reads them from that
archive in place (the download keeps it whole, and the synthetic world writes one), so a release is four files
rather than two per image.

Parsing follows the official utilities: a sentence is its words without the bracket headers, joined by
single spaces; a phrase records the index of its first word in that sentence, its words, its chain id and
its types; every `<name>` of a boxed object gets the box, and every `<name>` of a flagged object gets the
flags. Stricter than the official code: a malformed header, an unknown type, a phrase left open or a
stray ``]``, a non-integer coordinate, a box with xmin > xmax or ymin > ymax, and a flagged object without
both flags are errors naming file and line or object.

Which phrases are grounded (`grounding_phrases`), after BAN's Flickr30k loader (jnhwkim/ban-vqa
`dataset.py`, `_load_flickr30k`): a phrase is kept only when its chain id is not 0 and the chain has at
least one box in the image's XML. Chain 0 (notvisual) has nothing to point at; scene and no-box chains
have no box to score a proposal against (BAN counts them as "missing" and skips them); so do chains that
the XML does not mention at all. A sentence with no kept phrase contributes nothing. `phrase_status` says
why a phrase was dropped, for statistics.

Deviations from the official code, deliberate:
- Box coordinates are the file's values (1-based pixels), as BAN and the official Matlab reader use them;
  the official Python reader subtracts 1 since December 2018. Against detector proposals the difference
  is one pixel.
- `EntityPhrase.last_word_index` (where BAN reads the GRU state of a phrase) is the annotated position of
  the phrase's last word; BAN searches the sentence for the first occurrence of the phrase's words, which
  picks an earlier position when the same words occur twice.
- An object whose `<bndbox>` element is empty is ignored, as BAN ignores it (the official Python reader
  would fail on it).
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ..io import InputError

ENTITY_TYPES = ("people", "clothing", "bodyparts", "animals", "vehicles", "instruments", "scene", "other")
NOT_VISUAL = "notvisual"
NOT_VISUAL_CHAIN = 0
SPLIT_SIZES = {"train": 29783, "val": 1000, "test": 1000}
ARCHIVE = "annotations.zip"  # the release's Sentences/ and Annotations/, read in place as downloaded

_KNOWN_TYPES = frozenset(ENTITY_TYPES + (NOT_VISUAL,))
_HEADER = re.compile(r"\[/EN#(\d+)((?:/[^/\s]+)+)")
_BOX_FIELDS = ("xmin", "ymin", "xmax", "ymax")
_SIZE_FIELDS = ("width", "height", "depth")

Box = tuple[int, int, int, int]


@dataclass(frozen=True)
class EntityPhrase:
    """One annotated phrase: position of its first word in the sentence, its text, chain and types."""

    first_word_index: int
    text: str
    chain_id: int
    types: tuple[str, ...]

    @property
    def num_words(self) -> int:
        return len(self.text.split(" "))

    @property
    def last_word_index(self) -> int:
        return self.first_word_index + self.num_words - 1


@dataclass(frozen=True)
class EntitySentence:
    text: str
    phrases: tuple[EntityPhrase, ...]

    @property
    def words(self) -> list[str]:
        return self.text.split(" ")


@dataclass(frozen=True)
class EntityBoxes:
    """Contents of one `Annotations/<id>.xml`: image size, chain id -> boxes (file order), flagged chains."""

    width: int
    height: int
    depth: int
    boxes: Mapping[int, tuple[Box, ...]]
    scene_chains: frozenset[int]
    nobox_chains: frozenset[int]


@dataclass(frozen=True)
class EntityImage:
    image_id: int
    sentences: tuple[EntitySentence, ...]
    annotation: EntityBoxes


# --- sentences -----------------------------------------------------------------------------------

def _phrase_header(token: str, where: str) -> tuple[int, tuple[str, ...]]:
    match = _HEADER.fullmatch(token)
    if match is None:
        raise InputError(f"{where}: malformed phrase header {token!r}, expected [/EN#<chain>/<type>...")
    types = tuple(match.group(2).split("/")[1:])
    unknown = [t for t in types if t not in _KNOWN_TYPES]
    if unknown:
        raise InputError(f"{where}: unknown entity type {unknown[0]!r} in {token!r}")
    return int(match.group(1)), types


def parse_entity_sentence(line: str, where: str = "sentence") -> EntitySentence:
    """One line of a Sentences file; `where` names file and line in errors."""
    words: list[str] = []
    phrases: list[EntityPhrase] = []
    open_phrase: tuple[int, int, tuple[str, ...]] | None = None  # first word index, chain, types
    for token in line.split():
        if open_phrase is None:
            if token.startswith("["):
                open_phrase = (len(words), *_phrase_header(token, where))
                continue
            if token.endswith("]"):
                raise InputError(f"{where}: {token!r} closes a phrase that was never opened")
            words.append(token)
            continue
        if token.startswith("["):
            raise InputError(f"{where}: phrase opened at word {open_phrase[0]} is not closed before {token!r}")
        closes = token.endswith("]")
        if closes:
            token = token[:-1]
        if token:
            words.append(token)
        if closes:
            first, chain_id, types = open_phrase
            if len(words) == first:
                raise InputError(f"{where}: phrase of chain {chain_id} has no words")
            phrases.append(EntityPhrase(first, " ".join(words[first:]), chain_id, types))
            open_phrase = None
    if open_phrase is not None:
        raise InputError(f"{where}: phrase of chain {open_phrase[1]} is not closed at the end of the line")
    return EntitySentence(" ".join(words), tuple(phrases))


def parse_entity_sentences(text: str, where: str) -> list[EntitySentence]:
    """Every non-blank line of a `Sentences/<image_id>.txt` file's text, in file order; `where` names the file."""
    return [parse_entity_sentence(line, f"{where}:{k + 1}") for k, line in enumerate(text.split("\n")) if line.strip()]


def read_entity_sentences(path: str | Path) -> list[EntitySentence]:
    """Every non-blank line of a `Sentences/<image_id>.txt` file, in file order."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"missing Flickr30k Entities sentence file: {path}")
    return parse_entity_sentences(_utf8(path.read_bytes(), str(path)), str(path))


def _utf8(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{where}: not UTF-8 text ({err})") from None


# --- boxes ---------------------------------------------------------------------------------------

def _int_child(element: ET.Element, tag: str, where: str) -> int:
    text = element.findtext(tag)
    if text is None:
        raise InputError(f"{where} has no <{tag}>")
    try:
        return int(text.strip())
    except ValueError:
        raise InputError(f"{where}: <{tag}> is {text.strip()!r}, not an integer") from None


def read_entity_boxes(path: str | Path) -> EntityBoxes:
    """Parse an `Annotations/<image_id>.xml` file."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"missing Flickr30k Entities annotation file: {path}")
    return parse_entity_boxes(path.read_bytes(), str(path))


def parse_entity_boxes(data: bytes, path: str) -> EntityBoxes:
    """Parse the bytes of an `Annotations/<image_id>.xml` file; `path` names it in errors."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as err:
        raise InputError(f"{path}: not valid XML ({err})") from None
    size = root.find("size")
    if size is None:
        raise InputError(f"{path}: missing <size>")
    width, height, depth = (_int_child(size, tag, f"{path}: <size>") for tag in _SIZE_FIELDS)
    boxes: dict[int, list[Box]] = {}
    scene: set[int] = set()
    nobox: set[int] = set()
    for k, obj in enumerate(root.findall("object")):
        where = f"{path}: object {k + 1}"
        chains = []
        for name in obj.findall("name"):
            text = (name.text or "").strip()
            if not text.isdigit():
                raise InputError(f"{where}: <name> is {text!r}, expected a chain id")
            chains.append(int(text))
        if not chains:
            raise InputError(f"{where} has no <name>")
        bndbox = obj.find("bndbox")
        if bndbox is not None and len(bndbox) == 0:
            continue
        if bndbox is not None:
            box = tuple(_int_child(bndbox, tag, f"{where} <bndbox>") for tag in _BOX_FIELDS)
            if box[0] > box[2] or box[1] > box[3]:
                raise InputError(f"{where}: box {box} has xmin > xmax or ymin > ymax")
            for chain in chains:
                boxes.setdefault(chain, []).append(box)
            continue
        if _int_child(obj, "scene", where) > 0:
            scene.update(chains)
        if _int_child(obj, "nobndbox", where) > 0:
            nobox.update(chains)
    return EntityBoxes(width, height, depth, {c: tuple(b) for c, b in boxes.items()},
                       frozenset(scene), frozenset(nobox))


class EntityRelease:
    """A release folder, read in place: `annotations.zip` (`Sentences/<id>.txt` and `Annotations/<id>.xml` at its
    top level, as the release's archive holds them) beside the split lists. Opened once, read image by image; use
    it as a context manager to close the archive."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.archive = self.root / ARCHIVE
        if not self.archive.is_file():
            raise InputError(f"missing Flickr30k Entities archive: {self.archive}")
        try:
            self._zip = zipfile.ZipFile(self.archive)
        except zipfile.BadZipFile as err:
            raise InputError(f"{self.archive}: not a zip archive ({err})") from None
        self._members = set(self._zip.namelist())

    def __enter__(self) -> EntityRelease:
        return self

    def __exit__(self, *exc) -> None:
        self._zip.close()

    def _read(self, member: str) -> tuple[bytes, str]:
        if member not in self._members:
            raise InputError(f"{self.archive} has no {member}")
        return self._zip.read(member), f"{self.archive}:{member}"

    def sentences(self, image_id: int) -> list[EntitySentence]:
        data, where = self._read(f"Sentences/{image_id}.txt")
        return parse_entity_sentences(_utf8(data, where), where)

    def image(self, image_id: int) -> EntityImage:
        """Sentences and boxes of one image."""
        boxes = parse_entity_boxes(*self._read(f"Annotations/{image_id}.xml"))
        return EntityImage(image_id, tuple(self.sentences(image_id)), boxes)

    def split_ids(self, split: str) -> list[int]:
        """Image ids of the split list `<split>.txt` beside the archive, in file order."""
        return read_split_ids(self.root / f"{split}.txt")


# --- which phrases are grounded -------------------------------------------------------------------

def phrase_status(phrase: EntityPhrase, annotation: EntityBoxes) -> str:
    """'boxed' (grounded), or why not: 'notvisual' (chain 0), 'scene', 'nobox', 'unannotated' (not in the XML)."""
    if phrase.chain_id == NOT_VISUAL_CHAIN:
        return "notvisual"
    if phrase.chain_id in annotation.boxes:
        return "boxed"
    if phrase.chain_id in annotation.scene_chains:
        return "scene"
    if phrase.chain_id in annotation.nobox_chains:
        return "nobox"
    return "unannotated"


def grounding_phrases(sentence: EntitySentence, annotation: EntityBoxes) -> list[EntityPhrase]:
    """The phrases BAN grounds: chain id not 0 and at least one box for the chain."""
    return [p for p in sentence.phrases if phrase_status(p, annotation) == "boxed"]


# --- splits --------------------------------------------------------------------------------------

def read_split_ids(path: str | Path) -> list[int]:
    """Image ids of an official split list (`train.txt`, ...), in file order."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"missing Flickr30k Entities split list: {path}")
    lines = path.read_text(encoding="utf-8").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    ids: list[int] = []
    seen: set[int] = set()
    for k, line in enumerate(lines):
        text = line.strip()
        if not text.isdigit():
            raise InputError(f"{path}:{k + 1}: {text!r} is not an image id")
        if int(text) in seen:
            raise InputError(f"{path}:{k + 1}: image id {text} appears twice")
        seen.add(int(text))
        ids.append(int(text))
    return ids


def check_splits(splits: Mapping[str, Sequence[int]], excerpt: bool = False) -> dict[str, int]:
    """Sizes of the splits; disjointness always checked, the official sizes unless `excerpt`."""
    owner: dict[int, str] = {}
    for split, ids in splits.items():
        for image_id in ids:
            if owner.setdefault(image_id, split) != split:
                raise InputError(f"Flickr30k Entities splits: image {image_id} is in both {owner[image_id]} and {split}")
    sizes = {split: len(ids) for split, ids in splits.items()}
    if not excerpt and sizes != SPLIT_SIZES:
        raise InputError(f"Flickr30k Entities splits have sizes {sizes}, the official ones are {SPLIT_SIZES}")
    return sizes
