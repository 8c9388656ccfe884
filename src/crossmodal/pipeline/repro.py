"""`python -m crossmodal.pipeline.repro [targets] [--jobs N]`: `dvc repro`, N stages at a time where the graph allows.

DVC runs one stage at a time, and a 2-core machine trains our small models at well under twice the speed of one
core, so one stage leaves much of the second core idle. DVC itself supports several `dvc repro` processes on
disjoint stages: it releases the repository lock while a stage's command runs, and guards each stage's deps and
outs with its read-write lock. This command plans with DVC's own graph and status, then runs every stage that must
run as `dvc --wait-for-lock repro --single-item <stage>` once the stages it depends on are done, at most `jobs` at
once. What each stage computes is unchanged:
- every stage sees the environment it sees under plain `dvc repro`, torch threads included (`runtime.threads`),
  so the same params give the same bits (a thread count of its own would change the last bits of a run: it
  changes how the kernels split their sums);
- OMP_WAIT_POLICY=PASSIVE (unless set) lets a stage's waiting OpenMP threads yield the core to the other stage's
  instead of spinning; it changes no number;
- DVC decides, as always, whether a stage runs (a stage whose upstream reran with the same outputs is skipped)
  and records each one in the lock files;
- one METEOR scorer serves every stage (metrics/meteor_server.py, its socket in CROSSMODAL_METEOR): a stage that
  scores captions would otherwise start its own JVM, which loads METEOR's paraphrase table (8-10 CPU-seconds on a
  2-core machine) for every training stage; the scores are the ones each stage computes alone;
- one stage server (stage_server.py), a process that has imported torch and MLflow, forks each stage's command,
  which saves each stage those imports (about 9 CPU-seconds on a 2-core machine); the child computes what a new
  process would, and runs with the stage's environment, which must equal the server's (compute.portable's kernel
  paths are therefore set here, before the server starts). The server forks each stage's DVC process as well,
  which saves DVC's imports (about 0.4 s a stage).
Measured on a 2-core machine (docs/performance.md): two training stages at once, two threads each, took 1.31-1.40x
less wall time than one after the other, and gave the same bits.

Each stage's output goes to `.dvc/tmp/repro/<stage>.log`; this command prints a line when a stage starts and
ends, and the log's last lines when one fails. Each stage's status and seconds, and each run's, are appended to
`.dvc/tmp/repro/times.jsonl` (or the file CROSSMODAL_REPRO_TIMES names; times.py), which
`benchmarks/retrain_time.py` sums over the runs a retrain took. A failure, like `dvc repro`'s, starts nothing new:
the stages running finish, and the command exits 1. Ctrl-C stops every stage (DVC records none of them; outputs are
written atomically). `--jobs 1` is plain `dvc repro` (and logs no times). Under `nice`, the stages yield the
cores to other work as the command does, on Linux's autogroup scheduler too (`share_nice`).

It is a module of its own, not a command of `crossmodal/cli.py`: the CLI is part of every stage's code closure
(closures.py), so a command there would rerun every stage when it changes.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..io import InputError
from .times import TimesLog, log_path
from .stage_server import SharedStageServer

LOGS = Path(".dvc") / "tmp" / "repro"  # under the repository's root
TAIL = 30  # lines of a failed stage's log shown


def plan(targets: list[str], every: bool = False) -> tuple[list[str], dict[str, set[str]]]:
    """The stages `dvc repro <targets>` would run, in its order, and the ones among them each waits for.

    A stage runs when DVC finds it changed (its command, deps or outs) or when a stage it depends on runs; with
    `every`, every stage counts as changed (a fresh clone's first run: benchmarks/retrain_time.py replays it). Its
    address is the one `dvc repro` takes (`pipelines/<paper>/dvc.yaml:<name>`, or `<name>` at the root)."""
    from dvc.repo import Repo
    from dvc.repo.reproduce import collect_stages, get_active_graph, plan_repro

    with Repo() as repo, repo.lock:
        graph = get_active_graph(repo.index.graph)
        stages = plan_repro(graph, collect_stages(repo, targets or ["dvc.yaml"]))
        runs: dict = {}
        for stage in stages:  # dependencies first
            upstream = [d for d in graph.successors(stage) if d in runs]
            if every or upstream or stage.changed():
                runs[stage] = upstream
        return ([s.addressing for s in runs],
                {s.addressing: {d.addressing for d in upstream} for s, upstream in runs.items()})


def _log(logs: Path, address: str) -> Path:
    return logs / (re.sub(r"[^A-Za-z0-9_.-]+", "_", address) + ".log")


def _say(text: str) -> None:
    print(f"repro: {text}", flush=True)


def _tail(path: Path) -> str:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join("    " + line for line in lines[-TAIL:])


def run(targets: list[str], jobs: int) -> int:
    """Reproduce `targets` (default: every stage, as `dvc repro` at the root), `jobs` stages at a time; the exit
    status `dvc repro` would give (0, 1 on a failed stage, 130 on Ctrl-C)."""
    if jobs < 1:
        raise InputError(f"--jobs must be at least 1, got {jobs}")
    if jobs == 1:
        return subprocess.call(["dvc", "repro", *targets])
    from dvc.repo import Repo

    times = TimesLog(log_path(Path(Repo.find_root())), jobs, targets)
    order: list[str] = []
    status = 1  # until the run returns: an error's status (main() reports an InputError with 2)
    try:
        order, waits_for = plan(targets)
        status = _reproduce(order, waits_for, jobs, times)
        return status
    except InputError:
        status = 2
        raise
    except KeyboardInterrupt:
        status = 130
        raise
    finally:
        times.finish(len(order), status)


def _reproduce(order: list[str], waits_for: dict[str, set[str]], jobs: int, times: TimesLog) -> int:
    """run()'s work once planned, in the scheduler's environment."""
    from dvc.repo import Repo

    if not order:
        _say("every stage is up to date")
        return 0
    from ..metrics.meteor_server import SharedMeteor

    start = time.perf_counter()
    logs = Path(Repo.find_root()) / LOGS
    logs.mkdir(parents=True, exist_ok=True)
    _pin_kernel_paths()
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    with SharedMeteor() as meteor:
        env.update(meteor.env)
        with SharedStageServer(env) as server:
            share_nice(server.pid)
            status = _schedule(order, waits_for, logs, {**env, **server.env}, jobs, times)
    if status == 0:
        shared = f"; METEOR: one JVM for {meteor.requests} scoring(s)" if meteor.requests else ""
        _say(f"{len(order)} stages in {time.perf_counter() - start:.0f} s{shared}")
    return status


def _pin_kernel_paths() -> None:
    """compute.portable's variables in this environment, as each stage sets them in its own before importing torch:
    the stage server (stage_server.py) imports torch before it forks the stages, and serves only stages whose
    environment is its own. Invalid params are left for the `params` stage to report."""
    from ..config.loader import load
    from ..environment import pin_kernel_paths

    try:
        pin_kernel_paths(load(None).compute.portable)
    except InputError:
        pass


def share_nice(pid: int) -> None:
    """Give the session that process `pid` leads this process's nice value. Each stage runs in a session of its own
    (so that Ctrl-C reaches it once, from here), and where Linux schedules by autogroup (one per session; the
    default of most desktop kernels) the CPU is shared between sessions whatever their processes' nice: under
    `nice python -m crossmodal.pipeline.repro` every stage would still take a full session's share of the cores from the
    user's other work. Nothing to do at nice 0 or below, or where the kernel has no autogroups.

    Without CAP_SYS_ADMIN (any user but root) the kernel takes one such write per 100 ms and answers EAGAIN to the
    next, as when two stages start together: the write is retried for up to a second."""
    niceness = os.nice(0)
    if niceness <= 0:
        return
    for _ in range(10):
        try:
            Path(f"/proc/{pid}/autogroup").write_text(str(niceness))
            return
        except BlockingIOError:  # EAGAIN: the kernel's rate limit
            time.sleep(0.11)
        except OSError:  # no autogroups here, or the process has already ended
            return


def _schedule(order: list[str], waits_for: dict[str, set[str]], logs: Path, env: dict, jobs: int,
              times: TimesLog) -> int:
    running: dict[str, tuple[subprocess.Popen, float, float]] = {}  # process, start (monotonic, epoch)
    done: set[str] = set()
    failed: list[str] = []
    pending = list(order)

    def stop(signum, frame):  # SIGTERM: end the stages as Ctrl-C does
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    _say(f"{len(order)} stages to check or run, {jobs} at a time; logs in {logs}/")
    try:
        while pending or running:
            ready = [a for a in pending if waits_for[a] <= done] if not failed else []
            while ready and len(running) < jobs:
                address = ready.pop(0)
                pending.remove(address)
                with open(_log(logs, address), "w", encoding="utf-8") as log:
                    proc = subprocess.Popen([sys.executable, "-m", "crossmodal.pipeline.stage_server", "--dvc",
                                             "--wait-for-lock", "repro", "--single-item", address],  # DVC served too
                                            stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)  # Ctrl-C reaches them once, from here
                share_nice(proc.pid)
                running[address] = (proc, time.perf_counter(), time.time())
                _say(f"started {address}")
            if not running:
                break  # a failure left stages that can no longer start
            time.sleep(0.2)
            for address, (proc, began, wall_start) in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[address]
                seconds = time.perf_counter() - began
                if proc.returncode:
                    failed.append(address)
                    times.stage(address, "failed", wall_start, time.time(), seconds)
                    _say(f"FAILED {address} (exit {proc.returncode}, {seconds:.0f} s); the end of "
                         f"{_log(logs, address)}:\n{_tail(_log(logs, address))}")
                    continue
                done.add(address)
                ran = "Running stage" in _log(logs, address).read_text(encoding="utf-8", errors="replace")
                times.stage(address, "ran" if ran else "unchanged", wall_start, time.time(), seconds)
                _say(f"{'done' if ran else 'unchanged'} {address} ({seconds:.0f} s; "
                     f"{len(done)} of {len(order)})")
    except KeyboardInterrupt:
        for proc, _, _ in running.values():
            if proc.poll() is None:  # DVC ignores SIGINT while its command runs: signal its process group, as a
                os.killpg(proc.pid, signal.SIGINT)  # terminal's Ctrl-C does
        for address, (proc, began, wall_start) in running.items():
            proc.wait()
            times.stage(address, "interrupted", wall_start, time.time(), time.perf_counter() - began)
        _say("interrupted; the stages that were running are not recorded")
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    if failed:
        left = len(order) - len(done) - len(failed)
        _say(f"{len(failed)} stage(s) failed: {', '.join(failed)}; {left} not run")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m crossmodal.pipeline.repro", description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", help="what `dvc repro` takes: stages or stage files (default: all)")
    parser.add_argument("--jobs", "-j", type=int, default=2, help="stages at once (default 2; 1: plain dvc repro)")
    args = parser.parse_args(argv)
    try:
        return run(args.targets, args.jobs)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # while planning: nothing started yet
        return 130


if __name__ == "__main__":
    sys.exit(main())
