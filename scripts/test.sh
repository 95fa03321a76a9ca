#!/usr/bin/env bash
# The test command: install what is needed, lint, type-check, then every test, including the
# end-to-end ones on real CPU vLLM (TUNER_REQUIRE_E2E=1 turns their skip into a failure) and
# those on a real PostgreSQL server started for the run.
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
.venv/bin/lint-imports --no-cache  # pyproject's layers: imports point down the pipeline
bash scripts/wheel-check.sh  # the wheel, installed in a fresh venv, as a user gets it
# A throwaway PostgreSQL server for tests/postgres (TUNER_REQUIRE_POSTGRES=1 turns their skip into
# a failure); the trap stops it and removes its directory however pytest ends.
PG_DIR="$(mktemp -d /tmp/tuner-pg.XXXXXX)"
trap 'bash "$ROOT/scripts/postgres.sh" stop "$PG_DIR"' EXIT
TUNER_TEST_POSTGRES_URL="$(bash "$ROOT/scripts/postgres.sh" start "$PG_DIR")"
export TUNER_TEST_POSTGRES_URL
export TUNER_REQUIRE_POSTGRES="${TUNER_REQUIRE_POSTGRES:-1}"
.venv/bin/pytest -p no:cacheprovider "$@"
