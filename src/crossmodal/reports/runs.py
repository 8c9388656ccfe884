"""MLflow by paper: tag every trained system's and ensemble's run with the paper, the table rows and the seed.

The training stages log their runs (tracking.py) and write the run id into `reports/metrics/<system>.json`
(`mlflow_run_id`). Their code is left alone, since a change there would retrain every model. Instead the `index`
stage, which runs after every training stage, tags the runs named by the metrics files:

- `paper`: the params.yaml section that owns the system (`Config.paper_of`). The systems that several papers' tables
  share (Show-Tell, Att2in, Up-Down and their SCST runs) say `baselines`;
- `table_papers`: the papers whose transcribed tables show the run, comma-separated (`aoanet,eta,xlan` for Up-Down);
- `table_rows`: `<table id>: <row label>` for each row that the run fills, `; `-separated. A row's label fields are
  joined by ` / `, and the column group follows in brackets where the row has a system per group, e.g. `xlan_table1:
  X-LAN (XE); xlan_table3: Faster R-CNN + 4×X-Linear attention (+ELU) / LSTM + X-Linear attention (+ELU)`.
  A seed replicate (`xlan_seed1`) fills the rows of its seed group (`claims.seed_groups`), since our cell is the
  group's mean. A run that fills no row carries neither this tag nor `table_papers`;
- `seed_group`: the system whose rows the seed group fills (`xlan` for `xlan`, `xlan_seed1`, ...): it filters the n
  seeds of one row;
- `seed`: the resolved `train.seed`; an ensemble's is its members' seeds, comma-separated (`0,1,2,3`).

In the MLflow UI's search box: `tags.paper = 'xlan'` (the runs X-LAN's section trains), `tags.table_papers LIKE
'%xlan%'` (every run X-LAN's tables show, the shared baselines included), `tags.seed_group = 'xlan'`.
`paper_view_url` opens the first filter directly.

Tagging is idempotent and cheap: a run is written to only where a tag differs. A metrics file without a run id, or
with a run the store does not hold (the committed metrics of a fresh clone name the committer's runs: `mlflow.db` is
neither in git nor in DVC), is a warning line on stderr, and so is a store MLflow refuses (an older schema). Without a
`mlflow.db` nothing is tagged, and none is created. Tags are set on the runs the metrics files name: an earlier run of
a system keeps what it had (the runs of other DVC experiments keep their tags too).

    python -m crossmodal.reports.runs    # tag the runs named by the workspace's metrics files, outside DVC
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import quote

from crossmodal import paths
from crossmodal.config.loader import origin_root
from crossmodal.reports.claims import seed_groups
from crossmodal.reports.table_schema import load_tables
from crossmodal.tracking import tracking_uri

TAGS = ("paper", "table_papers", "table_rows", "seed_group", "seed")  # the tags this module owns
MAX_TAG = 5000  # as tracking.Run truncates


def paper_filter(paper: str) -> str:
    """The MLflow search filter for the runs a paper's section trains."""
    return f"tags.paper = '{paper}'"


def paper_view_url(experiment_id: str, paper: str, base: str = "http://127.0.0.1:5000") -> str:
    """The runs table of the experiment filtered to one paper's runs. A URL with a search filter skips the shared view
    of tracking.runs_view_url (the UI applies a shared view only to a URL with no search state), so the table has the
    UI's default columns: name the metrics in the search box's column picker, or type the filter into the shared
    view instead."""
    return (f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
            f"&searchFilter={quote(paper_filter(paper), safe='')}")


def _row_label(table, row, system: str) -> str:
    label = " / ".join(row.labels.values())
    if isinstance(row.variant, dict):
        shorts = {g.id: g.short for g in table.column_groups}
        groups = [shorts.get(g, g) for g, v in row.variant.items() if v == system]
        label += f" ({', '.join(groups)})"
    return label


