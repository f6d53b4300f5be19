// Entry point for `npm start`. With no database configured it runs on an embedded PostgreSQL whose
// data folder is .data/pg (kept across restarts); with no CRM webhook configured it runs in sandbox
// mode against the built-in Bitrix24 emulator. A startup failure prints one line naming the cause and
// the fix and exits with its own code (src/startup/errors.ts, docs/operations.md).
import type pg from "pg";
import { type Config, loadConfig } from "./config/env.js";
import { startEmbedded } from "./db/embedded.js";
import { crashFields, isJobBookkeepingLoss } from "./db/errors.js";
import { migrateDatabase } from "./db/migrate.js";
import { createServicePools } from "./db/pools.js";
import { releaseSchema, windowText } from "./db/schema-window.js";
import { redactUrl } from "./db/url.js";
import { createApp } from "./http/app.js";
import { createHttpServer } from "./http/server.js";
import { receiverConfig } from "./inbound/config.js";
import { RefusedSourceJournal } from "./inbound/edge.js";
import { dataDir, embeddedDir } from "./local/data-dir.js";
import { sandboxHashKey } from "./local/sandbox-hash-key.js";
import { sandboxFirstIds } from "./local/sandbox-ids.js";
import { type SandboxTokens, withSandboxTokens } from "./local/sandbox-tokens.js";
import { connectHost, removeOwnServiceFile, runningService, writeServiceFile } from "./local/service-file.js";
import { createLogger, type Logger } from "./observability/logger.js";
import { startTracing, type Tracing } from "./observability/tracing-sdk.js";
import { buildRuntime, registerRuntime } from "./runtime.js";
import { startCrmEndpoint } from "./startup/crm-endpoint.js";
import { checkDatabase, migrationStartupError } from "./startup/database.js";
import { classifyStartupError, EXIT, LINE_PREFIX, type StartupError } from "./startup/errors.js";
import { assertPortFree, listen, type PortHolder } from "./startup/listen.js";
import { prepareSandboxDatabase, refuseSandboxDatabase } from "./startup/sandbox-database.js";
import { checkSchemaWindow } from "./startup/schema-window.js";
import { holdStopSignals } from "./startup/stop-signals.js";
import { SERVICE_REVISION, SERVICE_VERSION } from "./version.js";
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

/** One step of the shutdown, named for its log lines. */
type Stop = (() => Promise<void>) & { step?: string };
const named = (step: string, fn: () => Promise<void>): Stop => Object.assign(fn, { step });
/** However late the shutdown is, each later step still gets this long (the pools, the embedded server). */
const MIN_STOP_STEP_MS = 1_500;

/**
 * The whole shutdown's bound; past it the process exits 1. A drain (docs/reliability.md) takes at
 * most the HTTP timeout of a request already out plus its settling; 15 s covers the settling, the
 * runner's and the pools' stop and the last spans. Never below 30 s.
 */
function shutdownBoundMs(config: Config): number {
  return Math.max(30_000, (config.env.BITRIX_SYNC_HTTP_TIMEOUT_SEC + 15) * 1000);
}
/** At most this long for the last spans to reach the collector. */
const TRACING_FLUSH_MS = 5_000;

/** The startup error's lines on stderr, where a person looks first; never a secret. */
function report(e: StartupError): void {
  for (const line of e.lines) console.error(`${LINE_PREFIX} ${line}`);
}

/**
 * Runs the shutdown steps in order. A step that runs past `drainDeadline` (the database unreachable
 * while the runner gives its leases back, say) is no longer waited for: what it left (a lease, an
 * in-flight slot) expires by itself, as after a crash. Slow and abandoned steps are logged by name.
 */
async function runStops(stops: Stop[], log: Logger, drainDeadline = Number.POSITIVE_INFINITY): Promise<void> {
  for (const stop of stops) {
    const started = Date.now();
    const budgetMs = Math.max(MIN_STOP_STEP_MS, drainDeadline - started);
    let timer: NodeJS.Timeout | undefined;
    try {
      const done = stop().then(() => "done" as const);
      // An abandoned step that fails later must not count as an unhandled rejection (a crash).
      done.catch(() => undefined);
      const outcome = await Promise.race([
        done,
        new Promise<"late">((resolve) => {
          timer = setTimeout(() => resolve("late"), Math.min(budgetMs, 2 ** 31 - 1));
          timer.unref();
        }),
      ]);
      const tookMs = Date.now() - started;
      if (outcome === "late") {
        log.warn(
          { event: "shutdown.step_abandoned", step: stop.step, tookMs },
          "a shutdown step ran out of time",
        );
      } else if (tookMs >= 1_000) {
        log.info({ event: "shutdown.step_slow", step: stop.step, tookMs }, "a shutdown step took long");
      }
    } catch (e) {
      log.warn(
        { event: "shutdown.step_failed", step: stop.step, errorName: (e as Error).name },
        "a shutdown step failed",
      );
    } finally {
      clearTimeout(timer);
    }
  }
}

