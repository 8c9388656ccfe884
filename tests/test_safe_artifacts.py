"""Safe artifacts: nothing in a model file, checkpoint or backbone file runs when the pipeline reads it back.

A planted pickle whose `__reduce__` would run `touch <marker>` is put where each reader looks (a model file read
to continue a system and by an ensemble, the training checkpoint, the backbone); every reader refuses it with one
line naming the file and the DVC stage that makes it, and the marker never appears. One module-scoped tiny world
(synthesized and preprocessed by the CLI, random region features) serves the readers that need real data.

Other input that may come from elsewhere: a downloaded archive that would fill the disk or is corrupt, a feature
file whose datasets live in other files of the machine, an image beyond PIL's pixel limit: one line each.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import os
import pickle
import random
import shutil
import tarfile
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import yaml
from cli_process import crossmodal

from crossmodal import paths
from crossmodal.config.loader import load
from crossmodal.data.karpathy import read_karpathy
from crossmodal.data.regions import write_region_file
from crossmodal.features.backbone import load_backbone
from crossmodal.io import InputError, RefusedFile, load_torch
from crossmodal.models.registry import read_model_file
from crossmodal.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
TINY = {"model_args": {"embed_dim": 8, "hidden_dim": 8, "att_hidden_dim": 8},
        "train": {"max_epochs": 1, "batch_size": 10, "lr": 0.01}}
TINY_STAGE = "pipelines/baselines/dvc.yaml:tiny"


class Payload:
    """Unpickled, it runs `touch <marker>`: what a hostile file on a DVC remote could hold."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def plant(path: Path, marker: Path, how: str = "torch") -> Path:
    """A hostile file at `path`: the payload in a model-file-shaped dict, saved by torch.save or plain pickle."""
    path.parent.mkdir(parents=True, exist_ok=True)
    content = {"state_dict": {}, "config": Payload(marker)}
    if how == "torch":
        torch.save(content, path)
    else:
        path.write_bytes(pickle.dumps(content, protocol=2))  # torch's own legacy (non-zip) format is protocol 2
    return path


def assert_refused(err: pytest.ExceptionInfo, path: Path, stage: str, marker: Path) -> None:
    message = str(err.value)
    assert isinstance(err.value, RefusedFile) and "\n" not in message, message
    assert message.startswith(f"{path}: refused") and f"(made by `dvc repro {stage}`)" in message, message
    assert "posix.system" in message or "os.system" in message, message
    assert not marker.exists()


@pytest.mark.parametrize("how", ["torch", "pickle"])
def test_the_planted_payload_is_live_and_load_torch_refuses_it(tmp_path, how):
    marker = tmp_path / "pwned"
    path = plant(tmp_path / "model.pt", marker, how)
    with pytest.raises(RefusedFile) as err:
        load_torch(path, "some_stage", "model file")
    assert_refused(err, path, "some_stage", marker)
    with contextlib.suppress(RuntimeError):  # a bare pickle fails torch's magic-number check, after running
        torch.load(path, weights_only=False)  # the unsafe load this module guards against really runs it
    assert marker.exists()


def test_an_unreadable_file_is_an_input_error_but_not_a_refusal(tmp_path):
    path = tmp_path / "model.pt"
    torch.save({"state_dict": {"w": torch.ones(3)}}, path)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(InputError) as err:
        load_torch(path, "some_stage", "model file")
    assert not isinstance(err.value, RefusedFile)
    assert str(err.value).startswith(f"{path}: not a readable model file (") and "some_stage" in str(err.value)
    with pytest.raises(InputError, match="missing file: .* \\(run `dvc repro some_stage` first\\)"):
        load_torch(tmp_path / "absent.pt", "some_stage", "model file")


# ---- the readers, on a tiny world (made by the CLI's processes: the tests that read it are marked slow)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A tiny world declaring `tiny` (Up-Down), `tiny_scst` continuing it, three reseeded copies and an ensemble."""
    repo = tmp_path_factory.mktemp("safe")
    shutil.copy(ROOT / "dvc.yaml", repo / "dvc.yaml")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    base, scst = params["baselines"]["systems"]["updown"], params["baselines"]["systems"]["updown_scst"]
    params["world"]["images"] = {"train": 20, "val": 5, "test": 5}
    params["world"]["image_size"] = 48
    params["runtime"]["threads"] = 1
    for paper in ("aoanet", "xlan", "eta"):
        params.pop(paper)
    seeds = [f"tiny_seed{k}" for k in (1, 2, 3)]
    params["baselines"] = {
        "systems": {"tiny": {**base, **TINY}, **{name: {"of": "tiny", "train": {"seed": k}}
                                                 for k, name in enumerate(seeds, 1)},
                    "tiny_scst": {**scst, "init": "tiny", "train": {"max_epochs": 1, "batch_size": 10}}},
        "ensembles": {"tiny_ensemble": {"members": ["tiny", *seeds]}}}
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    crossmodal(repo, "synthesize")
    crossmodal(repo, "prepro-captions")
    ids = [img.image_id for img in read_karpathy(repo / paths.DATASET_JSON)]
    rng = np.random.default_rng(0)
    counts = rng.integers(2, 5, len(ids))
    write_region_file(repo / paths.REGIONS, ids, [np.tile([0, 0, 8, 8], (n, 1)) for n in counts],
                      [rng.standard_normal((n, 12)) for n in counts], [(48, 48)] * len(ids), "random (test)")
    return repo


@pytest.fixture
def cfg(repo):
    return load(repo / "params.yaml")


@pytest.fixture
def hostile_model(repo, tmp_path):
    """data/models/tiny/model.pt replaced by a hostile file (restored afterwards); yields (path, marker)."""
    path, marker = repo / paths.MODELS / "tiny" / "model.pt", tmp_path / "pwned"
    backup = path.read_bytes() if path.exists() else None
    plant(path, marker)
    yield path, marker
    if backup is None:
        path.unlink()
    else:
        path.write_bytes(backup)


@pytest.mark.slow
def test_continuing_a_system_refuses_a_hostile_model_file(repo, cfg, hostile_model):
    path, marker = hostile_model
    with pytest.raises(RefusedFile) as err:
        Trainer(cfg, "tiny_scst", repo, progress=False)
    assert_refused(err, path, TINY_STAGE, marker)
    with pytest.raises(RefusedFile):
        read_model_file(path, TINY_STAGE)
    assert not marker.exists()


@pytest.mark.slow
def test_the_ensemble_refuses_a_hostile_member(repo, cfg, hostile_model, monkeypatch):
    from crossmodal import tracking
    from crossmodal.metrics import captions
    from crossmodal.stages import ensemble

    class NoTracking(contextlib.nullcontext):  # MLflow plays no part in reading the members
        def __init__(self, *args, **kwargs):
            super().__init__(self)

    monkeypatch.setattr(tracking, "Run", NoTracking)
    monkeypatch.setattr(captions, "start_meteor", lambda: None)
    path, marker = hostile_model
    with pytest.raises(RefusedFile) as err:
        ensemble.run(cfg, repo, argparse.Namespace(name="tiny_ensemble"))
    assert_refused(err, path, TINY_STAGE, marker)


@pytest.mark.slow
def test_resume_refuses_a_hostile_checkpoint_and_restarts_after_a_truncated_one(repo, cfg, tmp_path):
    trainer = Trainer(cfg, "tiny", repo, progress=False)
    marker = tmp_path / "pwned"
    try:
        plant(trainer.checkpoint, marker)
        with pytest.raises(RefusedFile) as err:
            trainer.resume()
        assert_refused(err, trainer.checkpoint, TINY_STAGE, marker)

        trainer.save_checkpoint(0)
        trainer.checkpoint.write_bytes(trainer.checkpoint.read_bytes()[:-200])
        assert trainer.resume() == 0  # unreadable (a killed copy, say): start afresh
    finally:
        trainer.checkpoint.unlink(missing_ok=True)


@pytest.mark.slow
def test_a_checkpoint_restores_every_rng_exactly(repo, cfg):
    trainer = Trainer(cfg, "tiny", repo, progress=False)
    np.random.standard_normal()  # leaves numpy with a cached gaussian, which the state must carry too
    try:
        trainer.save_checkpoint(0)
        draws = [torch.rand(3), np.random.standard_normal(3), random.random()]
        assert trainer.resume() == 1
        again = [torch.rand(3), np.random.standard_normal(3), random.random()]
    finally:
        trainer.checkpoint.unlink(missing_ok=True)
    assert torch.equal(draws[0], again[0]) and np.array_equal(draws[1], again[1]) and draws[2] == again[2]


