"""The stage server's client: `python -m crossmodal ...` (crossmodal/__main__.py) hands its command to the stage
server named in CROSSMODAL_STAGE_SERVER, if any (stage_server.py); a served command's MLflow worker (`python -m
crossmodal.tracking`) hands itself to the server named in CROSSMODAL_STAGE_SERVER_HELPERS, which only a served
command has. Standard library only: every stage imports it."""
from __future__ import annotations

import json
import os
import signal
import socket
import sys

ENV = "CROSSMODAL_STAGE_SERVER"
HELPERS_ENV = "CROSSMODAL_STAGE_SERVER_HELPERS"  # set in a served command: its helper processes may be served too
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # passed on to the command's process


def send(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def run_on_server(argv: list[str], module: str = "crossmodal", variable: str = ENV) -> int | None:
    """Run `python -m <module> <argv>` in a child of the stage server named in `variable`; its exit status, or None
    to run it here (no server named, or none reachable, or an environment it cannot serve)."""
    path = os.environ.get(variable)
    if not path:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        socket.send_fds(conn, [b"s"], [0, 1, 2])
        send(conn, {"module": module, "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ),
                    "executable": sys.executable})
    except OSError:
        conn.close()
        return None
    replies = conn.makefile("r", encoding="utf-8")
    first = json.loads(replies.readline() or '{"local": "the server closed the connection"}')
    if "local" in first:
        if variable == ENV:  # a helper (a DDP rank's MLflow worker, say) runs in its own process without a word
            print(f"stage server: running here ({first['local']})", file=sys.stderr)
        conn.close()
        return None
    child, kill = first["pid"], os.killpg if first.get("group") else os.kill  # a DVC process leads a group

    def forward(signum, frame):
        try:
            kill(child, signum)
        except ProcessLookupError:  # it has just ended
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    line = replies.readline()
    if not line:
        print("error: the stage server ended while this stage ran", file=sys.stderr)
        return 1
    status = json.loads(line)["exit"]
    if status < 0:  # the child died of a signal: so does this process, as the command's own process would
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status
