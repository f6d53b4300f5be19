// `npm run drill:rollback` (docs/reliability.md, "Rolling back"; `--short` for the CI mode; `--from
// <git ref>` for another previous release, default: the newest commit whose migrations/committed/ is
// exactly the released set of migrations/released.sha256, today 7ba6d95): a release rolled forward
// and back without a database downgrade, as docs/runbook.md ("Rolling back") does it. On one database
// and the emulated portal, with App users created and changed and CRM edits arriving by robot
// webhook the whole time:
//
//  1. the previous release's replicas on its own schema (migrated by its own npm run db:migrate);
//  2. this release's migrations applied while they run;
//  3. roll forward: each previous replica replaced by one of this release (started, ready, then the
//     old one stopped with SIGTERM);
//  4. roll back the binaries: each replica of this release replaced by one of the previous release,
//     on this release's schema, which stays; they must be ready and sync both ways;
//  5. a pause (pause_sync) while the portal fails, drained, held longer than the retry horizon
//     (retry.horizon_sec at its least, 60 s: a real pause on the real clock past a real horizon),
//     then resume_preview and resume_sync, the portal failing a few seconds more;
//  6. the backlog drains; the work settles; one forced reconciliation of each kind.
//
// Every replica's /health/ready is sampled every 250 ms: the receivers are never all not ready, and
// the robot's calls go to the replicas whose last answer was 200, as a load balancer sends them.
// Checked and printed: the window keeps the previous release, nothing lost (every App change in the
// portal, every CRM edit in the App), no duplicate Contact at any moment, no dead letter (none from
// the pause), the gate held during the pause, every intent and webhook recorded during the pause
// processed after it, one workflow per intent, no error that loses work, no personal value in any
// output. Exit 1 on a violation, 2 when the drill itself failed.
import { randomBytes, randomInt } from "node:crypto";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { SANDBOX_FIELDS } from "../src/config/env.js";
import { readReleaseSchema } from "../src/db/schema-window.js";
import { projectRoot } from "../src/local/project-root.js";
import { type Emulator, startEmulator } from "../tools/emulator/server.js";
import { DEFAULT_ALERT_SETTINGS } from "../tools/emulator/store.js";
import {
  ALERT_NUMBER_FIELD,
  ALERT_PROCESS,
  checkInvariants,
  checkOutput,
  historyOf,
} from "./chaos/checks.js";
import { Replica } from "./chaos/replicas.js";
import { Traffic } from "./chaos/traffic.js";
import {
  byInvariant,
  Checker,
  confirmContract,
  createDatabase,
  DRILL_SETTINGS,
  DuplicateWatch,
  dropDatabase,
  MEMBER_ID,
  newTokens,
  prepareDatabase,
  replicaEnv,
  sayer,
  settle,
  sleep,
  waitUntil,
} from "./drill/common.js";
import { pauseSync, resumePreview, resumeSync, waitDrained } from "./drill/pause.js";
import { errorEvents, keepLogs, readReadiness } from "./drill/process.js";
import {
  frozenMigrations,
  migrateWith,
  previousRelease,
  releaseCheckout,
  resolveRef,
} from "./drill/release.js";

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const SHORT = process.argv.includes("--short") || process.env.DRILL_SHORT === "1";
/** Seconds of traffic in each phase with no step under way. */
const PHASES = SHORT
  ? { previous: 6, this: 5, rolledBack: 8, beforePause: 3, afterResume: 5 }
  : { previous: 45, this: 45, rolledBack: 45, beforePause: 5, afterResume: 30 };
const REPLICAS = SHORT ? 1 : 2;
/** retry.horizon_sec for the drill: its least value, so a pause can outlast it on the real clock. */
const HORIZON_SEC = 60;
/** The pause: longer than the horizon, so every row first tried before it is past its nominal horizon. */
const PAUSE_SEC = HORIZON_SEC + 15;
/** The portal keeps failing this long after the resume: rows past their nominal horizon fail again. */
const FAILING_AFTER_RESUME_MS = 5_000;
/** BITRIX_SYNC_HTTP_TIMEOUT_SEC of the drill's replicas (scripts/drill/common.ts). */
const HTTP_TIMEOUT_SEC = 2;
/** The drain's bound (docs/runbook.md, "Rolling back"): the HTTP timeout, a lease, two polls, and slack. */
const DRAIN_BOUND_MS = (HTTP_TIMEOUT_SEC + 5 + 2 * 0.5 + 7) * 1000;
const READY_BOUND_MS = 90_000;
const SETTLE_BOUND_MS = 180_000;
const WRITES = new Set(["crm.contact.add", "crm.contact.update", "crm.item.add", "crm.item.update"]);
const say = sayer("drill:rollback");
const started = Date.now();
const loads = () =>
  loadavg()
    .map((x) => x.toFixed(1))
    .join(" ");

