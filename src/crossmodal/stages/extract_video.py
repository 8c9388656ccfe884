"""Stages `extract_frames`, `extract_motion`, `extract_audio` (`extract-video --modality <m>`): one of HOCA's three
feature extractors (features/video.py: the analogues of Inception-ResNet-v2, I3D and VGGish), trained on the
training clips of both video datasets with the world's labels, then run over every clip of each, written as the
feature sets `<dataset>_<modality>` (data/features/msvd_frames.h5, ...) that a HOCA system's `inputs` name.

The feature sets use the region layout (data/regions.py), one row per sampled time step, keyed by the clip's item id
(data/video.py `item_id`): row t's "box" is its time span in frames, (i_t, 0, i_t + 1, 1), and the stored "image
size" is (frames of the clip, 1). The stage's metrics file (reports/metrics/extract_<modality>.json) holds each label
group's accuracy on the validation clips of both datasets and the training loss per epoch (with `patience` > 0
also the validation accuracy per epoch and the best epoch, whose weights give the features).

Under the real profile the paper's extractors are not run here: the stage converts user-extracted features in the
per-modality [T, D] layout of data/video.py (`data/raw/video_features/<dataset>/<modality>.h5`, docs/real-data.md
says how to extract them) to the same feature sets."""
from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .. import paths
from ..config.data import VIDEO_DATASETS
from ..config.features import VIDEO_MODALITIES
from ..io import InputError, write_json
from ..pipeline import manifests
from ..stage_common import progress, real, record_environment, set_threads

USER_FEATURES = paths.VIDEO_FEATURES  # real profile: <dataset>/<modality>.h5 in data/video.py's layout

ARGUMENTS = {"--modality": "frames, motion or audio"}


def clip_files(root: Path, dataset: str) -> dict[str, Path]:
    """{video id: its file} of one video-world dataset."""
    folder = root / paths.VIDEO_WORLD / dataset
    if dataset == "msvd":
        mapping = dict(line.split() for line in (folder / "youtube_mapping.txt").read_text().splitlines())
        return {video_id: folder / "YouTubeClips" / f"{clip}.avi" for clip, video_id in mapping.items()}
    return {f.stem: f for f in sorted((folder / "videos").glob("*.mp4"))}


@contextmanager
def one_thread():
    """torch and numpy's BLAS on one thread while the clips are decoded. Between its calls a two-thread library
    leaves a worker spinning on the other core for a while, and FFmpeg's decoder, which runs between them, waited
    on it: the audio extractor's log-mel filterbank product (numpy, OpenBLAS) made decoding a clip about 4 times
    slower (docs/performance.md). The work done per clip is elementwise or per row (a spectrogram frame, a mel
    band), which a thread count does not split differently: the feature files came out byte-identical (checked on
    the Zen 3 machine of docs/performance.md)."""
    import torch
    from threadpoolctl import threadpool_limits

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            yield
    finally:
        torch.set_num_threads(threads)


def write_feature_set(path: Path, features: dict[str, np.ndarray], frames: dict[str, int]) -> None:
    """One modality's features of one dataset ({video id: [T, D]}) in the region layout described above."""
    from ..data.regions import write_region_file
    from ..data.video import item_id
    from ..features.video import sample_indices

    ids = sorted(features, key=item_id)
    spans = [sample_indices(frames[v], len(features[v])).astype(np.float32) for v in ids]
    boxes = [np.stack([s, np.zeros_like(s), s + 1, np.ones_like(s)], 1) for s in spans]
    write_region_file(path, [item_id(v) for v in ids], boxes, [features[v] for v in ids],
                      [(frames[v], 1) for v in ids], "video time steps")


def convert_user_features(root: Path, modality: str) -> dict:
    from ..data.video import VideoFeatures

    summary = {}
    for dataset in VIDEO_DATASETS:
        source = root / USER_FEATURES / dataset / f"{modality}.h5"
        if not source.is_file():
            raise InputError(f"missing {source}: under profile real, HOCA reads features you extracted "
                             "(docs/real-data.md, 'Video features')")
        with VideoFeatures(source) as reader:
            features = {v: reader[v] for v in reader.video_ids}
        write_feature_set(root / paths.features(f"{dataset}_{modality}"), features,
                          {v: len(f) for v, f in features.items()})
        summary[dataset] = len(features)
    return summary


def run(cfg, root: Path, args) -> None:
    modality = args.modality
    if modality not in VIDEO_MODALITIES:
        raise InputError(f"--modality must be one of {', '.join(VIDEO_MODALITIES)}, not {modality!r}")
    set_threads(cfg)
    if real(cfg):
        summary = {"modality": modality, "converted": convert_user_features(root, modality),
                   "source": str(USER_FEATURES / "<dataset>" / f"{modality}.h5"), "environment": record_environment()}
        write_json(root / paths.METRICS / f"extract_{modality}.json", summary)
        print(json.dumps(summary))
        return
    manifests.check(root / paths.VIDEO_WORLD)  # the world this stage reads, as its manifest lists it
    import torch
    from tqdm import tqdm

    from ..data.video_files import read_clip
    from ..features.video import clip_inputs, extract, group_accuracy, label_vector, train_extractor

    fcfg = cfg.video.features
    clips = []  # (dataset, video id, labels, inputs [T, ...], frames of the clip)
    with one_thread():
        for dataset in VIDEO_DATASETS:
            labels = json.loads((root / paths.VIDEO_WORLD / dataset / "clips.json").read_text())
            for video_id, file in tqdm(clip_files(root, dataset).items(), desc=f"{dataset} clips",
                                       disable=not progress(cfg)):
                clip = read_clip(file)
                clips.append((dataset, video_id, labels[video_id], clip_inputs(clip, fcfg, (modality,))[modality],
                              len(clip.frames)))
    split = {s: ([c[3] for c in clips if c[2]["split"] == s],
                 [label_vector(c[2], modality) for c in clips if c[2]["split"] == s]) for s in ("train", "val")}
    net, curve = train_extractor(modality, *split["train"], fcfg, progress(cfg), val=split["val"])
    accuracy = group_accuracy(net, modality, *split["val"])
    with torch.no_grad():
        for dataset in VIDEO_DATASETS:
            mine = [c for c in clips if c[0] == dataset]
            write_feature_set(root / paths.features(f"{dataset}_{modality}"), {c[1]: extract(net, c[3]) for c in mine},
                              {c[1]: c[4] for c in mine})
    summary = {"modality": modality, "val_accuracy": accuracy, **curve,
               "clips": {s: len(c[0]) for s, c in split.items()}, "environment": record_environment()}
    write_json(root / paths.METRICS / f"extract_{modality}.json", summary)
    print(json.dumps(summary))
