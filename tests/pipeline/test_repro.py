"""`python -m crossmodal.pipeline.repro`: DVC's stages, several at a time, on a three-stage repository.

Stages `left` and `right` are independent and each sleeps, writing its start and end times; `join` reads both.
The scheduler must run the two at once, `join` after both, record all three as `dvc repro` would (a plain `dvc
status` then finds nothing to do), plan only what changed and what depends on it, and stop starting stages after
a failure; and append each stage's status and seconds, and each run's, to its times log (pipeline/times.py). The
tests' shared tiny pipeline (tiny_pipeline.py) is built with it too."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow  # DVC repositories and the scheduler's processes

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

STAMP = ("import json, sys, time; t = time.time(); time.sleep({sleep}); "
         "json.dump([t, time.time()], open(sys.argv[1], 'w'))")


def _stage(name: str, deps: list[str], sleep: float = 5) -> dict:  # longer than a DVC start-up on a busy machine
    return {"cmd": f"python -c \"{STAMP.format(sleep=sleep)}\" {name}.json", "deps": deps, "outs": [f"{name}.json"]}


def _write_stages(repo: Path, **override) -> None:
    stages = {"left": _stage("left", ["in.txt"]), "right": _stage("right", ["in.txt"]),
              "join": _stage("join", ["left.json", "right.json"], sleep=0)}
    stages.update(override)
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))


def _env(**extra: str) -> dict:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT / "src")}
    env.pop("DVC_ROOT", None)
    env.pop("CROSSMODAL_REPRO_TIMES", None)
    return {**env, **extra}


def _run(repo: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=repo, env=_env(**extra), capture_output=True, text=True, timeout=300)


def _times(path: Path) -> tuple[list[dict], list[dict]]:
    """The times log's stage lines and run lines."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in lines if r["kind"] == "stage"], [r for r in lines if r["kind"] == "run"]


def _plan(repo: Path, *targets: str) -> tuple[list[str], dict]:
    code = ("import json, sys; from crossmodal.pipeline.repro import plan; "
            "order, waits = plan(sys.argv[1:]); print(json.dumps([order, {k: sorted(v) for k, v in waits.items()}]))")
    proc = _run(repo, sys.executable, "-c", code, *targets)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("repro")
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"]):
        assert _run(repo, *cmd).returncode == 0
    (repo / "in.txt").write_text("1\n")
    _write_stages(repo)
    return repo


def test_independent_stages_run_at_once_and_are_recorded(repo):
    assert _plan(repo) == [["left", "right", "join"], {"left": [], "right": [], "join": ["left", "right"]}]
    proc = _run(repo, sys.executable, "-m", "crossmodal.pipeline.repro", "--jobs", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    left, right, join = (json.loads((repo / f"{n}.json").read_text()) for n in ("left", "right", "join"))
    assert left[0] < right[1] and right[0] < left[1], (left, right)  # the two intervals overlap
    assert join[0] >= max(left[1], right[1])
    assert "done join (" in proc.stdout and (repo / ".dvc/tmp/repro/join.log").is_file()
    status = _run(repo, "dvc", "status", "--json")
    assert json.loads(status.stdout) == {}, status.stdout  # DVC's lock file has every stage, as after `dvc repro`
    assert _plan(repo) == [[], {}]
    assert "every stage is up to date" in _run(repo, sys.executable, "-m", "crossmodal.pipeline.repro").stdout
    stages, runs = _times(repo / ".dvc/tmp/repro/times.jsonl")
    assert sorted((r["stage"], r["status"]) for r in stages) == [("join", "ran"), ("left", "ran"), ("right", "ran")]
    assert stages[-1]["stage"] == "join"
    assert all(r["run"] == runs[0]["run"] and r["jobs"] == 2 for r in stages)
    assert all(r["seconds"] >= 5 and r["start"] < r["end"] for r in stages[:2])  # each sleeps 5 s
    assert runs[0]["stages"] == 3 and runs[0]["exit"] == 0 and runs[0]["seconds"] >= 5
    assert runs[0]["seconds"] < sum(r["seconds"] for r in stages)  # the two ran at once
    assert runs[1]["stages"] == 0 and runs[1]["run"] != runs[0]["run"]  # the second run: nothing to do
    assert stages[0]["cpu"]["model_name"] and stages[0]["cpu"] == runs[0]["cpu"]


def test_plans_what_changed_and_what_depends_on_it(repo):
    _write_stages(repo, right=_stage("right", ["in.txt"], sleep=0.1))  # right's command changed
    try:
        assert _plan(repo) == [["right", "join"], {"right": [], "join": ["right"]}]
        assert _plan(repo, "right") == [["right"], {"right": []}]
    finally:
        _write_stages(repo)


def test_a_failed_stage_starts_nothing_after_it(repo):
    (repo / "in.txt").write_text("2\n")
    _write_stages(repo, right={"cmd": "python -c \"raise SystemExit('right broke')\"", "deps": ["in.txt"],
                               "outs": ["right.json"]})
    times = repo / "elsewhere" / "times.jsonl"  # CROSSMODAL_REPRO_TIMES moves the log
    try:
        proc = _run(repo, sys.executable, "-m", "crossmodal.pipeline.repro", "-j", "2",
                    CROSSMODAL_REPRO_TIMES=str(times))
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "FAILED right" in proc.stdout and "right broke" in proc.stdout  # the log's tail
        assert "started join" not in proc.stdout and "1 not run" in proc.stdout
        assert "done left (" in proc.stdout
        stages, runs = _times(times)
        assert sorted((r["stage"], r["status"]) for r in stages) == [("left", "ran"), ("right", "failed")]
        assert [(r["stages"], r["exit"]) for r in runs] == [(3, 1)]  # join was planned, and never started
    finally:
        (repo / "in.txt").write_text("1\n")
        _write_stages(repo)


def test_ctrl_c_stops_the_running_stages_and_records_none(repo):
    import signal
    import time

    (repo / "in.txt").write_text("3\n")
    shutil.rmtree(repo / ".dvc/tmp/repro", ignore_errors=True)  # the earlier tests' logs
    _write_stages(repo, left=_stage("left", ["in.txt"], sleep=60), right=_stage("right", ["in.txt"], sleep=60))
    inherited = signal.getsignal(signal.SIGINT)  # a process started with SIGINT ignored never sees Ctrl-C
    try:
        proc = subprocess.Popen([sys.executable, "-m", "crossmodal.pipeline.repro"], cwd=repo, env=_env(), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a shell starts it
        logs = [repo / ".dvc/tmp/repro" / f"{n}.log" for n in ("left", "right")]
        deadline = time.time() + 60
        while not all(p.is_file() and "Running stage" in p.read_text() for p in logs) and time.time() < deadline:
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=45)  # the commands sleep 60 s
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"not stopped in 45 s (the test's SIGINT disposition: {inherited}):\n"
                                 f"{proc.communicate()[0]}") from None
        assert proc.returncode == 130 and "interrupted" in out, out
        stages, runs = _times(repo / ".dvc/tmp/repro/times.jsonl")
        assert sorted((r["stage"], r["status"]) for r in stages) == [("left", "interrupted"), ("right", "interrupted")]
        assert [(r["stages"], r["exit"]) for r in runs] == [(3, 130)]
        status = json.loads(_run(repo, "dvc", "status", "--json").stdout)
        assert {"left", "right", "join"} <= set(status)  # none of them recorded as done
    finally:
        (repo / "in.txt").write_text("1\n")
        _write_stages(repo)


