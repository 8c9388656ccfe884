"""The retrain-time report (benchmarks/retrain_time.py) and its conversion to reference minutes
(benchmarks/calibration.py), on a small synthetic times log of two scheduler runs, the first one interrupted.

What matters: a retrain's minutes are summed over all its runs and attributed to the right paper, stage time and
wall time are kept apart (two stages run at once), stopped stages' time is counted and shown apart, a log given
twice counts once, and minutes are converted only with the calibration of the CPU that measured them."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import calibration as calib  # noqa: E402
import retrain_time  # noqa: E402
from crossmodal.machine import cpu_identity, parse_cpuinfo  # noqa: E402
from crossmodal.pipeline.times import TimesLog  # noqa: E402

ZEN5 = {"vendor": "AuthenticAMD", "model_name": "AMD EPYC", "family": "26", "model": "2", "stepping": "1",
        "flags": ["avx2", "avx512f", "avx512_bf16"], "processors": 2, "cores_usable": 2}
ZEN4 = {**ZEN5, "family": "25", "model": "17"}  # the same model name: only family and model tell them apart
CALIBRATION = {"machine": ZEN5, "factor": 0.8, "date": "2026-11-29T00:00:00+00:00"}


def _stage(run: str, address: str, status: str, seconds: float, start: str, cpu: dict = ZEN5) -> dict:
    return {"kind": "stage", "run": run, "stage": address, "status": status, "seconds": seconds, "start": start,
            "end": start, "jobs": 2, "cpu": cpu}


def _run(run: str, start: str, seconds: float, stages: int, exit_status: int) -> dict:
    return {"kind": "run", "run": run, "start": start, "end": start, "seconds": seconds, "stages": stages,
            "exit": exit_status, "targets": [], "jobs": 2, "cpu": ZEN5}


FIRST, SECOND = "2026-11-29T01:00:00.000+00:00-11", "2026-11-29T02:00:00.000+00:00-22"
RECORDS = [  # the first run: backbone and an X-LAN stage ran, then Ctrl-C stopped X-LAN's second and ETA's stage
    _stage(FIRST, "pretrain_backbone", "ran", 600, "2026-11-29T01:00:01.000+00:00"),
    _stage(FIRST, "pipelines/xlan/dvc.yaml:train-xlan", "ran", 1200, "2026-11-29T01:10:00.000+00:00"),
    _stage(FIRST, "pipelines/xlan/dvc.yaml:train-xlan_scst", "interrupted", 300, "2026-11-29T01:30:00.000+00:00"),
    _stage(FIRST, "pipelines/eta/dvc.yaml:train-eta", "interrupted", 240, "2026-11-29T01:31:00.000+00:00"),
    _run(FIRST, "2026-11-29T01:00:00.000+00:00", 2100, 10, 130),
    # the second run: the backbone is up to date now; the two stopped stages ran again, at once
    _stage(SECOND, "pretrain_backbone", "unchanged", 6, "2026-11-29T02:00:01.000+00:00"),
    _stage(SECOND, "pipelines/xlan/dvc.yaml:train-xlan_scst", "ran", 900, "2026-11-29T02:00:10.000+00:00"),
    _stage(SECOND, "pipelines/eta/dvc.yaml:train-eta", "ran", 1254, "2026-11-29T02:00:11.000+00:00"),
    _run(SECOND, "2026-11-29T02:00:00.000+00:00", 1300, 7, 0),
]


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_sums_every_run_per_paper_in_reference_minutes(tmp_path):
    log = _write(tmp_path / "times.jsonl", RECORDS)
    summary = retrain_time.summarise(retrain_time.read_logs([log, log]), CALIBRATION)  # given twice: counted once
    assert summary["runs"] == 2 and summary["runs_without_end"] == []
    papers = summary["papers"]
    assert list(papers) == ["xlan", "eta", "shared"]  # largest first
    assert papers["xlan"] == {"stages": 3, "minutes": 40.0, "reference_minutes": 50.0, "share": 0.5333,
                              "lost": {"minutes": 5.0, "reference_minutes": 6.25}}
    assert papers["eta"]["minutes"] == 24.9 and papers["eta"]["lost"]["minutes"] == 4.0
    assert papers["shared"]["minutes"] == 10.1 and papers["shared"]["lost"]["minutes"] == 0.0
    assert summary["stage_time"] == {"minutes": 75.0, "reference_minutes": 93.75}
    assert summary["wall_time"] == {"minutes": 56.67, "reference_minutes": 70.83}  # (2100 + 1300) s
    assert summary["interrupted"] == {"minutes": 9.0, "reference_minutes": 11.25}
    assert summary["statuses"] == {"ran": 4, "unchanged": 1, "failed": 0, "interrupted": 2}
    assert summary["within_budget"] is True
    assert retrain_time.summarise(retrain_time.read_logs([log]), CALIBRATION, budget=70)["within_budget"] is False
    assert "| xlan | 3 | 40.0 | 50.0 | 53.3% | 6.2 |" in retrain_time.report(summary, [str(log)])


def test_since_keeps_the_later_runs_and_a_run_without_its_end_line_is_named(tmp_path):
    log = _write(tmp_path / "times.jsonl", RECORDS[:4] + RECORDS[5:])  # the first run was killed: no run line
    summary = retrain_time.summarise(retrain_time.read_logs([log]), CALIBRATION)
    assert summary["runs_without_end"] == [FIRST] and summary["wall_time"]["minutes"] == round(1300 / 60, 2)
    later = retrain_time.summarise(retrain_time.read_logs([log], since="2026-11-29T01:45"), CALIBRATION)
    assert later["runs"] == 1 and later["stage_time"]["minutes"] == round(2160 / 60, 2)


def test_stage_addresses_map_to_papers():
    assert retrain_time.paper("pipelines/hoca/dvc.yaml:train-hoca@3") == "hoca"
    assert retrain_time.paper("extract_regions") == "shared"
    assert retrain_time.paper("dvc.yaml:tables") == "shared"


def test_minutes_of_another_cpu_are_refused(tmp_path):
    assert calib.reference_minutes(8.0, CALIBRATION, ZEN5) == 10.0
    with pytest.raises(calib.CalibrationError, match="family 25, model 17"):
        calib.reference_minutes(8.0, CALIBRATION, ZEN4)
    here = {"machine": cpu_identity(), "factor": 2.0}
    assert calib.reference_minutes(3.0, here) == 1.5  # by default, minutes measured on the CPU at hand
    log = _write(tmp_path / "zen4.jsonl", [_stage(FIRST, "pretrain_backbone", "ran", 60, "x", cpu=ZEN4)])
    with pytest.raises(calib.CalibrationError):
        retrain_time.summarise(retrain_time.read_logs([log]), CALIBRATION)
    mixed = _write(tmp_path / "mixed.jsonl", RECORDS + [_stage("r3", "tables", "ran", 60, "y", cpu=ZEN4)])
    with pytest.raises(ValueError, match="mix CPUs"):
        retrain_time.summarise(retrain_time.read_logs([mixed]), CALIBRATION)
    with pytest.raises(calib.CalibrationError, match="bench_calibrate"):
        calib.load(tmp_path / "none.json")


def test_reads_what_the_scheduler_writes(tmp_path):
    """The scheduler's writer (times.TimesLog) and this reader agree on the format."""
    times = TimesLog(tmp_path / "logs" / "times.jsonl", jobs=2, targets=[])
    times.stage("pipelines/ban/dvc.yaml:train-ban", "ran", 1000.0, 1090.0, 90.0)
    times.stage("extract_regions", "failed", 1000.0, 1030.0, 30.0)
    times.finish(stages=2, exit_status=1)
    summary = retrain_time.summarise(retrain_time.read_logs([times.path]), {"machine": cpu_identity(), "factor": 1.5})
    assert summary["papers"]["ban"]["reference_minutes"] == 1.0 and summary["failed"]["minutes"] == 0.5
    assert summary["runs"] == 1 and summary["runs_without_end"] == []


