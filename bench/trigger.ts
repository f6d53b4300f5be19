// `npm run bench:trigger`: what the project's triggers cost the App's own writes, beside what the
// alternatives cost in the same run. Four variants of the App's database, measured round by round:
//   none     no trigger at all on the App's tables;
//   project  the project's triggers (han_app.enqueue_contact_sync appending to the intent journal),
//            with the fold running as the service runs it;
//   peer     what a graphile-worker user would write instead: a trigger on a phone change calling
//            graphile_worker.add_job('contact.update', ..., job_key => 'contact.update:<user>');
//   limit    the cheapest durable intent there is: a trigger appending one row to a table with no
//            index, constraint or trigger, never folded.
// Goals: project >= 0.95 x limit, and ahead of peer. Also printed: project / none and limit / none.
//
// A freshly migrated database of its own (created and dropped here) on TEST_DATABASE_URL's server or,
// without it, on an embedded PostgreSQL in a temporary folder. It holds BENCH_USERS App users with
// their profiles and a history of finished intents (as retention leaves it), then real pgbench runs
// the App's mix: each transaction edits a profile field (foreign_phone, updated_at) and changes the
// user's phone. Rounds alternate "with triggers" and "without" (the project's triggers on
// han_app.user_identity and han_app.client_profile disabled), in alternating order, each starting
// from the same queue (the intents of the previous round removed and the tables vacuumed). The ratio
// is the median of the rounds' ratios. The triggers append intents to han_app.sync_queue_journal; during
// every run with triggers a folder does what the service's claims do, bitrix_sync.fold_intent_journal()
// every BENCH_FOLD_MS, on the same server, so the ratio includes the fold's cost, and the bench prints
// what the fold cost per intent. After every run with triggers, every user whose phone changed must
// have its pending contact.update intent in han_app.sync_queue: the bench fails otherwise.
//
// The App's own concurrency: BENCH_CLIENTS concurrent writers, 8 by default. The App writes from
// several request handlers at once (its API's connection pool, every connection a writer), and a
// trigger's cost shows in the App's throughput only when the writers keep the server's CPUs busy:
// 8 writers are four per core on the two-core machine the figures come from, enough to saturate it
// and to bring out what only concurrent writers meet (the journal's relation extension lock, the
// commits' WAL flushes shared by a group, the NOTIFY queue's lock). One writer would measure the
// trigger's latency, not what it takes from the App. The ratios are taken within one round, so the
// cheapest trigger (limit) and graphile-worker's (peer) are measured in the same run, at the same
// concurrency, beside the project's.
//
// Knobs: BENCH_USERS (default 20000), BENCH_HISTORY (finished intents, default 50000),
// BENCH_CLIENTS (pgbench clients, default 8), BENCH_SECONDS (per run, default 10), BENCH_ROUNDS
// (default 7: single rounds spread widely on a shared machine; the variants' order rotates from
// round to round), BENCH_VARIANTS (comma-separated subset, default all four), BENCH_FOLD_MS (pause between folds,
// default 100; 0: no folder during the runs, one fold after), BENCH_SETUP_SQL (a file applied after
// the migrations, to measure a variant),
// PGBENCH (the pgbench binary; else `pgbench` on PATH or /usr/lib/postgresql/*/bin/pgbench).
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { startEmbedded } from "../src/db/embedded.js";
import { migrateDatabase } from "../src/db/migrate.js";
import { withDatabase } from "../src/db/url.js";

const USERS = Number(process.env.BENCH_USERS ?? 20_000);
const HISTORY = Number(process.env.BENCH_HISTORY ?? 50_000);
const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 8);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const FOLD_MS = Number(process.env.BENCH_FOLD_MS ?? 100);
/** project / limit, and project / peer. */
const GOAL_OF_LIMIT = 0.95;
const GOAL_OF_PEER = 1;

type Variant = "none" | "project" | "peer" | "limit";
const ALL_VARIANTS: Variant[] = ["none", "project", "peer", "limit"];
const VARIANTS: Variant[] = (process.env.BENCH_VARIANTS ?? ALL_VARIANTS.join(","))
  .split(",")
  .map((v) => v.trim())
  .filter((v): v is Variant => (ALL_VARIANTS as string[]).includes(v));

