// One more read of a Contact whose registration flag the service turned on again (migration 000051,
// sql/workflows/read_again.sql): a robot call answered registration_inactive while the flag was off,
// since the workflow began or since the Contact's last link closed, gets the Contact read again once
// the write that turned the flag on completes, through complete_commands() (the pump's batch) or
// complete_command(). A write that does not turn the flag on, or a call answered before both
// moments, queues nothing.
import { randomUUID } from "node:crypto";
import test from "ava";
import { inFlightCommand } from "../helpers/builders.js";
import { forceInsert, forceRow } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

let contactSeq = 8_000_000;
const nextContact = () => String(contactSeq++);

/** A robot call about `contactId`, answered `outcome`, received at `receivedAt`, as the processor leaves it. */
const answered = (contactId: string, outcome: string, receivedAt: string) =>
  forceInsert(db.pool, "bitrix_sync.webhook_inbox", {
    receiver: "contact",
    entity_type_id: 3,
    entity_id: contactId,
    status: "processed",
    outcome,
    processed_at: new Date(),
    received_at: receivedAt,
  });

const extraReads = async (contactId: string) =>
  (
    await db.pool.query<{ n: number }>(
      "select count(*)::int as n from bitrix_sync.webhook_inbox where entity_id = $1 and event_type = 'linked'",
      [contactId],
    )
  ).rows[0]?.n;

const workflowStart = async (id: string) =>
  (
    await db.pool.query<{ at: string }>(
      "select created_at::text as at from bitrix_sync.workflow_instances where id = $1",
      [id],
    )
  ).rows[0]?.at as string;

/** An in_flight write to `contactId` with `params`, and the moment its workflow began. */
async function write(contactId: string, params: Record<string, unknown>) {
  const held = await inFlightCommand(db.pool, {
    type: "contact.update",
    params: { contact_id: contactId, ...params },
  });
  return { ...held, began: await workflowStart(held.wf.id) };
}

const completeMany = (h: { cmd: { id: string }; token: string }) =>
  db.pool.query("select * from bitrix_sync.complete_commands($1::bigint[], $2::uuid[], array['{}'::jsonb])", [
    [h.cmd.id],
    [h.token],
  ]);

test("a write that turns the flag on reads again a Contact answered registration_inactive since its workflow began", async (t) => {
  const contact = nextContact();
  const h = await write(contact, { registered: true });
  await answered(contact, "registration_inactive", h.began);
  await completeMany(h);
  t.is(await extraReads(contact), 1);
});

test("complete_command() applies the same rule as the pump's batch", async (t) => {
  const contact = nextContact();
  const h = await write(contact, { registered: true });
  await answered(contact, "registration_inactive", h.began);
  await db.pool.query("select bitrix_sync.complete_command($1, $2, '{}')", [h.cmd.id, h.token]);
  t.is(await extraReads(contact), 1);
});

test("a call answered while the Contact had no link, before the workflow began, counts from the link's close", async (t) => {
  const contact = nextContact();
  const h = await write(contact, { registered: true });
  // The user's previous link closed a minute before the workflow; the call came in between.
  const { rows } = await db.pool.query<{ id: string }>("select (bitrix_sync.open_mapping($1, $2, null)).id", [
    randomUUID(),
    contact,
  ]);
  await forceRow(db.pool, "bitrix_sync.entity_external_mapping", rows[0]?.id as string, {
    status: "closed",
    close_reason: "deactivated",
    closed_at: new Date(Date.parse(h.began) - 60_000),
  });
  await answered(contact, "registration_inactive", new Date(Date.parse(h.began) - 30_000).toISOString());
  await completeMany(h);
  t.is(await extraReads(contact), 1);
});

test("nothing more is read: a write that does not turn the flag on, or a call answered before both moments", async (t) => {
  const off = nextContact();
  const h1 = await write(off, { registered: false });
  await answered(off, "registration_inactive", h1.began);
  const phone = nextContact();
  const h2 = await write(phone, { phone: "+79990000000" });
  await answered(phone, "registration_inactive", h2.began);
  const early = nextContact();
  const h3 = await write(early, { registered: true });
  await answered(early, "registration_inactive", new Date(Date.parse(h3.began) - 30_000).toISOString());
  const applied = nextContact();
  const h4 = await write(applied, { registered: true });
  await answered(applied, "applied", h4.began);
  await db.pool.query(
    "select * from bitrix_sync.complete_commands($1::bigint[], $2::uuid[], array_fill('{}'::jsonb, array[4]))",
    [[h1, h2, h3, h4].map((h) => h.cmd.id), [h1, h2, h3, h4].map((h) => h.token)],
  );
  t.deepEqual(
    [await extraReads(off), await extraReads(phone), await extraReads(early), await extraReads(applied)],
    [0, 0, 0, 0],
  );
});
