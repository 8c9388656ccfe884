"""A stage server: one process that has imported torch and MLflow forks the stage commands of
`python -m crossmodal.repro`, so that each stage skips their imports.

Every stage process imports torch (about 3 CPU-seconds on a 2-core machine), torch._dynamo (about 2, which torch's
optimisers import when constructed) and MLflow (about 4) before its work, and the tests' tiny stages do little
else: forked from a process holding them, a tiny training stage took 41-47% less CPU with byte-identical outputs
(benchmarks/bench_stage_startup.py). `python -m crossmodal.repro` starts the server (`SharedStageServer`) and
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
Without CROSSMODAL_STAGE_SERVER, or when the server cannot be reached, a command runs in its own process. Only
`python -m crossmodal.repro` imports this module; the client (stage_client.py) is in every stage's code closure.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile

from .stage_client import ENV, FORWARDED, HELPERS_ENV, send

# what stages import that costs most: torch, MLflow (and their MLflow workers' SQLite store), matplotlib, whose
# figure module every report and the stage files' generator (the index's figures) import: 0.7 s a process, and
# scipy's statistics, which the index's claims import (2 s)
PRELOAD = ("torch", "torch._dynamo", "mlflow", "mlflow.store.tracking.sqlalchemy_store", "matplotlib.figure",
           "matplotlib.backends.backend_agg", "scipy.stats")
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
        os.environ.pop(ENV, None)  # the command runs here, not on a server again
        os.environ.pop(HELPERS_ENV, None)
        module = request["module"]
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
    for module in PRELOAD:
        try:
            importlib.import_module(module)
        except ImportError:  # not in this environment: the stages would not import it either
            pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(16)
    os.rename(path + ".tmp", path)  # reachable only once the imports are done
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    try:
        while not stopping:
            for key, _ in selector.select(timeout=0.05):
                if key.fileobj is listener:
                    _accept(listener, selector, children, environment, path)
                else:  # the client closed its end: it is gone, and its child goes too
                    conn = key.fileobj
                    pid = next((p for p, c in children.items() if c is conn), None)
                    if pid is not None:
                        os.kill(pid, signal.SIGKILL)
                    selector.unregister(conn)
            while children:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                conn = children.pop(pid)
                try:
                    send(conn, {"exit": os.waitstatus_to_exitcode(status)})
                except OSError:
                    pass
                if conn in selector.get_map():  # not yet unregistered as closed by its client
                    selector.unregister(conn)
                conn.close()
    finally:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        os.unlink(path)


def _accept(listener: socket.socket, selector, children: dict, environment: dict, path: str) -> None:
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
    pid = os.fork()
    if pid == 0:
        set_here = {k: v for k, v in os.environ.items() if environment.get(k) != v}  # by the imports, as they would
        _run_child({**request, "env": {**set_here, **request["env"]}}, fds, [listener, conn, *children.values()], path)
    for fd in fds:
        os.close(fd)
    children[pid] = conn
    selector.register(conn, selectors.EVENT_READ)
    send(conn, {"pid": pid})


class SharedStageServer:
    """`with SharedStageServer(env) as server:` runs a stage server with environment `env` (the stages' own) while
    the block runs; pass `server.env` to the stages. Its socket appears once its imports are done (a few seconds):
    the stages that start before, or all of them if it fails, run in their own processes."""

    def __init__(self, env: dict[str, str]) -> None:
        self._dir = tempfile.mkdtemp(prefix="crossmodal-stages-")  # short: a socket path has ~100 bytes
        self.path = os.path.join(self._dir, "socket")
        self.env = {ENV: self.path}
        self._proc = subprocess.Popen([sys.executable, "-m", "crossmodal.stage_server", self.path], env=env,
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


if __name__ == "__main__":
    serve(sys.argv[1])
