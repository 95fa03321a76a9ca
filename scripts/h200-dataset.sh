#!/usr/bin/env bash
# Re-exports the committed H200 databases as the documented JSON Lines datasets beside them and
# re-derives the report's tables from those datasets. Run from the repository root after
# copying a session's databases into studies/results/ernie-0.3b-h200/.
set -euo pipefail
R=studies/results/ernie-0.3b-h200
tuner() { python -m tuner "$@"; }
tuner export ernie-0.3b-h200-chat --storage "sqlite:///$R/tuner-gpu.db" --out "$R/trials.jsonl"
tuner export ernie-0.3b-h200-chat --comparisons --storage "sqlite:///$R/tuner-gpu.db" \
  --out "$R/confirmation.jsonl"
tuner export --comparisons --storage "sqlite:///$R/claims-h200.db" --out "$R/claims.jsonl"
tuner export ernie-0.3b-a10g-emulated-chat-balanced --storage "sqlite:///$R/emulated-a10g.db" \
  --out "$R/emulated-a10g-trials.jsonl"
python -m bench.tables.splice docs/results/ernie-0.3b-h200.md
