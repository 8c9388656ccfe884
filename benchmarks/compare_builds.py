"""Do two builds compute the same bits? Build the tests' tiny pipeline at a commit, and compare two builds' outputs.

A refactor must not change what is computed: the same params give the same bits on one CPU type. This compares, file
by file, every output that the two builds' lock files record (`outs` of every stage, directories walked), and says
which files differ. Two things legitimately differ between two runs of the same stage, and are left out of the
comparison: the MLflow run id a metrics file records (`mlflow_run_id`, a fresh id per run) and the pages that print
such ids or the build's own paths (`reports/index.md`: the link to each MLflow run). Everything else must be equal
to the byte.

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
VOLATILE_KEYS = ("mlflow_run_id",)
VOLATILE_FILES = ("reports/index.md",)


def lock_outputs(repo: Path, stages: set[str] | None = None) -> dict[str, str]:
    """{output path relative to the repository: stage} from every lock file of `repo`."""
    outputs = {}
    for lock in [repo / "dvc.lock", *sorted((repo / "pipelines").glob("*/dvc.lock"))]:
        if not lock.exists():
            continue
        wdir = lock.parent
        for name, stage in (yaml.safe_load(lock.read_text()) or {}).get("stages", {}).items():
            if stages is None or name in stages:
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


def same(a: Path, b: Path) -> bool:
    """Byte-equal, or for a JSON file equal once the volatile keys are dropped."""
    left, right = a.read_bytes(), b.read_bytes()
    if left == right:
        return True
    if a.suffix == ".json":
        try:
            return _without_volatile(json.loads(left)) == _without_volatile(json.loads(right))
        except ValueError:
            return False
    return False


def compare(a: Path, b: Path, stages: set[str] | None = None) -> dict:
    """The outputs both builds record, file by file: equal, different, or present in one build only."""
    outputs_a, outputs_b = lock_outputs(a, stages), lock_outputs(b, stages)
    report = {"equal": [], "different": [], "only_a": sorted(set(outputs_a) - set(outputs_b)),
              "only_b": sorted(set(outputs_b) - set(outputs_a)), "skipped": []}
    for output in sorted(set(outputs_a) & set(outputs_b)):
        files_a, files_b = _files(a, output), _files(b, output)
        report["only_a"] += sorted(set(files_a) - set(files_b))
        report["only_b"] += sorted(set(files_b) - set(files_a))
        for file in sorted(set(files_a) & set(files_b)):
            key = "skipped" if file in VOLATILE_FILES else "equal" if same(a / file, b / file) else "different"
            report[key].append(file)
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
    for key in ("different", "only_a", "only_b", "skipped"):
        for file in report[key]:
            print(f"{key}: {file}")
    print(f"{len(report['equal'])} files equal, {len(report['different'])} different, {len(report['only_a'])} only "
          f"in {args.a}, {len(report['only_b'])} only in {args.b}, {len(report['skipped'])} skipped (volatile)")
    return 1 if report["different"] or report["only_a"] or report["only_b"] else 0


if __name__ == "__main__":
    sys.exit(main())
