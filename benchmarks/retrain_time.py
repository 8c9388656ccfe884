"""How long a retrain took, per paper, in minutes here and in reference minutes: the sum of the times logs that
`python -m crossmodal.pipeline.repro` appends to (src/crossmodal/pipeline/times.py).

A retrain may span several runs of the scheduler (stopped by Ctrl-C or a failure, then started again), so the
report sums every run in the logs given (`--since` drops the runs that started before a time, as when a log holds
an earlier retrain). Per pipeline (`pipelines/<name>/dvc.yaml:<stage>` is paper `<name>`; a root stage is
"shared": worlds, backbone, features, captions, tables) it gives the stages' minutes and their share of the total
stage time. Two stages run at once, so the stage time adds up to more than the scheduler runs' wall time, which
is what a user waits. Time spent in stages that were interrupted or failed is counted (it was spent) and shown
apart: it is the price of the stops.

The budget, 120 reference minutes, is for the README's first command from a fresh clone. A retrain's runs may have
spent time on stages that a later commit dropped or changed, so `--workspace` names a checkout of the commit whose
first command counts (its stage files; no data is read): each of its stages once, at its last logged time, replayed
in the scheduler's order on its slots (`replay`), gives that command's time, and the budget is checked against it
(without `--workspace`: against the runs' summed wall time). Each logged run is replayed too, on its own commit's
graph (`--earlier` names the checkouts of commits that earlier runs ran), beside its measured wall time, so the
replay's error is on the page.

Minutes become reference minutes with the calibration of the CPU that ran the retrain (calibration.py): a log
whose lines name another CPU than the calibration's is refused, as is a log that mixes CPUs.

Run on demand: `python benchmarks/retrain_time.py --log .dvc/tmp/repro/times.jsonl [--log ...] [--since ISO]
[--calibration benchmarks/results/calibration.json] [--workspace DIR [--earlier DIR ...]]`. Writes
`benchmarks/results/retrain.{json,md}`.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import calibration as calib  # noqa: E402
from crossmodal.io import write_json, write_text  # noqa: E402  (calibration put src/ on the path)
from crossmodal.machine import IDENTITY, describe  # noqa: E402

RESULTS = calib.ROOT / "benchmarks" / "results"
BUDGET_MINUTES = 120  # reference minutes for a whole retrain


def read_logs(paths: list[Path], since: str | None = None) -> list[dict]:
    """The logs' lines, each once (a log given twice counts once), without the runs that started before `since`
    (an ISO 8601 time in UTC, as the log writes them)."""
    records, seen = [], set()
    for path in paths:
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{number}: not a JSON line ({error})") from None
            key = (record["kind"], record["run"], record.get("stage"))
            if key not in seen:
                seen.add(key)
                records.append(record)
    if since:
        starts = {r["run"]: r["start"] for r in records if r["kind"] == "run"}
        records = [r for r in records if starts.get(r["run"], r["start"]) >= since]
    return records


def paper(address: str) -> str:
    """`pipelines/<name>/dvc.yaml:<stage>` -> `<name>`; a root stage -> "shared"."""
    file, _, _ = address.rpartition(":")
    parts = Path(file).parts if file else ()
    return parts[1] if len(parts) == 3 and parts[0] == "pipelines" else "shared"


def one_cpu(records: list[dict]) -> dict:
    """The CPU every line names; a ValueError when the lines name several."""
    kinds = {tuple(r["cpu"].get(k) for k in IDENTITY): r["cpu"] for r in records}
    if len(kinds) != 1:
        raise ValueError("the logs mix CPUs (" + "; ".join(describe(c) for c in kinds.values()) + "): report each "
                         "machine's runs apart, with its own calibration")
    return next(iter(kinds.values()))


def summarise(records: list[dict], calibration: dict, budget: float = BUDGET_MINUTES) -> dict:
    """Minutes per paper and in all, measured and in reference minutes."""
    stages = [r for r in records if r["kind"] == "stage"]
    runs = [r for r in records if r["kind"] == "run"]
    if not stages and not runs:
        raise ValueError("the logs hold no runs")
    cpu = one_cpu(records)
    factor = calib.factor(calibration, cpu)
    by_paper: dict[str, dict] = {}
    for record in stages:
        entry = by_paper.setdefault(paper(record["stage"]), {"stages": 0, "seconds": 0.0, "lost_seconds": 0.0})
        entry["stages"] += 1
        entry["seconds"] += record["seconds"]
        if record["status"] in ("interrupted", "failed"):
            entry["lost_seconds"] += record["seconds"]
    stage_seconds = sum(r["seconds"] for r in stages)

    def minutes(seconds: float) -> dict:
        return {"minutes": round(seconds / 60, 2), "reference_minutes": round(seconds / 60 / factor, 2)}

    papers = {name: {"stages": e["stages"], **minutes(e["seconds"]), "share": round(e["seconds"] / stage_seconds, 4)
                     if stage_seconds else 0.0, "lost": minutes(e["lost_seconds"])}
              for name, e in sorted(by_paper.items(), key=lambda item: -item[1]["seconds"])}
    wall = minutes(sum(r["seconds"] for r in runs))
    stage_runs = {r["run"] for r in stages}
    return {"machine": cpu, "factor": factor, "calibration_date": calibration.get("date"),
            "runs": len({r["run"] for r in records}), "runs_without_end": sorted(stage_runs - {r["run"] for r in runs}),
            "statuses": {s: sum(r["status"] == s for r in stages) for s in ("ran", "unchanged", "failed",
                                                                              "interrupted")},
            "papers": papers, "stage_time": minutes(stage_seconds), "wall_time": wall,
            "interrupted": minutes(sum(r["seconds"] for r in stages if r["status"] == "interrupted")),
            "failed": minutes(sum(r["seconds"] for r in stages if r["status"] == "failed")),
            "budget_reference_minutes": budget, "within_budget": wall["reference_minutes"] <= budget}


def replay(order: list[str], waits_for: dict[str, set[str]], seconds: dict[str, float], jobs: int) -> float:
    """The seconds the scheduler (crossmodal/pipeline/repro.py `_schedule`) takes to run the stages `order` lists
    with these durations: it starts, in `order`, each stage whose upstream stages are done, `jobs` at a time."""
    clock, running, done, pending = 0.0, {}, set(), list(order)
    while pending or running:
        for address in [a for a in pending if waits_for[a] <= done][:jobs - len(running)]:
            pending.remove(address)
            running[address] = clock + seconds[address]
        if not running:
            raise ValueError(f"stages that wait for stages outside the plan: {', '.join(pending[:3])}")
        clock = min(running.values())
        for address in [a for a, end in running.items() if end <= clock]:
            del running[address]
            done.add(address)
    return clock


def first_command(records: list[dict], order: list[str], waits_for: dict[str, set[str]], factor: float,
                  earlier: list[tuple[list[str], dict[str, set[str]]]] = ()) -> dict:
    """The README's first command from a fresh clone, every stage of the pipeline as it stands run once: each
    stage's last logged time ("ran"), replayed as the scheduler runs them, and its minutes per paper. A stage the
    logs never saw run is an error. `replay_check` replays each logged run that finished, from its own stages'
    times, against its measured wall time: how far the replay is from the scheduler. A run is replayed on the first
    graph that holds all its stages: this pipeline's, then the `earlier` commits' (order, waits_for)."""
    jobs = max(r["jobs"] for r in records)
    last = {r["stage"]: r["seconds"] for r in sorted(records, key=lambda r: r["start"])
            if r["kind"] == "stage" and r["status"] == "ran"}
    missing = [a for a in order if a not in last]
    if missing:
        raise ValueError(f"{len(missing)} stage(s) of the pipeline never ran in these logs, e.g. {missing[0]}")
    by_paper: dict[str, float] = {}
    for address in order:
        by_paper[paper(address)] = by_paper.get(paper(address), 0.0) + last[address]
    total = sum(by_paper.values())
    checks = []
    for run in (r for r in records if r["kind"] == "run" and r["exit"] == 0):
        own = {r["stage"]: r["seconds"] for r in records if r["kind"] == "stage" and r["run"] == run["run"]}
        graph = next(((o, w) for o, w in [(order, waits_for), *earlier] if own and set(own) <= set(o)), None)
        if graph:
            runs_order = [a for a in graph[0] if a in own]
            replayed = replay(runs_order, {a: graph[1][a] & set(own) for a in runs_order}, own, run["jobs"])
            checks.append({"run": run["run"], "stages": len(own), "measured_minutes": round(run["seconds"] / 60, 2),
                           "replayed_minutes": round(replayed / 60, 2)})
    seconds = replay(order, waits_for, last, jobs)
    return {"stages": len(order), "jobs": jobs, "minutes": round(seconds / 60, 2),
            "reference_minutes": round(seconds / 60 / factor, 2),
            "stage_minutes": round(total / 60, 2), "stage_reference_minutes": round(total / 60 / factor, 2),
            "papers": {name: {"minutes": round(s / 60, 2), "reference_minutes": round(s / 60 / factor, 2),
                              "share": round(s / total, 4)}
                       for name, s in sorted(by_paper.items(), key=lambda item: -item[1])},
            "replay_check": checks}


def setup_minutes(path: Path, cpu: dict, factor: float) -> dict:
    """The set-up's minutes from a fresh clone (`setup_seconds` of bench_test_command.py's results), measured on the
    retrain's CPU; an error when the file lacks it or names another CPU."""
    measured = json.loads(Path(path).read_text())
    if "setup_seconds" not in measured:
        raise ValueError(f"{path} has no setup_seconds: run benchmarks/bench_test_command.py --setup")
    if any(measured["machine"].get(k) != cpu.get(k) for k in IDENTITY):
        raise ValueError(f"{path} was measured on {describe(measured['machine'])}, not on {describe(cpu)}")
    minutes = measured["setup_seconds"] / 60
    return {"minutes": round(minutes, 2), "reference_minutes": round(minutes / factor, 2)}