# Two stages start together: the second write meets the kernel's rate limit unless the process has CAP_SYS_ADMIN.
NICE = """
import os, subprocess
from pathlib import Path
from crossmodal.pipeline.repro import share_nice
def nice(pid):
    try:
        return Path(f'/proc/{pid}/autogroup').read_text().split()[-1]
    except (OSError, IndexError) as error:  # a sandbox's /proc may show one's own autogroup and no other
        raise SystemExit(f'SKIP: /proc/{pid}/autogroup unreadable ({error!r})')
own = nice(os.getpid())
niceness = os.nice(7)  # 7 more than the test's own, which may run under nice itself
stages = [subprocess.Popen(['sleep', '30'], start_new_session=True) for _ in range(2)]
before = [nice(stage.pid) for stage in stages]
for stage in stages:
    share_nice(stage.pid)
print(niceness, *before, *(nice(stage.pid) for stage in stages), own, nice(os.getpid()))
for stage in stages:
    stage.kill()
"""


def _scheduled_by_autogroup() -> bool:
    """True where Linux groups this process by session: the kernel has autogroups, they are switched on, and this
    process's /proc/self/autogroup names one (a sandbox's /proc may leave it empty)."""
    try:
        enabled = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
        return enabled and Path("/proc/self/autogroup").read_text().startswith("/autogroup-")
    except OSError:
        return False


@pytest.mark.skipif(not _scheduled_by_autogroup(), reason="this process is not scheduled by session autogroup")
def test_under_nice_each_stage_session_is_as_nice_as_the_command():
    """A stage's session is an autogroup of Linux's scheduler, which shares the CPU between sessions whatever their
    processes' nice: a new one starts at 0, and `share_nice` gives it the command's value (7 above the test's own);
    the command's own session is left as it was."""
    drop = ["setpriv", "--inh-caps=-sys_admin", "--bounding-set=-sys_admin"]  # as any user but root
    if os.geteuid() != 0 or not shutil.which("setpriv") or subprocess.run([*drop, "true"]).returncode != 0:
        drop = []
    out = subprocess.run([*drop, sys.executable, "-c", NICE], env=_env(), capture_output=True, text=True)
    if out.stderr.startswith("SKIP: "):
        pytest.skip(out.stderr[6:].strip())
    assert out.returncode == 0, out.stderr
    niceness, *groups, own_before, own_after = out.stdout.split()
    assert groups == ["0", "0", niceness, niceness]
    assert own_after == own_before


def test_bad_jobs_is_one_line(repo):
    proc = _run(repo, sys.executable, "-m", "crossmodal.pipeline.repro", "--jobs", "0")
    assert proc.returncode == 2 and proc.stderr.strip() == "error: --jobs must be at least 1, got 0"
