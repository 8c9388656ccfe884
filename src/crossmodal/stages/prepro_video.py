"""Stage `prepro_video`: each video dataset's captions, processed as `prepro_captions` processes the image world's
(data/captions.py `preprocess`), into data/processed/video/<dataset>/: one labels/vocabulary set per vocabulary of
that corpus (params.yaml `vocabularies`, `corpus: msvd | msrvtt`), the val/test references in COCO layout, the clip
list and the qualitative examples (a list: a clip has no picture). A clip's item id is the number ending its video
id (data/video.py `item_id`), the key of its feature sets too.

Files: the video world's (data/raw/video_world/<dataset>/) or, under the real profile, the downloads' (data/raw/msvd/:
AllVideoDescriptions.txt and youtube_mapping.txt; data/raw/msrvtt/: the videodatainfo files)."""
from __future__ import annotations

import json
from pathlib import Path

from .. import paths
from ..config.data import VIDEO_DATASETS
from ..io import InputError
from ..stage_common import real


def dataset_files(cfg, root: Path, dataset: str) -> Path:
    """The folder holding a video dataset's annotation files under the profile."""
    return root / (paths.raw(dataset) if real(cfg) else paths.VIDEO_WORLD / dataset)


def read_videos(cfg, root: Path, dataset: str) -> dict:
    """{video id: VideoCaptions} of one dataset, in natural id order."""
    from ..data.video import read_msrvtt, read_msvd

    folder = dataset_files(cfg, root, dataset)
    if dataset == "msvd":
        mapping = folder / "youtube_mapping.txt"
        clips = len(mapping.read_text().splitlines()) if mapping.is_file() else 0
        return read_msvd(folder / "AllVideoDescriptions.txt", mapping, drop_unmapped=real(cfg),
                         **({} if real(cfg) else {"num_videos": clips}))
    files = sorted(folder.glob("*videodatainfo.json"))
    if not files:
        raise InputError(f"no videodatainfo JSON file in {folder}")
    return read_msrvtt(files)


def run(cfg, root: Path, args) -> None:
    from ..data.captions import preprocess
    from ..data.karpathy import KarpathyImage, KarpathySentence
    from ..data.video import item_id

    summary = {}
    for dataset in VIDEO_DATASETS:
        vocabularies = {n: v for n, v in cfg.vocabularies.items() if v.corpus == dataset}
        if not vocabularies:
            continue
        videos = read_videos(cfg, root, dataset)
        items = [KarpathyImage(item_id(v), item_id(v), video.split, None, v,
                               [KarpathySentence(k, None, raw) for k, raw in enumerate(video.captions)])
                 for v, video in videos.items()]
        references = {item_id(v): list(video.captions) for v, video in videos.items()}
        summary[dataset] = preprocess(vocabularies, items, references, root / paths.corpus(dataset),
                                      cfg.evaluation.qualitative_examples, None)
    print(json.dumps(summary))
