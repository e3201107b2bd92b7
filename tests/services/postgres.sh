#!/usr/bin/env bash
# A throwaway PostgreSQL for the tests, on loopback only. Idempotent: it
# initialises the cluster on a fresh machine, starts it if it is down, reuses
# it if it is up, and (re)creates the two roles the service expects:
#   countersign_owner  owns the schema, runs migrations (CREATEDB and
#                      pg_signal_backend: the tests create and force-drop a
#                      database per test with it)
#   countersign_app    the service's role: LOGIN, NOSUPERUSER, NOBYPASSRLS,
#                      owns nothing (row-level security applies to it)
#
# Usage:
#   eval "$(tests/services/postgres.sh)"     # exports the URLs below
#   tests/services/postgres.sh               # prints them
#
# Exports COUNTERSIGN_TEST_PG_OWNER_URL, COUNTERSIGN_TEST_PG_APP_URL and
# COUNTERSIGN_TEST_PG_SUPERUSER_URL (the last only to prove the service refuses
# it). Progress goes to stderr; stdout is only the `export` lines.
# Settings: COUNTERSIGN_PG_DIR (default /tmp/countersign-pg), COUNTERSIGN_PG_PORT
# (default 54329), COUNTERSIGN_PG_BIN (default /usr/lib/postgresql/15/bin).
set -euo pipefail

PGDIR="${COUNTERSIGN_PG_DIR:-/tmp/countersign-pg}"
PORT="${COUNTERSIGN_PG_PORT:-54329}"
BIN="${COUNTERSIGN_PG_BIN:-}"
if [[ -z "$BIN" ]]; then
    for candidate in /usr/lib/postgresql/15/bin /usr/lib/postgresql/*/bin; do
        if [[ -x "$candidate/initdb" ]]; then BIN="$candidate"; break; fi
    done
fi
if [[ -z "$BIN" || ! -x "$BIN/initdb" ]]; then
    if command -v apt-get >/dev/null && [[ "$(id -u)" == 0 ]]; then
        echo "postgres.sh: installing PostgreSQL" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >&2
        for candidate in /usr/lib/postgresql/*/bin; do
            if [[ -x "$candidate/initdb" ]]; then BIN="$candidate"; fi
        done
    fi
fi
if [[ -z "$BIN" || ! -x "$BIN/initdb" ]]; then
    echo "postgres.sh: no PostgreSQL binaries found (set COUNTERSIGN_PG_BIN)" >&2
    exit 1
fi

# The server runs as an ordinary user: `postgres` when we are root.
run_as=()
if [[ "$(id -u)" == 0 ]]; then
    run_as=(runuser -u postgres --)
    if ! id postgres >/dev/null 2>&1; then
        useradd --system --home-dir "$PGDIR" --shell /bin/bash postgres
    fi
fi
SUPERUSER="$(if [[ "$(id -u)" == 0 ]]; then echo postgres; else id -un; fi)"

psql_super() {
    PGOPTIONS="-c client_min_messages=warning" "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U "$SUPERUSER" -d postgres "$@"
}

if "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then
    echo "postgres.sh: reusing the server on 127.0.0.1:$PORT" >&2
else
    if [[ ! -s "$PGDIR/PG_VERSION" ]]; then
        echo "postgres.sh: initialising $PGDIR" >&2
        mkdir -p "$PGDIR"
        if [[ "$(id -u)" == 0 ]]; then chown postgres: "$PGDIR"; fi
        chmod 700 "$PGDIR"
        "${run_as[@]}" "$BIN/initdb" -D "$PGDIR" -A trust -U "$SUPERUSER" -E UTF8 \
            --no-locale >/dev/null
    fi
    # Shared buffers as a deployment would size them (a quarter of memory), up
    # to 2 GB: with PostgreSQL's 128 MB the benchmark's growth run measured
    # the buffer cache (3.55 ms of database CPU per decision once 1,000,000
    # proposals were in, against 2.3 with 2 GB, as on the empty tables).
    mem_mb=$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo 2>/dev/null || echo 512)
    buffers_mb=$(( mem_mb / 4 > 2048 ? 2048 : mem_mb / 4 ))
    buffers_mb=$(( buffers_mb < 128 ? 128 : buffers_mb ))
    echo "postgres.sh: starting the server on 127.0.0.1:$PORT (shared_buffers ${buffers_mb}MB)" >&2
    "${run_as[@]}" "$BIN/pg_ctl" -D "$PGDIR" -l "$PGDIR/server.log" -w -t 60 \
        -o "-p $PORT -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
            -c listen_addresses=127.0.0.1 -c unix_socket_directories=$PGDIR \
            -c max_connections=300 -c shared_buffers=${buffers_mb}MB" \
        start >/dev/null
fi

psql_super <<'SQL'
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'countersign_owner') THEN
        CREATE ROLE countersign_owner LOGIN CREATEDB NOSUPERUSER NOBYPASSRLS;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'countersign_app') THEN
        CREATE ROLE countersign_app LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
    END IF;
END
$$;
ALTER ROLE countersign_app NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
-- Test clusters only: a test drops its database WITH (FORCE) while the service
-- role's pool may still hold connections to it.
GRANT pg_signal_backend TO countersign_owner;
SQL
if ! psql_super -tA -c "SELECT 1 FROM pg_database WHERE datname = 'countersign'" | grep -q 1; then
    psql_super -c "CREATE DATABASE countersign OWNER countersign_owner"
fi
# Databases the store tests created and did not drop (an interrupted run);
# one still in use (another run on this machine) is left alone.
for db in $(psql_super -tA -c "SELECT datname FROM pg_database WHERE datname LIKE 'cs\_%'"); do
    psql_super -c "DROP DATABASE IF EXISTS \"$db\"" 2>/dev/null || true
done

base="postgres://%s@127.0.0.1:$PORT/countersign"
# shellcheck disable=SC2059
{
    echo "export COUNTERSIGN_TEST_PG_OWNER_URL=$(printf "$base" countersign_owner)"
    echo "export COUNTERSIGN_TEST_PG_APP_URL=$(printf "$base" countersign_app)"
    echo "export COUNTERSIGN_TEST_PG_SUPERUSER_URL=$(printf "$base" "$SUPERUSER")"
}
