#!/usr/bin/env bash
# Runs ON the GPU machine: installs into $HOME/tuner-site the wheels from DIR whose module the
# machine cannot import yet, so the machine's own torch/numpy stay untouched.
set -euo pipefail
DIR="${1:-.gpu/tuner-wheels}"
SITE="$HOME/tuner-site"
mkdir -p "$SITE"
export PYTHONPATH="$HOME/venv/site:$SITE${PYTHONPATH:+:$PYTHONPATH}"
declare -A MOD=([optuna]=optuna [SQLAlchemy]=sqlalchemy [sqlalchemy]=sqlalchemy [alembic]=alembic
  [mako]=mako [Mako]=mako [colorlog]=colorlog [typer]=typer [shellingham]=shellingham [rich]=rich
  [markdown_it_py]=markdown_it [mdurl]=mdurl [pygments]=pygments [httpx]=httpx
  [httpcore]=httpcore [h11]=h11 [anyio]=anyio [sniffio]=sniffio [idna]=idna [certifi]=certifi
  [nvidia_ml_py]=pynvml [psutil]=psutil [greenlet]=greenlet [click]=click
  [annotated_doc]=annotated_doc [typing_extensions]=typing_extensions [tqdm]=tqdm [PyYAML]=yaml
  [pyyaml]=yaml [aiohttp]=aiohttp [aiohappyeyeballs]=aiohappyeyeballs [aiosignal]=aiosignal
  [frozenlist]=frozenlist [multidict]=multidict [yarl]=yarl [propcache]=propcache [attrs]=attrs
  [prometheus_client]=prometheus_client)
todo=()
# Check from / : in the repository, its alembic/ folder would pass for the alembic package.
here="$PWD"; DIR="$(cd "$DIR" && pwd)"; cd /
for whl in "$DIR"/*.whl; do
  name=$(basename "$whl" | cut -d- -f1)
  mod="${MOD[$name]:-$name}"
  python3 -c "import $mod" 2>/dev/null || todo+=("$whl")
done
cd "$here"
if [ ${#todo[@]} -gt 0 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "${todo[@]}" 2>&1 | grep -v WARNING || true
fi
echo "installed ${#todo[@]} wheels into $SITE"
(cd / && python3 -c "import optuna, sqlalchemy, alembic.command, typer, rich, httpx, aiohttp, pynvml, psutil, prometheus_client; print('tuner deps ok, optuna', optuna.__version__)")
