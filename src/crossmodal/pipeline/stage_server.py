"""A stage server: one process that has imported torch and MLflow forks the stage commands of
`python -m crossmodal.pipeline.repro`, so that each stage skips their imports.

Every stage process imports torch (about 3 CPU-seconds on a 2-core machine), torch._dynamo (about 2, which torch's
optimisers import when constructed) and MLflow (about 4) before its work, and the tests' tiny stages do little
else: forked from a process holding them, a tiny training stage took 41-47% less CPU with byte-identical outputs
(benchmarks/bench_stage_startup.py). `python -m crossmodal.pipeline.repro` starts the server (`SharedStageServer`) and
names its socket in CROSSMODAL_STAGE_SERVER; DVC runs each stage's command, `python -m crossmodal ...`, as always,
and that process (crossmodal/__main__.py, `run_on_server`) hands its arguments, working directory, environment and
standard streams to the server, which forks a child that runs the command as `python -m crossmodal` would:
- the child takes the client's environment, working directory, streams and `sys.argv`, and imports every
  `crossmodal` module afresh (none is imported in the server), so it computes what a new process computes;
- the server serves only a client whose environment equals its own but for the variables that DVC and the
  shell set per command, and those that torch and MLflow set for themselves (`VARYING`): a variable read when
  torch or its libraries load (threads, kernel paths, `compute.portable`'s) cannot differ from the server's;
  otherwise the command runs in its own process, as without a server;
- signals the client receives (Ctrl-C, SIGTERM) are passed to the child, and the client exits as the child did,
  with its status or its signal; a client that dies takes its child with it (the server kills it).
- a served command's MLflow worker (`python -m crossmodal.tracking`), which would import MLflow again, is served
  the same way (the child names the server in `HELPERS_ENV`); the command's own `python -m crossmodal`
  subcommands are not (HOCA's cost rows measure memory in processes of their own).
- `python -m crossmodal.pipeline.repro` runs each stage's DVC process (`dvc repro --single-item`) here too,
  through `python -m crossmodal.pipeline.stage_server --dvc <args>` (`run_dvc`): the server has imported DVC, and a
  stage that does little took 1.35 s instead of 1.73 (medians of 8, a 2-core Zen 3; with `gc.freeze`, below). The
  DVC process leads a process group, which the client's signals reach whole: DVC ignores Ctrl-C while its stage's
  command runs, which therefore must receive it too, as from a terminal; the command, a client itself, is served as
  always.
Without CROSSMODAL_STAGE_SERVER, or when the server cannot be reached, a command runs in its own process. Only
`python -m crossmodal.pipeline.repro` imports this module; the client (stage_client.py) is in every stage's code
closure.
"""
from __future__ import annotations

import gc
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile

from .stage_client import ENV, FORWARDED, HELPERS_ENV, run_on_server, send

# what stages import that costs most: torch, MLflow (and their MLflow workers' SQLite store), matplotlib, whose
# figure module every report and the stage files' generator (the index's figures) import: 0.7 s a process, and
# scipy's statistics, which the index's claims import (2 s)
PRELOAD = ("torch", "torch._dynamo", "mlflow", "mlflow.store.tracking.sqlalchemy_store", "matplotlib.figure",
           "matplotlib.backends.backend_agg", "scipy.stats")
# what a DVC process (`run_dvc`) imports to run one stage: its command line, repository, stage files, Git, locks and
# the reports it may print (0.55 s)
DVC_PRELOAD = ("dvc.cli", "dvc.commands.repro", "dvc.repo.reproduce", "dvc.repo.index", "dvc.stage", "dvc.dvcfile",
               "dvc.scm", "scmrepo.git", "dulwich.repo", "dulwich.client", "dvc.rwlock", "dvc.lock", "dvc.analytics",
               "dvc_data.index", "ruamel.yaml", "dvc.compare", "dvc_render.vega", "dvc_render.html",
               "dvc_render.plotly", "dvc_render.image", "psutil", "flufl.lock", "configobj", "dvc.cachemgr",
               "dvc.data_cloud")
# set per command by DVC, the shell or here; or by torch's and MLflow's imports, which keep a value they find: a
# client whose parent imported them (a test) has its own, and its child keeps it
VARYING = {"PWD", "OLDPWD", "SHLVL", "_", "PS1", ENV, HELPERS_ENV, "TORCHINDUCTOR_CACHE_DIR",
           "_MLFLOW_TELEMETRY_SESSION_ID"}
VARYING_PREFIXES = ("DVC_", "CELERY_", "_MP_FORK_")  # DVC's, and its queue workers' logging (Celery's)


def differing(server: dict[str, str], client: dict[str, str]) -> list[str]:
    """The environment variables in which a client's environment differs from the server's, but `VARYING`."""
    return sorted(k for k in set(server) | set(client)
                  if server.get(k) != client.get(k) and k not in VARYING and not k.startswith(VARYING_PREFIXES))


