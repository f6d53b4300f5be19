# syntax=docker/dockerfile:1
# The bitrix-sync service image (spec §16; docs/deployment.md). Production dependencies only; runs as
# an unprivileged user with no capabilities on a read-only root filesystem. What it writes goes to
# /tmp, a tmpfs in deploy/compose.yaml: tsx's compile cache and, for the one-shot migration, npm's
# cache and logs. Secrets are read-only files in /run/han-chat/secrets, mounted at run time; none is
# ever baked into the image.
#
#   docker build -t bitrix-sync:<version> .
#
# The service runs TypeScript through tsx (a production dependency), with the same command as
# `npm start` and the tests; a test keeps CMD equal to package.json's start script.

# Node 24, the active LTS line (Node 20 left maintenance on 2026-04-30). Pinned by digest (the
# multi-platform index of that tag): a re-pushed tag changes nothing here. The digest is the one
# docker-library/repo-info records for node:24.21.0-bookworm-slim (repos/node/remote/, the build of
# 2026-09-19 on Debian's snapshot of 2026-09-18), and the one public Dockerfiles pin for that tag;
# it was not pulled here (no registry on the development machines): docs/deployment.md. The tests
# run on this exact version too (scripts/node24.sh; a test keeps the two equal).
ARG NODE_IMAGE=node:24.21.0-bookworm-slim@sha256:0e0ff40c39bc087845bfb27465a0df4ea419520094bc35842ff83dd8cbe6f9b6

FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# No install script runs: no production dependency needs one. (esbuild's only checks its binary,
# which tsx finds without it; embedded-postgres, the one that must run, is a development dependency:
# the image has no embedded PostgreSQL, and no emulator either, see .dockerignore.)
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    TMPDIR=/tmp \
    NPM_CONFIG_CACHE=/tmp/npm-cache \
    NPM_CONFIG_UPDATE_NOTIFIER=false \
    BITRIX_SYNC_SECRETS_DIR=/run/han-chat/secrets \
    BITRIX_SYNC_DATA_DIR=/tmp/bitrix-sync \
    BITRIX_SYNC_MIGRATE_ON_START=false \
    HOST=0.0.0.0 \
    PORT=8080
RUN groupadd --system --gid 10001 bitrix-sync \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin bitrix-sync
WORKDIR /app
# Owned by root and not writable by the service's user.
COPY --from=deps /app/node_modules ./node_modules
COPY package.json package-lock.json tsconfig.json graphile.config.mjs crontab ./
# src/ only: the emulator and the demo are in tools/, outside the context (.dockerignore), so
# sandbox mode is not part of the image.
COPY src ./src
COPY tasks ./tasks
COPY migrations/committed ./migrations/committed
# sql/worker_grants.sql is applied after every migration run (docs/migrations.md).
COPY sql/worker_grants.sql ./sql/
COPY scripts/migrate.ts scripts/healthcheck.mjs scripts/diagnose.ts ./scripts/
# The build in every log line, span, readiness answer and bitrix_sync_build_info (src/version.ts):
#   docker build --build-arg BITRIX_SYNC_REVISION=$(git rev-parse HEAD) \
#                --build-arg BITRIX_SYNC_VERSION=<tag> -t bitrix-sync:<tag> .
# Unset: the version is package.json's and the revision `unknown` (the image has no .git). Declared
# after the COPY lines, so a new commit rebuilds no layer.
ARG BITRIX_SYNC_REVISION=
ARG BITRIX_SYNC_VERSION=
ENV BITRIX_SYNC_REVISION=${BITRIX_SYNC_REVISION} \
    BITRIX_SYNC_VERSION=${BITRIX_SYNC_VERSION}
USER 10001:10001
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["node", "scripts/healthcheck.mjs"]
CMD ["node", "--import", "tsx", "src/main.ts"]
