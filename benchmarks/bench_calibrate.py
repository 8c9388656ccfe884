"""Calibration: this machine's speed against the reference machine's, as the factor that turns its minutes into
reference minutes (issue 62).

Time limits are stated in reference minutes: minutes on the 2-core AMD EPYC Zen 4 (AVX-512 BF16) that made the
first results. That machine is gone, so another machine is compared with it on a workload whose time there is on
record for exactly the same computation: the stage commands `pretrain-backbone` and `extract-regions` in default
mode (2 threads, `compute.portable: false`) on the default world. `benchmarks/bench_spread.py`, configuration
"default", timed them there at commit 781a317 (2026-11-24): its row in that commit's
`benchmarks/results/spread.json` holds the seconds and the backbone's MD5, 0388d04a. That commit's dvc.lock and
today's record the same backbone and regions MD5s, so today's code computes the same bits as that measurement.
The seconds are read from that commit's file (`git show`), so a later rerun of bench_spread.py on another
machine cannot change the reference.

factor = seconds here / reference seconds (the pair's total, median over the repeats); reference minutes =
minutes here / factor (calibration.py). The backbone stands for the pipeline's mix of work because, in the
portable-mode runs on record, its time across machines tracked full Up-Down training within about 8%: 23.6 s on
the Zen 4, 39.1 s on an Intel Xeon and 56.9 s on a Zen 3, against Up-Down's 248.6 / 378.2 / 555.6 s, ratios 1.66
vs 1.52 (Xeon) and 2.41 vs 2.23 (Zen 3); the regions stage's 5.2 vs 12.4 s on the Zen 3 is a ratio of 2.38.
Its limit: it is a convolutional network's training and inference, not the recurrent and attention models that
dominate a retrain, on three machines; a CPU whose strengths differ (AMX, another memory system, more cores than
two threads use) may speed the backbone and the captioners unequally, and a busy machine slows both by chance.
The factor also tells nothing about results: whether this CPU computes the reference's bits is the MD5 check.

The workload runs as bench_spread.py ran it: in a temporary copy of the repository (bench_pipeline.copy_repo),
whose world and captions `dvc repro prepro_captions` writes first (untimed, about 10 s), with a params file of
2 threads and the portable mode off, no kernel variables, progress bars off; each command's wall time from start to
exit, process start-up and imports included (their CPU seconds are recorded too, not used: the reference has none).
The pair runs `--repeats` times (default 2; about a minute in all on
the Zen 4).

Run from an activated .venv, on a quiet machine (other work inflates the factor; the load averages before and
after are recorded): `python benchmarks/bench_calibrate.py [--repeats N]`. Writes
`benchmarks/results/calibration.{json,md}`.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml

from bench_pipeline import copy_repo

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "src"))
from crossmodal.environment import KERNEL_VARIABLES  # noqa: E402
from crossmodal.io import write_json, write_text  # noqa: E402
from crossmodal.machine import cpu_identity, describe  # noqa: E402

REFERENCE_COMMIT = "781a317a9f8bbaabcc78f323bbb7511e7fd3e872"
REFERENCE_FILE = "benchmarks/results/spread.json"
REFERENCE_CONFIG = "default"
REFERENCE_MACHINE = "2-core AMD EPYC, Zen 4 (AVX-512 BF16)"
STAGES = ("pretrain-backbone", "extract-regions")
OUTPUTS = {"backbone": "data/models/backbone.pt", "regions": "data/features/regions.h5"}


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def _at_reference(*args: str) -> str:
    """`git show` of the reference commit (`args`: `:<path>`, or options)."""
    argv = ["git", "show", *(f"{REFERENCE_COMMIT}{a}" if a.startswith(":") else a for a in args)]
    if not any(a.startswith(":") for a in args):
        argv.append(REFERENCE_COMMIT)
    try:
        return subprocess.run(argv, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    except subprocess.CalledProcessError as error:
        sys.exit(f"cannot read the reference commit {REFERENCE_COMMIT[:7]}: {error.stderr.strip()}")


def reference() -> dict:
    """The reference machine's row (its stage seconds and backbone MD5) from the reference commit's spread.json,
    and the regions' MD5 from that commit's dvc.lock."""
    row = next(r for r in json.loads(_at_reference(f":{REFERENCE_FILE}")) if r["config"] == REFERENCE_CONFIG)
    lock = yaml.safe_load(_at_reference(":dvc.lock"))
    date = _at_reference("-s", "--format=%cs").strip()
    regions = {out["md5"] for stage in lock["stages"].values() for out in stage.get("outs", [])
               if out["path"] == OUTPUTS["regions"]}
    seconds = {s: row["seconds"][s] for s in STAGES}
    return {"machine": REFERENCE_MACHINE, "cpu_reported": row["environment"]["cpu"],
            "cpu_capability": row["environment"]["cpu_capability"], "torch": row["environment"]["versions"]["torch"],
            "seconds": seconds, "total_seconds": round(sum(seconds.values()), 2),
            "md5": {"backbone": row["md5"]["backbone"], "regions": regions.pop() if len(regions) == 1 else None},
            "source": f"{REFERENCE_FILE} at commit {REFERENCE_COMMIT[:7]}, configuration {REFERENCE_CONFIG!r} "
                      f"(bench_spread.py, {date}); the regions' MD5 from dvc.lock at that commit"}


def prepare(repo: Path) -> dict:
    """A copy of the repository with the default world and captions, and the environment its stages run in."""
    copy_repo(repo)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["runtime"]["threads"] = 2
    params["compute"]["portable"] = False
    (repo / "params_calibrate.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_VARIABLES}
    env.update(CROSSMODAL_PROGRESS="0", PYTHONPATH=str(repo / "src"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("DVC_ROOT", None)
    subprocess.run(["dvc", "repro", "prepro_captions"], cwd=repo, env=env, check=True, capture_output=True)
    return env


def run_pair(repo: Path, env: dict) -> dict:
    """One timed run of the two stage commands (wall seconds, and the CPU seconds they used, user and system), and
    their outputs' MD5s."""
    seconds, cpu_seconds = {}, {}
    for stage in STAGES:
        start, used = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-m", "crossmodal", "--params", "params_calibrate.yaml", stage], cwd=repo,
                       env=env, check=True, stdout=subprocess.DEVNULL)
        seconds[stage] = round(time.perf_counter() - start, 2)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_seconds[stage] = round(after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime, 2)
    return {"seconds": seconds, "total_seconds": round(sum(seconds.values()), 2), "cpu_seconds": cpu_seconds,
            "md5": {name: md5(repo / path) for name, path in OUTPUTS.items()}}


