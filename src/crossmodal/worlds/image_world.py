"""The synthetic image world: rendered scenes, their scene graphs and five COCO-style captions each.

It stands in for COCO (see GUIDE section 4). Every image holds `min_objects..max_objects` objects with a
shape, colour, size and texture; pairs of objects are related by their geometry (left of, right of,
above, below, next to, on). Captions come from a grammar of several phrasings that always name the two
largest objects *with their attributes bound to them* and a relation between them, sometimes a third
object or the counts, and never the remaining distractors, so a captioner must attend to several
regions together and keep colour, shape, size and texture of one object apart from another's.
Objects often share a colour or a shape with another object, so binding matters.

Outputs are the real formats: a Karpathy split file (`dataset_coco.json`), COCO caption annotation files
for val and test, PNG images, and `scene_graphs.json` (the ground truth later stages derive regions,
attributes, VQA and grounding data from). Generation is seeded per image (seed, split, index), hence
deterministic and independent of the other splits' sizes for the images' content.

Relation rules (pixel boxes [x1, y1, x2, y2], centres cx, cy, widths w, heights h), for subject i and
object j:
  left of   cx_j - cx_i >= (w_i + w_j) / 4          right of  the mirror image
  above     cy_j - cy_i >= (h_i + h_j) / 4          below     the mirror image
  next to   vertical extents overlap and 0 <= horizontal gap <= NEXT_TO_GAP * image size
  on        y2_i == y1_j (touching) and x1_j <= cx_i <= x2_j
"""
from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image, ImageDraw
from tqdm import tqdm

from ..config.data import WorldConfig
from ..io import InputError, atomic_path
from .phrasing import article, plural

SPLITS = ("train", "val", "test")
PREDICATES = ("left of", "right of", "above", "below", "next to", "on")
DATASET_NAME = "synthetic_image_world"

COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (50, 90, 230),
    "yellow": (235, 215, 40),
    "purple": (150, 70, 200),
    "orange": (245, 140, 30),
    "white": (245, 245, 245),
    "gray": (135, 135, 135),
    "brown": (150, 95, 45),
    "pink": (245, 140, 190),
    "cyan": (40, 210, 220),
}
TEXTURES = ("plain", "striped", "dotted", "checkered")
# post-modifier alternative to the texture adjective ("a red circle with stripes")
TEXTURE_POSTMODIFIERS = {"striped": ("with", "stripes"), "dotted": ("with", "dots"), "checkered": ("with", "checks")}

SIZE_FRACTIONS = (0.14, 0.26)  # side of the smallest / largest size class, as a fraction of the image side
SIZE_JITTER = 0.04
NEXT_TO_GAP = 0.12
MIN_GAP = 2  # pixels between boxes of objects not resting on each other
ON_PROBABILITY = 0.3  # chance that a new object is placed on top of an existing one
SHARE_COLOR, SHARE_SHAPE = 0.4, 0.25  # chance that a new object copies an earlier object's colour / shape
MAX_CAPTION_WORDS = 16
MAX_ATTEMPTS_PER_REFERENCE = 40
MAX_SCENE_ATTEMPTS = 50
BACKGROUND = (38, 40, 46)

NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                "eleven", "twelve")

REL_PHRASES: dict[str, tuple[tuple[str, ...], ...]] = {
    "left of": (("to", "the", "left", "of"), ("left", "of"), ("on", "the", "left", "of")),
    "right of": (("to", "the", "right", "of"), ("right", "of"), ("on", "the", "right", "of")),
    "above": (("above",), ("over",)),
    "below": (("below",), ("under",), ("beneath",)),
    "next to": (("next", "to"), ("beside",), ("near",)),
    "on": (("on", "top", "of"), ("on",), ("resting", "on"), ("sitting", "on")),
}
# "B with A <phrase>", where A <predicate> B
WITH_IT: dict[str, tuple[str, ...]] = {
    "left of": ("to", "its", "left"), "right of": ("to", "its", "right"), "above": ("above", "it"),
    "below": ("below", "it"), "next to": ("next", "to", "it"), "on": ("on", "top", "of", "it"),
}


