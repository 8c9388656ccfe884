"""Caption evaluation exactly as coco-caption does it (pycocoevalcap 1.2), quiet and offline.

PTB tokenization of predictions and references, then BLEU-1..4, METEOR, ROUGE-L, CIDEr-D and, only when
SPICE's Stanford CoreNLP 3.6.0 jars are already installed, SPICE. pycocoevalcap's Spice would download
those jars from the internet on first use; the pipeline runs offline, so without the jars SPICE is reported
as None with a status saying why, and Spice is never constructed.

METEOR's JVM takes seconds to load its paraphrase table (8-10 s and as many CPU-seconds on a 2-core machine), so
one METEOR process is kept per Python process and reused by every evaluation (it is stateless between EVAL
requests). Where `CROSSMODAL_METEOR` names a shared scorer's socket (metrics/meteor_server.py: `python -m
crossmodal.pipeline.repro` runs one for all its stages), the scoring requests go there instead, to the same jar with the
same arguments and the same lines in the same order, so the scores are the same; if it cannot be reached, the
process starts its own.
"""
from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import shutil
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any, Hashable, Mapping, Sequence

import numpy as np

from crossmodal.io import InputError, read_json, write_json
from crossmodal.metrics.cider import CiderD

METRICS = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr", "SPICE")
SPICE_UNAVAILABLE = "unavailable (Stanford CoreNLP jars not installed)"
SPICE_NOT_REQUESTED = "not requested"
JAVA_MISSING = "java not found: install a Java runtime (>= 8); METEOR and the PTB tokenizer need it"
_CORENLP_JARS = ("stanford-corenlp-3.6.0.jar", "stanford-corenlp-3.6.0-models.jar")


def _spice_dir() -> Path:
    import pycocoevalcap.spice  # pycocoevalcap itself is a namespace package without __file__

    return Path(pycocoevalcap.spice.__file__).resolve().parent


def spice_available() -> bool:
    """True when SPICE can run offline: its jar and the Stanford CoreNLP 3.6.0 jars are all installed."""
    spice = _spice_dir()
    return (spice / "spice-1.0.jar").is_file() and all((spice / "lib" / jar).is_file() for jar in _CORENLP_JARS)


def require_java() -> None:
    if shutil.which("java") is None:
        raise InputError(JAVA_MISSING)


# ---------------------------------------------------------------------------------------------- tokenizer
def ptb_tokenize(captions: Mapping[Hashable, Sequence[str]]) -> dict[Hashable, list[str]]:
    """coco-caption's PTB tokenization (lower case, punctuation removed) of {key: [caption, ...]}.

    Whitespace of every kind is collapsed first: the Java tokenizer works line by line, and a stray
    carriage return would otherwise shift every later caption onto the wrong key.
    """
    require_java()
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    payload = {key: [{"caption": " ".join(c.split())} for c in caps] for key, caps in captions.items() if caps}
    if not payload:
        return {key: [] for key in captions}
    with contextlib.redirect_stdout(io.StringIO()):
        tokenized = PTBTokenizer().tokenize(payload)
    if any(len(tokenized.get(key, [])) != len(caps) for key, caps in payload.items()):
        raise RuntimeError("the PTB tokenizer (Java) returned fewer lines than captions given")
    return {key: tokenized.get(key, []) for key in captions}


# ---------------------------------------------------------------------------------------------- METEOR
_meteor_lock = threading.Lock()
_meteor_instance: Any = None


def _close_meteor(meteor: Any) -> None:
    """Stop a METEOR process without pycocoevalcap's __del__ (which blocks if a request died midway)."""
    meteor.lock = threading.Lock()  # a failed request leaves the original lock held
    with contextlib.suppress(Exception):
        meteor.meteor_p.stdin.close()
    with contextlib.suppress(Exception):
        meteor.meteor_p.kill()
        meteor.meteor_p.wait(timeout=10)


def stop_local_meteor() -> None:
    """Stop this process's METEOR, if it runs (at exit in any case)."""
    global _meteor_instance
    with _meteor_lock:
        if _meteor_instance is not None:
            _close_meteor(_meteor_instance)
            _meteor_instance = None


atexit.register(stop_local_meteor)


def _meteor() -> Any:
    """The process's METEOR scorer, started when first needed (call with `_meteor_lock` held)."""
    global _meteor_instance
    from pycocoevalcap.meteor.meteor import Meteor

    if _meteor_instance is None or _meteor_instance.meteor_p.poll() is not None:
        _meteor_instance = Meteor()
    return _meteor_instance


