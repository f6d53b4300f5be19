// Bounded waits (issue 10, finding 5): with the inbox table locked by another session, the receivers
// answer a fast 503 and write nothing, the status endpoints answer in bounded time with what they
// know, readiness says why, and the inbox writer's queue has a limit. Real PostgreSQL, the service's
// own pools (src/db/pools.ts) and real HTTP over loopback.
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import test from "ava";
import pg from "pg";
import { loadConfig } from "../../src/config/env.js";
import { createPool } from "../../src/db/pools.js";
import { HealthState } from "../../src/health/state.js";
import { createApp } from "../../src/http/app.js";
import { createHttpServer } from "../../src/http/server.js";
import type { StatusSource } from "../../src/http/status.js";
import { InboxBusyError, InboxWriter } from "../../src/inbound/inbox.js";
import { createMemoryLimiter } from "../helpers/memory-limiter.js";
import {
  captureLogger,
  encodeForm,
  inboxCount,
  receiverConfigFor,
  robotFields,
  TOKENS,
} from "../helpers/receiver.js";
import { testSettings } from "../helpers/settings.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

const SERVICE_TOKEN = "bounded-waits-service-token-4c2e9f7a1b3d5e6f";
/** "A few seconds": the receivers' worst case is the queue wait plus the lock timeout (docs/receivers.md). */
const RECEIVER_BOUND_MS = 4_000;
/** The status endpoints' deadlines plus scheduling slack on a busy 2-core machine. */
const STATUS_BOUND_MS = 6_000;

let db: TestDb;
let receiverPool: pg.Pool;
let statusPool: pg.Pool;
let server: Server;
let base: string;
const captured = captureLogger();

function statusSource(): StatusSource {
  const health = new HealthState();
  health.beat();
  return {
    config: loadConfig({ SECRETS_SOURCE: "env", BITRIX_SYNC_SERVICE_TOKEN: SERVICE_TOKEN }),
    health,
    limiter: createMemoryLimiter({ settings: { refillPerSec: 2, burst: 5, maxInFlight: 2 } }),
    settings: { get: () => testSettings(), version: () => 1, problem: () => null },
  };
}

