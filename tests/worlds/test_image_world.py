"""The synthetic image world: determinism, real formats, pixels that match the scene graph, captions
that bind attributes to the right objects and claim only true relations, atomic output."""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from crossmodal.config.data import SplitSizes, WorldConfig
from crossmodal.data.coco import read_coco_captions
from crossmodal.io import InputError
from crossmodal.worlds import image_world
from crossmodal.worlds.image_world import PREDICATES, TEXTURE_POSTMODIFIERS
from crossmodal.worlds.phrasing import plural

CFG = WorldConfig(seed=7, images=SplitSizes(train=20, val=5, test=5), image_size=64)
KARPATHY_IMAGE_KEYS = {"filepath", "sentids", "filename", "imgid", "split", "sentences", "cocoid"}
KARPATHY_SENTENCE_KEYS = {"tokens", "raw", "imgid", "sentid"}


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("w") / "image_world"
    summary = image_world.generate(CFG, out, progress=False)
    return out, summary


@pytest.fixture(scope="module")
def files(world):
    out, _ = world
    karpathy = json.loads((out / "dataset_coco.json").read_text())
    graphs = json.loads((out / "scene_graphs.json").read_text())
    return karpathy, graphs


def test_same_config_gives_identical_bytes_and_seed_changes_them(world, tmp_path):
    out, _ = world
    again = tmp_path / "again"
    image_world.generate(CFG, again, progress=False)
    reference = _hashes(out)
    assert len(reference) == 30 + 4  # images + dataset_coco + 2 annotation files + scene graphs
    assert _hashes(again) == reference
    other = tmp_path / "other"
    image_world.generate(WorldConfig(seed=8, images=CFG.images, image_size=64), other, progress=False)
    changed = _hashes(other)
    assert changed.keys() == reference.keys()
    assert sum(changed[k] != reference[k] for k in reference) == len(reference)


def test_karpathy_file_has_the_real_fields_and_counts(world, files):
    out, summary = world
    karpathy, _ = files
    assert karpathy["dataset"] == "synthetic_image_world"
    images = karpathy["images"]
    assert Counter(e["split"] for e in images) == {"train": 20, "val": 5, "test": 5}
    assert [e["split"] for e in images] == ["train"] * 20 + ["val"] * 5 + ["test"] * 5
    assert [e["cocoid"] for e in images] == list(range(1, 31))
    assert [e["imgid"] for e in images] == list(range(30))
    sentids = [s["sentid"] for e in images for s in e["sentences"]]
    assert sentids == list(range(150))
    for e in images:
        assert set(e) == KARPATHY_IMAGE_KEYS
        assert e["filepath"] == f"images/{e['split']}"
        assert e["filename"] == f"synth_{e['split']}_{e['cocoid']:06d}.png"
        assert (out / e["filepath"] / e["filename"]).is_file()
        assert len(e["sentences"]) == CFG.references_per_image == 5
        assert e["sentids"] == [s["sentid"] for s in e["sentences"]]
        assert len({tuple(s["tokens"]) for s in e["sentences"]}) == 5  # five different references
        for s in e["sentences"]:
            assert set(s) == KARPATHY_SENTENCE_KEYS and s["imgid"] == e["imgid"]
            assert all(t.isalpha() and t.islower() for t in s["tokens"])
            assert s["raw"] == s["tokens"][0].capitalize() + " " + " ".join(s["tokens"][1:]) + "."
            assert 3 <= len(s["tokens"]) <= image_world.MAX_CAPTION_WORDS
    assert summary["images"] == {"train": 20, "val": 5, "test": 5}
    assert summary["captions"] == 150
    assert summary["vocabulary_size"] == len({t for e in images for s in e["sentences"] for t in s["tokens"]})


