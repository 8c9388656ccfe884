"""What each task declares, without torch: whether it decodes captions (its systems' rules in params.yaml), its
validation metric and the figures' labels of it, the table of its systems in reports/index.md, and the names of the
worlds its claims are judged on. The task modules (tasks/captioning.py, vqa.py, grounding.py) take their metric from
here; the config, the model registry, the pipeline generator and the reports read only this module, so that none of
them names a task and drawing a page loads no model. A new task adds its spec here, its module in tasks/ and, if its
world has stages of its own, `tasks/<task>_stages.py` (`stages(cfg)` and `text(cfg)`, the pipeline generator's)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from . import paths


@dataclass(frozen=True)
class TaskSpec:
    name: str
    metric: str  # the validation metric the best epoch maximises: the metrics file's history key
    metric_labels: tuple[str, str]  # the figures' (axis label, short label) of it, x100
    heading: str  # reports/index.md's heading of the task's trained systems
    columns: tuple[tuple[str, str], ...]  # that table's test metrics: (metric key, column label)
    worlds: Mapping[str, str]  # the claims' world keys -> their names (reports/claims.py)
    captions: bool = False  # it decodes captions: its systems state a vocabulary, decode with a beam, may continue
    # by SCST (objectives) and join ensembles, and start from word2vec's vectors; its models define `MODEL`
    per_corpus: bool = False  # a system's world is its vocabulary's corpus (captioning), else the task's name
    data: tuple[Path, ...] = ()  # what a system reads besides its features (a captioner: its vocabulary's captions)
    real_data: tuple[str, ...] = ()  # downloads a system reads too under the real profile
    region_datasets: tuple[str, ...] = ()  # real profile: datasets whose images' regions join extract_regions'


CAPTIONING = TaskSpec(
    "captioning", "val_CIDEr", ("validation CIDEr-D (x100)", "CIDEr-D (x100)"), "Captioning",
    (("BLEU-4", "B@4"), ("METEOR", "METEOR"), ("CIDEr", "CIDEr-D")),
    {"images": "image captioning", "msvd": "video captioning, MSVD-like", "msrvtt": "video captioning, MSR-VTT-like"},
    captions=True, per_corpus=True)
VQA = TaskSpec("vqa", "val_score", ("validation VQA score (x100)", "VQA score (x100)"), "VQA",
               (("overall", "overall"), ("yes/no", "yes/no"), ("number", "number"), ("other", "other")),
               {"vqa": "VQA"}, data=(paths.VQA, paths.VQA_WORLD), real_data=("vqa_v2",))  # the world's server/:
# the answers test-dev is scored on (real: val2014's)
GROUNDING = TaskSpec("grounding", "val_recall", ("validation R@1 (x100)", "R@1 (x100)"), "Phrase grounding",
                     (("R@1", "R@1"), ("R@5", "R@5"), ("R@10", "R@10")), {"grounding": "grounding"},
                     data=(paths.GROUNDING,), region_datasets=("flickr30k_features",))  # real: Flickr30k's boxes

SPECS = {spec.name: spec for spec in (CAPTIONING, VQA, GROUNDING)}  # the order of reports/index.md's tables
DEFAULT = CAPTIONING  # the task of a system, or a metrics file, that names none (config.training.SystemConfig)
