"""Do two builds compute the same bits? Build the tests' tiny pipeline at a commit, and compare two builds' outputs.

A refactor must not change what is computed: the same params give the same bits on one CPU type. This compares, file
by file, every output that the two builds' lock files record (`outs` of every stage, directories walked), and says
which files differ. Three things legitimately differ between two runs of the same stage, and are left out of the
comparison: the MLflow run id a metrics file records (`mlflow_run_id`, a fresh id per run), the time and memory a
cost stage measures (`train_seconds`, `space_gib`: HOCA's Table 3, which prints them), and the pages that print such
ids or the build's own paths (`reports/index.md`: the link to each MLflow run). The code closures
(`data/code/`, the files each stage lists its modules in) and the values files (`data/params/`, the params each
stage reads, by key) are listed apart: a refactor of the code or of the params' layout changes them by design.
A model file (`.pt`) whose bytes differ is opened: equal tensors under a different embedded config (the system's
params, as a refactor of the params' layout writes them) are listed as `metadata`, apart from real differences.
Everything else must be equal to the byte.

Run from an activated .venv:
- `python benchmarks/compare_builds.py build DIR`: the tests' tiny pipeline (tests/tiny_pipeline.py, the README's
  first command on tiny params) of the checkout this script lies in, built in DIR/repo (about 5 minutes on 2 cores).
  Run it from a checkout of each commit to compare (e.g. a `git worktree` of the old commit);
- `python benchmarks/compare_builds.py compare A B`: two built repositories (tiny builds, or a retrain's clone and a
  clone that reran some stages); exit 1 when an output differs. `--stages s1,s2` limits it to those stages' outputs.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
VOLATILE_KEYS = ("mlflow_run_id", "train_seconds", "space_gib")  # a run's id; what a cost stage measures
VOLATILE_FILES = ("reports/index.md", "reports/tables/hoca_table3.md", "reports/tables/hoca_table3.csv")
CODE = "data/code/"  # the code closures: what a refactor changes by design
VALUES = "data/params/"  # the values of the params each stage reads: a refactor of the params' layout renames keys


def lock_outputs(repo: Path, stages: set[str] | None = None) -> dict[str, str]:
    """{output path relative to the repository: stage} from every lock file of `repo`."""
    outputs = {}
    for lock in [repo / "dvc.lock", *sorted((repo / "pipelines").glob("*/dvc.lock"))]:
        if not lock.exists():
            continue
        defined = yaml.safe_load(lock.with_name("dvc.yaml").read_text()).get("stages", {})
        for name, stage in (yaml.safe_load(lock.read_text()) or {}).get("stages", {}).items():
            if name in defined and (stages is None or name in stages):  # a lock may keep stages dvc.yaml dropped
                wdir = lock.parent / defined[name].get("wdir", ".")  # paths are relative to the stage's wdir
                for out in stage.get("outs", []):
                    path = (wdir / out["path"]).resolve().relative_to(repo.resolve())
                    outputs[path.as_posix()] = name
    return outputs


def _files(root: Path, relative: str) -> list[str]:
    path = root / relative
    if path.is_dir():
        return sorted(p.relative_to(root).as_posix() for p in path.rglob("*") if p.is_file())
    return [relative] if path.exists() else []


def _without_volatile(value):
    if isinstance(value, dict):
        return {k: _without_volatile(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [_without_volatile(v) for v in value]
    return value


def _tensors(value, prefix: str = "") -> dict:
    """Every tensor in a loaded model file, by its path in the nested dicts and lists."""
    import torch

    if isinstance(value, torch.Tensor):
        return {prefix: value}
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    return {k: v for key, item in items for k, v in _tensors(item, f"{prefix}/{key}").items()}


def same_weights(a: Path, b: Path) -> bool:
    """Two model files with the same tensors, bit for bit (their other contents may differ)."""
    import torch

    left, right = (_tensors(torch.load(p, map_location="cpu", weights_only=False)) for p in (a, b))
    return left.keys() == right.keys() and all(torch.equal(left[k], right[k]) and left[k].dtype == right[k].dtype
                                               for k in left)


def kind(a: Path, b: Path) -> str:
    """equal (byte-equal, or JSON equal once the volatile keys are dropped), metadata (a model file with the same
    tensors) or different."""
    left, right = a.read_bytes(), b.read_bytes()
    if left == right:
        return "equal"
    if a.suffix == ".json":
        try:
            return "equal" if _without_volatile(json.loads(left)) == _without_volatile(json.loads(right)) \
                else "different"
        except ValueError:
            return "different"
    if a.suffix == ".pt":
        return "metadata" if same_weights(a, b) else "different"
    return "different"


def compare(a: Path, b: Path, stages: set[str] | None = None) -> dict:
    """The outputs both builds record, file by file: equal, different, or present in one build only."""
    outputs_a, outputs_b = lock_outputs(a, stages), lock_outputs(b, stages)
    report = {"equal": [], "different": [], "only_a": sorted(set(outputs_a) - set(outputs_b)),
              "only_b": sorted(set(outputs_b) - set(outputs_a)), "skipped": [], "code": [], "metadata": []}
    for output in sorted(set(outputs_a) & set(outputs_b)):
        files_a, files_b = _files(a, output), _files(b, output)
        if not files_a and not files_b:
            raise FileNotFoundError(f"{output}: recorded by both builds' lock files, present in neither")
        report["only_a"] += sorted(set(files_a) - set(files_b))
        report["only_b"] += sorted(set(files_b) - set(files_a))
        for file in sorted(set(files_a) & set(files_b)):
            key = "skipped" if file in VOLATILE_FILES else kind(a / file, b / file)
            key = "code" if key != "equal" and file.startswith((CODE, VALUES)) else key
            report[key].append(file)
    for side in ("only_a", "only_b"):  # a renamed closure is one side's only
        report["code"] += [f for f in report[side] if f.startswith((CODE, VALUES))]
        report[side] = [f for f in report[side] if not f.startswith((CODE, VALUES))]
    return report


def build(dest: Path) -> Path:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from tiny_pipeline import Build, _build

    dest.mkdir(parents=True, exist_ok=False)
    _build(Build(dest / "repo", dest / "import-trace"))
    return dest / "repo"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build").add_argument("dir", type=Path)
    cmp = sub.add_parser("compare")
    cmp.add_argument("a", type=Path)
    cmp.add_argument("b", type=Path)
    cmp.add_argument("--stages", help="comma-separated stage names (default: every stage both builds record)")
    args = parser.parse_args(argv)
    if args.command == "build":
        print(f"built: {build(args.dir)}")
        return 0
    report = compare(args.a, args.b, set(args.stages.split(",")) if args.stages else None)
    for key in ("different", "only_a", "only_b", "skipped", "metadata"):
        for file in report[key]:
            print(f"{key}: {file}")
    print(f"{len(report['equal'])} files equal, {len(report['different'])} different, {len(report['only_a'])} only "
          f"in {args.a}, {len(report['only_b'])} only in {args.b}, {len(report['skipped'])} skipped (volatile), "
          f"{len(report['code'])} code closures or values files changed or renamed, {len(report['metadata'])} model "
          "files with equal tensors and other metadata")
    return 1 if report["different"] or report["only_a"] or report["only_b"] else 0


if __name__ == "__main__":
    sys.exit(main())
