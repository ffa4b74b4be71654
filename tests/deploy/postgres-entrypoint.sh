#!/bin/sh
# The entrypoint of the tests' PostgreSQL image (Debian's postgresql-15), standing in for the official image's: on
# an empty data folder it makes a cluster whose superuser is POSTGRES_USER, with POSTGRES_PASSWORD, and the
# database POSTGRES_DB; then it runs the server as user postgres, listening on every interface.
set -eu
: "${POSTGRES_PASSWORD:?is required}" "${POSTGRES_USER:=postgres}" "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_DB:=$POSTGRES_USER}"

as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }

mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    password=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$password"
    chown postgres "$password"
    # UTF-8, as the official image's clusters (C's default, SQL_ASCII, hands drivers bytes for text)
    as_postgres initdb --pgdata="$PGDATA" --username="$POSTGRES_USER" --pwfile="$password" \
        --encoding=UTF8 --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256 > /dev/null
    rm "$password"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    if [ "$POSTGRES_DB" != postgres ]; then
        # single-user mode: the database made before any client can connect
        echo "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\";" \
            | as_postgres postgres --single -D "$PGDATA" postgres > /dev/null
    fi
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -D "$PGDATA" -c listen_addresses='*'
