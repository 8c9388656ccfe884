"""The real profile without the internet, from the tests' tiny pipeline (tiny_pipeline.py): its worlds exported in
the publishers' formats, served on 127.0.0.1, downloaded, converted and trained; and one DAG for both profiles.
"""
from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from tiny_pipeline import (TINY, TINY_BAN, TINY_GROUNDING, TINY_UPDOWN_TRAIN, commit_all, copy_pipeline, in_paper,
                           in_process_params, run, serve_stages, set_params, stages_run)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]  # the tiny pipeline under the real profile


@pytest.fixture(scope="module")
def repo(tiny_repo: Path) -> Path:
    return tiny_repo  # this module's own copy of the session's tiny pipeline


BAN = "ban_8_glove_counter"  # the tiny build's VQA system
PAPER_ARGS = {"embed_dim": 16, "hidden_dim": 16, "att_hidden_dim": 16}  # stand-in for the paper's sizes


def test_real_profile_downloads_converts_and_trains_the_world_served_in_the_published_formats(repo, tmp_path):
    """The real-data path without the internet: the tiny image, VQA and grounding worlds, the word vectors and a
    narrow stand-in for VGG-16 exported as the publishers' files, served on 127.0.0.1 (Flickr30k's features placed by
    hand), downloaded, extracted and converted by the same stages, then Up-Down, BAN-Glove-Counter and BAN on
    Flickr30k Entities trained for one epoch. The converted captions, references, features, VQA and grounding arrays
    and word vectors must equal those the synthetic profile built from the same worlds, the grid features the
    stand-in's conv5 grid of the images, and the attribute detector trains on it."""
    from export_real import (FLICKR_ID_OFFSET, export_grid_formats, export_grounding_formats, export_real_formats,
                             export_vqa_formats)
    from loopback_http import LoopbackHTTPServer

    from crossmodal.data.captions import load_labels, load_vocabulary
    from crossmodal.data.coco import read_coco_captions
    from crossmodal.data.regions import RegionFeatures
    from crossmodal.data.karpathy import read_karpathy
    from crossmodal.features.grid import cell_boxes, grid_features
    from crossmodal.features.vgg import Vgg16Conv, load_image
    from crossmodal.features.word_vectors import read_word_vectors

    archives = export_real_formats(repo / "data/raw/image_world", repo / "data/features/regions.h5", tmp_path / "www")
    ban_archives = export_vqa_formats(repo / "data/raw/vqa_world", repo / "data/features/word_vectors.txt",
                                      tmp_path / "www")
    torch.manual_seed(0)
    standin = Vgg16Conv((2, 3, 4, 4, 6)).eval()  # VGG-16's layout, narrow: torchvision's key names
    torch.save(standin.state_dict(), tmp_path / "standin.pth")
    grid_files = export_grid_formats(repo / "data/raw/image_world", tmp_path / "standin.pth", tmp_path / "www")
    flickr = export_grounding_formats(repo / "data/raw/grounding_world", repo / "data/features/regions.h5",
                                      tmp_path / "www")
    real = copy_pipeline(tmp_path / "real")
    params = in_process_params(repo)  # the code copied here has no toy paper
    params["profile"] = "real"
    params["baselines"] = {"systems": {"updown": {**params["baselines"]["systems"]["updown"], "paper": {
        "model_args": PAPER_ARGS, "train": {**TINY_UPDOWN_TRAIN, "max_epochs": 1}}}}}
    params["ban"]["systems"] = {name: {**params["ban"]["systems"][name], "paper": {
        "model_args": {k: tiny["model_args"][k] for k in ("embed_dim", "hidden_dim")}, "train": tiny["train"]}}
        for name, tiny in ((BAN, TINY_BAN), ("ban_flickr", TINY_GROUNDING))}
    params["word_vectors"]["paper"] = {"dim": TINY["word_vectors"]["dim"]}  # the exported vectors' size
    params["runtime"]["paper"] = {"lazy_features": True, "loader_workers": 1}
    params["regions"]["published_boxes"] = [1, 100]  # the world has 3-10 boxes, not the published 10-100
    (real / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(real, "git", "init", "-q")
    placed = real / "data/raw/flickr30k_features"  # no stable link: placed by hand
    placed.mkdir(parents=True)
    shutil.copy(flickr.pop("flickr30k_features")[0], placed)
    with LoopbackHTTPServer(tmp_path / "www") as base, serve_stages(real):  # its stages forked, as repro's
        served = {**archives, **ban_archives, **grid_files, **flickr}
        set_params(real, {"datasets": {name: {"fetch": True, "files": [
            {"url": f"{base}/{a.name}", "extract": a.suffix == ".zip"} for a in files]}
            for name, files in served.items()}})
        run(real, sys.executable, "-m", "crossmodal", "pipelines")
        commit_all(real, "real profile on loopback")
        out = run(real, "dvc", "repro", "pipelines/baselines/dvc.yaml:updown", f"pipelines/ban/dvc.yaml:{BAN}",
                  "pipelines/ban/dvc.yaml:tables", "extract_grid", "train_attributes").stdout
    assert stages_run(out) == sorted([
        "code", "params", "download-karpathy", "download-coco_captions", "download-butd_adaptive",
        "download-butd_fixed36", "synthesize", "prepro_captions", "pretrain_backbone", "extract_regions",
        *in_paper("baselines", "updown"), "download-vqa_v2", "download-glove", "synthesize_vqa", "prepro_vqa",
        "word_vectors", *in_paper("ban", BAN), "download-coco_images", "download-vgg16", "extract_grid",
        "train_attributes", "download-flickr30k_entities", "download-flickr30k_features", "synthesize_grounding",
        "prepro_grounding", *in_paper("ban", "ban_flickr", "tables")]), out
    for name, files in served.items():
        manifest = json.loads((real / f"data/raw/{name}/MANIFEST.json").read_text())
        sums = (real / f"data/raw/{name}/SHA256SUMS").read_text().split()
        assert manifest["fetched"] and sums[1::2] == sorted(a.name for a in files)
    assert not json.loads((real / "data/raw/butd_fixed36/MANIFEST.json").read_text())["fetched"]  # fetch: false
    assert json.loads((real / "data/raw/image_world/PROFILE.json").read_text())["profile"] == "real"

    ours, theirs = repo / "data/processed/captions", real / "data/processed/captions"
    for vocabulary in ("min5", "min6"):
        assert load_vocabulary(theirs / vocabulary / "vocab.json") == load_vocabulary(ours / vocabulary / "vocab.json")
        for split in ("train", "val", "test"):
            a, b = (load_labels(d / vocabulary / "labels.h5", split) for d in (ours, theirs))
            assert np.array_equal(a.image_ids, b.image_ids) and np.array_equal(a.labels, b.labels)
    for split in ("val", "test"):
        refs = [read_coco_captions(d / f"references/captions_{split}.json") for d in (ours, theirs)]
        assert refs[0] == refs[1]
    with RegionFeatures(repo / "data/features/regions.h5") as a, RegionFeatures(real / "data/features/regions.h5") as b:
        coco = len(a.ids)  # COCO's images, then Flickr30k's: the grounding world's, renumbered
        grounded = [int(i) for s in ("train", "val", "test")
                    for i in (repo / f"data/raw/grounding_world/{s}.txt").read_text().split()]
        assert np.array_equal(a.ids, b.ids[:coco]) and b.source == "bottom-up-attention tsv"
        assert sorted(b.ids[coco:].tolist()) == sorted(i + FLICKR_ID_OFFSET for i in grounded)
        for i, j in [*zip(a.ids.tolist(), b.ids.tolist()), *((i, i + FLICKR_ID_OFFSET) for i in grounded)]:
            assert all(np.array_equal(x, y) for x, y in zip(a.get(i), b.get(j)))

    ours, theirs = repo / "data/processed/vqa", real / "data/processed/vqa"  # VQA v2's files, the same arrays
    assert all(json.loads((ours / f).read_text()) == json.loads((theirs / f).read_text())
               for f in ("answers.json", "words.json"))
    for split in ("train", "val", "test"):
        with np.load(ours / f"{split}.npz") as a, np.load(theirs / f"{split}.npz") as b:
            assert sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)
    synthetic, flickr = repo / "data/processed/grounding", real / "data/processed/grounding"  # Flickr30k Entities'
    assert (synthetic / "words.json").read_text() == (flickr / "words.json").read_text()
    for split in ("train", "val", "test"):
        with np.load(synthetic / f"{split}.npz") as a, np.load(flickr / f"{split}.npz") as b:
            assert sorted(a) == sorted(b) and np.array_equal(a["image_ids"] + FLICKR_ID_OFFSET, b["image_ids"])
            assert all(np.array_equal(a[k], b[k]) for k in a if k != "image_ids")
    grounding = json.loads((real / "reports/metrics/ban_flickr.json").read_text())
    assert 0 <= grounding["test"]["R@1"] <= grounding["test"]["R@10"] <= 1 and len(grounding["history"]) == 1
    words = {w for task in ("vqa", "grounding") for w in json.loads((real / f"data/processed/{task}/words.json")
                                                                        .read_text())}
    glove = read_word_vectors(real / "data/features/word_vectors.txt")  # GloVe restricted to both tasks' words
    assert set(glove) <= words and len(glove) > 10
    world = read_word_vectors(repo / "data/features/word_vectors.txt", glove)
    assert all(np.array_equal(glove[w], world[w]) for w in glove)
    size = TINY["grid"]["size"]  # ETA's grid: the stand-in's conv5 of every image, in the original image's cells
    with RegionFeatures(repo / "data/features/grid.h5") as ours, RegionFeatures(real / "data/features/grid.h5") as b:
        assert np.array_equal(ours.ids, b.ids) and b.source == "VGG-16 conv5 grid"
        for image in read_karpathy(repo / "data/raw/image_world/dataset_coco.json")[::20]:
            pixels, (width, height) = load_image(repo / "data/raw/image_world" / image.path)  # the PNG served
            features, boxes = b.get(image.image_id)
            with torch.inference_mode():
                assert torch.allclose(torch.from_numpy(features), grid_features(standin(pixels[None]), size)[0])
            assert np.array_equal(boxes, cell_boxes(size, width, height)) and features.shape == (size * size, 6)
    detector = json.loads((real / "reports/metrics/attributes.json").read_text())  # the detector on VGG-16
    assert len(detector["history"]) == 1 and 0 <= detector["test"]["mAP"] <= 1 and detector["mlflow_run_id"]
    with RegionFeatures(repo / "data/features/attributes.h5") as ours, \
            RegionFeatures(real / "data/features/attributes.h5") as b:
        assert np.array_equal(ours.ids, b.ids) and b.get(int(b.ids[0]))[0].shape == (TINY["attributes"]["top_k"], 2)
    ban = json.loads((real / f"reports/metrics/{BAN}.json").read_text())
    assert ban["test"]["overall"] is None and "server" in ban["test"]["overall_status"]
    assert 0 <= ban["best_val_score"] <= 1
    assert {"overall", "yes/no", "number", "other"} <= set(ban["val"]) and 0 <= ban["val"]["overall"] <= 1  # val2014
    testdev = (real / "reports/tables/ban_testdev.md").read_text()  # BAN's tables: test-dev's scores are the server's
    assert "n/a" in testdev and "stay with the evaluation server" in testdev
    assert f"{100 * grounding['test']['R@1']:.1f}" in (real / "reports/tables/ban_flickr_recall.md").read_text()
    submitted = json.loads((real / f"data/predictions/{BAN}/vqa_OpenEnded_mscoco_test-dev2015_{BAN}_results.json")
                           .read_text())
    with np.load(theirs / "test.npz") as test:
        assert sorted(r["question_id"] for r in submitted) == sorted(test["question_ids"].tolist())

    metrics = json.loads((real / "reports/metrics/updown.json").read_text())
    assert len(metrics["history"]) == 1 and metrics["test"]["CIDEr"] >= 0 and metrics["mlflow_run_id"]
    saved = torch.load(real / "data/models/updown/model.pt", weights_only=False)
    assert {k: saved["model"]["model_args"][k] for k in PAPER_ARGS} == PAPER_ARGS  # the paper block applied
    qualitative = (real / "data/predictions/updown/qualitative.md").read_text()
    assert "COCO 2014" in qualitative and "(`val2014/COCO_val2014_" in qualitative  # paths a reader can open

    # the server is gone: downloaded files are verified and accepted without any network...
    assert "Running stage" in run(real, "dvc", "repro", "-f", "download-karpathy").stdout
    # ...and a missing one fails at once, naming where a manual copy goes
    (real / "data/raw/karpathy/caption_datasets.zip").unlink()
    proc = run(real, "dvc", "repro", "-f", "download-karpathy", check=False)
    assert proc.returncode != 0
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "connection refused" in error[0]
    assert re.search(r"place it at \S*/data/raw/karpathy/caption_datasets\.zip", error[0]), error[0]


def test_both_profiles_have_one_dag(repo, tmp_path):
    other = copy_pipeline(tmp_path / "other")
    shutil.copy(repo / "params.yaml", other / "params.yaml")
    run(other, "git", "init", "-q")
    synthetic = run(other, "dvc", "dag", "--dot").stdout
    set_params(other, {"profile": "real"})
    assert run(other, "dvc", "dag", "--dot").stdout == synthetic and "download-coco_captions" in synthetic
