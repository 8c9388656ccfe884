"""`python -m crossmodal pipelines`: write the DVC stage files from params.yaml and the code's import graph.

- `dvc.yaml` (the root) holds the stages every paper shares: `code` (the code closures, below), `params` (each
  stage's params values, below), downloads, the
  synthetic world, caption preprocessing, backbone, region features, reference points, and `index`
  (reports/index.md), which depends on every paper's tables, so that `dvc repro` at the root rebuilds everything.
- `pipelines/<paper>/dvc.yaml` holds one stage per system and ensemble of that params section, in params order,
  and the paper's `tables` stage. `dvc repro pipelines/<paper>/dvc.yaml` rebuilds that paper and what it needs.

Exact dependencies. A stage depends on the params it reads (a system: each value its resolved configuration
takes, at the key path where it is stated along its `of` chain, and its model's keys when it continues another
system; `evaluation`, `compute`, `profile`, its vocabulary), through one file, `data/params/[<paper>/]<stage>.json`,
that the `params` stage writes with those values (stages/params.py); and on the code its command runs, its import
closure (pipeline/closures.py), through one file, `data/code/<closure key>.txt`, that the `code` stage writes with
the MD5 of each file of the closure. A change reruns exactly the stages whose values file or closure it changes
(after `params` or `code`, a second each); a file no closure imports reruns nothing. `runtime` is read by every
stage but is in no values file: it cannot change results.

Run-cache. Every stage but three kinds is one DVC's run-cache can restore (a fresh clone that shares the machine's
DVC cache, scripts/setup.sh, restores a finished stage instead of running it): git-tracked JSON outputs are declared
`metrics`, figures `plots`. Not run-cached, by design: `download-*` (its folder persists, a resumed download's part
files with it, and is not cached: data/raw is large), `tables` and `index` (their Markdown and CSV files are neither
metrics nor plots DVC can read; declared so, `dvc plots show` would fail on each; they take seconds, and `index`
also tags the MLflow runs of the clone it runs in). tests/end_to_end/test_machine_cache.py checks DVC's condition on
each stage.

The files are generated, not written by hand: after adding or removing a system, run this command (a test and
`--check` fail while a stage file differs from what params.yaml and the code say).
"""
from __future__ import annotations

import importlib
from pathlib import Path

import yaml

from . import paths
from .config.data import VIDEO_DATASETS
from .config.features import VIDEO_MODALITIES
from .config.loader import Config
from .io import InputError, load_yaml, write_text
from .papers.registry import papers
from .pipeline import closures
from .pipeline.stage_spec import (SHARED_PARAMS, dedupe, grouped, manifest, model_data, stage, stage_code,
                                  system_params, world_file)
from .task_specs import SPECS

IMPORTS_EACH = ("papers/*/pipeline.py", "tasks/*_stages.py")  # what `study_stages` and `task_stages` import by
# name: each paper's own stage builder, each task's world stages
PARAMS_FILE = "params.yaml"  # the params file, which DVC reads by default
HEADER = ("# Written by `python -m crossmodal pipelines` from params.yaml and the code's imports: do not edit by hand.\n"
          "# {what}\n")
ATTRIBUTE_SETS = ("attributes", "attributes_oracle")  # the feature sets stage train_attributes writes


def pipeline_file(paper: str) -> Path:
    return Path("pipelines") / paper / "dvc.yaml"


def code_stage(stage_files: list[dict]) -> dict:
    """The `code` stage: every closure the other stages depend on, and the source files those closures hold
    (and its own). It also depends on params.yaml, since a system, ensemble or table added, removed or derived
    differently changes what the stage files must list: it checks them first (a second), so a change that needs
    `python -m crossmodal pipelines` stops the repro instead of leaving a stale result."""
    keys = sorted({Path(d).stem for stages in stage_files for stage in stages.values() for d in stage["deps"]
                   if Path(d).parent == paths.CODE})
    sources = sorted({f for k in [*keys, "code"] for f in closures.closure(closures.roots(k))})
    return stage(f"python -m crossmodal code --closures {','.join(keys)}", [], [PARAMS_FILE, *sources],
                  [str(paths.CODE)])


def params_stage() -> dict:
    """The `params` stage: it writes each other stage's values file, the values of exactly the key paths that
    stage reads. It and `code` depend on params.yaml as a file (its checksum), not on its keys, which DVC would copy
    into dvc.lock (2,000 of its 4,000 lines, parsed and rewritten after every stage that dvc.yaml runs); the
    top-level `params:` of dvc.yaml still makes `dvc params diff` and `dvc exp show` show every key."""
    return stage("python -m crossmodal params", [], [PARAMS_FILE, *stage_code("params")], [str(paths.PARAMS)])


