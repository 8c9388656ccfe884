"""One METEOR scorer for every stage of a `python -m crossmodal.pipeline.repro` run.

METEOR 1.5's JVM loads its paraphrase table each time it starts: 8-10 s and as many CPU-seconds on a 2-core machine,
once per stage that scores captions (every captioning training stage, the ensembles, the reference points). The
scheduler starts this server instead, in a thread of its own process, and names its Unix socket to the stages in
`CROSSMODAL_METEOR`; metrics/captions.py then sends each METEOR request here, as one JSON line: the references and
the prediction of every image, in the order pycocoevalcap would send them. The server scores them with the same
pycocoevalcap wrapper (the same jar, arguments and lines), one request at a time, so the scores are those each stage
would compute alone. Its JVM starts at the first request (a stage asks as it begins training, so the table loads
meanwhile), and stops with the server. Nothing is stored between requests.

Replies: `{"score": x}`, `{"error": "..."}` (METEOR failed; the stage fails as it would alone), or `{"started": true}`
for `{"start": true}`. A stage that cannot reach the socket (plain `dvc repro`, a queued experiment) starts its own
METEOR, as before.
"""
from __future__ import annotations

import contextlib
import json
import os
import socketserver
import tempfile
import threading
from pathlib import Path

from .captions import SHARED_METEOR, local_meteor_score, start_local_meteor, stop_local_meteor


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        try:
            request = json.loads(self.rfile.readline())
            if request.get("start"):
                start_local_meteor()
                reply = {"started": True}
            else:
                gts = {k: refs for k, (refs, _) in enumerate(request["pairs"])}
                reply = {"score": local_meteor_score(gts, {k: res for k, (_, res) in enumerate(request["pairs"])})}
                with self.server.count_lock:
                    self.server.requests += 1
        except Exception as err:  # the stage reports it, as it would report its own METEOR's failure
            reply = {"error": str(err) or repr(err)}
        with contextlib.suppress(OSError):  # a client killed while it waited
            self.wfile.write(json.dumps(reply).encode() + b"\n")


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    requests = 0
    count_lock = threading.Lock()


class SharedMeteor:
    """`with SharedMeteor() as meteor:` serves METEOR on a Unix socket while the block runs: pass `meteor.env` to the
    stages' processes; `meteor.requests` counts the scorings served."""

    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="crossmodal-meteor-"))  # short: a socket path has ~100 bytes
        self.path = self._dir / "socket"
        self.env = {SHARED_METEOR: str(self.path)}
        self._server = _Server(str(self.path), _Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="meteor-server", daemon=True)

    @property
    def requests(self) -> int:
        return self._server.requests

    def __enter__(self) -> "SharedMeteor":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        stop_local_meteor()
        self.path.unlink(missing_ok=True)
        os.rmdir(self._dir)