def test_cpuinfo_identity():
    text = ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
            "model name\t: Intel(R) Xeon(R) Platinum 8480C\nstepping\t: 8\nflags\t\t: fpu avx2 avx512f amx_tile "
            "amx_bf16 avx512_bf16\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n")
    assert parse_cpuinfo(text) == {"vendor": "GenuineIntel", "model_name": "Intel(R) Xeon(R) Platinum 8480C",
                                   "family": "6", "model": "143", "stepping": "8",
                                   "flags": ["avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"],
                                   "processors": 2}


def test_replay_runs_stages_as_the_scheduler_does():
    """a (10 s) then b (5 s); c (3 s) beside a; d (4 s) after b and c. Two slots: a and c start, c ends at 3 with
    nothing ready (b waits for a), b runs 10-15, d 15-19. One slot: the sum. Order decides ties, as in `_schedule`."""
    order = ["a", "c", "b", "d"]
    waits = {"a": set(), "c": set(), "b": {"a"}, "d": {"b", "c"}}
    seconds = {"a": 10.0, "b": 5.0, "c": 3.0, "d": 4.0}
    assert retrain_time.replay(order, waits, seconds, jobs=2) == 19.0
    assert retrain_time.replay(order, waits, seconds, jobs=1) == 22.0
    assert retrain_time.replay(["a", "b", "c"], {"a": set(), "b": set(), "c": set()},
                               {"a": 4.0, "b": 4.0, "c": 4.0}, jobs=2) == 8.0
    with pytest.raises(ValueError, match="outside the plan"):
        retrain_time.replay(["b"], {"b": {"a"}}, {"b": 1.0}, jobs=2)


