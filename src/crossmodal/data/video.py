"""MSVD and MSR-VTT caption files, their standard splits, and the per-modality video feature files.

Low-Rank HOCA trains on both datasets; the synthetic video world writes the same files, so one reader
serves both. Each dataset is converted to one common JSON (`write_video_captions`):

    {"dataset": "msvd" | "msrvtt",
     "videos": {"<video id>": {"split": "train" | "val" | "test", "captions": [str, ...],
                               "category": int   (MSR-VTT only)}}}

with videos in natural id order (vid2 before vid10), captions in file order. A video listed by the
dataset but without captions (only in excerpts) keeps an empty caption list.

MSVD (Chen and Dolan, 2011), as distributed for captioning:
- `AllVideoDescriptions.txt`: lines starting with `#` are comments; every other non-blank line is
  ``<clip> <caption>`` where the clip is ``<youtube id>_<start>_<end>`` (seconds, integers). YouTube ids
  themselves contain `_` and `-`, so the clip is split at its last two underscores. The file holds the
  English descriptions only (the multilingual corpus is a separate CSV with a Language column, not read
  here), about 40 per clip.
- `youtube_mapping.txt`: ``<clip> vid<N>`` for the 1,970 clips of YouTubeClips.tar.
- Standard split (Yao et al. 2015, used by HOCA): vid1-1200 train, vid1201-1300 val, vid1301-1970 test. A
  smaller MSVD-like set (the synthetic video world) passes `num_videos`: its vid1..N split in the same
  proportions (`split_sizes`).
Captions of a clip absent from the mapping are an error unless `drop_unmapped=True`.

MSR-VTT (Xu et al., 2016): `videodatainfo.json` with `videos[{video_id, split, id, category, url,
start time, end time}]` and `sentences[{caption, video_id, sen_id}]`, 20 captions per video. The 2016
release has `train_val_videodatainfo.json` (splits `train`, `validate`) and `test_videodatainfo.json`
(`test`); the 2017 release has one file with `train`, `val`, `test`. `read_msrvtt` accepts one or more
files, merges them (a video listed twice is an error) and names the splits train / val / test. Standard
split: 6,513 / 497 / 2,990 (video0-6512, video6513-7009, video7010-9999). `category` (0-19) is kept:
HOCA initialises its decoder from the category's GloVe embedding on MSR-VTT.

`check_standard_splits` verifies the standard sizes and that every video has captions; pass
`excerpt=True` for samples such as the test fixtures.

Video features. The HOCA authors extracted their own features (80 sampled frames through
Inception-ResNet-v2, I3D over 64-frame chunks centred on them, VGGish on the audio track) and did not
release them, so the pipeline reads any features in this HDF5 layout, one file per modality (e.g.
`appearance.h5`, `motion.h5`, `audio.h5`):

- one dataset at the root of the file per video, named by the video id of the captions JSON (`vid1`,
  `video0`, ...): a 2-d array ``[T, D]`` of floats (float16, float32 or float64; read as float32);
- D is the same for every video of a file (e.g. 1536, 1024, 128 for the three extractors above);
  T >= 1 may differ between videos and between modalities;
- nothing else at the root (no groups); attributes are allowed and ignored.

With h5py: ``with h5py.File("motion.h5", "w") as f: f.create_dataset("vid1", data=array_T_by_D)`` for
every video; or `write_video_features`. `VideoFeatures` checks the layout when opened and reads one video
at a time.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import h5py
import numpy as np

from ..io import InputError, atomic_path, json_field, read_json, write_json
from .hdf5 import ReadOnlyHDF5, one_line

SPLITS = ("train", "val", "test")
DATASETS = ("msvd", "msrvtt")
STANDARD_SPLIT_SIZES = {
    "msvd": {"train": 1200, "val": 100, "test": 670},
    "msrvtt": {"train": 6513, "val": 497, "test": 2990},
}
MSVD_NUM_VIDEOS = 1970
MSRVTT_SPLIT_NAMES = {"train": "train", "validate": "val", "val": "val", "test": "test"}

_MSVD_VIDEO = re.compile(r"vid([1-9]\d*)")
_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")


@dataclass(frozen=True)
class VideoCaptions:
    split: str
    captions: tuple[str, ...]
    category: int | None = None


def _natural_key(video_id: str) -> tuple[str, int]:
    match = _TRAILING_NUMBER.match(video_id)
    return (match.group(1), int(match.group(2))) if match else (video_id, -1)


def item_id(video_id: str) -> int:
    """The integer id a video's captions and features are stored under (the number ending its id: vid12 -> 12,
    video7 -> 7), unique within a dataset, as an image's COCO id is."""
    prefix, number = _natural_key(video_id)
    if number < 0:
        raise InputError(f"video id {video_id!r} does not end in a number")
    return number