/**
 * The peer's and the limit's triggers, on the same event as the project's phone trigger (a phone
 * change of an active identity); both created disabled, enabled only for their own runs.
 */
const ALTERNATIVES_SQL = `
create table bench_limit_journal (user_id uuid not null, recorded_at timestamptz not null default clock_timestamp());
create function bench_peer_enqueue() returns trigger language plpgsql as $f$
begin
  perform graphile_worker.add_job('contact.update', json_build_object('user_id', new.id),
                                   job_key => 'contact.update:' || new.id);
  return null;
end $f$;
create function bench_limit_enqueue() returns trigger language plpgsql as $f$
begin
  insert into bench_limit_journal (user_id) values (new.id);
  return null;
end $f$;
create trigger bench_peer after update of phone_number on han_app.user_identity for each row
  when (old.phone_number is distinct from new.phone_number and new.record_status = 'active')
  execute function bench_peer_enqueue();
create trigger bench_limit after update of phone_number on han_app.user_identity for each row
  when (old.phone_number is distinct from new.phone_number and new.record_status = 'active')
  execute function bench_limit_enqueue();
alter table han_app.user_identity disable trigger bench_peer, disable trigger bench_limit;
`;

function findPgbench(): string | null {
  if (process.env.PGBENCH) return process.env.PGBENCH;
  const onPath = spawnSync("pgbench", ["--version"], { stdio: "ignore" });
  if (onPath.status === 0) return "pgbench";
  const base = "/usr/lib/postgresql";
  if (!existsSync(base)) return null;
  for (const v of readdirSync(base).sort().reverse()) {
    const p = join(base, v, "bin", "pgbench");
    if (existsSync(p)) return p;
  }
  return null;
}

// The App's transaction. User n has id md5(n)::uuid, so the script needs no lookup table.
const SCRIPT = `\\set n random(1, ${USERS})
\\set p random(0, 999999999)
BEGIN;
UPDATE han_app.client_profile SET foreign_phone = '+1555' || :p, updated_at = now() WHERE user_id = md5(:n::text)::uuid;
UPDATE han_app.user_identity SET phone_number = '+79' || lpad(:p::text, 9, '0'), updated_at = now() WHERE id = md5(:n::text)::uuid;
END;
`;

async function seed(c: pg.Client): Promise<void> {
  // The App's users, recorded with the sync suppressed: the bench starts from a settled queue.
  await c.query("begin");
  await c.query("set local han.sync_suppress = 'true'");
  await c.query(
    `insert into han_app.user_identity (id, phone_number, record_status)
     select md5(n::text)::uuid, '+79' || lpad(n::text, 9, '0'), 'active' from generate_series(1, $1) n`,
    [USERS],
  );
  await c.query(
    `insert into han_app.client_profile (user_id, full_name, record_status)
     select md5(n::text)::uuid, 'User ' || n, 'active' from generate_series(1, $1) n`,
    [USERS],
  );
  await c.query("commit");
  // Finished intents as retention leaves them (the queue's normal content). Rows start pending, so
  // the initial-state guard is bypassed for this seed only (superuser, this database only).
  await c.query("begin");
  await c.query("set local session_replication_role = replica");
  await c.query(
    `insert into han_app.sync_queue (task_type, entity_type, entity_id, dedup_key, payload_json, status,
                                     attempt_count, next_attempt_at, completed_at, created_at, updated_at)
     select t, 'user', u, t || ':user:' || u, jsonb_build_object('schema_version', 1, 'user_id', u, 'reason', 'seed'),
            'processed', 1, ts, ts + interval '1 second', ts, ts + interval '1 second'
       from (select md5((1 + i % $2)::text)::uuid as u,
                    (array['contact.map_or_create', 'contact.update', 'contact.deactivate'])[1 + i % 3] as t,
                    now() - interval '1 day' + i * interval '1 second' as ts
               from generate_series(1, $1) i) s`,
    [HISTORY, USERS],
  );
  await c.query("commit");
  // Vacuumed between runs by the bench itself, so autovacuum does not land in one run and not in
  // another.
  for (const t of ["han_app.user_identity", "han_app.client_profile", "han_app.sync_queue"])
    await c.query(`alter table ${t} set (autovacuum_enabled = false)`);
  await c.query("vacuum analyze han_app.user_identity, han_app.client_profile, han_app.sync_queue");
}

