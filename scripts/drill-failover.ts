// `npm run drill:failover` (docs/reliability.md, "Drill: failover"): a primary PostgreSQL 15 the
// drill creates (initdb, wal_level=replica) and a streaming standby from pg_basebackup -R, both in
// a folder of the drill's own on free ports; two replicas of the real service and the App reach the
// database through one TCP port (test/helpers/tcp-hop.ts), the name a managed database moves. While
// users sign up and change phones, the drill follows docs/runbook.md "After a database failover"
// step by step: the old primary is fenced read-only and answers so for a while, the standby catches
// up and is promoted, the port is switched to it, the old primary is stopped, a reconciliation is
// requested. Checked and printed, one line per invariant: not ready while writes fail, ready
// after, nothing committed lost in the promotion, no lease or command lost or executed twice (the
// portal's log of writes against the commands' durable send markers), every intent synced once,
// and everything the drill created removed. Exit 1 on a violation.
// `--short` (npm test): shorter phases and fewer users.
import { randomInt, randomUUID } from "node:crypto";
import { chownSync, existsSync, mkdtempSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { SANDBOX_FIELDS } from "../src/config/env.js";
import { freePort } from "../src/db/embedded.js";
import { migrateDatabase } from "../src/db/migrate.js";
import { startTcpHop } from "../test/helpers/tcp-hop.js";
import { startEmulator } from "../tools/emulator/server.js";
import { checkInvariants, openWork } from "./chaos/checks.js";
import { Replica } from "./chaos/replicas.js";
import { type Cluster, createPrimary, createStandby, postgresUser } from "./drill/cluster.js";
import {
  activateSettings,
  Checker,
  Cleanup,
  changePhone,
  confirmContract,
  newPhone,
  newTokens,
  removeDir,
  replicaEnv,
  sayer,
  signUp,
  sleep,
} from "./drill/common.js";
import { keepLogs, type ReadinessSample, readReadiness, restartUntilUp } from "./drill/process.js";

const SHORT = process.argv.includes("--short");
/** Seconds of traffic before the fence, with the old primary read-only, and after the switch. */
const PHASES = SHORT ? { before: 8, readOnly: 8, after: 8 } : { before: 60, readOnly: 60, after: 60 };
const DATABASE = "bitrix_sync_drill";
const RATE = { drainPerSec: 5, threshold: 50 };
/** Readiness is cached 1 s and decided within 2.5 s; sampled every second: a verdict shows within this. */
const READINESS_GRACE_MS = 5_000;
/** lease.ttl_sec of the drill's settings. */
const LEASE_SEC = 5;
/**
 * A write in the air at the fence is given up when its lease runs out on the promoted server; its
 * lookup then waits at most twice as long again as it went unanswered (lateWriteSettledAt, the late
 * write's window, which ends at the reply deadline recorded with the send). The drain bound, wide
 * enough for a sender of a release that recorded no deadline: three times the read-only window and
 * a lease, plus a minute.
 */
const settleBoundMs = (readOnlyMs: number) => 3 * (readOnlyMs + LEASE_SEC * 1000) + 60_000;

const say = sayer("drill:failover");
const loads = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(" ");

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url, application_name: "drill-failover-operator" });
  c.on("error", () => undefined);
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end().catch(() => undefined);
  }
}

async function waitUntil(probe: () => Promise<boolean>, boundMs: number, everyMs = 500): Promise<boolean> {
  const end = Date.now() + boundMs;
  while (Date.now() < end) {
    if (await probe().catch(() => false)) return true;
    await sleep(everyMs);
  }
  return false;
}

interface Created {
  dir: string;
  clusters: Cluster[];
  replicas: Replica[];
}