interface StartInput {
  config: Config;
  generated: SandboxTokens;
  log: Logger;
  /** Filled as pieces start: the first entry is stopped first. */
  stops: Stop[];
  /** Aborted on SIGTERM: the sync loop stops claiming and lets in-flight work finish. */
  stopping: AbortController;
}

/** Starts every piece in order; throws (classified by the caller) when one cannot start. */
async function start({ config, generated, log, stops, stopping }: StartInput): Promise<void> {
  const { HOST: host, PORT: port } = config.env;
  const local = dataDir(config.env);
  const holder = (): PortHolder | null => {
    const s = runningService(local);
    return s && s.pid !== process.pid && s.http.port === port ? { pid: s.pid } : null;
  };
  // Before the database: a second `npm start` must fail here, not after migrating and claiming work.
  await assertPortFree(host, port, holder);

  const databaseUrl = await selectDatabase(config, log, stops);
  await prepareSchema(config, databaseUrl, log);

  // One pool per use, each with its own deadlines (src/db/pools.ts).
  const pools = createServicePools(databaseUrl, { workMax: config.env.BITRIX_SYNC_DB_POOL_SIZE });
  const pool = pools.work;
  pool.on("error", (err) =>
    log.warn({ event: "db.pool.error", code: (err as { code?: string }).code }, "idle client error"),
  );
  stops.unshift(named("db_pools", () => pools.end()));

  if (config.sandbox) {
    log.warn(
      { event: "sandbox.mode" },
      "SANDBOX MODE: no BITRIX_SYNC_CRM_REST_WEBHOOK_URL configured; CRM calls go to the built-in Bitrix24 emulator on loopback, never to a real portal",
    );
  }
  if (config.sandbox && config.processing) await performSandboxCutover(pool, log);
  const crmEndpoint = await startCrmEndpoint({
    config,
    log,
    firstIds: config.sandbox ? await sandboxFirstIds(pool) : undefined,
  });
  stops.push(named("crm_endpoint", () => crmEndpoint.close()));

  if (config.sandbox && config.secrets.BITRIX_SYNC_HASH_KEY === undefined)
    useSandboxHashKey(config, local, log);
  const runtime = await buildRuntime({
    config,
    log,
    pool,
    databaseUrl,
    crmEndpoint,
    stopping: stopping.signal,
  });
  registerRuntime(runtime);
  stops.unshift(named("runtime", () => runtime.close()));

  const app = serviceApp(config, pools, runtime, log, stops);
  // Bound before the runner starts, so a port taken since the check above claims no work.
  const server = createHttpServer(app, { hostname: host });
  const boundPort = await listen(server, host, port, holder);

  await startProcessing(config, pool, log, stops, stopping);
  // On SIGTERM the listener closes first, then claiming stops (docs/operations.md).
  stops.unshift(
    named(
      "http",
      () =>
        new Promise<void>((resolve) => {
          server.close(() => resolve());
        }),
    ),
  );

  if (config.sandbox) {
    writeSandboxServiceFile(local, log, stops, {
      pid: process.pid,
      startedAt: new Date().toISOString(),
      http: { host: connectHost(host), port: boundPort },
      sandbox: { crmWebhookUrl: crmEndpoint.webhookUrl, ...generated },
    });
  }
  log.info({ event: "http.listening", port: boundPort }, "HTTP listener ready");
}

/** The HTTP app: the receivers, health, status and metrics. */
function serviceApp(
  config: Config,
  pools: ReturnType<typeof createServicePools>,
  runtime: Awaited<ReturnType<typeof buildRuntime>>,
  log: Logger,
  stops: Stop[],
): ReturnType<typeof createApp> {
  // The proxy's source_ip refusals, gathered and journaled on the status pool (not the robots').
  const refusedSources = new RefusedSourceJournal(pools.status, log);
  stops.unshift(named("refused_sources", () => refusedSources.close()));
  return createApp({
    pool: pools.status,
    receiverPool: pools.receiver,
    log,
    receiver: receiverConfig(config),
    refusedSources,
    status: {
      config,
      health: runtime.health,
      limiter: runtime.crm.limiter,
      settings: runtime.settings,
    },
  });
}

