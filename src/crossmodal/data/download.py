"""Checksummed, resumable downloads of the real datasets' raw files.

Why: the real datasets (COCO, VQA v2, Flickr30k Entities, MSR-VTT, MSVD) are gigabytes on servers that drop
connections, rate-limit and disappear. A download stage therefore resumes an interrupted transfer instead of
restarting it, hands no corrupt or changed file to the stages downstream (every file is checked against a
SHA-256 before it gets its final name), fails at once with a one-line "what to do" when the machine is
offline or a link is dead, and accepts a copy that the user obtained by other means.

On-disk conventions, all inside the dataset directory (`data/raw/<dataset>/`):

    <name>                  a verified file; it only ever appears through an atomic rename of <name>.part
    <name>.part             a transfer in progress; the next attempt, call or process resumes it with an
                            HTTP `Range: bytes=<size of .part>-` request. A .part that failed verification
                            is removed, so that a rerun starts afresh.
    SHA256SUMS              `sha256sum` format (`<hex>  <name>`), one line per verified file, so that
                            `sha256sum -c SHA256SUMS` checks the directory by hand. For a file whose
                            publisher gives no checksum (`RemoteFile.sha256 is None`), the first verified
                            copy's checksum is recorded here and every later copy must match it; a given
                            checksum is authoritative and overwrites the line.
    MANIFEST.json           written by `fetch_dataset`: the dataset name and one record per file (see
                            `fetch_file`)
    .sha256-cache.json      checksums computed before, keyed by file name, size and mtime_ns, so that a
                            multi-gigabyte file is hashed once rather than on every run; a file whose size
                            or mtime changed (edited, replaced, copied by a DVC checkout) is hashed again
    .<name>.extracted.json  marker: archive <name> with this checksum was unpacked into these top-level
                            entries; a rerun skips the extraction while the marker matches and the entries
                            exist
    .<name>.extract-*/      a staging directory while an archive is unpacked; removed on success and error

Manual copies: when a file cannot be downloaded (offline, dead link, a registration wall), put it at
`data/raw/<dataset>/<name>`; the error message gives the exact path and the expected checksum. A present file
is accepted without any network access when its SHA-256 matches the given checksum or the SHA256SUMS record,
and accepted and recorded (`"checksum": "first-recorded"`) when neither exists. A present file that does not
match is an error and is never overwritten.

Queued experiments: DVC runs them in a temporary copy of the repository without these directories, and
the download stages run again there; `link_finished` first hard-links the repository's finished files into the
copy, so that they are verified, not downloaded again.

Only the standard library speaks HTTP (urllib); tqdm draws the progress bars.
"""
from __future__ import annotations

import errno
import hashlib
import http.client
import json
import lzma
import os
import posixpath
import re
import shutil
import socket
import ssl
import stat
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Sequence

from tqdm import tqdm

from crossmodal.config.data import RemoteFile
from crossmodal.io import InputError, write_json, write_text

CHUNK_BYTES = 1 << 20
PART_SUFFIX = ".part"
SUMS_FILE = "SHA256SUMS"
MANIFEST_FILE = "MANIFEST.json"
HASH_CACHE_FILE = ".sha256-cache.json"
USER_AGENT = "crossmodal-repro (python urllib)"
RETRY_AFTER_CAP_S = 60.0
_RESERVED_NAMES = frozenset({SUMS_FILE, MANIFEST_FILE, HASH_CACHE_FILE})
_TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
_SUMS_LINE = re.compile(r"([0-9a-fA-F]{64}) [ *](.+)")
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_UNSATISFIED_RANGE = re.compile(r"bytes\s+\*/(\d+)")
_STAGING_DIR = re.compile(r"\..+\.extract-.*")


def file_name(remote: RemoteFile) -> str:
    """The name under the dataset directory; it must not clash with the bookkeeping files."""
    name = remote.name or urllib.parse.unquote(posixpath.basename(urllib.parse.urlsplit(remote.url).path))
    if (not name or "/" in name or "\\" in name or name.startswith(".") or name.endswith(PART_SUFFIX)
            or name in _RESERVED_NAMES):
        raise InputError(f"{remote.url}: cannot use {name!r} as a file name; give the file a `name`")
    return name


