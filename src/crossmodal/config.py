"""`params.yaml` -> typed, validated, frozen config objects.

Every section is a dataclass; loading walks the YAML and the dataclass fields together, so an unknown or
mistyped key, a wrong type or an out-of-range value fails at once with one line naming the key path
(and the nearest valid key). Stages receive config objects; nothing reads `params.yaml` behind their back.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .io import InputError, load_yaml


# --------------------------------------------------------------------------------------------------
# sections


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


@dataclass(frozen=True)
class HocaFiguresConfig:
    """HOCA's Figs. 5-7 (stage hoca_figures, reports/hoca_figures.py): the L-HOCA-UBT systems of the rank sweep
    (each at its own `model_args.rank`) and the HOCA-UBT line beside them (`full`), the systems whose learning
    curves are drawn, and those whose MAF weights are drawn over one test caption. Each must be a HOCA system."""

    rank_sweep: tuple[str, ...] = ()
    full: str = ""
    curves: tuple[str, ...] = ()
    maf: tuple[str, ...] = ()


@dataclass(frozen=True)
class HocaCostConfig:
    """HOCA's Table 3 (stage hoca_cost): each row (`rows`: row variant -> the system measured) trained for `epochs`
    epochs of `batch_size` clips with `model_args` (the paper's model size) over its system's, in a process of its
    own; its time and its peak memory above the process's memory before the model was built."""

    rows: dict[str, str] = field(default_factory=dict)
    model_args: dict = field(default_factory=dict)
    batch_size: int = 25
    epochs: int = 1

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.epochs < 1:
            raise ValueError("batch_size and epochs must be at least 1")


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


@dataclass(frozen=True)
class ComputeConfig:
    """Where training runs (training/distributed.py): device, mixed precision, DDP processes. Each can change the
    numbers a stage produces, so every training stage depends on this section."""

    device: str = "auto"  # auto (CUDA when available) | cpu | cuda
    amp: bool | str = "auto"  # mixed precision (autocast): true | false | auto (where the device computes bf16
    # natively: a CUDA GPU with bf16, a CPU with AVX-512 BF16 or AMX); changes the numbers
    processes: int = 1  # > 1: the stage relaunches itself under torchrun, one DDP process each
    backend: str = "auto"  # auto (nccl on CUDA, gloo on CPU) | nccl | gloo
    portable: bool = False  # pin the CPU kernel paths (environment.py), so that x86-64 CPUs agree bit for bit

    def __post_init__(self) -> None:
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda, not {self.device!r}")
        if self.backend not in ("auto", "nccl", "gloo"):
            raise ValueError(f"backend must be auto, nccl or gloo, not {self.backend!r}")
        if self.processes < 1:
            raise ValueError("processes must be at least 1")
        if not isinstance(self.amp, bool) and self.amp != "auto":
            raise ValueError(f"amp must be true, false or auto, not {self.amp!r}")


@dataclass(frozen=True)
class RuntimeConfig:
    """How a stage runs, never what it computes: no stage depends on this section (pipelines.py lists none of
    it), so changing it reruns nothing. Lazy reading gives the same batches as in-memory reading (tested); the
    thread count is part of the machine a number was made on (like its CPU), not of the recipe."""

    threads: int = 0  # torch threads per process; 0: min(2, cores per process)
    lazy_features: bool = False  # read features per batch from HDF5 (COCO scale) instead of all at once
    loader_workers: int = 0  # DataLoader worker processes of the lazy reader
    progress: bool = True  # progress bars and per-epoch lines (CROSSMODAL_PROGRESS=0 turns them off too)

    def __post_init__(self) -> None:
        if self.threads < 0 or self.loader_workers < 0:
            raise ValueError("threads and loader_workers must be at least 0")


@dataclass(frozen=True)
class EvaluationConfig:
    beam_size: int = 3
    max_length: int = 16
    batch_size: int = 100
    qualitative_examples: int = 8


@dataclass(frozen=True)
class ScheduledSamplingConfig:
    start_epoch: int = -1  # -1: off
    increase_every: int = 5
    increase_prob: float = 0.05
    max_prob: float = 0.25


SCHEDULES = ("step", "noam", "plateau", "constant", "warmup_step")
OPTIMIZERS = ("adam", "adamw", "sgd", "adamax")


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 0
    max_epochs: int = 10  # the cap: a run never trains more epochs
    patience: int = 0  # early stopping: stop after this many epochs without a better validation value; 0: off
    min_delta: float = 0.0  # early stopping: a better value must beat the best by more than this (the task's
    # metric scale: CIDEr-D 0.01 = 1 point on the tables' x100 scale); the chosen epoch is still the best
    batch_size: int = 50
    optimizer: str = "adam"
    lr: float = 5e-4
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    schedule: str = "step"  # step | noam | plateau | constant | warmup_step (training/schedules.py)
    step_size: int = 3  # step: decay every this many epochs
    gamma: float = 0.8  # step and plateau: decay factor
    plateau_patience: int = 3  # plateau: lr *= gamma after more than this many epochs in a row without a better
    # validation value
    warmup_steps: int = 10000  # noam
    noam_factor: float = 1.0  # noam: lr = factor * model_size^-0.5 * min(s^-0.5, s * warmup^-1.5); `lr` unused
    noam_model_size: int = 1024  # noam
    grad_clip: float = 0.1  # clip by value (the Up-Down/AoANet codes) or by norm, see grad_clip_mode
    grad_clip_mode: str = "value"  # value | norm
    label_smoothing: float = 0.0
    scheduled_sampling: ScheduledSamplingConfig = field(default_factory=ScheduledSamplingConfig)
    decay_start: int = 10  # warmup_step: the first epoch of the decay (BAN: x gamma every step_size epochs from 10)
    samples_per_image: int = 5  # SCST: candidate captions per image (samples, or beams: see scst_candidates)
    scst_candidates: str = "sample"  # SCST: sample (multinomial samples, Rennie et al. and the official codes) |
    # beam (the best beams of a beam search, the meshed-memory Transformer's SCST; training/scst.py)
    scst_baseline: str = "greedy"  # SCST: what a sample's reward is measured against: greedy (the greedy caption's
    # CIDEr-D, Rennie et al.) | mean (the mean CIDEr-D of the image's other samples, Luo 2020)
    val_beam: int = 1  # captioning: the beam that decodes the val split each epoch; 1: greedy, as the official
    # codes validate; the test's beam scores epochs by the captions the tables score (the meshed-memory Transformer)
    caption_rows: str = "repeat"  # cross-entropy captioning: repeat (every item gives as many caption rows as the
    # item with the most references, its own in turn, as the official codes) | once (each reference once: an item
    # gives as many rows as it has references: MSVD's clips have some 40 each, unevenly)

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, not {self.schedule!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, not {self.optimizer!r}")
        if self.scst_candidates not in ("sample", "beam"):
            raise ValueError(f"scst_candidates must be sample or beam, not {self.scst_candidates!r}")
        if self.scst_baseline not in ("greedy", "mean"):
            raise ValueError(f"scst_baseline must be greedy or mean, not {self.scst_baseline!r}")
        if self.caption_rows not in ("repeat", "once"):
            raise ValueError(f"caption_rows must be repeat or once, not {self.caption_rows!r}")
        if self.val_beam < 1:
            raise ValueError(f"val_beam is a beam width (1: greedy), at least 1, not {self.val_beam!r}")
        if self.scst_baseline == "mean" and self.samples_per_image < 2:
            raise ValueError("scst_baseline: mean needs samples_per_image of at least 2")
        if self.grad_clip_mode not in ("value", "norm"):
            raise ValueError(f"grad_clip_mode must be value or norm, not {self.grad_clip_mode!r}")
        if self.max_epochs < 1 or self.batch_size < 1 or self.samples_per_image < 1:
            raise ValueError("max_epochs, batch_size and samples_per_image must be at least 1")
        if self.patience < 0 or self.plateau_patience < 0 or self.min_delta < 0:
            raise ValueError("patience, plateau_patience and min_delta must be at least 0")


OBJECTIVES = ("xe", "scst")
TASKS = ("captioning", "vqa", "grounding")  # a module of tasks/ each


@dataclass(frozen=True)
class SystemConfig:
    """One trained system, resolved: its entry in a paper's `systems` merged over the entries it derives from.

    `objective: xe` trains `model` (a module of models/) from scratch by cross-entropy; `objective: scst`
    continues the best model of the cross-entropy system `init` by self-critical training, so model,
    vocabulary, inputs and model_args are those of `init` and are not stated here. `inputs` maps each named
    input the model consumes to the feature set that feeds it (data/inputs.py).
    """

    objective: str = "xe"
    task: str = "captioning"
    model: str | None = None
    vocabulary: str | None = None  # a key of `vocabularies`: the caption preprocessing of this system's paper
    inputs: dict[str, str] = field(default_factory=lambda: {"regions": "regions"})
    model_args: dict = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)
    init: str | None = None
    beam_size: int | None = None  # test decoding's beam, where its paper's differs from `evaluation.beam_size`

    def __post_init__(self) -> None:
        if self.beam_size is not None and (self.beam_size < 1 or self.task != "captioning"):
            raise ValueError(f"beam_size is a captioning system's beam width (at least 1), not {self.beam_size!r} "
                             f"on a {self.task} system")
        if self.train.val_beam != 1 and self.task != "captioning":
            raise ValueError(f"train.val_beam decodes captions; a {self.task} system validates by its own metric")
        if self.train.caption_rows != "repeat" and (self.task != "captioning" or self.objective != "xe"):
            raise ValueError(f"train.caption_rows chooses cross-entropy captioning's rows, not a {self.task} "
                             f"{self.objective} system's")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, not {self.objective!r}")
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, not {self.task!r}")
        if self.objective == "scst" and self.init is None:
            raise ValueError("an scst system needs `init`, the cross-entropy system it continues")
        if self.objective == "xe" and (self.model is None or self.init is not None):
            raise ValueError("a cross-entropy system needs `model` (and no `init`)")
        if self.objective == "xe" and self.task == "captioning" and self.vocabulary is None:
            raise ValueError("a captioning system needs `vocabulary`")
        if self.task != "captioning" and (self.objective != "xe" or self.vocabulary is not None):
            raise ValueError(f"a {self.task} system trains by cross-entropy (`objective: xe`) on its task's own "
                             "data: no `vocabulary`")


@dataclass(frozen=True)
class EnsembleConfig:
    """Trained systems decoded together by beam search over their averaged log-probabilities: seeds of one system
    (X-LAN's Σ rows fuse four, ETA's "fuse" two) or different systems of one vocabulary and objective (ETA's late
    fusion of Transformer_v and Transformer_s)."""

    members: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.members) < 2 or len(set(self.members)) != len(self.members):
            raise ValueError(f"members must be at least 2 distinct trained systems, got {list(self.members)}")


