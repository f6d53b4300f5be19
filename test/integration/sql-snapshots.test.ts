// Contact snapshots and CRM-master writes (§3.1, §5.5, §6.4) through their SQL functions: hashes
// only, stale without clearing, and the App profile written with han.sync_suppress for the
// transaction, so it never echoes back as an App->CRM intent.
import { randomInt } from "node:crypto";
import test from "ava";
import { inTransaction } from "../../src/db/tx.js";
import { foldJournal, makeUser, randomPhone } from "../helpers/factories.js";
import { one, rejectsWith } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

interface Snapshot {
  contact_id: string;
  user_id: string;
  name_hash: string | null;
  email_hash: string | null;
  phone_hash: string | null;
  citizenship_enum_id: string | null;
  registered: boolean | null;
  crm_updated_at: Date | null;
  last_applied_source: string | null;
  last_webhook_received_at: Date | null;
  last_webhook_source_at: Date | null;
  stale: boolean;
  stale_reason: string | null;
}

const contactId = () => String(randomInt(1, 2 ** 47));
const h = (c: string) => c.repeat(64);

test("record_contact_created records the hashes of what was written, source app_create", async (t) => {
  const u = await makeUser(db.pool);
  const id = contactId();
  await db.pool.query("select bitrix_sync.mark_contact_snapshot_stale($1, $2, 'contact_not_found')", [
    id,
    u.id,
  ]);
  const s = await one<Snapshot>(
    db.pool,
    "select * from bitrix_sync.record_contact_created($1, $2, $3, $4, $5, '45')",
    [id, u.id, h("a"), null, h("c")],
  );
  t.like(s, {
    user_id: u.id,
    name_hash: h("a"),
    email_hash: null,
    phone_hash: h("c"),
    citizenship_enum_id: "45",
    registered: true,
    last_applied_source: "app_create",
    stale: false,
    stale_reason: null,
  });
});

test("record_contact_phone notes the phone hash and leaves the rest of the snapshot alone", async (t) => {
  const u = await makeUser(db.pool);
  const id = contactId();
  await db.pool.query("select bitrix_sync.record_contact_created($1, $2, $3, null, $4, null)", [
    id,
    u.id,
    h("a"),
    h("b"),
  ]);
  t.like(
    await one<Snapshot>(db.pool, "select * from bitrix_sync.record_contact_phone($1, $2, $3)", [
      id,
      u.id,
      h("d"),
    ]),
    {
      phone_hash: h("d"),
      name_hash: h("a"),
      last_applied_source: "app_create",
    },
  );
  const fresh = contactId();
  t.like(
    await one<Snapshot>(db.pool, "select * from bitrix_sync.record_contact_phone($1, $2, $3)", [
      fresh,
      u.id,
      h("e"),
    ]),
    {
      phone_hash: h("e"),
      stale: false,
    },
  );
});

test("mark_contact_snapshot_stale keeps every value and refuses raw text as the reason", async (t) => {
  const u = await makeUser(db.pool);
  const id = contactId();
  await db.pool.query("select bitrix_sync.record_contact_created($1, $2, $3, null, null, null)", [
    id,
    u.id,
    h("a"),
  ]);
  t.like(
    await one<Snapshot>(
      db.pool,
      "select * from bitrix_sync.mark_contact_snapshot_stale($1, $2, 'contact_not_found')",
      [id, u.id],
    ),
    { stale: true, stale_reason: "contact_not_found", name_hash: h("a") },
  );
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.mark_contact_snapshot_stale($1, $2, 'Contact of Ivan Petrov gone')", [
      id,
      u.id,
    ]),
    "BS004",
  );
});

const apply = (q: Parameters<typeof one>[0], userId: string, id: string, source = "webhook") =>
  one<Snapshot>(
    q,
    `select * from bitrix_sync.apply_crm_master_fields($1, $2, 'Ivan Petrov', 'Россия', 'ivan@example.com',
       $3, $4, '45', now(), true, '2026-01-01T10:00:00+03:00', '2026-02-01T10:00:00+03:00', $5,
       '2026-02-01T07:00:05Z')`,
    [userId, id, h("1"), h("2"), source],
  );

test("apply_crm_master_fields writes the profile and the snapshot, and no App intent comes of it", async (t) => {
  const u = await makeUser(db.pool);
  const id = contactId();
  await db.pool.query("select bitrix_sync.mark_contact_snapshot_stale($1, $2, 'contact_not_found')", [
    id,
    u.id,
  ]);
  const queued = async () => {
    await foldJournal(db.pool);
    return (
      await one<{ n: number }>(
        db.pool,
        "select count(*)::int as n from han_app.sync_queue where entity_id = $1",
        [u.id],
      )
    ).n;
  };
  const before = await queued();
  await inTransaction(db.pool, async (c) => {
    const s = await apply(c, u.id, id);
    t.like(s, {
      name_hash: h("1"),
      email_hash: h("2"),
      citizenship_enum_id: "45",
      registered: true,
      last_applied_source: "webhook",
      stale: false,
      stale_reason: null,
    });
    t.deepEqual(s.crm_updated_at, new Date("2026-02-01T07:00:00Z"));
    t.deepEqual(s.last_webhook_received_at, new Date("2026-02-01T07:00:05Z"));
    t.deepEqual(
      s.last_webhook_source_at,
      new Date("2026-02-01T07:00:00Z"),
      "the CRM time the webhook's read found",
    );
    // Suppressed for the rest of this transaction: even an App-master change records nothing here.
    await c.query("update han_app.user_identity set phone_number = $2 where id = $1", [u.id, randomPhone()]);
  });
  t.is(await queued(), before);
  const p = await one(
    db.pool,
    "select full_name, citizenship, email, source_updated_at from han_app.client_profile where user_id = $1",
    [u.id],
  );
  t.deepEqual(p, {
    full_name: "Ivan Petrov",
    citizenship: "Россия",
    email: "ivan@example.com",
    source_updated_at: new Date("2026-02-01T07:00:00Z"),
  });
  // The next transaction is the App's own again: its phone change is an intent.
  await db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [
    u.id,
    randomPhone(),
  ]);
  t.is(await queued(), before + 1);
  await rejectsWith(t, apply(db.pool, u.id, id, "manual"), "BS004");
});

test("apply_crm_master_fields leaves the profile and the snapshot alone for a read older than the snapshot", async (t) => {
  const u = await makeUser(db.pool);
  const id = contactId();
  const write = (name: string, updatedAt: string) =>
    one<Snapshot>(
      db.pool,
      `select * from bitrix_sync.apply_crm_master_fields($1, $2, $3, null, null, $4, null, null, null, true,
         null, $5, 'webhook')`,
      [u.id, id, name, h(name === "Newer Name" ? "3" : "4"), updatedAt],
    );
  await write("Newer Name", "2026-03-01T10:00:00Z");
  const kept = await write("Older Name", "2026-02-01T10:00:00Z");
  t.deepEqual(kept.crm_updated_at, new Date("2026-03-01T10:00:00Z"));
  t.is(kept.name_hash, h("3"));
  const p = await one<{ full_name: string }>(
    db.pool,
    "select full_name from han_app.client_profile where user_id = $1",
    [u.id],
  );
  t.is(p.full_name, "Newer Name");
  // The same moment again is applied (a re-read of the same version).
  const same = await write("Newer Name", "2026-03-01T10:00:00Z");
  t.is(same.last_applied_source, "webhook");
});