# ------------------------------------------------------------------------------------------------ stages


def spine_stages(cfg: Config) -> dict:
    raw, world = paths.RAW, manifest(paths.WORLD)  # what reads the whole world depends on its manifest
    stages = {f"download-{name}": stage(
        f"python -m crossmodal download --dataset {name}", ["profile", f"datasets.{name}"], stage_code("download"),
        [{str(paths.raw(name)): {"cache": False, "persist": True}}]) for name in cfg.datasets}
    stages["synthesize"] = stage("python -m crossmodal synthesize", ["profile", "world"], stage_code("synthesize"),
                                  [str(paths.WORLD), world], [paths.METRICS / "data_profile.json"])
    image_vocabularies = [f"vocabularies.{n}" for n, v in cfg.vocabularies.items() if v.corpus == "images"]
    stages["prepro_captions"] = stage(
        "python -m crossmodal prepro-captions", ["profile", *image_vocabularies, "evaluation.qualitative_examples"],
        [world, raw / "karpathy", raw / "coco_captions", *stage_code("prepro_captions")], [str(paths.CAPTIONS)])
    stages["pretrain_backbone"] = stage(
        "python -m crossmodal pretrain-backbone", ["profile", "backbone", "compute.portable"],
        [world, *stage_code("pretrain_backbone")],
        [str(paths.BACKBONE)], [paths.METRICS / "backbone.json"])
    tasks = [task for task in SPECS if any(system.task == task for system in cfg.systems().values())]
    joined = [d for task in tasks for d in SPECS[task].region_datasets]  # real: their images' boxes join COCO's
    stages["extract_regions"] = stage(
        " ".join(["python -m crossmodal extract-regions", *(f"--grounding {d}" for d in joined)]),
        ["profile", "regions", "compute.portable"],
        [world, paths.BACKBONE, raw / "butd_adaptive", raw / "butd_fixed36", *(raw / d for d in joined),
         *stage_code("extract_regions")], [str(paths.REGIONS)])
    used = {s for n in cfg.systems() for s in cfg.model_of(n).inputs.values()}
    if "grid" in used:
        stages["extract_grid"] = stage(
            "python -m crossmodal extract-grid", ["profile", "grid", "compute.portable"],
            [world, paths.BACKBONE, raw / "karpathy", raw / "coco_images", raw / "vgg16",  # real: VGG-16 on COCO
             *stage_code("extract_grid")], [str(paths.features("grid"))])
    if used & set(ATTRIBUTE_SETS):
        stages["train_attributes"] = stage(
            "python -m crossmodal train-attributes", ["profile", "grid.size", "attributes", "compute.portable"],
            [world, raw / "karpathy", paths.BACKBONE, paths.vocabulary(cfg.attributes.vocabulary),
             raw / "coco_images", raw / "vgg16", *stage_code("train_attributes")],  # real: VGG-16 on COCO
            [str(paths.features(s)) for s in ATTRIBUTE_SETS], [paths.METRICS / "attributes.json"])
    for module in task_stages(tasks).values():  # the worlds of the tasks trained: their own stages
        stages.update(module.stages(cfg))
    if video_corpora(cfg):
        stages.update(video_stages(cfg))
    vectors = {SPECS[cfg.systems()[n].task].captions for n in cfg.systems() if cfg.model_of(n).model_args.get(
        "word_vectors")}  # captioners (HOCA) start from word2vec's role, BAN from GloVe's
    if False in vectors:
        stages["word_vectors"] = word_vectors_stage(cfg, tasks)
    if True in vectors:
        stages["word2vec"] = stage("python -m crossmodal word2vec", ["profile", "word2vec"],
                                    [*video_annotations(cfg), paths.VIDEO, paths.raw("word2vec"),
                                     *stage_code("word2vec")], [str(paths.WORD2VEC)])
    stages["reference_points"] = stage(
        "python -m crossmodal reference-points", ["profile"],
        [world, raw / "karpathy", paths.CAPTIONS / "references", *stage_code("reference_points")], [],
        [paths.METRICS / "reference_points.json"])
    from .reports.attention import Mechanism, reads
    from .reports.claims import CLAIMS, CLAIMS_JSON, SPREAD
    from .reports.figures import FIGURES, PLOTS
    from .reports.table_builder import summary_name
    from .reports.table_schema import table_file

    tabled = [p for p, section in cfg.papers.items() if section.tables]
    figures = [path for record in papers().values() if record.figures for path in record.figures(cfg).values()]
    mechanisms = {name: Mechanism(**r.attention) for name, r in papers().items() if r.attention}  # their decoders'
    drawn = {p: files for p, m in mechanisms.items() if (files := reads(cfg, m))}  # attention figures: the files
    drawn_systems = [mechanisms[p].system for p in drawn]
    stages["index"] = stage(  # it lists every system, so `dvc repro` at the root builds every paper's stages
        "python -m crossmodal index",
        [f"{p}.tables" for p in tabled] + (["evaluation.max_length", *grouped(cfg, dedupe(
            [k for s in drawn_systems for k in cfg.model_sources(s)]))] if drawn else []),
        [*(paths.TABLES / summary_name(p) for p in tabled),  # the tables' files hold their claims (reports/claims.py)
         *(table_file(t, paths.paper_tables(p)).relative_to(closures.SRC.parent).as_posix()
           for p in tabled for t in cfg.paper(p).tables),
         SPREAD, paths.METRICS / "data_profile.json",
         *(paths.METRICS / f"{n}.json" for n in [*cfg.systems(), *cfg.ensembles()]),
         *dedupe([str(f) for files in drawn.values() for f in files.files]),
         *figures,  # what the papers' own stages draw
         *stage_code("index", *dedupe([f"models.{cfg.model_of(s).model}" for s in drawn_systems]))],
        # claims.json as an out like claims.md, not a metric: the stage is not run-cached anyway (its Markdown pages),
        # and its per-claim lists are data to read, not numbers for `dvc metrics show` to compare
        [{str(paths.INDEX): {"cache": False}}, {str(CLAIMS): {"cache": False}}, {str(CLAIMS_JSON): {"cache": False}},
         {str(FIGURES): {"cache": False}}, {str(PLOTS): {"cache": False}}])
    return stages