test.before(async () => {
  db = await createTestDb();
  receiverPool = createPool(db.url, "receiver");
  statusPool = createPool(db.url, "status");
  const app = createApp({
    pool: statusPool,
    receiverPool,
    log: captured.log,
    receiver: receiverConfigFor(),
    status: statusSource(),
  });
  server = createHttpServer(app);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
test.after.always(async () => {
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  await receiverPool?.end();
  await statusPool?.end();
  await db?.drop();
});

/** Holds `lock table bitrix_sync.webhook_inbox in access exclusive mode` in another session. */
async function lockInbox(): Promise<{ release(): Promise<void> }> {
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  await c.query("begin");
  await c.query("lock table bitrix_sync.webhook_inbox in access exclusive mode");
  return {
    async release() {
      await c.query("rollback");
      await c.end();
    },
  };
}

async function timed<T>(work: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const started = Date.now();
  const value = await work();
  return { ms: Date.now() - started, value };
}

function robot(id: string) {
  return fetch(`${base}/bitrix/sync/webhook/contact?token=${TOKENS.contact}&ID=${id}`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: encodeForm(robotFields("contact", id)),
  });
}

test.serial("with the inbox locked, receivers answer 503 within seconds and write nothing", async (t) => {
  const before = await inboxCount(db.pool);
  const lock = await lockInbox();
  try {
    const one = await timed(async () => {
      const res = await robot("7001");
      return { status: res.status, body: await res.json() };
    });
    t.is(one.value.status, 503);
    t.deepEqual(one.value.body, { error: "unavailable" });
    t.true(one.ms < RECEIVER_BOUND_MS, `answered in ${one.ms} ms`);

    // A burst: grouped calls fail as groups, queued events past their wait fail unsent.
    const burst = await timed(() =>
      Promise.all(Array.from({ length: 60 }, (_, i) => robot(String(7100 + i)).then((r) => r.status))),
    );
    t.deepEqual([...new Set(burst.value)], [503]);
    t.true(burst.ms < RECEIVER_BOUND_MS + 1_000, `burst answered in ${burst.ms} ms`);
  } finally {
    await lock.release();
  }
  t.is(await inboxCount(db.pool), before, "a 503 leaves no row, also after the lock is gone");
  t.is((await robot("7002")).status, 200, "the receiver works again once the lock is released");
  t.is(await inboxCount(db.pool), before + 1);
  const logs = captured.text();
  t.regex(logs, /"reason":"database_timeout"/);
  t.false(logs.includes(TOKENS.contact));
});

test.serial("with the inbox locked, readiness, status and metrics answer in bounded time", async (t) => {
  const lock = await lockInbox();
  try {
    const [ready, status, metrics] = await Promise.all([
      timed(async () => {
        const res = await fetch(`${base}/health/ready`);
        return { status: res.status, body: (await res.json()) as { status: string; problems: string[] } };
      }),
      timed(async () => {
        const res = await fetch(`${base}/internal/sync/v1/status`, {
          headers: { authorization: `Bearer ${SERVICE_TOKEN}` },
        });
        return { status: res.status, body: (await res.json()) as Record<string, unknown> };
      }),
      timed(async () => {
        const res = await fetch(`${base}/metrics`);
        return { status: res.status, text: await res.text() };
      }),
    ]);
    t.is(ready.value.status, 503);
    // The build and the schemas it carries are status.test.ts's to check.
    const { status: verdict, problems } = ready.value.body;
    t.deepEqual({ status: verdict, problems }, { status: "not_ready", problems: ["inbox_write_timeout"] });
    t.true(ready.ms < STATUS_BOUND_MS, `readiness in ${ready.ms} ms`);

    t.is(status.value.status, 503);
    t.is(status.value.body.error, "database_timeout");
    t.like(status.value.body.readiness as object, { status: "not_ready", problems: ["inbox_write_timeout"] });
    t.is(status.value.body.mode, "full", "what the process knows is still there");
    t.true(status.ms < STATUS_BOUND_MS, `status in ${status.ms} ms`);

    t.is(metrics.value.status, 200);
    t.regex(metrics.value.text, /^bitrix_sync_metrics_database_up 0$/m);
    t.true(metrics.ms < STATUS_BOUND_MS, `metrics in ${metrics.ms} ms`);
  } finally {
    await lock.release();
  }
  // Readiness serves its last answer for READINESS_CACHE_MS: ready again once that has passed.
  let after: unknown;
  for (let i = 0; i < 25; i++) {
    after = await (await fetch(`${base}/health/ready`)).json();
    if ((after as { status: string }).status === "ready") break;
    await new Promise((r) => setTimeout(r, 200));
  }
  t.like(after as object, { status: "ready", problems: [] });
  t.regex(await (await fetch(`${base}/metrics`)).text(), /^bitrix_sync_metrics_database_up 1$/m);
});

test.serial("the readiness probe leaves no inbox row behind", async (t) => {
  const before = await inboxCount(db.pool);
  for (let i = 0; i < 3; i++) t.is((await fetch(`${base}/health/ready`)).status, 200);
  t.is(await inboxCount(db.pool), before);
});

test.serial("the inbox writer's queue is bounded: beyond it a write fails at once, unsent", async (t) => {
  const writer = new InboxWriter(receiverPool, {
    maxInFlight: 1,
    maxBatch: 1,
    maxPending: 3,
    maxQueueWaitMs: 60_000,
  });
  const before = await inboxCount(db.pool);
  const lock = await lockInbox();
  let outcomes: Array<string>;
  try {
    const event = (id: string) => ({
      receiver: "contact" as const,
      entityTypeId: 3,
      entityId: id,
      sourceIp: null,
    });
    // The first is sent at once (and waits for the lock); three wait in the queue; the rest find it full.
    const first = writer.write(event("8000"));
    await new Promise((r) => setImmediate(r));
    const started = Date.now();
    const rest = Array.from({ length: 6 }, (_, i) => writer.write(event(String(8001 + i))));
    const settled = await Promise.allSettled(rest.slice(3));
    t.true(Date.now() - started < 200, "refused at once, not after a wait");
    outcomes = settled.map((s) =>
      s.status === "rejected" && s.reason instanceof InboxBusyError ? s.reason.reason : "other",
    );
    t.deepEqual(outcomes, ["queue_full", "queue_full", "queue_full"]);
    t.is(writer.pending, 3);
    await Promise.allSettled([first, ...rest.slice(0, 3)]);
  } finally {
    await lock.release();
  }
  t.is(await inboxCount(db.pool), before);
});

test.serial("an event that waits too long to be sent fails unsent, on time", async (t) => {
  const writer = new InboxWriter(receiverPool, { maxInFlight: 1, maxBatch: 1, maxQueueWaitMs: 300 });
  const before = await inboxCount(db.pool);
  const lock = await lockInbox();
  try {
    const event = (id: string) => ({
      receiver: "contact" as const,
      entityTypeId: 3,
      entityId: id,
      sourceIp: null,
    });
    const first = writer.write(event("8100"));
    await new Promise((r) => setImmediate(r));
    const started = Date.now();
    const queued = await writer.write(event("8101")).then(
      () => "written",
      (e: unknown) => (e instanceof InboxBusyError ? e.reason : "other"),
    );
    const waited = Date.now() - started;
    t.is(queued, "queue_wait");
    t.true(waited >= 250 && waited < 900, `failed after ${waited} ms`);
    const sent = await first.then(
      () => "written",
      (e: unknown) => (e as { code?: string }).code,
    );
    t.is(sent, "55P03", "the sent one ends by the receiver pool's lock_timeout");
  } finally {
    await lock.release();
  }
  t.is(await inboxCount(db.pool), before);
});
