#!/usr/bin/env bash
# Start a local PostgreSQL server for feinsum's database tests and print its SQLAlchemy URL.
#
# Usage:  url=$(bash .ci/start-postgres.sh)   # then FEINSUM_TEST_POSTGRES_URL="$url"
#
# * installs PostgreSQL with apt-get when no server binaries are present;
# * runs the server as the `postgres` user (CI runs as root and initdb refuses root);
# * creates a login role and a database for the tests (idempotent: safe to run twice);
# * prints exactly one line on stdout, postgresql+psycopg://USER:PASSWORD@127.0.0.1:PORT/DB;
#   every diagnostic goes to stderr. Exits non-zero when no server could be started.
#
# Environment (all optional): FEINSUM_PG_USER (feinsum), FEINSUM_PG_PASSWORD (feinsum),
# FEINSUM_PG_DB (feinsum_test), FEINSUM_PG_PORT (the cluster's port, else 5432).
set -euo pipefail

PGUSER_NAME=${FEINSUM_PG_USER:-feinsum}
PGPASS=${FEINSUM_PG_PASSWORD:-feinsum}
PGDB=${FEINSUM_PG_DB:-feinsum_test}

log() { echo "start-postgres: $*" >&2; }

as_postgres() {
    if [ "$(id -u)" = "0" ]; then
        runuser -u postgres -- "$@"
    elif [ "$(id -un)" = "postgres" ]; then
        "$@"
    else
        sudo -n -u postgres -- "$@"
    fi
}

server_bin_dir() {
    local v
    v=$(ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -n "$v" ] && [ -x "/usr/lib/postgresql/$v/bin/postgres" ]; then
        echo "/usr/lib/postgresql/$v/bin"
    fi
}

if [ -z "$(server_bin_dir)" ]; then
    if [ "$(id -u)" != "0" ]; then
        log "PostgreSQL is not installed and installing it needs root"; exit 1
    fi
    log "installing PostgreSQL (apt-get install -y postgresql)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq postgresql >&2
fi
BIN=$(server_bin_dir)
[ -n "$BIN" ] || { log "no PostgreSQL server binaries found after installation"; exit 1; }
VERSION=$(basename "$(dirname "$BIN")")
id postgres >/dev/null 2>&1 || { log "no 'postgres' user to run the server as"; exit 1; }

PORT=""
if command -v pg_ctlcluster >/dev/null 2>&1 && command -v pg_lsclusters >/dev/null 2>&1; then
    # Debian/Ubuntu wrapper: one cluster "main" per version.
    if ! pg_lsclusters -h | awk -v v="$VERSION" '$1 == v && $2 == "main"' | grep -q .; then
        log "creating cluster $VERSION/main"
        pg_createcluster "$VERSION" main ${FEINSUM_PG_PORT:+--port "$FEINSUM_PG_PORT"} >&2
    fi
    PORT=$(pg_lsclusters -h | awk -v v="$VERSION" '$1 == v && $2 == "main" {print $3}')
    STATUS=$(pg_lsclusters -h | awk -v v="$VERSION" '$1 == v && $2 == "main" {print $4}')
    if [ "$STATUS" != "online" ]; then
        log "starting cluster $VERSION/main on port $PORT"
        # pg_ctlcluster run as root switches to the cluster owner (postgres) itself.
        pg_ctlcluster "$VERSION" main start >&2
    fi
else
    # Plain binaries: a data directory owned by postgres, started with pg_ctl as postgres.
    PORT=${FEINSUM_PG_PORT:-5432}
    DATA=/var/lib/postgresql/feinsum-data
    if [ ! -s "$DATA/PG_VERSION" ]; then
        log "initdb $DATA"
        mkdir -p "$DATA"
        chown postgres:postgres "$DATA"
        as_postgres "$BIN/initdb" -D "$DATA" -E UTF8 --locale=C -A peer --auth-host=scram-sha-256 >&2
    fi
    mkdir -p /var/run/postgresql && chown postgres:postgres /var/run/postgresql
    if ! as_postgres "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
        log "starting server on port $PORT"
        as_postgres "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w \
            -o "-p $PORT -k /var/run/postgresql -c listen_addresses=127.0.0.1" start >&2
    fi
fi

for _ in $(seq 1 60); do
    if as_postgres "$BIN/pg_isready" -q -h /var/run/postgresql -p "$PORT" 2>/dev/null; then
        break
    fi
    sleep 0.5
done
as_postgres "$BIN/pg_isready" -h /var/run/postgresql -p "$PORT" >&2 \
    || { log "the server did not become ready"; exit 1; }

psql_pg() { as_postgres "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h /var/run/postgresql -p "$PORT" "$@"; }

if ! psql_pg -tAc "SELECT 1 FROM pg_roles WHERE rolname = '$PGUSER_NAME'" | grep -q 1; then
    log "creating role $PGUSER_NAME"
    psql_pg -c "CREATE ROLE \"$PGUSER_NAME\" LOGIN PASSWORD '$PGPASS'" >&2
else
    psql_pg -c "ALTER ROLE \"$PGUSER_NAME\" LOGIN PASSWORD '$PGPASS'" >&2
fi
if ! psql_pg -tAc "SELECT 1 FROM pg_database WHERE datname = '$PGDB'" | grep -q 1; then
    log "creating database $PGDB"
    psql_pg -c "CREATE DATABASE \"$PGDB\" OWNER \"$PGUSER_NAME\" ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0" >&2
fi

echo "postgresql+psycopg://$PGUSER_NAME:$PGPASS@127.0.0.1:$PORT/$PGDB"
