"""Throughput of crossmodal.data.download over loopback HTTP; writes benchmarks/results/download.{json,md}.

Run (from an activated .venv): python benchmarks/bench_download.py [--mb 256] [--repeats 3]

A random file of --mb MiB is written to a temporary directory and served by the tests' loopback server
(tests/loopback_http.py, bodies sent with sendfile). fetch_file (progress off) then downloads it:
- full: a fresh download, streamed to <name>.part, SHA-256 checked, renamed;
- resume: a .part holding the first 50% is present, so only the second half is requested (Range), but the
  first half is read back and hashed before the transfer continues;
- present: the file is already there, hashed once (first run) or found in the hash cache (rerun).
Figures are medians over --repeats runs; MB/s counts 10^6 bytes of the whole file per second of wall time
(for resume, of the bytes actually transferred too). Plain hashlib SHA-256 of the file is the baseline.
The peak RSS of the process shows that the file is streamed, not held in memory.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from loopback_http import LoopbackHTTPServer  # noqa: E402

from crossmodal.data.download import RemoteFile, fetch_file  # noqa: E402
from crossmodal.io import write_json, write_text  # noqa: E402

NAME = "random.bin"


def write_random_file(path: Path, mebibytes: int) -> str:
    """Write the file in 1 MiB pieces (never whole in memory) and return its SHA-256."""
    hasher = hashlib.sha256()
    with open(path, "wb") as handle:
        for _ in range(mebibytes):
            block = os.urandom(1 << 20)
            handle.write(block)
            hasher.update(block)
    return hasher.hexdigest()


def median_seconds(prepare, run, repeats: int) -> tuple[float, dict]:
    """Median wall time of `run()` over `repeats` runs, each after an untimed `prepare()`."""
    times, record = [], {}
    for _ in range(repeats):
        prepare()
        start = time.perf_counter()
        record = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), record


def run(mebibytes: int, repeats: int) -> dict:
    size = mebibytes << 20
    with tempfile.TemporaryDirectory(prefix="bench-download-") as tmp:
        served, dataset_dir = Path(tmp) / "served", Path(tmp) / "raw" / "bench"
        served.mkdir()
        digest = write_random_file(served / NAME, mebibytes)

        def hash_only() -> dict:
            hasher = hashlib.sha256()
            with open(served / NAME, "rb") as handle:
                while block := handle.read(1 << 20):
                    hasher.update(block)
            return {"sha256": hasher.hexdigest()}

        def clear() -> None:
            shutil.rmtree(dataset_dir, ignore_errors=True)
            dataset_dir.mkdir(parents=True)

        def half_part() -> None:
            clear()
            with open(served / NAME, "rb") as source, open(dataset_dir / f"{NAME}.part", "wb") as part:
                shutil.copyfileobj(source, part, 1 << 20)
                part.truncate(size // 2)

        def forget_hash_cache() -> None:
            (dataset_dir / ".sha256-cache.json").unlink(missing_ok=True)

        server = LoopbackHTTPServer(served)
        with server as base:
            remote = RemoteFile(f"{base}/{NAME}", sha256=digest, size=size)

            def fetch() -> dict:
                return fetch_file(remote, dataset_dir, dataset="bench", progress=False)

            hash_s, _ = median_seconds(lambda: None, hash_only, repeats)
            full_s, full = median_seconds(clear, fetch, repeats)
            resume_s, resumed = median_seconds(half_part, fetch, repeats)
            present_hash_s, present = median_seconds(forget_hash_cache, fetch, repeats)
            present_cached_s, cached = median_seconds(lambda: None, fetch, repeats)
        ranges = server.ranges(NAME)
    assert full["source"] == "download" and resumed["source"] == "resumed"
    assert present["source"] == cached["source"] == "present"
    assert ranges[repeats:2 * repeats] == [f"bytes={size // 2}-"] * repeats, ranges
    mb = size / 1e6
    return {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "file": {"mebibytes": mebibytes, "bytes": size, "repeats": repeats},
        "sha256_only": {"seconds": hash_s, "mb_per_s": mb / hash_s},
        "full": {"seconds": full_s, "mb_per_s": mb / full_s, "bytes_downloaded": full["bytes_downloaded"]},
        "resume_from_50pct": {"seconds": resume_s, "mb_per_s_of_file": mb / resume_s,
                              "mb_per_s_transferred": resumed["bytes_downloaded"] / 1e6 / resume_s,
                              "bytes_downloaded": resumed["bytes_downloaded"]},
        "present_first_hash": {"seconds": present_hash_s, "mb_per_s": mb / present_hash_s},
        "present_cached": {"seconds": present_cached_s},
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def markdown(report: dict) -> str:
    f, full, resume = report["file"], report["full"], report["resume_from_50pct"]
    first, cached, baseline = report["present_first_hash"], report["present_cached"], report["sha256_only"]
    return "\n".join([
        "# Download throughput (loopback HTTP)", "",
        f"Machine: {report['machine']['cpus']} CPUs, Python {report['machine']['python']}. "
        f"File: {f['mebibytes']} MiB of random bytes, SHA-256 given; medians of {f['repeats']} runs; "
        "MB = 10^6 bytes.", "",
        "| case | wall (s) | MB/s | note |",
        "|---|---:|---:|---|",
        f"| full download | {full['seconds']:.2f} | {full['mb_per_s']:.0f} | streamed to .part, hashed while "
        "streaming, renamed |",
        f"| resume from 50% | {resume['seconds']:.2f} | {resume['mb_per_s_of_file']:.0f} (file) / "
        f"{resume['mb_per_s_transferred']:.0f} (transferred) | Range request for the second half; first half "
        "re-hashed from disk |",
        f"| present, first run | {first['seconds']:.2f} | {first['mb_per_s']:.0f} | no network; file hashed |",
        f"| present, rerun | {cached['seconds'] * 1e3:.1f} ms | - | no network; hash from .sha256-cache.json |",
        f"| SHA-256 alone (hashlib) | {baseline['seconds']:.2f} | {baseline['mb_per_s']:.0f} | baseline |",
        "",
        f"Peak RSS of the whole benchmark process: {report['peak_rss_mib']:.0f} MiB (the file is never held in "
        "memory).", "",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256, help="file size in MiB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    report = run(args.mb, args.repeats)
    write_json(args.out_dir / "download.json", report)
    write_text(args.out_dir / "download.md", markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
