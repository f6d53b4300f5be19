// `npm run chaos`: N replicas of the real service (CHAOS_REPLICAS, default 3) on one PostgreSQL
// database and one emulated portal, under App and CRM traffic, with faults injected at random for
// CHAOS_MINUTES (default 1); then the faults stop, the run settles (with one reconciliation run of
// the Contacts and one of the open alerts) and the invariants of docs/reliability.md are checked
// against the portal's final state. Prints the figures; exits 1 on any violation. The database is
// always an embedded PostgreSQL of the run's own (it restarts it), never a shared server.
// `--minutes N` sets the length instead of CHAOS_MINUTES (`npm run chaos -- --minutes 30`: the soak).
// Every replica's resident memory, database sessions and event-loop delay are sampled each minute
// (every 15 s on a short run) and printed as a table; a long run also checks their growth
// (scripts/chaos/soak.ts).
import { randomBytes, randomInt } from "node:crypto";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { SANDBOX_FIELDS } from "../src/config/env.js";
import { type EmbeddedServer, startEmbedded } from "../src/db/embedded.js";
import { migrateDatabase } from "../src/db/migrate.js";
import { startEmulator } from "../tools/emulator/server.js";
import { DEFAULT_ALERT_SETTINGS } from "../tools/emulator/store.js";
import {
  ALERT_NUMBER_FIELD,
  ALERT_PROCESS,
  checkInvariants,
  checkOutput,
  checkRate,
  historyOf,
  openWork,
  unalertedDuplicates,
} from "./chaos/checks.js";
import { Faults, SIGTERM_BOUND_MS } from "./chaos/faults.js";
import { Replica } from "./chaos/replicas.js";
import { Soak } from "./chaos/soak.js";
import { Traffic } from "./chaos/traffic.js";
import { activateSettings } from "./drill/common.js";

const minutesArg = process.argv.indexOf("--minutes");
const MINUTES = Number(
  minutesArg >= 0 ? (process.argv[minutesArg + 1] ?? "") : (process.env.CHAOS_MINUTES ?? "1"),
);
if (!Number.isFinite(MINUTES) || MINUTES <= 0) {
  process.stderr.write("chaos: --minutes (or CHAOS_MINUTES) must be a positive number of minutes\n");
  process.exit(2);
}
const REPLICAS = Number(process.env.CHAOS_REPLICAS ?? "3");
/** Long runs (soaks) get minutes-long outages and slower faults. */
const LONG = MINUTES >= 10;
/** How long the run may take to settle after the last fault before that counts as a violation. */
const SETTLE_BOUND_MS = (LONG ? 300 : 90) * 1000;
const PORTAL_RATE = { drainPerSec: 2, threshold: 50 };
const MEMBER_ID = "chaos-member-0001";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const token = (prefix: string) => `${prefix}-${randomBytes(24).toString("hex")}`;
const loads = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(" ");

function say(line: string) {
  process.stdout.write(`[chaos +${((Date.now() - started) / 1000).toFixed(1)}s] ${line}\n`);
}

const started = Date.now();

/**
 * What a run that ends early must still undo: its replicas and its embedded PostgreSQL (a failed
 * start or a signal used to leave the server running). Set once each exists; the normal end stops
 * them itself.
 */
let emergencyStop: (() => Promise<void>) | null = null;
for (const sig of ["SIGTERM", "SIGINT"] as const) {
  process.once(sig, () => {
    process.stderr.write(`chaos: ${sig}: stopping the replicas and the database\n`);
    void (emergencyStop?.() ?? Promise.resolve()).finally(() => process.exit(sig === "SIGTERM" ? 143 : 130));
  });
}

async function waitUntil(probe: () => Promise<boolean>, boundMs: number): Promise<boolean> {
  const end = Date.now() + boundMs;
  while (Date.now() < end) {
    if (await probe().catch(() => false)) return true;
    await sleep(250);
  }
  return false;
}

