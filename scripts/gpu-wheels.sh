#!/usr/bin/env bash
# Downloads the Python 3.12 wheels tuner needs on the GPU machine (which has torch and, once
# staged, vLLM 0.26.0, but no registry access) into DEST (default .gpu/tuner-wheels).
# On the GPU machine: bash scripts/gpu-install.sh DEST installs the ones it lacks.
set -euo pipefail
DEST="${1:-.gpu/tuner-wheels}"
mkdir -p "$DEST"
PLAT=""; for n in 17 24 27 28 31 34 35; do PLAT="$PLAT --platform manylinux_2_${n}_x86_64"; done
PIP_CONSTRAINT= python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp $PLAT --platform manylinux2014_x86_64 --platform any -d "$DEST" \
  optuna sqlalchemy alembic mako colorlog typer shellingham rich markdown-it-py mdurl pygments \
  httpx httpcore h11 anyio sniffio idna certifi nvidia-ml-py psutil greenlet click \
  annotated-doc typing-extensions tqdm pyyaml aiohttp aiohappyeyeballs aiosignal frozenlist \
  multidict yarl propcache attrs prometheus_client 2>&1 | grep -v -e '^WARNING: Location' -e 'is ignored' || true
ls "$DEST" | wc -l
