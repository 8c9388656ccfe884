"""MLflow by paper (reports/runs.py): the runs named by the metrics files get the paper, the table rows and the seed as
tags, so that the UI's search `tags.paper = 'xlan'` shows one paper's runs. Runs are made as tracking.py makes them
(its experiment, run name and tags), in a SQLite store under tmp_path; the config is the repository's params.yaml."""
from __future__ import annotations

import json
import re
import shutil
from urllib.parse import parse_qs, urlsplit

import pytest

from crossmodal import paths, tracking
from crossmodal.config.loader import load
from crossmodal.reports.runs import TAGS, paper_filter, paper_view_url, run_tags, tag_runs

pytestmark = pytest.mark.slow  # MLflow's SQLite store

XLAN = ("xlan", "xlan_seed1", "xlan_enc1", "xlan_scst", "xlan_ensemble")  # owned by the xlan section
OTHERS = ("updown", "aoanet")  # baselines (shared by three papers' tables) and aoanet
SYSTEMS = XLAN + OTHERS


@pytest.fixture(scope="module")
def cfg():
    return load()


@pytest.fixture(scope="module")
def template(tmp_path_factory, cfg):
    """A store as the pipeline leaves it: a run per system (named and tagged as tracking.Run does), an older run of
    `xlan` that its metrics file no longer names, and the backbone's run (no paper)."""
    from mlflow.entities import RunTag

    root = tmp_path_factory.mktemp("store")
    client, experiment = tracking._client_and_experiment(root, tracking.EXPERIMENT)
    ids = {}
    for name, stage in [("xlan", cfg.stage("xlan")), *((n, cfg.stage(n)) for n in SYSTEMS),
                        ("pretrain_backbone", "pretrain_backbone")]:
        run_id = client.create_run(experiment, run_name=name).info.run_id
        client.log_batch(run_id, tags=[RunTag(k, v) for k, v in {
            "dvc.stage": stage, "dvc.exp_name": "workspace", "git.commit": "abc", "mlflow.runName": name}.items()])
        client.set_terminated(run_id, "FINISHED")
        ids[name] = run_id  # the later run of xlan replaces the older one
    return root / "mlflow.db", experiment, ids


@pytest.fixture
def store(tmp_path, template):
    """A copy of the template store, and a workspace whose metrics files name its runs."""
    db, experiment, ids = template
    shutil.copy(db, tmp_path / "mlflow.db")
    (tmp_path / paths.METRICS).mkdir(parents=True)
    for name in SYSTEMS:
        metrics = {"variant": name, "mlflow_run_id": ids[name]}
        (tmp_path / paths.METRICS / f"{name}.json").write_text(json.dumps(metrics))
    return tmp_path, tracking.tracking_uri(tmp_path), experiment, ids


def client_for(uri):
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def test_each_run_carries_its_paper_table_rows_and_seed(cfg, store):
    root, uri, _, ids = store
    assert tag_runs(cfg, root, uri) == len(SYSTEMS)
    tags = {name: client_for(uri).get_run(ids[name]).data.tags for name in SYSTEMS}
    assert tags["xlan"]["paper"] == "xlan" and tags["xlan"]["seed"] == "0" and tags["xlan"]["table_papers"] == "xlan"
    assert tags["xlan"]["table_rows"] == ("xlan_table1: X-LAN (XE); xlan_table3: Faster R-CNN + 4×X-Linear attention "
                                          "(+ELU) / LSTM + X-Linear attention (+ELU)")
    # a seed replicate fills its group's rows (our cell is the group's mean), with its own seed
    assert tags["xlan_seed1"]["table_rows"] == tags["xlan"]["table_rows"]
    assert (tags["xlan_seed1"]["seed"], tags["xlan_seed1"]["seed_group"], tags["xlan"]["seed_group"]) == ("1", "xlan",
                                                                                                           "xlan")
    assert tags["xlan_enc1"]["table_rows"] == ("xlan_table3: Faster R-CNN + 1×X-Linear attention / "
                                               "LSTM + X-Linear attention")
    assert tags["xlan_scst"]["table_rows"] == "xlan_table1: X-LAN (CIDEr opt.)"
    assert tags["xlan_ensemble"]["seed"] == "0,1,2"
    assert tags["xlan_ensemble"]["table_rows"] == "xlan_table1: X-LAN Σ (XE)"
    # the shared baselines: their own section, and every paper whose tables show them
    assert tags["updown"]["paper"] == "baselines" and tags["updown"]["table_papers"] == "aoanet,eta,xlan"
    assert "xlan_table3: Faster R-CNN / LSTM + Conventional attention" in tags["updown"]["table_rows"].split("; ")
    assert tags["aoanet"]["paper"] == "aoanet" and tags["aoanet"]["table_papers"] == "aoanet,xlan"
    for name in SYSTEMS:  # the trainer's own tags stay
        assert tags[name]["mlflow.runName"] == name and tags[name]["dvc.stage"] == cfg.stage(name)
        assert tags[name]["paper"] == cfg.paper_of(name) and set(TAGS) <= set(tags[name])


