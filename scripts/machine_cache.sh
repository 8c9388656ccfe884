#!/usr/bin/env bash
# Point this clone's DVC cache at one outside the clone, shared by the machine's clones, unless the user chose one.
# Why: DVC's run-cache lives in the cache, so with the cache outside the clone a fresh clone restores every stage a
# stopped or removed clone finished (same command, deps and params) instead of running it again: a retrain killed
# part-way continues where it ended (docs/pipeline.md, "A cache that outlives the clone").
# Where: $CROSSMODAL_DVC_CACHE when set (a team's shared cache), else the user's cache folder,
# ${XDG_CACHE_HOME:-$HOME/.cache}/crossmodal-repro/dvc.
# Written with `dvc cache dir --local` (.dvc/config.local, never committed). Left alone: a cache.dir set at any level
# (this one included, so a second run changes nothing), and a clone whose own .dvc/cache already holds data (a
# workspace built before: moving it is the user's call, docs/pipeline.md says how).
# cache.type stays DVC's default, reflink then copy: a stage rewriting an output in place can then never corrupt the
# cached copy (with hardlink or symlink it would edit the cache itself, which every clone restores from).
# Run by scripts/setup.sh; DVC (default .venv/bin/dvc) may be named in $DVC.
set -euo pipefail
cd "$(dirname "$0")/.."

dvc=${DVC:-.venv/bin/dvc}
[ -z "$("$dvc" config cache.dir)" ] || exit 0  # merged over the system, global, project and local levels
[ -z "$(ls -A .dvc/cache 2>/dev/null)" ] || exit 0
dir=${CROSSMODAL_DVC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/crossmodal-repro/dvc}
mkdir -p "$dir"
"$dvc" cache dir --local "$(cd "$dir" && pwd)"
