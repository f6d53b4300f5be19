// The hot tables' UUID keys are version 7 (migration 000053, sql/common/ids.sql): the time of the
// insert in the first 48 bits, so rows made together share the key indexes' newest leaves.
import { setTimeout as sleep } from "node:timers/promises";
import test from "ava";
import { makeUser } from "../helpers/factories.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

/** The Unix time in ms of a version 7 UUID, or null when the UUID is not version 7 of RFC 9562. */
function v7Millis(id: string): number | null {
  const hex = id.replaceAll("-", "");
  if (hex.length !== 32 || hex[12] !== "7" || !"89ab".includes(hex[16] as string)) return null;
  return Number.parseInt(hex.slice(0, 12), 16);
}

test("time_ordered_uuid(): version 7 with RFC 9562's variant, the call's time in ms, unique, ordered across milliseconds", async (t) => {
  const before = Date.now();
  const { rows } = await db.pool.query<{ id: string }>(
    "select bitrix_sync.time_ordered_uuid()::text as id from generate_series(1, 2000)",
  );
  const after = Date.now();
  t.is(new Set(rows.map((r) => r.id)).size, 2000, "every key is new");
  for (const { id } of rows) {
    const ms = v7Millis(id);
    if (ms === null) return t.fail(`${id} is not a version 7 UUID`);
    // The server's clock is this machine's (loopback); a few ms of slack for the rounding.
    t.true(ms >= before - 5 && ms <= after + 5, `${id}: ${ms} outside ${before}..${after}`);
  }
  const first = (await db.pool.query<{ id: string }>("select bitrix_sync.time_ordered_uuid()::text as id"))
    .rows[0]?.id;
  await sleep(5);
  const second = (await db.pool.query<{ id: string }>("select bitrix_sync.time_ordered_uuid()::text as id"))
    .rows[0]?.id;
  t.true((first ?? "") < (second ?? ""), "a key made later sorts after");
  // 74 random bits: the bits after the version are not all alike across the keys of one millisecond.
  t.true(new Set(rows.map((r) => r.id.slice(15))).size === 2000);
});

test("queue rows, workflows and mappings made by the service's own functions get time-ordered keys", async (t) => {
  const before = Date.now();
  const first = await makeUser(db.pool);
  await sleep(5);
  const second = await makeUser(db.pool);
  const { rows: claimed } = await db.pool.query<{
    id: string;
    lease_token: string;
    entity_id: string;
    task_type: string;
  }>(
    "select id, lease_token, entity_id, task_type from bitrix_sync.claim_sync_tasks('keys-test', 100, interval '60 seconds')",
  );
  t.is(claimed.length, 2);
  const { rows: taken } = await db.pool.query<{ workflow_id: string }>(
    "select workflow_id from bitrix_sync.take_sync_tasks($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[])",
    [
      claimed.map((r) => r.id),
      claimed.map((r) => r.lease_token),
      claimed.map((r) => r.entity_id),
      claimed.map((r) => r.task_type),
      claimed.map((r) => `hash-${r.id}`),
      claimed.map(() => null),
    ],
  );
  const mapping = (
    await db.pool.query<{ id: string }>("select (bitrix_sync.open_mapping($1, $2, null)).id::text as id", [
      first.id,
      "9000001",
    ])
  ).rows[0]?.id;
  const after = Date.now();
  const keys = [...claimed.map((r) => r.id), ...taken.map((r) => r.workflow_id), mapping ?? ""];
  t.is(keys.length, 5);
  for (const id of keys) {
    const ms = v7Millis(id);
    t.not(ms, null, `${id} is not a version 7 UUID`);
    t.true((ms ?? 0) >= before - 5 && (ms ?? 0) <= after + 5, `${id} was not made during the test`);
  }
  // The queue rows in the order the App wrote the users.
  const byUser = new Map(claimed.map((r) => [r.entity_id, r.id]));
  t.true(
    (byUser.get(first.id) ?? "") < (byUser.get(second.id) ?? ""),
    "the earlier user's intent has the lower key",
  );
});