@dataclass(frozen=True)
class _Job:
    """One file to fetch and the context that every message names."""

    remote: RemoteFile
    dataset: str
    directory: Path
    name: str
    expected_sha256: str | None
    checksum_origin: str          # "given" | "recorded" | "first-recorded"
    progress: bool

    @property
    def target(self) -> Path:
        return self.directory / self.name

    @property
    def part(self) -> Path:
        return self.directory / (self.name + PART_SUFFIX)

    @property
    def label(self) -> str:
        return f"{self.dataset}/{self.name}"

    def manual_copy_hint(self) -> str:
        if self.expected_sha256:
            checksum = f"sha256 {self.expected_sha256}"
        else:
            checksum = f"its sha256 is then recorded in {self.directory / SUMS_FILE}"
        return f"obtain it by other means and place it at {self.target} ({checksum})"

    def expected_description(self) -> str:
        if self.checksum_origin == "given":
            return f"expected {self.expected_sha256}"
        return (f"expected {self.expected_sha256} as recorded in {self.directory / SUMS_FILE} "
                "(delete that line if the publisher changed the file)")


class _Transient(Exception):
    """A failure worth retrying: the next attempt resumes from what the .part holds."""

    def __init__(self, reason: str, retry_after_s: float | None = None):
        super().__init__(reason)
        self.retry_after_s = retry_after_s


class _Unavailable(Exception):
    """A failure that retrying cannot fix: offline, refused, or a dead link."""


def fetch_file(remote: RemoteFile, dataset_dir: Path, *, dataset: str, progress: bool = True,
               retries: int = 5, backoff_s: float = 1.0, timeout_s: float = 60.0) -> dict:
    """Make `dataset_dir/<name>` a verified copy of `remote`, transferring only what is missing.

    `retries` counts consecutive failed attempts after the first; an attempt that received bytes resets the
    count, so a flaky server cannot stop a long transfer that keeps progressing. Before retry k (0-based)
    it sleeps `backoff_s * 2**k` (or the server's Retry-After, up to 60 s, when that is longer).
    `timeout_s` bounds each socket operation (connecting, each read), not the whole transfer. One process at
    a time may fetch into a dataset directory (DVC runs one stage per output); nothing here locks.

    Returns {"name", "url", "sha256", "size", "source": "download" | "present" | "resumed",
    "checksum": "given" | "recorded" | "first-recorded", "extracted": top-level names or None,
    "seconds", "bytes_downloaded"}.
    """
    started = time.perf_counter()
    directory = Path(dataset_dir)
    name = file_name(remote)
    directory.mkdir(parents=True, exist_ok=True)
    recorded = _read_sums(directory).get(name)
    expected = remote.sha256 or recorded
    origin = "given" if remote.sha256 else ("recorded" if recorded else "first-recorded")
    job = _Job(remote, dataset, directory, name, expected, origin, progress)
    hash_cache = _HashCache(directory)

    if job.target.exists():
        digest = _verify_present(job, hash_cache)
        source, received = "present", 0
        job.part.unlink(missing_ok=True)      # a stale partial copy of a file we already have
    elif remote.url is None:
        raise InputError(f"missing {job.label}: no public download link is known; {job.manual_copy_hint()}")
    else:
        digest, source, received = _download(job, retries=retries, backoff_s=backoff_s, timeout_s=timeout_s)
        hash_cache.remember(job.target, digest)
    _record_sum(directory, name, digest)
    extracted = _extract(job, digest) if remote.extract else None
    return {"name": name, "url": remote.url, "sha256": digest, "size": job.target.stat().st_size,
            "source": source, "checksum": origin, "extracted": extracted,
            "seconds": round(time.perf_counter() - started, 3), "bytes_downloaded": received}


def fetch_dataset(dataset: str, files: Sequence[RemoteFile], dataset_dir: Path, *, progress: bool = True,
                  retries: int = 5, backoff_s: float = 1.0, timeout_s: float = 60.0) -> dict:
    """Fetch every file of a dataset, then write `dataset_dir/MANIFEST.json` and return its content.

    A file that fails does not stop the others (a user working offline learns every missing file in one
    run); the failures are raised together afterwards as one InputError, and no manifest is written.
    """
    names = [file_name(remote) for remote in files]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InputError(f"{dataset}: more than one remote file is named {', '.join(repeated)}")
    records, failures = [], []
    for remote in files:
        try:
            records.append(fetch_file(remote, dataset_dir, dataset=dataset, progress=progress, retries=retries,
                                      backoff_s=backoff_s, timeout_s=timeout_s))
        except InputError as err:
            failures.append(str(err))
    if len(failures) == 1:
        raise InputError(failures[0])
    if failures:
        raise InputError(f"{dataset}: {len(failures)} of {len(files)} files failed: " + " | ".join(failures))
    manifest = {"dataset": dataset, "fetched": True,
                "files": [{k: r[k] for k in ("name", "url", "sha256", "size", "extracted")} for r in records]}
    write_json(Path(dataset_dir) / MANIFEST_FILE, manifest)  # only what identifies the files: no timings, so
    return {**manifest, "files": records}                    # a rerun leaves the DVC output's hash unchanged


