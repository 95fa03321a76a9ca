#!/usr/bin/env bash
# Checks tuner as a user installs it: builds the wheel from the files of this checkout (tracked,
# and new ones git does not ignore), looks inside it, installs it (not editable) into a fresh venv
# and, from a directory outside the source tree, runs `tuner db upgrade`, a two-trial study on the
# fake vLLM server (tuner.testing.fake_server, through compose's TUNER_SERVER_MODULE seam) and
# `tuner serve` until /healthz, a dashboard page, its CSS and /docs answer.
#
#   bash scripts/wheel-check.sh        # about 45 s on 2 cores; scripts/test.sh runs it
#
# Needs .venv (scripts/bootstrap.sh) for its pip, which installs into the new venv (--python):
# the venv itself gets no pip, and no byte-compilation at install time, to stay quick. Everything
# lives in one temporary directory, removed at the end; no process started here outlives it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
PIP=("$ROOT/.venv/bin/python" -m pip)
WORK="$(mktemp -d "${TMPDIR:-/tmp}/tuner-wheel.XXXXXX")"
VENV="$WORK/venv"
CHILD=""  # the command run() waits for
SERVER=""  # tuner serve

say() { echo "[wheel-check] $*" >&2; }
fail() {
  say "FAILED: $*"
  exit 1
}

# Every process whose command line names $WORK: the venv's interpreter, the fake servers (their
# model lives under $WORK), their engine-core children.
leftovers() {
  local pid
  for pid in $(pgrep -f -- "$WORK" || true); do
    [ "$pid" != "$$" ] && [ "$pid" != "$BASHPID" ] && echo "$pid"
  done
}

cleanup() {
  local status=$? pid
  trap - EXIT INT TERM
  for pid in $CHILD $SERVER; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  local left
  left="$(leftovers)"
  if [ -n "$left" ]; then
    say "processes left behind, killed: $(echo "$left" | tr '\n' ' ')"
    # shellcheck disable=SC2086
    kill -KILL $left 2>/dev/null || true
    [ "$status" -ne 0 ] || status=1
  fi
  rm -rf "$WORK"
  exit "$status"
}
trap cleanup EXIT
trap 'say interrupted; exit 130' INT
trap 'say terminated; exit 143' TERM

# Runs a command with its output in $WORK/NAME.log, shown only if it fails. In the background,
# waited for: bash runs traps only between foreground commands, and so INT/TERM reach the trap
# at once, which stops the command.
run() {
  local name=$1 status=0
  shift
  "$@" >"$WORK/$name.log" 2>&1 &
  CHILD=$!
  wait "$CHILD" || status=$?
  CHILD=""
  if [ "$status" -ne 0 ]; then
    grep -v -e '^WARNING: Location' -e 'is ignored: it is neither' "$WORK/$name.log" >&2 || true
    fail "$name (exit $status): $*"
  fi
}

started=$SECONDS
say "building the wheel"
mkdir -p "$WORK/src" "$WORK/dist" "$WORK/run"
git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1 || fail "$ROOT is not a git checkout"
# A copy of the checkout's files, so that no build/ left from an earlier build adds stale files.
(cd "$ROOT" && git ls-files -z -co --exclude-standard \
  | tar -c --null --ignore-failed-read -T - -f - 2>/dev/null) | tar -x -C "$WORK/src"
run build "${PIP[@]}" wheel -q --no-deps -w "$WORK/dist" "$WORK/src"
WHEEL="$(ls "$WORK"/dist/tuner-*.whl)"

say "looking inside $(basename "$WHEEL")"
"$PY" - "$WHEEL" "$ROOT" <<'EOF'
import sys
import zipfile
from pathlib import Path

names = set(zipfile.ZipFile(sys.argv[1]).namelist())
root = Path(sys.argv[2])
want = {
    "tuner/py.typed",
    "tuner/spec/default_study.toml",
    "tuner/testing/fake_server.py",
    "tuner/runner/amx_site/sitecustomize.py",  # put on vLLM's PYTHONPATH on AMX hosts
    "tuner/db/migrations/env.py",
    "tuner/db/migrations/script.py.mako",
    *(f"tuner/db/migrations/versions/{p.name}" for p in (root / "alembic/versions").glob("*.py")),
    *(f"api/dashboards/{p.parent.name}/{p.name}" for p in (root / "api/dashboards").glob("*/*")
      if p.is_file() and p.parent.name in ("static", "templates")),
}
missing = sorted(want - names)
if missing:
    sys.exit(f"the wheel lacks {missing}")
