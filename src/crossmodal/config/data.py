"""The sections of the data: the published datasets of the real profile (`datasets`), the synthetic worlds
(`world`, `vqa`, `grounding`, `video.world`) and the caption vocabularies (`vocabularies`).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RemoteFile:
    """One published file of a dataset (params.yaml `datasets`); data/download.py fetches and verifies it."""

    url: str | None  # None: no stable public link is known; the file must be placed by hand
    sha256: str | None = None  # the publisher's or a checked copy's; None: the first verified download records it
    size: int | None = None  # bytes, when known
    name: str | None = None  # file name in data/raw/<dataset>/; default: the URL's last path component
    extract: bool = False  # a zip or tar archive, unpacked into data/raw/<dataset>/ once verified

    def __post_init__(self) -> None:
        if self.url is None and self.name is None:
            raise ValueError("a file without url needs a name (where the manual copy goes)")
        if self.sha256 is not None:
            digest = self.sha256.strip().lower()
            if len(digest) != 64 or set(digest) - set("0123456789abcdef"):
                raise ValueError(f"sha256 must be 64 hexadecimal digits, got {self.sha256!r}")
            object.__setattr__(self, "sha256", digest)
        if self.size is not None and self.size < 0:
            raise ValueError(f"size must be >= 0, got {self.size}")


@dataclass(frozen=True)
class DatasetConfig:
    """A published dataset of the real profile: what it is, its files, and whether `profile: real` fetches it."""

    description: str
    files: tuple[RemoteFile, ...]
    fetch: bool = True  # false: not needed by the pipelines built so far; set true to download it

    def __post_init__(self) -> None:
        if not self.files:
            raise ValueError("files must list at least one file")


REAL_DATA = "COCO 2014 (Karpathy split), bottom-up-attention features"  # what the real profile trains on


@dataclass(frozen=True)
class SplitSizes:
    train: int = 1500
    val: int = 250
    test: int = 250

    def __post_init__(self) -> None:
        for name in ("train", "val", "test"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")


@dataclass(frozen=True)
class WorldConfig:
    """The synthetic image world: rendered scenes, scene graphs and five captions per image."""

    seed: int = 0
    images: SplitSizes = field(default_factory=SplitSizes)
    image_size: int = 96
    min_objects: int = 2
    max_objects: int = 4
    shapes: tuple[str, ...] = ("circle", "square", "triangle", "diamond", "cross", "star")
    colors: tuple[str, ...] = ("red", "green", "blue", "yellow", "purple", "orange", "white", "gray")
    sizes: tuple[str, ...] = ("small", "large")
    textures: tuple[str, ...] = ("plain", "striped", "dotted", "checkered")
    references_per_image: int = 5

    def __post_init__(self) -> None:
        if not 1 <= self.min_objects <= self.max_objects:
            raise ValueError("need 1 <= min_objects <= max_objects")
        if self.image_size < 32:
            raise ValueError("image_size must be at least 32")
        if self.references_per_image < 2:
            raise ValueError("references_per_image must be at least 2 (the human ceiling needs it)")


@dataclass(frozen=True)
class VqaWorldSettings:
    """The VQA world over the image world's scenes (stage synthesize_vqa; worlds/vqa_world.py): questions per
    image, and the model of annotator disagreement: per answer type the mean chance that one annotator answers
    right, the Beta concentration of a question's difficulty, and the share of loosely written answers."""

    seed: int = 0
    questions_per_image: int = 6
    accuracy: dict[str, float] = field(default_factory=lambda: {"yes/no": 0.9, "number": 0.75, "other": 0.8})
    concentration: float = 4.0
    loose_answers: float = 0.05


@dataclass(frozen=True)
class VqaConfig:
    """VQA data (stages synthesize_vqa and prepro_vqa): the world, and BAN's preprocessing: answers that are the
    majority answer of at least `min_answer_count` train + val questions (9 on VQA v2: 3,129 answers), questions
    cut to `question_length` tokens (14)."""

    world: VqaWorldSettings = field(default_factory=VqaWorldSettings)
    min_answer_count: int = 9
    question_length: int = 14

    def __post_init__(self) -> None:
        if self.min_answer_count < 1 or self.question_length < 1:
            raise ValueError("min_answer_count and question_length must be >= 1")


@dataclass(frozen=True)
class GroundingWorldSettings:
    """The grounding world over the image world's scenes (stage synthesize_grounding; worlds/grounding_world.py,
    `GroundingWorldConfig`): its seed and the sentences of each image (Flickr30k Entities: five)."""

    seed: int = 0
    sentences_per_image: int = 5


@dataclass(frozen=True)
class GroundingConfig:
    """Phrase-grounding data (stages synthesize_grounding and prepro_grounding): the world, and BAN's preprocessing:
    sentences cut to `sentence_length` tokens (the official `max_length`, 82)."""

    world: GroundingWorldSettings = field(default_factory=GroundingWorldSettings)
    sentence_length: int = 82

    def __post_init__(self) -> None:
        if self.sentence_length < 1 or self.world.sentences_per_image < 1:
            raise ValueError("sentence_length and world.sentences_per_image must be >= 1")


VIDEO_DATASETS = ("msvd", "msrvtt")  # the video world's two datasets (worlds/video_world.py), HOCA's data
CORPORA = ("images", *VIDEO_DATASETS)  # what a vocabulary's captions describe


@dataclass(frozen=True)
class VideoWorldConfig:
    """The video world (stage synthesize_video; worlds/video_world.py). `clips`: per dataset; `captions_per_clip`:
    MSVD-like clips get between half and all of their number (about 40 on MSVD), MSR-VTT-like exactly it (20);
    frames, frame rate, frame size, audio rate, the share of clips with a silent twin, and the audio's white-noise
    amplitude (strikes peak near 0.5)."""

    seed: int = 0
    clips: dict[str, int] = field(default_factory=lambda: {"msvd": 200, "msrvtt": 400})
    captions_per_clip: dict[str, int] = field(default_factory=lambda: {"msvd": 30, "msrvtt": 20})
    frames: int = 32
    fps: int = 8
    frame_size: int = 64
    sample_rate: int = 16000
    twin_probability: float = 0.5
    noise: float = 0.02

    def __post_init__(self) -> None:
        if set(self.clips) != set(VIDEO_DATASETS) or set(self.captions_per_clip) != set(VIDEO_DATASETS):
            raise ValueError(f"clips and captions_per_clip need exactly {', '.join(VIDEO_DATASETS)}")
        if min(self.clips.values()) < 10:
            raise ValueError("each dataset needs at least 10 clips (every split needs one)")
        if min(self.captions_per_clip.values()) < 2:
            raise ValueError("captions_per_clip must be at least 2")
        if self.frames < 8 or self.fps < 1 or self.frame_size < 32:
            raise ValueError("need frames >= 8, fps >= 1, frame_size >= 32")

    @property
    def duration(self) -> float:
        return self.frames / self.fps


@dataclass(frozen=True)
class CaptionsConfig:
    """One vocabulary convention: words seen at least `min_word_count` times in training, captions cut to
    `max_length` words (params.yaml `vocabularies`, one processed caption set each), of the captions of `corpus`:
    the image world's (stage prepro_captions) or one video dataset's (stage prepro_video)."""

    min_word_count: int = 5
    max_length: int = 16
    corpus: str = "images"

    def __post_init__(self) -> None:
        if self.corpus not in CORPORA:
            raise ValueError(f"corpus must be one of {', '.join(CORPORA)}, not {self.corpus!r}")