def _text_lines(path: Path, what: str) -> list[str]:
    if not path.is_file():
        raise InputError(f"missing {what}: {path}")
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text ({err})") from None


# --- MSVD ----------------------------------------------------------------------------------------

def parse_msvd_clip(clip: str, where: str = "MSVD clip") -> tuple[str, int, int]:
    """(youtube id, start, end) of a clip name ``<youtube id>_<start>_<end>``."""
    youtube_id, start, end = (clip.rsplit("_", 2) + ["", ""])[:3]
    if not youtube_id or not start.isdigit() or not end.isdigit():
        raise InputError(f"{where}: {clip!r} is not <youtube id>_<start>_<end>")
    return youtube_id, int(start), int(end)


def split_sizes(dataset: str, num_videos: int) -> dict[str, int]:
    """Train / val / test sizes of `num_videos` videos in the standard split's proportions (each at least 1):
    the standard sizes themselves at the full size."""
    standard = STANDARD_SPLIT_SIZES[dataset]
    total = sum(standard.values())
    if num_videos < len(SPLITS):
        raise ValueError(f"{dataset}: {num_videos} videos cannot fill {len(SPLITS)} splits")
    train = max(1, round(num_videos * standard["train"] / total))
    val = max(1, round(num_videos * standard["val"] / total))
    return {"train": train, "val": val, "test": num_videos - train - val}


def msvd_split(video_id: str, num_videos: int = MSVD_NUM_VIDEOS) -> str:
    """Split of an MSVD video id `vid<N>`: the standard one, or its proportions over vid1..num_videos."""
    match = _MSVD_VIDEO.fullmatch(video_id)
    if match is None or int(match.group(1)) > num_videos:
        raise InputError(f"MSVD video id {video_id!r} is not vid1 ... vid{num_videos}")
    number, sizes = int(match.group(1)), split_sizes("msvd", num_videos)
    return "train" if number <= sizes["train"] else "val" if number <= sizes["train"] + sizes["val"] else "test"


def read_msvd_mapping(path: str | Path, num_videos: int = MSVD_NUM_VIDEOS) -> dict[str, str]:
    """clip name -> video id (`vid<N>`, N <= num_videos) from `youtube_mapping.txt`."""
    path = Path(path)
    mapping: dict[str, str] = {}
    videos: set[str] = set()
    for k, line in enumerate(_text_lines(path, "MSVD mapping file")):
        if not line.strip():
            continue
        where = f"{path}:{k + 1}"
        fields = line.split()
        if len(fields) != 2:
            raise InputError(f"{where}: expected '<clip> vid<N>', got {line.strip()!r}")
        clip, video_id = fields
        parse_msvd_clip(clip, where)
        try:
            msvd_split(video_id, num_videos)
        except InputError as err:
            raise InputError(f"{where}: {err}") from None
        if clip in mapping or video_id in videos:
            raise InputError(f"{where}: clip {clip} or video {video_id} is mapped twice")
        mapping[clip] = video_id
        videos.add(video_id)
    return mapping


def read_msvd_descriptions(path: str | Path) -> dict[str, list[str]]:
    """clip name -> captions (file order) from `AllVideoDescriptions.txt`."""
    path = Path(path)
    captions: dict[str, list[str]] = {}
    for k, line in enumerate(_text_lines(path, "MSVD description file")):
        if line.startswith("#") or not line.strip():
            continue
        where = f"{path}:{k + 1}"
        fields = line.split(maxsplit=1)
        if len(fields) != 2:
            raise InputError(f"{where}: clip {fields[0]!r} has no caption")
        parse_msvd_clip(fields[0], where)
        captions.setdefault(fields[0], []).append(fields[1].strip())
    return captions


def read_msvd(descriptions_path: str | Path, mapping_path: str | Path, drop_unmapped: bool = False,
              num_videos: int = MSVD_NUM_VIDEOS) -> dict[str, VideoCaptions]:
    """Every mapped MSVD video with its split (see `msvd_split`) and captions, in natural id order."""
    mapping = read_msvd_mapping(mapping_path, num_videos)
    by_clip = read_msvd_descriptions(descriptions_path)
    unmapped = [clip for clip in by_clip if clip not in mapping]
    if unmapped and not drop_unmapped:
        raise InputError(f"{descriptions_path}: {len(unmapped)} clips are not in {mapping_path} (first: "
                         f"{unmapped[0]}); pass drop_unmapped=True to ignore them")
    videos = {video_id: VideoCaptions(msvd_split(video_id, num_videos), tuple(by_clip.get(clip, ())))
              for clip, video_id in mapping.items()}
    return {v: videos[v] for v in sorted(videos, key=_natural_key)}