/** The project's triggers on the App's tables (every user trigger there but the bench's own). */
async function setTriggers(c: pg.Client, on: boolean): Promise<number> {
  const { rows } = await c.query<{ tbl: string; name: string }>(
    `select t.tgrelid::regclass::text as tbl, t.tgname as name
       from pg_trigger t
      where t.tgrelid in ('han_app.user_identity'::regclass, 'han_app.client_profile'::regclass)
        and not t.tgisinternal and t.tgname not like 'bench\\_%'`,
  );
  for (const r of rows)
    await c.query(`alter table ${r.tbl} ${on ? "enable" : "disable"} trigger ${pg.escapeIdentifier(r.name)}`);
  return rows.length;
}

/** Only the variant's triggers enabled; returns how many triggers that is. */
async function setVariant(c: pg.Client, v: Variant): Promise<number> {
  const project = await setTriggers(c, v === "project");
  await c.query(
    `alter table han_app.user_identity ${v === "peer" ? "enable" : "disable"} trigger bench_peer, ${v === "limit" ? "enable" : "disable"} trigger bench_limit`,
  );
  return v === "project" ? project : v === "none" ? 0 : 1;
}

/** Back to the seeded queue: the previous run's intents removed, its indexes rebuilt, dead rows vacuumed. */
async function reset(c: pg.Client, seededBefore: Date): Promise<void> {
  await c.query("begin");
  await c.query("set local session_replication_role = replica");
  await c.query("delete from han_app.sync_queue where created_at > $1", [seededBefore]);
  await c.query("delete from han_app.sync_queue_journal");
  await c.query("delete from graphile_worker._private_jobs");
  await c.query("commit");
  await c.query("truncate bench_limit_journal");
  await c.query("reindex table graphile_worker._private_jobs");
  // The indexes too: a run's intents split pages of the queue's random-keyed indexes (the key, the
  // dedup key, the user's) that a vacuum empties but does not merge, so without a rebuild every round
  // with triggers started from a larger index than the one before and ran slower than it.
  await c.query("reindex table han_app.sync_queue");
  await c.query(
    "vacuum analyze han_app.user_identity, han_app.client_profile, han_app.sync_queue, han_app.sync_queue_journal, graphile_worker._private_jobs",
  );
  await c.query("checkpoint").catch(() => undefined);
}

function runPgbench(
  bin: string,
  url: string,
  scriptFile: string,
  seconds = SECONDS,
): Promise<{ tps: number; tx: number }> {
  return new Promise((resolve, reject) => {
    const args = ["-n", "-M", "prepared", "-c", String(CLIENTS), "-j", "2", "-T", String(seconds)];
    args.push("-f", scriptFile, url);
    const p = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    p.stdout.on("data", (d) => {
      out += d;
    });
    p.stderr.on("data", (d) => {
      err += d;
    });
    p.on("error", reject);
    p.on("exit", (code) => {
      const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(out);
      const tx = /number of transactions actually processed: (\d+)/.exec(out);
      const failed = /number of failed transactions: (\d+)/.exec(out);
      if (code !== 0 || !tps || !tx || (failed && failed[1] !== "0"))
        reject(new Error(`pgbench failed (exit ${code}): ${err.trim().split("\n").slice(-3).join(" | ")}`));
      else resolve({ tps: Number(tps[1]), tx: Number(tx[1]) });
    });
  });
}

/** The server's WAL counters (server-wide: other databases' writes count too). */
async function walStats(c: pg.Client): Promise<{ bytes: number; fpi: number }> {
  const { rows } = await c.query<{ b: string; f: string }>(
    "select wal_bytes::text as b, wal_fpi::text as f from pg_stat_wal",
  );
  return { bytes: Number(rows[0]?.b), fpi: Number(rows[0]?.f) };
}