def _run_child(request: dict, fds: list[int], keep_closed: list[socket.socket], path: str) -> None:
    """In the forked child: become `python -m <module> <argv>` and never return. A stage command (`crossmodal`)
    reaches the server (`path`) again only for its helpers (HELPERS_ENV: its MLflow worker), not for its
    subcommands (HOCA's cost rows measure memory in processes of their own); a helper never does."""
    import atexit
    import runpy
    import traceback
    import types

    code = 1
    try:
        for sig in (*FORWARDED, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for sock in keep_closed:
            sock.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        module = request["module"]
        if module != "dvc":  # the command runs here, not on a server again; a DVC process's stage commands do
            os.environ.pop(ENV, None)
        os.environ.pop(HELPERS_ENV, None)
        if module == "crossmodal":
            os.environ[HELPERS_ENV] = path
        for name in [n for n in sys.modules if n == "crossmodal" or n.startswith("crossmodal.")]:
            del sys.modules[name]  # imported afresh from the client's path, as in a new process
        sys.path[0] = request["cwd"]  # what `python -m` puts first
        sys.argv = ["-m", *request["argv"]]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            runpy._run_module_as_main(module)  # what `python -m <module>` runs
            code = 0
        except SystemExit as exit_:
            if exit_.code is None or isinstance(exit_.code, int):
                code = exit_.code or 0
            else:
                print(exit_.code, file=sys.stderr)
        except KeyboardInterrupt:
            traceback.print_exc()
            code = -signal.SIGINT
        except BaseException:
            traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            if code < 0:  # as Python does on an uncaught KeyboardInterrupt
                signal.signal(-code, signal.SIG_DFL)
                os.kill(os.getpid(), -code)
            os._exit(code)


def serve(path: str) -> None:
    """Import `PRELOAD`, then serve on the Unix socket `path` until SIGTERM."""
    import importlib

    environment = dict(os.environ)
    for module in (*PRELOAD, *DVC_PRELOAD):
        try:
            importlib.import_module(module)
        except ImportError:  # not in this environment: the stages would not import it either
            pass
    gc.freeze()  # the imports' objects: a child's collections skip them (a served DVC process took 1.35 s, not 1.73)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(16)
    os.rename(path + ".tmp", path)  # reachable only once the imports are done
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    groups: set[int] = set()  # the children that lead a process group (DVC processes)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    try:
        while not stopping:
            for key, _ in selector.select(timeout=0.05):
                if key.fileobj is listener:
                    _accept(listener, selector, children, groups, environment, path)
                else:  # the client closed its end: it is gone, and its child goes too
                    conn = key.fileobj
                    pid = next((p for p, c in children.items() if c is conn), None)
                    if pid is not None:
                        _kill(pid, groups)
                    selector.unregister(conn)
            while children:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                conn = children.pop(pid)
                groups.discard(pid)
                try:
                    send(conn, {"exit": os.waitstatus_to_exitcode(status)})
                except OSError:
                    pass
                if conn in selector.get_map():  # not yet unregistered as closed by its client
                    selector.unregister(conn)
                conn.close()
    finally:
        for pid in children:
            _kill(pid, groups)
        os.unlink(path)


def _kill(pid: int, groups: set[int]) -> None:
    try:
        (os.killpg if pid in groups else os.kill)(pid, signal.SIGKILL)
    except ProcessLookupError:  # a group whose processes have all ended
        pass


def _accept(listener: socket.socket, selector, children: dict, groups: set, environment: dict, path: str) -> None:
    conn, _ = listener.accept()
    try:
        _, fds, _, _ = socket.recv_fds(conn, 1, 3)
        request = json.loads(conn.makefile("r", encoding="utf-8").readline())
    except (OSError, ValueError):
        conn.close()
        return
    differ = differing(environment, request["env"])
    why = ("another Python" if request["executable"] != sys.executable else
           f"its environment differs in {', '.join(differ)}" if differ else "")
    if why or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        send(conn, {"local": why or "no standard streams"})
        conn.close()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    group = request["module"] == "dvc"
    pid = os.fork()
    if pid == 0:
        if group:
            os.setpgid(0, 0)
        set_here = {k: v for k, v in os.environ.items() if environment.get(k) != v}  # by the imports, as they would
        _run_child({**request, "env": {**set_here, **request["env"]}}, fds, [listener, conn, *children.values()], path)
    if group:
        os.setpgid(pid, pid)  # here too, so that the client's first signal cannot precede it
        groups.add(pid)
    for fd in fds:
        os.close(fd)
    children[pid] = conn
    selector.register(conn, selectors.EVENT_READ)
    send(conn, {"pid": pid, "group": group})


class SharedStageServer:
    """`with SharedStageServer(env) as server:` runs a stage server with environment `env` (the stages' own) while
    the block runs; pass `server.env` to the stages. Its socket appears once its imports are done (a few seconds):
    the stages that start before, or all of them if it fails, run in their own processes."""

    def __init__(self, env: dict[str, str]) -> None:
        self._dir = tempfile.mkdtemp(prefix="crossmodal-stages-")  # short: a socket path has ~100 bytes
        self.path = os.path.join(self._dir, "socket")
        self.env = {ENV: self.path}
        self._proc = subprocess.Popen([sys.executable, "-m", "crossmodal.pipeline.stage_server", self.path], env=env,
                                      start_new_session=True)  # Ctrl-C reaches the stages, not it
        self.pid = self._proc.pid

    def __enter__(self) -> "SharedStageServer":
        return self

    def __exit__(self, *exc) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
        self._proc.wait()
        for name in os.listdir(self._dir):
            os.unlink(os.path.join(self._dir, name))
        os.rmdir(self._dir)


def run_dvc(argv: list[str]) -> int:
    """`dvc <argv>` forked by the stage server named in CROSSMODAL_STAGE_SERVER, else in a process of its own."""
    status = run_on_server(argv, module="dvc")
    if status is None:
        os.execvp("dvc", ["dvc", *argv])
    return status


if __name__ == "__main__":
    if sys.argv[1] == "--dvc":
        sys.exit(run_dvc(sys.argv[2:]))
    serve(sys.argv[1])
