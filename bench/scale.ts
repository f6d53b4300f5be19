// `npm run bench:scale [-- --users N] [--small N] [--keep]`: whether the engine's database work holds
// at the size of a large installation. Two installations in one run, on the local server
// (BENCH_SERVER_URL, default postgres://postgres@127.0.0.1:5432/postgres), each a database of its own
// created, migrated, cut over and seeded here (bench/scale-seed.ts) and dropped at the end (--keep
// keeps them): --small users (10 000) and --users (10 000 000). On each, the same measurements:
//   intake     App writes (phone changes, one per transaction) with the project's triggers, and the
//              fold of the intents they recorded (fold_intent_journal);
//   claims     claim_sync_tasks + take_sync_tasks (intents to workflows), claim_workflows,
//              issue_command (a step), claim_commands, send_commands + complete_commands;
//   apply      one reconciliation page: 50 Contacts' active mappings and snapshots read, applied to
//              the App in one transaction (src/inbound/apply-contact.ts, as reconcile.ts does);
//   audit      the convergence audit's selection: claim_audit_run and audit_sample (its share);
//   status     every bitrix_sync.status_* view;
//   retention  one delete_retention_batch per table;
//   trigger    App TPS (pgbench, the phone-change mix) with the project's triggers over without.
// Then each figure at both sizes and the ratio (goal: <= 2), and the plans of every statement the
// hot-path calls ran (auto_explain, nested statements included: bench/scale-plans.ts), with any Seq
// Scan on a large table flagged. Before seeding the large size the bench extrapolates size and seed
// time from the small one and stops when the database would not fit on the server's disk.
// Options: --users N, --small N, --keep, --writes N (App writes for intake, 2000), --pages N
// (reconciliation pages, 10), --rounds N and --seconds N (pgbench rounds per variant, 3, and their
// length, 10 s), --clients N (pgbench clients, 8), --no-trigger (skip the pgbench part),
// --memory-seconds N (how long one service replica runs on each database while its resident set is
// sampled, 60; 0 skips it), --server URL (the server, a database on it to connect to first; else
// BENCH_SERVER_URL, else postgres://postgres@127.0.0.1:5432/postgres). The bench prints the server's
// settings it measured on (docs/deployment.md, "PostgreSQL settings", recommends them) and the hot
// tables' storage parameters. --large-db NAME measures a database an earlier --keep run left (the
// large size, on the same server) instead of seeding one: it is migrated to this release first and
// kept. --prewarm loads the hot path's indexes into the buffer pool (pg_prewarm) before measuring, at
// both sizes, as a running server holds them: right after a seed they are on disk, and the first
// statements measure the cold start. --no-sweep skips the workflow sweep's whole round (minutes at
// 10 M; not on the hot path). BENCH_SETUP_SQL: a variant (bench/variants/) applied after the
// migrations at both sizes; on a kept database it stays applied until undone.
import { spawn, spawnSync } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import {
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statfsSync,
  writeFileSync,
} from "node:fs";
import { availableParallelism, loadavg, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import pg from "pg";
import pino from "pino";
import { SANDBOX_FIELDS } from "../src/config/env.js";
import type { CitizenshipDictionary, ContactRecord } from "../src/crm/contact-fields.js";
import { migrateDatabase } from "../src/db/migrate.js";
import { withDatabase } from "../src/db/url.js";
import { configureHashKey } from "../src/hash.js";
import { activeMappings, applyContact } from "../src/inbound/apply-contact.js";
import { serviceEnv, startService } from "../test/helpers/service-process.js";
import { startEmulator } from "../tools/emulator/server.js";
import { planCapture, printPlans, type StatementPlan } from "./scale-plans.js";
import { seedInstallation } from "./scale-seed.js";

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}
const USERS = Number(arg("users") ?? 10_000_000);
const SMALL = Number(arg("small") ?? 10_000);
const KEEP = process.argv.includes("--keep");
const WRITES = Number(arg("writes") ?? 2000);
const PAGES = Number(arg("pages") ?? 10);
const ROUNDS = Number(arg("rounds") ?? 3);
const SECONDS = Number(arg("seconds") ?? 10);
const CLIENTS = Number(arg("clients") ?? 8);
const TRIGGER = !process.argv.includes("--no-trigger");
const MEMORY_SECONDS = Number(arg("memory-seconds") ?? 60);
const LARGE_DB = arg("large-db");
const PREWARM = process.argv.includes("--prewarm");
const SWEEP = !process.argv.includes("--no-sweep");
const SERVER = arg("server") ?? process.env.BENCH_SERVER_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const GOAL_RATIO = 2;

/** One figure of one size: a time (ms, lower is better) or a ratio (higher is better). */
type Figures = Map<string, { value: number; unit: string; higherIsBetter?: boolean }>;
type Plans = Array<{ label: string; plans: StatementPlan[] }>;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
}
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");

async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const t0 = performance.now();
  const r = await fn();
  return [r, performance.now() - t0];
}

