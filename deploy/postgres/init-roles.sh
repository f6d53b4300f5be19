#!/bin/sh
# First start of the compose PostgreSQL only (docker-entrypoint-initdb.d): gives the runtime role
# LOGIN and its password before the migrations run. The migrations create bitrix_sync_user NOLOGIN
# only when it is absent, so they keep this one. Against a managed PostgreSQL the DBA does the same.
# The password comes from a secret file and reaches psql as a variable, never on a command line.
set -eu
password="$(cat /run/secrets/bitrix_sync_user_password)"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" -v password="$password" <<'SQL'
create role bitrix_sync_user login password :'password';
SQL