@dataclass(frozen=True)
class PaperConfig:
    """One paper's section: the systems it trains, in the order its tables list them; the recipes only its own
    systems share; its ensembles; and the transcribed tables (reports/paper_tables/<id>.yaml) its `tables` stage
    builds."""

    systems: dict[str, dict] = field(default_factory=dict)  # raw entries; resolved by `Config.systems`
    recipes: dict[str, dict] = field(default_factory=dict)  # this paper's shared recipes (`Config.recipes`)
    ensembles: dict[str, EnsembleConfig] = field(default_factory=dict)
    tables: tuple[str, ...] = ()


PROFILES = ("synthetic", "real")
REAL_DATA = "COCO 2014 (Karpathy split), bottom-up-attention features"  # what the real profile trains on
PAPERS = ("baselines", "aoanet", "xlan", "eta", "hoca", "ban")  # baselines: systems several papers' tables share
PAPER_KEY = "paper"  # a block of paper-scale overrides, applied under `profile: real` (apply_profile)
MODEL_KEYS = ("model", "vocabulary", "inputs", "model_args", "beam_size")  # an scst system takes these from its `init`
ENTRY_KINDS = ("systems", "recipes")  # the entries `of` may name; recipes train nothing
SEEDS_KEY = "seeds"  # `seeds: n` on a system: it and n - 1 reseeded copies (`expand_seeds`)
ENTRY_ONLY = ("of", PAPER_KEY, SEEDS_KEY)  # keys of an entry that are not values of the system it states


