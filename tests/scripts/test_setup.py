"""The set-up script (scripts/setup.sh): its Java check, and the bytecode it compiles."""
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_setup_stops_at_once_without_java(tmp_path):
    proc = subprocess.run(["/bin/bash", str(ROOT / "scripts/setup.sh")], env={"PATH": str(tmp_path)},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert "Java not found" in proc.stderr and "METEOR" in proc.stderr and "PTB tokenizer" in proc.stderr


def test_the_setup_compiled_what_a_training_process_imports_from_packages_pip_installed():
    """pip installs torch and the packages it pulls in without bytecode, and where PYTHONDONTWRITEBYTECODE is set
    every process would compile them again: sympy, which every training process's first optimiser step imports
    (through torch._dynamo), cost it some 4 s on a 2-core machine. The bytecode must predate the set-up's stamp,
    so that it was written by the set-up, not by an import of this test session."""
    venv = ROOT / ".venv"
    stamps = sorted(venv.glob(".installed-*"))
    if Path(sys.prefix).resolve() != venv.resolve() or not stamps:
        pytest.skip("not running in the environment scripts/setup.sh made")
    for name in ("sympy", "sympy.core.expr", "mpmath", "networkx", "jinja2", "torch._dynamo.symbolic_convert"):
        source = importlib.import_module(name).__file__
        cached = Path(importlib.util.cache_from_source(source))
        assert cached.exists(), f"{name}: no bytecode at {cached}"
        assert cached.stat().st_mtime <= stamps[-1].stat().st_mtime, f"{name}: compiled after the set-up ended"