def _regular(k: int, start: float = -math.pi / 2) -> list[tuple[float, float]]:
    t = start + np.arange(k) * 2 * math.pi / k
    return list(zip(np.cos(t), np.sin(t)))


def _star() -> list[tuple[float, float]]:
    t = -math.pi / 2 + np.arange(10) * math.pi / 5
    r = np.where(np.arange(10) % 2 == 0, 1.0, 0.45)
    return list(zip(r * np.cos(t), r * np.sin(t)))


def _unit(points: list[tuple[float, float]]) -> np.ndarray:
    """Scale a polygon so that it touches all four sides of the unit square (tight boxes)."""
    p = np.asarray(points, dtype=np.float64)
    p = p - p.min(axis=0)
    return p / p.max(axis=0)


_THIRD = (1 / 3, 2 / 3)
SHAPES: dict[str, np.ndarray] = {
    "circle": _unit(_regular(32)),
    "square": _unit([(0, 0), (1, 0), (1, 1), (0, 1)]),
    "triangle": _unit([(0.5, 0), (1, 1), (0, 1)]),
    "diamond": _unit([(0.5, 0), (1, 0.5), (0.5, 1), (0, 0.5)]),
    "cross": _unit([(_THIRD[0], 0), (_THIRD[1], 0), (_THIRD[1], _THIRD[0]), (1, _THIRD[0]), (1, _THIRD[1]),
                    (_THIRD[1], _THIRD[1]), (_THIRD[1], 1), (_THIRD[0], 1), (_THIRD[0], _THIRD[1]),
                    (0, _THIRD[1]), (0, _THIRD[0]), (_THIRD[0], _THIRD[0])]),
    "star": _unit(_star()),
    "pentagon": _unit(_regular(5)),
    "hexagon": _unit(_regular(6, 0.0)),
}


# --------------------------------------------------------------------------------------------------
# scenes


@dataclass(frozen=True)
class SceneObject:
    object_id: int
    shape: str
    color: str
    size: str
    texture: str
    box: tuple[float, float, float, float]

    @property
    def area(self) -> float:
        return (self.box[2] - self.box[0]) * (self.box[3] - self.box[1])

    def to_json(self) -> dict:
        return {"object_id": self.object_id, "shape": self.shape, "color": self.color, "size": self.size,
                "texture": self.texture, "box": [float(v) for v in self.box]}


@dataclass(frozen=True)
class Scene:
    image_size: int
    objects: tuple[SceneObject, ...]
    relations: tuple[tuple[int, str, int], ...]

    def holds(self, subject: int, predicate: str, obj: int) -> bool:
        return (subject, predicate, obj) in self.relations


def validate(cfg: WorldConfig) -> None:
    """Reject attribute names the renderer cannot draw, before anything is written."""
    for key, names, known in (("shapes", cfg.shapes, SHAPES), ("colors", cfg.colors, COLORS),
                              ("textures", cfg.textures, TEXTURES)):
        if not names:
            raise InputError(f"params.yaml: 'world.{key}' must not be empty")
        for name in names:
            if name not in known:
                raise InputError(f"params.yaml: 'world.{key}' has unknown value {name!r} "
                                 f"(known: {', '.join(known)})")
        if len(set(names)) != len(names):
            raise InputError(f"params.yaml: 'world.{key}' has duplicate values")
    if not cfg.sizes or len(set(cfg.sizes)) != len(cfg.sizes):
        raise InputError("params.yaml: 'world.sizes' must be a non-empty list of distinct names")
    bad = [s for s in cfg.sizes if not s.isalpha() or not s.islower()]
    if bad:
        raise InputError(f"params.yaml: 'world.sizes' names must be lower-case words, got {bad[0]!r}")