def link_finished(origin: Path, dataset_dir: Path) -> int:
    """Hard-link into `dataset_dir` every finished file of `origin`, another copy of the same dataset directory,
    and return how many: a queued experiment's temporary copy of the repository lacks the datasets (DVC keeps
    them out of its cache, so that they are not stored twice) and would otherwise download them again.

    Finished: every file but transfers in progress (`*.part`, which a resumed download appends to in place) and
    extraction staging directories; the downloader replaces the others only by renaming, so a linked file is
    never written through. `fetch_file` then verifies the linked files as present ones (the hash cache comes
    along, and a link keeps the size and mtime it is keyed by). Where the file system refuses a link the file is
    copied with its mtime. A file already in `dataset_dir` is left alone; symlinks are recreated as they are.
    """
    count = 0
    for folder, subfolders, files in os.walk(origin):
        here = Path(folder)
        target = dataset_dir / here.relative_to(origin)
        target.mkdir(parents=True, exist_ok=True)
        links = [d for d in subfolders if (here / d).is_symlink()]  # os.walk lists a linked folder, never enters it
        subfolders[:] = [d for d in subfolders if d not in links and not _STAGING_DIR.fullmatch(d)]
        for name in (*files, *links):
            source, destination = here / name, target / name
            if name.endswith(PART_SUFFIX) or destination.exists() or destination.is_symlink():
                continue
            if source.is_symlink():
                os.symlink(os.readlink(source), destination)
                continue
            try:
                os.link(source, destination)
            except OSError:
                shutil.copy2(source, destination)
            count += 1
    return count


# ---------------------------------------------------------------------------------------------- checksums

def _read_sums(directory: Path) -> dict[str, str]:
    path = directory / SUMS_FILE
    if not path.exists():
        return {}
    sums = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _SUMS_LINE.fullmatch(line.rstrip())
        if not match:
            raise InputError(f"{path}:{lineno}: not a sha256sum line ('<64 hex>  <name>'): {line!r}")
        sums[match[2]] = match[1].lower()
    return sums


def _record_sum(directory: Path, name: str, digest: str) -> None:
    sums = _read_sums(directory)
    if sums.get(name) != digest:
        sums[name] = digest
        write_text(directory / SUMS_FILE, "".join(f"{hexdigest}  {n}\n" for n, hexdigest in sorted(sums.items())))


class _HashCache:
    """SHA-256 of files in one directory keyed by (size, mtime_ns), kept in `.sha256-cache.json`."""

    def __init__(self, directory: Path):
        self.path = directory / HASH_CACHE_FILE
        try:
            self.entries = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.entries = {}     # missing or damaged: it is only a cache
        if not isinstance(self.entries, dict):
            self.entries = {}

    def sha256(self, path: Path, progress: bool) -> str:
        info = path.stat()
        entry = self.entries.get(path.name)
        if (isinstance(entry, dict) and entry.get("size") == info.st_size
                and entry.get("mtime_ns") == info.st_mtime_ns and "sha256" in entry):
            return entry["sha256"]
        hasher = hashlib.sha256()
        _hash_file_into(hasher, path, progress)
        digest = hasher.hexdigest()
        self.remember(path, digest)
        return digest

    def remember(self, path: Path, digest: str) -> None:
        info = path.stat()
        self.entries[path.name] = {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "sha256": digest}
        write_json(self.path, self.entries)


def _hash_file_into(hasher, path: Path, progress: bool) -> None:
    """Feed a file to `hasher` in chunks (never the whole file in memory), with a progress bar."""
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    with open(path, "rb") as handle, tqdm(total=path.stat().st_size, unit="B", unit_scale=True,
                                          unit_divisor=1024, desc=f"sha256 {path.name}",
                                          disable=not progress, leave=False) as bar:
        while count := handle.readinto(buffer):
            hasher.update(view[:count])
            bar.update(count)


