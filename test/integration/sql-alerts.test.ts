// Business alerts (§11): one open alert per (type, fingerprint); a repeat counts another occurrence;
// after a terminal stage a new case opens a new alert linked to the previous one.
import { randomBytes, randomUUID } from "node:crypto";
import test from "ava";
import { one, type Queryable, rejectsWith, session } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

interface Alert {
  id: string;
  alert_number: string;
  alert_type: string;
  severity: string;
  fingerprint: string;
  user_id: string | null;
  current_contact_id: string | null;
  selected_contact_id: string | null;
  candidate_contact_ids: string[];
  details: Record<string, unknown>;
  status: string;
  item_id: string | null;
  stage_id: string | null;
  crm_sync_status: string;
  occurrence_count: number;
  first_occurred_at: Date;
  last_occurred_at: Date;
  previous_alert_id: string | null;
  correlation_id: string | null;
  closed_at: Date | null;
}

const fingerprint = () => randomBytes(32).toString("hex");

function raise(
  q: Queryable,
  type: string,
  fp: string,
  opts: { candidates?: string[]; selected?: string; userId?: string; severity?: string } = {},
): Promise<Alert> {
  return one<Alert>(q, "select * from bitrix_sync.raise_business_alert($1, $2, $3, $4, null, $5, $6, $7)", [
    type,
    opts.severity ?? "medium",
    fp,
    opts.userId ?? randomUUID(),
    opts.selected ?? null,
    opts.candidates === undefined ? null : JSON.stringify(opts.candidates),
    JSON.stringify({ phone: "+7*******22" }),
  ]);
}

const finish = (id: string, status: string, stage: string | null = null) =>
  one<Alert>(db.pool, "select * from bitrix_sync.finish_business_alert($1, $2, $3)", [id, status, stage]);
const get = (id: string) =>
  one<Alert>(db.pool, "select * from bitrix_sync.business_alerts where id = $1", [id]);

test("raise_business_alert opens an alert with a number and one occurrence", async (t) => {
  const fp = fingerprint();
  const userId = randomUUID();
  const a = await raise(db.pool, "duplicate_contacts", fp, {
    candidates: ["10", "11"],
    selected: "11",
    userId,
  });
  t.like(a, {
    alert_type: "duplicate_contacts",
    severity: "medium",
    fingerprint: fp,
    user_id: userId,
    selected_contact_id: "11",
    status: "open",
    occurrence_count: 1,
    previous_alert_id: null,
    crm_sync_status: "pending",
    closed_at: null,
  });
  t.deepEqual(a.candidate_contact_ids, ["10", "11"]);
  t.truthy(a.alert_number);
  t.deepEqual(a.first_occurred_at, a.last_occurred_at);
});

test("a repeat of an open (type, fingerprint) counts an occurrence on the same alert", async (t) => {
  const fp = fingerprint();
  const first = await raise(db.pool, "duplicate_contacts", fp, { candidates: ["10", "11"] });
  await one(db.pool, "select * from bitrix_sync.record_alert_item($1, 501, 'DT1038_7:NEW')", [first.id]);
  await new Promise((r) => setTimeout(r, 10));
  const again = await raise(db.pool, "duplicate_contacts", fp, { candidates: ["10", "11", "12"] });
  t.is(again.id, first.id);
  t.is(again.alert_number, first.alert_number);
  t.is(again.occurrence_count, 2);
  t.deepEqual(again.first_occurred_at, first.first_occurred_at);
  t.true(again.last_occurred_at > first.last_occurred_at);
  t.deepEqual(again.candidate_contact_ids, ["10", "11", "12"]);
  t.is(again.crm_sync_status, "pending", "the smart-process item must be updated again");
  t.is(again.item_id, "501");
  t.is((await raise(db.pool, "duplicate_contacts", fp)).occurrence_count, 3);

  // Another fingerprint or another type is another alert.
  t.not((await raise(db.pool, "duplicate_contacts", fingerprint())).id, first.id);
  t.not((await raise(db.pool, "contact_taken_by_other_user", fp)).id, first.id);
  const { rows } = await db.pool.query(
    "select 1 from bitrix_sync.business_alerts where alert_type = 'duplicate_contacts' and fingerprint = $1",
    [fp],
  );
  t.is(rows.length, 1);
});

test("two connections raising the same new alert at once count two occurrences on one row", async (t) => {
  const fp = fingerprint();
  const a = await session(db.pool);
  const b = await session(db.pool);
  try {
    await a.c.query("begin");
    await b.c.query("begin");
    await raise(a.c, "duplicate_contacts", fp);
    // b's insert waits for a's uncommitted row, then must count on it instead of failing.
    const second = raise(b.c, "duplicate_contacts", fp);
    await new Promise((r) => setTimeout(r, 50));
    await a.c.query("commit");
    const out = await second;
    await b.c.query("commit");
    t.is(out.occurrence_count, 2);
  } finally {
    await a.c.query("rollback").catch(() => undefined);
    await b.c.query("rollback").catch(() => undefined);
    a.done();
    b.done();
  }
  const { rows } = await db.pool.query<Alert>(
    "select * from bitrix_sync.business_alerts where fingerprint = $1",
    [fp],
  );
  t.is(rows.length, 1);
  t.is(rows[0]?.occurrence_count, 2);
});

