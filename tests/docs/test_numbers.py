"""The numbers the docs print, checked against the files they come from: a test fails when a doc's number
disagrees with its source.

1. Each check reads one source (a results file in `reports/metrics/` or a benchmark's JSON in
   `benchmarks/results/`) and returns the fragments that a docs page must contain, each with the number formatted as
   the page prints it.
2. A page is compared with its whitespace collapsed, so a fragment may cross a line break of the Markdown source.
3. The checks run on the repository's files, and once more on altered copies of the sources, to show that a changed
   source makes them fail.
"""
from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
KARPATHY_TRAIN_IMAGES = 113_287  # train + restval of the Karpathy split (docs/real-data.md)
GPU_SCHEDULES = [  # (model, phase, epochs, batch, step key): the papers' schedules of docs/howto.md's table
    ("xlan", "cross-entropy", 70, 40, "train_step_s"),
    ("xlan", "SCST (sampled, the paper's)", 35, 40, "scst_sample_step_s"),
    ("aoanet", "cross-entropy", 30, 10, "train_step_s"),
    ("aoanet", "SCST (sampled, the paper's)", 15, 10, "scst_sample_step_s"),
]
MODEL_ROWS = {"updown": "Up-Down", "aoanet": "AoANet", "xlan": "X-LAN", "xtransformer": "X-Transformer",
              "eta": "ETA-Transformer"}
SOURCES = ["reports/metrics/data_profile.json", "reports/metrics/backbone.json", "benchmarks/results/calibration.json",
           "benchmarks/results/models.json", "benchmarks/results/models_cuda.json",
           "reports/metrics/cost_hoca_u.json", "reports/metrics/cost_hoca_ubt.json",
           "reports/metrics/cost_l_hoca_ubt.json"]


def _load(root: Path, name: str) -> dict:
    return json.loads((root / name).read_text())


def _cells(*values: object) -> str:
    """The inner cells of a Markdown table row: `| a | b |` without its first cell."""
    return " | ".join(str(v) for v in values) + " |"


def world_profile(root: Path) -> list[str]:
    """1. synthetic-worlds.md's table of the image world, from its data profile."""
    s = _load(root, "reports/metrics/data_profile.json")["summary"]
    images, rel = s["images"], s["relations"]
    return [f"| images (train / val / test) | {images['train']} / {images['val']} / {images['test']} |",
            f"| captions | {s['captions']:,} |", f"| vocabulary | {s['vocabulary_size']} words |",
            f"| caption length | {s['mean_caption_length']:.1f} words on average, at most {s['max_caption_length']} |",
            f"| objects per image | {s['mean_objects']:.1f} on average |",
            f"| relations | left of / right of {rel['left of']:,} each, above / below {rel['above']:,} each, "
            f"next to {rel['next to']:,}, on {rel['on']:,} |"]


def backbone_accuracy(root: Path) -> list[str]:
    """2. synthetic-worlds.md's backbone accuracies against chance."""
    b = _load(root, "reports/metrics/backbone.json")
    rows = {"class": "class (shape)", "color": "colour", "size": "size", "texture": "texture"}
    return [f"| {label} | {b['accuracy'][key]:.3f} | {b['chance'][key]:.3f} |" for key, label in rows.items()]


def calibration(root: Path) -> list[str]:
    """3. performance.md's retrain machine and its calibration factor."""
    c = _load(root, "benchmarks/results/calibration.json")
    return [f"family {c['machine']['family']}, model {c['machine']['model']}",
            f"calibration factor {c['factor']:.3f}", f"its seconds are {c['factor']:.3f} of the reference"]


def model_sizes(root: Path) -> list[str]:
    """4. performance.md's table of the papers' model sizes, CPU (models.json) beside GPU (models_cuda.json)."""
    cpu, gpu = (_load(root, f"benchmarks/results/{n}.json")["models"] for n in ("models", "models_cuda"))
    return [_cells(gpu[m]["parameters_M"], gpu[m]["batch_images"], cpu[m]["train_step_s"], cpu[m]["peak_GiB"],
                   gpu[m]["train_step_s"], gpu[m]["peak_GiB"]) for m in MODEL_ROWS]


def gpu_hours(root: Path) -> list[str]:
    """5. howto.md's expected hours on a GPU: steps per epoch x epochs x the measured step, and the peak memory."""
    gpu = _load(root, "benchmarks/results/models_cuda.json")["models"]
    found = []
    for model, phase, epochs, batch, key in GPU_SCHEDULES:
        steps = math.ceil(KARPATHY_TRAIN_IMAGES / batch)
        hours = steps * epochs * gpu[model][key] / 3600
        memory = f" {gpu[model]['peak_GiB']} GiB |" if key == "train_step_s" else " |"
        found.append(f"{MODEL_ROWS[model]}, {phase} | {epochs} epochs, batch {batch} | {steps:,} | {hours:.1f} h |{memory}")
    return found


def hoca_cost_ratios(root: Path) -> list[str]:
    """6. results.md's ratios of HOCA's Table 3, ours from the cost stage's measurements."""
    cost = {n: _load(root, f"reports/metrics/cost_{n}.json")["test"] for n in ("hoca_u", "hoca_ubt", "l_hoca_ubt")}
    low = cost["l_hoca_ubt"]
    return [f"| L-HOCA-UBT / {label} | {low['space_gib'] / cost[n]['space_gib']:.2f} | "
            f"{low['train_seconds'] / cost[n]['train_seconds']:.2f} |" for n, label in (("hoca_ubt", "HOCA-UBT"),
                                                                                       ("hoca_u", "HOCA-U"))]


CHECKS = {"synthetic-worlds.md": [world_profile, backbone_accuracy], "performance.md": [calibration, model_sizes],
          "howto.md": [gpu_hours], "results.md": [hoca_cost_ratios]}


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def missing(root: Path) -> list[str]:
    """Every fragment that the checks derive from the sources under `root` and the page does not contain."""
    errors = []
    for page, checks in CHECKS.items():
        text = _flat((DOCS / page).read_text())
        errors += [f"{page}: {fragment!r} ({check.__name__})" for check in checks for fragment in check(root)
                   if _flat(fragment) not in text]
    return errors


def test_every_checked_number_agrees_with_its_source():
    assert missing(ROOT) == []


def test_models_table_names_its_rows():
    text = (DOCS / "performance.md").read_text()
    for row in MODEL_ROWS.values():
        assert f"| {row} " in text, row


@pytest.mark.parametrize("source", SOURCES)
def test_a_changed_source_fails_the_check(tmp_path, source):
    for name in SOURCES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    data = json.loads((tmp_path / source).read_text())
    _scale_numbers(data)
    (tmp_path / source).write_text(json.dumps(data))
    assert missing(tmp_path), f"altering {source} went unnoticed"


def _scale_numbers(node: object) -> object:
    """Every float and int of a JSON tree times 1.37 (a float stays a float), in place where it is a container."""
    if isinstance(node, dict):
        for key, value in node.items():
            node[key] = _scale_numbers(value)
    elif isinstance(node, list):
        node[:] = [_scale_numbers(v) for v in node]
    elif isinstance(node, bool) or not isinstance(node, (int, float)):
        return node
    elif isinstance(node, int):
        return node * 3 + 1
    else:
        return round(node * 1.37 + 0.011, 4)
    return node
