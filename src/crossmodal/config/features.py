"""The sections of the feature extractors: the backbone and its region and grid features, ETA's attribute
detector, the word vectors, and the video world's three extractors (`video`, with its world from data.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .data import VideoWorldConfig


@dataclass(frozen=True)
class BackboneConfig:
    """Small CNN + RoI head pretrained on the world's classes and attributes (Faster R-CNN analogue)."""

    seed: int = 0
    channels: int = 32
    feature_dim: int = 128
    roi_size: int = 7
    epochs: int = 4
    batch_size: int = 32
    lr: float = 2e-3
    background_boxes: int = 2


PUBLISHED_REGIONS = {"butd_adaptive": (10, 100), "butd_fixed36": (36, 36)}  # feature set -> boxes per image


@dataclass(frozen=True)
class RegionsConfig:
    """Proposal boxes: jittered ground truth plus distractors, a varying number per image."""

    seed: int = 0
    jitter: float = 0.1
    min_distractors: int = 1
    max_distractors: int = 6
    published: str = "butd_adaptive"  # profile real: the bottom-up feature set converted instead
    published_boxes: tuple[int, int] | None = None  # boxes per image the conversion insists on; None: the set's own

    def __post_init__(self) -> None:
        if self.published not in PUBLISHED_REGIONS:
            raise ValueError(f"published must be one of {', '.join(PUBLISHED_REGIONS)}, not {self.published!r}")
        if self.published_boxes is not None and not 1 <= self.published_boxes[0] <= self.published_boxes[1]:
            raise ValueError(f"published_boxes must be [min, max] with 1 <= min <= max, got {self.published_boxes}")

    @property
    def box_range(self) -> tuple[int, int]:
        return self.published_boxes or PUBLISHED_REGIONS[self.published]


@dataclass(frozen=True)
class GridConfig:
    """Grid features (stage extract_grid, the feature set `grid`): the backbone's last convolutional map,
    adaptively average-pooled to `size` x `size` cells, one row per cell (ETA Table 4: VGG-16 conv5 at 7 x 7)."""

    size: int = 7

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"size must be >= 1, got {self.size}")


@dataclass(frozen=True)
class AttributesConfig:
    """The attribute detector (stage train_attributes; Fang et al. 2015, as ETA §5.2 uses it): multiple-instance
    learning with a noisy-OR over the backbone's grid cells, fine-tuned from the backbone, over the `words` most
    frequent training-caption words of `vocabulary` less `exclude`. Its outputs are the feature sets `attributes`
    (the `top_k` detected words with their probabilities) and `attributes_oracle` (the `top_k` most frequent
    listed words of the image's own captions)."""

    seed: int = 0
    vocabulary: str = "min5"  # the caption vocabulary whose word ids the feature sets hold
    words: int = 1000  # K
    exclude: str = ""  # words never used as attributes, space-separated (a list would turn "on" into a boolean)
    top_k: int = 10
    hidden_dim: int = 256
    epochs: int = 10  # the cap when patience > 0
    patience: int = 0  # epochs without a gain of more than min_delta in validation mAP that end the run; 0: never
    min_delta: float = 0.0
    batch_size: int = 32
    lr: float = 1e-3
    trunk_lr: float = 1e-4  # the fine-tuned backbone trunk's learning rate

    def __post_init__(self) -> None:
        if min(self.words, self.top_k, self.hidden_dim, self.epochs, self.batch_size) < 1:
            raise ValueError("words, top_k, hidden_dim, epochs and batch_size must be >= 1")
        if self.patience < 0 or self.min_delta < 0:
            raise ValueError("patience and min_delta must be >= 0")


@dataclass(frozen=True)
class WordVectorsConfig:
    """Word vectors in the published vectors' role (stage word_vectors, features/word_vectors.py): on the synthetic
    profile skip-gram vectors trained on the worlds' training text; under the real profile the published `file` of
    the download (section `word_vectors`: GloVe, dataset `glove`, BAN's questions and sentences; section `word2vec`:
    word2vec's GoogleNews vectors, dataset `word2vec`, the video captions of HOCA), restricted to the words used."""

    dim: int = 300
    epochs: int = 10
    window: int = 5
    negative: int = 5
    seed: int = 0
    file: str = "glove.6B.300d.txt"

    def __post_init__(self) -> None:
        if min(self.dim, self.epochs, self.window, self.negative) < 1:
            raise ValueError("dim, epochs, window and negative must be >= 1")


VIDEO_MODALITIES = ("frames", "motion", "audio")  # HOCA's F, M, S


@dataclass(frozen=True)
class VideoFeatureConfig:
    """The three video feature extractors (stages extract_frames, extract_motion, extract_audio; features/video.py):
    T sampled frames per clip (paper: 80), the motion chunk's frames (I3D: 64), the audio window in seconds (VGGish:
    0.96) and its mel bands (64), each modality's feature width, the first convolution's channels (then 2x, 4x), and
    the networks' training (early stopping on the val clips with `patience` > 0, as the attribute detector)."""

    seed: int = 0
    frames_per_clip: int = 8
    chunk_frames: int = 8
    audio_window: float = 0.5
    mels: int = 32
    dims: dict[str, int] = field(default_factory=lambda: {"frames": 128, "motion": 64, "audio": 64})
    channels: int = 16
    epochs: int = 12  # the cap when patience > 0
    patience: int = 0  # epochs without a gain of more than min_delta in validation accuracy that end a run; 0: never
    min_delta: float = 0.0
    batch_size: int = 32
    lr: float = 0.002

    def __post_init__(self) -> None:
        if self.patience < 0 or self.min_delta < 0:
            raise ValueError("patience and min_delta must be >= 0")
        if set(self.dims) != set(VIDEO_MODALITIES):
            raise ValueError(f"dims needs exactly {', '.join(VIDEO_MODALITIES)}")
        if self.frames_per_clip < 1 or self.chunk_frames < 2 or self.chunk_frames % 2:
            raise ValueError("frames_per_clip must be >= 1 and chunk_frames even and >= 2")


@dataclass(frozen=True)
class VideoConfig:
    """Video data for HOCA: the world (`world`) and the feature extractors (`features`)."""

    world: VideoWorldConfig = field(default_factory=VideoWorldConfig)
    features: VideoFeatureConfig = field(default_factory=VideoFeatureConfig)