def _verify_present(job: _Job, hash_cache: _HashCache) -> str:
    """Accept a file already at its final name (manual copy or earlier run) if it matches; never touch it."""
    keep = "it was left untouched: delete it to download afresh, or replace it with a good copy"
    size = job.target.stat().st_size
    if job.remote.size is not None and size != job.remote.size:
        raise InputError(f"{job.label}: present file {job.target} has {size} bytes, expected {job.remote.size}; "
                         f"{keep}")
    digest = hash_cache.sha256(job.target, job.progress)
    if job.expected_sha256 and digest != job.expected_sha256:
        raise InputError(f"{job.label}: sha256 mismatch of present file {job.target}: "
                         f"{job.expected_description()}, actual {digest}; {keep}")
    return digest


# ---------------------------------------------------------------------------------------------- transfer

class _PartFile:
    """The .part file open for appending, with the SHA-256 of everything in it kept in step."""

    def __init__(self, path: Path, progress: bool):
        self.path = path
        self.hasher = hashlib.sha256()
        if path.exists():
            _hash_file_into(self.hasher, path, progress)
        self.size = path.stat().st_size if path.exists() else 0
        self.resumed_from = self.size
        self.received = 0
        self.handle = open(path, "ab")

    def append(self, data: memoryview) -> None:
        self.handle.write(data)
        self.hasher.update(data)
        self.size += len(data)
        self.received += len(data)

    def restart(self) -> None:
        """Drop the content: the server cannot continue it (no Range support, or a different file)."""
        self.handle.seek(0)
        self.handle.truncate()
        self.hasher = hashlib.sha256()
        self.size = self.resumed_from = 0

    def close(self) -> None:
        self.handle.close()


def _download(job: _Job, *, retries: int, backoff_s: float, timeout_s: float) -> tuple[str, str, int]:
    """Stream into <name>.part (resuming it), verify, and rename; return (sha256, source, bytes received)."""
    part = _PartFile(job.part, job.progress)
    try:
        with tqdm(total=job.remote.size, initial=part.size, unit="B", unit_scale=True, unit_divisor=1024,
                  desc=job.label, disable=not job.progress) as bar:
            _transfer_with_retries(job, part, bar, retries=retries, backoff_s=backoff_s, timeout_s=timeout_s)
    except InputError:
        if part.size == 0:
            job.part.unlink(missing_ok=True)      # nothing worth resuming
        raise
    finally:
        part.close()
    digest = part.hasher.hexdigest()
    _verify_part(job, part.size, digest)
    os.replace(job.part, job.target)
    return digest, ("resumed" if part.resumed_from else "download"), part.received


def _transfer_with_retries(job: _Job, part: _PartFile, bar: tqdm, *, retries: int, backoff_s: float,
                           timeout_s: float) -> None:
    failures = 0
    while not (job.remote.size is not None and part.size == job.remote.size):
        if job.remote.size is not None and part.size > job.remote.size:
            part.restart()
        received_before = part.received
        try:
            _transfer_once(job, part, bar, timeout_s)
            return
        except _Unavailable as err:
            raise InputError(f"cannot download {job.label} from {job.remote.url} ({err}); "
                             f"{job.manual_copy_hint()}") from None
        except _Transient as err:
            if part.received > received_before:
                failures = 0
            if failures >= retries:
                raise InputError(
                    f"gave up downloading {job.label} from {job.remote.url} after {failures + 1} failed attempts "
                    f"in a row (last: {err}); {part.size} bytes kept in {job.part}, rerun to resume, or "
                    f"{job.manual_copy_hint()}") from None
            time.sleep(max(backoff_s * 2 ** failures, min(err.retry_after_s or 0.0, RETRY_AFTER_CAP_S)))
            failures += 1