/** n distinct random user numbers in 1..users. */
function pick(n: number, users: number): number[] {
  const s = new Set<number>();
  while (s.size < Math.min(n, users)) s.add(1 + Math.floor(Math.random() * users));
  return [...s];
}

// ---------------------------------------------------------------------------------------------

async function intake(
  c: pg.Client,
  users: number,
  f: Figures,
  plans: Plans,
  cap: PlanCaptureT,
): Promise<void> {
  const write = (db: pg.Client, n: number) =>
    db.query({
      name: "app-phone-change",
      text: "update han_app.user_identity set phone_number = '+78' || lpad($2::text, 9, '0'), updated_at = now() where id = md5('u' || $1)::uuid",
      values: [n, Math.floor(Math.random() * 1e9)],
    });
  const ns = pick(WRITES + 50, users);
  const [, ms] = await timed(async () => {
    for (const n of ns.slice(0, WRITES)) await write(c, n);
  });
  f.set("intake: App write (phone change, own transaction)", { value: ms / WRITES, unit: "ms" });
  let folded = 0;
  const [, fms] = await timed(async () => {
    for (;;) {
      const { rows } = await c.query<{ n: number }>(
        "select bitrix_sync.fold_intent_journal(10000, true) as n",
      );
      folded += rows[0]?.n ?? 0;
      if ((rows[0]?.n ?? 0) === 0) break;
    }
  });
  f.set("intake: fold per intent", { value: fms / Math.max(1, folded), unit: "ms" });
  plans.push({
    label: "App write with the triggers (x50) and the fold",
    plans: await cap.capture(async (db) => {
      for (const n of ns.slice(WRITES)) await write(db, n);
      await db.query("select bitrix_sync.fold_intent_journal(10000, true)");
    }),
  });
}

interface Claimed {
  id: string;
  lease_token: string;
  entity_id?: string;
  task_type?: string;
}

async function claims(c: pg.Client, f: Figures, plans: Plans, cap: PlanCaptureT): Promise<void> {
  // Intents to workflows, as the intake lane does (claim.size 50).
  const claimQ =
    "select id, lease_token, entity_id, task_type from bitrix_sync.claim_sync_tasks('bench', 50, '1 hour')";
  const take = (db: pg.Client, rows: Claimed[]) =>
    db.query(
      "select * from bitrix_sync.take_sync_tasks($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[])",
      [
        rows.map((r) => r.id),
        rows.map((r) => r.lease_token),
        rows.map((r) => r.entity_id),
        rows.map((r) => r.task_type),
        rows.map(() => randomBytes(16).toString("hex")),
        rows.map(() => null),
      ],
    );
  const claimTimes: number[] = [];
  const takeTimes: number[] = [];
  let first = true;
  for (;;) {
    if (first) {
      first = false;
      let got: Claimed[] = [];
      plans.push({
        label: "claim_sync_tasks + take_sync_tasks (50 intents)",
        plans: await cap.capture(async (db) => {
          got = (await db.query<Claimed>(claimQ)).rows;
          if (got.length) await take(db, got);
        }),
      });
      if (got.length === 0) break;
      continue;
    }
    const [r, ms] = await timed(() => c.query<Claimed>(claimQ));
    if (r.rows.length === 0) break;
    claimTimes.push(ms);
    takeTimes.push((await timed(() => take(c, r.rows)))[1]);
  }
  f.set("claims: claim_sync_tasks (50)", { value: mean(claimTimes), unit: "ms" });
  f.set("claims: take_sync_tasks (50 intents)", { value: mean(takeTimes), unit: "ms" });

  // Workflow claims, one step each (issue_command), command claims, send and completion.
  const wfQ = "select id, lease_token from bitrix_sync.claim_workflows('bench', 50, '1 hour')";
  const issue = (db: pg.Client, rows: Claimed[]) =>
    db.query(
      `select (bitrix_sync.issue_command(w, t, 'contact.update', '{}'::jsonb, 'update')).id
         from unnest($1::uuid[], $2::uuid[]) x(w, t)`,
      [rows.map((r) => r.id), rows.map((r) => r.lease_token)],
    );
  const wfTimes: number[] = [];
  const issueTimes: number[] = [];
  first = true;
  for (;;) {
    if (first) {
      first = false;
      let got: Claimed[] = [];
      plans.push({
        label: "claim_workflows + issue_command (50 workflows)",
        plans: await cap.capture(async (db) => {
          got = (await db.query<Claimed>(wfQ)).rows;
          if (got.length) await issue(db, got);
        }),
      });
      if (got.length === 0) break;
      continue;
    }
    const [r, ms] = await timed(() => c.query<Claimed>(wfQ));
    if (r.rows.length === 0) break;
    wfTimes.push(ms);
    issueTimes.push((await timed(() => issue(c, r.rows)))[1]);
  }
  f.set("claims: claim_workflows (50)", { value: mean(wfTimes), unit: "ms" });
  f.set("claims: issue_command (50 steps)", { value: mean(issueTimes), unit: "ms" });

  const cmdQ = "select id, lease_token from bitrix_sync.claim_commands('bench', 50, '1 hour')";
  const finish = async (db: pg.Client, rows: Claimed[]) => {
    const ids = rows.map((r) => r.id);
    const tokens = rows.map((r) => r.lease_token);
    await db.query("select bitrix_sync.send_commands($1::bigint[], $2::uuid[], $3)", [
      ids,
      tokens,
      randomUUID(),
    ]);
    await db.query("select bitrix_sync.complete_commands($1::bigint[], $2::uuid[], $3::jsonb[])", [
      ids,
      tokens,
      rows.map(() => JSON.stringify({ ok: true })),
    ]);
  };
  const cmdTimes: number[] = [];
  const finishTimes: number[] = [];
  first = true;
  for (;;) {
    if (first) {
      first = false;
      let got: Claimed[] = [];
      plans.push({
        label: "claim_commands + send_commands + complete_commands (50)",
        plans: await cap.capture(async (db) => {
          got = (await db.query<Claimed>(cmdQ)).rows;
          if (got.length) await finish(db, got);
        }),
      });
      if (got.length === 0) break;
      continue;
    }
    const [r, ms] = await timed(() => c.query<Claimed>(cmdQ));
    if (r.rows.length === 0) break;
    cmdTimes.push(ms);
    finishTimes.push((await timed(() => finish(c, r.rows)))[1]);
  }
  f.set("claims: claim_commands (50)", { value: mean(cmdTimes), unit: "ms" });
  f.set("claims: send + complete_commands (50)", { value: mean(finishTimes), unit: "ms" });
}

