// What bench:engine, bench:storm and bench:outage share: an embedded PostgreSQL of their own (with
// pg_stat_statements preloaded, so the database time of every statement can be read and the
// shared server is never touched), the end-to-end rig of the tests on it (emulator, runtime,
// graphile-worker and the sync loop), new App users in one statement, and the readings.
import { randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { availableParallelism, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { startEmbedded } from "../src/db/embedded.js";
import { type Rig, startRig } from "../test/helpers/e2e.js";
import { randomPhone } from "../test/helpers/factories.js";
import type { EmulatorOptions } from "../tools/emulator/server.js";

export interface BenchRig extends Rig {
  /** True when pg_stat_statements answers on this server. */
  statements: boolean;
  stopAll(): Promise<void>;
}

let server: Promise<{ stop: () => Promise<void> }> | undefined;

/**
 * The benches' server, started once per process (the test helpers keep their migrated template per
 * server): an embedded one in a temporary folder with pg_stat_statements preloaded, or
 * BENCH_DATABASE_URL's (then the readings fall back to pg_stat_database when pg_stat_statements is
 * not loaded there).
 */
export function benchServer(): Promise<{ stop: () => Promise<void> }> {
  server ??= (async () => {
    if (process.env.BENCH_DATABASE_URL) {
      process.env.TEST_DATABASE_URL = process.env.BENCH_DATABASE_URL;
      return { stop: async () => undefined };
    }
    const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-bench-"));
    const srv = await startEmbedded({
      dir,
      persistent: false,
      settings: {
        shared_preload_libraries: "pg_stat_statements",
        // BENCH_NESTED=1 also records the statements run inside functions and triggers (printed
        // apart by printNested); the per-command figures still count top-level statements only.
        "pg_stat_statements.track": process.env.BENCH_NESTED === "1" ? "all" : "top",
        // Per-function time (pg_stat_user_functions): which function or trigger the time goes to.
        track_functions: "all",
      },
    });
    process.env.TEST_DATABASE_URL = srv.url;
    return {
      async stop() {
        await srv.stop();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  })();
  return server;
}

/** Stops the benches' server (call once, at the end). */
export async function stopBenchServer(): Promise<void> {
  if (server) await (await server).stop();
  server = undefined;
}

/** The end-to-end rig on a database of its own on the benches' server. */
export async function startBenchRig(opts: {
  emulator?: Partial<EmulatorOptions>;
  settings?: Record<string, unknown>;
}): Promise<BenchRig> {
  await benchServer();
  const rig = await startRig(opts);
  // A variant to measure (the "before" of a change, or a trigger dropped to bound its cost): SQL
  // applied as the owner after the migrations.
  if (process.env.BENCH_SETUP_SQL) {
    await rig.db.pool.query(readFileSync(process.env.BENCH_SETUP_SQL, "utf8"));
    console.log(`  variant: ${process.env.BENCH_SETUP_SQL} applied`);
  }
  let statements = false;
  try {
    await rig.db.pool.query("create extension if not exists pg_stat_statements");
    await rig.db.pool.query("select pg_stat_statements_reset()");
    statements = true;
  } catch {
    statements = false;
  }
  return Object.assign(rig, {
    statements,
    async stopAll() {
      await rig.close();
    },
  });
}

/** New App users (identity and profile) in one statement, as the App signs them up; their ids. */
export async function insertUsers(rig: Rig, n: number): Promise<string[]> {
  const ids = Array.from({ length: n }, () => randomUUID());
  const phones = ids.map(() => randomPhone());
  // A connection of its own, closed at once: a backend that exits reports its function statistics
  // (the App's trigger) then, not later into the engine's measurement.
  const app = new pg.Client({ connectionString: rig.db.url });
  await app.connect();
  try {
    await app.query(
      `with u as (insert into han_app.user_identity (id, phone_number) select * from unnest($1::uuid[], $2::text[]) returning id)
     insert into han_app.client_profile (user_id) select id from u`,
      [ids, phones],
    );
  } finally {
    await app.end();
  }
  await new Promise((r) => setTimeout(r, 200));
  return ids;
}

/** Waits until `n` workflows have succeeded; throws after `timeoutMs`. */
export async function waitSucceeded(rig: Rig, n: number, timeoutMs: number, pollMs = 50): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const { rows } = await rig.db.pool.query<{ n: number }>(
      "select /* bench */ count(*)::int as n from bitrix_sync.workflow_instances where state = 'succeeded'",
    );
    if ((rows[0]?.n ?? 0) >= n) return;
    if (Date.now() > end) throw new Error(`only ${rows[0]?.n} of ${n} workflows succeeded`);
    await new Promise((r) => setTimeout(r, pollMs));
  }
}

export async function countCommands(rig: Rig): Promise<number> {
  const { rows } = await rig.db.pool.query<{ n: number }>(
    "select /* bench */ count(*)::int as n from bitrix_sync.crm_commands",
  );
  return rows[0]?.n ?? 0;
}

export interface DbReading {
  /** Milliseconds of statement execution in the bench's database since the last reset. */
  totalMs: number;
  /** Top-level statements executed (pg_stat_statements only). */
  calls?: number;
  source: "pg_stat_statements" | "pg_stat_database.active_time";
  top: Array<{ query: string; calls: number; totalMs: number; meanMs: number; rows: number }>;
}

/** Zeroes the statement statistics (pg_stat_statements) or notes where active_time stands. */
export async function resetDbReading(rig: BenchRig): Promise<number> {
  if (rig.statements) {
    await rig.db.pool.query("select pg_stat_statements_reset()");
    await rig.db.pool.query("select pg_stat_reset()");
    return 0;
  }
  const { rows } = await rig.db.pool.query<{ t: number }>(
    "select active_time::float8 as t from pg_stat_database where datname = current_database()",
  );
  return rows[0]?.t ?? 0;
}

/** Database time since `resetDbReading` (whose return value is `base`), and the top statements. */
export async function readDb(
  rig: BenchRig,
  base: number,
  topN = Number(process.env.BENCH_TOP ?? 12),
): Promise<DbReading> {
  if (!rig.statements) {
    // active_time is flushed when a backend's transaction ends; a moment lets the last ones report.
    await new Promise((r) => setTimeout(r, 600));
    const { rows } = await rig.db.pool.query<{ t: number }>(
      "select active_time::float8 as t from pg_stat_database where datname = current_database()",
    );
    return { totalMs: (rows[0]?.t ?? 0) - base, source: "pg_stat_database.active_time", top: [] };
  }
  const { rows } = await rig.db.pool.query<{
    query: string;
    calls: string;
    total: number;
    rows: string;
  }>(
    `select s.query, s.calls, s.total_exec_time as total, s.rows
       from pg_stat_statements s
      where s.dbid = (select oid from pg_database where datname = current_database())
        and s.query not like '%pg_stat_statements%' and s.query not like '%/* bench */%'
        and s.toplevel
      order by s.total_exec_time desc`,
  );
  const totalMs = rows.reduce((s, r) => s + r.total, 0);
  return {
    totalMs,
    calls: rows.reduce((s, r) => s + Number(r.calls), 0),
    source: "pg_stat_statements",
    top: rows.slice(0, topN).map((r) => ({
      query: r.query.replace(/\s+/g, " ").trim(),
      calls: Number(r.calls),
      totalMs: r.total,
      meanMs: r.total / Math.max(1, Number(r.calls)),
      rows: Number(r.rows),
    })),
  };
}

/** Functions and triggers by their own time (pg_stat_user_functions), when track_functions is on. */
export async function printTopFunctions(rig: BenchRig, topN = 10): Promise<void> {
  const { rows } = await rig.db.pool.query<{ name: string; calls: string; self: number; total: number }>(
    `select /* bench */ f.schemaname || '.' || f.funcname as name, f.calls, f.self_time as self, f.total_time as total
       from pg_stat_user_functions f order by f.self_time desc limit $1`,
    [topN],
  );
  if (rows.length === 0) return;
  console.log("  top functions by their own time (pg_stat_user_functions):");
  console.log("       self ms   total ms     calls  self µs/call  function");
  for (const r of rows) {
    console.log(
      `  ${r.self.toFixed(0).padStart(10)} ${r.total.toFixed(0).padStart(10)} ${String(r.calls).padStart(9)} ${((r.self * 1000) / Math.max(1, Number(r.calls))).toFixed(1).padStart(13)}  ${r.name}`,
    );
  }
}

/**
 * With BENCH_NESTED=1: the statements run inside functions and triggers, by their time (a nested
 * statement's time is also in its caller's), each with its calls per command.
 */
export async function printNested(rig: BenchRig, commands: number, topN = 25, width = 110): Promise<void> {
  if (!rig.statements || process.env.BENCH_NESTED !== "1") return;
  const { rows } = await rig.db.pool.query<{ query: string; calls: string; total: number }>(
    `select /* bench */ s.query, s.calls, s.total_exec_time as total
       from pg_stat_statements s
      where s.dbid = (select oid from pg_database where datname = current_database()) and not s.toplevel
      order by s.total_exec_time desc limit $1`,
    [topN],
  );
  console.log("  nested statements by database time (pg_stat_statements, track = all):");
  console.log("      total ms  per cmd   mean µs  statement");
  for (const r of rows) {
    const q = r.query.replace(/\s+/g, " ").trim();
    const calls = Number(r.calls);
    console.log(
      `  ${r.total.toFixed(0).padStart(10)} ${(calls / Math.max(1, commands)).toFixed(2).padStart(8)} ${((r.total * 1000) / Math.max(1, calls)).toFixed(1).padStart(9)}  ${q.length > width ? `${q.slice(0, width - 1)}…` : q}`,
    );
  }
}

export function printTop(reading: DbReading, width = 110): void {
  if (reading.top.length === 0) return;
  console.log("  top statements by database time (pg_stat_statements):");
  console.log("      total ms     calls   mean ms      rows  statement");
  for (const t of reading.top) {
    const q = t.query.length > width ? `${t.query.slice(0, width - 1)}…` : t.query;
    console.log(
      `  ${t.totalMs.toFixed(0).padStart(10)} ${String(t.calls).padStart(9)} ${t.meanMs.toFixed(3).padStart(9)} ${String(t.rows).padStart(9)}  ${q}`,
    );
  }
}

export function load(): string {
  return loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");
}

/** A line about the machine, printed with every figure: other work on it moves the numbers. */
export function machineLine(): string {
  return `load average ${load()} (1/5/15 min), ${availableParallelism()} cores`;
}

/**
 * CPU time (ms) the PostgreSQL server's processes have used so far: the postmaster's children alive
 * now, and what exited children left in the postmaster's totals. Read from /proc, so only for a
 * server on this machine (the embedded one); null otherwise. Unlike statement time, it does not grow
 * when a backend waits for the CPU, and it counts parsing, commits and the protocol too.
 */
export async function pgServerCpuMs(rig: BenchRig): Promise<number | null> {
  try {
    const { rows } = await rig.db.pool.query<{ dir: string }>(
      "select setting as dir from pg_settings where name = 'data_directory' /* bench */",
    );
    const { readFileSync, readdirSync } = await import("node:fs");
    const postmaster = Number(readFileSync(`${rows[0]?.dir}/postmaster.pid`, "utf8").split("\n")[0]);
    const ticks = 100; // USER_HZ on Linux
    const stat = (pid: number | string) => {
      const text = readFileSync(`/proc/${pid}/stat`, "utf8");
      return text.slice(text.lastIndexOf(")") + 2).split(" "); // fields from the 3rd on
    };
    const own = stat(postmaster);
    // utime, stime, cutime, cstime are fields 14-17 (indices 11-14 after the name).
    let total = Number(own[11]) + Number(own[12]) + Number(own[13]) + Number(own[14]);
    for (const pid of readdirSync("/proc")) {
      if (!/^\d+$/.test(pid)) continue;
      try {
        const f = stat(pid);
        if (Number(f[1]) === postmaster) total += Number(f[11]) + Number(f[12]);
      } catch {
        // the process ended meanwhile
      }
    }
    return (total * 1000) / ticks;
  } catch {
    return null;
  }
}

/**
 * An installation's history before the measurement (BENCH_HISTORY users, default none): users already
 * linked, each with a succeeded workflow, its two succeeded commands and an active mapping, written in
 * their final states as superuser with the triggers off (no intents, no guards), then ANALYZE. On an
 * empty database the planner's statistics say the engine's tables are empty while the run fills them,
 * and it may pick any index for a lookup it estimates at one row (the active-mapping read scanned
 * every active row through the other partial index); with history it plans as a running installation
 * does once autovacuum has analysed its tables.
 */
export async function seedHistory(rig: Rig, users: number): Promise<void> {
  if (users <= 0) return;
  const c = new pg.Client({ connectionString: rig.db.url });
  await c.connect();
  try {
    await c.query("begin");
    await c.query("set local session_replication_role = replica");
    await c.query(
      `create temp table h on commit drop as
         select gen_random_uuid() as user_id, gen_random_uuid() as wf_id, g as n from generate_series(1, $1::int) g`,
      [users],
    );
    await c.query(
      `insert into han_app.user_identity (id, phone_number)
         select user_id, '+7990' || lpad(n::text, 7, '0') from h`,
    );
    await c.query("insert into han_app.client_profile (user_id) select user_id from h");
    await c.query(
      `insert into bitrix_sync.workflow_instances
         (id, workflow_type, intent_type, user_id, state, current_step, revision, processed_revision, finished_at,
          outcome, created_at, updated_at)
       select wf_id, 'contact.map_or_create', 'contact.map_or_create', user_id, 'succeeded', 'created', 1, 1,
              now() - interval '1 day', 'created', now() - interval '1 day', now() - interval '1 day' from h`,
    );
    await c.query(
      `insert into bitrix_sync.crm_commands
         (workflow_id, command_type, params, status, attempt_count, sent_at, first_sent_at, completed_at, response,
          created_at, updated_at)
       select wf_id, t, '{}', 'succeeded', 1, now() - interval '1 day', now() - interval '1 day',
              now() - interval '1 day', '{}', now() - interval '1 day', now() - interval '1 day'
         from h cross join (values ('contact.find_by_phone'), ('contact.add')) v(t)`,
    );
    await c.query(
      `insert into bitrix_sync.entity_external_mapping (entity_id, external_id, workflow_id, opened_at)
         select user_id, (1000000 + n)::text, wf_id, now() - interval '1 day' from h`,
    );
    await c.query("commit");
    await c.query(
      "analyze han_app.user_identity, han_app.client_profile, han_app.sync_queue, bitrix_sync.workflow_instances, bitrix_sync.crm_commands, bitrix_sync.entity_external_mapping",
    );
  } catch (e) {
    await c.query("rollback").catch(() => undefined);
    throw e;
  } finally {
    await c.end();
  }
}

/** What one backlog run measured. */
export interface BacklogResult {
  seconds: number;
  commands: number;
  /** Statement time in the database (pg_stat_statements, or active_time). */
  cpuMs: number;
  /** CPU of the PostgreSQL server's processes over the run (/proc), or null. */
  serverCpuMs: number | null;
  /** CPU of this process (the service) over the run. */
  serviceCpuMs: number;
  reading: DbReading;
}

/**
 * A backlog of `users` new App users (after `history` already linked ones), then the worker started
 * and timed until every workflow succeeded; prints the figures and the top statements and functions.
 */
export async function backlogRun(
  rig: BenchRig,
  opts: { users: number; history?: number },
): Promise<BacklogResult> {
  const USERS = opts.users;
  const HISTORY = opts.history ?? 0;
  if (HISTORY > 0) {
    await seedHistory(rig, HISTORY);
    console.log(
      `  history: ${HISTORY} users already linked (succeeded workflows, commands, mappings), analysed`,
    );
  }
  await insertUsers(rig, USERS);
  const commandsBefore = await countCommands(rig);
  const base = await resetDbReading(rig);
  const pgCpu = await pgServerCpuMs(rig);
  const cpu = process.cpuUsage();
  const started = Date.now();
  await rig.startWorker();
  await waitSucceeded(rig, HISTORY + USERS, 30 * 60_000, 25);
  const seconds = (Date.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  const pgCpuAfter = await pgServerCpuMs(rig);
  const commands = (await countCommands(rig)) - commandsBefore;
  const reading = await readDb(rig, base);
  console.log(
    `  ${USERS} users settled in ${seconds.toFixed(2)} s: ${commands} CRM commands, ${(commands / seconds).toFixed(0)} commands/s`,
  );
  console.log(
    `  database time ${(reading.totalMs / 1000).toFixed(2)} s (${reading.source}): ${(reading.totalMs / commands).toFixed(3)} ms per command; ` +
      `service process CPU ${((used.user + used.system) / 1000 / commands).toFixed(3)} ms per command`,
  );
  if (pgCpu !== null && pgCpuAfter !== null) {
    console.log(
      `  PostgreSQL server CPU ${((pgCpuAfter - pgCpu) / 1000).toFixed(2)} s (/proc): ${((pgCpuAfter - pgCpu) / commands).toFixed(3)} ms per command; ` +
        `${reading.calls === undefined ? "?" : (reading.calls / commands).toFixed(1)} statements per command`,
    );
  }
  printTop(reading, Number(process.env.BENCH_TOP_WIDTH ?? 110));
  await printTopFunctions(rig);
  await printNested(rig, commands);
  return {
    seconds,
    commands,
    cpuMs: reading.totalMs,
    serverCpuMs: pgCpu !== null && pgCpuAfter !== null ? pgCpuAfter - pgCpu : null,
    serviceCpuMs: (used.user + used.system) / 1000,
    reading,
  };
}

/**
 * The engine at its own limit: an emulator without a rate limit (5 ms latency), the limiter at its
 * maxima (50 requests/s, burst 250, 50 in flight), batch.size 50.
 */
export function startUnlimitedRig(): Promise<BenchRig> {
  return startBenchRig({
    emulator: {
      latencyMs: 5,
      rate: { drainPerSec: 1e9, threshold: 1e9 },
      operating: { limitSec: 1e9 },
    },
    settings: {
      "batch.size": 50,
      "batch.max_wait_ms": 50,
      "limiter.refill_per_sec": 50,
      "limiter.burst": 250,
      "limiter.max_in_flight": 50,
      "claim.size": 50,
      "lease.ttl_sec": 60,
      "worker.poll_interval_ms": 1000,
    },
  });
}