def _transfer_once(job: _Job, part: _PartFile, bar: tqdm, timeout_s: float) -> None:
    """One HTTP request that appends the rest of the file to `part`; raises _Transient or _Unavailable."""
    request = urllib.request.Request(job.remote.url, headers={"User-Agent": USER_AGENT,
                                                              "Accept-Encoding": "identity"})
    if part.size:
        request.add_header("Range", f"bytes={part.size}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout_s)
    except urllib.error.HTTPError as err:
        err.close()
        if err.code == 416 and part.size:
            # The .part is as long as the file, or longer (then it is not this file).
            unsatisfied = _UNSATISFIED_RANGE.fullmatch(err.headers.get("Content-Range", "").strip())
            if unsatisfied and int(unsatisfied[1]) == part.size:
                return
            part.restart()
            return _transfer_once(job, part, bar, timeout_s)
        reason = f"HTTP {err.code} {err.reason}"
        if err.code in (408, 429) or err.code >= 500:
            raise _Transient(reason, _retry_after_s(err.headers.get("Retry-After"))) from None
        raise _Unavailable(reason) from None
    except urllib.error.URLError as err:
        raise _classify_connection_error(err.reason) from None
    except (OSError, http.client.HTTPException) as err:
        raise _Transient(_describe(err)) from None

    with response:
        total = _announced_total(job, part, response)
        bar.reset(total)
        bar.update(part.size)
        buffer = bytearray(CHUNK_BYTES)
        view = memoryview(buffer)
        while True:
            try:
                count = response.readinto(buffer)
            except (OSError, http.client.HTTPException) as err:
                raise _Transient(_describe(err)) from None
            if not count:
                break
            part.append(view[:count])
            bar.update(count)
    if total is not None and part.size < total:
        raise _Transient(f"connection closed after {part.size} of {total} bytes")


def _announced_total(job: _Job, part: _PartFile, response) -> int | None:
    """The file's full size as the response announces it, after lining `part` up with the body's start."""
    if response.status == 206:
        content_range = _CONTENT_RANGE.fullmatch((response.headers.get("Content-Range") or "").strip())
        start = int(content_range[1]) if content_range else -1
        if start != part.size:
            part.restart()
            raise _Transient(f"asked for bytes from {part.size}, got Content-Range "
                             f"{response.headers.get('Content-Range')!r}; starting again from zero")
        total = None if content_range[3] == "*" else int(content_range[3])
    else:
        if part.size:
            part.restart()         # the server ignored the Range header and sends the whole file
        length = response.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
    if total is not None and job.remote.size is not None and total != job.remote.size:
        part.restart()
        raise _Unavailable(f"the server's copy has {total} bytes, expected {job.remote.size}: "
                           "the published file changed")
    return total


def _classify_connection_error(reason) -> Exception:
    """Offline and refused connections are permanent for this run; timeouts and resets are transient."""
    if isinstance(reason, socket.gaierror):
        return _Unavailable(f"host not found: {reason.strerror or reason} (offline?)")
    if isinstance(reason, ConnectionRefusedError):
        return _Unavailable("connection refused")
    if isinstance(reason, OSError) and reason.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        return _Unavailable(f"{reason.strerror} (offline?)")
    if isinstance(reason, ssl.SSLCertVerificationError):
        return _Unavailable(f"TLS certificate not trusted: {reason.verify_message}")
    if isinstance(reason, str):      # e.g. "unknown url type"
        return _Unavailable(reason)
    return _Transient(_describe(reason))


def _retry_after_s(header: str | None) -> float | None:
    return float(header) if header and header.strip().isdigit() else None


def _describe(err: BaseException) -> str:
    if isinstance(err, TimeoutError):
        return "timed out"
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _verify_part(job: _Job, size: int, digest: str) -> None:
    """Check size and checksum of a finished .part; a bad one is removed so that a rerun starts afresh."""
    problem = None
    if job.remote.size is not None and size != job.remote.size:
        problem = f"size mismatch: expected {job.remote.size} bytes, got {size}"
    elif job.expected_sha256 and digest != job.expected_sha256:
        problem = f"sha256 mismatch: {job.expected_description()}, actual {digest}"
    if problem:
        job.part.unlink(missing_ok=True)
        raise InputError(f"{job.label} downloaded from {job.remote.url}: {problem}; removed the bad download, "
                         f"rerun to download afresh or {job.manual_copy_hint()}")


# ---------------------------------------------------------------------------------------------- archives

def _extract(job: _Job, digest: str) -> list[str]:
    """Unpack the verified archive into the dataset directory, all members or none; skip if done before."""
    marker = job.directory / f".{job.name}.extracted.json"
    try:
        done = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        done = None
    if (isinstance(done, dict) and done.get("sha256") == digest and isinstance(done.get("entries"), list)
            and all((job.directory / entry).exists() for entry in done["entries"])):
        return done["entries"]

    for stale in job.directory.glob(f".{job.name}.extract-*"):
        shutil.rmtree(stale, ignore_errors=True)      # left by a killed run
    staging = Path(tempfile.mkdtemp(prefix=f".{job.name}.extract-", dir=job.directory))
    try:
        if job.name.endswith(".zip"):
            _unpack_zip(job.target, staging)
        elif job.name.endswith(_TAR_SUFFIXES):
            _unpack_tar(job.target, staging)
        else:
            raise InputError(f"{job.label}: extract=True but {job.name} is not a .zip, .tar, .tar.gz or .tgz")
        entries = sorted(os.listdir(staging))
        clashes = [e for e in entries if e == job.name or e in _RESERVED_NAMES or e.startswith(f".{job.name}.")]
        if clashes:
            raise InputError(f"unsafe archive {job.target}: top-level member {clashes[0]!r} would replace a "
                             "file the downloader keeps; nothing was extracted")
        for entry in entries:
            _replace(staging / entry, job.directory / entry)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error, lzma.LZMAError) as err:
        raise InputError(f"{job.target}: not a readable archive ({_describe(err)}); nothing was extracted") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    write_json(marker, {"archive": job.name, "sha256": digest, "entries": entries})
    return entries