const dictionary = {
  resolve: async () => {
    throw new Error("bench:scale applies Contacts without citizenship");
  },
} as unknown as CitizenshipDictionary;
const silent = pino({ level: "silent" });

async function applyPage(db: pg.Client, ns: number[]): Promise<void> {
  const now = new Date().toISOString();
  const records = new Map<number, ContactRecord>(
    ns.map((n) => [
      n,
      {
        id: n,
        name: `Renamed ${n} ${randomBytes(3).toString("hex")}`,
        phones: [],
        emails: [{ id: 1, value: `user${n}@example.org`, valueType: "WORK" }],
        userId: null,
        registered: true,
        citizenshipEnumId: null,
        createdAt: now,
        updatedAt: now,
      } satisfies ContactRecord,
    ]),
  );
  const client = db as unknown as pg.PoolClient;
  const mappings = await activeMappings(client, ns);
  for (const [n, m] of mappings) (records.get(n) as ContactRecord).userId = m.userId;
  // reconcile.ts's snapshot read, before and after.
  const snap =
    "select contact_id, crm_updated_at, name_hash, email_hash, citizenship_enum_id, stale, last_applied_at, last_applied_source, last_webhook_received_at from bitrix_sync.contact_snapshots where contact_id = any($1)";
  await db.query(snap, [ns.map(String)]);
  await db.query("begin");
  try {
    for (const n of ns) {
      const m = mappings.get(n);
      if (m) await applyContact(client, { dictionary, log: silent }, m, records.get(n), "reconciliation");
    }
    await db.query("commit");
  } catch (e) {
    await db.query("rollback");
    throw e;
  }
  await db.query(snap, [ns.map(String)]);
  await db.query(
    `select entity_id, max(received_at) as received_at from bitrix_sync.webhook_inbox
      where receiver = 'contact' and entity_id = any($1) and status in ('received', 'retry_wait', 'processing')
      group by entity_id`,
    [ns.map(String)],
  );
}

async function apply(
  c: pg.Client,
  users: number,
  f: Figures,
  plans: Plans,
  cap: PlanCaptureT,
): Promise<void> {
  const times: number[] = [];
  for (let p = 0; p < PAGES; p++) times.push((await timed(() => applyPage(c, pick(50, users))))[1]);
  f.set("apply: one reconciliation page (50 Contacts)", { value: median(times), unit: "ms" });
  plans.push({
    label: "reconciliation page apply (50 Contacts)",
    plans: await cap.capture((db) => applyPage(db, pick(50, users))),
  });
}