/**
 * The database: the configured one (checked; a sandbox's own only in sandbox mode), or with none
 * configured the embedded PostgreSQL in the local data folder, started now.
 */
async function selectDatabase(config: Config, log: Logger, stops: Stop[]): Promise<string> {
  let databaseUrl = config.secrets.BITRIX_SYNC_DATABASE_URL;
  if (databaseUrl === undefined) {
    const dir = embeddedDir(config.env);
    log.info(
      { event: "db.embedded.starting" },
      "no BITRIX_SYNC_DATABASE_URL: starting embedded PostgreSQL in the local data folder",
    );
    const srv = await startEmbedded({ dir, persistent: true });
    databaseUrl = srv.url;
    stops.unshift(named("embedded_db", () => srv.stop()));
  } else if (config.sandbox) {
    // BITRIX_SYNC_SANDBOX=true: only on a database the sandbox created (it creates it when absent).
    const { created } = await prepareSandboxDatabase(databaseUrl);
    if (created)
      log.warn({ event: "sandbox.database_created" }, "SANDBOX MODE: created the sandbox database");
  } else {
    await checkDatabase(databaseUrl);
    await refuseSandboxDatabase(databaseUrl);
  }
  log.info({ event: "db.target", database: redactUrl(databaseUrl) }, "database selected");
  return databaseUrl;
}

/** Migrates when asked to; a schema outside this release's window stops the start (exit 76). */
async function prepareSchema(config: Config, databaseUrl: string, log: Logger): Promise<void> {
  if (config.env.BITRIX_SYNC_MIGRATE_ON_START) {
    try {
      await migrateDatabase(databaseUrl, log);
    } catch (e) {
      throw migrationStartupError(databaseUrl, e) ?? e;
    }
  }
  const schema = await checkSchemaWindow(databaseUrl);
  log.info(
    {
      event: "db.schema",
      schema: schema.database,
      releaseSchema: releaseSchema().number,
      contractFloor: schema.floor,
    },
    `schema ${schema.database} is inside this release's window: ${windowText()}`,
  );
}

/** Sandbox mode without BITRIX_SYNC_HASH_KEY: the sandbox key kept in the local data folder. */
function useSandboxHashKey(config: Config, local: string, log: Logger): void {
  const k = sandboxHashKey(local);
  config.secrets.BITRIX_SYNC_HASH_KEY = k.key;
  log.warn(
    { event: "sandbox.hash_key", created: k.created, kept: k.kept },
    k.kept
      ? `SANDBOX MODE: no BITRIX_SYNC_HASH_KEY configured; hashes of personal data use the sandbox key ${k.created ? "generated now and kept" : "kept"} in the local data folder`
      : "SANDBOX MODE: no BITRIX_SYNC_HASH_KEY configured and the local data folder cannot keep one; hashes of personal data use a key generated for this run only",
  );
}

/** The worker runner and the sync loop, now; or, with processing off, a warning and nothing claimed. */
async function startProcessing(
  config: Config,
  pool: pg.Pool,
  log: Logger,
  stops: Stop[],
  stopping: AbortController,
): Promise<void> {
  if (!config.processing) {
    log.warn(
      { event: "sync.paused" },
      "BITRIX_SYNC_ENABLED=false: workers claim nothing; pending rows are kept (read at start: a change needs a restart)",
    );
    return;
  }
  const runner = await startRunner({ pool, log });
  stops.unshift(
    named("runner", async () => {
      stopping.abort();
      await runner.stop();
    }),
  );
  // Start the sync loop now rather than at the next cron minute.
  await runner.addJob("sync_loop", {}, { jobKey: "sync_loop", jobKeyMode: "replace" });
}

/**
 * Where `npm run demo` and `npm run stop` find this service (src/local/service-file.ts). A local
 * convenience: the service runs on without it.
 */
function writeSandboxServiceFile(
  local: string,
  log: Logger,
  stops: Stop[],
  file: Parameters<typeof writeServiceFile>[1],
): void {
  try {
    writeServiceFile(local, file);
    stops.unshift(named("service_file", async () => removeOwnServiceFile(local)));
  } catch (e) {
    log.warn(
      { event: "sandbox.service_file_failed", code: (e as NodeJS.ErrnoException).code },
      "could not write the service file in the local data folder; npm run demo and npm run stop will not find this service",
    );
  }
}

/** The trace exporter; null when it cannot start (tracing is an aid: the service runs without it). */
async function startTracingOrNot(config: Config, log: Logger): Promise<Tracing | null> {
  try {
    return await startTracing({
      endpoint: config.env.OTEL_EXPORTER_OTLP_ENDPOINT,
      serviceVersion: SERVICE_VERSION,
      serviceRevision: SERVICE_REVISION,
      environment: config.env.SERVICE_ENVIRONMENT,
      log,
    });
  } catch (e) {
    log.error(
      { event: "tracing.start_failed", errorName: e instanceof Error ? e.name : typeof e },
      "could not start the trace exporter; running without tracing",
    );
    return null;
  }
}