/** Folds the journal every FOLD_MS until stopped, as the service's claims do; sums what it cost. */
function startFolder(url: string): { stop: () => Promise<{ folds: number; rows: number; ms: number }> } {
  const f = new pg.Client({ connectionString: url });
  let running = FOLD_MS > 0;
  const totals = { folds: 0, rows: 0, ms: 0 };
  const loop = (async () => {
    if (!running) return;
    await f.connect();
    while (running) {
      const t0 = performance.now();
      const { rows } = await f.query<{ n: number }>("select bitrix_sync.fold_intent_journal() as n");
      totals.ms += performance.now() - t0;
      totals.folds++;
      totals.rows += rows[0]?.n ?? 0;
      await new Promise((r) => setTimeout(r, FOLD_MS));
    }
    await f.end();
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      return totals;
    },
  };
}

/** CPU time (ms) a server backend has used, from /proc; null when the server is not on this machine. */
function backendCpuMs(pid: number): number | null {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
    return ((Number(f[11]) + Number(f[12])) * 1000) / 100; // utime + stime, in USER_HZ (100)
  } catch {
    return null;
  }
}

/**
 * The CPU side, which the machine's load hardly moves: one backend changes CPU_WRITES distinct users'
 * phones in one transaction (the App's UPDATE, as pgbench sends it), with the triggers and without,
 * and a second backend folds what the triggers recorded. Microseconds of backend CPU per write and
 * per folded intent, medians of three passes; then the same per App transaction (10 000 transactions
 * of one write each, five passes), where what a trigger pays once per transaction shows. Null when the server's
 * /proc is not readable here.
 */
async function cpuCosts(
  url: string,
): Promise<{ app: number; trigger: number; fold: number; txApp: number; txTrigger: number } | null> {
  const N = 5000;
  const c = new pg.Client({ connectionString: url });
  const f = new pg.Client({ connectionString: url });
  await c.connect();
  await f.connect();
  try {
    const pid = (await c.query<{ p: number }>("select pg_backend_pid() as p")).rows[0]?.p as number;
    const fpid = (await f.query<{ p: number }>("select pg_backend_pid() as p")).rows[0]?.p as number;
    if (backendCpuMs(pid) === null || backendCpuMs(fpid) === null) return null;
    const app: number[] = [];
    const withTrigger: number[] = [];
    const fold: number[] = [];
    for (let pass = 0; pass < 3; pass++) {
      for (const on of [false, true]) {
        await setTriggers(c, on);
        await c.query("begin");
        const t0 = backendCpuMs(pid) as number;
        for (let i = 0; i < N; i++)
          await c.query({
            name: "app-update",
            text: "update han_app.user_identity set phone_number = '+79' || lpad($2::text, 9, '0'), updated_at = now() where id = md5($1::text)::uuid",
            values: [1 + ((pass * N + i) % USERS), 100_000_000 + (pass * 2 + (on ? 1 : 0)) * N + i],
          });
        const us = (((backendCpuMs(pid) as number) - t0) * 1000) / N;
        await c.query("commit");
        (on ? withTrigger : app).push(us);
        if (on) {
          const f0 = backendCpuMs(fpid) as number;
          const n = (
            await f.query<{ n: number }>("select bitrix_sync.fold_intent_journal(100000, true) as n")
          ).rows[0]?.n as number;
          fold.push((((backendCpuMs(fpid) as number) - f0) * 1000) / Math.max(n, 1));
        }
      }
    }
    // Per transaction: what a trigger pays once per App transaction (taking the intake watch's
    // lock, for one) hides in the figure above, where 5 000 writes share one transaction. One DO
    // block commits after each write (no round trips to count), five passes.
    const txApp: number[] = [];
    const txWith: number[] = [];
    const T = 10_000;
    await c.query("set synchronous_commit = off"); // CPU is measured; waiting for the disk is not
    for (let pass = 0; pass < 5; pass++) {
      for (const on of pass % 2 === 0 ? [false, true] : [true, false]) {
        await setTriggers(c, on);
        const base = 300_000_000 + (pass * 2 + (on ? 1 : 0)) * T;
        const t0 = backendCpuMs(pid) as number;
        await c.query(`do $tx$ begin
          for i in 1 .. ${T} loop
            update han_app.user_identity set phone_number = '+79' || lpad((${base} + i)::text, 9, '0'), updated_at = now()
             where id = md5((1 + (${pass * T} + i) % ${USERS})::text)::uuid;
            commit;
          end loop;
        end $tx$`);
        (on ? txWith : txApp).push((((backendCpuMs(pid) as number) - t0) * 1000) / T);
        if (on) await f.query("select bitrix_sync.fold_intent_journal(100000, true)");
      }
    }
    await c.query("reset synchronous_commit");
    await setTriggers(c, true);
    return {
      app: median(app),
      trigger: median(withTrigger) - median(app),
      fold: median(fold),
      txApp: median(txApp),
      txTrigger: median(txWith) - median(txApp),
    };
  } finally {
    await c.end();
    await f.end();
  }
}

