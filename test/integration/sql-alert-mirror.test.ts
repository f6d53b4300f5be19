// The SQL of alert mirroring recovery (sql/alert_mirror.sql): the retry horizon of an unanswered
// update, a lookup that never takes another alert's item, and the mirror that never adds while an
// earlier add may have landed.
import { randomBytes, randomUUID } from "node:crypto";
import test from "ava";
import { forceRow, one } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

const fp = () => randomBytes(32).toString("hex");

async function alertWith(command: "alert.add" | "alert.update", status: string, sentAgo = "1 minute") {
  const fingerprint = fp();
  const a = await one<{ id: string; alert_number: string }>(
    db.pool,
    "select id, alert_number from bitrix_sync.raise_business_alert('duplicate_contacts', 'low', $1, $2)",
    [fingerprint, randomUUID()],
  );
  if (command === "alert.update")
    await db.pool.query("select bitrix_sync.record_alert_item($1, $2, null)", [a.id, 5000 + Number(a.id)]);
  const c = await one<{ id: string }>(
    db.pool,
    `select id from bitrix_sync.issue_alert_command($1, $2, '{"entityTypeId": 1040, "fields": {}}')`,
    [a.id, command],
  );
  await db.pool.query("select bitrix_sync.mark_alert_mirrored($1)", [a.id]);
  await forceRow(db.pool, "bitrix_sync.crm_commands", c.id, {
    status,
    attempt_count: 1,
    sent_at: new Date(),
    first_sent_at: await one<{ t: Date }>(db.pool, `select now() - interval '${sentAgo}' as t`).then(
      (r) => r.t,
    ),
    completed_at: status === "succeeded" ? new Date() : null,
  });
  return { alertId: a.id, alertNumber: a.alert_number, fingerprint, commandId: c.id };
}

const command = (id: string) =>
  one<{ status: string; last_error_code: string | null; response: unknown }>(
    db.pool,
    "select status, last_error_code, response from bitrix_sync.crm_commands where id = $1",
    [id],
  );
const alert = (id: string) =>
  one<{ crm_sync_status: string; item_id: string | null }>(
    db.pool,
    "select crm_sync_status, item_id from bitrix_sync.business_alerts where id = $1",
    [id],
  );

test("an unanswered update is sent again after the delay; past its horizon it is dead-lettered and the alert failed", async (t) => {
  const fresh = await alertWith("alert.update", "uncertain");
  const r = await one<{ status: string; next_attempt_at: Date }>(
    db.pool,
    "select * from bitrix_sync.recover_alert_command($1, interval '30 seconds')",
    [fresh.commandId],
  );
  t.is(r.status, "retry_wait");
  t.true(r.next_attempt_at.getTime() > Date.now() + 20_000, "after the backoff");
  const again = await one<{ status: string | null }>(
    db.pool,
    "select status from bitrix_sync.recover_alert_command($1, interval '1 second')",
    [fresh.commandId],
  );
  t.is(again.status, null, "not uncertain any more: nothing to recover twice");

  const old = await alertWith("alert.update", "uncertain", "25 hours");
  await db.pool.query("select bitrix_sync.recover_alert_command($1, interval '1 second')", [old.commandId]);
  t.like(await command(old.commandId), { status: "dead_letter", last_error_code: "retry_horizon_exceeded" });
  t.is((await alert(old.alertId)).crm_sync_status, "failed");
  const dl = await one<{ n: number }>(
    db.pool,
    "select count(*)::int as n from bitrix_sync.technical_dead_letters where command_id = $1 and resolved_at is null",
    [old.commandId],
  );
  t.is(dl.n, 1);
});

test("an unanswered add waits for a lookup; the mirror issues nothing else for the alert meanwhile", async (t) => {
  const a = await alertWith("alert.add", "uncertain");
  await db.pool.query("select bitrix_sync.recover_alert_command($1, interval '1 second')", [a.commandId]);
  t.is((await command(a.commandId)).status, "reconcile");
  const due = await db.pool.query(
    "select alert_id from bitrix_sync.alerts_to_look_up(1000) where alert_id = $1",
    [a.alertId],
  );
  t.is(due.rows.length, 1);
  t.true(
    (await one<{ u: boolean }>(db.pool, "select bitrix_sync._alert_add_unsafe($1) as u", [a.alertId])).u,
  );
  const lookup = await one<{ id: string }>(
    db.pool,
    `select id from bitrix_sync.issue_alert_lookup($1, '{"entityTypeId": 1040, "purpose": "find", "match": {"field": "title", "value": "x"}}')`,
    [a.alertId],
  );
  t.truthy(lookup.id);
  const second = await db.pool.query(
    `select id from bitrix_sync.issue_alert_lookup($1, '{"entityTypeId": 1040, "purpose": "find", "match": {"field": "title", "value": "x"}}')`,
    [a.alertId],
  );
  t.is(second.rows[0]?.id ?? null, null, "one lookup at a time");
});

test("a lookup that finds only another alert's item proves nothing landed: the add goes out again", async (t) => {
  const owner = await alertWith("alert.update", "succeeded");
  const ownerItem = (await alert(owner.alertId)).item_id;
  const a = await alertWith("alert.add", "reconcile");
  const outcome = await one<{ o: string }>(db.pool, "select bitrix_sync.resolve_alert_lookup($1, $2) as o", [
    a.alertId,
    JSON.stringify([{ id: Number(ownerItem), stage_id: "S" }]),
  ]);
  t.is(outcome.o, "not_found");
  t.like(await command(a.commandId), { status: "retry_wait", last_error_code: "reconciled_not_applied" });
  t.is((await alert(a.alertId)).item_id, null);

  const b = await alertWith("alert.add", "reconcile");
  const found = await one<{ o: string }>(db.pool, "select bitrix_sync.resolve_alert_lookup($1, $2) as o", [
    b.alertId,
    JSON.stringify([
      { id: Number(ownerItem), stage_id: "S" },
      { id: 987_654, stage_id: "DT1040_7:NEW" },
    ]),
  ]);
  t.is(found.o, "found");
  t.like(await command(b.commandId), {
    status: "succeeded",
    response: { item_id: 987_654, recovered: true },
  });
  t.like(await alert(b.alertId), { item_id: "987654" });
});

test("a failed lookup dead-letters the waiting add and fails the alert until it is requeued", async (t) => {
  const a = await alertWith("alert.add", "reconcile");
  const n = await one<{ n: number }>(db.pool, "select bitrix_sync.fail_alert_lookup($1) as n", [a.alertId]);
  t.is(n.n, 1);
  t.like(await command(a.commandId), { status: "dead_letter", last_error_code: "alert_lookup_failed" });
  t.is((await alert(a.alertId)).crm_sync_status, "failed");
  t.true(
    (await one<{ u: boolean }>(db.pool, "select bitrix_sync._alert_add_unsafe($1) as u", [a.alertId])).u,
  );
});
