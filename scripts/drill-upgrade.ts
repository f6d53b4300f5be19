// `npm run drill:upgrade -- --from <git ref>` (default 6156766, the release of 000027; `--short` for
// the CI mode): a rolling upgrade across a migration, as docs/runbook.md ("Rolling upgrade") does it.
// Replicas of the earlier release (a checkout of the ref with its own npm ci, cached under
// .drill-cache/) run on one database under App and CRM traffic; this release's migrations are
// applied while they run (`npm run db:migrate`); replicas of this release start beside them, then
// the earlier ones stop. Every replica's /health/ready is sampled throughout and compared with the
// schema it answered about. The checker prints every invariant it verified: the released migrations
// unchanged, no duplicate Contact at any moment, every intent synced once, nothing lost, no error that
// loses or duplicates work, readiness honest. Exit 1 on a violation, 2 when the drill itself failed.
import { execFile } from "node:child_process";
import { randomBytes, randomInt } from "node:crypto";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import pg from "pg";
import { SANDBOX_FIELDS } from "../src/config/env.js";
import { projectRoot } from "../src/local/project-root.js";
import { startEmulator } from "../tools/emulator/server.js";
import { DEFAULT_ALERT_SETTINGS } from "../tools/emulator/store.js";
import { ALERT_NUMBER_FIELD, ALERT_PROCESS, checkInvariants, checkOutput, openWork } from "./chaos/checks.js";
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
import { errorEvents } from "./drill/process.js";
import { frozenMigrations, migrateWith, newestHash, releaseCheckout, resolveRef } from "./drill/release.js";

/** The commit that released migration 000027. */
export const DEFAULT_FROM = "6156766";

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const run = promisify(execFile);
const SHORT = process.argv.includes("--short") || process.env.DRILL_SHORT === "1";
const FROM = arg("--from") ?? process.env.DRILL_FROM ?? DEFAULT_FROM;
/** Seconds of traffic: the earlier release alone, both together, this release alone. */
const PHASES = SHORT ? { old: 6, both: 6, now: 4 } : { old: 60, both: 60, now: 60 };
const REPLICAS = SHORT ? 1 : 2;
const SETTLE_BOUND_MS = 120_000;
const say = sayer("drill:upgrade");
const started = Date.now();

const SETTINGS: Record<string, unknown> = {
  ...DRILL_SETTINGS,
  "alerts.entity_type_id": ALERT_PROCESS.entityTypeId,
  "alerts.category_id": 7,
  "alerts.stage_new": ALERT_PROCESS.stages.open[0],
  "alerts.stage_resolved": ALERT_PROCESS.stages.resolved,
  "alerts.stage_closed_without_resolution": ALERT_PROCESS.stages.closed,
  "alerts.fields": DEFAULT_ALERT_SETTINGS["alerts.fields"],
  "alerts.reconcile_interval_sec": 60,
};

type Version = "earlier" | "this";

interface Sample {
  at: number;
  version: Version;
  replica: string;
  status: string;
  problems: string[];
  /** The release's own newest migration was applied when it answered (read right after). */
  ownApplied: boolean;
  /** The schema had migrations the release does not know. */
  schemaAhead: boolean;
}

