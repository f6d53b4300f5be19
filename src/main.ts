// Entry point for `npm start`. With no database configured it runs on an embedded PostgreSQL whose
// data folder is .data/pg (kept across restarts); with no CRM webhook configured it runs in sandbox
// mode against the built-in Bitrix24 emulator.
import { join } from "node:path";
import { serve } from "@hono/node-server";
import pg from "pg";
import { ConfigError, loadConfig } from "./config/env.js";
import { startEmbedded } from "./db/embedded.js";
import { migrateDatabase, projectRoot } from "./db/migrate.js";
import { redactUrl } from "./db/url.js";
import { startCrmEndpoint } from "./emulator/sandbox.js";
import { createApp } from "./http/app.js";
import { createLogger, type Logger } from "./observability/logger.js";
import { receiverConfig } from "./receiver/config.js";
import { buildRuntime, registerRuntime } from "./runtime.js";
import { startRunner } from "./worker/runner.js";

/**
 * Sandbox mode has no stub era to leave behind, so it performs the cutover (§17) itself: until it
 * runs, the claim functions return nothing. Idempotent; a real portal needs an operator's cutover.
 */
async function performSandboxCutover(pool: pg.Pool, log: Logger): Promise<void> {
  try {
    const { rows } = await pool.query<{ already_done: boolean }>(
      "select already_done from bitrix_sync.perform_cutover('sandbox')",
    );
    if (!rows[0]?.already_done) log.info({ event: "sandbox.cutover" }, "sandbox: cutover performed");
  } catch (e) {
    // A role without the admin's EXECUTE: nothing is processed; readiness says cutover_not_performed.
    log.error(
      { event: "sandbox.cutover_failed", sqlstate: (e as { code?: string }).code },
      "sandbox: could not perform the cutover; nothing will be processed",
    );
  }
}

async function main(): Promise<void> {
  let config: ReturnType<typeof loadConfig>;
  try {
    config = loadConfig();
  } catch (e) {
    if (e instanceof ConfigError) {
      console.error(e.message);
      process.exit(78); // EX_CONFIG
    }
    throw e;
  }
  const log = createLogger({ level: config.env.LOG_LEVEL, environment: config.env.SERVICE_ENVIRONMENT });
  const stops: Array<() => Promise<void>> = [];

  let databaseUrl = config.secrets.BITRIX_SYNC_DATABASE_URL;
  if (databaseUrl === undefined) {
    const dir = join(projectRoot, ".data", "pg");
    log.info(
      { event: "db.embedded.starting" },
      "no BITRIX_SYNC_DATABASE_URL: starting embedded PostgreSQL in .data/pg",
    );
    const srv = await startEmbedded({ dir, persistent: true });
    databaseUrl = srv.url;
    stops.unshift(() => srv.stop());
  }
  log.info({ event: "db.target", database: redactUrl(databaseUrl) }, "database selected");

  if (config.env.BITRIX_SYNC_MIGRATE_ON_START) await migrateDatabase(databaseUrl, log);

  const pool = new pg.Pool({
    connectionString: databaseUrl,
    max: config.env.BITRIX_SYNC_DB_POOL_SIZE,
    application_name: "bitrix-sync",
  });
  pool.on("error", (err) =>
    log.warn({ event: "db.pool.error", code: (err as { code?: string }).code }, "idle client error"),
  );
  // A client that dies while checked out must not crash the process; the query using it fails instead.
  pool.on("connect", (client) => client.on("error", () => undefined));
  stops.unshift(() => pool.end());

  if (config.sandbox) {
    log.warn(
      { event: "sandbox.mode" },
      "SANDBOX MODE: no BITRIX_SYNC_CRM_REST_WEBHOOK_URL configured; CRM calls go to the built-in Bitrix24 emulator on loopback, never to a real portal",
    );
  }
  if (config.sandbox && config.processing) await performSandboxCutover(pool, log);
  const crmEndpoint = await startCrmEndpoint({ config, log });
  stops.push(() => crmEndpoint.close());

  // Aborted first on SIGTERM: the sync loop stops claiming and lets in-flight work finish.
  const stopping = new AbortController();
  const runtime = await buildRuntime({
    config,
    log,
    pool,
    databaseUrl,
    crmEndpoint,
    stopping: stopping.signal,
  });
  registerRuntime(runtime);
  stops.unshift(() => runtime.close());

  if (config.processing) {
    const runner = await startRunner({ pool, log });
    stops.unshift(async () => {
      stopping.abort();
      await runner.stop();
    });
    // Start the sync loop now rather than at the next cron minute.
    await runner.addJob("sync_loop", {}, { jobKey: "sync_loop", jobKeyMode: "replace" });
  } else {
    log.warn(
      { event: "sync.paused" },
      "BITRIX_SYNC_ENABLED=false: workers claim nothing; pending rows are kept",
    );
  }

  const app = createApp({
    pool,
    log,
    receiver: receiverConfig(config),
    status: {
      config,
      health: runtime.health,
      limiter: runtime.crm.limiter,
      settings: runtime.settings,
    },
  });
  const server = serve({ fetch: app.fetch, port: config.env.PORT, hostname: config.env.HOST }, (info) =>
    log.info({ event: "http.listening", port: info.port }, "HTTP listener ready"),
  );
  stops.unshift(
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
      }),
  );

  let shuttingDown = false;
  const shutdown = async (signal: string, exitCode = 0) => {
    if (shuttingDown) return;
    shuttingDown = true;
    log.info({ event: "shutdown.begin", signal }, "stopping");
    const timer = setTimeout(() => {
      log.error({ event: "shutdown.timeout" }, "shutdown took too long; exiting");
      process.exit(1);
    }, 30_000);
    timer.unref();
    for (const stop of stops) {
      try {
        await stop();
      } catch (e) {
        log.warn({ event: "shutdown.step_failed", errorName: (e as Error).name }, "a shutdown step failed");
      }
    }
    log.info({ event: "shutdown.done" }, "stopped");
    process.exit(exitCode);
  };
  process.on("SIGINT", () => void shutdown("SIGINT"));
  process.on("SIGTERM", () => void shutdown("SIGTERM"));
  // A bug must not leave the embedded server or leases behind: stop cleanly, then exit non-zero.
  const crash = (kind: string) => (e: unknown) => {
    log.fatal(
      { event: "process.crash", kind, errorName: e instanceof Error ? e.name : typeof e },
      "unexpected error; stopping",
    );
    void shutdown(kind, 1);
  };
  process.on("uncaughtException", crash("uncaughtException"));
  process.on("unhandledRejection", crash("unhandledRejection"));
}

await main();