def test_coco_annotation_files_load_and_agree_with_karpathy(world, files):
    from pycocotools.coco import COCO

    out, _ = world
    karpathy, _ = files
    for split in ("val", "test"):
        path = out / "annotations" / f"captions_{split}.json"
        expected = {e["cocoid"]: [s["raw"] for s in e["sentences"]] for e in karpathy["images"] if e["split"] == split}
        assert read_coco_captions(path) == expected
        coco = COCO(str(path))
        assert sorted(coco.getImgIds()) == sorted(expected)
        image_id = next(iter(expected))
        assert [a["caption"] for a in coco.imgToAnns[image_id]] == expected[image_id]
        assert coco.imgs[image_id]["file_name"] == f"synth_{split}_{image_id:06d}.png"
        assert (coco.imgs[image_id]["width"], coco.imgs[image_id]["height"]) == (64, 64)
        assert coco.dataset["type"] == "captions" and {"info", "licenses"} <= set(coco.dataset)


def test_scene_graph_matches_karpathy_and_config(files):
    karpathy, graphs = files
    assert graphs["attributes"] == {"shapes": list(CFG.shapes), "colors": list(CFG.colors),
                                    "sizes": list(CFG.sizes), "textures": list(CFG.textures)}
    assert graphs["predicates"] == list(PREDICATES)
    assert [g["image_id"] for g in graphs["images"]] == [e["cocoid"] for e in karpathy["images"]]
    for g, e in zip(graphs["images"], karpathy["images"]):
        assert g["split"] == e["split"] and g["file_name"] == f"{e['filepath']}/{e['filename']}"
        assert CFG.min_objects <= len(g["objects"]) <= CFG.max_objects
        assert [o["object_id"] for o in g["objects"]] == list(range(len(g["objects"])))


def test_boxes_are_tight_around_the_only_non_background_pixels(world, files):
    out, _ = world
    _, graphs = files
    for g in graphs["images"]:
        pixels = np.asarray(Image.open(out / g["file_name"]).convert("RGB")).astype(np.int16)
        assert pixels.shape == (g["height"], g["width"], 3)
        inside = np.zeros(pixels.shape[:2], dtype=bool)
        for o in g["objects"]:
            x1, y1, x2, y2 = (int(v) for v in o["box"])
            assert 0 <= x1 < x2 <= g["width"] and 0 <= y1 < y2 <= g["height"]
            inside[y1:y2, x1:x2] = True
        background = np.median(pixels[~inside], axis=0)
        assert np.abs(pixels[~inside] - background).max() <= 12  # only light noise outside the boxes
        foreground = np.abs(pixels - background).max(axis=-1) > 20
        for o in g["objects"]:
            x1, y1, x2, y2 = (int(v) for v in o["box"])
            patch = foreground[y1:y2, x1:x2]
            assert patch.mean() > 0.3
            # tight: every edge row and column of the box touches the shape
            assert patch[0].any() and patch[-1].any() and patch[:, 0].any() and patch[:, -1].any()