def task_stages(tasks: list[str]) -> dict:
    """{task: its module of world stages (tasks/<task>_stages.py)}, for the tasks of `tasks` that have one."""
    return {task: importlib.import_module(f"crossmodal.tasks.{task}_stages") for task in tasks
            if (closures.PACKAGE / "tasks" / f"{task}_stages.py").is_file()}


def word_vectors_stage(cfg: Config, tasks: list[str]) -> dict:
    """The word vectors BAN-Glove starts from: trained on the training text of the image world and of the worlds of
    `tasks` (their processed word lists restrict GloVe under the real profile)."""
    text = [p for _, module in sorted(task_stages(tasks).items()) for p in module.text(cfg)]
    return stage("python -m crossmodal word-vectors", ["profile", "word_vectors"],
                 [world_file(cfg, paths.DATASET_JSON), *text, paths.raw("glove"), *stage_code("word_vectors")],
                 [str(paths.WORD_VECTORS)])


def video_corpora(cfg: Config) -> list[str]:
    """The video datasets whose captions some vocabulary describes (HOCA's)."""
    return [d for d in VIDEO_DATASETS if any(v.corpus == d for v in cfg.vocabularies.values())]


def video_annotations(cfg: Config) -> list[Path]:
    """The video world's caption files: what reads its captions depends on these, not on its ~600 clips (under the
    real profile the world is a note, read as the folder)."""
    if cfg.profile == "real":
        return [paths.VIDEO_WORLD]
    return [paths.VIDEO_WORLD / "msvd" / "AllVideoDescriptions.txt", paths.VIDEO_WORLD / "msvd" / "youtube_mapping.txt",
            paths.VIDEO_WORLD / "msrvtt" / "videodatainfo.json"]


def video_stages(cfg: Config) -> dict:
    """The video world, its captions' preprocessing and the three feature extractors (HOCA's data)."""
    world, datasets = manifest(paths.VIDEO_WORLD), video_corpora(cfg)
    raw = [paths.raw(d) for d in datasets]
    video_vocabularies = [f"vocabularies.{n}" for n, v in cfg.vocabularies.items() if v.corpus != "images"]
    stages = {
        "synthesize_video": stage("python -m crossmodal synthesize-video", ["profile", "video.world"],
                                   stage_code("synthesize_video"),
                                   [str(paths.VIDEO_WORLD), world], [paths.METRICS / "video_profile.json"]),
        "prepro_video": stage("python -m crossmodal prepro-video",
                               ["profile", *video_vocabularies, "evaluation.qualitative_examples"],
                               [*video_annotations(cfg), *raw, *stage_code("prepro_video")], [str(paths.VIDEO)])}
    for modality in VIDEO_MODALITIES:
        stages[f"extract_{modality}"] = stage(
            f"python -m crossmodal extract-video --modality {modality}", ["profile", "video.features", "compute.portable"],
            [world, *([paths.VIDEO_FEATURES] if cfg.profile == "real" else []), *stage_code("extract_video")],
            [str(paths.features(f"{d}_{modality}")) for d in VIDEO_DATASETS],
            [paths.METRICS / f"extract_{modality}.json"])
    return stages


