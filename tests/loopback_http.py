"""A real HTTP file server on 127.0.0.1 with fault injection, so download code is tested without the internet.

    server = LoopbackHTTPServer({"a.bin": data})       # or a directory whose files are served
    server.drop_after("a.bin", 1000, times=1)         # first request: 1000 body bytes, then the connection closes
    with server as base_url:                          # e.g. "http://127.0.0.1:41234"
        fetch(f"{base_url}/a.bin")
    assert server.ranges("a.bin") == [None, "bytes=1000-"]

Range requests get 206 + Content-Range (416 + `Content-Range: bytes */size` past the end) unless the server is
built with honor_range=False, which answers every request with the whole file as a careless server does.
Faults are kept per path in the order they were added; each request for the path consumes the first one
that has times left (times=None: every request). Bodies go out with socket.sendfile, so a large file is
streamed, not held in memory. Every request is logged (path and Range header) before any fault applies.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import socket
import struct
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import BinaryIO, Iterator, Mapping

_BYTE_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    range: str | None


@dataclass
class _Fault:
    times: int | None                # None: every request
    status: int | None = None        # answer with this status instead of the file
    drop_after: int | None = None    # send this many body bytes, then close the connection
    reset: bool = False              # close with a TCP reset instead of an orderly close
    stall_s: float = 0.0             # wait this long before answering


class LoopbackHTTPServer:
    """Serves `files` (name -> bytes, or a directory) on an ephemeral port; a context manager giving the base URL."""

    def __init__(self, files: Mapping[str, bytes] | str | os.PathLike, *, honor_range: bool = True):
        self.files = dict(files) if isinstance(files, Mapping) else None
        self.root = None if isinstance(files, Mapping) else Path(files)
        self.honor_range = honor_range
        self.requests: list[RecordedRequest] = []
        self._faults: dict[str, list[_Fault]] = {}
        self._lock = threading.Lock()
        self._httpd: _QuietThreadingServer | None = None
        self._thread: threading.Thread | None = None

    # fault injection ------------------------------------------------------------------------------------
    def fail(self, path: str, status: int, times: int | None = None) -> None:
        """Answer `status` (404, 410, 503, ...) to the next `times` requests for `path`."""
        self._add(path, _Fault(times, status=status))

    def drop_after(self, path: str, nbytes: int, times: int | None = 1, reset: bool = False) -> None:
        """Announce the full length but close the connection after `nbytes` body bytes."""
        self._add(path, _Fault(times, drop_after=nbytes, reset=reset))

    def stall(self, path: str, seconds: float, times: int | None = 1) -> None:
        """Wait before answering, to make a client with a shorter timeout give up on the request."""
        self._add(path, _Fault(times, stall_s=seconds))

    def _add(self, path: str, fault: _Fault) -> None:
        with self._lock:
            self._faults.setdefault(path.lstrip("/"), []).append(fault)

    # what the clients asked for ---------------------------------------------------------------------------
    def count(self, path: str) -> int:
        return len(self.ranges(path))

    def ranges(self, path: str) -> list[str | None]:
        """The Range header of every request for `path`, in order (None where there was none)."""
        with self._lock:
            return [r.range for r in self.requests if r.path == path.lstrip("/")]

    def _log_and_take_fault(self, path: str, range_header: str | None) -> _Fault | None:
        with self._lock:
            self.requests.append(RecordedRequest(path, range_header))
            for fault in self._faults.get(path, []):
                if fault.times is None:
                    return fault
                if fault.times > 0:
                    fault.times -= 1
                    return fault
        return None

    def _open(self, path: str) -> tuple[BinaryIO, int] | None:
        if self.files is not None:
            data = self.files.get(path)
            return None if data is None else (io.BytesIO(data), len(data))
        file = (self.root / path).resolve()
        if not file.is_relative_to(self.root.resolve()) or not file.is_file():
            return None
        return open(file, "rb"), file.stat().st_size

    # lifecycle --------------------------------------------------------------------------------------------
    def __enter__(self) -> str:
        self._httpd = _QuietThreadingServer(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __exit__(self, *exc_info) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


class _QuietThreadingServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: LoopbackHTTPServer

    def handle_error(self, request, client_address) -> None:
        """A client that hung up (a timed-out request) is expected here, not worth a traceback."""


class _Handler(BaseHTTPRequestHandler):
    server: _QuietThreadingServer

    def log_message(self, format, *args) -> None:
        """Keep test output clean."""

    def do_GET(self) -> None:
        owner = self.server.owner
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
        range_header = self.headers.get("Range")
        fault = owner._log_and_take_fault(path, range_header) or _Fault(times=None)
        if fault.stall_s:
            time.sleep(fault.stall_s)
        if fault.status is not None:
            self.send_error(fault.status)
            return
        opened = owner._open(path)
        if opened is None:
            self.send_error(404)
            return
        body, size = opened
        with body:
            self._send_file(body, size, range_header if owner.honor_range else None, fault)

    def _send_file(self, body: BinaryIO, size: int, range_header: str | None, fault: _Fault) -> None:
        first, last = 0, size - 1
        byte_range = _BYTE_RANGE.fullmatch(range_header.strip()) if range_header else None
        if byte_range and (byte_range[1] or byte_range[2]):
            if byte_range[1]:
                first = int(byte_range[1])
                last = min(int(byte_range[2]), size - 1) if byte_range[2] else size - 1
            else:
                first = max(0, size - int(byte_range[2]))
            if first >= size or first > last:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        else:
            self.send_response(200)
        length = last - first + 1
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        to_send = length if fault.drop_after is None else min(length, fault.drop_after)
        if to_send:                  # socket.sendfile reads count=0 as "to the end"
            self.connection.sendfile(body, offset=first, count=to_send)
        if fault.drop_after is not None:
            self.close_connection = True
            if fault.reset:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()


@contextlib.contextmanager
def refused_url() -> Iterator[str]:
    """A base URL on 127.0.0.1 whose port is bound but not listening, so every connection is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{holder.getsockname()[1]}"
