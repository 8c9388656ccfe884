"""The checksummed, resumable downloader against a real HTTP server on 127.0.0.1 (see loopback_http.py).

Every failure mode a download stage meets on the internet is injected here: dropped and reset connections,
503s, timeouts, servers that ignore Range, dead links, refused connections, DNS failure, changed files and
malicious archives. Back-off is made tiny so that retries cost milliseconds.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import random
import socket
import stat
import subprocess
import tarfile
import time
import tracemalloc
import zipfile
from pathlib import Path

import pytest
import yaml
from loopback_http import LoopbackHTTPServer, refused_url

from crossmodal.data import download
from crossmodal.data.download import RemoteFile, fetch_dataset, fetch_file, file_name
from crossmodal.io import InputError

ROOT = Path(__file__).resolve().parents[2]

PAYLOAD = random.Random(0).randbytes(2_500_000)        # spans three 1 MiB chunks
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()
HALF = len(PAYLOAD) // 2
QUICK = {"progress": False, "backoff_s": 0.001, "timeout_s": 5.0}
BOOKKEEPING = {"SHA256SUMS", ".sha256-cache.json"}


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    """Loopback requests must not be sent to a proxy configured in the environment."""
    for variable in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture
def dataset_dir(tmp_path):
    return tmp_path / "raw" / "toy"


def fetch(url: str, dataset_dir, *, sha256=PAYLOAD_SHA, size=None, extract=False, **options) -> dict:
    remote = RemoteFile(url, sha256=sha256, size=size, extract=extract)
    return fetch_file(remote, dataset_dir, dataset="toy", **{**QUICK, **options})


def sums(dataset_dir) -> str:
    return (dataset_dir / "SHA256SUMS").read_text()


# ------------------------------------------------------------------------------------------ plain downloads

def test_download_with_given_checksum_verifies_records_and_renames(dataset_dir):
    server = LoopbackHTTPServer({"file.bin": PAYLOAD})
    with server as base:
        record = fetch(f"{base}/file.bin", dataset_dir)
    assert (dataset_dir / "file.bin").read_bytes() == PAYLOAD
    assert record == {"name": "file.bin", "url": f"{base}/file.bin", "sha256": PAYLOAD_SHA, "size": len(PAYLOAD),
                      "source": "download", "checksum": "given", "extracted": None,
                      "seconds": record["seconds"], "bytes_downloaded": len(PAYLOAD)}
    assert sums(dataset_dir) == f"{PAYLOAD_SHA}  file.bin\n"
    assert not (dataset_dir / "file.bin.part").exists()
    assert server.ranges("file.bin") == [None]


def test_unknown_checksum_is_recorded_and_a_rerun_makes_no_request(dataset_dir):
    server = LoopbackHTTPServer({"file.bin": PAYLOAD})
    with server as base:
        first = fetch(f"{base}/file.bin", dataset_dir, sha256=None)
        second = fetch(f"{base}/file.bin", dataset_dir, sha256=None)
    assert (first["checksum"], first["source"]) == ("first-recorded", "download")
    assert sums(dataset_dir) == f"{PAYLOAD_SHA}  file.bin\n"
    assert (second["checksum"], second["source"], second["bytes_downloaded"]) == ("recorded", "present", 0)
    assert server.count("file.bin") == 1


def test_a_later_download_must_match_the_recorded_checksum(dataset_dir):
    server = LoopbackHTTPServer({"file.bin": PAYLOAD})
    with server as base:
        fetch(f"{base}/file.bin", dataset_dir, sha256=None)
        (dataset_dir / "file.bin").unlink()
        server.files["file.bin"] = PAYLOAD[::-1]            # the publisher changed the file
        with pytest.raises(InputError, match="recorded in .*SHA256SUMS") as caught:
            fetch(f"{base}/file.bin", dataset_dir, sha256=None)
    assert PAYLOAD_SHA in str(caught.value)
    assert hashlib.sha256(PAYLOAD[::-1]).hexdigest() in str(caught.value)
    assert not (dataset_dir / "file.bin").exists() and not (dataset_dir / "file.bin.part").exists()


def test_progress_bar_names_the_file(dataset_dir, capsys):
    with LoopbackHTTPServer({"file.bin": PAYLOAD}) as base:
        fetch(f"{base}/file.bin", dataset_dir, progress=True)
    assert "toy/file.bin" in capsys.readouterr().err


def test_streams_in_chunks_without_holding_the_file_in_memory(dataset_dir):
    big = os.urandom(16 << 20)
    with LoopbackHTTPServer({"big.bin": big}) as base:
        tracemalloc.start()
        try:
            fetch(f"{base}/big.bin", dataset_dir, sha256=hashlib.sha256(big).hexdigest())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 4 << 20, f"peak {peak} bytes while downloading 16 MiB"


# ------------------------------------------------------------------------------------------------- resume

def test_resumes_a_part_file_with_a_range_request(dataset_dir):
    dataset_dir.mkdir(parents=True)
    (dataset_dir / "file.bin.part").write_bytes(PAYLOAD[:HALF])
    server = LoopbackHTTPServer({"file.bin": PAYLOAD})
    with server as base:
        record = fetch(f"{base}/file.bin", dataset_dir)
    assert server.ranges("file.bin") == [f"bytes={HALF}-"]
    assert (record["source"], record["bytes_downloaded"]) == ("resumed", len(PAYLOAD) - HALF)
    assert (dataset_dir / "file.bin").read_bytes() == PAYLOAD


def test_a_transfer_killed_in_one_call_is_continued_by_the_next(dataset_dir):
    server = LoopbackHTTPServer({"file.bin": PAYLOAD})
    server.drop_after("file.bin", 1_000_000, times=1)
    with server as base:
        with pytest.raises(InputError, match="1000000 bytes kept in .*file.bin.part, rerun to resume"):
            fetch(f"{base}/file.bin", dataset_dir, retries=0)
        record = fetch(f"{base}/file.bin", dataset_dir)
    assert server.ranges("file.bin") == [None, "bytes=1000000-"]
    assert record["source"] == "resumed" and (dataset_dir / "file.bin").read_bytes() == PAYLOAD


def test_server_ignoring_range_restarts_from_zero(dataset_dir):
    dataset_dir.mkdir(parents=True)
    (dataset_dir / "file.bin.part").write_bytes(PAYLOAD[:HALF])
    server = LoopbackHTTPServer({"file.bin": PAYLOAD}, honor_range=False)
    with server as base:
        record = fetch(f"{base}/file.bin", dataset_dir)
    assert server.ranges("file.bin") == [f"bytes={HALF}-"]
    assert (record["source"], record["bytes_downloaded"]) == ("download", len(PAYLOAD))
    assert (dataset_dir / "file.bin").read_bytes() == PAYLOAD


def test_complete_part_answered_416_is_verified_without_a_body(dataset_dir):
    dataset_dir.mkdir(parents=True)
    (dataset_dir / "file.bin.part").write_bytes(PAYLOAD)
    server = LoopbackHTTPServer({"file.bin": PAYLOAD})
    with server as base:
        record = fetch(f"{base}/file.bin", dataset_dir)
    assert server.ranges("file.bin") == [f"bytes={len(PAYLOAD)}-"]
    assert (record["source"], record["bytes_downloaded"]) == ("resumed", 0)


def test_part_longer_than_the_file_is_discarded(dataset_dir):
    dataset_dir.mkdir(parents=True)
    (dataset_dir / "file.bin.part").write_bytes(PAYLOAD + b"junk")
    server = LoopbackHTTPServer({"file.bin": PAYLOAD})
    with server as base:
        record = fetch(f"{base}/file.bin", dataset_dir)
    assert server.ranges("file.bin") == [f"bytes={len(PAYLOAD) + 4}-", None]
    assert record["source"] == "download" and (dataset_dir / "file.bin").read_bytes() == PAYLOAD


def test_complete_part_of_known_size_needs_no_network(dataset_dir):
    dataset_dir.mkdir(parents=True)
    (dataset_dir / "file.bin.part").write_bytes(PAYLOAD)
    with refused_url() as base:
        record = fetch(f"{base}/file.bin", dataset_dir, size=len(PAYLOAD))
    assert (record["source"], record["bytes_downloaded"]) == ("resumed", 0)


# ------------------------------------------------------------------------------------------------ retries

@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
def test_connection_dropped_mid_body_is_retried_and_resumed(dataset_dir, reset):
    server = LoopbackHTTPServer({"file.bin": PAYLOAD})
    server.drop_after("file.bin", HALF, times=1, reset=reset)
    with server as base:
        record = fetch(f"{base}/file.bin", dataset_dir)
    ranges = server.ranges("file.bin")
    assert len(ranges) == 2 and ranges[0] is None
    if not reset:                  # a reset may discard bytes already in flight, so only an orderly close is exact
        assert ranges[1] == f"bytes={HALF}-"
    assert record["source"] == "download" and (dataset_dir / "file.bin").read_bytes() == PAYLOAD


def test_server_that_always_drops_gives_up_after_the_retries(dataset_dir):
    server = LoopbackHTTPServer({"file.bin": PAYLOAD})
    server.drop_after("file.bin", 0, times=None)
    started = time.perf_counter()
    with server as base:
        with pytest.raises(InputError, match=r"gave up downloading toy/file.bin .* after 4 failed attempts"):
            fetch(f"{base}/file.bin", dataset_dir, retries=3)
    assert server.count("file.bin") == 4
    assert time.perf_counter() - started < 5
    assert not (dataset_dir / "file.bin.part").exists()      # nothing was received, nothing to resume


def test_progress_resets_the_retry_count(dataset_dir):
    server = LoopbackHTTPServer({"file.bin": PAYLOAD})
    server.drop_after("file.bin", 500_000, times=4)
    with server as base:
        fetch(f"{base}/file.bin", dataset_dir, retries=1)
    assert server.ranges("file.bin") == [None] + [f"bytes={k * 500_000}-" for k in range(1, 5)]


def test_503_is_retried_with_backoff(dataset_dir, monkeypatch):
    sleeps = []
    monkeypatch.setattr(download.time, "sleep", sleeps.append)
    server = LoopbackHTTPServer({"file.bin": PAYLOAD})
    server.fail("file.bin", 503, times=2)
    with server as base:
        record = fetch(f"{base}/file.bin", dataset_dir, backoff_s=0.5)
    assert server.count("file.bin") == 3 and record["source"] == "download"
    assert sleeps == [0.5, 1.0]


def test_timeout_is_retried(dataset_dir):
    server = LoopbackHTTPServer({"file.bin": PAYLOAD})
    server.stall("file.bin", 1.0, times=1)
    with server as base:
        record = fetch(f"{base}/file.bin", dataset_dir, timeout_s=0.2)
    assert server.count("file.bin") == 2 and record["sha256"] == PAYLOAD_SHA


# ------------------------------------------------------------------------------------- failing at once

@pytest.mark.parametrize("status", [404, 410, 403])
def test_dead_link_fails_at_once_and_says_where_to_put_a_manual_copy(dataset_dir, status):
    server = LoopbackHTTPServer({"file.bin": PAYLOAD})
    server.fail("file.bin", status)
    with server as base:
        with pytest.raises(InputError) as caught:
            fetch(f"{base}/file.bin", dataset_dir, backoff_s=30)
    message = str(caught.value)
    assert server.count("file.bin") == 1
    assert "\n" not in message
    for part in ("toy/file.bin", f"{base}/file.bin", f"HTTP {status}", str(dataset_dir / "file.bin"), PAYLOAD_SHA):
        assert part in message
    assert not dataset_dir.exists() or not any(dataset_dir.iterdir())


def test_unknown_checksum_message_says_it_will_be_recorded(dataset_dir):
    with LoopbackHTTPServer({}) as base:
        with pytest.raises(InputError, match="its sha256 is then recorded in .*SHA256SUMS"):
            fetch(f"{base}/file.bin", dataset_dir, sha256=None, backoff_s=30)


def test_connection_refused_fails_at_once(dataset_dir):
    started = time.perf_counter()
    with refused_url() as base:
        with pytest.raises(InputError, match=r"cannot download toy/file.bin .*connection refused.*place it at"):
            fetch(f"{base}/file.bin", dataset_dir, backoff_s=30)
    assert time.perf_counter() - started < 5


def test_dns_failure_fails_at_once_as_offline(dataset_dir, monkeypatch):
    def no_dns(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    with pytest.raises(InputError, match=r"host not found: Name or service not known \(offline\?\)"):
        fetch("http://data.example.invalid/file.bin", dataset_dir, backoff_s=30)


def test_published_size_differing_from_the_expected_fails(dataset_dir):
    with LoopbackHTTPServer({"file.bin": PAYLOAD}) as base:
        with pytest.raises(InputError, match=f"has {len(PAYLOAD)} bytes, expected {len(PAYLOAD) + 1}"):
            fetch(f"{base}/file.bin", dataset_dir, size=len(PAYLOAD) + 1)
    assert not (dataset_dir / "file.bin").exists() and not (dataset_dir / "file.bin.part").exists()


# ----------------------------------------------------------------------------------------------- checksums

def test_checksum_mismatch_names_both_and_removes_the_download(dataset_dir):
    wrong = "0" * 64
    with LoopbackHTTPServer({"file.bin": PAYLOAD}) as base:
        with pytest.raises(InputError) as caught:
            fetch(f"{base}/file.bin", dataset_dir, sha256=wrong)
    message = str(caught.value)
    assert "toy/file.bin" in message and f"expected {wrong}" in message and f"actual {PAYLOAD_SHA}" in message
    assert not (dataset_dir / "file.bin").exists() and not (dataset_dir / "file.bin.part").exists()
    assert not (dataset_dir / "SHA256SUMS").exists()


@pytest.mark.parametrize("given", [True, False], ids=["checksum-given", "checksum-unknown"])
def test_manually_placed_file_is_accepted_offline(dataset_dir, given):
    dataset_dir.mkdir(parents=True)
    (dataset_dir / "file.bin").write_bytes(PAYLOAD)
    with refused_url() as base:
        record = fetch(f"{base}/file.bin", dataset_dir, sha256=PAYLOAD_SHA if given else None)
    assert record["source"] == "present" and record["sha256"] == PAYLOAD_SHA
    assert record["checksum"] == ("given" if given else "first-recorded")
    assert sums(dataset_dir) == f"{PAYLOAD_SHA}  file.bin\n"


def test_present_file_that_mismatches_is_an_error_and_left_alone(dataset_dir):
    dataset_dir.mkdir(parents=True)
    (dataset_dir / "file.bin").write_bytes(b"not the file")
    with refused_url() as base:
        with pytest.raises(InputError, match=f"expected {PAYLOAD_SHA}, actual .*left untouched"):
            fetch(f"{base}/file.bin", dataset_dir)
    assert (dataset_dir / "file.bin").read_bytes() == b"not the file"


def test_present_file_is_hashed_once_until_it_changes(dataset_dir, monkeypatch):
    dataset_dir.mkdir(parents=True)
    (dataset_dir / "file.bin").write_bytes(PAYLOAD)
    hashed = []
    real_hash = download._hash_file_into
    monkeypatch.setattr(download, "_hash_file_into", lambda h, path, progress: (hashed.append(path.name),
                                                                                 real_hash(h, path, progress)))
    with refused_url() as base:
        fetch(f"{base}/file.bin", dataset_dir)
        fetch(f"{base}/file.bin", dataset_dir)
        assert hashed == ["file.bin"]
        os.utime(dataset_dir / "file.bin", ns=(1, 1))
        fetch(f"{base}/file.bin", dataset_dir)
    assert hashed == ["file.bin", "file.bin"]


def test_bad_names_and_checksums_are_rejected(dataset_dir):
    with pytest.raises(ValueError, match="sha256 must be 64 hexadecimal digits"):
        RemoteFile("http://127.0.0.1/file.bin", sha256="abc")
    with pytest.raises(InputError, match="cannot use '' as a file name"):
        fetch_file(RemoteFile("http://127.0.0.1/dir/"), dataset_dir, dataset="toy", **QUICK)
    assert file_name(RemoteFile("http://127.0.0.1/a%20b.zip?x=1")) == "a b.zip"
    assert RemoteFile("http://x/f", sha256="AB" * 32).sha256 == "ab" * 32


def test_a_file_without_public_link_must_be_placed_by_hand(dataset_dir):
    remote = RemoteFile(None, name="youtube_mapping.txt")
    with pytest.raises(InputError, match="no public download link is known; obtain it by other means and place "
                                         "it at .*youtube_mapping.txt"):
        fetch_file(remote, dataset_dir, dataset="msvd", **QUICK)
    (dataset_dir / "youtube_mapping.txt").write_text("-4wsuPCjDBc_5_15 vid1\n")
    assert fetch_file(remote, dataset_dir, dataset="msvd", **QUICK)["checksum"] == "first-recorded"


# ------------------------------------------------------------------------------------------------ datasets

def test_fetch_dataset_writes_the_manifest(dataset_dir):
    other = b"second file"
    files = [RemoteFile("{base}/file.bin", sha256=PAYLOAD_SHA), RemoteFile("{base}/b.txt", name="renamed.txt")]
    with LoopbackHTTPServer({"file.bin": PAYLOAD, "b.txt": other}) as base:
        files = [RemoteFile(f.url.format(base=base), sha256=f.sha256, name=f.name) for f in files]
        manifest = fetch_dataset("toy", files, dataset_dir, **QUICK)
        written = (dataset_dir / "MANIFEST.json").read_text()
        fetch_dataset("toy", files, dataset_dir, **QUICK)  # a rerun (files present) writes the same manifest
    assert (dataset_dir / "MANIFEST.json").read_text() == written
    assert json.loads(written) == {"dataset": "toy", "fetched": True, "files": [
        {k: r[k] for k in ("name", "url", "sha256", "size", "extracted")} for r in manifest["files"]]}
    assert manifest["dataset"] == "toy"
    assert [(r["name"], r["checksum"]) for r in manifest["files"]] == [("file.bin", "given"),
                                                                       ("renamed.txt", "first-recorded")]
    assert (dataset_dir / "renamed.txt").read_bytes() == other


def test_fetch_dataset_reports_every_failure_and_keeps_the_good_files(dataset_dir):
    with LoopbackHTTPServer({"file.bin": PAYLOAD}) as base:
        files = [RemoteFile(f"{base}/gone1.bin"), RemoteFile(f"{base}/file.bin"), RemoteFile(f"{base}/gone2.bin")]
        with pytest.raises(InputError, match=r"toy: 2 of 3 files failed: .*gone1.bin.* \| .*gone2.bin"):
            fetch_dataset("toy", files, dataset_dir, **QUICK)
    assert (dataset_dir / "file.bin").read_bytes() == PAYLOAD
    assert not (dataset_dir / "MANIFEST.json").exists()


def test_fetch_dataset_rejects_repeated_names(dataset_dir):
    files = [RemoteFile("http://127.0.0.1/a/x.zip"), RemoteFile("http://127.0.0.1/b/x.zip")]
    with pytest.raises(InputError, match="more than one remote file is named x.zip"):
        fetch_dataset("toy", files, dataset_dir, **QUICK)


# ------------------------------------------------------------------------------------------------ archives

def zip_bytes(members: dict[str, bytes], symlinks: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for name, data in members.items():
            bundle.writestr(zipfile.ZipInfo(name), data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.create_system = 3
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            bundle.writestr(info, target)
    return buffer.getvalue()


def tar_bytes(members: dict[str, bytes], symlinks: dict[str, str] | None = None, mode: str = "w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as bundle:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            bundle.addfile(info, io.BytesIO(data))
        for name, target in (symlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            bundle.addfile(info)
    return buffer.getvalue()


def fetch_archive(data: bytes, name: str, dataset_dir, server_files=None) -> tuple[dict, LoopbackHTTPServer]:
    server = LoopbackHTTPServer(server_files or {name: data})
    with server as base:
        record = fetch(f"{base}/{name}", dataset_dir, sha256=hashlib.sha256(data).hexdigest(), extract=True)
    return record, server


GOOD_MEMBERS = {"annotations/captions.json": b'{"images": []}', "annotations/sub/notes.txt": b"notes",
                "README": b"read me"}


@pytest.mark.parametrize("name, pack", [("good.zip", zip_bytes), ("good.tar.gz", tar_bytes),
                                        ("good.tgz", tar_bytes)])
def test_good_archive_is_extracted_next_to_it(dataset_dir, name, pack):
    record, _ = fetch_archive(pack(GOOD_MEMBERS), name, dataset_dir)
    assert record["extracted"] == ["README", "annotations"]
    for member, data in GOOD_MEMBERS.items():
        assert (dataset_dir / member).read_bytes() == data
    assert (dataset_dir / name).exists()                      # the checksummed artifact is kept
    assert not list(dataset_dir.glob(f".{name}.extract-*"))


def test_tar_symlink_inside_the_directory_is_kept(dataset_dir):
    data = tar_bytes(GOOD_MEMBERS, symlinks={"annotations/latest.json": "captions.json"})
    fetch_archive(data, "links.tar.gz", dataset_dir)
    assert (dataset_dir / "annotations" / "latest.json").read_bytes() == GOOD_MEMBERS["annotations/captions.json"]


def test_extraction_is_skipped_on_rerun_and_redone_when_an_entry_is_missing(dataset_dir):
    data = zip_bytes(GOOD_MEMBERS)
    fetch_archive(data, "good.zip", dataset_dir)
    (dataset_dir / "README").write_bytes(b"edited")
    record, server = fetch_archive(data, "good.zip", dataset_dir)
    assert record["extracted"] == ["README", "annotations"] and server.count("good.zip") == 0
    assert (dataset_dir / "README").read_bytes() == b"edited"           # skipped: not unpacked again
    (dataset_dir / "README").unlink()
    fetch_archive(data, "good.zip", dataset_dir)
    assert (dataset_dir / "README").read_bytes() == b"read me"


UNSAFE = {
    "parent": ({"ok.txt": b"ok", "../evil.txt": b"evil"}, None, "../evil.txt"),
    "absolute": ({"ok.txt": b"ok", "/tmp/crossmodal-evil.txt": b"evil"}, None, "/tmp/crossmodal-evil.txt"),
    "symlink": ({"ok.txt": b"ok"}, {"link": "../../evil.txt"}, "link"),
}


@pytest.mark.parametrize("case", UNSAFE)
@pytest.mark.parametrize("name, pack", [("bad.zip", zip_bytes), ("bad.tar.gz", tar_bytes)])
def test_unsafe_archive_is_refused_and_nothing_is_extracted(dataset_dir, case, name, pack):
    members, symlinks, offender = UNSAFE[case]
    with pytest.raises(InputError) as caught:
        fetch_archive(pack(members, symlinks), name, dataset_dir)
    message = str(caught.value)
    assert f"unsafe archive {dataset_dir / name}" in message and repr(offender) in message
    assert {p.name for p in dataset_dir.iterdir()} == {name} | BOOKKEEPING
    assert not (dataset_dir.parent / "evil.txt").exists() and not (dataset_dir.parent.parent / "evil.txt").exists()
    assert not os.path.exists("/tmp/crossmodal-evil.txt")


def test_tar_link_escaping_through_another_link_is_refused(dataset_dir):
    """Each link alone looks inside (d/up -> .., escape -> d/up/..); followed on disk, `escape` is outside."""
    data = tar_bytes({"d/file.txt": b"x"}, symlinks={"d/up": "..", "escape": "d/up/.."})
    with pytest.raises(InputError, match="unsafe archive .*'escape'"):
        fetch_archive(data, "sneaky.tar.gz", dataset_dir)
    assert {p.name for p in dataset_dir.iterdir()} == {"sneaky.tar.gz"} | BOOKKEEPING


def test_archive_member_that_would_replace_bookkeeping_is_refused(dataset_dir):
    with pytest.raises(InputError, match="top-level member 'SHA256SUMS'"):
        fetch_archive(zip_bytes({"SHA256SUMS": b"forged"}), "forge.zip", dataset_dir)
    assert "forged" not in sums(dataset_dir)


def test_tar_hardlink_outside_the_directory_is_refused(dataset_dir):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as bundle:
        info = tarfile.TarInfo("passwd")
        info.type, info.linkname = tarfile.LNKTYPE, "../../etc/passwd"
        bundle.addfile(info)
    with pytest.raises(InputError, match="member 'passwd' links outside the directory"):
        fetch_archive(buffer.getvalue(), "hard.tar", dataset_dir)
    assert {p.name for p in dataset_dir.iterdir()} == {"hard.tar"} | BOOKKEEPING


# ------------------------------------------------------------------------------- a queued experiment's copy

def test_a_copy_links_the_finished_files_and_verifies_them_without_hashing_or_requests(tmp_path, monkeypatch):
    """A queued experiment's copy of the repository lacks data/raw/: the origin's finished files are linked in
    (archive, its extracted tree with a symlink, bookkeeping), never a transfer in progress or a staging folder,
    and the rerun fetch makes no request, hashes nothing and writes the origin's manifest."""
    origin, copy = tmp_path / "repo" / "raw" / "toy", tmp_path / "copy" / "raw" / "toy"
    archive = tar_bytes(GOOD_MEMBERS, symlinks={"annotations/latest.json": "captions.json"})
    server = LoopbackHTTPServer({"file.bin": PAYLOAD, "good.tar.gz": archive})
    with server as base:
        files = [RemoteFile(f"{base}/file.bin", sha256=PAYLOAD_SHA),
                 RemoteFile(f"{base}/good.tar.gz", sha256=hashlib.sha256(archive).hexdigest(), extract=True)]
        fetch_dataset("toy", files, origin, **QUICK)
        (origin / "next.bin.part").write_bytes(b"half a file")     # another file's transfer, in progress
        (origin / ".good.tar.gz.extract-x1").mkdir()               # an extraction's staging folder
        (origin / ".good.tar.gz.extract-x1" / "README").write_bytes(b"partial")
        requests = len(server.requests)
        monkeypatch.setattr(download, "_hash_file_into", lambda *args: pytest.fail(f"hashed {args[1]}"))
        linked = download.link_finished(origin, copy)
        fetch_dataset("toy", files, copy, **QUICK)
        assert len(server.requests) == requests
    assert (copy / "MANIFEST.json").read_text() == (origin / "MANIFEST.json").read_text()
    assert os.path.samefile(copy / "file.bin", origin / "file.bin")
    assert os.path.samefile(copy / "annotations" / "sub" / "notes.txt", origin / "annotations" / "sub" / "notes.txt")
    assert os.readlink(copy / "annotations" / "latest.json") == "captions.json"
    assert not (copy / "next.bin.part").exists() and not (copy / ".good.tar.gz.extract-x1").exists()
    assert linked == len([p for p in origin.rglob("*") if p.is_file() and not p.is_symlink()]) - 2
    assert sums(copy) == sums(origin)