def size_pixels(cfg: WorldConfig) -> dict[str, float]:
    """Nominal side (pixels) of each size class, interpolated between the smallest and largest fraction."""
    lo, hi = SIZE_FRACTIONS
    fractions = np.linspace(lo, hi, len(cfg.sizes)) if len(cfg.sizes) > 1 else np.array([(lo + hi) / 2])
    return {name: float(f * cfg.image_size) for name, f in zip(cfg.sizes, fractions)}


def _sample_attributes(cfg: WorldConfig, rng: np.random.Generator, n: int) -> list[dict]:
    """Draw attributes; later objects often copy an earlier one's colour or shape (binding distractors)."""
    out: list[dict] = []
    for k in range(n):
        a = {"shape": cfg.shapes[rng.integers(len(cfg.shapes))], "color": cfg.colors[rng.integers(len(cfg.colors))],
             "size": cfg.sizes[rng.integers(len(cfg.sizes))], "texture": cfg.textures[rng.integers(len(cfg.textures))]}
        u = rng.random()
        if k > 0 and u < SHARE_COLOR + SHARE_SHAPE:
            src = out[rng.integers(k)]
            key = "color" if u < SHARE_COLOR else "shape"
            a[key] = src[key]
        out.append(a)
    return out


def _free(box: np.ndarray, boxes: np.ndarray, gap: float) -> np.ndarray:
    """For candidate boxes [m, 4], whether each keeps `gap` pixels from every box in `boxes` [k, 4]."""
    if len(boxes) == 0:
        return np.ones(len(box), dtype=bool)
    b, o = box[:, None, :], boxes[None, :, :]
    clash = ((b[..., 0] < o[..., 2] + gap) & (o[..., 0] < b[..., 2] + gap)
             & (b[..., 1] < o[..., 3] + gap) & (o[..., 1] < b[..., 3] + gap))
    return ~clash.any(axis=1)


def _place(rng: np.random.Generator, side: int, boxes: list[tuple], supported: set[int], size: int):
    """Place a square box of `side` pixels: sometimes resting on an earlier box, else anywhere free."""
    placed = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if len(boxes) and rng.random() < ON_PROBABILITY:
        j = int(rng.integers(len(boxes)))
        bx1, by1, bx2, _ = boxes[j]
        y = by1 - side
        x = int(np.clip(round((bx1 + bx2 - side) / 2 + rng.uniform(-0.25, 0.25) * (bx2 - bx1)), 1, size - 1 - side))
        cand = np.array([[x, y, x + side, y + side]], dtype=np.float64)
        others = np.delete(placed, j, axis=0)
        if j not in supported and y >= 1 and bx1 <= x + side / 2 <= bx2 and _free(cand, others, MIN_GAP)[0]:
            return cand[0], j
    xy = rng.integers(1, size - side, size=(64, 2))
    cand = np.concatenate([xy, xy + side], axis=1).astype(np.float64)
    ok = np.flatnonzero(_free(cand, placed, MIN_GAP))
    return (cand[ok[0]], None) if len(ok) else (None, None)