def start_meteor() -> None:
    """Start METEOR's JVM now (the shared scorer's, where there is one), so that it loads its paraphrase table
    while the caller trains or decodes instead of when the first evaluation needs it."""
    if shutil.which("java") is None:
        return
    with contextlib.suppress(OSError):
        _ask_shared({"start": True})
        return
    start_local_meteor()


def start_local_meteor() -> None:
    with _meteor_lock:
        _meteor()


SHARED_METEOR = "CROSSMODAL_METEOR"  # the environment variable naming a shared scorer's Unix socket
SHARED_TIMEOUT = 3600.0  # seconds a request may wait: the JVM's loading and other processes' requests come first


def _ask_shared(request: dict) -> dict:
    """One request to the shared METEOR scorer, as one JSON line each way; OSError when there is none to ask."""
    path = os.environ.get(SHARED_METEOR)
    if not path:
        raise FileNotFoundError(f"{SHARED_METEOR} is not set")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(SHARED_TIMEOUT)
        conn.connect(path)
        conn.sendall(json.dumps(request).encode() + b"\n")
        with conn.makefile("rb") as reply:
            line = reply.readline()
    if not line:
        raise ConnectionError("the shared METEOR scorer closed the connection")
    return json.loads(line)


def _meteor_score(gts: dict, res: dict) -> float:
    """METEOR 1.5 corpus score: on the shared scorer where there is one, else on this process's own."""
    if gts.keys() != res.keys():  # pycocoevalcap's own check refuses it
        return local_meteor_score(gts, res)
    try:
        reply = _ask_shared({"pairs": [[gts[key], res[key]] for key in gts]})  # in gts' order, as pycocoevalcap
    except OSError:
        return local_meteor_score(gts, res)
    if "error" in reply:
        raise RuntimeError(reply["error"])
    return float(reply["score"])


def local_meteor_score(gts: dict, res: dict) -> float:
    """METEOR 1.5 corpus score through pycocoevalcap's wrapper, on a process started once and reused."""
    global _meteor_instance
    with _meteor_lock:
        meteor = _meteor()
        try:
            score, _ = meteor.compute_score(gts, res)
        except Exception as err:
            _close_meteor(meteor)
            _meteor_instance = None
            stderr = b""
            with contextlib.suppress(Exception):
                stderr = meteor.meteor_p.stderr.read() or b""
            detail = stderr.decode(errors="replace").strip().splitlines()[-1:] or [repr(err)]
            raise RuntimeError(f"METEOR (Java) failed: {detail[0]}") from err
    return float(score)


# ---------------------------------------------------------------------------------------------- scoring
def _resolve_spice(use_spice: bool | None) -> tuple[bool, str]:
    if use_spice is False:
        return False, SPICE_NOT_REQUESTED
    if spice_available():
        return True, "computed"
    if use_spice:
        raise InputError(f"SPICE requested but the Stanford CoreNLP 3.6.0 jars are missing from {_spice_dir() / 'lib'}")
    return False, SPICE_UNAVAILABLE


def score_tokenized(gts: dict, res: dict, use_spice: bool | None = None) -> dict:
    """All metrics on PTB-tokenized {id: [refs]} / {id: [prediction]} dicts (same keys); `use_spice` as in
    evaluate_captions."""
    spice, spice_status = _resolve_spice(use_spice)
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    out: dict[str, Any] = {}
    with contextlib.redirect_stdout(io.StringIO()):
        bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
        for k in range(4):
            out[f"BLEU-{k + 1}"] = float(bleu[k])
        out["METEOR"] = _meteor_score(gts, res)
        out["ROUGE-L"] = float(Rouge().compute_score(gts, res)[0])
        out["CIDEr"] = float(Cider().compute_score(gts, res)[0])
        out["SPICE"], out["SPICE_status"] = None, spice_status
        if spice:
            from pycocoevalcap.spice.spice import Spice

            try:
                out["SPICE"] = float(Spice().compute_score(gts, res)[0])
            except subprocess.CalledProcessError as err:
                if use_spice:
                    raise RuntimeError(f"SPICE (Java) exited with status {err.returncode}") from err
                out["SPICE_status"] = f"failed (SPICE exited with status {err.returncode})"
    return out


