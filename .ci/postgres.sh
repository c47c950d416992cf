#!/usr/bin/env bash
# Throwaway PostgreSQL server for the `postgres`-marked tests (studies storage).
#
#   .ci/postgres.sh          start (or reuse) a cluster on 127.0.0.1:$RT_PG_PORT (default 5433)
#                            and print its SQLAlchemy URL on stdout, e.g.
#                            postgresql+psycopg://rt@127.0.0.1:5433/rt_test
#   .ci/postgres.sh stop     stop that cluster and delete its files
#
# Usage from CI:  export RT_POSTGRES_URL="$(.ci/postgres.sh)"
# Installs the Debian `postgresql` package when no server binaries are found (needs root or sudo).
# The cluster lives under /tmp/rt-pg-$PORT, trusts local connections only, listens on loopback only,
# and runs as the `postgres` user when started by root (initdb refuses to run as root).
# Everything but the URL goes to stderr.
set -euo pipefail

PORT="${RT_PG_PORT:-5433}"
DB="rt_test"
ROLE="rt"
BASE="/tmp/rt-pg-${PORT}"
URL="postgresql+psycopg://${ROLE}@127.0.0.1:${PORT}/${DB}"

log() { echo "postgres.sh: $*" >&2; }

find_bindir() {
    local ctl
    ctl="$(ls -1d /usr/lib/postgresql/*/bin/pg_ctl 2>/dev/null | sort -V | tail -n1 || true)"
    if [[ -n "$ctl" ]]; then dirname "$ctl"; return; fi
    if command -v pg_ctl >/dev/null 2>&1; then dirname "$(command -v pg_ctl)"; fi
}

as_owner() {
    # Run a command as the cluster owner: `postgres` when we are root, ourselves otherwise.
    if [[ "$(id -u)" == "0" ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

install_server() {
    log "no PostgreSQL server binaries found; installing the Debian package"
    local sudo=""
    [[ "$(id -u)" == "0" ]] || sudo="sudo"
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >&2
}

stop_server() {
    local bindir
    bindir="$(find_bindir)"
    if [[ -d "$BASE/data" && -n "$bindir" ]]; then
        as_owner "$bindir/pg_ctl" -D "$BASE/data" -m fast -w stop >&2 || true
    fi
    rm -rf "$BASE"
    log "stopped and removed $BASE"
}

start_server() {
    local bindir
    bindir="$(find_bindir)"
    if [[ -z "$bindir" ]]; then
        install_server
        bindir="$(find_bindir)"
    fi
    [[ -n "$bindir" ]] || { log "PostgreSQL binaries still missing after install"; exit 1; }

    if "$bindir/pg_isready" -q -h 127.0.0.1 -p "$PORT" 2>/dev/null; then
        if [[ -d "$BASE/data" ]]; then
            log "reusing the server already running on 127.0.0.1:$PORT"
            echo "$URL"
            return
        fi
        log "port $PORT is taken by a server this script did not start; set RT_PG_PORT"
        exit 1
    fi

    rm -rf "$BASE"
    mkdir -p "$BASE"
    if [[ "$(id -u)" == "0" ]]; then
        id postgres >/dev/null 2>&1 || useradd --system --home-dir "$BASE" postgres
        chown postgres "$BASE"
    fi
    as_owner "$bindir/initdb" -D "$BASE/data" -U "$ROLE" --auth=trust -E UTF8 --no-sync >&2
    as_owner "$bindir/pg_ctl" -D "$BASE/data" -l "$BASE/server.log" -w \
        -o "-c listen_addresses=127.0.0.1 -p $PORT -k $BASE -c fsync=off" start >&2
    as_owner "$bindir/createdb" -h 127.0.0.1 -p "$PORT" -U "$ROLE" "$DB" >&2
    log "server up on 127.0.0.1:$PORT (data in $BASE/data, log in $BASE/server.log)"
    echo "$URL"
}

case "${1:-start}" in
    start) start_server ;;
    stop) stop_server ;;
    *) log "unknown command '${1}'; use 'start' (default) or 'stop'"; exit 2 ;;
esac
