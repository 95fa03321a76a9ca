#!/usr/bin/env bash
# The test command.
#
#   bash scripts/test.sh [pytest options]          # everything: what CI runs (about 20 minutes)
#   bash scripts/test.sh --fast [pytest options]   # the inner loop (about 5 minutes)
#
# Everything: lint, types, the import contract, the wheel as a user installs it, and every test:
# those that need no real vLLM (unit, integration on the fake server, a real PostgreSQL started
# for the run, Debian's chromium for the dashboards) and, side by side with them, the end-to-end
# ones on real CPU vLLM (tests/e2e; TUNER_REQUIRE_E2E=1 turns their skip into a failure), which
# start as soon as CPU vLLM is installed (in the background from the first second: about 4
# minutes, mostly downloading); that stream then runs the modules of marker after_e2e (the
# dashboards in chromium, the API fuzzing, the serial ones on PostgreSQL), which would otherwise
# wait in the longer stream. The end-to-end stream's output follows the others' at the end.
#
# --fast: lint, types, the import contract and every test that needs no real vLLM but the
# modules of long fake-server runs (-m "not e2e and not slow"; tests/conftest.py lists them):
# no vLLM, no wheel check. Enough for a change that does not touch how tuner starts,
# drives or reads real vLLM; run everything before you stop (tests/README.md says when).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FAST=0
if [ "${1:-}" = "--fast" ]; then
  FAST=1
  shift
fi
LOGS="$(mktemp -d /tmp/tuner-test.XXXXXX)"
say() { echo "[test] $*" >&2; }
stage() { say "$1 ($SECONDS s)"; }
VLLM_PID="" CHROMIUM_PID="" E2E_PID="" PG_DIR=""
cleanup() {  # nothing started here outlives the run
  for pid in $E2E_PID $VLLM_PID $CHROMIUM_PID; do kill "$pid" 2>/dev/null || true; done
  if [ -n "$PG_DIR" ]; then bash "$ROOT/scripts/postgres.sh" stop "$PG_DIR"; fi
}
trap cleanup EXIT

if [ "$FAST" = 0 ]; then
  (
    rc=0
    TUNER_BOOTSTRAP_TUNER=0 bash "$ROOT/scripts/bootstrap.sh" >"$LOGS/vllm.log" 2>&1 || rc=$?
    echo "$rc" >"$LOGS/vllm.rc"
  ) &
  VLLM_PID=$!
fi
if ! command -v chromium >/dev/null 2>&1; then
  say "installing Debian's chromium for the dashboard tests (in the background)"
  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium) \
    >"$LOGS/chromium.log" 2>&1 &
  CHROMIUM_PID=$!
fi
TUNER_BOOTSTRAP_VLLM=0 source "$ROOT/scripts/bootstrap.sh"  # tuner's .venv, in the foreground
cd "$ROOT"
# Where CPU vLLM will be; the tests that need no vLLM run without it.
VLLM_PYTHON="$TUNER_VLLM_PYTHON"
unset TUNER_VLLM_PYTHON
export TUNER_REQUIRE_E2E="${TUNER_REQUIRE_E2E:-1}"
export TUNER_REQUIRE_BROWSER="${TUNER_REQUIRE_BROWSER:-1}"

stage "lint, types, import contract"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports --no-cache  # pyproject's layers: imports point down the pipeline

if [ -n "$CHROMIUM_PID" ]; then  # before PostgreSQL, which may need apt too
  wait "$CHROMIUM_PID" || { cat "$LOGS/chromium.log" >&2; say "installing chromium failed"; exit 1; }
  CHROMIUM_PID=""
fi
# A throwaway PostgreSQL server for tests/postgres and the workers' e2e test
# (TUNER_REQUIRE_POSTGRES=1 turns their skip into a failure).
PG_DIR="$(mktemp -d /tmp/tuner-pg.XXXXXX)"
TUNER_TEST_POSTGRES_URL="$(bash "$ROOT/scripts/postgres.sh" start "$PG_DIR")"
export TUNER_TEST_POSTGRES_URL
export TUNER_REQUIRE_POSTGRES="${TUNER_REQUIRE_POSTGRES:-1}"

# pytest exits 5 when a selection holds no test (e.g. a path given that has no e2e test).
run_pytest() {
  local rc=0
  .venv/bin/pytest -p no:cacheprovider "$@" || rc=$?
  if [ "$rc" = 5 ]; then rc=0; fi
  return "$rc"
}

if [ "$FAST" = 0 ]; then
  (
    while [ ! -f "$LOGS/vllm.rc" ]; do sleep 2; done  # the install, a sibling: not ours to wait
    if [ "$(cat "$LOGS/vllm.rc")" != 0 ]; then
      cat "$LOGS/vllm.log"
      echo "[test] installing CPU vLLM failed"
      exit 1
    fi
    echo "[test] CPU vLLM ready; end-to-end tests start ($SECONDS s)"
    rc=0
    TUNER_VLLM_PYTHON="$VLLM_PYTHON" run_pytest -m e2e "$@" || rc=$?
    # Then the modules of marker after_e2e (tests/conftest.py), to even out the streams.
    echo "[test] end-to-end tests done; the dashboards and the API fuzzing ($SECONDS s)"
    run_pytest -m "not e2e and after_e2e" "$@" || rc=$?
    exit "$rc"
  ) >"$LOGS/e2e.log" 2>&1 &
  E2E_PID=$!
  stage "the wheel, installed in a fresh venv, as a user gets it"
  bash scripts/wheel-check.sh
fi

status=0
# Most of these tests wait on fake servers' sleeps rather than on the CPU: TUNER_TEST_WORKERS=2
# spreads them over pytest-xdist workers (about a third faster on an otherwise idle machine),
# and those whose assertions read the CPU time or the timing of signals (marker serial,
# tests/conftest.py) run alone after them. The default is 0 (one process): beside CPU vLLM on
# 2 cores, as in CI, more timing-bound tests moved than the serial list holds.
WORKERS="${TUNER_TEST_WORKERS:-0}"
SELECT="not e2e and not after_e2e"  # (those run in the end-to-end stream, after it)
if [ "$FAST" = 1 ]; then SELECT="not e2e and not slow"; fi
stage "tests that need no real vLLM (xdist workers: $WORKERS)"
run_pytest -m "$SELECT and not serial" -n "$WORKERS" "$@" || status=$?
# Marker quiet (a fake server that must saturate a core of its own): in the full run, after
# the end-to-end stream, on an otherwise idle machine.
QUIET="and not quiet"
if [ "$FAST" = 1 ]; then QUIET=""; fi
stage "tests that need no real vLLM and read the clock or the CPU, alone"
run_pytest -m "$SELECT and serial $QUIET" "$@" || status=$?
if [ "$FAST" = 1 ]; then
  stage "done (--fast: no real-vLLM tests, no wheel check; status $status)"
  exit "$status"
fi
stage "waiting for the end-to-end tests on real CPU vLLM"
e2e=0
wait "$E2E_PID" || e2e=$?
E2E_PID=""
stage "tests that need a core of their own, with nothing else running"
run_pytest -m "not e2e and quiet" "$@" || status=$?
say "---- end-to-end tests on real CPU vLLM, then the after_e2e modules ----"
cat "$LOGS/e2e.log"
if [ "$e2e" != 0 ]; then status=$e2e; fi
stage "done (status $status)"
exit "$status"