def _check_predictions(predictions: Mapping[int, str], references: Mapping[int, Sequence[str]]) -> None:
    if not predictions:
        raise InputError("no predictions to evaluate")
    for image_id, caption in predictions.items():
        if not isinstance(caption, str):
            raise InputError(f"prediction for image {image_id} is not a string: {caption!r}")
        refs = references.get(image_id)
        if not refs:
            raise InputError(f"prediction for image {image_id} has no reference captions")
        if not all(isinstance(r, str) for r in refs):
            raise InputError(f"reference captions of image {image_id} must be strings")


def _tokenize_pair(predictions: Mapping[int, str], references: Mapping[int, Sequence[str]]) -> tuple[dict, dict]:
    """Tokenize predictions and their images' references in one JVM run (tokenization is line by line)."""
    both: dict[Hashable, Sequence[str]] = {("ref", i): references[i] for i in predictions}
    both.update({("res", i): [c] for i, c in predictions.items()})
    tok = ptb_tokenize(both)
    return {i: tok[("ref", i)] for i in predictions}, {i: tok[("res", i)] for i in predictions}


def evaluate_captions(predictions: dict[int, str], references: dict[int, list[str]],
                      use_spice: bool | None = None) -> dict:
    """coco-caption metrics of one caption per image against that image's references.

    Only the predicted images are evaluated (as coco-caption does with the results' image ids); CIDEr-D's
    document frequencies therefore come from those images' references. `use_spice`: None = when installed,
    True = required (InputError if the jars are missing), False = skipped.
    """
    require_java()
    _check_predictions(predictions, references)
    _resolve_spice(use_spice)  # fail on a SPICE request before the tokenizer runs
    gts, res = _tokenize_pair(predictions, references)
    return score_tokenized(gts, res, use_spice)


def cider_only(predictions: dict[int, str], references: dict[int, list[str]]) -> float:
    """Corpus CIDEr-D after PTB tokenization (the per-epoch validation score): no METEOR JVM."""
    require_java()
    _check_predictions(predictions, references)
    gts, res = _tokenize_pair(predictions, references)
    ids = list(predictions)
    return float(np.mean(CiderD().score([res[i][0] for i in ids], [gts[i] for i in ids])))


def average_results(results: Sequence[dict]) -> dict:
    """Metric-wise mean of evaluate_captions dicts; SPICE only when every one of them computed it."""
    out: dict[str, Any] = {m: float(np.mean([r[m] for r in results])) for m in METRICS if m != "SPICE"}
    missing = [r["SPICE_status"] for r in results if r["SPICE"] is None]
    out["SPICE"] = None if missing else float(np.mean([r["SPICE"] for r in results]))
    out["SPICE_status"] = missing[0] if missing else "computed"
    return out


# ---------------------------------------------------------------------------------------------- results files
def write_results(path: str | os.PathLike, predictions: dict[int, str]) -> None:
    """The official results file: [{"image_id": int, "caption": str}] sorted by image_id."""
    for image_id, caption in predictions.items():
        if isinstance(image_id, bool) or not isinstance(image_id, (int, np.integer)) or not isinstance(caption, str):
            raise InputError(f"{path}: results need int image ids and str captions, got {image_id!r}: {caption!r}")
    rows = [{"image_id": int(i), "caption": predictions[i]} for i in sorted(predictions)]
    write_json(path, rows, indent=None)


def read_results(path: str | os.PathLike) -> dict[int, str]:
    """Read an official results file; extra keys per entry are allowed, duplicates and bad types are not."""
    data = read_json(path)
    if not isinstance(data, list):
        raise InputError(f"{path}: results must be a JSON list of {{\"image_id\", \"caption\"}} objects")
    out: dict[int, str] = {}
    for k, row in enumerate(data):
        if not isinstance(row, dict) or "image_id" not in row or "caption" not in row:
            raise InputError(f"{path}: entry {k} lacks \"image_id\" or \"caption\"")
        image_id, caption = row["image_id"], row["caption"]
        if isinstance(image_id, bool) or not isinstance(image_id, int):
            raise InputError(f"{path}: entry {k} has a non-integer image_id {image_id!r}")
        if not isinstance(caption, str):
            raise InputError(f"{path}: entry {k} (image {image_id}) has a non-string caption")
        if image_id in out:
            raise InputError(f"{path}: image {image_id} appears more than once")
        out[image_id] = caption
    return out