/**
 * What the intake watch's try costs the App, alone (one backend, five passes, median): a PL/pgSQL
 * loop of transactions that each take a transaction ID, try and commit, and one of tries repeated in
 * one transaction, for the table lock the trigger takes (ROW EXCLUSIVE NOWAIT in an exception block)
 * and, for comparison, the advisory lock it took before migration 000028. Microseconds per try above
 * the same loop without one; null without the server's /proc.
 */
async function watchTryCosts(url: string): Promise<Record<string, { tx: number; again: number }> | null> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const pid = (await c.query<{ p: number }>("select pg_backend_pid() as p")).rows[0]?.p as number;
    if (backendCpuMs(pid) === null) return null;
    const tries: Record<string, string> = {
      none: "null;",
      "advisory (before)": "perform pg_try_advisory_xact_lock_shared(727014, 1);",
      "table lock (after)":
        "begin lock table bitrix_sync.lock_intake_watch in row exclusive mode nowait; exception when lock_not_available then null; end;",
    };
    const tx: Record<string, number[]> = Object.fromEntries(Object.keys(tries).map((n) => [n, []]));
    const again: Record<string, number[]> = Object.fromEntries(Object.keys(tries).map((n) => [n, []]));
    const N = 20_000;
    for (let pass = 0; pass < 5; pass++) {
      for (const [name, body] of Object.entries(tries)) {
        let t0 = backendCpuMs(pid) as number;
        await c.query(
          `do $w$ begin for i in 1 .. ${N} loop perform txid_current(); ${body} commit; end loop; end $w$`,
        );
        tx[name]?.push((((backendCpuMs(pid) as number) - t0) * 1000) / N);
        await c.query("begin");
        t0 = backendCpuMs(pid) as number;
        await c.query(
          `do $w$ begin perform txid_current(); for i in 1 .. ${N * 5} loop ${body} end loop; end $w$`,
        );
        again[name]?.push((((backendCpuMs(pid) as number) - t0) * 1000) / (N * 5));
        await c.query("rollback");
      }
    }
    const base = { tx: median(tx.none ?? []), again: median(again.none ?? []) };
    const out: Record<string, { tx: number; again: number }> = {};
    for (const name of Object.keys(tries).filter((n) => n !== "none"))
      out[name] = { tx: median(tx[name] ?? []) - base.tx, again: median(again[name] ?? []) - base.again };
    return out;
  } finally {
    await c.end();
  }
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
}