# --- MSR-VTT -------------------------------------------------------------------------------------

def _object_list(data: object, key: str, path: Path) -> list[dict]:
    entries = data.get(key) if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise InputError(f"{path}: field '{key}' is missing or not a list")
    for k, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise InputError(f"{path}: {key}[{k}] must be an object")
    return entries


def read_msrvtt(paths: str | Path | Sequence[str | Path]) -> dict[str, VideoCaptions]:
    """Videos of one or more `videodatainfo` files merged, splits named train/val/test, natural id order."""
    paths = [Path(paths)] if isinstance(paths, (str, os.PathLike)) else [Path(p) for p in paths]
    if not paths:
        raise InputError("read_msrvtt needs at least one videodatainfo file")
    loaded = [(path, read_json(path)) for path in paths]
    splits: dict[str, str] = {}
    categories: dict[str, int | None] = {}
    for path, data in loaded:
        for k, video in enumerate(_object_list(data, "videos", path)):
            where = f"videos[{k}]"
            video_id = json_field(video, "video_id", str, path, where)
            split = json_field(video, "split", str, path, where)
            if split not in MSRVTT_SPLIT_NAMES:
                raise InputError(f"{path}: {where}.split is {split!r}, expected one of {', '.join(MSRVTT_SPLIT_NAMES)}")
            if video_id in splits:
                raise InputError(f"{path}: {where} repeats video {video_id}")
            json_field(video, "id", int, path, where, required=False)
            splits[video_id] = MSRVTT_SPLIT_NAMES[split]
            categories[video_id] = json_field(video, "category", int, path, where, required=False)
    captions: dict[str, list[str]] = {video_id: [] for video_id in splits}
    for path, data in loaded:
        sentence_ids: set[int] = set()
        for k, sentence in enumerate(_object_list(data, "sentences", path)):
            where = f"sentences[{k}]"
            sen_id = json_field(sentence, "sen_id", int, path, where)
            if sen_id in sentence_ids:
                raise InputError(f"{path}: {where} repeats sen_id {sen_id}")
            sentence_ids.add(sen_id)
            video_id = json_field(sentence, "video_id", str, path, where)
            if video_id not in captions:
                raise InputError(f"{path}: {where} refers to video {video_id}, which no given file lists")
            captions[video_id].append(json_field(sentence, "caption", str, path, where).strip())
    return {v: VideoCaptions(splits[v], tuple(captions[v]), categories[v]) for v in sorted(splits, key=_natural_key)}


# --- common output -------------------------------------------------------------------------------

def check_standard_splits(videos: Mapping[str, VideoCaptions], dataset: str, excerpt: bool = False) -> dict[str, int]:
    """Videos per split; unless `excerpt`, the standard sizes and captions for every video are required."""
    if dataset not in STANDARD_SPLIT_SIZES:
        raise InputError(f"unknown video dataset {dataset!r}, expected one of {', '.join(DATASETS)}")
    sizes = {split: 0 for split in SPLITS}
    for video in videos.values():
        sizes[video.split] += 1
    if excerpt:
        return sizes
    if sizes != STANDARD_SPLIT_SIZES[dataset]:
        raise InputError(f"{dataset}: split sizes {sizes} differ from the standard {STANDARD_SPLIT_SIZES[dataset]}")
    uncaptioned = [v for v, video in videos.items() if not video.captions]
    if uncaptioned:
        raise InputError(f"{dataset}: {len(uncaptioned)} videos have no captions (first: {uncaptioned[0]})")
    return sizes


