"""Stage `params`: the values of the params each stage reads, one file per stage, `data/params/[<paper>/]<stage>.json`
(`pipelines.param_lists` names the key paths; the values are read from params.yaml as written).

Every other stage depends on its file instead of listing params keys for DVC: DVC reads params.yaml once, here,
instead of once per stage with a walk of the whole file for each of ~1,200 key paths, and a no-op `dvc repro` stays
within its budget. The reruns are the same: a change rewrites the files of the stages that read the changed key and
no other, and DVC reruns exactly the stages whose file changed. This stage depends on params.yaml as a file
(pipelines.params_stage; `dvc params diff` and `dvc exp show` show every key through dvc.yaml's top-level
`params`); `dvc status` names it and `code` only, and `dvc repro params` then shows which stages a change reaches.
"""
from __future__ import annotations

import json
from pathlib import Path


from .. import paths
from ..io import InputError, atomic_path, load_yaml, write_text


def _value(tree, key: str):
    for part in key.split("."):
        if not isinstance(tree, dict) or part not in tree:
            raise InputError(f"params.yaml has no key {key!r}, which a stage reads: run `python -m crossmodal "
                             "pipelines`")
        tree = tree[part]
    return tree


def run(cfg, root: Path, args) -> None:
    from ..pipelines import param_lists

    source = Path(args.params) if args.params else root / "params.yaml"
    raw = load_yaml(source.read_text(encoding="utf-8"))
    lists = param_lists(cfg)
    with atomic_path(root / paths.PARAMS) as tmp:  # the whole folder at once: no file of a removed stage stays
        for path, keys in lists.items():
            out = tmp / path.relative_to(paths.PARAMS)
            out.parent.mkdir(parents=True, exist_ok=True)
            write_text(out, json.dumps({key: _value(raw, key) for key in keys}, indent=1, sort_keys=True) + "\n")
    print(f"{len(lists)} stages' params values in {paths.PARAMS}")