def seed_copy(name: str, k: int) -> str:
    return f"{name}_seed{k}"


def expand_seeds(paper: str, systems: dict) -> tuple[dict, set[str]]:
    """`systems` with every entry that states `seeds: n` followed by its n - 1 reseeded copies, and their names.
    Copy k is `<name>_seed<k>: {of: <name>, train: {seed: k}}`; the copy of an SCST entry (`init: X`) continues
    `X_seed<k>`, so X needs as many seeds. No key of params.yaml states a copy's seed (its name does), so its stage
    takes its base's keys (the init's name included): raising n adds stages and reruns none."""
    out, made = {}, set()
    for name, entry in systems.items():
        out[name] = entry
        n = entry.get(SEEDS_KEY, 1) if isinstance(entry, dict) else 1
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InputError(f"params.yaml: '{paper}.systems.{name}.{SEEDS_KEY}' must be an integer of at least 1, "
                             f"got {n!r}")
        for k in range(1, n):
            copy = {"of": name, "train": {"seed": k}}
            if isinstance(entry.get("init"), str):
                copy["init"] = seed_copy(entry["init"], k)
            if systems.get(seed_copy(name, k), copy) != copy:  # (an expanded section expands to itself)
                raise InputError(f"params.yaml: '{paper}.systems.{seed_copy(name, k)}' is the name of a seed copy of "
                                 f"'{name}' ({SEEDS_KEY}: {n}); rename it or lower {SEEDS_KEY}")
            out[seed_copy(name, k)] = copy
            made.add(seed_copy(name, k))
    return out, made