@pytest.mark.slow
def test_a_hostile_backbone_fails_extract_regions_with_one_line(repo, tmp_path):
    backbone, marker = repo / paths.BACKBONE, tmp_path / "pwned"
    regions = (repo / paths.REGIONS).read_bytes()
    plant(backbone, marker, how="pickle")
    try:
        with pytest.raises(RefusedFile) as err:
            load_backbone(backbone)
        assert_refused(err, backbone, "pretrain_backbone", marker)
        proc = crossmodal(repo, "extract-regions", check=False)
    finally:
        backbone.unlink()
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {backbone}: refused to load this backbone checkpoint: it would import `")
    assert lines[0].endswith("(made by `dvc repro pretrain_backbone`)")
    assert not marker.exists() and (repo / paths.REGIONS).read_bytes() == regions


# ---- other input from elsewhere: archives, feature files, images


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
        for name, data in members.items():
            bundle.writestr(name, data)
    return buffer.getvalue()


def _tar(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as bundle:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            bundle.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def fetch_placed(tmp_path: Path, name: str, data: bytes) -> Path:
    """A manually placed archive (no network: its checksum is given) fetched with extract=True."""
    from crossmodal.data.download import RemoteFile, fetch_file

    directory = tmp_path / "raw" / "toy"
    directory.mkdir(parents=True)
    (directory / name).write_bytes(data)
    remote = RemoteFile(f"http://127.0.0.1:9/{name}", sha256=hashlib.sha256(data).hexdigest(), extract=True)
    fetch_file(remote, directory, dataset="toy", progress=False)
    return directory


@pytest.mark.parametrize("name, pack", [("bomb.zip", _zip), ("bomb.tar.gz", _tar)])
def test_an_archive_that_unpacks_to_more_than_the_free_disk_is_refused(tmp_path, monkeypatch, name, pack):
    data = pack({"zeros.bin": bytes(8 << 20), "ok.txt": b"ok"})  # 8 MiB of zeros packs into a few KiB
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real(path)._replace(free=1 << 20))
    with pytest.raises(InputError) as err:
        fetch_placed(tmp_path, name, data)
    assert str(err.value).startswith(f"unsafe archive {tmp_path / 'raw' / 'toy' / name}: its members unpack to ")
    assert "nothing was extracted" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "raw" / "toy" / "zeros.bin").exists() and not (tmp_path / "raw" / "toy" / "ok.txt").exists()


@pytest.mark.parametrize("name, pack", [("bad.zip", _zip), ("bad.tar.gz", _tar)])
def test_a_corrupt_archive_is_one_line(tmp_path, name, pack):
    data = pack({"a.txt": bytes(range(256)) * 400})
    with pytest.raises(InputError) as err:
        fetch_placed(tmp_path, name, data[: len(data) // 2])
    assert str(err.value).startswith(f"{tmp_path / 'raw' / 'toy' / name}: not a readable archive (")
    assert "\n" not in str(err.value) and not (tmp_path / "raw" / "toy" / "a.txt").exists()


@pytest.fixture
def region_file(tmp_path) -> Path:
    path = tmp_path / "regions.h5"
    write_region_file(path, [1, 2], [np.zeros((2, 4)), np.zeros((3, 4))], [np.ones((2, 5)), np.ones((3, 5))],
                      [(8, 8), (8, 8)], "test")
    return path


@pytest.mark.parametrize("how", ["external link", "external dataset", "virtual dataset"])
def test_a_feature_file_that_reads_other_files_is_refused(region_file, tmp_path, how):
    from crossmodal.data.regions import RegionFeatures

    RegionFeatures(region_file).close()  # as written, it opens
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"secret!!" * 8)
    with h5py.File(region_file, "a") as h5:
        if how == "external link":
            h5["extra"] = h5py.ExternalLink(str(secret), "/data")
        elif how == "external dataset":
            h5.create_dataset("extra", shape=(16,), dtype="f4", external=[(str(secret), 0, 64)])
        else:
            layout = h5py.VirtualLayout(shape=(5,), dtype="f4")
            layout[:] = h5py.VirtualSource(str(secret), "/data", shape=(5,))
            h5.create_virtual_dataset("extra", layout)
    with pytest.raises(InputError) as err:
        RegionFeatures(region_file)
    assert str(err.value).startswith(f"region feature file {region_file}: refused, ") and "'extra'" in str(err.value)


def test_a_caption_label_file_that_links_to_another_file_is_refused(tmp_path):
    from crossmodal.data.captions import load_labels

    path = tmp_path / "labels.h5"
    with h5py.File(path, "w") as h5:
        h5["image_ids"], h5["split"] = np.array([1], dtype=np.int64), np.array([b"test"])
        h5["label_start_ix"], h5["label_end_ix"] = np.array([0]), np.array([1])
        h5["labels"] = np.ones((1, 4), dtype=np.int64)
    assert load_labels(path, "test").image_ids.tolist() == [1]  # as written, it reads
    with h5py.File(path, "a") as h5:
        h5["extra"] = h5py.ExternalLink(str(tmp_path / "secret.h5"), "/data")
    with pytest.raises(InputError, match=rf"^caption label file {path}: refused, 'extra' is a link to "):
        load_labels(path, "test")


@pytest.mark.slow
def test_an_image_beyond_pils_pixel_limit_is_one_line(repo, monkeypatch):
    from PIL import Image

    from crossmodal.features.backbone import load_images, read_scene_graphs

    entry = read_scene_graphs(repo / paths.WORLD)["images"][0]
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # the world's 48 x 48 images are then "bombs"
    with pytest.raises(InputError, match=f"^{repo / paths.WORLD / entry['file_name']}: cannot read image \\("):
        load_images(repo / paths.WORLD, [entry])