def write_video_captions(path: str | Path, dataset: str, videos: Mapping[str, VideoCaptions]) -> None:
    """Write the common captions JSON (atomically)."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown video dataset {dataset!r}")
    entries = {}
    for video_id, video in videos.items():
        entry = {"split": video.split, "captions": list(video.captions)}
        if video.category is not None:
            entry["category"] = video.category
        entries[video_id] = entry
    write_json(path, {"dataset": dataset, "videos": entries})


def read_video_captions(path: str | Path) -> tuple[str, dict[str, VideoCaptions]]:
    """(dataset, video id -> VideoCaptions) from a common captions JSON."""
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, dict) or data.get("dataset") not in DATASETS or not isinstance(data.get("videos"), dict):
        raise InputError(f"{path}: expected an object with 'dataset' ({' or '.join(DATASETS)}) and 'videos'")
    videos = {}
    for video_id, entry in data["videos"].items():
        where = f"videos[{video_id!r}]"
        if not isinstance(entry, dict):
            raise InputError(f"{path}: {where} must be an object")
        split = json_field(entry, "split", str, path, where)
        if split not in SPLITS:
            raise InputError(f"{path}: {where}.split is {split!r}, expected one of {', '.join(SPLITS)}")
        captions = json_field(entry, "captions", list, path, where)
        if not all(isinstance(c, str) for c in captions):
            raise InputError(f"{path}: {where}.captions must be a list of strings")
        videos[video_id] = VideoCaptions(split, tuple(captions), json_field(entry, "category", int, path, where, required=False))
    return data["dataset"], videos


# --- features ------------------------------------------------------------------------------------

class VideoFeatures(ReadOnlyHDF5):
    """Read-only view of one modality's feature file (layout in the module docstring).

    The layout is checked when opened (shapes only, no data read); `__getitem__` reads one video.
    Picklable: the HDF5 handle is reopened in the receiving process (DataLoader workers).
    """

    description = "video feature file"


    def _validate(self, h5: h5py.File) -> None:
        where = f"video feature file {self.path}"
        self._lengths: dict[str, int] = {}
        dims: dict[int, str] = {}
        for video_id, node in h5.items():
            if not isinstance(node, h5py.Dataset):
                raise InputError(f"{where}: '{video_id}' is a group, expected one [T, D] dataset per video")
            if node.ndim != 2 or node.dtype.kind != "f":
                raise InputError(f"{where}: '{video_id}' has dtype {node.dtype} and shape {node.shape}, expected 2-d float [T, D]")
            if node.shape[0] < 1:
                raise InputError(f"{where}: '{video_id}' has no time steps")
            dims.setdefault(node.shape[1], video_id)
            if len(dims) > 1:
                (d1, v1), (d2, v2) = dims.items()
                raise InputError(f"{where}: feature sizes differ ({v1} has D = {d1}, {v2} has D = {d2})")
            self._lengths[video_id] = node.shape[0]
        if not dims:
            raise InputError(f"{where}: holds no video")
        self.dim = next(iter(dims))

    def __len__(self) -> int:
        return len(self._lengths)

    def __contains__(self, video_id: object) -> bool:
        return video_id in self._lengths

    @property
    def video_ids(self) -> list[str]:
        return sorted(self._lengths, key=_natural_key)

    def num_steps(self, video_id: str) -> int:
        self._require(video_id)
        return self._lengths[video_id]

    def _require(self, video_id: str) -> None:
        if video_id not in self._lengths:
            raise InputError(f"video feature file {self.path} has no features for video {video_id!r}")

    def check_covers(self, video_ids: Iterable[str]) -> None:
        """Raise InputError when any of `video_ids` has no features here."""
        missing = [v for v in video_ids if v not in self._lengths]
        if missing:
            raise InputError(f"video feature file {self.path} lacks {len(missing)} videos (first: {missing[0]!r})")

    def __getitem__(self, video_id: str) -> np.ndarray:
        """Features [T, D] (float32) of one video."""
        self._require(video_id)
        try:
            return self._h5()[video_id][()].astype(np.float32, copy=False)
        except OSError as err:
            raise InputError(f"video feature file {self.path}: cannot read {video_id!r}, truncated? ({one_line(err)})") from None

    def __repr__(self) -> str:
        return f"VideoFeatures({str(self.path)!r}, videos={len(self)}, dim={self.dim})"


def write_video_features(path: str | os.PathLike, features: Mapping[str, np.ndarray]) -> None:
    """Write one modality's features in the layout above (atomically), as float32.

    Bad arguments (no videos, a non-2-d array, differing D, an id HDF5 cannot name) are programming
    errors: ValueError.
    """
    if not features:
        raise ValueError("write_video_features needs at least one video")
    arrays = {}
    for video_id, array in features.items():
        if not isinstance(video_id, str) or not video_id or "/" in video_id or video_id == ".":
            raise ValueError(f"video id {video_id!r} cannot name an HDF5 dataset")
        array = np.asarray(array, dtype=np.float32)
        if array.ndim != 2 or array.shape[0] < 1:
            raise ValueError(f"features of {video_id} have shape {array.shape}, expected [T >= 1, D]")
        arrays[video_id] = array
    dims = {a.shape[1] for a in arrays.values()}
    if len(dims) != 1:
        raise ValueError(f"all videos need one feature size D, got {sorted(dims)}")
    with atomic_path(path, suffix=".h5") as tmp:
        with h5py.File(tmp, "w") as h5:
            for video_id in sorted(arrays, key=_natural_key):
                h5.create_dataset(video_id, data=arrays[video_id])
