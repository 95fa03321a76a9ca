#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests of shared storage (tests/postgres).
#
#   scripts/postgres.sh start DIR   create a cluster in DIR, start it, print its SQLAlchemy URL
#   scripts/postgres.sh stop DIR    stop that server (immediately) and remove DIR
#
# The server listens only on a unix socket in DIR (no TCP port, so nothing can clash with another
# server on the machine), trusts every local connection, and trades durability for speed
# (fsync off): it holds test data only. Debian's postgresql is installed with apt when no initdb is
# found. Run as root, the cluster belongs to the `postgres` user, since initdb and pg_ctl refuse
# root. Use a short DIR (e.g. from `mktemp -d /tmp/pg.XXXXXX`): a socket path is limited to 107
# bytes. A failed start stops what it started and removes DIR.
set -euo pipefail
PATH="$PATH:/usr/sbin:/sbin"  # runuser and useradd, when root's PATH lacks them

MARKER=".tuner-postgres"  # stop removes only a directory that start made
PORT=5432                 # the default; only names the socket file in DIR (no TCP listener)

die() {
  echo "[postgres] $*" >&2
  exit 1
}

# The directory holding initdb and pg_ctl: PATH first, then Debian's versioned directories.
find_bin() {
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v initdb)"
    return 0
  fi
  local dir
  dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
  if [ -n "$dir" ] && [ -x "$dir/initdb" ]; then
    echo "$dir"
    return 0
  fi
  return 1
}

install_postgres() {
  [ "$(id -u)" -eq 0 ] || die "PostgreSQL is not installed; install it (apt-get install postgresql) or run this as root"
  echo "[postgres] installing Debian's postgresql" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  # Debian's package creates and starts a system-wide cluster (port 5432) that would outlive the
  # tests: install the cluster manager first and switch that off, as the postgres Docker image does.
  apt-get install -y -q postgresql-common >/dev/null
  sed -ri 's/^#?[[:space:]]*create_main_cluster[[:space:]]*=.*/create_main_cluster = false/' \
    /etc/postgresql-common/createcluster.conf
  apt-get install -y -q postgresql >/dev/null
}

# Runs a command as the cluster's owner: `postgres` when we are root, else ourselves.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    (cd / && runuser -u postgres -- "$@")
  else
    (cd / && "$@")
  fi
}

start() {
  local dir="$1" bin
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  [ -z "$(ls -A "$dir")" ] || die "$dir is not empty: pick a new directory (or stop the server in it first)"
  case "$dir" in *[[:space:]\'\"\\]*) die "$dir: use a directory without spaces or quotes" ;; esac
  [ "${#dir}" -le 90 ] || die "$dir is too long for a unix socket path: use e.g. mktemp -d /tmp/pg.XXXXXX"
  touch "$dir/$MARKER"
  # From here on, a failure stops whatever started and removes the directory.
  trap "stop '$dir' >/dev/null 2>&1 || true" EXIT
  bin="$(find_bin)" || {
    install_postgres
    bin="$(find_bin)" || die "initdb not found even after installing postgresql"
  }
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin postgres
    chown postgres: "$dir"
    as_owner test -x "$dir" || die "user postgres cannot enter $dir: pick a directory under /tmp"
  fi
  chmod 700 "$dir"
  as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 --locale=C \
    --no-sync >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2
    die "initdb failed"
  }
  cat >>"$dir/data/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$dir'
port = $PORT
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
  if ! as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null; then
    tail -n 20 "$dir/server.log" >&2 || true
    die "the server did not start"
  fi
  trap - EXIT
  echo "postgresql+psycopg://postgres@/postgres?host=$dir"
}

stop() {
  local dir="$1" bin
  [ -d "$dir" ] || return 0
  [ -e "$dir/$MARKER" ] || die "$dir was not made by '$0 start': not touching it"
  if [ -e "$dir/data/postmaster.pid" ]; then
    bin="$(find_bin)" || die "pg_ctl not found, cannot stop the server in $dir"
    # Immediate: nothing in a throwaway cluster is worth a clean shutdown.
    if ! as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w -t 60 stop >/dev/null 2>&1; then
      # A stale pid file (the server died) is fine; a server still running is not.
      if as_owner "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        die "could not stop the server in $dir (see $dir/server.log)"
      fi
    fi
  fi
  rm -rf "$dir"
}

case "${1:-} ${2:+x}" in
  "start x") start "$2" ;;
  "stop x") stop "$2" ;;
  *) die "usage: $0 start DIR | stop DIR" ;;
esac