async function main(): Promise<number> {
  const checker = new Checker();
  const sha = await resolveRef(FROM);
  say(
    `mode ${SHORT ? "short" : "full"}: from ${FROM} (${sha.slice(0, 12)}) to this checkout; ${REPLICAS} replica(s) of each`,
  );

  // The before-stop discipline: the released migrations are this checkout's, byte for byte.
  say(
    "runbook, Rolling upgrade, step 1: Check the released migrations (the earlier release's committed files, byte for byte)",
  );
  const frozen = await frozenMigrations(sha);
  // The runbook's command, word for word: deleted, modified or renamed files of the earlier release.
  const diff = await run(
    "git",
    ["diff", "--diff-filter=DMR", "--name-only", sha, "--", "migrations/committed/"],
    {
      cwd: projectRoot,
    },
  );
  checker.check(
    "git diff --diff-filter=DMR --name-only <earlier> -- migrations/committed/ prints nothing",
    diff.stdout.split("\n").filter((l) => l.trim() !== ""),
  );
  checker.check(
    "the earlier release's committed migrations are unchanged here, byte for byte",
    frozen.violations,
    `${frozen.compared.length} files, ${frozen.compared[0]} to ${frozen.compared.at(-1)}`,
  );

  const earlier = await releaseCheckout(sha, say);
  say(
    `earlier release ${earlier.cached ? "from the cache" : "installed"} in ${(earlier.ms / 1000).toFixed(1)} s: ${earlier.dir}`,
  );
  const ownHash: Record<Version, string> = {
    earlier: newestHash(earlier.dir),
    this: newestHash(projectRoot),
  };

  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-drill-upgrade-"));
  chmodSync(dir, 0o755);
  const name = `bs_drill_upgrade_${randomBytes(5).toString("hex")}`;
  const replicas: { r: Replica; version: Version }[] = [];
  process.on("exit", () => {
    for (const { r } of replicas) r.child?.kill("SIGKILL");
  });
  const emulator = await startEmulator({
    fields: SANDBOX_FIELDS,
    rate: { drainPerSec: 2, threshold: 50 },
    operating: { limitSec: 480, windowMs: 10_000, bucketMs: 1_000 },
  });
  const tokens = newTokens();
  const samples: Sample[] = [];
  let sampling: NodeJS.Timeout | null = null;
  let pool: pg.Pool | null = null;
  try {
    // The database at the earlier release, migrated by the earlier release's own script.
    const url = await createDatabase(name);
    const m0 = await migrateWith(earlier.dir, url);
    if (m0.code !== 0) throw new Error(`the earlier release's migrations failed: ${m0.out.slice(-400)}`);
    const { serviceUrl, password } = await prepareDatabase(url, SETTINGS);
    pool = new pg.Pool({ connectionString: url, max: 6, application_name: "drill-upgrade" });
    pool.on("error", () => undefined);
    const db = pool;

    const envOf = (tag: string) => replicaEnv(dir, tag, serviceUrl, emulator, tokens);
    for (let i = 0; i < REPLICAS; i++)
      replicas.push({
        r: new Replica(`earlier-${i + 1}`, envOf("earlier"), earlier.dir),
        version: "earlier",
      });
    await Promise.all(replicas.map(({ r }) => r.start()));
    say(`earlier replicas listening on ${replicas.map(({ r }) => r.port).join(", ")}`);

    // The load balancer: the replicas whose last readiness answer was ready get the robot's calls.
    const rotation: Replica[] = [];
    const stopping = new Set<Replica>();
    const lastStatus = new Map<Replica, string>();
    const sampleOnce = async () => {
      // A replica being stopped answers for its shutdown (pools closing), not for the upgrade.
      const running = replicas.filter(({ r }) => r.port !== null && !stopping.has(r));
      const answers = await Promise.all(
        running.map(async ({ r, version }) => {
          try {
            const res = await fetch(`http://127.0.0.1:${r.port}/health/ready`, {
              signal: AbortSignal.timeout(3_000),
            });
            const body = (await res.json()) as { status?: string; problems?: string[] };
            return { r, version, status: body.status ?? `http_${res.status}`, problems: body.problems ?? [] };
          } catch {
            return { r, version, status: "no_answer", problems: [] as string[] };
          }
        }),
      );
      const { rows } = await db.query<{ hash: string }>("select hash from graphile_migrate.migrations");
      const applied = new Set(rows.map((x) => x.hash));
      const { rows: newest } = await db.query<{ hash: string }>(
        "select hash from graphile_migrate.migrations order by date desc, filename desc limit 1",
      );
      for (const a of answers) {
        samples.push({
          at: Date.now(),
          version: a.version,
          replica: a.r.name,
          status: a.status,
          problems: a.problems,
          ownApplied: applied.has(ownHash[a.version]),
          schemaAhead: newest[0]?.hash !== ownHash[a.version] && applied.has(ownHash[a.version]),
        });
        lastStatus.set(a.r, a.status);
      }
      rotation.splice(
        0,
        rotation.length,
        ...replicas.map(({ r }) => r).filter((r) => r.port !== null && lastStatus.get(r) === "ready"),
      );
    };
    sampling = setInterval(() => void sampleOnce().catch(() => undefined), 500);
    await sampleOnce();

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

    await sleep(PHASES.old * 1000);
    say(
      "runbook, Rolling upgrade, step 2: Migrate (this release's npm run db:migrate) while the earlier replicas run",
    );
    const migratedFrom = Date.now();
    const m1 = await migrateWith(projectRoot, url);
    checker.check(
      "this release's migrations applied under traffic",
      m1.code === 0,
      `${(m1.ms / 1000).toFixed(1)} s`,
    );
    if (m1.code !== 0) throw new Error(`this release's migrations failed: ${m1.out.slice(-2000)}`);
    // This release's readiness asks whether the portal's contract was confirmed (migration 000036):
    // as on a deployment, the write probe has passed before the new replicas start.
    await confirmContract(db, emulator.host);
    const lockRetries = (m1.out.match(/lock conflict/g) ?? []).length;
    const migratedAt = Date.now();

    say(
      "runbook, Rolling upgrade, step 3: Start the new replicas (this release's), one at a time, each until ready",
    );
    const startedNew: number[] = [];
    const startNew = (async () => {
      for (let i = 0; i < REPLICAS; i++) {
        const r = new Replica(`this-${i + 1}`, envOf("this"));
        replicas.push({ r, version: "this" });
        await r.start();
        await waitUntil(async () => lastStatus.get(r) === "ready", 30_000);
        startedNew.push(Date.now());
      }
    })();
    // Meanwhile an earlier replica restarts (a crash, a drained node): it starts on the newer schema.
    const restartOld = replicas.find(({ version }) => version === "earlier")?.r;
    let oldRestarted = true;
    let oldRestartError = "";
    const restart = (async () => {
      if (!restartOld) return;
      say("an earlier replica restarts on the newer schema");
      stopping.add(restartOld);
      await restartOld.stop("SIGTERM");
      stopping.delete(restartOld);
      try {
        await restartOld.start();
      } catch (e) {
        oldRestarted = false;
        oldRestartError = e instanceof Error ? e.message : String(e);
      }
    })();
    await Promise.all([startNew, restart]);
    await sleep(PHASES.both * 1000);

    say(
      "runbook, Rolling upgrade, step 4: Stop the old replicas (the earlier release's), one at a time, with SIGTERM",
    );
    const sigterms: number[] = [];
    for (const { r, version } of replicas) {
      if (version !== "earlier") continue;
      stopping.add(r);
      const exit = await r.stop("SIGTERM");
      if (exit?.tookMs !== null && exit?.tookMs !== undefined) sigterms.push(exit.tookMs);
      await sleep(1_000);
    }
    await sleep(PHASES.now * 1000);
    trafficOn = false;
    await loops;
    await traffic.drain();

    say(
      "runbook, Rolling upgrade, step 5: Look (the work drains; the drill also forces one reconciliation run of each kind)",
    );
    let settled = await settle(db, SETTLE_BOUND_MS);
    const { rows: nowRows } = await db.query<{ now: Date }>("select now()");
    const forcedAt = nowRows[0]?.now as Date;
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
      checker.check(`the ${job} reconciliation run finished after the upgrade`, ok);
    }
    settled = (await settle(db, SETTLE_BOUND_MS)) && settled;
    checker.check("the work settled after the upgrade", settled);
    // The runbook's look, as bitrix_sync_admin.
    const look = await db.connect();
    try {
      await look.query("begin");
      await look.query("set local role bitrix_sync_admin");
      const q = await look.query<{ status: string; count: string }>("select * from bitrix_sync.status_queue");
      const w = await look.query<{ workflow_type: string; state: string; count: string }>(
        "select * from bitrix_sync.status_workflows",
      );
      const d = await look.query<{ source: string; error_code: string }>(
        "select * from bitrix_sync.list_dead_letters()",
      );
      await look.query("commit");
      checker.check("step 5: status_queue and status_workflows drained, list_dead_letters() empty", [
        ...q.rows.filter((r) => Number(r.count) > 0).map((r) => `queue ${r.status}: ${r.count}`),
        ...w.rows.map((r) => `workflows ${r.workflow_type}/${r.state}: ${r.count}`),
        ...d.rows.map((r) => `dead letter ${r.source} ${r.error_code}`),
      ]);
    } finally {
      look.release();
    }
    if (sampling) clearInterval(sampling);
    sampling = null;
    watch.stop();

    // Readiness, as sampled.
    const lie = (s: Sample) => s.status === "ready" && !s.ownApplied;
    checker.check(
      "no replica of either release answered ready while its migrations were not applied",
      samples.filter(lie).map((s) => `${s.replica} ready at +${s.at - started} ms without its migrations`),
      `${samples.length} samples`,
    );
    checker.check(
      "this release answered not ready (migrations_pending) only while its migrations were not applied",
      samples
        .filter((s) => s.version === "this" && s.problems.includes("migrations_pending") && s.ownApplied)
        .map(
          (s) => `${s.replica} said migrations_pending at +${s.at - started} ms with its migrations applied`,
        ),
    );
    const thisNotReady = samples.filter(
      (s) =>
        s.version === "this" && s.ownApplied && s.at > Math.max(...startedNew, 0) && s.status !== "ready",
    );
    checker.check(
      "this release's replicas stayed ready once started, on a schema with their migrations",
      thisNotReady.map((s) => `${s.replica} ${s.status} (${s.problems.join(", ")}) at +${s.at - started} ms`),
    );
    checker.check(
      "the earlier release answered ready before the migration",
      samples
        .filter((s) => s.version === "earlier" && s.at < migratedFrom && s.status !== "ready")
        .map((s) => `${s.replica} ${s.status} (${s.problems.join(", ")})`),
    );
    // While the migration runs, its locks may hold the inbox's writes: not ready for a timeout then
    // is the truth. After it, the only reason the earlier release may give is its own rule.
    const oldAhead = samples.filter((s) => s.version === "earlier" && s.schemaAhead && s.at > migratedAt);
    const oldAheadNotReady = oldAhead.filter((s) => s.status !== "ready");
    const oldNotReadyProblems = new Set(oldAheadNotReady.flatMap((s) => s.problems));
    checker.check(
      "the earlier release after the migration: not ready only for migrations_pending (its rule: the newest migration must be its own), never for a failure",
      [...oldNotReadyProblems].filter((p) => p !== "migrations_pending").map((p) => `not ready for ${p}`),
      `${oldAheadNotReady.length} of ${oldAhead.length} samples not ready`,
    );
    // Out of rotation: from the migration until the first replica of this release was ready, the
    // robot's calls found no ready replica when the earlier release reports a newer schema as pending.
    const gapMs =
      oldAheadNotReady.length > 0 && startedNew.length > 0 ? (startedNew[0] as number) - migratedAt : 0;
    checker.check(
      "the earlier release kept working on the newer schema (its restart started and listened)",
      oldRestarted,
      oldRestartError || "restarted",
    );

    // The work, against the portal's final state.
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
    const { rows: syncedTwice } = await db.query<{ id: string; n: number }>(
      `select source_task_id::text as id, count(*)::int as n from bitrix_sync.workflow_instances
        where source_task_id is not null group by 1 having count(*) > 1`,
    );
    checker.check(
      "every intent synced once (one workflow per intent)",
      syncedTwice.map((r) => `intent ${r.id} has ${r.n} workflows`),
    );
    const adds = emulator.log.flatMap((e) => e.commands).filter((c) => c === "crm.contact.add").length;

    for (const { r } of replicas) await r.stop("SIGTERM");
    const outputs = new Map(replicas.map(({ r }) => [r.name, r.text()]));
    const errors = new Map<string, Map<string, number>>();
    for (const { r, version } of replicas) {
      const e = errors.get(version) ?? new Map<string, number>();
      for (const [k, n] of errorEvents(r.text())) e.set(k, (e.get(k) ?? 0) + n);
      errors.set(version, e);
    }
    const losing = /crash|dead_letter|lost|duplicate|unhandled|uncaught/i;
    checker.check(
      "no error that loses or duplicates work (crash, dead letter, lost, duplicate) in either release's logs",
      [...errors].flatMap(([version, e]) =>
        [...e].filter(([k]) => losing.test(k)).map(([k, n]) => `${version}: ${n} x ${k}`),
      ),
    );
    checker.check(
      "no personal data or secret in any replica's output",
      checkOutput(outputs, traffic.personal, [...Object.values(tokens), emulator.secret, password]),
    );
    const open = await openWork(db);

    const byVersion = (v: Version) => {
      const s = samples.filter((x) => x.version === v);
      const out: Record<string, number> = {};
      for (const x of s) {
        const k = x.status === "ready" ? "ready" : `${x.status}: ${x.problems.join("+")}`;
        out[k] = (out[k] ?? 0) + 1;
      }
      return out;
    };
    const result = {
      mode: SHORT ? "short" : "full",
      from: sha.slice(0, 12),
      replicasEach: REPLICAS,
      earlierInstallSeconds: Number((earlier.ms / 1000).toFixed(1)),
      earlierCached: earlier.cached,
      frozenCompared: frozen.compared.length,
      migrateSeconds: Number((m1.ms / 1000).toFixed(1)),
      migrateLockRetries: lockRetries,
      readiness: { earlier: byVersion("earlier"), this: byVersion("this") },
      outOfRotationSeconds: Number((gapMs / 1000).toFixed(1)),
      sigtermMaxMs: Math.max(0, ...sigterms),
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
      errorEvents: Object.fromEntries([...errors].map(([v, e]) => [v, Object.fromEntries(e)])),
      openWork: open,
      violations: checker.violations,
      wallSeconds: Number(((Date.now() - started) / 1000).toFixed(1)),
    };
    process.stdout.write(
      `\n${checker.results.length} invariants checked, ${checker.violations} violated\nDRILL_RESULT ${JSON.stringify(result)}\n`,
    );
    return checker.violations === 0 ? 0 : 1;
  } finally {
    if (sampling) clearInterval(sampling);
    for (const { r } of replicas) r.child?.kill("SIGKILL");
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
      `drill:upgrade failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`,
    );
    process.exit(2);
  },
);