@dataclass(frozen=True)
class _Leaf:
    """A value of a params entry with the key path that states it (`Config.sources`)."""

    value: Any
    path: str


def _annotate(tree: Any, where: str | None) -> Any:
    """`tree` with each leaf paired with its key path; `where` None: values no key states (a seed copy's)."""
    if isinstance(tree, dict):
        return {k: _annotate(v, None if where is None else f"{where}.{k}") for k, v in tree.items()}
    return _Leaf(tree, where)


def _strip(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _strip(v) for k, v in tree.items()}
    return tree.value


def _leaf_paths(tree: Any) -> list[str]:
    if isinstance(tree, dict):
        return [p for v in tree.values() for p in _leaf_paths(v)]
    return [] if tree.path is None else [tree.path]


def _check_keys(cls: type, data: Any, where: str) -> None:
    """Strict keys and types of a partial entry (a recipe states only some of a system's keys)."""
    if not isinstance(data, dict):
        raise InputError(f"params.yaml: '{where}' must be a mapping, got {type(data).__name__}")
    hints, fields = _hints(cls), {f.name for f in dataclasses.fields(cls)}
    for key, value in data.items():
        if key not in fields:
            raise InputError(f"params.yaml: unknown key '{where}.{key}'{_suggest(str(key), sorted(fields))}")
        _convert(value, hints[key], f"{where}.{key}")  # nested sections (train) have defaults: built in full


