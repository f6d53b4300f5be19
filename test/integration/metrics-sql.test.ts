// sql/metrics.sql and the scrape around it: transitions, dead letters and coalesced webhooks are
// counted once, at commit, never for a rolled-back change; scrapes fold without changing the sums;
// a database that does not answer in time, or at all, gives a scrape without database families
// instead of a hung one or stale numbers.
import { Writable } from "node:stream";
import test from "ava";
import pg from "pg";
import { loadConfig } from "../../src/config/env.js";
import { HealthState } from "../../src/health/state.js";
import { createApp } from "../../src/http/app.js";
import { SCRAPE_DEADLINE_MS } from "../../src/http/scrape.js";
import { createLogger } from "../../src/observability/logger.js";
import { inFlightCommand, leasedCommand } from "../helpers/builders.js";
import { parseExposition } from "../helpers/exposition.js";
import { createMemoryLimiter } from "../helpers/memory-limiter.js";
import { testSettings } from "../helpers/settings.js";
import { createTestDb, inRolledBackTx, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

interface Row {
  family: string;
  labels: Record<string, string>;
  value: number;
}

async function snapshot(): Promise<Row[]> {
  const { rows } = await db.pool.query<Row>("select * from bitrix_sync.metrics_snapshot(null, false)");
  return rows;
}

async function value(family: string, labels: Record<string, string>): Promise<number> {
  const row = (await snapshot()).find(
    (r) => r.family === family && Object.entries(labels).every(([k, v]) => r.labels[k] === v),
  );
  return row?.value ?? 0;
}

const completed = { command_type: "contact.read", from: "in_flight", to: "succeeded" };

test.serial("a committed transition is counted once; a rolled-back one never", async (t) => {
  const before = await value("bitrix_sync_command_transitions_total", completed);
  const held = await inFlightCommand(db.pool);
  await inRolledBackTx(db.pool, (c) =>
    c.query("select bitrix_sync.complete_command($1, $2, '{}')", [held.cmd.id, held.token]),
  );
  t.is(await value("bitrix_sync_command_transitions_total", completed), before, "rolled back: not counted");
  await db.pool.query("select bitrix_sync.complete_command($1, $2, '{}')", [held.cmd.id, held.token]);
  t.is(await value("bitrix_sync_command_transitions_total", completed), before + 1);
  t.is(
    await value("bitrix_sync_command_transitions_total", completed),
    before + 1,
    "a second scrape: same sum",
  );
  const { rows } = await db.pool.query<{ n: number }>(
    "select count(*)::int as n from bitrix_sync.metric_events",
  );
  t.is(rows[0]?.n, 0, "the scrape folded the appended rows into the totals");
});

test.serial(
  "a dead letter counts by source and a coalesced webhook by receiver; both start at 0",
  async (t) => {
    t.is(await value("bitrix_sync_dead_letters_total", { source: "webhook" }), 0);
    const dead = await value("bitrix_sync_dead_letters_total", { source: "crm_command" });
    const held = await leasedCommand(db.pool);
    await db.pool.query("select bitrix_sync.dead_letter_command($1, $2, 'invalid_argument', null, null)", [
      held.cmd.id,
      held.token,
    ]);
    t.is(await value("bitrix_sync_dead_letters_total", { source: "crm_command" }), dead + 1);
    t.true(
      (await snapshot()).some(
        (r) =>
          r.family === "bitrix_sync_dead_letters_open" &&
          r.labels.code === "invalid_argument" &&
          r.labels.source === "crm_command",
      ),
    );

    t.is(await value("bitrix_sync_webhook_coalesced_total", { receiver: "contact" }), 0);
    await db.pool.query(
      "select * from bitrix_sync.accept_webhooks('{contact,contact,contact}', '{3,3,3}', '{9001,9001,9001}', '{null,null,null}')",
    );
    const { rows } = await db.pool.query(
      "select * from bitrix_sync.claim_webhooks('w', 10, interval '1 minute', 'contact')",
    );
    t.is(rows.length, 1, "one event claimed for the Contact");
    t.is(await value("bitrix_sync_webhook_coalesced_total", { receiver: "contact" }), 2);
  },
);

const log = createLogger({ destination: new Writable({ write: (_c, _e, cb) => cb() }) });

function appOn(pool: pg.Pool) {
  const health = new HealthState();
  health.beat();
  const settings = testSettings();
  return createApp({
    pool,
    log,
    status: {
      config: loadConfig({ SECRETS_SOURCE: "env" }),
      health,
      limiter: createMemoryLimiter({ settings: { refillPerSec: 2, burst: 5, maxInFlight: 2 } }),
      settings: { get: () => settings, version: () => 1, problem: () => null },
    },
  });
}

async function scrape(app: ReturnType<typeof createApp>) {
  const started = Date.now();
  const res = await app.request("/metrics");
  const families = parseExposition(await res.text());
  const sample = (name: string, labels: Record<string, string> = {}) =>
    families.get(name)?.samples.find((s) => Object.entries(labels).every(([k, v]) => s.labels[k] === v))
      ?.value;
  return { ms: Date.now() - started, status: res.status, families, sample };
}

test.serial(
  "a database that does not answer within the deadline: database_up 0, no database families",
  async (t) => {
    const app = appOn(db.pool);
    const ok = await scrape(app);
    t.is(ok.sample("bitrix_sync_metrics_database_up"), 1);
    t.is(ok.sample("bitrix_sync_queue_depth", { status: "pending" }), 0);

    // Something holds the totals table: the snapshot's fold waits, the statement timeout ends it.
    const blocker = new pg.Client({ connectionString: db.url });
    await blocker.connect();
    try {
      await blocker.query("begin");
      await blocker.query("lock table bitrix_sync.metric_event_totals in access exclusive mode");
      await db.pool.query(
        "insert into bitrix_sync.metric_events values ('command', 'contact.read', 'leased', 'in_flight')",
      );
      const slow = await scrape(app);
      t.is(slow.status, 200);
      t.true(slow.ms < SCRAPE_DEADLINE_MS + 2_000, `the scrape ended at the deadline (${slow.ms} ms)`);
      t.is(slow.sample("bitrix_sync_metrics_database_up"), 0);
      t.is(slow.families.get("bitrix_sync_queue_depth")?.samples.length, 0, "no depth left over from before");
      t.is(slow.families.get("bitrix_sync_limiter_tokens")?.samples.length ?? 0, 0);
      t.is(
        slow.sample("bitrix_sync_readiness", { status: "ready" }),
        1,
        "readiness does not need the totals",
      );
    } finally {
      await blocker.query("rollback");
      await blocker.end();
    }
    t.is((await scrape(app)).sample("bitrix_sync_metrics_database_up"), 1, "the next scrape reads again");
  },
);

test.serial(
  "an unreachable database: not ready with database_unreachable, no database families",
  async (t) => {
    const dead = new pg.Pool({
      connectionString: "postgres://nobody@127.0.0.1:1/none",
      connectionTimeoutMillis: 500,
    });
    dead.on("error", () => undefined);
    try {
      const s = await scrape(appOn(dead));
      t.is(s.status, 200);
      t.is(s.sample("bitrix_sync_metrics_database_up"), 0);
      t.is(s.sample("bitrix_sync_readiness", { status: "not_ready" }), 1);
      t.is(s.sample("bitrix_sync_readiness_problem", { problem: "database_unreachable" }), 1);
      t.is(s.sample("bitrix_sync_readiness_problem", { problem: "crm_stale" }), 0);
      t.is(s.families.get("bitrix_sync_workflow_transitions_total")?.samples.length, 0);
      t.is(s.sample("bitrix_sync_processing_enabled"), 1, "the process's own state needs no database");
    } finally {
      await dead.end();
    }
  },
);

test.serial(
  "silent failures have samples: failed runs, intervals, lag since the cutover, alerts behind the smart process, deleted items",
  async (t) => {
    // Intervals from the settings, both job types, whether or not a run happened.
    t.is(await value("bitrix_sync_reconciliation_interval_seconds", { job_type: "contacts" }), 900);
    t.is(await value("bitrix_sync_reconciliation_interval_seconds", { job_type: "alerts" }), 3600);
    // A Contact run that failed twice and never succeeded: counted, and lagging since the cutover.
    for (let i = 0; i < 2; i++) {
      const { rows } = await db.pool.query<{ lease_token: string }>(
        "select lease_token from bitrix_sync.claim_reconciliation_cursor('contacts', interval '0', true)",
      );
      await db.pool.query(
        "select bitrix_sync.fail_reconciliation_run('contacts', $1, 'server_error', interval '0')",
        [rows[0]?.lease_token],
      );
    }
    t.is(await value("bitrix_sync_reconciliation_failed_runs", { job_type: "contacts" }), 2);
    t.true(
      (await snapshot()).some(
        (r) =>
          r.family === "bitrix_sync_reconciliation_cursor_lag_seconds" && r.labels.job_type === "contacts",
      ),
      "a cursor without a watermark trails from the cutover",
    );
    // An alerts cursor left from an earlier configuration: no sample while alerts are not set up.
    await db.pool.query(
      "insert into bitrix_sync.reconciliation_cursors (job_type) values ('alerts') on conflict do nothing",
    );
    t.false(
      (await snapshot()).some(
        (r) => r.labels.job_type === "alerts" && r.family !== "bitrix_sync_reconciliation_interval_seconds",
      ),
    );

    // An alert that never reached the smart process ages from its creation, although it recurs.
    t.is(await value("bitrix_sync_business_alerts_mirror_enabled", {}), 1);
    const fp = "c".repeat(64);
    const raise = () =>
      db.pool.query<{ id: string }>(
        "select id from bitrix_sync.raise_business_alert('duplicate_contacts', 'low', $1, gen_random_uuid())",
        [fp],
      );
    const { rows: raised } = await raise();
    await db.pool.query(
      "update bitrix_sync.business_alerts set created_at = now() - interval '1 hour' where id = $1",
      [raised[0]?.id],
    );
    await raise(); // a new occurrence: updated_at is now
    const age = await value("bitrix_sync_business_alerts_unmirrored_oldest_age_seconds", {
      mirror_status: "pending",
    });
    t.true(age >= 3599, `aged from its creation: ${age}`);
    t.is(
      await value("bitrix_sync_business_alerts_unmirrored_oldest_age_seconds", { mirror_status: "failed" }),
      0,
    );

    // Kept in the database on purpose: the mirror is off.
    const { rows: v } = await db.pool.query<{ v: number }>(
      `select bitrix_sync.propose_settings('{"alerts.database_only": true}', 'test') as v`,
    );
    await db.pool.query("select bitrix_sync.validate_settings_version($1)", [v[0]?.v]);
    await db.pool.query("select bitrix_sync.activate_settings_version($1, 'test')", [v[0]?.v]);
    t.is(await value("bitrix_sync_business_alerts_mirror_enabled", {}), 0);

    // An item deleted in the CRM: counted once, from 0.
    t.is(await value("bitrix_sync_business_alerts_remote_missing_total", {}), 0);
    await db.pool.query("select bitrix_sync.finish_business_alert($1, 'remote_missing', null)", [
      raised[0]?.id,
    ]);
    t.is(await value("bitrix_sync_business_alerts_remote_missing_total", {}), 1);
    t.is(await value("bitrix_sync_business_alerts_remote_missing_total", {}), 1, "a second scrape: same sum");
  },
);
