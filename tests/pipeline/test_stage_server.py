"""The stage server (crossmodal/pipeline/stage_server.py): a command it serves ends as it would in its own process,
with the same output and status; an environment it cannot serve runs in the command's own process; Ctrl-C reaches
the command, and through a served DVC process, the command of its stage; a client that dies takes the command with
it. The commands here are a stand-in `crossmodal` package in the working directory, which `python -m crossmodal`
imports first (the server's child does as well); the pipeline's own stages run through the server in the tests' tiny
pipeline (tiny_pipeline.py, `python -m crossmodal.pipeline.repro`)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crossmodal.pipeline.stage_client import ENV
from crossmodal.pipeline.stage_server import SharedStageServer

pytestmark = pytest.mark.slow  # server and client processes

SRC = Path(__file__).resolve().parents[2] / "src"
STAND_IN = """import os, signal, subprocess, sys, time
print("argv", sys.argv[1:], "cwd", os.getcwd(), "parent", os.getppid(), "pid", os.getpid(), flush=True)
print("to stderr", os.environ.get("STAND_IN_VALUE"), file=sys.stderr, flush=True)
if sys.argv[1] == "helper":  # as a stage starts its MLflow worker
    sys.exit(subprocess.run([sys.executable, "-m", "crossmodal.helper"]).returncode)
if sys.argv[1] == "env":
    print(*(os.environ.get(k) for k in sys.argv[2:]), flush=True)
if sys.argv[1:] == ["wait"]:
    time.sleep(120)
sys.exit(int(sys.argv[-1]) if sys.argv[-1].isdigit() else 0)
"""
SET_BY_IMPORTS = ("TORCHINDUCTOR_CACHE_DIR", "_MLFLOW_TELEMETRY_SESSION_ID")  # set (or unset) by torch and MLflow
HELPER = f"""import os, sys
sys.path.insert(0, {str(SRC / "crossmodal" / "pipeline")!r})
from stage_client import HELPERS_ENV, run_on_server
served = run_on_server(sys.argv[1:], "crossmodal.helper", HELPERS_ENV)  # as tracking.py's worker
if served is not None:
    sys.exit(served)