def relations(boxes: np.ndarray, image_size: int) -> list[tuple[int, str, int]]:
    """All (subject, predicate, object) triples that hold by the module's geometric rules."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    x1, y1, x2, y2 = boxes.T
    cx, cy, w, h = (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1
    col, row = (slice(None), None), (None, slice(None))  # [i, j]: i subject (rows), j object (columns)
    dx, dy = cx[row] - cx[col], cy[row] - cy[col]
    left = dx >= (w[col] + w[row]) / 4
    above = dy >= (h[col] + h[row]) / 4
    v_overlap = np.minimum(y2[col], y2[row]) - np.maximum(y1[col], y1[row]) > 0
    h_gap = np.maximum(x1[row] - x2[col], x1[col] - x2[row])
    next_to = v_overlap & (h_gap >= 0) & (h_gap <= NEXT_TO_GAP * image_size)
    on = (np.abs(y2[col] - y1[row]) < 1e-6) & (x1[row] <= cx[col]) & (cx[col] <= x2[row])
    table = np.stack([left, left.T, above, above.T, next_to, on], axis=-1)  # [i, j, predicate], PREDICATES order
    table &= ~np.eye(len(boxes), dtype=bool)[..., None]
    return [(int(i), PREDICATES[p], int(j)) for i, j, p in np.argwhere(table)]


def sample_scene(cfg: WorldConfig, rng: np.random.Generator) -> Scene:
    """Draw objects, place them without overlap (some resting on others) and derive the relations."""
    nominal = size_pixels(cfg)
    for _ in range(MAX_SCENE_ATTEMPTS):
        n = int(rng.integers(cfg.min_objects, cfg.max_objects + 1))
        boxes: list[tuple] = []
        attrs: list[dict] = []
        supported: set[int] = set()
        for a in _sample_attributes(cfg, rng, n):
            side = max(6, int(round(nominal[a["size"]] * rng.uniform(1 - SIZE_JITTER, 1 + SIZE_JITTER))))
            box, support = _place(rng, side, boxes, supported, cfg.image_size)
            if box is None:
                continue  # no room left: fewer objects than drawn
            if support is not None:
                supported.add(support)
            boxes.append(tuple(float(v) for v in box))
            attrs.append(a)
        if len(boxes) >= cfg.min_objects:
            objects = tuple(SceneObject(object_id=k, box=b, **a) for k, (a, b) in enumerate(zip(attrs, boxes)))
            return Scene(cfg.image_size, objects, tuple(relations(np.asarray(boxes), cfg.image_size)))
    raise InputError(f"params.yaml: 'world': cannot fit {cfg.min_objects} objects into "
                     f"{cfg.image_size}x{cfg.image_size} pixels; lower world.min_objects or raise world.image_size")


# --------------------------------------------------------------------------------------------------
# rendering


def _tone(rgb: tuple[int, int, int]) -> np.ndarray:
    """The pattern colour: a darker tone of bright colours, a lighter tone of dark ones."""
    c = np.asarray(rgb, dtype=np.float64)
    luminance = (0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2]) / 255
    return np.round(c * 0.45 if luminance > 0.5 else c + (255 - c) * 0.55).astype(np.uint8)


def _pattern(texture: str, side: int, image_size: int) -> np.ndarray:
    """Boolean [side, side] map of where the pattern tone replaces the base colour."""
    p = max(3, round(image_size / 24))
    v, u = np.mgrid[0:side, 0:side]
    if texture == "striped":
        return (u + v) % p < p // 2
    if texture == "dotted":
        q = p + 1
        return ((u - 1) % q < 2) & ((v - 1) % q < 2)
    if texture == "checkered":
        c = max(2, p - 1)
        return (u // c + v // c) % 2 == 0
    return np.zeros((side, side), dtype=bool)


def _mask(shape: str, side: int) -> np.ndarray:
    img = Image.new("L", (side, side), 0)
    pts = SHAPES[shape] * (side - 1)
    ImageDraw.Draw(img).polygon([(float(x), float(y)) for x, y in pts], fill=255)
    return np.asarray(img) > 0


def render_scene(scene: Scene, rng: np.random.Generator) -> np.ndarray:
    """RGB uint8 [H, W, 3]: a lightly noisy dark background with each object's textured shape."""
    s = scene.image_size
    base = np.asarray(BACKGROUND, dtype=np.int16) + rng.integers(-6, 7, size=3)
    img = base + rng.integers(-5, 6, size=(s, s, 3), dtype=np.int16)
    img = np.clip(img, 0, 255).astype(np.uint8)
    for o in scene.objects:
        x1, y1, x2, y2 = (int(v) for v in o.box)
        side = x2 - x1
        mask = _mask(o.shape, side)
        color = np.asarray(COLORS[o.color], dtype=np.uint8)
        patch = np.where(_pattern(o.texture, side, s)[..., None], _tone(COLORS[o.color]), color)
        region = img[y1:y2, x1:x2]
        region[mask] = patch[mask]
    return img


# --------------------------------------------------------------------------------------------------
# captions


