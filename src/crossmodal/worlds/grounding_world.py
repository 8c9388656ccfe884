"""The grounding world: entity-annotated sentences about the image world's scenes, as Flickr30k Entities files.

It stands in for Flickr30k Entities (BAN's phrase grounding, Kim et al. 2018) and reads the image world's
`scene_graphs.json`. Every image gets five sentences; each names two or three entities of the scene in brackets,
``[/EN#<chain>/<type> the large red circle]``:
- an **object**, by the fewest attributes that single it out (`vqa_world.describe`), with an article;
- a **group** of look-alikes (two or more objects of one colour and shape), in the plural ("two red circles"): one
  chain with several boxes;
- the **scene** ("the dark background"): type scene, boxed with the whole image in half of the images and flagged
  `<scene>` (no box) in the others, as the real data box some scene chains and not others;
- in one sentence of three, a **not-visual** phrase on chain 0 ("for a moment"), never boxed.
The same entity keeps its chain id in all five sentences (coreference); chain ids are unique over the dataset.

Entity types. An object's type is drawn once per object from the real test set's frequencies of the eight types
(BAN's per-type table, `#Instances`: people 5,656, clothing 2,306, bodyparts 523, animals 518, vehicles 400,
instruments 162, scene 1,619, other 3,374), scene left out (only the scene phrase has it); a group takes the type of
its first object. The type is a label of the phrase, not something drawn: per-type recall here measures how the
grounding model does on phrases of uneven frequency, not on people or animals.

Files are the release's: `annotations.zip` holding `Sentences/<id>.txt` and `Annotations/<id>.xml` (PASCAL-VOC-like:
size, then one `<object>` per box with every chain it belongs to as a `<name>`, integer pixel corners from 1, and the
flagged scene chains), and `train.txt`, `val.txt`, `test.txt` from the image world's splits, read by
`data/flickr30k_entities.py`. One archive rather than two files per image, as the release ships them: DVC checks a
stage's outputs file by file, and 4,000 small files cost every `dvc repro` 0.15 s.
Generation is seeded per image.
"""
from __future__ import annotations

import math
import zipfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from ..data.flickr30k_entities import ARCHIVE
from ..io import atomic_path, write_text
from .phrasing import article, plural
from .seeding import item_rng
from .vqa_world import RELATION_WORDS, describe

TYPE_FREQUENCIES = {"people": 5656, "clothing": 2306, "bodyparts": 523, "animals": 518, "vehicles": 400,
                    "instruments": 162, "scene": 1619, "other": 3374}
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six")
SCENE_PHRASES = ("the dark background", "the scene", "the picture", "a dark room")
NOT_VISUAL_PHRASES = ("a moment", "a while", "the time being")
SENTENCES_PER_IMAGE = 5


@dataclass(frozen=True)
class GroundingWorldConfig:
    seed: int = 0
    sentences_per_image: int = SENTENCES_PER_IMAGE

    def __post_init__(self) -> None:
        if self.sentences_per_image < 1:
            raise ValueError("sentences_per_image must be at least 1")


@dataclass(frozen=True)
class Entity:
    chain_id: int
    entity_type: str
    phrase: str
    boxes: tuple[tuple[int, int, int, int], ...]  # none: the scene chain flagged as such
    members: tuple[int, ...] = ()  # object ids (objects and groups)


def pixel_box(box, size: int) -> tuple[int, int, int, int]:
    """A float box [x1, y1, x2, y2] (0-based, exclusive) as the release's integer corners, 1-based, inclusive."""
    x1, y1, x2, y2 = box
    return (max(1, math.floor(x1) + 1), max(1, math.floor(y1) + 1), min(size, math.ceil(x2)), min(size, math.ceil(y2)))


def entities(rng: np.random.Generator, graph: Mapping,
             first_chain: int) -> tuple[dict[int, Entity], list[Entity], Entity]:
    """The image's entities: one per object (by object id), the look-alike groups, and the scene."""
    objects, size = graph["objects"], graph["width"]
    types = [t for t in TYPE_FREQUENCIES if t != "scene"]
    weights = np.array([TYPE_FREQUENCIES[t] for t in types], float)
    chain = first_chain
    by_object: dict[int, Entity] = {}
    for obj in objects:
        phrase = describe(obj, objects)
        kind = str(types[rng.choice(len(types), p=weights / weights.sum())])
        by_object[obj["object_id"]] = Entity(chain, kind, phrase or "", (pixel_box(obj["box"], size),),
                                             (obj["object_id"],))
        chain += 1
    members = defaultdict(list)
    for obj in objects:
        members[(obj["color"], obj["shape"])].append(obj)
    groups = []
    for (color, shape), group in members.items():
        if len(group) > 1:
            groups.append(Entity(chain, by_object[group[0]["object_id"]].entity_type,
                                 f"{NUMBER_WORDS[min(len(group), 6)]} {color} {plural(shape)}",
                                 tuple(pixel_box(o["box"], size) for o in group),
                                 tuple(o["object_id"] for o in group)))
            chain += 1
    boxed_scene = rng.random() < 0.5
    whole = ((1, 1, size, graph["height"]),) if boxed_scene else ()
    scene = Entity(chain, "scene", str(rng.choice(SCENE_PHRASES)), whole)
    return by_object, groups, scene