def objective_module(system) -> list[str]:
    """The objective module a captioning system's task loads by name (tasks/objectives/xe.py, scst.py); the other
    tasks have their loss in their own module."""
    return [f"tasks.objectives.{system.objective}"] if SPECS[system.task].captions else []


def model_file(name: str) -> Path:
    """A trained system's model file (training/trainer.py writes it): its stage's output, a file rather than its folder,
    which DVC checks per file at every `dvc repro` (a folder costs it five times a file)."""
    return paths.MODELS / name / "model.pt"


def _system_outs(name: str) -> tuple[list, list]:
    return [str(model_file(name)), str(paths.PREDICTIONS / name)], [paths.METRICS / f"{name}.json"]


def paper_stages(cfg: Config, paper: str) -> dict:
    section, systems, stages = cfg.paper(paper), cfg.systems(), {}
    for name in section.systems:
        system, model = systems[name], cfg.model_of(name)
        deps = [*model_data(cfg, name), *([model_file(system.init)] if system.init else []),
                *stage_code("train", f"tasks.{system.task}", *objective_module(system), f"models.{model.model}")]
        stages[name] = stage(f"python -m crossmodal train --system {name}", system_params(cfg, name), deps,
                              *_system_outs(name), wdir="../..")
    for name, ensemble in section.ensembles.items():
        members = ensemble.members
        models = dedupe([f"models.{cfg.model_of(m).model}" for m in members])
        params = [*SHARED_PARAMS, f"{cfg.where(name)}.members",
                  *grouped(cfg, dedupe([p for m in members for p in cfg.model_sources(m)]))]
        deps = [*(model_file(m) for m in members), *dedupe([str(d) for m in members for d in model_data(cfg, m)]),
                *stage_code("ensemble", *models)]
        outs, metrics = _system_outs(name)
        stages[name] = stage(f"python -m crossmodal ensemble --name {name}", params, deps, outs[1:], metrics,
                              wdir="../..")
    stages.update(study_stages(cfg, paper))
    if section.tables:
        stages["tables"] = tables_stage(cfg, paper)
    return stages


def study_stages(cfg: Config, paper: str) -> dict:
    """A paper's stages beyond its systems' and its tables': figures, measured rows (its pipeline.py's `stages`)."""
    if not (paths.PAPERS / paper / "pipeline.py").is_file():
        return {}
    return importlib.import_module(f"crossmodal.papers.{paper}.pipeline").stages(cfg)


def tables_stage(cfg: Config, paper: str) -> dict:
    from .reports.claims import seed_groups
    from .reports.table_builder import summary_name
    from .reports.table_schema import load_tables, table_file

    tables = load_tables(list(cfg.paper(paper).tables), paths.paper_tables(paper))
    built = set(cfg.systems()) | set(cfg.ensembles()) | set(cfg.measured_rows())
    shown = dedupe([v for t in tables for row in t.rows for v in row.variants() if v in built])
    groups = seed_groups(cfg)  # a row's cell is its system's mean over seeds
    metrics = dedupe([paths.METRICS / f"{s}.json" for v in shown for s in groups[v]]
                      + [paths.METRICS / name for t in tables for name in (t.reference_points, t.data_profile) if name])
    code = [table_file(t.id, paths.paper_tables(paper)).relative_to(closures.SRC.parent).as_posix() for t in tables]
    outs = [{str(paths.TABLES / f"{t.id}{suffix}"): {"cache": False}} for t in tables for suffix in (".md", ".csv")]
    outs.append({str(paths.TABLES / summary_name(paper)): {"cache": False}})
    return stage(f"python -m crossmodal tables --paper {paper} --systems {','.join(shown)}", [f"{paper}.tables"],
                  [*metrics, *code, *stage_code("tables")], outs, wdir="../..")


# ------------------------------------------------------------------------------------------------ files


def render(stages: dict, what: str, plots: list | None = None, params: list | None = None) -> str:
    body = yaml.safe_dump({**({"params": params} if params else {}), "stages": stages,
                           **({"plots": plots} if plots else {})}, sort_keys=False, width=120,
                          default_flow_style=False)
    return HEADER.format(what=what) + body