async function audit(c: pg.Client, f: Figures, plans: Plans, cap: PlanCaptureT): Promise<void> {
  const claimTimes: number[] = [];
  const sampleTimes: number[] = [];
  const finishTimes: number[] = [];
  let sampled = 0;
  const run = async (db: pg.Client, rec: boolean) => {
    const [r, cms] = await timed(() =>
      db.query<{ lease_token: string; sample_limit: number }>(
        "select lease_token, sample_limit from bitrix_sync.claim_audit_run(false, true)",
      ),
    );
    const row = r.rows[0];
    if (!row) throw new Error("claim_audit_run returned no run");
    const [s, sms] = await timed(() =>
      db.query<{ n: number }>("select count(*)::int as n from bitrix_sync.audit_sample($1, $2)", [
        row.lease_token,
        row.sample_limit,
      ]),
    );
    const [, fms] = await timed(() =>
      db.query("select bitrix_sync.finish_audit_run($1, 0, 0)", [row.lease_token]),
    );
    if (rec) {
      claimTimes.push(cms);
      sampleTimes.push(sms);
      finishTimes.push(fms);
      sampled = s.rows[0]?.n ?? 0;
    }
  };
  for (let i = 0; i < 2; i++) await run(c, true);
  f.set("audit: claim_audit_run", { value: median(claimTimes), unit: "ms" });
  f.set("audit: audit_sample (its share of the links)", { value: median(sampleTimes), unit: "ms" });
  f.set("audit: finish_audit_run", { value: median(finishTimes), unit: "ms" });
  // The share grows with the links (links x audit.interval_sec / audit.period_days): per link sampled.
  f.set("audit: audit_sample per link sampled", {
    value: median(sampleTimes) / Math.max(1, sampled),
    unit: "ms",
  });
  console.log(`  audit sample: ${sampled} links per run`);
  plans.push({
    label: "claim_audit_run + audit_sample + finish_audit_run",
    plans: await cap.capture((db) => run(db, false)),
  });
  // The user kinds are judged in SQL (no CRM request) over a window of users per sampled run:
  // audit.users_per_run (10 000), or twice the users' share of audit.period_days when more. Three
  // sampled runs in a row (three windows), the median; and how many users a window held.
  const refresh = async (db: pg.Client): Promise<number> => {
    const before =
      (await db.query("select users_after_id as a from bitrix_sync.audit_state")).rows[0]?.a ?? null;
    const r = await db.query<{ lease_token: string }>(
      "select lease_token from bitrix_sync.claim_audit_run(false, true)",
    );
    const lease = r.rows[0]?.lease_token;
    if (!lease) throw new Error("claim_audit_run returned no run");
    await db.query("select bitrix_sync.refresh_user_drift($1, now())", [lease]);
    await db.query("select bitrix_sync.fail_audit_run($1, 'bench_run')", [lease]);
    const after =
      (await db.query("select users_after_id as a from bitrix_sync.audit_state")).rows[0]?.a ?? null;
    const { rows } = await db.query<{ n: string }>(
      `select count(*) as n from han_app.user_identity u
        where ($1::uuid is null or u.id > $1::uuid) and ($2::uuid is null or u.id <= $2::uuid)`,
      [before, after],
    );
    return Number(rows[0]?.n ?? 0);
  };
  const refreshTimes: number[] = [];
  const windows: number[] = [];
  for (let i = 0; i < 3; i++) {
    const [n, ms] = await timed(() => refresh(c));
    refreshTimes.push(ms);
    windows.push(n);
  }
  const ums = median(refreshTimes);
  f.set("audit: refresh_user_drift (a sampled run's window of users, in SQL)", { value: ums, unit: "ms" });
  f.set("audit: refresh_user_drift per 1 000 users judged", {
    value: (ums / Math.max(1, median(windows))) * 1000,
    unit: "ms",
  });
  console.log(`  refresh_user_drift: windows of ${windows.join(", ")} users`);
  plans.push({ label: "refresh_user_drift (a sampled run)", plans: await cap.capture((db) => refresh(db)) });
}

async function status(c: pg.Client, f: Figures, plans: Plans, cap: PlanCaptureT): Promise<void> {
  const views = (
    await c.query<{ v: string }>(
      "select viewname as v from pg_views where schemaname = 'bitrix_sync' and viewname like 'status\\_%' order by 1",
    )
  ).rows.map((r) => r.v);
  let total = 0;
  for (const v of views) {
    const times: number[] = [];
    for (let i = 0; i < 3; i++) times.push((await timed(() => c.query(`select * from bitrix_sync.${v}`)))[1]);
    total += median(times);
  }
  f.set(`status: all ${views.length} status_* views`, { value: total, unit: "ms" });
  plans.push({
    label: `status views (${views.join(", ")})`,
    plans: await cap.capture(async (db) => {
      for (const v of views) await db.query(`select * from bitrix_sync.${v}`);
    }),
  });
}

