#!/usr/bin/env bash
# One command on a fresh machine: install, then run the embedded default study (a real study on
# CPU vLLM with the 2-layer tiny-ernie model, 3 trials, SQLite in ./tuner.db) and print the best
# flags. Extra arguments go to `tuner run` (e.g. --trials 5, or a spec file).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
STUDY="demo-$(date +%Y%m%d-%H%M%S)"
.venv/bin/tuner run --study "$STUDY" "$@"
