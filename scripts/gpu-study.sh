#!/usr/bin/env bash
# Runs ON the GPU machine (after staging: .gpu/stage.sh install + scripts/gpu-install.sh):
# runs or resumes one study on one GPU for at most BUDGET seconds within this call, then brings
# the database ($HOME/tuner-gpu.db, kept between calls so the next call can --resume), the
# stream log and the server logs back under $OUT. A one-line plan for scripts/gpu-streams.sh.
#   GPU=0 bash scripts/gpu-study.sh BUDGET_S tuner-run-args...
set -euo pipefail
BUDGET="${1:?budget seconds}"; shift
HERE="$(cd "$(dirname "$0")" && pwd)"
plan="$(mktemp --suffix=.plan)"
printf 'python3 -m tuner run %s\n' "$(printf '%q ' "$@")" > "$plan"
bash "$HERE/gpu-streams.sh" start $(( $(date +%s) + BUDGET )) "study:${GPU:-0}:$plan:gpu"
bash "$HERE/gpu-streams.sh" wait $(( BUDGET + 90 ))
