#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests (Debian's postgresql package; scripts/setup.sh
# installs it): a fresh cluster in a temp folder, listening only on a unix socket in that folder
# (no TCP port, so parallel ctest runs never collide), trust authentication for the postgres role,
# fsync and synchronous_commit on as in production.
#
#   pg_cluster.sh start STATE_DIR   initdb + start; writes STATE_DIR/url (a postgresql:// URL of
#                                   the database "glassbox") and prints it
#   pg_cluster.sh stop STATE_DIR    stops the server (fast) and deletes the cluster
#   pg_cluster.sh pause STATE_DIR   stops the server, keeping the data (an outage)
#   pg_cluster.sh resume STATE_DIR  starts it again on the same data and socket
#
# initdb and postgres refuse to run as root: as root, they run as the postgres user (runuser).
set -euo pipefail
cmd=${1:-}
state=${2:-}
[ -n "$cmd" ] && [ -n "$state" ] || { echo "usage: $0 start|stop|pause|resume STATE_DIR" >&2; exit 2; }

bin=${GB_PG_BIN:-}
if [ -z "$bin" ]; then
  for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && bin=$d; done
fi
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ] || [ ! -x "$bin/pg_ctl" ]; then
  echo "pg_cluster: PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin/initdb): run scripts/setup.sh," \
       "which installs Debian's postgresql package (or set GB_PG_BIN)" >&2
  exit 1
fi

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || { echo "pg_cluster: running as root, but there is no postgres user to run the server as (Debian's postgresql package creates it)" >&2; exit 1; }
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

pg_ctl_start() {
  local root=$1
  as_owner "$bin/pg_ctl" -D "$root/data" -l "$root/server.log" -w -t 120 -s \
    -o "-c listen_addresses='' -c unix_socket_directories='$root' -c fsync=on -c synchronous_commit=on -c max_connections=200 -c shared_buffers=32MB" \
    start || { echo "pg_cluster: the server did not start; its log:" >&2; cat "$root/server.log" >&2 || true; exit 1; }
}

case "$cmd" in
  start)
    mkdir -p "$state"
    # A cluster left by an interrupted run goes first.
    if [ -f "$state/cluster" ]; then "$0" stop "$state" || true; fi
    root=$(mktemp -d "${TMPDIR:-/tmp}/glassbox-pg.XXXXXX")
    chmod 755 "$root"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$root"
    echo "$root" >"$state/cluster"
    as_owner "$bin/initdb" -D "$root/data" -U postgres -A trust -E UTF8 --locale=C -N >"$root/initdb.log" 2>&1 ||
      { echo "pg_cluster: initdb failed:" >&2; cat "$root/initdb.log" >&2; exit 1; }
    pg_ctl_start "$root"
    "$bin/createdb" -h "$root" -U postgres glassbox
    url="postgresql:///glassbox?host=$root&user=postgres"
    echo "$url" >"$state/url"
    echo "$url"
    ;;
  stop)
    [ -f "$state/cluster" ] || exit 0
    root=$(cat "$state/cluster")
    if [ -d "$root/data" ]; then as_owner "$bin/pg_ctl" -D "$root/data" -m immediate -s -w stop 2>/dev/null || true; fi
    rm -rf "$root"
    rm -f "$state/cluster" "$state/url"
    ;;
  pause)
    root=$(cat "$state/cluster")
    as_owner "$bin/pg_ctl" -D "$root/data" -m fast -s -w stop
    ;;
  resume)
    root=$(cat "$state/cluster")
    pg_ctl_start "$root"
    ;;
  *)
    echo "usage: $0 start|stop|pause|resume STATE_DIR" >&2
    exit 2
    ;;
esac