/** Logs and prints why the start failed; returns the known cause (its exit code), or null for a crash. */
function reportStartupFailure(e: unknown, log: Logger): StartupError | null {
  const known = classifyStartupError(e);
  if (known) {
    log.fatal({ event: "startup.failed", cause: known.reason, exitCode: known.exitCode }, known.message);
    report(known);
    return known;
  }
  // The name and a code only: a message or a stack can quote secrets or values.
  const errorName = e instanceof Error ? e.name : typeof e;
  const code = (e as { code?: unknown }).code;
  log.fatal(
    { event: "startup.crash", errorName, code: typeof code === "string" ? code : undefined },
    "unexpected error during startup; stopping",
  );
  console.error(
    `${LINE_PREFIX} unexpected ${errorName}${typeof code === "string" ? ` (${code})` : ""} during startup; this is a bug or a case nobody has explained yet: please report it with the log above.`,
  );
  return null;
}

async function main(): Promise<void> {
  let loaded: Config;
  try {
    loaded = loadConfig();
  } catch (e) {
    const known = classifyStartupError(e);
    if (!known) throw e;
    report(known);
    process.exit(known.exitCode);
  }
  const log = createLogger({ level: loaded.env.LOG_LEVEL, environment: loaded.env.SERVICE_ENVIRONMENT });
  const { config, generated } = withSandboxTokens(loaded);
  const stops: Stop[] = [];
  const signals = holdStopSignals((signal) =>
    log.info({ event: "shutdown.deferred", signal }, "asked to stop while starting; stopping once started"),
  );
  // Before anything else starts, so every span is exported; last to stop, so the final ones are too.
  const tracing = await startTracingOrNot(config, log);
  try {
    await start({ config, generated, log, stops, stopping: new AbortController() });
  } catch (e) {
    const known = reportStartupFailure(e, log);
    await runStops(stops, log);
    await tracing?.shutdown(TRACING_FLUSH_MS);
    process.exit(known?.exitCode ?? EXIT.unexpected);
  }

  let shuttingDown = false;
  const shutdown = async (signal: string, exitCode = 0) => {
    if (shuttingDown) return;
    shuttingDown = true;
    log.info({ event: "shutdown.begin", signal }, "stopping");
    const boundMs = shutdownBoundMs(config);
    const deadline = Date.now() + boundMs;
    const timer = setTimeout(() => {
      log.error({ event: "shutdown.timeout" }, "shutdown took too long; exiting");
      process.exit(1);
    }, boundMs);
    timer.unref();
    // The drain (the listener, the runner's in-flight batches, at most one HTTP timeout) gets until
    // HTTP timeout + 9 s; each step after that at least MIN_STOP_STEP_MS: HTTP timeout + 15 s in all.
    await runStops(stops, log, Date.now() + (config.env.BITRIX_SYNC_HTTP_TIMEOUT_SEC + 9) * 1000);
    // The last spans (this shutdown's included) within what is left of the bound.
    await tracing?.shutdown(Math.min(TRACING_FLUSH_MS, deadline - Date.now() - 1_000));
    log.info({ event: "shutdown.done" }, "stopped");
    process.exit(exitCode);
  };
  signals.started((signal) => void shutdown(signal));
  stopOnCrash(log, shutdown);
}

/** A bug must not leave the embedded server or leases behind: stop cleanly, then exit non-zero. */
function stopOnCrash(log: Logger, shutdown: (signal: string, exitCode?: number) => Promise<void>): void {
  const crash = (kind: string) => (e: unknown) => {
    log.fatal({ event: "process.crash", kind, ...crashFields(e) }, "unexpected error; stopping");
    void shutdown(kind, 1);
  };
  process.on("uncaughtException", crash("uncaughtException"));
  process.on("unhandledRejection", (e) => {
    // graphile-worker's unawaited job bookkeeping, failed by a database restart or a database
    // that refuses writes (a fenced primary during a failover): not a crash.
    if (isJobBookkeepingLoss(e)) {
      log.error(
        { event: "worker.job_bookkeeping_lost", ...crashFields(e) },
        "graphile-worker could not record a finished job (the database connection failed or the server refused writes); the job stays locked until its lock expires, the crontab starts the next run",
      );
      return;
    }
    crash("unhandledRejection")(e);
  });
}

await main();
