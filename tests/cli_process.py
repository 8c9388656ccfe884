"""`python -m crossmodal <command>` in a process of its own, as a stage runs it, for the test modules that make a
small world with the CLI (training/test_distributed.py, test_safe_artifacts.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict:
    """This process's environment with the repository's src first on the path, no progress bars, one OpenMP thread,
    and no DVC_ROOT (the command finds its own)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "CROSSMODAL_PROGRESS": "0", "OMP_NUM_THREADS": "1"}
    env.pop("DVC_ROOT", None)
    return env


def crossmodal(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """The command run in `repo`; unless `check` is False, a non-zero status raises with the command's output."""
    proc = subprocess.run([sys.executable, "-m", "crossmodal", *args], cwd=repo, env=_env(), capture_output=True,
                          text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc
