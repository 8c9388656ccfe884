"""DVC's stage-lock file in memory (scripts/dvc_lock_in_memory.sh): the clone's .dvc/tmp/rwlock becomes a link to a
file of its own in the lock folder, DVC takes and releases its locks through it, a lost file (a reboot) costs nothing,
two clones never share one, and a file that holds locks now is left alone. The lock folder here is pytest's, not
/dev/shm (CROSSMODAL_LOCK_DIR)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # DVC processes

ROOT = Path(__file__).resolve().parents[2]
DVC = Path(sys.executable).with_name("dvc")


def _repo(path: Path) -> Path:
    """A git + DVC repository with the script and one stage that copies a file."""
    (path / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "dvc_lock_in_memory.sh", path / "scripts")
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    subprocess.run([DVC, "init", "-q"], cwd=path, check=True)
    (path / "in.txt").write_text("a\n")
    (path / "dvc.yaml").write_text("stages:\n  copy:\n    cmd: cp in.txt out.txt\n    deps: [in.txt]\n"
                                   "    outs: [out.txt]\n")
    return path


def _setup(repo: Path, lock_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/dvc_lock_in_memory.sh"], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "CROSSMODAL_LOCK_DIR": str(lock_dir)}, timeout=60, check=True)


def _repro(repo: Path) -> None:
    subprocess.run([DVC, "repro", "-q"], cwd=repo, check=True, timeout=120)


def test_the_lock_file_lives_in_the_lock_folder_and_survives_its_loss(tmp_path):
    lock_dir = tmp_path / "shm"
    lock_dir.mkdir()
    repo = _repo(tmp_path / "repo")
    assert _setup(repo, lock_dir).stdout == ""
    link = repo / ".dvc" / "tmp" / "rwlock"
    assert link.is_symlink() and Path(os.readlink(link)).parent == lock_dir
    _repro(repo)
    target = Path(os.readlink(link))
    assert (repo / "out.txt").read_text() == "a\n"
    assert json.loads(target.read_text()) == {}  # DVC wrote it there (the script only links), every lock released
    target.unlink()  # a reboot empties the folder
    (repo / "in.txt").write_text("b\n")
    _repro(repo)
    assert (repo / "out.txt").read_text() == "b\n" and target.exists()
    _setup(repo, lock_dir)
    assert Path(os.readlink(link)) == target  # a second run changes nothing

    other = _repo(tmp_path / "other")
    _setup(other, lock_dir)
    assert Path(os.readlink(other / ".dvc" / "tmp" / "rwlock")) != target  # one file per clone


def test_locks_held_now_and_a_missing_lock_folder_are_left_alone(tmp_path):
    repo = _repo(tmp_path / "repo")
    link = repo / ".dvc" / "tmp" / "rwlock"
    link.parent.mkdir(parents=True, exist_ok=True)
    held = '{"write": {"out.txt": {"pid": 4242, "cmd": "dvc repro"}}, "read": {}}'
    link.write_text(held)
    (tmp_path / "shm").mkdir()
    _setup(repo, tmp_path / "shm")
    assert not link.is_symlink() and link.read_text() == held
    link.unlink()
    _setup(repo, tmp_path / "no-such-folder")
    assert not link.exists()