@dataclass(frozen=True)
class Caption:
    """One reference and what it asserts: the objects it names and the relations it claims."""

    tokens: tuple[str, ...]
    mentioned: tuple[int, ...]
    claims: tuple[tuple[int, str, int], ...]

    @property
    def raw(self) -> str:
        text = " ".join(self.tokens)
        return text[:1].upper() + text[1:] + "."


def _number(n: int) -> str:
    return NUMBER_WORDS[n] if n < len(NUMBER_WORDS) else str(n)


class _Grammar:
    """Builds references for one scene; `detail` in [0, 1] scales how many optional attributes are named."""

    def __init__(self, scene: Scene, rng: np.random.Generator):
        self.scene, self.rng = scene, rng
        order = sorted(scene.objects, key=lambda o: (-o.area, o.object_id))
        self.salient = [o.object_id for o in order]
        self.detail = 1.0

    def noun_phrase(self, k: int) -> list[str]:
        """'a [size] [texture] colour [texture] shape [with stripes]': colour and shape always, the rest at times."""
        o, r = self.scene.objects[k], self.rng
        words = [o.size] if r.random() < 0.5 * self.detail else []
        tex_p = (0.2 if o.texture == "plain" else 0.55) * self.detail
        post: tuple[str, ...] = ()
        middle = [o.color]
        if r.random() < tex_p:
            if o.texture in TEXTURE_POSTMODIFIERS and r.random() < 0.3:
                post = TEXTURE_POSTMODIFIERS[o.texture]
            else:
                middle = [o.texture, o.color] if r.random() < 0.6 else [o.color, o.texture]
        words += middle + [o.shape] + list(post)
        return [article(words[0])] + words

    def predicate(self, a: int, b: int) -> str | None:
        """A predicate that holds for (a, b), preferring the specific ones the way people do."""
        held = [p for p in PREDICATES if self.scene.holds(a, p, b)]
        if not held:
            return None
        r = self.rng
        if "on" in held and r.random() < 0.7:
            return "on"
        if "next to" in held and r.random() < 0.5:
            return "next to"
        plain = [p for p in held if p not in ("on", "next to")] or held
        return plain[int(r.integers(len(plain)))]

    def rel(self, p: str) -> list[str]:
        options = REL_PHRASES[p]
        return list(options[int(self.rng.integers(len(options)))])

    def pair(self) -> tuple[int, int, str | None]:
        a, b = self.salient[0], self.salient[1]
        if self.rng.random() < 0.5:
            a, b = b, a
        return a, b, self.predicate(a, b)

    def count_noun(self) -> list[str]:
        return [_number(len(self.scene.objects)), ("shapes", "objects")[int(self.rng.integers(2))]]

    # each template returns (tokens, mentioned object ids, claimed relations) or None when it does not apply
    def t_relation(self, lead: tuple[str, ...] = ()):
        a, b, p = self.pair()
        if p is None:
            return None
        return list(lead) + self.noun_phrase(a) + self.rel(p) + self.noun_phrase(b), (a, b), ((a, p, b),)

    def t_there_is(self):
        return self.t_relation(("there", "is"))

    def t_is(self):
        a, b, p = self.pair()
        if p is None:
            return None
        return self.noun_phrase(a) + ["is"] + self.rel(p) + self.noun_phrase(b), (a, b), ((a, p, b),)

    def t_with_it(self):
        a, b, p = self.pair()
        if p is None:
            return None
        return self.noun_phrase(b) + ["with"] + self.noun_phrase(a) + list(WITH_IT[p]), (a, b), ((a, p, b),)

    def t_count_including(self):
        a, b = self.salient[0], self.salient[1]
        if self.rng.random() < 0.5:
            a, b = b, a
        return self.count_noun() + ["including"] + self.noun_phrase(a) + ["and"] + self.noun_phrase(b), (a, b), ()

    def t_count_with(self):
        found = self.t_relation()
        if found is None:
            return None
        tokens, mentioned, claims = found
        return self.count_noun() + ["with"] + tokens, mentioned, claims

    def t_third(self):
        if len(self.salient) < 3:
            return None
        found = self.t_relation()
        if found is None:
            return None
        tokens, mentioned, claims = found
        c = self.salient[2]
        return tokens + ["and"] + self.noun_phrase(c), mentioned + (c,), claims

    def t_side_by_side(self):
        a, b = self.salient[0], self.salient[1]
        if not self.scene.holds(a, "next to", b):
            return None
        if self.rng.random() < 0.5:
            a, b = b, a
        tail = (["side", "by", "side"], ["next", "to", "each", "other"])[int(self.rng.integers(2))]
        return self.noun_phrase(a) + ["and"] + self.noun_phrase(b) + tail, (a, b), ((a, "next to", b),)

    def t_shape_counts(self):
        """Objects grouped by shape: 'two squares and a red circle' (all objects, in salience order).

        Applies only when some object is described individually."""
        groups: dict[str, list[int]] = {}
        for k in self.salient:
            groups.setdefault(self.scene.objects[k].shape, []).append(k)
        parts: list[list[str]] = []
        mentioned: list[int] = []
        for shape, ids in groups.items():
            if len(ids) == 1:
                parts.append(self.noun_phrase(ids[0]))
                mentioned.append(ids[0])
                continue
            colors = {self.scene.objects[k].color for k in ids}
            color = [colors.pop()] if len(colors) == 1 and self.rng.random() < 0.7 else []
            parts.append([_number(len(ids))] + color + [plural(shape)])
        if not mentioned:
            return None  # 'two squares' alone says too little; other templates describe such scenes
        tokens = parts[0]
        for part in parts[1:]:
            tokens = tokens + ["and"] + part
        return tokens, tuple(mentioned), ()

    def t_single(self):
        k = self.salient[0]
        lead = ((), ("there", "is"), ("a", "picture", "of"), ("only",))[int(self.rng.integers(4))]
        return list(lead) + self.noun_phrase(k), (k,), ()

    def templates(self) -> list[Callable]:
        if len(self.salient) == 1:
            return [self.t_single]
        return [self.t_relation, self.t_there_is, self.t_is, self.t_with_it, self.t_count_including,
                self.t_count_with, self.t_third, self.t_side_by_side, self.t_shape_counts]