async function retention(c: pg.Client, f: Figures, plans: Plans, cap: PlanCaptureT): Promise<void> {
  const tables = ["webhooks", "commands", "workflows", "queue"];
  const deleted: string[] = [];
  for (const t of tables) {
    const [r, ms] = await timed(() =>
      c.query<{ n: number }>("select bitrix_sync.delete_retention_batch($1) as n", [t]),
    );
    f.set(`retention: one ${t} batch`, { value: ms, unit: "ms" });
    deleted.push(`${t} ${r.rows[0]?.n}`);
  }
  console.log(`  retention: rows deleted by the first batch: ${deleted.join(", ")}`);
  // The workflow sweep's whole round (every finished workflow past retention, a window a step), as
  // one run walks it when nothing stops it; each step is bounded, the round grows with the history.
  if (!SWEEP) {
    console.log("  retention: the workflow sweep's whole round not measured (--no-sweep)");
    return retentionPlans(c, plans, cap);
  }
  await c.query(
    "update bitrix_sync.retention_sweeps set after_finished_at = null, after_id = null where table_name = 'workflows'",
  );
  let steps = 0;
  let swept = 0;
  const [, roundMs] = await timed(async () => {
    const since = (await c.query<{ t: Date }>("select now() as t")).rows[0]?.t;
    for (;;) {
      const r = await c.query<{ deleted: number; more: boolean }>(
        "select deleted, more from bitrix_sync.retention_step('workflows', $1)",
        [since],
      );
      steps++;
      swept += r.rows[0]?.deleted ?? 0;
      if (!r.rows[0]?.more) break;
    }
  });
  f.set("retention: a whole round of the workflow sweep", { value: roundMs, unit: "ms" });
  f.set("retention: workflow sweep steps per round", { value: steps, unit: "steps" });
  console.log(
    `  retention: a workflow sweep round: ${steps} steps, ${swept} deleted, ${roundMs.toFixed(0)} ms`,
  );
  await retentionPlans(c, plans, cap);
}

async function retentionPlans(_c: pg.Client, plans: Plans, cap: PlanCaptureT): Promise<void> {
  const tables = ["webhooks", "commands", "workflows", "queue"];
  plans.push({
    label: "retention: a second batch of each table",
    plans: await cap.capture(async (db) => {
      for (const t of tables) await db.query("select bitrix_sync.delete_retention_batch($1)", [t]);
    }),
  });
}

// ---------------------------------------------------------------------------------------------
// The App's TPS with the project's triggers over without (pgbench), at this size.

function findPgbench(): string | null {
  if (process.env.PGBENCH) return process.env.PGBENCH;
  if (spawnSync("pgbench", ["--version"], { stdio: "ignore" }).status === 0) return "pgbench";
  const base = "/usr/lib/postgresql";
  if (!existsSync(base)) return null;
  for (const v of readdirSync(base).sort().reverse()) {
    const p = join(base, v, "bin", "pgbench");
    if (existsSync(p)) return p;
  }
  return null;
}

function pgbench(bin: string, url: string, script: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const p = spawn(
      bin,
      ["-n", "-M", "prepared", "-c", String(CLIENTS), "-j", "2", "-T", String(SECONDS), "-f", script, url],
      {
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
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
      if (code !== 0 || !tps)
        reject(new Error(`pgbench failed (exit ${code}): ${err.trim().split("\n").slice(-2).join(" | ")}`));
      else resolve(Number(tps[1]));
    });
  });
}

async function setTriggers(c: pg.Client, on: boolean): Promise<void> {
  const { rows } = await c.query<{ tbl: string; name: string }>(
    `select t.tgrelid::regclass::text as tbl, t.tgname as name from pg_trigger t
      where t.tgrelid in ('han_app.user_identity'::regclass, 'han_app.client_profile'::regclass) and not t.tgisinternal`,
  );
  for (const r of rows)
    await c.query(`alter table ${r.tbl} ${on ? "enable" : "disable"} trigger ${pg.escapeIdentifier(r.name)}`);
}

async function triggerRatio(
  c: pg.Client,
  url: string,
  users: number,
  f: Figures,
  work: string,
): Promise<void> {
  const bin = findPgbench();
  if (!bin) {
    console.log("  trigger ratio: not measured (no pgbench; Debian: postgresql-15, or set PGBENCH)");
    return;
  }
  const script = join(work, `mix-${users}.sql`);
  writeFileSync(
    script,
    `\\set n random(1, ${users})
\\set p random(0, 999999999)
BEGIN;
UPDATE han_app.client_profile SET foreign_phone = '+1555' || :p, updated_at = now() WHERE user_id = md5('u' || :n)::uuid;
UPDATE han_app.user_identity SET phone_number = '+79' || lpad(:p::text, 9, '0'), updated_at = now() WHERE id = md5('u' || :n)::uuid;
END;
`,
  );
  const ratios: number[] = [];
  const tps: Record<string, number[]> = { none: [], project: [] };
  await setTriggers(c, false);
  await pgbench(bin, url, script); // warm-up
  for (let r = 0; r < ROUNDS; r++) {
    const round: Record<string, number> = {};
    for (const v of r % 2 === 0 ? ["none", "project"] : ["project", "none"]) {
      await setTriggers(c, v === "project");
      // The service's claims fold the journal as the App writes: every 100 ms here.
      const folder = new pg.Client({ connectionString: url });
      await folder.connect();
      let running = v === "project";
      const loop = (async () => {
        while (running) {
          await folder.query("select bitrix_sync.fold_intent_journal()");
          await new Promise((res) => setTimeout(res, 100));
        }
      })();
      round[v] = await pgbench(bin, url, script);
      running = false;
      await loop;
      await folder.query("select bitrix_sync.fold_intent_journal(100000, true)");
      await folder.end();
      tps[v]?.push(round[v] as number);
    }
    ratios.push((round.project as number) / (round.none as number));
  }
  await setTriggers(c, true);
  console.log(
    `  trigger: TPS without ${tps.none?.map((x) => x.toFixed(0)).join(" ")}; with ${tps.project?.map((x) => x.toFixed(0)).join(" ")}; load ${load()}`,
  );
  f.set("trigger: App TPS with / without the triggers", {
    value: median(ratios),
    unit: "",
    higherIsBetter: true,
  });
  f.set("trigger: App TPS without triggers", {
    value: median(tps.none ?? []),
    unit: "tps",
    higherIsBetter: true,
  });
}