const SETTINGS: Record<string, unknown> = {
  ...DRILL_SETTINGS,
  "retry.horizon_sec": HORIZON_SEC,
  "alerts.entity_type_id": ALERT_PROCESS.entityTypeId,
  "alerts.category_id": 7,
  "alerts.stage_new": ALERT_PROCESS.stages.open[0],
  "alerts.stage_resolved": ALERT_PROCESS.stages.resolved,
  "alerts.stage_closed_without_resolution": ALERT_PROCESS.stages.closed,
  "alerts.fields": DEFAULT_ALERT_SETTINGS["alerts.fields"],
  "alerts.reconcile_interval_sec": 60,
};

type Release = "previous" | "this";

interface Member {
  r: Replica;
  release: Release;
  /** Taken out of the rotation before its SIGTERM, as a load balancer drains it. */
  stopping: boolean;
}

interface Sample {
  at: number;
  phase: string;
  release: Release;
  replica: string;
  http: number;
  status: string;
  problems: string[];
}

const OPEN_BEFORE = `
  select (select count(*) from han_app.sync_queue where status in ('pending', 'leased', 'retry_wait') and created_at < $1)
       + (select count(*) from han_app.sync_queue_journal where recorded_at < $1)
       + (select count(*) from bitrix_sync.workflow_instances
           where state in ('created', 'running', 'waiting_crm', 'waiting_retry') and created_at < $1)
       + (select count(*) from bitrix_sync.crm_commands
           where status in ('pending', 'leased', 'in_flight', 'retry_wait', 'uncertain', 'reconcile') and created_at < $1)
       + (select count(*) from bitrix_sync.webhook_inbox
           where status in ('received', 'coalesced', 'processing', 'retry_wait') and received_at < $1) as n`;

/**
 * For a failed run: the links, Contact snapshots and robot webhooks of the users a violation names,
 * beside the portal's update time of each Contact (internal IDs, times, states and codes only).
 */
async function linksOf(db: pg.Pool, emulator: Emulator, userIds: string[]): Promise<string[]> {
  const out: string[] = [];
  const t = (d: Date | null) => (d ? d.toISOString().slice(11, 23) : "-");
  for (const id of userIds) {
    const { rows: maps } = await db.query<{
      c: string;
      status: string;
      opened: Date;
      closed: Date | null;
      why: string | null;
    }>(
      `select external_id as c, status, opened_at as opened, closed_at as closed, close_reason as why
         from bitrix_sync.entity_external_mapping where entity_id = $1 order by opened_at`,
      [id],
    );
    const contacts = new Set(maps.map((m) => m.c));
    for (const c of emulator.store.contacts.values())
      if (c.uf[SANDBOX_FIELDS.userId] === id) contacts.add(String(c.id));
    out.push(`links of user ${id}:`);
    for (const m of maps)
      out.push(`  link to ${m.c} ${m.status} opened ${t(m.opened)} closed ${t(m.closed)} ${m.why ?? ""}`);
    for (const c of contacts) {
      const stored = emulator.store.contacts.get(Number(c));
      out.push(
        `  Contact ${c}: portal updated ${stored ? new Date(stored.updatedTime).toISOString().slice(11, 23) : "gone"}`,
      );
      const { rows: snap } = await db.query<{
        crm: Date | null;
        src: string | null;
        at: Date | null;
        stale: boolean;
      }>(
        `select crm_updated_at as crm, last_applied_source as src, last_applied_at as at, stale
           from bitrix_sync.contact_snapshots where contact_id = $1`,
        [c],
      );
      for (const x of snap)
        out.push(`    snapshot crm ${t(x.crm)} applied ${x.src} ${t(x.at)} stale ${x.stale}`);
      const { rows: hooks } = await db.query<{
        r: Date;
        status: string;
        p: Date | null;
        outcome: string | null;
        code: string | null;
        n: number;
      }>(
        `select received_at as r, status, processed_at as p, outcome, last_error_code as code, attempt_count as n
           from bitrix_sync.webhook_inbox where receiver = 'contact' and entity_id = $1 order by received_at`,
        [c],
      );
      for (const h of hooks)
        out.push(
          `    webhook ${t(h.r)} ${h.status} processed ${t(h.p)} ${h.outcome ?? ""} ${h.code ?? ""} att ${h.n}`,
        );
    }
  }
  return out;
}