def _replace(source: Path, destination: Path) -> None:
    """Move one extracted top-level entry into place, replacing what an earlier extraction left there."""
    if destination.is_dir() and not destination.is_symlink():
        shutil.rmtree(destination)
    elif destination.exists() or destination.is_symlink():
        destination.unlink()
    os.replace(source, destination)


def _unsafe_member_reason(name: str) -> str | None:
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):
        return "has an absolute path"
    if ".." in PurePosixPath(name.replace("\\", "/")).parts:
        return "climbs out of the directory with '..'"
    return None


def _unsafe_link_reason(link_target: str, relative_to: str) -> str | None:
    """Why a link escapes; `relative_to` is the directory (inside the archive) the target is resolved from."""
    if link_target.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", link_target):
        return f"links to the absolute path {link_target!r}"
    resolved = posixpath.normpath(posixpath.join(relative_to, link_target))
    if resolved == ".." or resolved.startswith("../"):
        return f"links outside the directory ({link_target!r})"
    return None


def _reject_member(archive: Path, member: str, reason: str) -> None:
    raise InputError(f"unsafe archive {archive}: member {member!r} {reason}; nothing was extracted")


def _check_room(archive: Path, unpacked: int, staging: Path) -> None:
    """Refuse an archive that unpacks to more than the disk has free (a decompression bomb, say). `unpacked` is
    the sum of the members' sizes from the archive's headers, which bound what extraction writes: zipfile stops
    each member at its recorded size (and fails its CRC if there is more), and a tar member's size is its data."""
    free = shutil.disk_usage(staging).free
    if unpacked > free:
        raise InputError(f"unsafe archive {archive}: its members unpack to {unpacked} bytes, more than the {free} "
                         f"bytes free on the disk of {staging.parent}; nothing was extracted")


def _unpack_zip(archive: Path, staging: Path) -> None:
    with zipfile.ZipFile(archive) as bundle:
        for info in bundle.infolist():
            reason = _unsafe_member_reason(info.filename)
            if reason is None and info.create_system == 3 and stat.S_ISLNK(info.external_attr >> 16):
                # zipfile writes a symlink as a small file holding its target; an escaping one is still refused.
                link_target = bundle.read(info).decode("utf-8", "replace")
                reason = _unsafe_link_reason(link_target, posixpath.dirname(info.filename))
            if reason:
                _reject_member(archive, info.filename, reason)
        _check_room(archive, sum(info.file_size for info in bundle.infolist()), staging)
        bundle.extractall(staging)


def _unpack_tar(archive: Path, staging: Path) -> None:
    if not hasattr(tarfile, "data_filter"):
        raise InputError("extracting tar archives safely needs Python 3.10.12+ / 3.11.4+ (tarfile filters)")
    with tarfile.open(archive, "r:*") as bundle:
        members = bundle.getmembers()
        for member in members:
            reason = _unsafe_member_reason(member.name)
            if reason is None and member.issym():
                reason = _unsafe_link_reason(member.linkname, posixpath.dirname(member.name))
            elif reason is None and member.islnk():
                reason = _unsafe_link_reason(member.linkname, "")
            elif reason is None and member.isdev():
                reason = "is a device or FIFO"
            if reason:
                _reject_member(archive, member.name, reason)
        _check_room(archive, sum(member.size for member in members if member.isfile()), staging)
        try:
            # The "data" filter also resolves links against what is already on disk, which catches a link
            # that escapes through another link; staging is removed on error, so nothing is left behind.
            bundle.extractall(staging, members=members, filter="data")
        except tarfile.FilterError as err:
            _reject_member(archive, err.tarinfo.name, _describe(err))