// ---------------------------------------------------------------------------------------------
// The service's memory on this database: one replica (src/main.ts, a child process, the emulator as
// its portal, production default settings) for MEMORY_SECONDS while the App changes 10 phones a
// second, its resident set sampled every 5 s.

function rssMiB(pid: number): number | null {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) / 1024 : null;
  } catch {
    return null;
  }
}

async function serviceMemory(c: pg.Client, url: string, users: number, f: Figures): Promise<void> {
  if (MEMORY_SECONDS <= 0) return;
  const emulator = await startEmulator({ fields: SANDBOX_FIELDS, latencyMs: 20 });
  const svc = startService(serviceEnv(url, emulator, { LOG_LEVEL: "warn" }));
  const samples: number[] = [];
  let writes = 0;
  try {
    await new Promise((r) => setTimeout(r, 5000));
    const pid = svc.child.pid as number;
    const end = Date.now() + MEMORY_SECONDS * 1000;
    let next = Date.now();
    while (Date.now() < end) {
      const rss = rssMiB(pid);
      if (rss === null) throw new Error(`the service exited: ${svc.output.join("").slice(-400)}`);
      samples.push(rss);
      for (const n of pick(50, users)) {
        await c.query(
          "update han_app.user_identity set phone_number = '+77' || lpad($2::text, 9, '0'), updated_at = now() where id = md5('u' || $1)::uuid",
          [n, Math.floor(Math.random() * 1e9)],
        );
        writes++;
      }
      next += 5000;
      await new Promise((r) => setTimeout(r, Math.max(0, next - Date.now())));
    }
  } finally {
    svc.child.kill("SIGTERM");
    const timer = setTimeout(() => svc.child.kill("SIGKILL"), 15_000);
    await svc.exited;
    clearTimeout(timer);
    await emulator.close();
  }
  const { rows } = await c.query<{ n: number }>(
    "select count(*)::int as n from bitrix_sync.workflow_instances where created_at > now() - make_interval(secs => $1)",
    [MEMORY_SECONDS + 10],
  );
  console.log(
    `  service replica for ${MEMORY_SECONDS} s, ${writes} App writes, ${rows[0]?.n} workflows started: RSS MiB ${samples.map((x) => x.toFixed(0)).join(" ")}`,
  );
  f.set("service: RSS at the end", { value: samples.at(-1) ?? Number.NaN, unit: "MiB" });
  // The first samples include the start (modules, pools, the first plans): growth over the second half.
  f.set("service: RSS growth over the second half", {
    value: (samples.at(-1) ?? 0) - (samples[Math.floor(samples.length / 2)] ?? 0),
    unit: "MiB",
  });
}

// ---------------------------------------------------------------------------------------------

type PlanCaptureT = Awaited<ReturnType<typeof planCapture>>;

interface SizeResult {
  users: number;
  figures: Figures;
  plans: Plans;
  bytes: number;
  seedSeconds: number;
}