async function main(): Promise<number> {
  const checker = new Checker();
  const fromArg = arg("--from") ?? process.env.DRILL_FROM;
  const sha = fromArg ? await resolveRef(fromArg) : await previousRelease();
  const own = readReleaseSchema();
  say(
    `mode ${SHORT ? "short" : "full"}: previous release ${fromArg ?? "(the released set)"} = ${sha.slice(0, 12)}, this release's schema ${own.name}; ${REPLICAS} replica(s); load ${loads()}`,
  );

  say("runbook, Rolling back, step 0: Check the window (the previous release's migrations, byte for byte)");
  const frozen = await frozenMigrations(sha);
  checker.check(
    "the previous release's committed migrations are unchanged here, byte for byte",
    frozen.violations,
    `${frozen.compared.length} files, ${frozen.compared[0]} to ${frozen.compared.at(-1)}`,
  );
  const previousSchema = (frozen.compared.at(-1) ?? "").slice(0, 6);

  const previous = await releaseCheckout(sha, say);
  say(
    `previous release ${previous.cached ? "from the cache" : "installed"} in ${(previous.ms / 1000).toFixed(1)} s: ${previous.dir}`,
  );
  const dirOf = (r: Release) => (r === "previous" ? previous.dir : projectRoot);

  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-drill-rollback-"));
  chmodSync(dir, 0o755);
  const name = `bs_drill_rollback_${randomBytes(5).toString("hex")}`;
  const fleet: Member[] = [];
  const retired: Member[] = [];
  process.on("exit", () => {
    for (const { r } of [...fleet, ...retired]) r.child?.kill("SIGKILL");
  });
  const emulator = await startEmulator({
    fields: SANDBOX_FIELDS,
    rate: { drainPerSec: 2, threshold: 50 },
    operating: { limitSec: 480, windowMs: 10_000, bucketMs: 1_000 },
  });
  const tokens = newTokens();
  const samples: Sample[] = [];
  /** Sampling rounds in which no running replica answered 200: the receivers all not ready. */
  const gaps: { at: number; phase: string; answers: string }[] = [];
  let phase = "previous";
  const phases: { name: string; at: number }[] = [];
  const enter = (p: string) => {
    phase = p;
    phases.push({ name: p, at: Date.now() });
  };
  enter("previous");
  let sampling = false;
  let samplerDone: Promise<void> = Promise.resolve();
  let pool: pg.Pool | null = null;
  try {
    const url = await createDatabase(name);
    const m0 = await migrateWith(previous.dir, url);
    if (m0.code !== 0) throw new Error(`the previous release's migrations failed: ${m0.out.slice(-400)}`);
    const { serviceUrl, password } = await prepareDatabase(url, SETTINGS);
    pool = new pg.Pool({ connectionString: url, max: 8, application_name: "drill-rollback" });
    pool.on("error", () => undefined);
    const db = pool;
    const dbNow = async () =>
      (await db.query<{ now: Date }>("select clock_timestamp() as now")).rows[0]?.now as Date;

    const envOf = (tag: Release) => replicaEnv(dir, tag, serviceUrl, emulator, tokens);
    let seq = 0;
    const spawnMember = (release: Release): Member => {
      const m: Member = {
        r: new Replica(`${release}-${++seq}`, envOf(release), dirOf(release)),
        release,
        stopping: false,
      };
      fleet.push(m);
      return m;
    };
    for (let i = 0; i < REPLICAS; i++) spawnMember("previous");
    await Promise.all(fleet.map(({ r }) => r.start()));
    say(`previous replicas listening on ${fleet.map(({ r }) => r.port).join(", ")}`);

    // The load balancer: replicas whose last readiness answer was 200 (ready or degraded) get the calls.
    const rotation: Replica[] = [];
    const lastHttp = new Map<Replica, number>();
    const lastStatus = new Map<Replica, string>();
    const sampleOnce = async () => {
      const running = fleet.filter((m) => m.r.port !== null && !m.stopping);
      const answers = await Promise.all(running.map(async (m) => ({ m, s: await readReadiness(m.r.port) })));
      for (const { m, s } of answers) {
        samples.push({
          at: s.at,
          phase,
          release: m.release,
          replica: m.r.name,
          http: s.http,
          status: s.status,
          problems: s.problems,
        });
        lastHttp.set(m.r, s.http);
        lastStatus.set(m.r, s.status);
      }
      if (!answers.some(({ s }) => s.http === 200))
        gaps.push({
          at: Date.now(),
          phase,
          answers:
            answers.map(({ m, s }) => `${m.r.name} ${s.status} ${s.problems.join("+")}`).join(", ") ||
            "none running",
        });
      rotation.splice(
        0,
        rotation.length,
        ...fleet.filter((m) => m.r.port !== null && !m.stopping && lastHttp.get(m.r) === 200).map((m) => m.r),
      );
    };
    await sampleOnce();
    sampling = true;
    samplerDone = (async () => {
      while (sampling) {
        await sampleOnce().catch(() => undefined);
        await sleep(250);
      }
    })();

    const traffic = new Traffic(
      db,
      emulator,
      rotation,
      {
        token: tokens.contact,
        alertToken: tokens.alert,
        alertEntityTypeId: ALERT_PROCESS.entityTypeId,
        alertStages: ALERT_PROCESS.stages,
        alertNumberField: ALERT_NUMBER_FIELD,
        portalHost: emulator.host,
        memberId: MEMBER_ID,
        userIdField: SANDBOX_FIELDS.userId,
        citizenshipField: SANDBOX_FIELDS.citizenship,
      },
      false,
    );
    const watch = new DuplicateWatch(emulator, SANDBOX_FIELDS.userId, traffic.sharedPhone);
    watch.start();
    let trafficOn = true;
    const loop = async (step: () => Promise<void>, min: number, max: number, delay = 0) => {
      await sleep(delay);
      while (trafficOn) {
        await step();
        await sleep(randomInt(min, max));
      }
    };
    const loops = Promise.all([
      loop(() => traffic.appStep(), 100, 400),
      loop(() => traffic.crmStep(), 300, 1_200, 2_000),
      loop(() => traffic.duplicateStep(), 3_000, 8_000, 3_000),
      loop(() => traffic.alertStageStep(), 2_000, 5_000, 6_000),
      loop(() => traffic.rebindStep(), 3_000, 8_000, 4_000),
    ]);

    /** Replaces `old` by a new replica of `release`: started, ready, then `old` out of rotation and SIGTERM. */
    const replacements: { from: string; to: string; readyMs: number; sigtermMs: number | null }[] = [];
    const replace = async (old: Member, release: Release) => {
      const m = spawnMember(release);
      const t0 = Date.now();
      await m.r.start();
      const ready = await waitUntil(async () => lastStatus.get(m.r) === "ready", READY_BOUND_MS);
      checker.check(
        `${m.r.name} (${release} release) started on schema ${own.number} and answered ready`,
        ready,
        `${((Date.now() - t0) / 1000).toFixed(1)} s`,
      );
      old.stopping = true;
      await sleep(600); // the load balancer's next round has taken it out
      const exit = await old.r.stop("SIGTERM");
      fleet.splice(fleet.indexOf(old), 1);
      retired.push(old);
      replacements.push({
        from: old.r.name,
        to: m.r.name,
        readyMs: Date.now() - t0,
        sigtermMs: exit?.tookMs ?? null,
      });
    };

    await sleep(PHASES.previous * 1000);

    say(
      "runbook, Rolling upgrade, step 2: Migrate (this release's npm run db:migrate) while the previous replicas run",
    );
    enter("upgrade");
    const m1 = await migrateWith(projectRoot, url);
    checker.check(
      "this release's migrations applied under traffic",
      m1.code === 0,
      `${(m1.ms / 1000).toFixed(1)} s`,
    );
    if (m1.code !== 0) throw new Error(`this release's migrations failed: ${m1.out.slice(-2000)}`);
    const migratedAt = Date.now();
    // As on a deployment, the write probe has passed (this release's readiness asks, migration 000037).
    await confirmContract(db, emulator.host);
    const { rows: win } = await db.query<{ newest: string; floor: string | null }>(
      "select newest_migration as newest, contract_floor as floor from bitrix_sync.status_schema",
    );
    checker.check(
      `the schema (${win[0]?.newest}) keeps the previous release (schema ${previousSchema}) inside its window: no contract floor above it`,
      win[0]?.newest === own.number && (win[0]?.floor ?? null) === null,
      `contract floor ${win[0]?.floor ?? "none"}`,
    );

    say(
      "runbook, Rolling upgrade, steps 3-4: roll forward, one replica at a time (start this release's, ready, stop the previous one)",
    );
    enter("forward");
    for (const old of fleet.filter((m) => m.release === "previous")) await replace(old, "this");
    enter("this");
    await sleep(PHASES.this * 1000);

    say("runbook, Rolling back, step 4: the previous binary on this schema, one replica at a time");
    enter("back");
    for (const m of fleet.filter((x) => x.release === "this")) await replace(m, "previous");
    enter("rolled-back");
    const rolledBackAt = await dbNow();
    const logMark = emulator.log.length;
    await sleep(PHASES.rolledBack * 1000);
    const beforePauseAt = await dbNow();
    // What the previous release did alone on this release's schema, both ways.
    const { rows: alone } = await db.query<{ intents: number; webhooks: number; lag: number | null }>(
      `select (select count(*) from han_app.sync_queue where status = 'processed' and completed_at >= $1 and completed_at < $2)::int as intents,
              (select count(*) from bitrix_sync.webhook_inbox where status = 'processed' and processed_at >= $1 and processed_at < $2)::int as webhooks,
              (select extract(epoch from max(completed_at - created_at)) from han_app.sync_queue
                where status = 'processed' and completed_at >= $1 and completed_at < $2)::float8 as lag`,
      [rolledBackAt, beforePauseAt],
    );
    const aloneWrites = emulator.log
      .slice(logMark)
      .flatMap((e) => e.commands)
      .filter((c) => WRITES.has(c)).length;
    checker.check(
      "the previous release alone on this schema synced both ways: App intents processed, robot webhooks processed, writes to the portal",
      (alone[0]?.intents ?? 0) > 0 && (alone[0]?.webhooks ?? 0) > 0 && aloneWrites > 0,
      `${alone[0]?.intents} intents, ${alone[0]?.webhooks} webhooks, ${aloneWrites} writes in ${PHASES.rolledBack} s; slowest intent ${(alone[0]?.lag ?? 0).toFixed(1)} s`,
    );

    say("the portal starts failing (503): work goes into retries");
    enter("failing");
    emulator.setOutage({
      kind: "http_error",
      status: 503,
      error: "SERVICE_UNAVAILABLE",
      description: "Service temporarily unavailable",
    });
    const failingFrom = await dbNow();
    await sleep(PHASES.beforePause * 1000);

    say("runbook, Rolling back, step 1: Stop claims (pause_sync)");
    enter("pause");
    const paused = await pauseSync(db, "ops:drill", "rollback drill: the portal fails");
    // When the pause took effect: its commit, read in a later transaction. paused_at is its
    // transaction's start, and a claim that began before the commit did not see the pause yet, so
    // an intent folded in between may be claimed and processed rightly (a CI run caught one).
    const pauseCommittedAt = (await db.query<{ at: Date }>("select now() as at")).rows[0]?.at as Date;
    const t0 = Date.now();
    const drained = await waitDrained(db, DRAIN_BOUND_MS);
    const drainMs = Date.now() - t0;
    checker.check(
      `runbook, step 2: drained within the bound (${DRAIN_BOUND_MS / 1000} s)`,
      drained,
      `${(drainMs / 1000).toFixed(1)} s`,
    );
    const drainedAt = await dbNow();
    const drainedMark = emulator.log.length;
    const until = paused.pausedAt.getTime() + PAUSE_SEC * 1000;
    while ((await dbNow()).getTime() < until) await sleep(1_000);

    say("runbook, Rolling back, step 5: resume_preview, then resume_sync");
    const preview = await resumePreview(db);
    const previewOf = (section: string, item?: string) =>
      preview
        .filter((p) => p.section === section && (item === undefined || p.item === item))
        .reduce((a, p) => a + p.count, 0);
    const resumeAtMark = emulator.log.length;
    const resumeCutoff = await dbNow();
    // Rows first tried before the pause, still open: past their horizon without the pause's time.
    const { rows: atRisk } = await db.query<{ kind: string; id: string; attempts: number }>(
      `select 'command' as kind, id::text, attempt_count as attempts from bitrix_sync.crm_commands
        where first_sent_at < $1 and status in ('retry_wait', 'uncertain', 'reconcile', 'pending')
       union all
       select 'webhook', id::text, attempt_count from bitrix_sync.webhook_inbox
        where received_at < $1 and status in ('retry_wait', 'received')
       union all
       select 'workflow', id::text, attempt_count from bitrix_sync.workflow_instances
        where created_at < $1 and state in ('waiting_retry', 'waiting_crm', 'running', 'created')`,
      [paused.pausedAt],
    );
    await resumeSync(db, "ops:drill", "rollback drill: resumed", paused.pauseId);
    const { rows: resumedRow } = await db.query<{ at: Date }>(
      "select resumed_at as at from bitrix_sync.sync_pauses where id = $1",
      [paused.pauseId],
    );
    const resumedAt = resumedRow[0]?.at as Date;
    enter("resumed");
    const pausedSec = (resumedAt.getTime() - paused.pausedAt.getTime()) / 1000;
    checker.check(
      `the pause outlasted the retry horizon (${HORIZON_SEC} s)`,
      pausedSec > HORIZON_SEC,
      `${pausedSec.toFixed(1)} s paused`,
    );
    await sleep(FAILING_AFTER_RESUME_MS);
    emulator.setOutage(null);
    const portalBackAt = Date.now();
    say("the portal answers again");

    // The gate: nothing was claimed between the drain and the resume, by any replica.
    const writesPaused = emulator.log
      .slice(drainedMark, resumeAtMark)
      .flatMap((e) => e.commands)
      .filter((c) => WRITES.has(c)).length;
    const { rows: moved } = await db.query<{ intents: number; webhooks: number; commands: number }>(
      `select (select count(*) from han_app.sync_queue where completed_at > $1 and completed_at < $2)::int as intents,
              (select count(*) from bitrix_sync.webhook_inbox where processed_at > $1 and processed_at < $2)::int as webhooks,
              (select count(*) from bitrix_sync.crm_commands where completed_at > $1 and completed_at < $2)::int as commands`,
      [drainedAt, resumedAt],
    );
    checker.check(
      "the pause held every replica of the previous release: nothing claimed, completed or written to the portal between the drain and the resume",
      writesPaused === 0 && moved[0]?.intents === 0 && moved[0]?.webhooks === 0 && moved[0]?.commands === 0,
      `${writesPaused} writes, ${JSON.stringify(moved[0])}`,
    );

    const backlogFrom = Date.now();
    const backlogDrained = await waitUntil(
      async () => Number((await db.query<{ n: string }>(OPEN_BEFORE, [resumedAt])).rows[0]?.n ?? 1) === 0,
      SETTLE_BOUND_MS,
    );
    const backlogMs = Date.now() - backlogFrom + FAILING_AFTER_RESUME_MS;
    checker.check(
      "the backlog of the pause drained after the resume",
      backlogDrained,
      `${(backlogMs / 1000).toFixed(1)} s after the resume (${((Date.now() - portalBackAt) / 1000).toFixed(1)} s after the portal answered again)`,
    );
    const resumeRequests = emulator.log.slice(resumeAtMark).length;

    await sleep(PHASES.afterResume * 1000);
    trafficOn = false;
    await loops;
    await traffic.drain();
    enter("settle");

    say("runbook, Rolling back, step 6: Look (the work settles; one forced reconciliation run of each kind)");
    let settled = await settle(db, SETTLE_BOUND_MS);
    checker.check("the work settled", settled);
    // Nothing lost before any reconciliation: the robot's calls and the App's intents carried it all.
    const early = await checkInvariants(
      db,
      emulator,
      SANDBOX_FIELDS,
      traffic.sharedPhone,
      traffic.managerPhones,
    );
    // A rebound user's CRM-master fields follow the Contact it was moved to once that Contact is read
    // (a webhook for it, or the reconciliation): the rebind's own convergence, checked after the
    // forced reconciliation below with everything else.
    const { rows: reboundRows } = await db.query<{ id: string }>(
      "select distinct entity_id::text as id from bitrix_sync.entity_external_mapping where close_reason = 'rebound'",
    );
    const rebound = [...new Set(reboundRows.map((r) => r.id))];
    const earlyViolations = early.violations.filter(
      (v) => !/App (full_name|email|citizenship) differs/.test(v) || !rebound.some((id) => v.includes(id)),
    );
    checker.check(
      "nothing lost before any forced reconciliation: every App change in the portal, every CRM edit in the App, nothing open or dead-lettered",
      earlyViolations,
      `${early.users.active} active users, ${early.contacts} Contacts; ${early.violations.length - earlyViolations.length} CRM-master differences of rebound users left to the reconciliation`,
    );
    if (earlyViolations.length > 0) {
      // The story of the users the first violations name (internal IDs, types, states and codes only).
      const named = new Set(
        earlyViolations.flatMap(
          (v) => v.match(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g) ?? [],
        ),
      );
      for (const line of await historyOf(db, [...named])) process.stdout.write(`${line}\n`);
      for (const line of await linksOf(db, emulator, [...named].slice(0, 8)))
        process.stdout.write(`${line}\n`);
    }
    const forcedAt = await dbNow();
    for (const job of ["contacts", "alerts"] as const) {
      let asked = 0;
      const ok = await waitUntil(async () => {
        if (Date.now() - asked > 5_000) {
          asked = Date.now();
          await db.query("select graphile_worker.add_job($1, json_build_object('force', true))", [
            `reconcile_${job}`,
          ]);
        }
        const { rows } = await db.query(
          `select 1 from bitrix_sync.reconciliation_cursors
            where job_type = $2 and last_run_status = 'succeeded' and last_run_started_at >= $1`,
          [forcedAt, job],
        );
        return rows.length > 0;
      }, SETTLE_BOUND_MS);
      checker.check(`the ${job} reconciliation run finished (previous release, this schema)`, ok);
    }
    settled = (await settle(db, SETTLE_BOUND_MS)) && settled;
    sampling = false;
    await samplerDone;
    watch.stop();

    // Readiness, as sampled.
    checker.check(
      "the receivers were never all not ready: in every sampling round some replica answered 200",
      gaps.map((g) => `+${g.at - started} ms (${g.phase}): ${g.answers}`),
      `${samples.length} samples in ${new Set(samples.map((s) => s.at)).size} probes`,
    );
    const lostCalls = Object.entries(traffic.stats.webhooks)
      .filter(([k]) => k === "no_replica" || k === "unanswered" || k.includes("refused"))
      .map(([k, n]) => `${n} robot calls ${k}`);
    checker.check("every robot call found a ready replica and was accepted", lostCalls);
    const afterUpgrade = samples.filter((s) => s.release === "previous" && s.at > migratedAt);
    checker.check(
      "the previous release stayed ready on this release's schema (through the rollback, the pause and the resume)",
      afterUpgrade
        .filter((s) => s.status !== "ready")
        .map((s) => `${s.replica} ${s.status} (${s.problems.join(", ")}) in ${s.phase}`),
      `${afterUpgrade.length} samples`,
    );
    const thisSamples = samples.filter((s) => s.release === "this");
    checker.check(
      "this release's replicas stayed ready once ready",
      thisSamples
        .filter(
          (s, i, all) =>
            s.status !== "ready" &&
            all.slice(0, i).some((x) => x.replica === s.replica && x.status === "ready"),
        )
        .map((s) => `${s.replica} ${s.status} (${s.problems.join(", ")}) in ${s.phase}`),
      `${thisSamples.length} samples`,
    );

    // The pause, afterwards.
    const { rows: pausedWork } = await db.query<{ kind: string; total: number; after: number; open: number }>(
      `select 'intent' as kind, count(*)::int as total,
              count(*) filter (where status = 'processed' and completed_at >= $2)::int as after,
              count(*) filter (where status not in ('processed', 'cancelled'))::int as open
         from han_app.sync_queue where created_at >= $1 and created_at < $2
       union all
       select 'webhook', count(*)::int, count(*) filter (where status = 'processed' and processed_at >= $2)::int,
              count(*) filter (where status <> 'processed')::int
         from bitrix_sync.webhook_inbox where received_at >= $1 and received_at < $2`,
      [paused.pausedAt, resumedAt],
    );
    const pi = pausedWork.find((r) => r.kind === "intent");
    const pw = pausedWork.find((r) => r.kind === "webhook");
    checker.check(
      "every intent and robot webhook recorded during the pause was processed after it",
      (pi?.total ?? 0) > 0 &&
        (pw?.total ?? 0) > 0 &&
        pi?.open === 0 &&
        pw?.open === 0 &&
        pw.after === pw.total,
      `${pi?.total} intents (${pi?.after} processed after the resume, the rest folded into workflows or superseded), ${pw?.total} webhooks (${pw?.after} after)`,
    );
    const { rows: processedDuring } = await db.query<{ n: number }>(
      "select count(*)::int as n from han_app.sync_queue where created_at >= $1 and created_at < $2 and completed_at < $2",
      [pauseCommittedAt, resumedAt],
    );
    checker.check(
      "no intent recorded during the pause was processed before the resume",
      processedDuring[0]?.n === 0,
    );
    const { rows: again } = await db.query<{ kind: string; n: number; dead: number }>(
      `with r(kind, id, attempts) as (select * from unnest($1::text[], $2::text[], $3::int[]))
       select r.kind, count(*)::int as n,
              count(*) filter (where coalesce(c.status, w.status, f.state) in ('dead', 'dead_letter', 'failed'))::int as dead
         from r
         left join bitrix_sync.crm_commands c on r.kind = 'command' and c.id::text = r.id and c.attempt_count > r.attempts
         left join bitrix_sync.webhook_inbox w on r.kind = 'webhook' and w.id::text = r.id and w.attempt_count > r.attempts
         left join bitrix_sync.workflow_instances f on r.kind = 'workflow' and f.id::text = r.id and f.attempt_count > r.attempts
        where c.id is not null or w.id is not null or f.id is not null
        group by r.kind`,
      [atRisk.map((r) => r.kind), atRisk.map((r) => r.id), atRisk.map((r) => r.attempts)],
    );
    const triedAgain = again.reduce((a, r) => a + r.n, 0);
    const { rows: dl } = await db.query<{ code: string | null; n: number }>(
      "select error_code as code, count(*)::int as n from bitrix_sync.technical_dead_letters group by 1",
    );
    checker.check(
      "no dead letter, none from the pause (retry_horizon_exceeded), though rows past their nominal horizon failed again after the resume",
      dl.map((r) => `${r.n} dead letters ${r.code}`),
      `${atRisk.length} rows first tried before the pause were open at the resume; ${triedAgain} of them tried again (${again.map((r) => `${r.n} ${r.kind}s`).join(", ") || "none"}), none dead-lettered`,
    );

    // The end state, against the portal.
    checker.check(
      "no duplicate Contact at any moment (one user id per Contact, one Contact per phone)",
      [...watch.seen.values()],
      `${watch.samples} samples`,
    );
    const inv = await checkInvariants(
      db,
      emulator,
      SANDBOX_FIELDS,
      traffic.sharedPhone,
      traffic.managerPhones,
    );
    for (const [group, list] of byInvariant(inv.violations)) {
      if (group === "other" && list.length === 0) continue;
      checker.check(group, list);
    }
    if (inv.violations.length > 0 && earlyViolations.length === 0) {
      const named = new Set(
        inv.violations.flatMap(
          (v) => v.match(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g) ?? [],
        ),
      );
      for (const line of await historyOf(db, [...named])) process.stdout.write(`${line}\n`);
      for (const line of await linksOf(db, emulator, [...named].slice(0, 8)))
        process.stdout.write(`${line}\n`);
    }
    const { rows: syncedTwice } = await db.query<{ id: string; n: number }>(
      `select source_task_id::text as id, count(*)::int as n from bitrix_sync.workflow_instances
        where source_task_id is not null group by 1 having count(*) > 1`,
    );
    checker.check(
      "every intent synced once (one workflow per intent)",
      syncedTwice.map((r) => `intent ${r.id} has ${r.n} workflows`),
    );
    const adds = emulator.log.flatMap((e) => e.commands).filter((c) => c === "crm.contact.add").length;

    for (const { r } of fleet) await r.stop("SIGTERM");
    const all = [...retired, ...fleet];
    const outputs = new Map(all.map(({ r }) => [r.name, r.text()]));
    const errors = new Map<string, Map<string, number>>();
    for (const { r, release } of all) {
      const e = errors.get(release) ?? new Map<string, number>();
      for (const [k, n] of errorEvents(r.text())) e.set(k, (e.get(k) ?? 0) + n);
      errors.set(release, e);
    }
    const losing = /crash|dead_letter|lost|duplicate|unhandled|uncaught/i;
    checker.check(
      "no error that loses or duplicates work (crash, dead letter, lost, duplicate) in either release's logs",
      [...errors].flatMap(([release, e]) =>
        [...e].filter(([k]) => losing.test(k)).map(([k, n]) => `${release}: ${n} x ${k}`),
      ),
    );
    checker.check(
      "no personal data or secret in any replica's output",
      checkOutput(outputs, traffic.personal, [...Object.values(tokens), emulator.secret, password]),
    );
    const kept = keepLogs(
      all.map(({ r }) => ({ name: r.name, text: () => r.text() })),
      checker.violations,
      join(tmpdir(), `bitrix-sync-drill-rollback-logs-${Date.now()}`),
    );
    if (kept) say(`replica logs kept in ${kept}`);

    const byRelease = (rel: Release) => {
      const out: Record<string, number> = {};
      for (const x of samples.filter((s) => s.release === rel)) {
        const k = x.status === "ready" ? "ready" : `${x.status}: ${x.problems.join("+")}`;
        out[k] = (out[k] ?? 0) + 1;
      }
      return out;
    };
    const result = {
      mode: SHORT ? "short" : "full",
      previous: sha.slice(0, 12),
      previousSchema,
      schema: own.number,
      replicas: REPLICAS,
      previousInstallSeconds: Number((previous.ms / 1000).toFixed(1)),
      previousCached: previous.cached,
      frozenCompared: frozen.compared.length,
      migrateSeconds: Number((m1.ms / 1000).toFixed(1)),
      replacements: replacements.map((x) => ({ ...x, readyMs: x.readyMs, sigtermMs: x.sigtermMs })),
      readiness: { previous: byRelease("previous"), this: byRelease("this") },
      allNotReadyRounds: gaps.length,
      previousAlone: { ...alone[0], writes: aloneWrites, seconds: PHASES.rolledBack },
      pause: {
        horizonSec: HORIZON_SEC,
        pausedSec: Number(pausedSec.toFixed(1)),
        drainSeconds: Number((drainMs / 1000).toFixed(1)),
        failingBeforePauseSec: Number(
          ((paused.pausedAt.getTime() - failingFrom.getTime()) / 1000).toFixed(1),
        ),
        inHandAtPause: paused.inHand,
        preview: {
          uncertainCommands: previewOf("uncertain_commands"),
          queuePending: previewOf("queue"),
          webhooks: previewOf("webhooks"),
          sections: [...new Set(preview.map((p) => p.section))],
        },
        openAtResumeFirstTriedBefore: atRisk.length,
        triedAgainAfterResume: triedAgain,
        intentsDuringPause: pi?.total ?? 0,
        webhooksDuringPause: pw?.total ?? 0,
        backlogDrainSeconds: Number((backlogMs / 1000).toFixed(1)),
        requestsAfterResume: resumeRequests,
        cutoff: resumeCutoff.toISOString(),
      },
      webhooks: traffic.stats.webhooks,
      app: traffic.stats.app,
      crmEdits: traffic.stats.crmEdits,
      rebinds: traffic.stats.rebinds,
      contactAdds: adds,
      contacts: inv.contacts,
      users: inv.users,
      alerts: inv.alerts,
      duplicates: inv.duplicates + watch.seen.size,
      lostIntents: inv.lostIntents,
      deadLetters: dl.reduce((a, r) => a + r.n, 0),
      errorEvents: Object.fromEntries([...errors].map(([v, e]) => [v, Object.fromEntries(e)])),
      phases: phases.map((p) => `${p.name} +${((p.at - started) / 1000).toFixed(0)}s`),
      load: loads(),
      violations: checker.violations,
      wallSeconds: Number(((Date.now() - started) / 1000).toFixed(1)),
    };
    process.stdout.write(
      `\n${checker.results.length} invariants checked, ${checker.violations} violated\nDRILL_RESULT ${JSON.stringify(result)}\n`,
    );
    return checker.violations === 0 ? 0 : 1;
  } finally {
    sampling = false;
    await samplerDone.catch(() => undefined);
    for (const { r } of [...fleet, ...retired]) r.child?.kill("SIGKILL");
    await pool?.end().catch(() => undefined);
    await emulator.close().catch(() => undefined);
    await dropDatabase(name);
    rmSync(dir, { recursive: true, force: true });
  }
}

main().then(
  (code) => process.exit(code),
  (e) => {
    process.stderr.write(
      `drill:rollback failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`,
    );
    process.exit(2);
  },
);