def _bracket(entity: Entity, phrase: str | None = None) -> str:
    return f"[/EN#{entity.chain_id}/{entity.entity_type} {phrase or entity.phrase}]"


def sentence(rng: np.random.Generator, graph: Mapping, by_object: Mapping[int, Entity], groups: list[Entity],
             scene: Entity, with_not_visual: bool) -> str:
    """One sentence naming two or three entities (see the module docstring)."""
    nameable = [e for e in by_object.values() if e.phrase]
    relations = [r for r in graph["relations"] if by_object[r["subject"]].phrase and by_object[r["object"]].phrase]
    tail = f" for [/EN#0/notvisual {rng.choice(NOT_VISUAL_PHRASES)}]" if with_not_visual else ""
    form = int(rng.integers(3))
    if form == 0 and relations:
        r = relations[int(rng.integers(len(relations)))]
        a, b = by_object[r["subject"]], by_object[r["object"]]
        relation = RELATION_WORDS[r["predicate"]]
        first, second = _bracket(a, "the " + a.phrase), _bracket(b, "the " + b.phrase)
        return f"{first} is {relation} {second} in {_bracket(scene)}{tail} ."
    if form == 1 and groups:
        group = groups[int(rng.integers(len(groups)))]
        return f"{_bracket(group)} lie in {_bracket(scene)}{tail} ."
    if not nameable:
        return f"{_bracket(scene)} is empty{tail} ."
    entity = nameable[int(rng.integers(len(nameable)))]
    return f"there is {_bracket(entity, article(entity.phrase) + ' ' + entity.phrase)} in {_bracket(scene)}{tail} ."


def _xml(graph: Mapping, by_object: Mapping[int, Entity], groups: list[Entity], scene: Entity) -> str:
    lines = ["<annotation>", f"\t<filename>{graph['image_id']}.jpg</filename>", "\t<size>",
             f"\t\t<width>{graph['width']}</width>", f"\t\t<height>{graph['height']}</height>", "\t\t<depth>3</depth>",
             "\t</size>"]
    for obj in graph["objects"]:
        entity = by_object[obj["object_id"]]
        chains = [entity.chain_id] + [g.chain_id for g in groups if obj["object_id"] in g.members]
        box = entity.boxes[0]
        lines += ["\t<object>", *[f"\t\t<name>{c}</name>" for c in chains], "\t\t<bndbox>",
                  *[f"\t\t\t<{k}>{v}</{k}>" for k, v in zip(("xmin", "ymin", "xmax", "ymax"), box)],
                  "\t\t</bndbox>", "\t</object>"]
    if scene.boxes:
        lines += ["\t<object>", f"\t\t<name>{scene.chain_id}</name>", "\t\t<bndbox>",
                  *[f"\t\t\t<{k}>{v}</{k}>" for k, v in zip(("xmin", "ymin", "xmax", "ymax"), scene.boxes[0])],
                  "\t\t</bndbox>", "\t</object>"]
    else:
        lines += ["\t<object>", f"\t\t<name>{scene.chain_id}</name>", "\t\t<scene>1</scene>",
                  "\t\t<nobndbox>0</nobndbox>", "\t</object>"]
    return "\n".join(lines + ["</annotation>"]) + "\n"


def generate(cfg: GroundingWorldConfig, scene_graphs: Mapping, out_dir: str | Path) -> dict[str, int]:
    """Write the release's files for every image of `scene_graphs` into `out_dir` (replaced atomically); returns
    the number of images per split."""
    splits: dict[str, list[int]] = {"train": [], "val": [], "test": []}
    chain = 1
    with atomic_path(out_dir) as tmp:
        tmp.mkdir(parents=True)
        with zipfile.ZipFile(tmp / ARCHIVE, "w") as archive:
            for graph in scene_graphs["images"]:
                rng = item_rng(cfg.seed, "grounding", graph["image_id"])
                by_object, groups, scene = entities(rng, graph, chain)
                chain = scene.chain_id + 1
                lines = [sentence(rng, graph, by_object, groups, scene, k % 3 == 2)
                         for k in range(cfg.sentences_per_image)]
                _add(archive, f"Sentences/{graph['image_id']}.txt", "\n".join(lines) + "\n")
                _add(archive, f"Annotations/{graph['image_id']}.xml", _xml(graph, by_object, groups, scene))
                splits[graph["split"]].append(graph["image_id"])
        for split, ids in splits.items():
            write_text(tmp / f"{split}.txt", "".join(f"{i}\n" for i in ids))
    return {split: len(ids) for split, ids in splits.items()}


def _add(archive: zipfile.ZipFile, name: str, text: str) -> None:
    """One member, stored (not deflated: its bytes do not depend on the zlib at hand) with a fixed date and mode, so
    that the archive's bytes depend on the world's parameters only."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.external_attr = 0o644 << 16
    archive.writestr(info, text.encode("utf-8"))