def summarise(runs: list[dict], ref: dict, loads: dict) -> dict:
    here = {s: statistics.median(r["seconds"][s] for r in runs) for s in STAGES}
    total = statistics.median(r["total_seconds"] for r in runs)
    found = {name: sorted({r["md5"][name] for r in runs}) for name in OUTPUTS}
    return {"machine": cpu_identity(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "load_average": loads, "runs": runs, "median_seconds": here, "median_total_seconds": round(total, 2),
            "reference": ref, "factor": round(total / ref["total_seconds"], 3),
            "factor_by_stage": {s: round(here[s] / ref["seconds"][s], 3) for s in STAGES},
            "md5": found, "reference_bits": {name: found[name] == [ref["md5"][name]] for name in OUTPUTS}}


def report(result: dict) -> str:
    ref, machine = result["reference"], result["machine"]
    lines = ["# Calibration: this machine against the reference machine", "",
             f"Machine: {describe(machine)}, {machine['cores_usable']} usable cores; measured {result['date']} "
             f"(torch {result['torch']}, ATen capability {result['cpu_capability']}).",
             f"Load average (1, 5, 15 min) before: {result['load_average']['before']}, after: "
             f"{result['load_average']['after']}.", "",
             f"Reference: {ref['machine']}, from {ref['source']}.", "",
             "| Stage | " + " | ".join(f"run {i + 1} (s)" for i in range(len(result["runs"])))
             + " | median (s) | reference (s) | ratio |", "|---" * (4 + len(result["runs"])) + "|"]
    for stage in STAGES:
        lines.append(f"| {stage} | " + " | ".join(f"{r['seconds'][stage]:.1f}" for r in result["runs"])
                     + f" | {result['median_seconds'][stage]:.1f} | {ref['seconds'][stage]:.1f} | "
                     f"{result['factor_by_stage'][stage]:.3f} |")
    lines.append("| both | " + " | ".join(f"{r['total_seconds']:.1f}" for r in result["runs"])
                 + f" | {result['median_total_seconds']:.1f} | {ref['total_seconds']:.1f} | "
                 f"**{result['factor']:.3f}** |")
    lines += ["", "CPU seconds (user + system) per run, not used for the factor: " + "; ".join(
        ", ".join(f"{stage} {r['cpu_seconds'][stage]:.1f}" for stage in STAGES) for r in result["runs"]) + "."]
    lines += ["", f"Factor (seconds here / reference seconds): **{result['factor']:.3f}**; reference minutes = "
              f"minutes here / {result['factor']:.3f}.", ""]
    for name in OUTPUTS:
        same = result["reference_bits"][name]
        lines.append(f"- {name} MD5 here: {', '.join(f'`{m}`' for m in result['md5'][name])}, "
                     f"{'the same as' if same else 'not'} the reference's `{ref['md5'][name]}`")
    bits = result["reference_bits"]["backbone"]
    lines += ["", "This CPU computes the reference machine's bits in default mode (the backbone's MD5)." if bits else
              "The backbone's bits differ from the reference's: this CPU computes other bits, or the working tree's "
              "code or params (copied as they are) are not the reference's computation; either way the factor "
              "compares different work."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of the pair (default 2; median)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    ref = reference()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        env = prepare(repo)
        loads = {"before": [round(x, 2) for x in os.getloadavg()]}
        runs = []
        for i in range(args.repeats):
            runs.append(run_pair(repo, env))
            print(f"run {i + 1}: {json.dumps(runs[-1])}", flush=True)
        loads["after"] = [round(x, 2) for x in os.getloadavg()]
        environment = json.loads((repo / "reports/metrics/backbone.json").read_text())["environment"]
    result = summarise(runs, ref, loads)
    result.update(cpu_capability=environment["cpu_capability"], torch=environment["versions"]["torch"],
                  threads=environment["threads"], portable=environment.get("portable"))
    write_json(RESULTS / "calibration.json", result, indent=1)
    write_text(RESULTS / "calibration.md", report(result))
    print(report(result))


if __name__ == "__main__":
    main()