def test_link_finished_leaves_a_present_file_alone_and_copies_where_links_fail(tmp_path, monkeypatch):
    origin, copy = tmp_path / "origin", tmp_path / "copy"
    origin.mkdir()
    copy.mkdir()
    (origin / "a.bin").write_bytes(b"origin's a")
    (origin / "b.bin").write_bytes(b"origin's b")
    os.utime(origin / "b.bin", ns=(5_000_000_000, 5_000_000_000))
    (copy / "a.bin").write_bytes(b"the copy's own a")
    monkeypatch.setattr(download.os, "link", lambda *args: (_ for _ in ()).throw(OSError(18, "cross-device")))
    assert download.link_finished(origin, copy) == 1
    assert (copy / "a.bin").read_bytes() == b"the copy's own a"
    assert (copy / "b.bin").read_bytes() == b"origin's b" and not os.path.samefile(copy / "b.bin", origin / "b.bin")
    assert (copy / "b.bin").stat().st_mtime_ns == 5_000_000_000        # the hash cache's key survives the copy


def test_the_download_stage_in_a_queued_experiments_copy_fetches_nothing(tmp_path, monkeypatch, capsys):
    """The stage finds the repository past `.dvc/tmp/exps` (DVC_ROOT) and takes its finished dataset from there,
    offline; in the repository itself it links nothing."""
    from types import SimpleNamespace

    import yaml

    from crossmodal.config.loader import from_data, repo_root
    from crossmodal.stages import download as stage

    repo = tmp_path / "repo"
    copy = repo / ".dvc" / "tmp" / "exps" / "standalone" / "tmpq1"
    params = yaml.safe_load((repo_root() / "params.yaml").read_text())
    params["profile"] = "real"
    server = LoopbackHTTPServer({"file.bin": PAYLOAD})
    with server as base:
        params["datasets"] = {"toy": {"description": "a file", "files": [{"url": f"{base}/file.bin"}]}}
        monkeypatch.setenv("DVC_ROOT", str(repo))
        stage.run(from_data(params), repo, SimpleNamespace(dataset="toy"))
    assert server.count("file.bin") == 1 and "linked" not in capsys.readouterr().err
    monkeypatch.setenv("DVC_ROOT", str(copy))
    with refused_url() as base:
        params["datasets"]["toy"]["files"][0]["url"] = f"{base}/file.bin"
        stage.run(from_data(params), copy, SimpleNamespace(dataset="toy"))
    assert f"toy: 4 finished file(s) linked from {repo / 'data/raw/toy'}" in capsys.readouterr().err
    assert os.path.samefile(copy / "data/raw/toy/file.bin", repo / "data/raw/toy/file.bin")
    manifest = json.loads((copy / "data/raw/toy/MANIFEST.json").read_text())
    assert [(f["name"], f["sha256"]) for f in manifest["files"]] == [("file.bin", PAYLOAD_SHA)]

    params["datasets"]["placed"] = {"description": "by hand", "fetch": False, "files": [{"url": None, "name": "p.tsv"}]}
    (repo / "data/raw/placed").mkdir()
    (repo / "data/raw/placed/p.tsv").write_bytes(b"placed by hand")
    monkeypatch.setenv("DVC_ROOT", str(repo))
    stage.run(from_data(params), repo, SimpleNamespace(dataset="placed"))
    monkeypatch.setenv("DVC_ROOT", str(copy))
    stage.run(from_data(params), copy, SimpleNamespace(dataset="placed"))  # not fetched: what the user placed
    assert os.path.samefile(copy / "data/raw/placed/p.tsv", repo / "data/raw/placed/p.tsv")
    assert (copy / "data/raw/placed/MANIFEST.json").read_text() == (repo / "data/raw/placed/MANIFEST.json").read_text()


def test_git_holds_each_downloads_note_and_nothing_else_of_data():
    """Each `download-<dataset>` stage's note, its whole output under the synthetic profile, is committed, so that a
    queued experiment's copy has it and reruns none of those stages; the rest of data/, a download's files and the
    notes of the worlds DVC caches included, stays out of git."""
    datasets = yaml.safe_load((ROOT / "params.yaml").read_text())["datasets"]
    notes = [f"data/raw/{name}/MANIFEST.json" for name in datasets]
    others = ["data/raw/karpathy/caption_datasets.zip", "data/raw/karpathy/SHA256SUMS",
              "data/raw/msvd/sub/MANIFEST.json",
              "data/raw/image_world/dataset_coco.json", "data/raw/image_world/MANIFEST.json",
              "data/raw/image_world.manifest.json", "data/processed/captions/min5/vocab.json", "data/MANIFEST.json"]
    check = subprocess.run(["git", "check-ignore", "--no-index", *notes, *others], cwd=ROOT, capture_output=True,
                           text=True)
    assert sorted(check.stdout.split()) == sorted(others)