def run_tags(cfg) -> dict[str, dict[str, str | None]]:
    """{system or ensemble: {tag: value, or None where the run should not carry it}} for every system and ensemble
    of `cfg`."""
    systems, ensembles = cfg.systems(), cfg.ensembles()
    names = [*systems, *ensembles]
    rows: dict[str, list[tuple[str, str, str]]] = {name: [] for name in names}  # name -> [(paper, table id, label)]
    for paper, section in cfg.papers.items():
        for table in load_tables(list(section.tables), paths.paper_tables(paper)):
            for row in table.rows:
                for system in dict.fromkeys(row.variants()):
                    if system in rows:
                        entry = (paper, table.id, _row_label(table, row, system))
                        if entry not in rows[system]:
                            rows[system].append(entry)
    groups = seed_groups(cfg)
    tags = {}
    for name in names:
        group = [m for m in names if m in groups.get(name, (name,))]  # params order
        lead = next((m for m in group if rows[m]), group[0])
        filled = list(dict.fromkeys(entry for m in group for entry in rows[m]))
        if name in ensembles:
            seed = ",".join(str(systems[m].train.seed) for m in ensembles[name].members)
        else:
            seed = str(systems[name].train.seed)
        tags[name] = {
            "paper": cfg.paper_of(name),
            "table_papers": ",".join(sorted({p for p, _, _ in filled})) or None,
            "table_rows": "; ".join(f"{t}: {label}" for _, t, label in filled)[:MAX_TAG] or None,
            "seed_group": lead,
            "seed": seed,
        }
    return tags


SHOWN_MISSING = 3  # the runs a warning names; it counts them all


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def tag_runs(cfg, root: Path, uri: str | None = None) -> int:
    """Tag the run of every system and ensemble with a metrics file under `root` (run_tags); returns how many runs
    changed. `uri`: the tracking store (default: the pipeline's `mlflow.db`, config.loader.origin_root, skipped when it
    does not exist)."""
    ids: dict[str, str] = {}
    wanted = run_tags(cfg)
    for name in wanted:
        path = root / paths.METRICS / f"{name}.json"
        if not path.is_file():
            continue  # not trained in this workspace: nothing to tag
        run_id = json.loads(path.read_text()).get("mlflow_run_id")
        if run_id:
            ids[name] = run_id
        else:
            _warn(f"{path.relative_to(root)} names no mlflow_run_id: its run is not tagged")
    if not ids:
        return 0
    lock = None
    if uri is None:
        store = origin_root()
        if not (store / "mlflow.db").is_file():
            _warn(f"no {store / 'mlflow.db'}: the {len(ids)} runs the metrics files name are not tagged")
            return 0
        uri, lock = tracking_uri(store), store / "mlflow.db.lock"
    return _apply(uri, lock, {name: (run_id, wanted[name]) for name, run_id in ids.items()})


def _apply(uri: str, lock: Path | None, runs: dict[str, tuple[str, dict[str, str | None]]]) -> int:
    import contextlib
    import logging

    from filelock import FileLock
    from mlflow.entities import RunTag
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    for logger in ("mlflow", "alembic"):
        logging.getLogger(logger).setLevel(logging.WARNING)
    changed, missing = 0, []
    with FileLock(str(lock), timeout=300) if lock else contextlib.nullcontext():
        try:
            client = MlflowClient(uri)
        except MlflowException as error:
            _warn(f"{uri}: {str(error).splitlines()[0]}; runs not tagged")
            return 0
        for name, (run_id, tags) in runs.items():
            try:
                have = client.get_run(run_id).data.tags
            except MlflowException as error:
                if error.error_code != "RESOURCE_DOES_NOT_EXIST":  # a store that cannot be read: one line, no crash
                    _warn(f"{uri}: {str(error).splitlines()[0]}; runs not tagged")
                    return changed
                missing.append(f"{name} ({run_id})")
                continue
            updates = [RunTag(k, v) for k, v in tags.items() if v is not None and have.get(k) != v]
            stale = [k for k, v in tags.items() if v is None and k in have]
            if updates:
                client.log_batch(run_id, tags=updates)
            for key in stale:
                client.delete_tag(run_id, key)
            changed += bool(updates or stale)
    if missing:  # one short line: a fresh clone's committed metrics name the committer's runs, every one of them
        shown = ", ".join(missing[:SHOWN_MISSING]) + (f", and {len(missing) - SHOWN_MISSING} more"
                                                      if len(missing) > SHOWN_MISSING else "")
        _warn(f"runs named by {paths.METRICS.as_posix()}/ but not in {uri}, not tagged ({len(missing)}): {shown}")
    print(f"mlflow: {changed} of {len(runs)} runs retagged (paper, table_papers, table_rows, seed_group, seed)"
          + (f", {len(missing)} not in the store" if missing else ""))
    return changed


def main() -> int:
    from crossmodal.config.loader import load, repo_root

    tag_runs(load(), repo_root())
    return 0


if __name__ == "__main__":
    sys.exit(main())
