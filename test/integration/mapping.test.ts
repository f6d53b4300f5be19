// The canonical mapping (§4, §6.3): one active link per user and per Contact, history kept.
import test from "ava";
import { makeUser } from "../helpers/factories.js";
import { forceInsert, rejectsWith } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

async function open(userId: string, contactId: string) {
  const { rows } = await db.pool.query("select * from bitrix_sync.open_mapping($1, $2, null)", [
    userId,
    contactId,
  ]);
  return rows[0];
}

test("one active mapping per user and per Contact, enforced both ways", async (t) => {
  const a = await makeUser(db.pool);
  const b = await makeUser(db.pool);
  await open(a.id, "1001");
  const sameUser = await rejectsWith(t, open(a.id, "1002"), "BS006");
  t.regex(sameUser.hint ?? "", /close_mapping|rebind/);
  await rejectsWith(t, open(b.id, "1001"), "BS006");
  // The constraint holds for raw inserts too, not only through the function.
  await rejectsWith(
    t,
    db.pool.query(
      "insert into bitrix_sync.entity_external_mapping (entity_id, external_id) values ($1, '1001')",
      [b.id],
    ),
    "23505",
  );
});

test("closing keeps the history row and frees both sides; closed rows are final and never deleted", async (t) => {
  const a = await makeUser(db.pool);
  const b = await makeUser(db.pool);
  const m = await open(a.id, "2001");
  await db.pool.query("select bitrix_sync.close_mapping($1, 'taken_over', null)", [m.id]);
  await open(b.id, "2001");
  await open(a.id, "2002");
  const { rows } = await db.pool.query(
    "select entity_id, external_id, status, close_reason, closed_at is not null as closed from bitrix_sync.entity_external_mapping where entity_id = any($1) order by opened_at",
    [[a.id, b.id]],
  );
  t.deepEqual(rows, [
    { entity_id: a.id, external_id: "2001", status: "closed", close_reason: "taken_over", closed: true },
    { entity_id: b.id, external_id: "2001", status: "active", close_reason: null, closed: false },
    { entity_id: a.id, external_id: "2002", status: "active", close_reason: null, closed: false },
  ]);
  await rejectsWith(
    t,
    db.pool.query(
      "update bitrix_sync.entity_external_mapping set status = 'active', closed_at = null, close_reason = null where id = $1",
      [m.id],
    ),
    "BS002",
  );
  await rejectsWith(
    t,
    db.pool.query("delete from bitrix_sync.entity_external_mapping where id = $1", [m.id]),
    "BS003",
  );
  await rejectsWith(t, db.pool.query("select bitrix_sync.close_mapping($1, 'again', null)", [m.id]), "BS002");
});

test("an active row has no closed_at; a closed or broken row documents when and why", async (t) => {
  const a = await makeUser(db.pool);
  await rejectsWith(
    t,
    db.pool.query(
      "insert into bitrix_sync.entity_external_mapping (entity_id, external_id, closed_at) values ($1, '3001', now())",
      [a.id],
    ),
    "23514",
  );
  await rejectsWith(
    t,
    db.pool.query(
      "insert into bitrix_sync.entity_external_mapping (entity_id, external_id, status, closed_at, close_reason) values ($1, '3002', 'broken', now(), 'x')",
      [a.id],
    ),
    "BS030",
    "a link is born active",
  );
  await rejectsWith(
    t,
    forceInsert(db.pool, "bitrix_sync.entity_external_mapping", {
      entity_id: a.id,
      external_id: "3002",
      status: "broken",
      closed_at: new Date(),
    }),
    "23514",
    "broken without a reason, even with the guards off",
  );
  const m = await open(a.id, "3003");
  await db.pool.query("select bitrix_sync.close_mapping($1, 'contact_not_found', null, true)", [m.id]);
  const { rows } = await db.pool.query(
    "select status, close_reason from bitrix_sync.entity_external_mapping where id = $1",
    [m.id],
  );
  t.deepEqual(rows[0], { status: "broken", close_reason: "contact_not_found" });
});