print("helper parent", os.getppid(), "helpers", os.environ.get(HELPERS_ENV), flush=True)
"""
# the client as crossmodal/__main__.py runs it, with the real package: the stand-in is first on the child's path
CLIENT = (f"import sys; sys.path.insert(0, {str(SRC)!r}); from crossmodal.pipeline.stage_client import run_on_server; "
          "status = run_on_server(sys.argv[1:]); sys.exit(99 if status is None else status)")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    work = tmp_path_factory.mktemp("stand-in")
    (work / "crossmodal").mkdir()
    (work / "crossmodal" / "__init__.py").write_text("")
    (work / "crossmodal" / "__main__.py").write_text(STAND_IN)
    (work / "crossmodal" / "helper.py").write_text(HELPER)
    env = {**{k: v for k, v in os.environ.items() if k not in SET_BY_IMPORTS}, "PYTHONPATH": str(SRC),
           "STAND_IN_VALUE": "7"}
    with SharedStageServer(env) as server:
        deadline = time.monotonic() + 120
        while not os.path.exists(server.path) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert os.path.exists(server.path), "the stage server did not start"
        yield work, {**env, **server.env}, server


def _client(work: Path, env: dict, *argv: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CLIENT, *argv], cwd=work, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


def _gone(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_served_command_ends_as_it_would_in_its_own_process(served):
    work, env, server = served
    client = _client(work, env, "a", "3")
    out, err = client.communicate(timeout=60)
    alone = subprocess.run([sys.executable, "-m", "crossmodal", "a", "3"], cwd=work, env={**env, ENV: ""},
                           capture_output=True, text=True)
    assert client.returncode == alone.returncode == 3
    assert f"parent {server.pid} " in out  # forked by the server
    drop = [" ".join(line.split()[:-4]) for line in (out, alone.stdout)]  # but for the parent's and own pid
    assert drop[0] == drop[1] and err == alone.stderr == "to stderr 7\n"


def test_an_environment_that_differs_runs_in_the_commands_own_process(served):
    work, env, server = served
    client = _client(work, {**env, "STAND_IN_OTHER": "1"}, "b")  # as a thread count or kernel path would
    out, err = client.communicate(timeout=60)
    assert client.returncode == 99  # run_on_server answered None: crossmodal/__main__.py runs the command itself
    assert err == "stage server: running here (its environment differs in STAND_IN_OTHER)\n" and out == ""


def test_variables_set_by_imports_or_a_queue_worker_are_served_and_keep_the_clients_values(served, tmp_path):
    work, env, server = served  # a client's parent that imported torch and MLflow itself passes their variables on
    theirs = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "_MLFLOW_TELEMETRY_SESSION_ID": "client"}
    queued = {"CELERY_LOG_LEVEL": "INFO", "_MP_FORK_LOGLEVEL_": "20", "DVC_EXP_NAME": "x"}  # a queued experiment's
    client = _client(work, {**env, **theirs, **queued}, "env", *SET_BY_IMPORTS)
    out, err = client.communicate(timeout=60)
    assert client.returncode == 0 and f"parent {server.pid} " in out, err  # served, not sent back
    assert out.splitlines()[1] == " ".join(theirs[k] for k in SET_BY_IMPORTS)
    mine = _client(work, env, "env", "TORCHINDUCTOR_CACHE_DIR")  # without it, the child has the server's import's
    assert mine.communicate(timeout=60)[0].splitlines()[1] not in ("None", theirs["TORCHINDUCTOR_CACHE_DIR"])


def test_a_served_commands_helper_is_served_but_not_its_own_helpers(served):
    work, env, server = served
    client = _client(work, env, "helper")
    out, err = client.communicate(timeout=60)
    assert client.returncode == 0 and err == "to stderr 7\n", err
    assert out.splitlines()[1] == f"helper parent {server.pid} helpers None"  # forked by the server, and no further
    alone = subprocess.run([sys.executable, "-m", "crossmodal", "helper"], cwd=work, env={**env, ENV: ""},
                           capture_output=True, text=True).stdout.splitlines()  # unserved: its helper is its child
    assert alone[1] == f"helper parent {alone[0].split()[-1]} helpers None"


def _catches(pid: int, signum: int, timeout: float = 30.0) -> bool:
    """Whether process `pid` has a handler for `signum` (its /proc status's SigCgt mask), waiting up to `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = Path(f"/proc/{pid}/status").read_text()
        caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
        if caught >> (signum - 1) & 1:
            return True
        time.sleep(0.01)
    return False


def test_ctrl_c_reaches_the_command_and_the_client_ends_as_it_did(served):
    work, env, _ = served
    client = _client(work, env, "wait")
    line = client.stdout.readline()
    child = int(line.split()[-1])
    # the command prints before the client has read the server's reply: what is tested is Ctrl-C once the client
    # forwards it (an earlier one ends the client alone, and the command, which holds the client's streams, lives
    # until the server sees the client gone: this test once timed out on that path under load)
    assert _catches(client.pid, signal.SIGINT)
    client.send_signal(signal.SIGINT)
    _, err = client.communicate(timeout=60)
    assert client.returncode == -signal.SIGINT and "KeyboardInterrupt" in err
    assert _gone(child)


def test_a_client_that_dies_takes_its_command_with_it(served):
    work, env, _ = served
    client = _client(work, env, "wait")
    child = int(client.stdout.readline().split()[-1])
    client.kill()
    client.wait()
    assert _gone(child)


def _ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        pid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        out.append(pid)
    return out


def test_a_served_dvc_process_runs_its_stage_and_ctrl_c_reaches_the_stages_command(served):
    """`python -m crossmodal.pipeline.stage_server --dvc` (how `python -m crossmodal.pipeline.repro` runs each stage):
    DVC forked by the server runs and records the stage; Ctrl-C, which DVC ignores while a command runs, reaches
    the command through the process group the DVC process leads, and DVC records nothing."""
    work, env, server = served
    bin_env = {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"}  # unserved: another PATH
    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=work, env=bin_env, check=True)
    (work / "dvc.yaml").write_text("stages:\n" + "".join(f"  {name}: {{cmd: {sys.executable} -m crossmodal {args} > "
                                                         f"{name}.txt, outs: [{name}.txt]}}\n"
                                                         for name, args in (("done", "a 0"), ("wait", "wait"))))
    launch = (f"import sys; sys.path.insert(0, {str(SRC)!r}); from crossmodal.pipeline.stage_server import run_dvc; "
              "sys.exit(run_dvc(sys.argv[1:]))")  # `python -m crossmodal` here is the stand-in
    dvc = lambda *args: subprocess.run(["dvc", *args], cwd=work, env=bin_env, capture_output=True,  # noqa: E731
                                       text=True)
    done = subprocess.run([sys.executable, "-c", launch, "repro", "done"], cwd=work, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "Running stage 'done'" in done.stdout, done.stdout + done.stderr
    assert "up to date" in dvc("status", "done").stdout
    waiting = subprocess.Popen([sys.executable, "-c", launch, "repro", "wait"], cwd=work, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not ((work / "wait.txt").is_file() and (work / "wait.txt").read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    command = int((work / "wait.txt").read_text().split()[-1])
    assert server.pid in _ancestors(command) and waiting.pid not in _ancestors(command), \
        waiting.stdout.read() if waiting.poll() is not None else "not served"  # DVC is the server's child
    waiting.send_signal(signal.SIGINT)
    out, _ = waiting.communicate(timeout=60)
    assert waiting.returncode != 0 and _gone(command), out
    assert "changed outs" in dvc("status", "wait").stdout
