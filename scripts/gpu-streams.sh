#!/usr/bin/env bash
# Runs ON the GPU machine (after staging: .gpu/stage.sh install + scripts/gpu-install.sh).
# Keeps every GPU of the host busy across several `run` calls: each "stream" is a plan file
# (one tuner command per line) run in order on one GPU, detached with setsid so it outlives the
# call that started it; later calls wait on the streams and copy their results to $OUT.
#
#   bash scripts/gpu-streams.sh start DEADLINE_EPOCH NAME:GPU:PLAN[:DB] [NAME:GPU:PLAN[:DB] ...]
#   bash scripts/gpu-streams.sh wait SECONDS     # returns early when every stream has ended,
#                                                # then does what collect does
#   bash scripts/gpu-streams.sh collect          # databases, stream logs, server/launch logs -> $OUT
#
# The machine can be released between two calls (30 s idle, or taken back): what ran on it is
# then gone (start and the first wait belong in one call: `start ... && bash $0 wait 530`), so every `wait` brings back what has finished so far, and a `wait` on a fresh
# machine fails at once instead of waiting on nothing.
#
# Each stream has its database $HOME/tuner-DB.db (DB defaults to NAME; streams may share one:
# SQLite in WAL mode takes several writers), seeded from $SEED_DB_<DB> when that variable names
# a file (to resume a committed study or add to committed results), and its log
# $HOME/streams/NAME.log. A plan line may start with "@N " (N minutes): it is skipped when less
# than N minutes remain before DEADLINE_EPOCH. Every command runs under
# `timeout -s INT` to the deadline: SIGINT lets tuner record the running trial as interrupted
# and stop its server group, so a study can be resumed in a later session. The launch logs of
# unfinished `tuner compare` / `verify-claims` runs ($TUNER_HOME/launches) come back in
# launches.tgz; `SEED_LAUNCHES=DIR` at start puts such a folder back, and the same command then
# resumes from those launches. `SEED_COMPILE_CACHE=FILE` at start restores the compile cache
# an earlier `collect` brought back (compile-cache.tgz; see compile_cache below).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STREAMS="$HOME/streams"
mkdir -p "$STREAMS"

env_for() {  # DB GPU
  export PYTHONPATH="$HOME/venv/site:$HOME/tuner-site:$ROOT" PYTHONUNBUFFERED=1
  export TUNER_VLLM_PYTHON="$(command -v python3)" TUNER_HOME="$HOME/.cache/tuner"
  export TUNER_DB_URL="sqlite:///$HOME/tuner-$1.db"
  export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES="$2"
}

