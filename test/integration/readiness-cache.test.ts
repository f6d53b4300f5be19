// /health/ready is cheap to ask often (src/http/app.ts, READINESS_CACHE_MS): one round of queries and
// one test insert serve every probe for a second after it, concurrent probes share the round in
// flight, and the test insert runs on the status pool, so probes never take one of the receivers'
// few connections. Counted on real pools: each checkout of a connection is an `acquire` event.
import test from "ava";
import type pg from "pg";
import { createPool } from "../../src/db/pools.js";
import { createApp } from "../../src/http/app.js";
import { READINESS_CACHE_MS } from "../../src/http/status.js";
import { captureLogger } from "../helpers/receiver.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

function counted(pool: pg.Pool): { readonly n: number } {
  const c = { n: 0 };
  pool.on("acquire", () => {
    c.n++;
  });
  return c;
}

async function ready(app: ReturnType<typeof createApp>) {
  const res = await app.request("/health/ready");
  // The build it carries (src/version.ts) is status.test.ts's to check.
  const {
    build: _build,
    schema: _schema,
    ...body
  } = (await res.json()) as {
    status: string;
    problems: string[];
    build: unknown;
    schema: unknown;
  };
  return { code: res.status, body };
}

test("a burst of probes costs one round of queries; the next round comes after the cache's second", async (t) => {
  const status = createPool(db.url, "status");
  const receiver = createPool(db.url, "receiver");
  t.teardown(async () => {
    await status.end();
    await receiver.end();
  });
  const app = createApp({ pool: status, receiverPool: receiver, log: captureLogger().log });
  const checkouts = counted(status);

  const burst = await Promise.all(Array.from({ length: 20 }, () => ready(app)));
  for (const r of burst) t.deepEqual(r, { code: 200, body: { status: "ready", problems: [] } });
  const oneRound = checkouts.n;
  t.true(oneRound > 0);
  t.true(oneRound <= 5, `one round of readiness is a few checkouts, not 20 rounds (${oneRound})`);

  // Right after the burst: the same answer, no query.
  await ready(app);
  t.is(checkouts.n, oneRound);

  await new Promise((r) => setTimeout(r, READINESS_CACHE_MS + 200));
  await ready(app);
  t.is(checkouts.n, 2 * oneRound, "a second round once the cached answer is older than the cache's time");
});

test("the test insert runs on the status pool: with every receiver connection taken, readiness is ready", async (t) => {
  const status = createPool(db.url, "status");
  const receiver = createPool(db.url, "receiver");
  t.teardown(async () => {
    await status.end();
    await receiver.end();
  });
  const app = createApp({ pool: status, receiverPool: receiver, log: captureLogger().log });
  const receiverCheckouts = counted(receiver);
  // The robots' pool fully in use (e.g. a burst of webhooks in flight).
  const held = await Promise.all(Array.from({ length: receiver.options.max }, () => receiver.connect()));
  t.teardown(() => {
    for (const c of held) c.release();
  });
  const before = receiverCheckouts.n;
  t.deepEqual(await ready(app), { code: 200, body: { status: "ready", problems: [] } });
  t.is(receiverCheckouts.n, before, "readiness took no connection of the receivers' pool");
});
