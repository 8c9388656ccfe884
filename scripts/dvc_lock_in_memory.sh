#!/usr/bin/env bash
# Keep DVC's stage-lock file (.dvc/tmp/rwlock) in memory: a symlink to a file of its own under /dev/shm.
# Why: DVC reads and rewrites that file twice for every lock it takes, about 16 times a stage, even when nothing runs.
# On ext4 each rewrite truncates the file, and ext4 then writes it back to disk at once (auto_da_alloc): 2.8 ms an
# edit against 0.02 ms in memory, measured on this project's machine (benchmarks/results/noop_workspace.md); a no-op
# `dvc repro` of the 171 stages spent most of its time there. The file only lists the locks of DVC processes that are
# running, so losing it at a reboot loses nothing: DVC treats a missing file as no locks and writes it anew.
# One file per clone (its path's hash), so that two clones never share their locks. Left alone: a machine without a
# writable /dev/shm, and a lock file that holds locks now (a DVC process is running).
# Run by scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

shm=${CROSSMODAL_LOCK_DIR:-/dev/shm}
[ -d "$shm" ] && [ -w "$shm" ] || exit 0
link=.dvc/tmp/rwlock
target="$shm/crossmodal-repro-$(id -u)-$(pwd -P | sha256sum | cut -c1-16).rwlock"
[ "$(readlink "$link" 2>/dev/null)" != "$target" ] || exit 0
if [ -f "$link" ] && [ ! -L "$link" ] && grep -q '"pid"' "$link"; then
    exit 0  # locks held now
fi
mkdir -p .dvc/tmp
ln -sfn "$target" "$link"
