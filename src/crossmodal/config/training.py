"""The sections of training: a system's recipe (`train`, with its scheduled sampling and its self-critical
objective's settings, `train.scst`), a trained system resolved from its paper's `systems` entry (`SystemConfig`),
ensembles, and a paper's section (`PaperConfig`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..task_specs import DEFAULT, SPECS


@dataclass(frozen=True)
class ScheduledSamplingConfig:
    start_epoch: int = -1  # -1: off
    increase_every: int = 5
    increase_prob: float = 0.05
    max_prob: float = 0.25


@dataclass(frozen=True)
class ScstConfig:
    """Self-critical training's settings (`train.scst`, read by tasks/objectives/scst.py only): the candidate
    captions drawn per image, how they are drawn, and the baseline their rewards are measured against."""

    samples: int = 5  # candidate captions per image (samples, or beams: see candidates)
    candidates: str = "sample"  # sample (multinomial samples, Rennie et al. and the official codes) | beam (the best
    # beams of a beam search, the meshed-memory Transformer's SCST; tasks/objectives/scst.py)
    baseline: str = "greedy"  # what a sample's reward is measured against: greedy (the greedy caption's CIDEr-D,
    # Rennie et al.) | mean (the mean CIDEr-D of the image's other samples, Luo 2020)

    def __post_init__(self) -> None:
        if self.candidates not in ("sample", "beam"):
            raise ValueError(f"candidates must be sample or beam, not {self.candidates!r}")
        if self.baseline not in ("greedy", "mean"):
            raise ValueError(f"baseline must be greedy or mean, not {self.baseline!r}")
        if self.samples < 1:
            raise ValueError(f"samples must be at least 1, not {self.samples!r}")
        if self.baseline == "mean" and self.samples < 2:
            raise ValueError("baseline: mean needs samples of at least 2")


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
    scst: ScstConfig = field(default_factory=ScstConfig)  # self-critical training (`objective: scst`)
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
        if self.caption_rows not in ("repeat", "once"):
            raise ValueError(f"caption_rows must be repeat or once, not {self.caption_rows!r}")
        if self.val_beam < 1:
            raise ValueError(f"val_beam is a beam width (1: greedy), at least 1, not {self.val_beam!r}")
        if self.grad_clip_mode not in ("value", "norm"):
            raise ValueError(f"grad_clip_mode must be value or norm, not {self.grad_clip_mode!r}")
        if self.max_epochs < 1 or self.batch_size < 1:
            raise ValueError("max_epochs and batch_size must be at least 1")
        if self.patience < 0 or self.plateau_patience < 0 or self.min_delta < 0:
            raise ValueError("patience, plateau_patience and min_delta must be at least 0")


OBJECTIVES = ("xe", "scst")
TASKS = tuple(SPECS)  # a spec in task_specs.py and a module of tasks/ each


@dataclass(frozen=True)
class SystemConfig:
    """One trained system, resolved: its entry in a paper's `systems` merged over the entries it derives from.

    `objective: xe` trains `model` (a module of models/) from scratch by cross-entropy; `objective: scst`
    continues the best model of the cross-entropy system `init` by self-critical training, so model,
    vocabulary, inputs and model_args are those of `init` and are not stated here. `inputs` maps each named
    input the model consumes to the feature set that feeds it (data/inputs.py).
    """

    objective: str = "xe"
    task: str = DEFAULT.name
    model: str | None = None
    vocabulary: str | None = None  # a key of `vocabularies`: the caption preprocessing of this system's paper
    inputs: dict[str, str] = field(default_factory=lambda: {"regions": "regions"})
    model_args: dict = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)
    init: str | None = None
    beam_size: int | None = None  # test decoding's beam, where its paper's differs from `evaluation.beam_size`

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, not {self.task!r}")
        captions = SPECS[self.task].captions  # a task that decodes captions (task_specs.py): captioning's rules
        if self.beam_size is not None and (self.beam_size < 1 or not captions):
            raise ValueError(f"beam_size is a captioning system's beam width (at least 1), not {self.beam_size!r} "
                             f"on a {self.task} system")
        if self.train.val_beam != 1 and not captions:
            raise ValueError(f"train.val_beam decodes captions; a {self.task} system validates by its own metric")
        if self.train.caption_rows != "repeat" and (not captions or self.objective != "xe"):
            raise ValueError(f"train.caption_rows chooses cross-entropy captioning's rows, not a {self.task} "
                             f"{self.objective} system's")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, not {self.objective!r}")
        if self.objective == "scst" and self.init is None:
            raise ValueError("an scst system needs `init`, the cross-entropy system it continues")
        if self.objective == "xe" and (self.model is None or self.init is not None):
            raise ValueError("a cross-entropy system needs `model` (and no `init`)")
        if self.objective == "xe" and captions and self.vocabulary is None:
            raise ValueError("a captioning system needs `vocabulary`")
        if not captions and (self.objective != "xe" or self.vocabulary is not None):
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
    systems share; its ensembles; the transcribed tables (papers/<paper>/tables/<id>.yaml) its `tables` stage
    builds; and its own sections (`studies`)."""

    systems: dict[str, dict] = field(default_factory=dict)  # raw entries; resolved by `Config.systems`
    recipes: dict[str, dict] = field(default_factory=dict)  # this paper's shared recipes (`Config.recipes`)
    ensembles: dict[str, EnsembleConfig] = field(default_factory=dict)
    tables: tuple[str, ...] = ()
    studies: dict[str, dict] = field(default_factory=dict)  # the paper's own sections, whose schemas its package
    # defines and checks (papers/<paper>/paper.py `studies`); a study's `rows` (row -> system) are table rows it
    # measures instead of training them (`Config.measured_rows`)