def _stage_sets(cfg: Config, code: bool = True) -> tuple[dict, dict[str, dict]]:
    """(the shared stages, {paper: its stages}), each stage still listing the params key paths it reads; without
    `code` (whose closures take a second to compute) when not `code`."""
    for record in papers().values():
        record.check(cfg)  # its own params sections (`<paper>.studies`), as strictly as the loader checks the rest
    built = {paper: stages for paper in cfg.papers if (stages := paper_stages(cfg, paper))}
    spine = {"params": params_stage(), **spine_stages(cfg)}
    return {**({"code": code_stage([spine, *built.values()])} if code else {}), **spine}, built


def _param_values_files(spine: dict, papers: dict[str, dict]) -> dict[Path, list[str]]:
    """Move each stage's params key paths (but `code`'s and `params`' own) into its values file, which becomes its
    dependency; returns {values file: key paths}."""
    lists = {}
    for prefix, stages in [(None, spine), *papers.items()]:
        for name, entry in stages.items():
            if name in ("code", "params") or "params" not in entry:
                continue
            path = paths.params_values(name, prefix)
            lists[path] = entry.pop("params")
            entry["deps"].insert(0, str(path))
    return lists


def param_lists(cfg: Config) -> dict[Path, list[str]]:
    """{values file: the params key paths its stage reads}: what the `params` stage writes (stages/params.py)."""
    return _param_values_files(*_stage_sets(cfg, code=False))  # `code` reads no params key


def expected_files(cfg: Config) -> dict[Path, str]:
    """Every stage file's text, by repository-relative path."""
    spine, papers = _stage_sets(cfg)
    _param_values_files(spine, papers)
    from .reports.figures import dvc_plot_definitions

    trained = {paper: [n for n, system in cfg.systems().items() if cfg.paper_of(n) == paper
                       and SPECS[system.task].captions]  # the captioners' curves (reports/figures.py: `dvc plots`
               for paper in cfg.papers}  # draws val_CIDEr)
    files = {Path("dvc.yaml"): render(spine, "Shared stages (code closures, params values, data, features, "
                                             "reference points) and the index of every paper's tables; `dvc plots "
                                             "show` draws the training curves.", dvc_plot_definitions(trained),
                                       [PARAMS_FILE])}
    for paper, stages in papers.items():
        files[pipeline_file(paper)] = render(stages, f"The {paper} section of params.yaml: its systems, "
                                                     "ensembles and tables (stage paths relative to the root).")
    return files


def _differences(cfg: Config, root: Path) -> tuple[dict[Path, str], list[Path], list[Path]]:
    """(expected files, those that differ on disk, stale files of papers without stages)."""
    files = expected_files(cfg)
    stale = [p for p in (root / "pipelines").glob("*/dvc.yaml") if p.relative_to(root) not in files]
    differ = [p for p, text in files.items() if not (root / p).is_file() or (root / p).read_text() != text]
    return files, differ, stale


def check_current(cfg: Config, root: Path) -> None:
    """Fail with one line when the stage files are not what params.yaml says, e.g. after a system, ensemble or
    table was added or removed by hand in params.yaml. The `code` stage runs this first whenever params.yaml's
    entries change. (Which key paths a stage reads is in its values file, not in the stage files: the `params`
    stage keeps those current by itself.)"""
    files, differ, stale = _differences(cfg, root)
    for path in differ:
        have = load_yaml((root / path).read_text())["stages"] if (root / path).is_file() else {}
        want = load_yaml(files[path])["stages"]
        names = [n for n in want if have.get(n) != want[n]] + [n for n in have if n not in want]
        raise InputError(f"{path} is out of date with params.yaml (stage {', '.join(names[:3])}"
                         f"{' …' if len(names) > 3 else ''}): run `python -m crossmodal pipelines`, then repeat")
    if stale:
        raise InputError(f"{stale[0].relative_to(root)} has no systems in params.yaml any more: "
                         "run `python -m crossmodal pipelines`, then repeat")


def write_pipelines(cfg: Config, root: Path, check: bool = False) -> int:
    """Write the stage files (or, with `check`, report those that differ); also remove the files of papers that
    no longer have stages. Returns the exit status."""
    files, differ, stale = _differences(cfg, root)
    if check:
        for path in differ + [p.relative_to(root) for p in stale]:
            print(f"{path}: differs from params.yaml; run `python -m crossmodal pipelines`")
        return 1 if differ or stale else 0
    for path in differ:
        write_text(root / path, files[path])
        print(f"wrote {path}")
    for path in stale:
        path.unlink()
        print(f"removed {path.relative_to(root)}")
    return 0