run_stream() {  # NAME GPU PLAN DEADLINE DB
  local name="$1" gpu="$2" plan="$3" deadline="$4" db="$5" line need left rc
  env_for "$db" "$gpu"
  export DEADLINE="$deadline"  # plan lines may end a step earlier: $((DEADLINE - $(date +%s) - 600))
  cd "$ROOT"
  while IFS= read -r line || [ -n "$line" ]; do
    [[ -z "${line// }" || "$line" == \#* ]] && continue
    need=0
    if [[ "$line" =~ ^@([0-9]+)\ (.*)$ ]]; then need="${BASH_REMATCH[1]}"; line="${BASH_REMATCH[2]}"; fi
    left=$(( deadline - $(date +%s) ))
    if (( left < need * 60 + 30 )); then
      echo "[$(date +%T)] skipped (${left}s left, needs ${need} min): $line"; continue
    fi
    echo "[$(date +%T)] \$ $line"
    timeout -s INT -k 60 "$left" bash -c "$line"
    rc=$?
    echo "[$(date +%T)] exit $rc"
  done < "$plan"
  echo "[$(date +%T)] stream done"
  touch "$STREAMS/$name.done"
}

collect() {  # databases, stream logs, server logs, launch logs -> $OUT
  mkdir -p "$OUT"
  nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv \
    > "$OUT/nvidia-smi.csv" 2>&1
  for db in "$HOME"/tuner-*.db; do
    [ -f "$db" ] && python3 - "$db" "$OUT/$(basename "$db")" <<'EOF'
import sqlite3, sys
src = sqlite3.connect(sys.argv[1]); dst = sqlite3.connect(sys.argv[2])
src.backup(dst)  # consistent copy even while a stream still writes (WAL)
EOF
  done
  tar czf "$OUT/streams.tgz" -C "$STREAMS" --exclude='*.done' . 2>/dev/null
  tar czf "$OUT/server-logs.tgz" -C "$ROOT/.tuner" logs 2>/dev/null
  [ -d "$HOME/.cache/tuner/launches" ] && tar czf "$OUT/launches.tgz" -C "$HOME/.cache/tuner" launches
  # Plans may write any other result files under $HOME/results (e.g. the load-fidelity bench).
  [ -d "$HOME/results" ] && tar czf "$OUT/results.tgz" -C "$HOME" results
  compile_cache
  ls -la "$OUT"
}

# vLLM's compiled graphs and kernels ($HOME/.cache/vllm, FlashInfer's JIT, Triton's): a fresh
# machine spends 200-300 s of each new configuration's start-up rebuilding them. They come back
# as compile-cache.tgz while that fits what a call returns (16 MiB a file); `start` with
# SEED_COMPILE_CACHE=FILE puts them back on the next machine.
CACHES=(.cache/vllm .cache/flashinfer .triton/cache)
compile_cache() {
  local have=() d
  for d in "${CACHES[@]}"; do [ -d "$HOME/$d" ] && have+=("$d"); done
  [ ${#have[@]} -eq 0 ] && return 0
  du -sh "${have[@]/#/$HOME/}" 2>/dev/null | sed 's/^/compile cache: /' >&2
  if (( $(du -scb "${have[@]/#/$HOME/}" | tail -1 | cut -f1) > 200 * 1024 * 1024 )); then
    echo "compile cache: over 200 MiB, not packed (it would not come back)" >&2; return 0
  fi
  tar czf "$HOME/compile-cache.tgz" -C "$HOME" "${have[@]}" 2>/dev/null
  if (( $(stat -c %s "$HOME/compile-cache.tgz") <= 15 * 1024 * 1024 )); then
    cp "$HOME/compile-cache.tgz" "$OUT/"
  else
    echo "compile cache: $(du -h "$HOME/compile-cache.tgz" | cut -f1) compressed, too large to bring back" >&2
  fi
}

case "${1:-}" in
  start)
    deadline="$2"; shift 2
    if [ -n "${SEED_COMPILE_CACHE:-}" ] && [ -f "$SEED_COMPILE_CACHE" ]; then
      tar xzf "$SEED_COMPILE_CACHE" -C "$HOME" && echo "compile cache restored from $SEED_COMPILE_CACHE"
    fi
    if [ -n "${SEED_LAUNCHES:-}" ] && [ -d "$SEED_LAUNCHES" ]; then
      mkdir -p "$HOME/.cache/tuner/launches" && cp -n "$SEED_LAUNCHES"/*.jsonl "$HOME/.cache/tuner/launches/" 2>/dev/null
    fi
    for spec in "$@"; do
      IFS=: read -r name gpu plan db <<< "$spec"
      db="${db:-$name}"
      [[ "$plan" == /* ]] || plan="$ROOT/$plan"
      if [ ! -f "$plan" ]; then echo "error: no plan file $plan (stream $name)" >&2; exit 2; fi
      seed_var="SEED_DB_${db//-/_}"
      if [ -n "${!seed_var:-}" ] && [ ! -f "$HOME/tuner-$db.db" ]; then
        cp "${!seed_var}" "$HOME/tuner-$db.db"
      fi
      rm -f "$STREAMS/$name.done"
      setsid nohup bash "$0" _run "$name" "$gpu" "$plan" "$deadline" "$db" \
        > "$STREAMS/$name.log" 2>&1 < /dev/null &
      echo "started stream $name on GPU $gpu: $plan (deadline $(date -d @"$deadline" +%T))"
    done
    ;;
  _run) shift; run_stream "$@" ;;
  wait)
    if ! compgen -G "$STREAMS/*.log" > /dev/null; then
      echo "error: no streams on this machine: it was released (idle over 30 s, or taken back) and" >&2
      echo "what ran on it is gone; stage again, and resume from the last call's launches.tgz" >&2
      echo "(SEED_LAUNCHES) and databases (SEED_DB_<db>)" >&2
      exit 3
    fi
    end=$(( $(date +%s) + $2 ))
    while (( $(date +%s) < end )); do
      all=1
      for log in "$STREAMS"/*.log; do [ -f "${log%.log}.done" ] || all=0; done
      (( all )) && break
      sleep 3
    done
    for log in "$STREAMS"/*.log; do echo "== $log"; tail -n 8 "$log"; done
    nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader
    collect > /dev/null
    ;;
  collect) collect ;;
  *) sed -n 2,26p "$0"; exit 2 ;;
esac