@dataclass(frozen=True)
class Config:
    profile: str = "synthetic"  # synthetic (the embedded default) | real (published data, paper scale)
    datasets: dict[str, DatasetConfig] = field(default_factory=dict)
    world: WorldConfig = field(default_factory=WorldConfig)
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    regions: RegionsConfig = field(default_factory=RegionsConfig)
    grid: GridConfig = field(default_factory=GridConfig)
    attributes: AttributesConfig = field(default_factory=AttributesConfig)
    vqa: VqaConfig = field(default_factory=VqaConfig)
    grounding: GroundingConfig = field(default_factory=GroundingConfig)
    word_vectors: WordVectorsConfig = field(default_factory=WordVectorsConfig)
    word2vec: WordVectorsConfig = field(default_factory=lambda: WordVectorsConfig(
        file="GoogleNews-vectors-negative300.bin"))
    video: VideoConfig = field(default_factory=VideoConfig)
    hoca_figures: HocaFiguresConfig = field(default_factory=HocaFiguresConfig)
    hoca_cost: HocaCostConfig = field(default_factory=HocaCostConfig)
    vocabularies: dict[str, CaptionsConfig] = field(default_factory=lambda: {"min5": CaptionsConfig()})
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    recipes: dict[str, dict] = field(default_factory=dict)  # recipes several papers share: abstract, train nothing
    baselines: PaperConfig = field(default_factory=PaperConfig)
    aoanet: PaperConfig = field(default_factory=PaperConfig)
    xlan: PaperConfig = field(default_factory=PaperConfig)
    eta: PaperConfig = field(default_factory=PaperConfig)
    hoca: PaperConfig = field(default_factory=PaperConfig)
    ban: PaperConfig = field(default_factory=PaperConfig)

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {', '.join(PROFILES)}, not {self.profile!r}")
        recipes = {f"recipes.{n}": e for n, e in self.recipes.items()}
        recipes.update({f"{p}.recipes.{n}": e for p in PAPERS for n, e in self.paper(p).recipes.items()})
        for where, entry in recipes.items():
            if isinstance(entry, dict) and SEEDS_KEY in entry:
                raise ValueError(f"'{where}.{SEEDS_KEY}': a recipe trains nothing to seed")
        copies: set[str] = set()
        for paper in PAPERS:
            systems, made = expand_seeds(paper, self.paper(paper).systems)
            object.__setattr__(self, paper, dataclasses.replace(self.paper(paper), systems=systems))
            copies |= made
        object.__setattr__(self, "_copies", copies)
        seen: dict[str, str] = {name: f"recipes.{name}" for name in self.recipes}
        for paper in PAPERS:
            for kind in (*ENTRY_KINDS, "ensembles"):
                for name in getattr(self.paper(paper), kind):
                    if name in seen:
                        raise ValueError(f"'{paper}.{kind}.{name}' reuses the name of '{seen[name]}'; metrics files "
                                         "would collide")
                    seen[name] = f"{paper}.{kind}.{name}"
        object.__setattr__(self, "_where", seen)
        raw = dict(self.recipes)
        for paper in PAPERS:
            for kind in ENTRY_KINDS:
                raw.update(getattr(self.paper(paper), kind))
        object.__setattr__(self, "_raw", raw)  # every entry `of` may name: the systems and the recipes
        object.__setattr__(self, "_merged", {})  # name -> its layers (never mutated once made)
        for name in raw:  # bases first, so that a mistake is reported at the entry that makes it
            for base in reversed(self._bases(name)):
                if base not in self._merged:
                    self._layers(base)
                    if self.is_recipe(base):
                        self._check_recipe(base)
        object.__setattr__(self, "_systems", {name: self._resolve(name) for name in raw if not self.is_recipe(name)})
        for name, system in self._systems.items():
            where = self.where(name)
            if system.objective == "scst":
                init = self._systems.get(system.init)
                if init is None or init.objective != "xe":
                    copy = f" (a seed copy of '{self.where(name.rpartition('_seed')[0])}.{SEEDS_KEY}' continues "\
                        "the same seed of its init, which needs as many seeds)" if name in self._copies else ""
                    raise ValueError(f"'{where}.init' is {system.init!r}, not a cross-entropy system{copy}")
            elif system.task == "captioning" and system.vocabulary not in self.vocabularies:
                raise ValueError(f"'{where}.vocabulary' is {system.vocabulary!r}, not a key of vocabularies "
                                 f"({', '.join(sorted(self.vocabularies))})")
        for name, ensemble in self.ensembles().items():
            where = self.where(name)
            unknown = [m for m in ensemble.members if m not in self._systems]
            if unknown:
                raise ValueError(f"'{where}.members': {unknown[0]!r} is not a trained system")
            if len({self.model_of(m).vocabulary for m in ensemble.members}) > 1:
                raise ValueError(f"'{where}.members' must share one vocabulary")
            other = [m for m in ensemble.members if self._systems[m].task != "captioning"]
            if other:
                raise ValueError(f"'{where}.members': {other[0]!r} is a {self._systems[other[0]].task} system; "
                                 "ensembles decode captions")
            fed = [(n, s) for m in ensemble.members for n, s in self.model_of(m).inputs.items()]
            if len(dict(fed)) < len(set(fed)):
                raise ValueError(f"'{where}.members' feed one named input from different feature sets")
            if len({self._systems[m].objective for m in ensemble.members}) > 1:
                raise ValueError(f"'{where}.members' mix cross-entropy and SCST systems")
            if len({self.model_of(m).beam_size for m in ensemble.members}) > 1:
                raise ValueError(f"'{where}.members' decode with different beam widths (`beam_size`)")

    # ---- systems and their derivation

    def paper(self, name: str) -> PaperConfig:
        return getattr(self, name)

    def is_recipe(self, name: str) -> bool:
        return self.where(name).split(".")[-2] == "recipes"

    def where(self, name: str) -> str:
        """The params.yaml key path of a system, recipe or ensemble, e.g. 'xlan.systems.xlan_enc1'."""
        return self._where[name]

    def paper_of(self, name: str) -> str:
        return self.where(name).split(".")[0]

    def stage(self, name: str) -> str:
        """The DVC address of the stage that trains (or decodes) system or ensemble `name`."""
        return f"pipelines/{self.paper_of(name)}/dvc.yaml:{name}"

    def _bases(self, name: str) -> list[str]:
        """`name` and the valid part of its `of` chain (`_layers` reports a broken or circular one)."""
        out, raw = [name], self._raw
        while isinstance(base := raw[out[-1]].get("of") if isinstance(raw[out[-1]], dict) else None, str) \
                and base in raw and base not in out:
            out.append(base)
        return out

    def chain(self, name: str) -> list[str]:
        """The system and the entries (systems and recipes) it derives from (`of`), nearest first."""
        return self._bases(name)

    def _layers(self, name: str, visiting: tuple[str, ...] = ()) -> tuple[dict, dict]:
        """(synthetic values, paper-scale overrides) of an entry, each merged along its `of` chain, every leaf
        annotated with the key path that states it: an entry states what differs from its base, and its `paper:`
        block what differs at paper scale. A base of another `model` contributes no model_args (its arguments are
        its own). A recipe derives only from recipes; a system from a recipe or from a system of its own paper."""
        if name not in self._merged:
            self._merged[name] = self._merge_layers(name, visiting)
        return self._merged[name]

    def _merge_layers(self, name: str, visiting: tuple[str, ...]) -> tuple[dict, dict]:
        raw, where = self._raw[name], self.where(name)
        if not isinstance(raw, dict):
            raise InputError(f"params.yaml: '{where}' must be a mapping, got {type(raw).__name__}")
        own = _annotate({k: v for k, v in raw.items() if k not in ENTRY_ONLY}, None if name in self._copies else where)
        if name in self._copies and "init" in own:  # a copy's init is named after its base's
            own["init"] = _Leaf(own["init"].value, f"{self.where(raw['of'])}.init")
        paper = raw.get(PAPER_KEY) or {}
        if not isinstance(paper, dict):
            raise InputError(f"params.yaml: '{where}.{PAPER_KEY}' must be a mapping of paper-scale overrides")
        paper = _annotate(paper, f"{where}.{PAPER_KEY}")
        base_name = raw.get("of")
        if base_name is None:
            return own, paper
        if base_name in visiting or base_name == name:
            raise InputError(f"params.yaml: '{where}.of' derives from itself ({' -> '.join((name, *visiting))})")
        if not isinstance(base_name, str) or base_name not in self._raw:
            raise InputError(f"params.yaml: '{where}.of' is {base_name!r}, not a system or recipe"
                             f"{_suggest(str(base_name), list(self._raw))}")
        if not self.is_recipe(base_name):
            if self.is_recipe(name):
                raise InputError(f"params.yaml: '{where}.of' is the trained system {base_name!r}; a recipe derives "
                                 "only from recipes")
            if self.paper_of(base_name) != self.paper_of(name):
                raise InputError(f"params.yaml: '{where}.of' is {base_name!r}, a trained system of another paper "
                                 f"({self.paper_of(base_name)}); derive from the recipe it uses instead")
        base, base_paper = self._layers(base_name, visiting + (name,))
        value = lambda tree, key, default=None: getattr(tree.get(key), "value", default)  # noqa: E731
        if "model" in own and value(own, "model") != value(base, "model"):
            base = {k: v for k, v in base.items() if k != "model_args"}
            base_paper = {k: v for k, v in base_paper.items() if k != "model_args"}
        if value(own, "objective", value(base, "objective", "xe")) != value(base, "objective", "xe"):
            raise InputError(f"params.yaml: '{where}' derives from {base_name!r}, which has another objective")
        return _deep_merge(base, own), _deep_merge(base_paper, paper)

    def _check_recipe(self, name: str) -> None:
        """A recipe trains nothing, so it need not be a whole system; its keys and types are still strict."""
        merged, paper = self._layers(name)
        for tree, where in ((merged, self.where(name)), (paper, f"{self.where(name)}.{PAPER_KEY}")):
            _check_keys(SystemConfig, _strip(tree), where)

    def _annotated(self, name: str) -> dict:
        """The resolved entry (profile applied, derivation merged) with each leaf's key path."""
        merged, paper = self._layers(name)
        return _deep_merge(merged, paper) if self.profile == "real" else merged

    def _resolve(self, name: str) -> SystemConfig:
        where = self.where(name)
        merged = _strip(self._annotated(name))
        if merged.get("objective") == "scst":
            stated = [k for k in MODEL_KEYS if k in merged]
            if stated:
                raise InputError(f"params.yaml: '{where}.{stated[0]}': an scst system uses the model of its init; "
                                 "state it there")
        return build(SystemConfig, merged, where)

    def sources(self, name: str) -> list[str]:
        """The params.yaml key path of every value system `name` takes, where that value is stated: its own
        entry's, its bases' (a key it overrides is its own), the `paper:` blocks' under the real profile, and
        for an SCST system its init's model keys. The stage's params are exactly these (pipelines.py)."""
        own = _leaf_paths(self._annotated(name))
        return own + [p for p in self.model_sources(name) if p not in own] if self._systems[name].init else own

    def model_sources(self, name: str) -> list[str]:
        """The key paths of the model keys (model, vocabulary, inputs, model_args) of `model_name(name)`, after
        the key that names it where `name` continues another system (`init`)."""
        tree = self._annotated(self.model_name(name))
        init = _leaf_paths({"init": self._annotated(name)["init"]}) if self._systems[name].init else []
        return init + _leaf_paths({k: v for k, v in tree.items() if k in MODEL_KEYS})

    def systems(self) -> dict[str, SystemConfig]:
        """Every trained system by name, resolved (profile applied, derivations merged)."""
        return dict(self._systems)

    def ensembles(self) -> dict[str, EnsembleConfig]:
        return {name: e for paper in PAPERS for name, e in self.paper(paper).ensembles.items()}

    def measured_rows(self) -> dict[str, str]:
        """Table rows that a paper's study stage measures instead of a training stage (row -> the system it
        measures), each its own seed group of one: HOCA's Table 3 (`hoca_cost.rows`, stage hoca_cost)."""
        return dict(self.hoca_cost.rows)

    def model_name(self, name: str) -> str:
        """The cross-entropy system whose network `name` trains (itself) or continues (its `init`)."""
        system = self._systems[name]
        return system.init if system.objective == "scst" else name

    def model_of(self, name: str) -> SystemConfig:
        """The config of `model_name(name)`: model, vocabulary, inputs, model_args."""
        return self._systems[self.model_name(name)]

    def beam_size(self, name: str) -> int:
        """The beam that decodes system or ensemble `name` on test: its model's `beam_size`, else the shared
        `evaluation.beam_size` (members of an ensemble share theirs)."""
        first = self.ensembles()[name].members[0] if name not in self._systems else name
        return self.model_of(first).beam_size or self.evaluation.beam_size

    def ensemble_inputs(self, name: str) -> dict[str, str]:
        """The named inputs an ensemble's members read, united: {input: feature set} (they agree where shared)."""
        return {n: s for m in self.ensembles()[name].members for n, s in self.model_of(m).inputs.items()}