def _total(first: dict) -> dict:
    """The first command's minutes: its set-up and its stages."""
    return {key: round(first[key] + first["setup"][key], 2) for key in ("minutes", "reference_minutes")}


def _graph(workspace: Path) -> tuple[list[str], dict[str, set[str]]]:
    """Every stage of the workspace's pipeline in the scheduler's order, and the stages each waits for."""
    import os

    from crossmodal.pipeline.repro import plan

    here = Path.cwd()
    os.chdir(workspace)
    try:
        return plan([], every=True)
    finally:
        os.chdir(here)


def shown(path: str) -> str:
    """A log's path as a report names it: under the user's home as `~/...`, which reads the same on every machine
    that keeps the log where the README's set-up puts it."""
    home, resolved = Path.home(), Path(path).expanduser().resolve()
    return f"~/{resolved.relative_to(home)}" if resolved.is_relative_to(home) else str(path)


def report(summary: dict, logs: list[str]) -> str:
    s = summary
    lines = ["# Retrain time per paper", "",
             f"Machine: {describe(s['machine'])}; calibration factor {s['factor']:.3f} (measured "
             f"{s['calibration_date']}); reference minutes = minutes here / factor. Logs: "
             + ", ".join(f"`{p}`" for p in logs) + f"; {s['runs']} scheduler run(s).", "",
             "| Pipeline | stages | minutes | reference minutes | share of stage time | lost in stopped stages "
             "(ref. min) |",
             "|---|---|---|---|---|---|"]
    for name, p in s["papers"].items():
        lines.append(f"| {name} | {p['stages']} | {p['minutes']:.1f} | {p['reference_minutes']:.1f} | "
                     f"{100 * p['share']:.1f}% | {p['lost']['reference_minutes']:.1f} |")
    lines += ["", f"- stage time (summed over stages; two run at once): {s['stage_time']['minutes']:.1f} min, "
              f"{s['stage_time']['reference_minutes']:.1f} reference min",
              f"- wall time (summed over the scheduler runs): {s['wall_time']['minutes']:.1f} min, "
              f"{s['wall_time']['reference_minutes']:.1f} reference min",
              f"- lost in interrupted stages: {s['interrupted']['reference_minutes']:.1f} reference min; in failed "
              f"stages: {s['failed']['reference_minutes']:.1f}",
              "- stages by status: " + ", ".join(f"{k} {v}" for k, v in s["statuses"].items()),
              ]
    first = s.get("first_command")
    if first:
        total = _total(first)
        lines += ["", "## The first command from a fresh clone", "",
                  f"**{total['reference_minutes']:.1f} reference minutes** ({total['minutes']:.1f} here): the "
                  f"set-up, {first['setup']['reference_minutes']:.1f} (bench_test_command.py --setup), and each of "
                  f"the pipeline's {first['stages']} stages once, its last logged time, replayed as the scheduler "
                  f"runs them ({first['jobs']} at a time), {first['reference_minutes']:.1f}; their stage time "
                  f"{first['stage_minutes']:.1f} min, {first['stage_reference_minutes']:.1f} reference min.", "",
                  "| Pipeline | minutes | reference minutes | share of stage time |", "|---|---|---|---|"]
        lines += [f"| {name} | {p['minutes']:.1f} | {p['reference_minutes']:.1f} | {100 * p['share']:.1f}% |"
                  for name, p in first["papers"].items()]
        lines += ["", "The replay against the scheduler, per logged run that finished (on its commit's graph):", ""]
        lines += [f"- run {c['run']}: {c['stages']} stages, measured {c['measured_minutes']:.1f} min, replayed "
                  f"{c['replayed_minutes']:.1f}" for c in first["replay_check"]] or ["- none"]
    basis = "the first command's replay" if first else "wall time"
    lines += ["", f"Within {s['budget_reference_minutes']:g} reference minutes ({basis}): "
              f"{'yes' if s['within_budget'] else 'no'}"]
    if s["runs_without_end"]:
        lines.append("- runs with no end line (killed; their wall time is missing): "
                     + ", ".join(s["runs_without_end"]))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", action="append", required=True, help="a times log (repeatable)")
    parser.add_argument("--since", help="only the runs that started at or after this ISO 8601 time (UTC)")
    parser.add_argument("--calibration", type=Path, default=calib.CALIBRATION)
    parser.add_argument("--out", type=Path, default=RESULTS, help="where retrain.{json,md} go")
    parser.add_argument("--workspace", type=Path, help="a checkout of the commit whose first command is replayed "
                        "(its stage files are read; default: the logs' sums only)")
    parser.add_argument("--setup", type=Path, default=RESULTS / "test_command.json", help="the set-up's time from a "
                        "fresh clone (bench_test_command.py --setup), added to the first command's")
    parser.add_argument("--earlier", type=Path, action="append", default=[], help="a checkout of a commit an "
                        "earlier run of the retrain ran, to replay that run against its wall time (repeatable)")
    args = parser.parse_args(argv)
    try:
        records = read_logs([Path(p) for p in args.log], args.since)
        summary = summarise(records, calib.load(args.calibration))
        if args.workspace:
            summary["first_command"] = first_command(records, *_graph(args.workspace), summary["factor"],
                                                     [_graph(path) for path in args.earlier])
            summary["first_command"]["setup"] = setup_minutes(args.setup, summary["machine"], summary["factor"])
            summary["within_budget"] = _total(summary["first_command"])["reference_minutes"] <= summary[
                "budget_reference_minutes"]
    except (ValueError, OSError, calib.CalibrationError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    logs = [shown(p) for p in args.log]
    write_json(args.out / "retrain.json", {**summary, "logs": logs, "since": args.since}, indent=1)
    write_text(args.out / "retrain.md", report(summary, logs))
    print(report(summary, logs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
