#!/usr/bin/env bash
# The test command: install what is needed, lint, type-check, then every test, including the
# end-to-end ones on real CPU vLLM (TUNER_REQUIRE_E2E=1 turns their skip into a failure).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
export TUNER_REQUIRE_E2E="${TUNER_REQUIRE_E2E:-1}"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/pytest -p no:cacheprovider "$@"