async function main(): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-chaos-"));
  // initdb runs as the `postgres` system user when we are root: it must be able to enter the folder.
  chmodSync(dir, 0o755);
  const pgDir = join(dir, "pg");
  const secretsDir = join(dir, "secrets");
  mkdirSync(secretsDir, { mode: 0o700 });
  say(
    `mode ${LONG ? "long" : "short"}: ${MINUTES} min of faults, ${REPLICAS} replicas; load average ${loads()}`,
  );

  let server: EmbeddedServer = await startEmbedded({ dir: pgDir, persistent: true });
  emergencyStop = () => server.stop().catch(() => undefined);
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  await admin.query("create database bitrix_sync_chaos");
  await admin.end();
  const dbUrl = new URL(server.url);
  dbUrl.pathname = "/bitrix_sync_chaos";
  await migrateDatabase(dbUrl.toString());

  const pool = new pg.Pool({
    connectionString: dbUrl.toString(),
    max: 6,
    application_name: "bitrix-sync-chaos",
    connectionTimeoutMillis: 5_000,
  });
  pool.on("error", () => undefined);
  // A connection the faults end (pg_terminate_backend, a restart) can emit 'error' on a pooled
  // client between the pool's own listeners (a 30-minute soak died of one): never the run's end.
  pool.on("connect", (client) => client.on("error", () => undefined));
  await pool.query("select * from bitrix_sync.perform_cutover('chaos')");
  await activateSettings(
    pool,
    {
      "worker.poll_interval_ms": 500,
      "batch.max_wait_ms": 50,
      "lease.ttl_sec": 5,
      "retry.base_ms": 100,
      "retry.max_ms": 2000,
      "reconcile.lease_sec": 60,
      "reconcile.contacts_interval_sec": 60,
      "reconcile.overlap_sec": 10,
      // Business alerts are mirrored into the emulator's smart process (tools/emulator/store.ts).
      "alerts.entity_type_id": ALERT_PROCESS.entityTypeId,
      "alerts.category_id": 7,
      "alerts.stage_new": ALERT_PROCESS.stages.open[0],
      "alerts.stage_resolved": ALERT_PROCESS.stages.resolved,
      "alerts.stage_closed_without_resolution": ALERT_PROCESS.stages.closed,
      // Every item field of §11, as the catalogue requires (alert_number is ALERT_NUMBER_FIELD).
      "alerts.fields": DEFAULT_ALERT_SETTINGS["alerts.fields"],
      // Open alerts are polled every minute (the least allowed): the repair of a lost alert webhook.
      "alerts.reconcile_interval_sec": 60,
    },
    "chaos",
  );
  // The service runs as its runtime role (§13), as deployed.
  const runtimePassword = randomBytes(18).toString("base64url");
  await pool.query(`alter role bitrix_sync_user login password '${runtimePassword}'`);
  const serviceUrl = new URL(dbUrl.toString());
  serviceUrl.username = "bitrix_sync_user";
  serviceUrl.password = runtimePassword;

  const emulator = await startEmulator({
    fields: SANDBOX_FIELDS,
    rate: PORTAL_RATE,
    // A ten-second window of one-second buckets: a blocked method is free again within seconds.
    operating: { limitSec: 480, windowMs: 10_000, bucketMs: 1_000 },
  });
  const secrets: Record<string, string> = {
    BITRIX_SYNC_DATABASE_URL: serviceUrl.toString(),
    BITRIX_SYNC_CRM_REST_WEBHOOK_URL: emulator.url,
    BITRIX_SYNC_CONTACT_RECEIVER_TOKEN: token("contact"),
    BITRIX_SYNC_ALERT_RECEIVER_TOKEN: token("alert"),
    BITRIX_SYNC_SERVICE_TOKEN: token("service"),
    BITRIX_SYNC_HASH_KEY: token("hash"),
  };
  for (const [k, v] of Object.entries(secrets)) writeFileSync(join(secretsDir, k), `${v}\n`, { mode: 0o600 });
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? "",
    HOME: process.env.HOME ?? "/tmp",
    SECRETS_SOURCE: "file",
    BITRIX_SYNC_SECRETS_DIR: secretsDir,
    BITRIX_SYNC_ENABLED: "true",
    BITRIX_SYNC_PORTAL_HOST: emulator.host,
    BITRIX_SYNC_PORTAL_MEMBER_ID: MEMBER_ID,
    BITRIX_SYNC_CONTACT_USER_ID_FIELD: SANDBOX_FIELDS.userId,
    BITRIX_SYNC_CONTACT_REGISTERED_FIELD: SANDBOX_FIELDS.registered,
    BITRIX_SYNC_CONTACT_CITIZENSHIP_FIELD: SANDBOX_FIELDS.citizenship,
    BITRIX_SYNC_HTTP_TIMEOUT_SEC: "2",
    BITRIX_SYNC_MIGRATE_ON_START: "false",
    BITRIX_SYNC_DATA_DIR: join(dir, "data"),
    PORT: "0",
    HOST: "127.0.0.1",
    LOG_LEVEL: "info",
  };
  const replicas = Array.from({ length: REPLICAS }, (_, i) => new Replica(`replica-${i + 1}`, env));
  // However this run ends (a crash of the harness included), no replica outlives it.
  process.on("exit", () => {
    for (const r of replicas) r.child?.kill("SIGKILL");
  });
  emergencyStop = async () => {
    for (const r of replicas) r.child?.kill("SIGKILL");
    await server.stop().catch(() => undefined);
  };
  await Promise.all(replicas.map((r) => r.start()));
  say(`replicas listening on ${replicas.map((r) => r.port).join(", ")}; load average ${loads()}`);

  const traffic = new Traffic(pool, emulator, replicas, {
    token: secrets.BITRIX_SYNC_CONTACT_RECEIVER_TOKEN as string,
    alertToken: secrets.BITRIX_SYNC_ALERT_RECEIVER_TOKEN as string,
    alertEntityTypeId: ALERT_PROCESS.entityTypeId,
    alertStages: ALERT_PROCESS.stages,
    alertNumberField: ALERT_NUMBER_FIELD,
    portalHost: emulator.host,
    memberId: MEMBER_ID,
    userIdField: SANDBOX_FIELDS.userId,
    citizenshipField: SANDBOX_FIELDS.citizenship,
  });
  const faults = new Faults({
    emulator,
    replicas,
    pool,
    long: LONG,
    async restartDatabase(downMs) {
      await server.stop();
      await sleep(downMs);
      server = await startEmbedded({ dir: pgDir, persistent: true });
    },
  });

  const chaosEnd = Date.now() + MINUTES * 60_000;
  let trafficOn = true;
  const appLoop = (async () => {
    while (trafficOn) {
      await traffic.appStep();
      await sleep(randomInt(100, 500));
    }
  })();
  const crmLoop = (async () => {
    await sleep(5_000); // the first Contacts
    while (trafficOn) {
      await traffic.crmStep();
      await sleep(randomInt(300, 1_500));
    }
  })();
  // The CRM team's duplicate Contacts of a new user's phone: one is linked, a business alert raised.
  const duplicatesLoop = (async () => {
    await sleep(10_000);
    while (trafficOn) {
      await traffic.duplicateStep();
      await sleep(randomInt(4_000, 12_000));
    }
  })();
  // Managers work the alerts in the portal: an item moved to another stage, resolved or closed.
  const alertsLoop = (async () => {
    await sleep(20_000); // the first mirrored alerts
    while (trafficOn) {
      await traffic.alertStageStep();
      await sleep(randomInt(2_000, 6_000));
    }
  })();
  // An operator's rebinds: now and then a linked user is moved to the CRM team's duplicate Contact.
  const opsLoop = (async () => {
    await sleep(15_000); // the first links
    while (trafficOn) {
      await traffic.rebindStep();
      await sleep(randomInt(3_000, 10_000));
    }
  })();
  const progress = setInterval(() => {
    say(
      `faults ${JSON.stringify(faults.counts)}; requests ${emulator.log.length}; contacts ${emulator.store.contacts.size}; load average ${loads()}`,
    );
  }, 30_000);

  // The soak's samples, from the start to the end of the faults.
  const soak = new Soak(replicas, pool);
  let soaking = true;
  const soakLoop = (async () => {
    while (soaking) {
      await soak.sample().catch(() => undefined);
      const next = Date.now() + (LONG ? 60_000 : 15_000);
      while (soaking && Date.now() < next) await sleep(500);
    }
  })();

  await faults.run(chaosEnd);
  soaking = false;
  await soakLoop;
  await soak.sample().catch(() => undefined);
  const soakCheck = soak.check(Date.now());
  trafficOn = false;
  traffic.webhookFaults = false;
  await Promise.all([appLoop, crmLoop, duplicatesLoop, alertsLoop, opsLoop]);
  await traffic.drain();
  await faults.settleReplicas();
  clearInterval(progress);
  const lastFault = faults.lastFaultEnd;
  say(`faults stopped; settling; load average ${loads()}`);

  // Settle: the open work drains, then one reconciliation run of each kind, then the work they
  // started drains.
  const idle = async () => Object.values(await openWork(pool)).every((n) => n === 0);
  const settleViolations: string[] = [];
  let settled = await waitUntil(idle, SETTLE_BOUND_MS);
  const { rows: nowRows } = await pool.query<{ now: Date }>("select now()");
  const forcedAt = nowRows[0]?.now as Date;
  // A forced run is skipped while a run a killed replica claimed still holds the cursor (until
  // reconcile.lease_sec): ask again every few seconds, as an operator would.
  // The alerts' run repairs the alert webhooks that were lost or came before their item was known.
  for (const job of ["contacts", "alerts"] as const) {
    let asked = 0;
    const reconciled = await waitUntil(async () => {
      if (Date.now() - asked > 5_000) {
        asked = Date.now();
        await pool.query("select graphile_worker.add_job($1, json_build_object('force', true))", [
          `reconcile_${job}`,
        ]);
      }
      const { rows } = await pool.query(
        `select 1 from bitrix_sync.reconciliation_cursors
          where job_type = $2 and last_run_status = 'succeeded' and last_run_started_at >= $1`,
        [forcedAt, job],
      );
      return rows.length > 0;
    }, SETTLE_BOUND_MS);
    if (!reconciled) settleViolations.push(`the ${job} reconciliation run did not finish`);
  }
  settled = (await waitUntil(idle, SETTLE_BOUND_MS)) && settled;
  const settleMs = Date.now() - lastFault;
  if (!settled) settleViolations.push(`open work left ${SETTLE_BOUND_MS / 1000} s after the last fault`);
  say(`settled in ${(settleMs / 1000).toFixed(1)} s after the last fault; checking`);

  const inv = await checkInvariants(
    pool,
    emulator,
    SANDBOX_FIELDS,
    traffic.sharedPhone,
    traffic.managerPhones,
    ALERT_NUMBER_FIELD,
    ALERT_PROCESS.stages,
  );
  const unalerted = await unalertedDuplicates(pool, traffic.onDuplicates);
  const { rows: rebindRows } = await pool.query<{ status: string; outcome: string | null; n: number }>(
    "select status, outcome, count(*)::int as n from bitrix_sync.rebind_requests group by 1, 2 order by 3 desc",
  );
  const rebindOutcomes = Object.fromEntries(
    rebindRows.map((r) => [r.outcome ? `${r.status}/${r.outcome}` : r.status, r.n]),
  );
  const rate = checkRate(emulator.log, PORTAL_RATE, faults.windows);
  // The users a violation names: their history is printed with the figures.
  const named = new Set([
    ...inv.suspects,
    ...inv.violations.flatMap(
      (v) => v.match(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g) ?? [],
    ),
  ]);
  const history = await historyOf(pool, [...named]);
  if (unalerted.unexplained.length > 0) {
    history.push(
      "users on the CRM team's duplicates without an alert, phone unchanged, never deactivated:",
      ...(await historyOf(pool, unalerted.unexplained)),
    );
  }
  const adds = emulator.log
    .filter((e) => e.commands.includes("crm.contact.add"))
    .map(
      (e) =>
        `  ${new Date(e.at).toISOString().slice(11, 23)} add x${e.commands.filter((m) => m === "crm.contact.add").length} status ${e.status}${e.fault ? ` fault ${e.fault}` : ""} answered ${new Date(e.finishedAt).toISOString().slice(11, 23)}`,
    );
  if (inv.suspects.length > 0) {
    for (const c of inv.suspects.flatMap((u) =>
      [...emulator.store.contacts.values()].filter((x) => x.uf[SANDBOX_FIELDS.userId] === u),
    )) {
      history.push(`Contact ${c.id} created ${new Date(c.createdTime).toISOString().slice(11, 19)}`);
    }
    history.push("contact.add requests:", ...adds);
  }

  for (const r of replicas) await r.stop("SIGTERM");
  const outputs = new Map(replicas.map((r) => [r.name, r.text()]));
  const leaks = checkOutput(outputs, traffic.personal, [
    ...Object.values(secrets),
    emulator.secret,
    runtimePassword,
    new URL(server.url).password,
  ]);
  const violations = [
    ...settleViolations,
    ...faults.problems,
    ...inv.violations,
    ...rate.violations,
    ...leaks,
    ...soakCheck.violations,
  ];

  const byStatus: Record<string, number> = {};
  for (const e of emulator.log) {
    const k = e.status === 0 ? "no answer" : String(e.status);
    byStatus[k] = (byStatus[k] ?? 0) + 1;
  }
  const injected = emulator.log.filter((e) => e.fault !== undefined).length;
  const refusals = emulator.log.filter((e) => e.status !== 200).length;
  const commands = emulator.log.flatMap((e) => e.commands);
  const addCount = commands.filter((m) => m === "crm.contact.add").length;
  const sigtermMax = Math.max(0, ...faults.sigterms.map((x) => x.tookMs ?? 0));
  const result = {
    minutes: MINUTES,
    replicas: REPLICAS,
    replicaStarts: replicas.reduce((a, r) => a + r.starts, 0),
    replicaCrashes: faults.unaskedExits,
    faults: faults.counts,
    webhooks: traffic.stats.webhooks,
    app: traffic.stats.app,
    appFailed: traffic.stats.appFailed,
    crmEdits: traffic.stats.crmEdits,
    phonesAdded: traffic.stats.phonesAdded,
    alerts: inv.alerts,
    alertItems: inv.alertItems,
    alertMoves: traffic.stats.alertMoves,
    alertsFinished: inv.alertsFinished,
    duplicatesUsers: unalerted.users,
    duplicatesAlerted: unalerted.alerted,
    duplicatesUnalerted: {
      phoneChanged: unalerted.phoneChanged,
      deactivated: unalerted.deactivated,
      unexplained: unalerted.unexplained.length,
    },
    rebindRequests: traffic.stats.rebinds,
    rebindOutcomes,
    requests: emulator.log.length,
    requestsByStatus: byStatus,
    refusals,
    injectedFaultRequests: injected,
    bucketRefusals: rate.bucketRefusals,
    maxBucketLevel: Number(rate.maxLevel.toFixed(1)),
    commandsSent: commands.length,
    contactAdds: addCount,
    contacts: inv.contacts,
    users: inv.users,
    duplicates: inv.duplicates,
    lostIntents: inv.lostIntents,
    technicalDeadLetters: inv.technicalDeadLetters,
    sigterms: faults.sigterms.length,
    sigtermMaxMs: sigtermMax,
    sigtermBoundMs: SIGTERM_BOUND_MS,
    settleSeconds: Number((settleMs / 1000).toFixed(1)),
    soakSamples: soak.samples.length,
    soakPeakRssMiB: Math.round(Math.max(0, ...soak.samples.map((x) => x.rssBytes ?? 0)) / 2 ** 20),
    soakPeakSessions: Math.max(0, ...soak.samples.map((x) => x.sessions ?? 0)),
    soakWorstLoopMs: Math.round(Math.max(0, ...soak.samples.map((x) => x.loopMaxSec ?? 0)) * 1000),
    violations: violations.length,
    loadAverage: loads(),
    wallSeconds: Number(((Date.now() - started) / 1000).toFixed(1)),
  };
  process.stdout.write(
    [
      "",
      "chaos run",
      `  faults by kind        ${Object.entries(faults.counts)
        .map(([k, n]) => `${k} ${n}`)
        .join(", ")}`,
      `  replica crashes       ${
        Object.entries(faults.unaskedExits)
          .map(([k, n]) => `${k} ${n}`)
          .join(", ") || "none"
      } (each started again, as an orchestrator would)`,
      `  webhooks              ${Object.entries(traffic.stats.webhooks)
        .map(([k, n]) => `${k} ${n}`)
        .join(", ")}`,
      `  App actions           ${Object.entries(traffic.stats.app)
        .map(([k, n]) => `${k} ${n}`)
        .join(", ")} (refused while the database was away: ${traffic.stats.appFailed})`,
      `  CRM edits             ${traffic.stats.crmEdits} (of them, phone numbers a manager added: ${traffic.stats.phonesAdded})`,
      `  rebinds               asked: ${
        Object.entries(traffic.stats.rebinds)
          .map(([k, n]) => `${k} ${n}`)
          .join(", ") || "none"
      }; requests ended: ${
        Object.entries(rebindOutcomes)
          .map(([k, n]) => `${k} ${n}`)
          .join(", ") || "none"
      }`,
      `  requests              ${result.requests} (${Object.entries(byStatus)
        .map(([k, n]) => `${k}: ${n}`)
        .join(", ")}), ${result.commandsSent} commands, ${addCount} contact.add`,
      `  refusals              ${refusals} (injected ${injected}, by the portal's own limit ${rate.bucketRefusals}); bucket peak ${result.maxBucketLevel}/${PORTAL_RATE.threshold}`,
      `  users                 ${inv.users.active} active, ${inv.users.inactive} inactive; ${inv.contacts} Contacts`,
      `  business alerts       ${inv.alerts} raised, ${inv.alertItems} smart-process items in the portal; items a manager moved: ${
        Object.entries(traffic.stats.alertMoves)
          .map(([k, n]) => `to ${k} ${n}`)
          .join(", ") || "none"
      }; alerts finished: ${
        Object.entries(inv.alertsFinished)
          .map(([k, n]) => `${k} ${n}`)
          .join(", ") || "none"
      }`,
      `  users on duplicates   ${unalerted.users}, ${unalerted.alerted} raised an alert; without one: phone changed first ${unalerted.phoneChanged}, deactivated ${unalerted.deactivated}, neither ${unalerted.unexplained.length}`,
      `  duplicates            ${inv.duplicates} (goal 0)`,
      `  lost intents          ${inv.lostIntents} (goal 0)`,
      `  SIGTERM exits         ${faults.sigterms.length}, slowest ${sigtermMax} ms (bound ${SIGTERM_BOUND_MS} ms)`,
      `  time to settle        ${result.settleSeconds} s after the last fault`,
      "  soak: every replica each sample (RSS MiB / DB sessions / event-loop p99 ms / max ms of the last minute)",
      ...soak.table(),
      ...soakCheck.lines,
      `  invariant violations  ${violations.length} (goal 0)`,
      ...violations.slice(0, 50).map((x) => `    - ${x}`),
      ...history,
      `  load average          ${result.loadAverage}; wall clock ${result.wallSeconds} s`,
      `CHAOS_RESULT ${JSON.stringify(result)}`,
      "",
    ].join("\n"),
  );

  // The replicas' logs, kept when something went wrong (they hold no secret or personal value: the
  // leak check above reads the same text). CHAOS_LOG_DIR keeps them always.
  const crashed = Object.keys(faults.unaskedExits).length > 0;
  const keepLogs = process.env.CHAOS_LOG_DIR ?? (violations.length > 0 || crashed ? `${dir}-logs` : null);
  if (keepLogs) {
    mkdirSync(keepLogs, { recursive: true });
    for (const [name, text] of outputs) writeFileSync(join(keepLogs, `${name}.log`), text);
    process.stdout.write(`replica logs: ${keepLogs}\n`);
  }
  await pool.end().catch(() => undefined);
  await emulator.close().catch(() => undefined);
  emergencyStop = null;
  await server.stop().catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
  return violations.length === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (e) => {
    process.stderr.write(`chaos run failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    void (emergencyStop?.() ?? Promise.resolve()).finally(() => process.exit(2));
  },
);