# --------------------------------------------------------------------------------------------------
# loading


def _suggest(key: str, allowed: list[str]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    return f" (did you mean '{close[0]}'?)" if close else f" (allowed: {', '.join(allowed)})"


def _convert(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, where)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        if any(o in (bool, str) and isinstance(value, o) for o in options):  # e.g. bool | str: true or "auto"
            return value
        return _convert(value, next(o for o in options if o is not type(None)), where)
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise InputError(f"params.yaml: '{where}' must be a mapping, got {type(value).__name__}")
        args = typing.get_args(tp)
        if not args:
            return dict(value)
        return {k: _convert(v, args[1], f"{where}.{k}") for k, v in value.items()}
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise InputError(f"params.yaml: '{where}' must be a list, got {type(value).__name__}")
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise InputError(f"params.yaml: '{where}' must have {len(args)} entries, got {len(value)}")
        return tuple(_convert(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"params.yaml: '{where}' must be a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"params.yaml: '{where}' must be an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise InputError(f"params.yaml: '{where}' must be true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise InputError(f"params.yaml: '{where}' must be a string, got {value!r}")
        return value
    raise TypeError(f"unsupported config type {tp!r} at {where}")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def build(cls: type, data: Any, where: str = "") -> Any:
    """Build dataclass `cls` from a mapping, rejecting unknown keys and wrong types by key path."""
    label = where or "(top level)"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"params.yaml: '{label}' must be a mapping, got {type(data).__name__}")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in fields:
            raise InputError(f"params.yaml: unknown key '{path}'{_suggest(str(key), list(fields))}")
        kwargs[key] = _convert(value, hints[key], path)
    missing = [
        name for name, f in fields.items()
        if name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise InputError(f"params.yaml: '{label}' is missing required key '{missing[0]}'")
    try:
        return cls(**kwargs)
    except ValueError as err:
        raise InputError(f"params.yaml: '{label}': {err}") from None


def repo_root() -> Path:
    """The root of the workspace a stage runs in: the nearest parent of the cwd holding dvc.yaml.

    Not DVC_ROOT: in queued experiments DVC runs the stage inside a temporary copy but points DVC_ROOT at
    the parent repository, so data paths must follow the working directory (tracking uses DVC_ROOT).
    """
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if (candidate / "dvc.yaml").is_file():
            return candidate
    return here


def origin_root() -> Path:
    """The repository a stage's workspace belongs to: the workspace itself, or, inside a queued experiment's
    temporary copy (`<repo>/.dvc/tmp/exps/...`, where DVC points `DVC_ROOT` at the copy or at the repository), the
    repository it was copied from. MLflow's database lives there, and the downloaded datasets a copy lacks."""
    root = Path(os.environ["DVC_ROOT"]).resolve() if os.environ.get("DVC_ROOT") else repo_root()
    parts = root.parts
    for i in range(len(parts) - 2):
        if parts[i:i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i])
    return root


def apply_profile(tree: Any, real: bool, where: str = "") -> Any:
    """Resolve the `paper:` blocks of a params tree: under the real profile a block is deep-merged over the
    mapping that holds it (its values are the papers' settings), under the synthetic profile it is dropped.
    One switch (`profile`) thus turns every model size and schedule to paper scale, and each paper value sits
    next to the small-world value it replaces."""
    if isinstance(tree, list):
        return [apply_profile(v, real, f"{where}[{k}]") for k, v in enumerate(tree)]
    if not isinstance(tree, dict):
        return tree
    out = {k: apply_profile(v, real, f"{where}.{k}" if where else str(k)) for k, v in tree.items() if k != PAPER_KEY}
    if PAPER_KEY in tree:
        block = tree[PAPER_KEY]
        if not isinstance(block, dict):
            raise InputError(f"params.yaml: '{where + '.' if where else ''}{PAPER_KEY}' must be a mapping of "
                             f"paper-scale overrides, got {type(block).__name__}")
        if real:
            out = _deep_merge(out, apply_profile(block, real, f"{where}.{PAPER_KEY}"))
    return out


def _deep_merge(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        both_maps = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _deep_merge(merged[key], value) if both_maps else value
    return merged


def load(path: str | os.PathLike | None = None) -> Config:
    path = Path(path) if path is not None else repo_root() / "params.yaml"
    if not path.is_file():
        raise InputError(f"missing parameter file: {path}")
    try:
        data = load_yaml(path.read_text())
    except yaml.YAMLError as err:
        raise InputError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    return from_data(data)


def from_data(data: Any) -> Config:
    """The config of a parsed params.yaml tree (not modified)."""
    if isinstance(data, dict):
        # entries' paper blocks merge along `of` chains (Config._layers), not where they stand
        data = {k: dict(v) if k in PAPERS and isinstance(v, dict) else v for k, v in data.items()}
        entries = {(paper, kind): section.pop(kind) for paper, section in data.items()
                   if paper in PAPERS and isinstance(section, dict) for kind in ENTRY_KINDS if kind in section}
        recipes = data.pop("recipes", None)
        data = apply_profile(data, data.get("profile") == "real")
        for (paper, kind), values in entries.items():
            data[paper][kind] = values
        if recipes is not None:
            data["recipes"] = recipes
    return build(Config, data)


def to_dict(obj: Any) -> Any:
    """Plain nested dict/list view of a config object (for logging and hashing)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """`{'a': {'b': 1}}` -> `{'a.b': 1}`; lists are kept as values."""
    plain = to_dict(obj)
    out: dict[str, Any] = {}
    if isinstance(plain, dict):
        for k, v in plain.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v:
                out.update(flatten(v, key))
            else:
                out[key] = v
    return out