test("after finish_business_alert a new case opens a new alert linked to the previous one", async (t) => {
  const fp = fingerprint();
  const first = await raise(db.pool, "contact_taken_by_other_user", fp);
  await finish(first.id, "resolved", "DT1038_7:SUCCESS");
  const second = await raise(db.pool, "contact_taken_by_other_user", fp);
  t.not(second.id, first.id);
  t.not(second.alert_number, first.alert_number);
  t.like(second, { status: "open", occurrence_count: 1, previous_alert_id: first.id });
  await finish(second.id, "closed");
  const third = await raise(db.pool, "contact_taken_by_other_user", fp);
  t.is(third.previous_alert_id, second.id, "links the latest earlier case");
  t.like(await get(first.id), { status: "resolved", occurrence_count: 1 });
});

test("record_alert_item stores the smart-process item and stage", async (t) => {
  const a = await raise(db.pool, "duplicate_contacts", fingerprint());
  const out = await one<Alert>(
    db.pool,
    "select * from bitrix_sync.record_alert_item($1, 9001, 'DT1038_7:NEW')",
    [a.id],
  );
  t.like(out, { item_id: "9001", stage_id: "DT1038_7:NEW" });
  // Nulls keep what is known: a later get may bring only the stage.
  const later = await one<Alert>(
    db.pool,
    "select * from bitrix_sync.record_alert_item($1, null, 'DT1038_7:PREPARATION')",
    [a.id],
  );
  t.like(later, { item_id: "9001", stage_id: "DT1038_7:PREPARATION" });
  await rejectsWith(t, db.pool.query("select bitrix_sync.record_alert_item(-1, 1, 'X')"), "BS005");
});

test("an alert finishes only from open, as resolved, closed or remote_missing", async (t) => {
  for (const status of ["resolved", "closed", "remote_missing"]) {
    const a = await raise(db.pool, "duplicate_contacts", fingerprint());
    const out = await finish(a.id, status, "DT1038_7:FAIL");
    t.like(out, { status, stage_id: "DT1038_7:FAIL" });
    t.truthy(out.closed_at);
    const err = await rejectsWith(t, finish(a.id, "closed"), "BS002");
    t.truthy(err.hint);
    t.is((await get(a.id)).status, status, "a finished alert stays finished");
  }
  const open = await raise(db.pool, "duplicate_contacts", fingerprint());
  await rejectsWith(t, finish(open.id, "open"), "BS004");
  await rejectsWith(t, finish(open.id, "deleted"), "BS004");
  await rejectsWith(t, finish("-1", "closed"), "BS002");
  t.is((await get(open.id)).status, "open");
});

test("a hand-written UPDATE cannot reopen or re-finish an alert (BS002)", async (t) => {
  const a = await raise(db.pool, "duplicate_contacts", fingerprint());
  await finish(a.id, "resolved");
  await rejectsWith(
    t,
    db.pool.query("update bitrix_sync.business_alerts set status = 'open', closed_at = null where id = $1", [
      a.id,
    ]),
    "BS002",
  );
  await rejectsWith(
    t,
    db.pool.query("update bitrix_sync.business_alerts set status = 'closed' where id = $1", [a.id]),
    "BS002",
  );
});

test("raise_business_alert refuses an unsafe type (BS004) and a fingerprint that is not a SHA-256 hex", async (t) => {
  await rejectsWith(t, raise(db.pool, "Duplicate contacts for +79991234567", fingerprint()), "BS004");
  await rejectsWith(t, raise(db.pool, "duplicate_contacts", "ivanov@example.com"), "23514");
  await rejectsWith(t, raise(db.pool, "duplicate_contacts", fingerprint(), { severity: "urgent" }), "23514");
});

const mirrored = (id: string) =>
  one<Alert>(db.pool, "select * from bitrix_sync.mark_alert_mirrored($1)", [id]);
const mirrorFailed = (id: string) =>
  one<Alert>(db.pool, "select * from bitrix_sync.mark_alert_mirror_failed($1)", [id]);

test("mark_alert_mirrored: pending -> synced once its command is issued; only a pending alert", async (t) => {
  const a = await raise(db.pool, "duplicate_contacts", fingerprint());
  t.like(await mirrored(a.id), { crm_sync_status: "synced", status: "open" });
  const err = await rejectsWith(t, mirrored(a.id), "BS002");
  t.truthy(err.hint);
  // A newer occurrence makes it pending again, and it is mirrored again.
  await raise(db.pool, "duplicate_contacts", a.fingerprint);
  t.like(await mirrored(a.id), { crm_sync_status: "synced", occurrence_count: 2 });
  await rejectsWith(t, mirrored("999999999"), "BS005");
});

test("mark_alert_mirror_failed: synced -> failed; a pending newer change stays pending", async (t) => {
  const a = await raise(db.pool, "duplicate_contacts", fingerprint());
  t.like(await mirrorFailed(a.id), { crm_sync_status: "pending" }, "a newer change is still to be sent");
  await mirrored(a.id);
  t.like(await mirrorFailed(a.id), { crm_sync_status: "failed" });
  t.like(await mirrorFailed(a.id), { crm_sync_status: "failed" }, "failing twice changes nothing");
  // The next occurrence queues the alert for the CRM again.
  t.like(await raise(db.pool, "duplicate_contacts", a.fingerprint), { crm_sync_status: "pending" });
  await rejectsWith(t, mirrorFailed("999999999"), "BS005");
});
