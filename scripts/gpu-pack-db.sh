#!/usr/bin/env bash
# Runs ON the GPU machine after a stream: brings a study database back small enough for the
# device tool's size limit. Writes to $OUT: NAME.db (a copy without the per-request records,
# every trial, window, comparison and Optuna row kept), NAME-requests.db.gz (the whole
# database, gzip) and the study's datasets (trials and comparisons, JSON Lines).
#   bash scripts/gpu-pack-db.sh NAME STUDY [STUDY ...]
set -uo pipefail
NAME="$1"; shift
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DB="$HOME/tuner-$NAME.db"
export PYTHONPATH="$HOME/venv/site:$HOME/tuner-site:$ROOT"
python3 - "$DB" "$OUT/$NAME.db" <<'PY'
import shutil, sqlite3, sys
src, dst = sys.argv[1], sys.argv[2]
with sqlite3.connect(src) as s:
    s.execute("PRAGMA wal_checkpoint(TRUNCATE)")
shutil.copyfile(src, dst)
with sqlite3.connect(dst) as d:
    d.execute("DELETE FROM tuner_trial_requests")
d = sqlite3.connect(dst)
d.execute("VACUUM")
d.close()
PY
gzip -c "$DB" > "$OUT/$NAME-requests.db.gz"
for study in "$@"; do
  (cd "$ROOT" && python3 -m tuner export "$study" --out "$OUT/$study-trials.jsonl" --storage "sqlite:///$DB")
  (cd "$ROOT" && python3 -m tuner export "$study" --comparisons --out "$OUT/$study-comparisons.jsonl" --storage "sqlite:///$DB")
done
ls -la "$OUT"
