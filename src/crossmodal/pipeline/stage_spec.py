"""What every stage builder uses (the pipeline generator, pipelines.py, and the papers' own builders,
papers/<paper>/pipeline.py): one stage's entry, a stage's code and params dependencies, and what feeds a system."""
from __future__ import annotations

from pathlib import Path

from .. import paths
from ..config.loader import Config
from ..task_specs import SPECS
from . import closures, manifests


def stage_code(stage_module: str, *by_name: str) -> list[Path]:
    """A stage's code dependency: its closure's file, which the `code` stage writes."""
    return [paths.code(closures.key(stage_module, *by_name))]


def stage(cmd: str, params: list, deps: list, outs: list, metrics: list | None = None,
           wdir: str | None = None, plots: list | None = None) -> dict:
    """One stage. `metrics` (JSON) and `plots` (PNG) are git-tracked outputs (`cache: false`): declared as such, not
    as `outs` with `cache: false`, because DVC's run-cache skips a stage with a `cache: false` output that is neither
    (dvc/stage/__init__.py, `Stage.run`), and the run-cache is what restores a finished stage in a fresh clone that
    shares the machine's DVC cache (scripts/setup.sh; tests/end_to_end/test_machine_cache.py)."""
    stage = {"cmd": cmd}
    if wdir:
        stage["wdir"] = wdir
    if params:
        stage["params"] = params
    stage["deps"] = [str(d) for d in deps]
    if outs:
        stage["outs"] = outs
    if metrics:
        stage["metrics"] = [{str(m): {"cache": False}} for m in metrics]
    if plots:
        stage["plots"] = [{str(p): {"cache": False}} for p in plots]
    return stage


def dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def world_file(cfg: Config, path: Path) -> Path:
    """A synthetic world's file as a dependency; under the real profile its world is a note, read as the folder."""
    return path.parent if cfg.profile == "real" else path


def manifest(folder: Path) -> str:
    """A folder's manifest (pipeline/manifests.py): the stage that writes the folder writes it too, and the stages
    that read the whole folder depend on it, so that DVC walks the folder once per repro, not once per reader."""
    return str(manifests.path_of(folder))


SHARED_PARAMS = ["profile", "evaluation", "compute"]  # the sections every training and decoding stage reads whole


def system_params(cfg: Config, name: str) -> list[str]:
    """The params a system's stage reads: the shared sections that can change results, its vocabulary, and each
    value of its resolved configuration at the key path that states it (`Config.sources`), so that a recipe's
    key that the system overrides never reruns it."""
    vocabulary = cfg.model_of(name).vocabulary
    return [*SHARED_PARAMS, *([f"vocabularies.{vocabulary}"] if vocabulary else []), *grouped(cfg, cfg.sources(name))]


def value_counts(tree, where: str, out: dict[str, int]) -> int:
    if not isinstance(tree, dict):
        return 1
    out[where] = sum(value_counts(v, f"{where}.{k}", out) for k, v in tree.items())
    return out[where]


def grouped(cfg: Config, paths: list[str]) -> list[str]:
    """`paths` with the values of a mapping replaced by the mapping's own key path wherever the stage takes all of
    them (all of `recipes.scst.train`, say), never a whole entry or `paper:` block: shorter values files. A key
    later added to such a mapping reruns the stage too (the `code` stage's check catches the others)."""
    entries = {f"recipes.{n}": e for n, e in cfg.recipes.items()}
    entries.update({f"{p}.{kind}.{n}": e for p, section in cfg.papers.items() for kind in ("systems", "recipes")
                    for n, e in getattr(section, kind).items()})
    counts: dict[str, int] = {}
    for where, entry in entries.items():
        value_counts(entry, where, counts)
    roots = {*entries, *(f"{where}.paper" for where in entries)}
    out: list[str] = []
    for path in paths:
        parts, group = path.split("."), path
        for i in range(len(parts) - 1, 0, -1):
            mapping = ".".join(parts[:i])
            if mapping in roots:
                break
            if counts.get(mapping) == sum(p.startswith(mapping + ".") for p in paths):
                group = mapping
        if group not in out:
            out.append(group)
    return out


def model_data(cfg: Config, name: str) -> list:
    """What feeds a system's network: its task's data (task_specs.py `data`, `real_data`; a captioner: its
    vocabulary's captions, test references and qualitative examples), its inputs' feature sets, and the word vectors
    its embedding starts from (a captioner: word2vec's role; the others: GloVe's)."""
    model, features = cfg.model_of(name), [paths.features(s) for s in cfg.model_of(name).inputs.values()]
    spec = SPECS[cfg.systems()[name].task]
    vectors = [paths.WORD2VEC if spec.captions else paths.WORD_VECTORS] if model.model_args.get("word_vectors") else []
    if not spec.captions:
        return [*spec.data, *features, *(paths.raw(d) for d in spec.real_data if cfg.profile == "real"), *vectors]
    corpus = cfg.vocabularies[model.vocabulary].corpus  # each folder by its manifest (data/captions.py writes them)
    return [manifest(paths.vocabulary(model.vocabulary, corpus)), manifest(paths.corpus(corpus) / "references"),
            manifest(paths.examples(corpus)), *features, *vectors]