def test_the_search_by_paper_finds_exactly_that_papers_runs(cfg, store):
    root, uri, experiment, ids = store
    tag_runs(cfg, root, uri)
    client = client_for(uri)

    def names(query: str) -> list[str]:
        return sorted(r.info.run_name for r in client.search_runs([experiment], query, max_results=1000))

    assert names(paper_filter("xlan")) == sorted(XLAN)  # not the older xlan run, nor the backbone's
    assert names(paper_filter("baselines")) == ["updown"]
    assert names(paper_filter("eta")) == []
    assert names("tags.table_papers LIKE '%aoanet%'") == ["aoanet", "updown"]
    assert names("tags.seed_group = 'xlan'") == ["xlan", "xlan_seed1"]
    assert names("tags.seed = '1'") == ["xlan_seed1"]


def test_tagging_twice_changes_nothing_and_repairs_a_changed_tag(cfg, store, capsys):
    root, uri, _, ids = store
    assert tag_runs(cfg, root, uri) == len(SYSTEMS)
    client = client_for(uri)
    before = {name: client.get_run(ids[name]).data.tags for name in SYSTEMS}
    assert tag_runs(cfg, root, uri) == 0
    assert {name: client.get_run(ids[name]).data.tags for name in SYSTEMS} == before
    assert f"mlflow: 0 of {len(SYSTEMS)} runs retagged" in capsys.readouterr().out
    client.set_tag(ids["aoanet"], "paper", "xlan")
    assert tag_runs(cfg, root, uri) == 1
    assert client.get_run(ids["aoanet"]).data.tags == before["aoanet"]


def test_a_run_that_no_longer_fills_a_row_loses_its_row_tags(cfg, store, monkeypatch):
    import crossmodal.reports.runs as runs

    root, uri, _, ids = store
    tag_runs(cfg, root, uri)
    wanted = run_tags(cfg)
    wanted["xlan_enc1"] = {**wanted["xlan_enc1"], "table_rows": None, "table_papers": None}  # its row left the table
    monkeypatch.setattr(runs, "run_tags", lambda _: wanted)
    assert tag_runs(cfg, root, uri) == 1
    tags = client_for(uri).get_run(ids["xlan_enc1"]).data.tags
    assert "table_rows" not in tags and "table_papers" not in tags and tags["paper"] == "xlan"


def test_a_run_missing_from_the_store_or_a_file_without_run_id_is_a_warning(cfg, store, capsys):
    root, uri, _, ids = store
    metrics = root / paths.METRICS
    (metrics / "xlan_enc1.json").write_text(json.dumps({"variant": "xlan_enc1", "mlflow_run_id": "0" * 32}))
    (metrics / "aoanet.json").write_text(json.dumps({"variant": "aoanet"}))
    assert tag_runs(cfg, root, uri) == len(SYSTEMS) - 2
    err = capsys.readouterr().err
    assert f"warning: runs named by reports/metrics/ but not in {uri}, not tagged (1): xlan_enc1 ({'0' * 32})" in err
    assert "warning: reports/metrics/aoanet.json names no mlflow_run_id" in err
    assert "paper" not in client_for(uri).get_run(ids["xlan_enc1"]).data.tags
    assert client_for(uri).get_run(ids["xlan"]).data.tags["paper"] == "xlan"


def test_many_missing_runs_are_counted_on_one_short_line(cfg, store, capsys):
    root, uri, _, ids = store
    for k, name in enumerate(sorted(ids)[:5]):
        (root / paths.METRICS / f"{name}.json").write_text(json.dumps({"variant": name, "mlflow_run_id": f"{k}" * 32}))
    tag_runs(cfg, root, uri)
    line = next(x for x in capsys.readouterr().err.splitlines() if "not tagged (" in x)
    count = int(re.search(r"not tagged \((\d+)\)", line).group(1))
    assert count >= 4 and line.count(" (") == 1 + 3  # the count, then three runs named with their ids
    assert line.endswith(f", and {count - 3} more")


def test_the_default_store_is_the_pipelines_and_none_is_created(cfg, store, tmp_path, monkeypatch, capsys):
    root, uri, _, ids = store
    monkeypatch.setenv("DVC_ROOT", str(root))  # config.loader.origin_root: where the pipeline's runs go
    assert tag_runs(cfg, root) == len(SYSTEMS)
    assert client_for(uri).get_run(ids["xlan"]).data.tags["paper"] == "xlan"

    clone = tmp_path / "clone"  # a fresh clone: committed metrics, no mlflow.db (neither git nor DVC tracks it)
    shutil.copytree(root / paths.METRICS, clone / paths.METRICS)
    monkeypatch.setenv("DVC_ROOT", str(clone))
    capsys.readouterr()
    assert tag_runs(cfg, clone) == 0
    assert f"warning: no {clone / 'mlflow.db'}: the {len(SYSTEMS)} runs the metrics files name are not tagged" in \
        capsys.readouterr().err
    assert not (clone / "mlflow.db").exists() and not (clone / "mlflow.db.lock").exists()


def test_every_system_and_ensemble_of_params_has_a_paper_and_a_seed(cfg):
    tags = run_tags(cfg)
    assert set(tags) == {*cfg.systems(), *cfg.ensembles()}
    for name, own in tags.items():
        assert own["paper"] == cfg.paper_of(name) and own["seed"]
        assert own["table_rows"] is None or own["table_papers"]


def test_the_paper_view_url_carries_the_filter():
    url = paper_view_url("1", "xlan")
    assert url.startswith("http://127.0.0.1:5000/#/experiments/1/runs?")
    query = parse_qs(urlsplit(url.split("#", 1)[1]).query)
    assert query == {"workflowType": ["machine_learning"], "searchFilter": ["tags.paper = 'xlan'"]}