def test_first_command_counts_each_stage_of_the_pipeline_once_at_its_last_time(tmp_path):
    """The first run's interrupted X-LAN SCST and ETA stages ran again in the second: their later times count, the
    stopped attempts do not; only a run that finished (exit 0) is replayed against its wall time. The backbone (600 s) comes first, then the two trainings at once, then SCST."""
    xlan, scst, eta = ("pipelines/xlan/dvc.yaml:train-xlan", "pipelines/xlan/dvc.yaml:train-xlan_scst",
                       "pipelines/eta/dvc.yaml:train-eta")
    order = ["pretrain_backbone", xlan, eta, scst]
    waits = {"pretrain_backbone": set(), xlan: {"pretrain_backbone"}, eta: {"pretrain_backbone"}, scst: {xlan}}
    records = retrain_time.read_logs([_write(tmp_path / "times.jsonl", RECORDS)])
    first = retrain_time.first_command(records, order, waits, factor=0.8)
    # 600, then xlan (1200) beside eta (1254): xlan ends at 1800, scst 1800-2700; eta ends at 1854
    assert first["minutes"] == 45.0 and first["reference_minutes"] == 56.25
    assert first["stage_minutes"] == round((600 + 1200 + 900 + 1254) / 60, 2)
    assert list(first["papers"]) == ["xlan", "eta", "shared"]
    assert first["replay_check"] == [{"run": SECOND, "stages": 3, "measured_minutes": round(1300 / 60, 2),
                                      "replayed_minutes": 21.0}]  # the backbone's check (6 s), then ETA
    with pytest.raises(ValueError, match="never ran"):
        retrain_time.first_command(records, order + ["tables"], {**waits, "tables": set()}, factor=0.8)



def test_the_set_up_counts_only_when_measured_on_the_retrains_cpu(tmp_path):
    path = tmp_path / "test_command.json"
    path.write_text(json.dumps({"machine": ZEN5, "seconds": 300.0, "setup_seconds": 96.0}))
    assert retrain_time.setup_minutes(path, ZEN5, factor=0.8) == {"minutes": 1.6, "reference_minutes": 2.0}
    with pytest.raises(ValueError, match="family 26, model 2"):
        retrain_time.setup_minutes(path, ZEN4, factor=0.8)
    path.write_text(json.dumps({"machine": ZEN5, "seconds": 300.0}))
    with pytest.raises(ValueError, match="--setup"):
        retrain_time.setup_minutes(path, ZEN5, factor=0.8)