async function main(cleanup: Cleanup, check: Checker, created: Created): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-drill-failover-"));
  created.dir = dir;
  cleanup.add(
    "drill folder",
    () => removeDir(dir),
    () => removeDir(dir),
  );
  // initdb and the servers run as `postgres` when we are root: the folder is theirs.
  const as = postgresUser();
  if (as) chownSync(dir, as.uid, as.gid);
  say(
    `${SHORT ? "short" : "full"} mode: ${PHASES.before} s of traffic, ${PHASES.readOnly} s with the old primary read-only, ${PHASES.after} s after the switch; load average ${loads()}`,
  );

  const [primaryPort, standbyPort] = [await freePort(), await freePort()];
  const primary = await createPrimary(join(dir, "primary"), primaryPort);
  created.clusters.push(primary);
  cleanup.add(
    "primary",
    () => (primary.pid() === null ? undefined : primary.stop("immediate")),
    () => primary.stopNowSync(),
  );
  await withClient(primary.url, (c) => c.query(`create database ${DATABASE}`));
  await migrateDatabase(primary.urlOf(DATABASE));
  await withClient(primary.urlOf(DATABASE), async (c) => {
    await c.query("select * from bitrix_sync.perform_cutover('drill')");
  });
  const setup = new pg.Pool({ connectionString: primary.urlOf(DATABASE), max: 2 });
  setup.on("error", () => undefined);
  await activateSettings(
    setup,
    {
      "worker.poll_interval_ms": 500,
      "batch.max_wait_ms": 50,
      "lease.ttl_sec": LEASE_SEC,
      "retry.base_ms": 200,
      "retry.max_ms": 5000,
      "limiter.refill_per_sec": RATE.drainPerSec,
      "limiter.burst": 10,
    },
    "drill",
  );
  const runtimePassword = randomUUID();
  await setup.query(`alter role bitrix_sync_user login password '${runtimePassword}'`);
  await setup.end();

  const standby = await createStandby(primary, join(dir, "standby"), standbyPort);
  created.clusters.push(standby);
  cleanup.add(
    "standby",
    () => (standby.pid() === null ? undefined : standby.stop("immediate")),
    () => standby.stopNowSync(),
  );
  const streaming = await waitUntil(
    () =>
      withClient(primary.url, async (c) => {
        const { rows } = await c.query("select 1 from pg_stat_replication where state = 'streaming'");
        return rows.length === 1;
      }),
    30_000,
  );
  check.check("the standby streams from the primary before the failover", streaming, "pg_stat_replication");
  if (!streaming) throw new Error("the standby did not stream");

  // The name the service and the App connect to: a port that points at the primary.
  const hop = await startTcpHop({ host: "127.0.0.1", port: primary.port });
  cleanup.add("database port", () => hop.close());
  const viaName = (user: string, password?: string) =>
    `postgres://${user}${password ? `:${password}` : ""}@127.0.0.1:${hop.port}/${DATABASE}`;

  const emulator = await startEmulator({ fields: SANDBOX_FIELDS, rate: RATE });
  cleanup.add("emulator", () => emulator.close());
  await withClient(primary.urlOf(DATABASE), (c) => confirmContract(c, emulator.host));
  const env = replicaEnv(dir, "service", viaName("bitrix_sync_user", runtimePassword), emulator, newTokens());
  const replicas = [new Replica("replica-1", env), new Replica("replica-2", env)];
  created.replicas = replicas;
  const crashes: string[] = [];
  for (const r of replicas) {
    // An orchestrator starts a crashed replica again; each crash is reported.
    r.onUnaskedExit = (_exit, cause) => {
      crashes.push(`${r.name}: ${cause}`);
      void restartUntilUp(r);
    };
    cleanup.add(
      r.name,
      async () => {
        await r.stop("SIGTERM");
      },
      () => r.child?.kill("SIGKILL"),
    );
  }
  await Promise.all(replicas.map((r) => r.start()));
  say(
    `primary on ${primary.port}, standby on ${standby.port}, the name on ${hop.port}; replicas on ${replicas.map((r) => r.port).join(", ")}`,
  );

  // The App: sign-ups and phone changes through the same name, all through the drill.
  const app = new pg.Pool({ connectionString: viaName("postgres"), max: 4, connectionTimeoutMillis: 5_000 });
  app.on("error", () => undefined);
  cleanup.add("App pool", () => app.end());
  const taken = new Set<string>();
  const users: string[] = [];
  const committed = new Map<string, number>();
  let phase = "before";
  const refused: Record<string, number> = {};
  const changes: Record<string, number> = {};
  let trafficOn = true;
  const traffic = (async () => {
    let n = 0;
    while (trafficOn) {
      const change = users.length > 5 && randomInt(0, 100) < 25;
      const id = change ? (users[randomInt(0, users.length)] as string) : randomUUID();
      const ok = change
        ? await changePhone(app, id, newPhone(taken))
        : await signUp(app, id, newPhone(taken), `Drill ${n++}`);
      if (ok && !change) {
        users.push(id);
        committed.set(id, Date.now());
      }
      if (ok && change) changes[phase] = (changes[phase] ?? 0) + 1;
      if (!ok) refused[phase] = (refused[phase] ?? 0) + 1;
      await sleep(randomInt(150, 400));
    }
  })();

  const samples = new Map<string, ReadinessSample[]>(replicas.map((r) => [r.name, []]));
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      await Promise.all(replicas.map(async (r) => samples.get(r.name)?.push(await readReadiness(r.port))));
      await sleep(1_000);
    }
  })();

  // The portal slows down (1.5 s a request, under the service's 2 s deadline) just before the
  // fence, so batches are in the air when it comes: their completions meet the read-only server,
  // their leases run out, and the promoted server's claims must recover them without a second send.
  await sleep(Math.max(0, PHASES.before - 4) * 1000);
  emulator.setLatency(1_500);
  await sleep(Math.min(4, PHASES.before) * 1000);
  const beforeUsers = users.length;
  say(`${beforeUsers} users signed up, ${emulator.store.contacts.size} Contacts; the failover starts`);

  // docs/runbook.md, "After a database failover", step by step.
  // 1. Fence the old primary: read-only for every new transaction, and the sessions open before ended.
  phase = "read_only";
  const fencedAt = Date.now();
  await withClient(primary.url, async (c) => {
    await c.query("alter system set default_transaction_read_only = on");
    await c.query("select pg_reload_conf()");
    await c.query(
      "select pg_terminate_backend(pid) from pg_stat_activity where backend_type = 'client backend' and pid <> pg_backend_pid()",
    );
  });
  say("step 1: the old primary is read-only; the sessions open before it were ended");
  setTimeout(() => emulator.setLatency(0), 3_000).unref();
  // What a client now gets from the old primary through the name.
  const refusal = await withClient(viaName("postgres"), async (c) => {
    await c.query("begin");
    try {
      await c.query(
        "insert into han_app.user_identity (id, phone_number) values (gen_random_uuid(), '+70000000000')",
      );
      return "accepted";
    } catch (e) {
      return (e as { code?: string }).code ?? "no code";
    } finally {
      await c.query("rollback").catch(() => undefined);
    }
  });
  check.check("the old primary refuses writes once fenced", refusal === "25006", `SQLSTATE ${refusal}`);

  // The old primary answers read-only for a while (the replicas keep reading, every write fails).
  await sleep(PHASES.readOnly * 1000);

  // 2. Wait until the standby has replayed everything the old primary wrote.
  const primaryLsn = await withClient(primary.url, async (c) => {
    const { rows } = await c.query<{ lsn: string }>("select pg_current_wal_lsn()::text as lsn");
    return rows[0]?.lsn as string;
  });
  let replayed = "";
  const caughtUp = await waitUntil(
    () =>
      withClient(standby.url, async (c) => {
        const { rows } = await c.query<{ lsn: string; ok: boolean }>(
          "select pg_last_wal_replay_lsn()::text as lsn, pg_last_wal_replay_lsn() >= $1::pg_lsn as ok",
          [primaryLsn],
        );
        replayed = rows[0]?.lsn ?? "";
        return rows[0]?.ok === true;
      }),
    60_000,
  );
  check.check(
    "the standby replayed everything the old primary wrote before it was promoted",
    caughtUp,
    `primary at ${primaryLsn}, standby replayed ${replayed}`,
  );
  say(`step 2: the standby has replayed up to ${replayed} (the old primary is at ${primaryLsn})`);

  // 3. Promote the standby.
  const promoted = await withClient(standby.url, async (c) => {
    const { rows } = await c.query<{ ok: boolean }>(
      "select pg_promote(wait => true, wait_seconds => 60) as ok",
    );
    return rows[0]?.ok === true;
  });
  check.check("the standby was promoted", promoted, "pg_promote(wait => true)");
  say("step 3: the standby is promoted");

  // 4. Move the name to the promoted server, and stop the old primary.
  hop.retarget({ host: "127.0.0.1", port: standby.port });
  const switchedAt = Date.now();
  phase = "after";
  await primary.stop("fast");
  say("step 4: the name points at the promoted server; the old primary is stopped");

  // 5. The replicas reconnect by themselves: wait until each is ready.
  const readyAfter = new Map<string, number>();
  await waitUntil(async () => {
    for (const r of replicas) {
      if (readyAfter.has(r.name)) continue;
      const s = await readReadiness(r.port);
      if (s.status === "ready") readyAfter.set(r.name, Date.now() - switchedAt);
    }
    return readyAfter.size === replicas.length;
  }, 120_000);
  say(
    `step 5: ready again ${replicas.map((r) => `${r.name} after ${((readyAfter.get(r.name) ?? Number.NaN) / 1000).toFixed(1)} s`).join(", ")}`,
  );

  // 6. Ask for a reconciliation of the Contacts: robot calls refused while not ready are repaired.
  const pool = new pg.Pool({ connectionString: standby.urlOf(DATABASE), max: 4 });
  pool.on("error", () => undefined);
  cleanup.add("checker pool", () => pool.end());
  await withClient(standby.urlOf(DATABASE), async (c) => {
    await c.query("set role bitrix_sync_admin");
    await c.query("select bitrix_sync.request_reconciliation('contacts', 'ops:drill', 'database failover')");
  });
  say("step 6: a Contact reconciliation is requested");

  await sleep(PHASES.after * 1000);
  trafficOn = false;
  await traffic;

  // 7. Watch the open work drain.
  // Idle: no open work, and the reconciliation step 6 asked for has finished its run (a run holds
  // its cursor's lease while it pages; the checks below count that lease).
  const idle = async () =>
    Object.values(await openWork(pool)).every((n) => n === 0) &&
    Number(
      (
        await pool.query<{ n: string }>(
          "select count(*) as n from bitrix_sync.reconciliation_cursors where last_run_status = 'running'",
        )
      ).rows[0]?.n ?? 1,
    ) === 0;
  const settledStart = Date.now();
  const settleBound = settleBoundMs(switchedAt - fencedAt);
  const settled = await waitUntil(idle, settleBound);
  const settleSec = (Date.now() - settledStart) / 1000;
  say(
    `step 7: open work ${settled ? "drained" : "NOT drained"} ${settleSec.toFixed(1)} s after the traffic stopped`,
  );
  sampling = false;
  await sampler;

  // --- the checks ---
  process.stdout.write("\ndrill:failover invariants\n");
  for (const r of replicas) {
    const all = samples.get(r.name) ?? [];
    // Every answer to a probe sent after the fence and before the switch is not ready; those
    // answered before the switch (the old primary still answering, read-only) name the refused write.
    const writesFail = all.filter((s) => s.at >= fencedAt + READINESS_GRACE_MS && s.at < switchedAt);
    const notNotReady = writesFail.filter((s) => s.status !== "not_ready");
    const answeredBefore = writesFail.filter((s) => s.doneAt < switchedAt);
    const otherReason = answeredBefore.filter((s) => !s.problems.includes("inbox_write_failed"));
    const firstNotReady = all.find((s) => s.at >= fencedAt && s.status === "not_ready");
    check.check(
      `${r.name}: not ready (inbox_write_failed) while the database refused writes`,
      writesFail.length > 0 && notNotReady.length === 0 && otherReason.length === 0,
      `${writesFail.length} samples, ${notNotReady.length} not not_ready${notNotReady[0] ? ` (first: ${notNotReady[0].status})` : ""}, ${otherReason.length} of ${answeredBefore.length} answered before the switch without inbox_write_failed${otherReason[0] ? ` (first: ${otherReason[0].problems.join(",")})` : ""}; not ready ${firstNotReady ? ((firstNotReady.at - fencedAt) / 1000).toFixed(1) : "-"} s after the fence`,
    );
    const before = all.filter((s) => s.at < fencedAt);
    check.check(
      `${r.name}: ready before the failover and after the switch`,
      before.at(-1)?.status === "ready" && readyAfter.has(r.name) && all.at(-1)?.status === "ready",
      `last before: ${before.at(-1)?.status ?? "none"}; ready ${((readyAfter.get(r.name) ?? Number.NaN) / 1000).toFixed(1)} s after the switch; last sample ${all.at(-1)?.status ?? "none"}`,
    );
  }

  // Nothing the App committed before the fence is missing on the promoted server.
  const before = [...committed].filter(([, at]) => at < fencedAt).map(([id]) => id);
  const { rows: present } = await pool.query<{ n: number }>(
    "select count(*)::int as n from han_app.user_identity where id = any($1::uuid[])",
    [users],
  );
  check.check(
    "nothing committed was lost in the promotion",
    (present[0]?.n ?? 0) === users.length,
    `${users.length} users committed (${before.length} before the fence), ${present[0]?.n ?? 0} on the promoted server`,
  );
  check.check(
    "App writes were refused only while the old primary was read-only",
    (refused.before ?? 0) === 0 && (refused.read_only ?? 0) > 0,
    `refused: before ${refused.before ?? 0}, read-only ${refused.read_only ?? 0}, after the switch ${refused.after ?? 0} (reconnecting)`,
  );

  const inv = await checkInvariants(pool, emulator, SANDBOX_FIELDS);
  check.check(
    "every intent synced once: each active user in step with exactly one Contact, no lease held, nothing open or lost",
    settled && inv.violations.length === 0,
    `drained ${settleSec.toFixed(1)} s after the traffic stopped (bound ${(settleBound / 1000).toFixed(0)} s); ${inv.users.active} active users, ${inv.contacts} Contacts, ${inv.duplicates} duplicates, ${inv.lostIntents} lost intents${inv.violations.length ? `; ${inv.violations.slice(0, 5).join("; ")}` : ""}`,
  );

  // Fencing across the switch: every write the portal executed left a durable send marker on the
  // promoted server (attempt_count is raised by send_commands, committed before the request), and no
  // Contact was created twice.
  const executed = { add: 0, update: 0 };
  for (const e of emulator.log) {
    for (const m of e.commands) {
      if (m === "crm.contact.add") executed.add++;
      if (m === "crm.contact.update") executed.update++;
    }
  }
  const { rows: marks } = await pool.query<{
    command_type: string;
    commands: number;
    sends: number;
    resent: number;
  }>(
    `select command_type, count(*)::int as commands, sum(attempt_count)::int as sends,
            count(*) filter (where attempt_count > 1)::int as resent
       from bitrix_sync.crm_commands where command_type in ('contact.add', 'contact.update') group by 1`,
  );
  const mark = (t: string) => marks.find((m) => m.command_type === t) ?? { commands: 0, sends: 0, resent: 0 };
  check.check(
    "no Contact created twice: the portal executed one contact.add per Contact and per active user",
    executed.add === inv.contacts && inv.contacts === inv.users.active,
    `${executed.add} contact.add executed, ${inv.contacts} Contacts, ${inv.users.active} active users`,
  );
  check.check(
    "no write executed without its durable send marker on the promoted server (fencing held)",
    executed.add <= mark("contact.add").sends && executed.update <= mark("contact.update").sends,
    `contact.add: ${executed.add} executed, ${mark("contact.add").sends} send markers over ${mark("contact.add").commands} commands; contact.update: ${executed.update} executed, ${mark("contact.update").sends} markers over ${mark("contact.update").commands} commands; sent more than once: ${mark("contact.add").resent + mark("contact.update").resent}`,
  );
  const phoneChanges = Object.values(changes).reduce((a, b) => a + b, 0);
  // Leases that crossed the switch: writes whose holder never completed them (sent, then the
  // completion refused by the read-only server or its connection ended) and that a claim on the
  // promoted server recovered. The transition counters (sql/metrics.sql) hold every edge taken.
  const { rows: edges } = await pool.query<{ edge: string; n: number }>(
    `select from_state || '->' || to_state as edge, sum(n)::int as n from (
       select from_state, to_state, count(*) as n from bitrix_sync.metric_events where machine = 'command' group by 1, 2
       union all
       select from_state, to_state, count from bitrix_sync.metric_event_totals where machine = 'command'
     ) x where from_state in ('in_flight', 'uncertain', 'reconcile') and to_state <> 'succeeded' group by 1 order by 1`,
  );
  const recovered = Object.fromEntries(edges.map((e) => [e.edge, e.n]));
  say(`command edges off the normal path: ${JSON.stringify(recovered)}`);
  check.check("no replica crashed", crashes.length === 0, crashes.join("; ") || "0 unasked exits");

  const result = {
    mode: SHORT ? "short" : "full",
    users: users.length,
    phoneChanges,
    appRefused: refused,
    readOnlySec: Number(((switchedAt - fencedAt) / 1000).toFixed(1)),
    readyAfterSwitchSec: Object.fromEntries(
      [...readyAfter].map(([k, v]) => [k, Number((v / 1000).toFixed(1))]),
    ),
    settleSec: Number(settleSec.toFixed(1)),
    contactAdds: executed.add,
    contactUpdates: executed.update,
    sendMarkers: Object.fromEntries(marks.map((m) => [m.command_type, m.sends])),
    resent: mark("contact.add").resent + mark("contact.update").resent,
    recoveredEdges: recovered,
    requests: emulator.log.length,
    violations: check.violations,
    loadAverage: loads(),
  };
  process.stdout.write(`DRILL_RESULT ${JSON.stringify(result)}\n`);
  const logs = keepLogs(replicas, check.violations, `${dir}-logs`);
  if (logs) process.stdout.write(`replica logs: ${logs}\n`);
}

const cleanup = new Cleanup();
const check = new Checker();
const created: Created = { dir: "", clusters: [], replicas: [] };
let code = 0;
try {
  await main(cleanup, check, created);
  code = check.violations === 0 ? 0 : 1;
} catch (e) {
  process.stderr.write(`drill:failover failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  code = 2;
}
const failed = await cleanup.run();
for (const f of failed) process.stderr.write(`cleanup: ${f}\n`);
// Everything the drill created is gone, whatever happened above.
const left = [
  ...created.clusters.filter((c) => c.pid() !== null).map((c) => `${c.name} server still runs`),
  ...created.replicas.filter((r) => r.running).map((r) => `${r.name} still runs`),
  ...(created.dir && existsSync(created.dir) ? [`folder ${created.dir} still exists`] : []),
];
check.check(
  "everything the drill created is removed (servers, replicas, folders)",
  left.length === 0 && failed.length === 0,
  left.join("; ") || `${created.clusters.length} clusters, ${created.replicas.length} replicas, 1 folder`,
);
if (check.violations > 0 && code === 0) code = 1;
process.stdout.write(
  `drill:failover: ${check.results.length} invariants checked, ${check.violations} violated\n`,
);
process.exit(code);
