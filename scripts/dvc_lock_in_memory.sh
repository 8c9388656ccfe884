#!/usr/bin/env bash
# Keep DVC's stage-lock file (.dvc/tmp/rwlock) in memory: a symlink to a file of its own under /dev/shm.
# Why: DVC reads and rewrites that file twice for every lock it takes, about 16 times a stage, even when nothing runs.
# On ext4 each rewrite truncates the file, and ext4 then writes it back to disk at once (auto_da_alloc): 2.8 ms an
# edit against 0.02 ms in memory (benchmarks/results/noop_workspace.md). The file only lists the locks of DVC
# processes that are running, so losing it at a reboot loses nothing: DVC treats a missing file as no locks and
# writes it anew through the link.
# Safety in a folder every user can write to: the file is created by mktemp (mode 600, a random name, so no other
# user can place a file or a link there first), and Linux does not follow another user's links in such a folder.
# One file per clone. Left alone: a machine without a writable /dev/shm, a clone already linked, and a lock file that
# holds locks now (a DVC process is running).
# Run by scripts/setup.sh; CROSSMODAL_LOCK_DIR names another folder (the tests').
set -euo pipefail
cd "$(dirname "$0")/.."

shm=${CROSSMODAL_LOCK_DIR:-/dev/shm}
[ -d "$shm" ] && [ -w "$shm" ] || exit 0
link=.dvc/tmp/rwlock
[ ! -L "$link" ] || [ "$(dirname "$(readlink "$link")")" != "$shm" ] || exit 0
if [ -f "$link" ] && [ ! -L "$link" ] && grep -q '"pid"' "$link"; then
    exit 0  # locks held now
fi
mkdir -p .dvc/tmp
target=$(mktemp "$shm/crossmodal-repro-rwlock.XXXXXXXXXX")
echo '{}' > "$target"  # no locks (DVC refuses an empty file)
ln -sfn "$target" "$link"