async function runSize(
  admin: pg.Client,
  users: number,
  work: string,
  existing?: string,
): Promise<SizeResult> {
  const name = existing ?? `bs_scale_${users}_${randomBytes(3).toString("hex")}`;
  if (!existing) await admin.query(`create database ${name}`);
  const url = withDatabase(SERVER, name);
  console.log(
    `\n== ${users.toLocaleString("en")} users: database ${name}${existing ? " (kept by an earlier run, not seeded again)" : ""}; load ${load()}, ${availableParallelism()} cores`,
  );
  let keepIt = KEEP || existing !== undefined;
  const c = new pg.Client({ connectionString: url });
  try {
    await migrateDatabase(url);
    await c.connect();
    if (process.env.BENCH_SETUP_SQL) {
      // A variant (bench/variants/): applied after the migrations at both sizes, before any seed.
      await c.query(readFileSync(process.env.BENCH_SETUP_SQL, "utf8"));
      console.log(`  variant: ${process.env.BENCH_SETUP_SQL} applied`);
    }
    let seedMs = 0;
    if (!existing) {
      await c.query("select * from bitrix_sync.perform_cutover('bench')");
      const seedClient = new pg.Client({ connectionString: url });
      await seedClient.connect();
      const [times, ms] = await timed(() => seedInstallation(seedClient, users)).finally(() =>
        seedClient.end(),
      );
      seedMs = ms;
      console.log(
        `  seeded in ${(seedMs / 1000).toFixed(1)} s (load ${times.load.toFixed(1)} s, keys and indexes ${times.indexes.toFixed(1)} s, vacuum analyze ${times.analyze.toFixed(1)} s); load ${load()}`,
      );
    }
    const bytes = Number(
      (await c.query<{ b: string }>("select pg_database_size(current_database())::text as b")).rows[0]?.b,
    );
    console.log(`  database ${(bytes / 2 ** 30).toFixed(2)} GiB`);
    if (PREWARM) await prewarm(c);
    const sizes = await c.query<{ t: string; rows: string; mb: string }>(
      `select c.relname as t, c.reltuples::bigint::text as rows, (pg_total_relation_size(c.oid) / 1048576)::text as mb
         from pg_class c join pg_namespace s on s.oid = c.relnamespace
        where s.nspname in ('han_app', 'bitrix_sync') and c.relkind = 'r' and c.reltuples > 1000 order by pg_total_relation_size(c.oid) desc`,
    );
    await printStorage(c);
    console.log(`  tables: ${sizes.rows.map((r) => `${r.t} ${r.rows} rows ${r.mb} MB`).join("; ")}`);
    const figures: Figures = new Map();
    const plans: Plans = [];
    const cap = await planCapture(url);
    try {
      await intake(c, users, figures, plans, cap);
      await claims(c, figures, plans, cap);
      await apply(c, users, figures, plans, cap);
      await audit(c, figures, plans, cap);
      await status(c, figures, plans, cap);
      await retention(c, figures, plans, cap);
    } finally {
      await cap.close();
    }
    if (TRIGGER) await triggerRatio(c, url, users, figures, work);
    await serviceMemory(c, url, users, figures);
    for (const [k, v] of figures) console.log(`  ${k}: ${v.value.toFixed(3)} ${v.unit}`);
    return { users, figures, plans, bytes, seedSeconds: seedMs / 1000 };
  } catch (e) {
    keepIt = false;
    throw e;
  } finally {
    await c.end().catch(() => undefined);
    if (keepIt) console.log(`  kept: ${url.replace(/\/\/[^@]*@/, "//")}`);
    else await admin.query(`drop database if exists ${name} with (force)`);
  }
}

/**
 * The hot path's indexes into the buffer pool, largest last (pg_prewarm, shipped with PostgreSQL), as a
 * running server holds them; prints what it loaded and the pool's size.
 */
async function prewarm(c: pg.Client): Promise<void> {
  await c.query("create extension if not exists pg_prewarm");
  const [{ rows }, ms] = await timed(() =>
    c.query<{ n: string; mb: string }>(
      `select count(*)::text as n, (sum(pg_prewarm(i.indexrelid::regclass)) * 8 / 1024)::text as mb
         from pg_index i join pg_class t on t.oid = i.indrelid join pg_namespace s on s.oid = t.relnamespace
        where (s.nspname, t.relname) in (('han_app', 'user_identity'), ('han_app', 'client_profile'), ('han_app', 'sync_queue'),
                                         ('bitrix_sync', 'workflow_instances'), ('bitrix_sync', 'entity_external_mapping'),
                                         ('bitrix_sync', 'contact_snapshots'), ('bitrix_sync', 'crm_commands'))`,
    ),
  );
  console.log(
    `  prewarmed ${rows[0]?.n} indexes of the hot path, ${rows[0]?.mb} MiB, in ${(ms / 1000).toFixed(1)} s (shared_buffers ${(await c.query<{ s: string }>("select current_setting('shared_buffers') as s")).rows[0]?.s})`,
  );
}

/** The settings docs/deployment.md ("PostgreSQL settings") speaks of, as the server has them. */
const CONFIGURATION = [
  "server_version",
  "shared_buffers",
  "effective_cache_size",
  "work_mem",
  "maintenance_work_mem",
  "random_page_cost",
  "effective_io_concurrency",
  "jit",
  "max_wal_size",
  "autovacuum",
  "autovacuum_naptime",
  "autovacuum_vacuum_cost_limit",
  "autovacuum_max_workers",
  "synchronous_commit",
  "fsync",
];

async function printConfiguration(admin: pg.Client): Promise<void> {
  const { rows } = await admin.query<{ name: string; setting: string }>(
    "select name, current_setting(name) as setting from unnest($1::text[]) name",
    [CONFIGURATION],
  );
  const ram = (totalmem() / 2 ** 30).toFixed(1);
  console.log(
    `  configuration measured on (the machine: ${availableParallelism()} cores, ${ram} GiB RAM): ${rows.map((r) => `${r.name}=${r.setting}`).join(", ")}`,
  );
}