strays = sorted(n for n in names if n.split("/")[0] not in ("tuner", "api") and ".dist-info/" not in n)
if strays:
    sys.exit(f"the wheel holds files outside tuner/ and api/: {strays}")
EOF

say "installing it into a fresh venv"
"$PY" -m venv --without-pip "$VENV"
run install "${PIP[@]}" --python "$VENV/bin/python" install -q --no-compile "$WHEEL"

# From here on: the installed tuner only. No source tree on the path, no inherited settings.
cd "$WORK/run"
unset PYTHONPATH TUNER_DB_URL TUNER_VLLM_PYTHON TUNER_API_KEY
export TUNER_HOME="$WORK/home"
DB="sqlite:///$WORK/run/tuner.db"
TUNER="$VENV/bin/tuner"
"$VENV/bin/python" - "$VENV" <<'EOF'
import sys
from pathlib import Path

import api
import tuner
from tuner.db import migrate

venv = Path(sys.argv[1]).resolve()
for module in (tuner, api):
    where = Path(module.__file__).resolve()
    if venv not in where.parents:
        sys.exit(f"{module.__name__} imported from {where}, not from the venv")
scripts = migrate.alembic_dir()
if scripts != Path(tuner.__file__).parent / "db" / "migrations":
    sys.exit(f"migration scripts found at {scripts}, not in the installed package")
EOF

say "tuner db upgrade"
run upgrade "$TUNER" db upgrade --storage "$DB"
run current "$TUNER" db current --storage "$DB"

say "a study on the fake vLLM server"
cat >spec.toml <<'EOF'
[study]
name = "wheel-check"
model = "tiny-ernie"
gpu = "cpu"
workload = "smoke"
trials = 2

[workload]
requests_per_window = 4
warmup_requests = 1
concurrency = 2
output_tokens = 4

[runner]
startup_timeout_s = 30

[confirm]
launches = 0
EOF
export TUNER_SERVER_MODULE=tuner.testing.fake_server TUNER_FAKE_STARTUP_S=0.1
run study "$TUNER" run spec.toml --storage "$DB"
run trials "$TUNER" trials wheel-check --storage "$DB" --json
"$VENV/bin/python" - "$WORK/trials.log" <<'EOF'
import json
import sys

trials = json.load(open(sys.argv[1]))
statuses = [t["status"] for t in trials]
if len(trials) != 2 or "complete" not in statuses:
    sys.exit(f"expected 2 trials, one complete at least; got {statuses}")
EOF

say "tuner serve"
"$TUNER" serve --port 0 --storage "$DB" >"$WORK/serve.log" 2>&1 &
SERVER=$!
"$VENV/bin/python" - "$WORK/serve.log" "$SERVER" <<'EOF'
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

log, pid = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 30
base = None
while base is None:
    found = re.search(r"tuner API on (http://\S+/)", open(log).read())
    if found:
        base = found.group(1)
    elif time.monotonic() > deadline:
        sys.exit("tuner serve printed no address in 30 s:\n" + open(log).read())
    else:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            sys.exit("tuner serve exited:\n" + open(log).read())
        time.sleep(0.1)


def get(path: str) -> tuple[int, bytes]:
    while True:
        try:
            with urllib.request.urlopen(base + path, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError:  # not accepting yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


status, body = get("healthz")
health = json.loads(body)
if status != 200 or health.get("status") != "ok" or health.get("studies") != 1:
    sys.exit(f"GET /healthz: {status} {body!r}")
for path in ("ui/", "ui/studies/wheel-check", "ui/static/dashboard.css", "docs"):
    status, body = get(path)
    if status != 200 or not body:
        sys.exit(f"GET /{path}: {status} {body[:300]!r}")
EOF
kill -TERM "$SERVER"
wait "$SERVER" 2>/dev/null || true
SERVER=""
say "ok: the wheel installs and works ($((SECONDS - started)) s)"
