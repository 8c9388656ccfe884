#!/usr/bin/env bash
# Create .venv and install the pinned environment; a no-op when nothing changed since the last install.
# Used by both Quick-start commands of the README (and so by CI). Java is checked first because
# METEOR and the PTB tokenizer of pycocoevalcap run on it and every evaluation needs them.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v java >/dev/null 2>&1; then
    echo "error: Java not found on PATH. Install a Java runtime (>= 8), e.g. 'apt-get install default-jre-headless':" >&2
    echo "       pycocoevalcap's METEOR scorer and PTB tokenizer run on Java, and every caption evaluation needs them." >&2
    exit 1
fi

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "error: Python >= 3.10 is required (set PYTHON=/path/to/python3.11)" >&2
    exit 1
fi

[ -x .venv/bin/python ] || "$python" -m venv .venv
stamp=".venv/.installed-$(cat pyproject.toml requirements.lock scripts/setup.sh | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    echo "setup: installing pinned dependencies into .venv (first run takes a few minutes)" >&2
    # torch first and alone, through pip, so that pip's own configuration picks the CPU build (on this machine a
    # local wheel) and no CUDA packages are pulled in; uv, pinned, comes with it. Neither is byte-compiled here.
    .venv/bin/pip install --quiet --disable-pip-version-check --no-compile torch==2.13.0 uv==0.13.9 \
        2> >(grep -v "^WARNING: Location" >&2)
    # The rest through uv, byte-compiled on every core: the same versions as pip would install (requirements.lock
    # pins them), in about 35 s where pip took 2.5 min on the 2-core machine (docs/performance.md).
    .venv/bin/uv pip install --quiet --python .venv/bin/python --compile-bytecode -c requirements.lock -e ".[dev]"
    # The bytecode of what pip installed uncompiled (torch and the packages it pulls in: sympy, mpmath, networkx,
    # jinja2, ...), on every core. Where PYTHONDONTWRITEBYTECODE is set, every process would otherwise compile them
    # again on import: torch (6.5 s against 2.9 s), and sympy, which the first optimiser step of every training
    # process imports (through torch._dynamo): that step took 4.7-6.7 s against 2.0 s on the Zen 3 machine. As with
    # pip, a file that is not for this Python (torch ships one written for 3.12) stays uncompiled, and compileall's
    # exit status, 1 then, is not a failure of the set-up.
    by_pip=$(.venv/bin/python -c 'import importlib.metadata as m; print("\n".join(sorted({str(d.locate_file(f.parts[0]))
        for d in m.distributions() if (d.read_text("INSTALLER") or "").strip() == "pip"
        for f in d.files or () if f.suffix == ".py" and f.parts[0] != ".."})))')
    echo "$by_pip" | xargs -r .venv/bin/python -m compileall -q -j 0 >/dev/null || true
    rm -f .venv/.installed-*
    touch "$stamp"
fi

# The DVC cache outside the clone, where the user has chosen none (scripts/machine_cache.sh): a fresh clone then
# restores the stages a stopped one finished.
bash scripts/machine_cache.sh
# DVC's lock file in memory (scripts/dvc_lock_in_memory.sh): a no-op `dvc repro` otherwise waits on the disk.
bash scripts/dvc_lock_in_memory.sh