async function main(): Promise<number> {
  const bin = findPgbench();
  if (!bin) {
    console.error(
      "bench:trigger needs pgbench (Debian: postgresql-15 or postgresql-client-15; or set PGBENCH). Nothing was run.",
    );
    return 2;
  }
  let serverUrl = process.env.TEST_DATABASE_URL;
  let stopEmbedded: (() => Promise<void>) | undefined;
  let dir: string | undefined;
  if (!serverUrl) {
    dir = mkdtempSync(join(tmpdir(), "bitrix-sync-bench-"));
    const srv = await startEmbedded({ dir, persistent: false });
    serverUrl = srv.url;
    stopEmbedded = srv.stop;
  }
  const dbName = `bs_bench_trigger_${randomBytes(4).toString("hex")}`;
  const admin = new pg.Client({ connectionString: withDatabase(serverUrl, "postgres") });
  await admin.connect();
  await admin.query(`create database ${dbName}`);
  const dbUrl = withDatabase(serverUrl, dbName);
  const c = new pg.Client({ connectionString: dbUrl });
  const work = mkdtempSync(join(tmpdir(), "bitrix-sync-pgbench-"));
  try {
    await migrateDatabase(dbUrl);
    await c.connect();
    if (process.env.BENCH_SETUP_SQL) await c.query(readFileSync(process.env.BENCH_SETUP_SQL, "utf8"));
    await c.query(ALTERNATIVES_SQL);
    await seed(c);
    const seededBefore = (await c.query<{ t: Date }>("select clock_timestamp() as t")).rows[0]?.t as Date;
    const settings = (
      await c.query<{ s: string; f: string; v: string }>(
        "select current_setting('synchronous_commit') as s, current_setting('fsync') as f, current_setting('server_version') as v",
      )
    ).rows[0];
    const scriptFile = join(work, "app-mix.sql");
    writeFileSync(scriptFile, SCRIPT);

    const loads: number[] = [];
    const tps: Record<Variant, number[]> = { none: [], project: [], peer: [], limit: [] };
    const roundRatios: Record<string, number[]> = {};
    let missing = 0;
    const foldUs: number[] = [];
    console.log(
      `trigger bench: PostgreSQL ${settings?.v}, ${cpus().length} CPUs, ${USERS} users, ${HISTORY} finished intents, ` +
        `${CLIENTS} concurrent App writers (pgbench clients, ${(CLIENTS / cpus().length).toFixed(1)} per core), ${SECONDS} s per run, ${ROUNDS} rounds of ${VARIANTS.join(", ")}, synchronous_commit=${settings?.s}, fsync=${settings?.f}`,
    );
    const cpu = await cpuCosts(dbUrl);
    if (cpu)
      console.log(
        `  CPU per App write (one backend, 5 000 phone changes in one transaction, median of 3): ` +
          `the App's UPDATE ${cpu.app.toFixed(0)} µs; the project's trigger adds ${cpu.trigger.toFixed(0)} µs; ` +
          `the fold takes ${cpu.fold.toFixed(0)} µs per intent in the service's backend`,
      );
    if (cpu)
      console.log(
        `  CPU per App transaction (one backend, 10 000 transactions of one phone change each, median of 5): ` +
          `the App's transaction ${cpu.txApp.toFixed(0)} µs; the trigger adds ${cpu.txTrigger.toFixed(0)} µs`,
      );
    else console.log("  CPU per App write: not measured (the server's /proc is not readable from here)");
    const tries = await watchTryCosts(dbUrl);
    if (tries)
      console.log(
        `  the intake watch's try alone (one backend, median of 5), per transaction / repeated in one transaction: ${Object.entries(
          tries,
        )
          .map(([name, v]) => `${name} ${v.tx.toFixed(1)} / ${v.again.toFixed(2)} µs`)
          .join("; ")}`,
      );
    // Warm-up (caches, plans), not counted.
    await reset(c, seededBefore);
    await setVariant(c, "project");
    await runPgbench(bin, dbUrl, scriptFile, Math.min(5, SECONDS));
    for (let round = 0; round < ROUNDS; round++) {
      // The order rotates: each variant runs first, second, ... in turn.
      const order = VARIANTS.map((_, i) => VARIANTS[(i + round) % VARIANTS.length] as Variant);
      const got: Partial<Record<Variant, number>> = {};
      for (const v of order) {
        await reset(c, seededBefore);
        const n = await setVariant(c, v);
        const start = (await c.query<{ t: Date }>("select clock_timestamp() as t")).rows[0]?.t as Date;
        const load = loadavg()[0] ?? 0;
        loads.push(load);
        const wal0 = await walStats(c);
        const folder = v === "project" ? startFolder(dbUrl) : null;
        const r = await runPgbench(bin, dbUrl, scriptFile);
        const folded = await folder?.stop();
        got[v] = r.tps;
        tps[v].push(r.tps);
        const wal1 = await walStats(c);
        const walPerTx = `WAL ${((wal1.bytes - wal0.bytes) / r.tx).toFixed(0)} B/tx, ${((wal1.fpi - wal0.fpi) / r.tx).toFixed(2)} FPI/tx`;
        let check = "";
        if (v === "project") {
          // What the folder left (at most one pause's worth), as the next claim would fold it.
          const t0 = performance.now();
          const rest = (
            await c.query<{ n: number }>("select bitrix_sync.fold_intent_journal(100000, true) as n")
          ).rows[0]?.n as number;
          const ms = (folded?.ms ?? 0) + performance.now() - t0;
          const taken = (folded?.rows ?? 0) + rest;
          if (taken > 0) {
            foldUs.push((ms * 1000) / taken);
            check += `, fold ${taken} intents in ${(folded?.folds ?? 0) + 1} folds, ${((ms * 1000) / taken).toFixed(0)} µs per intent`;
          } else check += ", nothing in the journal to fold";
          // Durability of the intents: every user whose phone changed has its pending contact.update.
          // The queue's statistics first (autovacuum is off here): with the seed's, the planner runs
          // the check as a nested loop over the whole queue, a minute per run.
          await c.query("analyze han_app.sync_queue");
          const { rows } = await c.query<{ changed: string; missing: string; intents: string }>(
            `select count(*) as changed,
                    count(*) filter (where not exists (
                      select 1 from han_app.sync_queue q
                       where q.dedup_key = 'contact.update:user:' || u.id and q.status = 'pending')) as missing,
                    (select count(*) from han_app.sync_queue where created_at > $1) as intents
               from han_app.user_identity u where u.updated_at >= $2`,
            [seededBefore, start],
          );
          missing += Number(rows[0]?.missing);
          check += `, users changed ${rows[0]?.changed}, intents ${rows[0]?.intents}, missing ${rows[0]?.missing}`;
        }
        console.log(
          `  round ${round + 1} ${v.padEnd(7)} (${n} trigger${n === 1 ? "" : "s"}): ${r.tps.toFixed(0)} TPS ` +
            `(${r.tx} transactions), ${walPerTx}, load ${load.toFixed(2)}${check}`,
        );
      }
      // Ratios within the round (the machine's state moves between rounds, less within one).
      for (const [a, b] of [
        ["project", "none"],
        ["project", "limit"],
        ["project", "peer"],
        ["limit", "none"],
        ["peer", "none"],
      ] as const) {
        const x = got[a];
        const y = got[b];
        if (x === undefined || y === undefined) continue;
        const key = `${a}/${b}`;
        roundRatios[key] = [...(roundRatios[key] ?? []), x / y];
      }
    }
    for (const v of VARIANTS)
      console.log(`  TPS ${v.padEnd(7)} (median of ${tps[v].length}): ${median(tps[v]).toFixed(0)}`);
    for (const [k, rs] of Object.entries(roundRatios))
      console.log(
        `  ${k.padEnd(15)} ${median(rs).toFixed(3)} (rounds: ${rs.map((x) => x.toFixed(3)).join(", ")})`,
      );
    console.log(
      `  load average during runs: ${Math.min(...loads).toFixed(2)}..${Math.max(...loads).toFixed(2)}; now ${loadavg()
        .map((x) => x.toFixed(2))
        .join(" ")}`,
    );
    if (foldUs.length > 0)
      console.log(
        `  fold (the service's side, wall time of fold_intent_journal() calls, median of runs): ${median(foldUs).toFixed(0)} µs per intent`,
      );
    console.log(`  intents missing: ${missing}`);
    const ofLimit = roundRatios["project/limit"];
    const ofPeer = roundRatios["project/peer"];
    if (ofLimit)
      console.log(
        `  goal project/limit >= ${GOAL_OF_LIMIT}: ${median(ofLimit).toFixed(3)} ${median(ofLimit) >= GOAL_OF_LIMIT ? "met" : "NOT met"}`,
      );
    if (ofPeer)
      console.log(
        `  goal project ahead of peer (project/peer > ${GOAL_OF_PEER}): ${median(ofPeer).toFixed(3)} ${median(ofPeer) > GOAL_OF_PEER ? "met" : "NOT met"}`,
      );
    return missing === 0 ? 0 : 1;
  } finally {
    await c.end().catch(() => undefined);
    await admin.query(`drop database if exists ${dbName} with (force)`);
    await admin.end();
    await stopEmbedded?.();
    if (dir) rmSync(dir, { recursive: true, force: true });
    rmSync(work, { recursive: true, force: true });
  }
}

process.exitCode = await main();
