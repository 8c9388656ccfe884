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
stamp=".venv/.installed-$(cat pyproject.toml requirements.lock | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    echo "setup: installing pinned dependencies into .venv (first run takes a few minutes)" >&2
    # torch first and alone, so the CPU build is used and no CUDA packages are pulled in.
    .venv/bin/pip install --quiet --disable-pip-version-check torch==2.13.0 2> >(grep -v "^WARNING: Location" >&2)
    .venv/bin/pip install --quiet --disable-pip-version-check -c requirements.lock -e ".[dev]" 2> >(grep -v "^WARNING: Location" >&2)
    rm -f .venv/.installed-*
    touch "$stamp"
fi