/** The hot tables' storage parameters (migration 000045 sets the autovacuum ones). */
async function printStorage(c: pg.Client): Promise<void> {
  const { rows } = await c.query<{ t: string; o: string | null }>(
    `select c.oid::regclass::text as t, array_to_string(c.reloptions, ', ') as o
       from pg_class c join pg_namespace s on s.oid = c.relnamespace
      where s.nspname in ('han_app', 'bitrix_sync') and c.relkind = 'r' and c.reloptions is not null
      order by 1`,
  );
  console.log(`  storage parameters: ${rows.map((r) => `${r.t} (${r.o})`).join("; ") || "none set"}`);
}

function freeBytes(path: string): number | null {
  try {
    const s = statfsSync(path);
    return s.bavail * s.bsize;
  } catch {
    return null;
  }
}

async function main(): Promise<number> {
  configureHashKey(`bench-scale-${randomBytes(8).toString("hex")}`);
  const admin = new pg.Client({ connectionString: SERVER });
  await admin.connect();
  const work = mkdtempSync(join(tmpdir(), "bitrix-sync-scale-"));
  try {
    const dataDir =
      (await admin.query<{ d: string }>("select current_setting('data_directory') as d")).rows[0]?.d ?? "";
    // The data directory itself is the postgres user's; the filesystem is the same as its parent's.
    const free =
      freeBytes(dataDir) ?? freeBytes(join(dataDir, "..", "..")) ?? freeBytes("/var/lib/postgresql");
    console.log(
      `bench:scale — ${SMALL.toLocaleString("en")} and ${USERS.toLocaleString("en")} users on ${SERVER.replace(/\/\/[^@]*@/, "//")}; ` +
        `data directory ${dataDir}: ${free === null ? "free space unknown" : `${(free / 2 ** 30).toFixed(1)} GiB free`}; ` +
        `/work ${((freeBytes("/work") ?? 0) / 2 ** 30).toFixed(1)} GiB free`,
    );
    await printConfiguration(admin);
    const small = await runSize(admin, SMALL, work);
    const perUser = small.bytes / SMALL;
    const secPerUser = small.seedSeconds / SMALL;
    const projected = perUser * USERS;
    console.log(
      `\nextrapolated from ${SMALL.toLocaleString("en")} users: ${USERS.toLocaleString("en")} users need about ${(projected / 2 ** 30).toFixed(1)} GiB and ${((secPerUser * USERS) / 60).toFixed(0)} min of seeding (linear; index builds grow a little faster)`,
    );
    if (!LARGE_DB && free !== null && projected > 0.8 * free) {
      console.log(
        `  does not fit: ${(projected / 2 ** 30).toFixed(1)} GiB > 80 % of ${(free / 2 ** 30).toFixed(1)} GiB free. Run a smaller --users.`,
      );
      return 2;
    }
    const large = await runSize(admin, USERS, work, LARGE_DB);
    console.log(
      `\n== ${SMALL.toLocaleString("en")} vs ${USERS.toLocaleString("en")} users (database ${(small.bytes / 2 ** 20).toFixed(0)} MiB vs ${(large.bytes / 2 ** 30).toFixed(2)} GiB, seeded in ${large.seedSeconds.toFixed(0)} s); goal: each figure within ${GOAL_RATIO} x`,
    );
    console.log(`  ${"figure".padEnd(52)} ${"small".padStart(10)} ${"large".padStart(10)}  ratio  goal`);
    let missed = 0;
    for (const [k, s] of small.figures) {
      const l = large.figures.get(k);
      if (!l) continue;
      if (s.unit === "MiB") {
        // Memory is read as flat or not, not as a ratio.
        console.log(
          `  ${k.padEnd(52)} ${s.value.toFixed(1).padStart(10)} ${l.value.toFixed(1).padStart(10)}      -  (MiB)`,
        );
        continue;
      }
      const ratio = s.higherIsBetter ? s.value / l.value : l.value / s.value;
      const met = ratio <= GOAL_RATIO;
      if (!met) missed++;
      console.log(
        `  ${k.padEnd(52)} ${s.value.toFixed(3).padStart(10)} ${l.value.toFixed(3).padStart(10)} ${ratio.toFixed(2).padStart(6)}  ${met ? "met" : "NOT met"}${s.unit ? ` (${s.unit})` : ""}`,
      );
    }
    console.log(
      `\n== plans at ${USERS.toLocaleString("en")} users (auto_explain, ANALYZE, BUFFERS; nested statements included)`,
    );
    let flagged = 0;
    for (const p of large.plans) flagged += printPlans(p.label, p.plans);
    // The same statements at the small size, to read what grew (buffers per call above and here).
    console.log(`\n== plans at ${SMALL.toLocaleString("en")} users, for comparison`);
    for (const p of small.plans) printPlans(p.label, p.plans);
    console.log(
      `\n  ${missed} figure(s) beyond ${GOAL_RATIO} x; ${flagged} statement(s) with a Seq Scan on a table of more than 100 000 rows; load ${load()}`,
    );
    return 0;
  } finally {
    await admin.end();
    rmSync(work, { recursive: true, force: true });
  }
}

process.exitCode = await main();