def test_sizes_and_textures_are_visible(world, files):
    out, _ = world
    _, graphs = files
    sides = {"small": [], "large": []}
    for g in graphs["images"]:
        pixels = np.asarray(Image.open(out / g["file_name"]).convert("RGB"))
        for o in g["objects"]:
            x1, y1, x2, y2 = (int(v) for v in o["box"])
            sides[o["size"]].append(x2 - x1)
            centre = pixels[y1 + (y2 - y1) // 3: y2 - (y2 - y1) // 3, x1 + (x2 - x1) // 3: x2 - (x2 - x1) // 3]
            colours = {tuple(c) for c in centre.reshape(-1, 3)}
            if o["shape"] in ("circle", "square") and o["texture"] == "plain":
                assert len(colours) == 1
            if o["shape"] in ("circle", "square") and o["texture"] != "plain":
                assert len(colours) == 2  # base colour and pattern tone
    assert sides["small"] and sides["large"]
    assert max(sides["small"]) * 1.4 < min(sides["large"])


def _geometric(boxes: list[list[float]], size: int) -> set[tuple[int, str, int]]:
    """The relation rules written out pair by pair, independent of the generator's vectorised version."""
    out = set()
    for i, (a1, b1, a2, b2) in enumerate(boxes):
        for j, (c1, d1, c2, d2) in enumerate(boxes):
            if i == j:
                continue
            cxi, cyi, cxj, cyj = (a1 + a2) / 2, (b1 + b2) / 2, (c1 + c2) / 2, (d1 + d2) / 2
            wsum, hsum = (a2 - a1) + (c2 - c1), (b2 - b1) + (d2 - d1)
            if cxj - cxi >= wsum / 4:
                out.add((i, "left of", j))
            if cxi - cxj >= wsum / 4:
                out.add((i, "right of", j))
            if cyj - cyi >= hsum / 4:
                out.add((i, "above", j))
            if cyi - cyj >= hsum / 4:
                out.add((i, "below", j))
            gap = max(c1 - a2, a1 - c2)
            if min(b2, d2) > max(b1, d1) and 0 <= gap <= 0.12 * size:
                out.add((i, "next to", j))
            if b2 == d1 and c1 <= cxi <= c2:
                out.add((i, "on", j))
    return out


def test_relations_follow_box_geometry(files):
    _, graphs = files
    seen = Counter()
    for g in graphs["images"]:
        boxes = [o["box"] for o in g["objects"]]
        rel = {(r["subject"], r["predicate"], r["object"]) for r in g["relations"]}
        assert rel == _geometric(boxes, g["width"])
        seen.update(p for _, p, _ in rel)
        for s, p, o in rel:  # "on" means resting: touching, and never overlapping
            if p == "on":
                assert boxes[s][3] == boxes[o][1]
    assert set(seen) == set(PREDICATES)


def _attribute_words(graphs: dict) -> dict[str, str]:
    kinds = {}
    for kind, key in (("shapes", "shape"), ("colors", "color"), ("sizes", "size"), ("textures", "texture")):
        kinds.update({w: key for w in graphs["attributes"][kind]})
    return kinds


def test_caption_noun_phrases_bind_attributes_to_one_object(files):
    """Every 'a <adjectives> <shape> [with stripes]' names attributes of one single object in the scene,
    and every '<number> [colour] <shapes>' counts objects of that shape correctly."""
    karpathy, graphs = files
    kinds = _attribute_words(graphs)
    post = {words: texture for texture, words in TEXTURE_POSTMODIFIERS.items()}
    numbers = {w: k for k, w in enumerate(image_world.NUMBER_WORDS)}
    plurals = {plural(s): s for s in graphs["attributes"]["shapes"]}
    checked = multi = 0
    for e, g in zip(karpathy["images"], graphs["images"]):
        objects = g["objects"]
        for s in e["sentences"]:
            tokens = s["tokens"]
            named = 0
            for k, word in enumerate(tokens):
                if kinds.get(word) == "shape":
                    wanted = {"shape": word}
                    j = k - 1
                    while j >= 0 and tokens[j] in kinds:
                        assert kinds[tokens[j]] not in wanted, tokens  # one colour, one size... per object
                        wanted[kinds[tokens[j]]] = tokens[j]
                        j -= 1
                    assert j >= 0 and tokens[j] in ("a", "an"), tokens
                    assert tokens[j] == ("an" if tokens[j + 1][0] in "aeiou" else "a")
                    if tuple(tokens[k + 1:k + 3]) in post:
                        wanted["texture"] = post[tuple(tokens[k + 1:k + 3])]
                    assert "color" in wanted, tokens
                    assert any(all(o[a] == v for a, v in wanted.items()) for o in objects), (tokens, objects)
                    named += 1
                    checked += 1
                    multi += len(wanted) >= 3
                elif word in plurals:
                    shape = plurals[word]
                    colour = tokens[k - 1] if kinds.get(tokens[k - 1]) == "color" else None
                    count = numbers[tokens[k - 2] if colour else tokens[k - 1]]
                    group = [o for o in objects if o["shape"] == shape]
                    assert count == len(group) >= 2, (tokens, objects)
                    assert colour is None or all(o["color"] == colour for o in group)
            assert named >= 1, tokens
            if tokens[0] in numbers and tokens[1] in ("shapes", "objects"):
                assert numbers[tokens[0]] == len(objects)
    assert checked > 200 and multi > 50  # binding of three or more attributes is exercised


def test_caption_claims_are_true_and_name_the_largest_pair():
    rng = np.random.default_rng(0)
    cfg = WorldConfig(image_size=96, min_objects=2, max_objects=4)
    claimed = Counter()
    for _ in range(200):
        scene = image_world.sample_scene(cfg, rng)
        largest = sorted(scene.objects, key=lambda o: (-o.area, o.object_id))[:2]
        for caption in image_world.describe(scene, rng, 5):
            for claim in caption.claims:
                assert claim in scene.relations
                claimed[claim[1]] += 1
            assert set(caption.mentioned) <= {o.object_id for o in scene.objects}
            if caption.claims:
                assert {caption.claims[0][0], caption.claims[0][2]} == {o.object_id for o in largest}
    assert set(claimed) == set(PREDICATES)


def test_single_object_scenes_still_get_five_references():
    rng = np.random.default_rng(1)
    cfg = WorldConfig(min_objects=1, max_objects=1)
    scene = image_world.sample_scene(cfg, rng)
    captions = image_world.describe(scene, rng, 5)
    assert len(captions) == 5 and all(c.mentioned == (0,) for c in captions)


def test_failure_midway_leaves_old_world_untouched(world, tmp_path, monkeypatch):
    out, _ = world
    target = tmp_path / "image_world"
    fresh = tmp_path / "fresh"
    real = image_world.render_scene
    calls = []

    def failing(scene, rng):
        calls.append(1)
        if len(calls) == 12:
            raise RuntimeError("disk full")
        return real(scene, rng)

    monkeypatch.setattr(image_world, "render_scene", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        image_world.generate(CFG, fresh, progress=False)
    assert not fresh.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary sibling left behind

    monkeypatch.setattr(image_world, "render_scene", real)
    small = WorldConfig(seed=1, images=SplitSizes(train=2, val=1, test=1), image_size=64)
    image_world.generate(small, target, progress=False)
    before = _hashes(target)
    calls.clear()
    monkeypatch.setattr(image_world, "render_scene", failing)
    with pytest.raises(RuntimeError):
        image_world.generate(CFG, target, progress=False)
    assert _hashes(target) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["image_world"]


def test_unknown_attribute_is_rejected_before_writing(tmp_path):
    with pytest.raises(InputError, match="unknown value 'blob'"):
        image_world.generate(WorldConfig(shapes=("circle", "blob")), tmp_path / "w", progress=False)
    assert not (tmp_path / "w").exists()


def test_three_size_classes_interpolate(tmp_path):
    cfg = WorldConfig(seed=2, images=SplitSizes(train=6, val=1, test=1), sizes=("small", "medium", "large"))
    nominal = image_world.size_pixels(cfg)
    assert nominal["small"] < nominal["medium"] < nominal["large"]
    assert nominal["medium"] == pytest.approx((nominal["small"] + nominal["large"]) / 2)
    image_world.generate(cfg, tmp_path / "w", progress=False)
    graphs = json.loads((tmp_path / "w" / "scene_graphs.json").read_text())
    assert graphs["attributes"]["sizes"] == ["small", "medium", "large"]


def test_crowded_scenes_keep_min_objects_or_fail_clearly():
    rng = np.random.default_rng(0)
    crowded = WorldConfig(image_size=48, min_objects=5, max_objects=6, sizes=("large",))
    for _ in range(20):
        assert len(image_world.sample_scene(crowded, rng).objects) >= 5
    with pytest.raises(InputError, match="cannot fit 30 objects"):
        image_world.sample_scene(WorldConfig(image_size=32, min_objects=30, max_objects=30), rng)
