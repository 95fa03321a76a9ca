#!/usr/bin/env bash
# Runs ON the GPU machine (after staging: .gpu/stage.sh install + scripts/gpu-install.sh):
# runs or resumes a study for at most BUDGET seconds, then copies the database and the server
# logs to $OUT so they come back. The database lives in $HOME between calls, so the next call
# resumes where this one stopped (the machine stays warm between back-to-back calls).
#   bash scripts/gpu-study.sh BUDGET_S tuner-run-args...
set -uo pipefail
BUDGET="${1:?budget seconds}"; shift
export PYTHONPATH="$HOME/venv/site:$HOME/tuner-site:$PWD"
export TUNER_VLLM_PYTHON="$(command -v python3)"
export TUNER_DB_URL="sqlite:///$HOME/tuner-gpu.db"
export TUNER_HOME="$HOME/.cache/tuner"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv > "$OUT/nvidia-smi.csv" 2>&1
# SIGINT lets tuner record the running trial as interrupted and stop its server group.
timeout -s INT -k 30 "$BUDGET" python3 -m tuner.cli run "$@"
echo "tuner exit: $?"
python3 -m tuner.cli studies || true
cp "$HOME/tuner-gpu.db" "$OUT/" 2>/dev/null
mkdir -p "$OUT/logs" && cp -r .tuner/logs/. "$OUT/logs/" 2>/dev/null
ls -la "$OUT" | head