def describe(scene: Scene, rng: np.random.Generator, k: int) -> list[Caption]:
    """`k` distinct references of one scene, each from a different template where enough apply."""
    g = _Grammar(scene, rng)
    templates = g.templates()
    order = [templates[i] for i in rng.permutation(len(templates))]
    captions: list[Caption] = []
    seen: set[tuple[str, ...]] = set()
    for attempt in range(MAX_ATTEMPTS_PER_REFERENCE * k):
        if len(captions) == k:
            break
        g.detail = 1.0 if attempt < 4 * len(order) else 0.3  # name fewer attributes when long or repetitive
        found = order[attempt % len(order)]()
        if found is None or len(found[0]) > MAX_CAPTION_WORDS or tuple(found[0]) in seen:
            continue
        tokens, mentioned, claims = found
        seen.add(tuple(tokens))
        captions.append(Caption(tuple(tokens), tuple(mentioned), tuple(claims)))
    if not captions:
        raise RuntimeError("caption grammar produced no reference (a bug: some template always applies)")
    # a scene with too few distinct descriptions (one small object) repeats its references, as COCO sometimes does
    return [captions[i % len(captions)] for i in range(k)]


# --------------------------------------------------------------------------------------------------
# dataset files


def _image_rng(seed: int, split: str, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, SPLITS.index(split), index])


def _coco_file(split: str, entries: list[dict], size: int) -> dict:
    images = [{"license": 1, "file_name": e["filename"], "height": size, "width": size,
               "date_captured": "2000-01-01 00:00:00", "id": e["cocoid"]} for e in entries]
    annotations = [{"image_id": e["cocoid"], "id": s["sentid"], "caption": s["raw"]}
                   for e in entries for s in e["sentences"]]
    return {
        "info": {"description": f"Synthetic image world captions ({split})", "url": "", "version": "1.0",
                 "year": 2000, "contributor": "crossmodal-repro", "date_created": "2000/01/01"},
        "licenses": [{"url": "", "id": 1, "name": "Generated data"}],
        "images": images, "annotations": annotations, "type": "captions",
    }


