#!/bin/sh
# First start of the compose PostgreSQL only (docker-entrypoint-initdb.d): runs the roles' bootstrap
# (deploy/postgres/bootstrap.sql, mounted read-only) as the cluster's superuser, in the App's
# database: the schema owner bitrix_sync_owner (no superuser; the migrate service connects as it)
# and bitrix_sync_user with LOGIN. Against a managed PostgreSQL the DBA runs the same file once.
# The passwords stay in their secret files: psql reads them itself, they are never on a command line.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v owner_password_file=/run/secrets/bitrix_sync_owner_password \
  -v user_password_file=/run/secrets/bitrix_sync_user_password \
  -f /etc/bitrix-sync/bootstrap.sql
