"""The world folders' manifests (pipeline/manifests.py): what a reading stage checks before it reads a whole world."""
from __future__ import annotations

import hashlib
import json

import pytest

from crossmodal.io import InputError
from crossmodal.pipeline import manifests


@pytest.fixture
def folder(tmp_path):
    world = tmp_path / "raw" / "world"
    (world / "images" / "train").mkdir(parents=True)
    (world / "images" / "train" / "1.png").write_bytes(b"\x89PNG one")
    (world / "dataset.json").write_text('{"images": []}')
    return world


def test_the_manifest_lists_each_file_with_its_md5_beside_the_folder(folder):
    manifests.write(folder)
    path = folder.parent / "world.manifest.json"
    assert manifests.path_of(folder) == path
    assert json.loads(path.read_text()) == {"folder": "world", "files": {
        "dataset.json": hashlib.md5(b'{"images": []}').hexdigest(),
        "images/train/1.png": hashlib.md5(b"\x89PNG one").hexdigest()}}
    manifests.check(folder)  # as written: passes


@pytest.mark.parametrize("change", ["edit", "add", "remove"])
def test_a_folder_changed_after_its_manifest_is_refused_with_the_files_named(folder, change):
    manifests.write(folder)
    image = folder / "images" / "train" / "1.png"
    if change == "edit":
        image.write_bytes(b"\x89PNG two")
    elif change == "add":
        (folder / "images" / "train" / "2.png").write_bytes(b"\x89PNG one")
    else:
        image.unlink()
    name = "images/train/2.png" if change == "add" else "images/train/1.png"
    with pytest.raises(InputError, match=f"differs from its manifest .* in 1 file\\(s\\), first {name}:"):
        manifests.check(folder)


def test_a_missing_manifest_is_refused(folder):
    with pytest.raises(InputError, match="^missing file: .*world.manifest.json"):
        manifests.check(folder)


@pytest.mark.parametrize("text", ["[]", '{"folder": "world"}', "{not json"])
def test_a_manifest_that_is_not_one_is_refused_in_one_line(folder, text):
    manifests.path_of(folder).write_text(text)
    with pytest.raises(InputError, match="world.manifest.json: not") as refused:
        manifests.check(folder)
    assert "\n" not in str(refused.value)
