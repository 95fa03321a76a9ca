#!/usr/bin/env bash
# The test command: install what is needed, lint, type-check, then every test, including the
# end-to-end ones on real CPU vLLM (TUNER_REQUIRE_E2E=1 turns their skip into a failure).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
export TUNER_REQUIRE_E2E="${TUNER_REQUIRE_E2E:-1}"
export TUNER_REQUIRE_BROWSER="${TUNER_REQUIRE_BROWSER:-1}"
if ! command -v chromium >/dev/null 2>&1; then
  echo "[test] installing Debian's chromium for the dashboard tests" >&2
  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/pytest -p no:cacheprovider "$@"