def _dump(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, separators=(",", ":")) + "\n")


def generate(cfg: WorldConfig, out_dir: Path, progress: bool = True) -> dict:
    """Render the world into `out_dir` (replaced atomically) and return a summary of what was written."""
    validate(cfg)
    out_dir = Path(out_dir)
    counts = {split: getattr(cfg.images, split) for split in SPLITS}
    karpathy: list[dict] = []
    graphs: list[dict] = []
    image_id, sentid = 1, 0
    with atomic_path(out_dir) as tmp, tqdm(total=sum(counts.values()), desc="image world",
                                           disable=not progress, unit="img") as bar:
        for split in SPLITS:
            (tmp / "images" / split).mkdir(parents=True)
            for index in range(counts[split]):
                rng = _image_rng(cfg.seed, split, index)
                scene = sample_scene(cfg, rng)
                pixels = render_scene(scene, rng)
                captions = describe(scene, rng, cfg.references_per_image)
                name = f"synth_{split}_{image_id:06d}.png"
                Image.fromarray(pixels).save(tmp / "images" / split / name, compress_level=1)
                sentences = [{"tokens": list(c.tokens), "raw": c.raw, "imgid": len(karpathy), "sentid": sentid + i}
                             for i, c in enumerate(captions)]
                karpathy.append({"filepath": f"images/{split}", "sentids": [s["sentid"] for s in sentences],
                                 "filename": name, "imgid": len(karpathy), "split": split,
                                 "sentences": sentences, "cocoid": image_id})
                graphs.append({"image_id": image_id, "split": split, "file_name": f"images/{split}/{name}",
                               "width": cfg.image_size, "height": cfg.image_size,
                               "objects": [o.to_json() for o in scene.objects],
                               "relations": [{"subject": s, "predicate": p, "object": o}
                                             for s, p, o in scene.relations]})
                image_id += 1
                sentid += len(sentences)
                bar.update(1)
        _dump(tmp / "dataset_coco.json", {"images": karpathy, "dataset": DATASET_NAME})
        (tmp / "annotations").mkdir()
        for split in ("val", "test"):
            entries = [e for e in karpathy if e["split"] == split]
            _dump(tmp / "annotations" / f"captions_{split}.json", _coco_file(split, entries, cfg.image_size))
        _dump(tmp / "scene_graphs.json", {
            "attributes": {"shapes": list(cfg.shapes), "colors": list(cfg.colors), "sizes": list(cfg.sizes),
                           "textures": list(cfg.textures)},
            "predicates": list(PREDICATES), "images": graphs})
    return summarize(karpathy, graphs)


def summarize(karpathy: list[dict], graphs: list[dict]) -> dict:
    """Counts and caption statistics of a generated world (also logged by the stage)."""
    lengths = [len(s["tokens"]) for e in karpathy for s in e["sentences"]]
    vocab = Counter(t for e in karpathy for s in e["sentences"] for t in s["tokens"])
    predicates = Counter(r["predicate"] for g in graphs for r in g["relations"])
    n_objects = [len(g["objects"]) for g in graphs]
    return {
        "images": dict(Counter(e["split"] for e in karpathy)),
        "captions": len(lengths),
        "vocabulary_size": len(vocab),
        "mean_caption_length": float(np.mean(lengths)) if lengths else 0.0,
        "max_caption_length": max(lengths, default=0),
        "mean_objects": float(np.mean(n_objects)) if n_objects else 0.0,
        "relations": {p: predicates.get(p, 0) for p in PREDICATES},
    }


def fingerprint(out_dir: Path) -> str:
    """SHA-256 over every file's relative path and bytes: equal for byte-identical worlds."""
    h = hashlib.sha256()
    for path in sorted(p for p in Path(out_dir).rglob("*") if p.is_file()):
        h.update(str(path.relative_to(out_dir)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()
