// Least privilege (§13, DESIGN.md): each role can do its job and nothing else.
import test from "ava";
import type pg from "pg";
import { makeUser } from "../helpers/factories.js";
import { rejectsWith } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

/** Runs `fn` as `role` in a transaction that is rolled back. */
async function asRole<T>(role: string, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const c = await db.pool.connect();
  try {
    await c.query("begin");
    await c.query(`set local role ${role}`);
    return await fn(c);
  } finally {
    await c.query("rollback").catch(() => undefined);
    c.release();
  }
}

const DENIED = "42501";

test("bitrix_sync_user writes CRM-master profile fields but not the phone or any other App column", async (t) => {
  const u = await makeUser(db.pool);
  await asRole("bitrix_sync_user", async (c) => {
    await c.query("set local han.sync_suppress = 'true'");
    const ok = await c.query(
      "update han_app.client_profile set full_name = 'N', citizenship = 'C', email = 'e@x.y', source_updated_at = now() where user_id = $1",
      [u.id],
    );
    t.is(ok.rowCount, 1);
  });
  for (const sql of [
    "update han_app.user_identity set phone_number = '+79990000000' where id = $1",
    "update han_app.user_identity set record_status = 'deleted' where id = $1",
    "update han_app.client_profile set foreign_phone = 'x' where user_id = $1",
    "update han_app.client_profile set record_status = 'deleted' where user_id = $1",
    "update han_app.client_profile set updated_at = now() where user_id = $1",
    "delete from han_app.client_profile where user_id = $1",
    "insert into han_app.user_identity (id) values ($1)",
  ]) {
    await rejectsWith(
      t,
      asRole("bitrix_sync_user", (c) => c.query(sql, [u.id])),
      DENIED,
      sql,
    );
  }
});

test("bitrix_sync_user processes the queue through the lease functions", async (t) => {
  await makeUser(db.pool);
  await asRole("bitrix_sync_user", async (c) => {
    const { rows } = await c.query("select * from bitrix_sync.claim_sync_tasks('w', 5)");
    t.true(rows.length >= 1);
    await c.query("select bitrix_sync.complete_sync_task($1, $2)", [rows[0].id, rows[0].lease_token]);
  });
  await rejectsWith(
    t,
    asRole("bitrix_sync_user", (c) => c.query("update han_app.sync_queue set task_type = 'contact.update'")),
    DENIED,
    "only the lease columns of sync_queue are writable",
  );
  await rejectsWith(
    t,
    asRole("bitrix_sync_user", (c) =>
      c.query(
        "insert into han_app.sync_queue (task_type, entity_type, entity_id, dedup_key) values ('contact.update','user',gen_random_uuid(),'x')",
      ),
    ),
    DENIED,
  );
});

test("bitrix_sync_user cannot run DDL", async (t) => {
  for (const sql of [
    "create table bitrix_sync.evil (id int)",
    "alter table bitrix_sync.settings add column evil int",
    "drop table bitrix_sync.contact_snapshots",
    "create table han_app.evil (id int)",
    "create schema evil",
    "alter table han_app.sync_queue drop column payload_json",
    "create or replace function bitrix_sync.complete_sync_task(p_id uuid, p_lease_token uuid) returns han_app.sync_queue language sql as 'select null::han_app.sync_queue'",
  ]) {
    await rejectsWith(
      t,
      asRole("bitrix_sync_user", (c) => c.query(sql)),
      DENIED,
      sql,
    );
  }
});

test("bitrix_sync_admin cannot write mapping rows; it may request a rebind and read status views", async (t) => {
  const u = await makeUser(db.pool);
  for (const sql of [
    `insert into bitrix_sync.entity_external_mapping (entity_id, external_id) values ('${u.id}', '42')`,
    "update bitrix_sync.entity_external_mapping set status = 'closed'",
    "delete from bitrix_sync.entity_external_mapping",
    "select * from bitrix_sync.workflow_instances",
    "select * from bitrix_sync.crm_commands",
    `select bitrix_sync.open_mapping('${u.id}', '42', null)`,
    "select * from bitrix_sync.claim_sync_tasks('admin', 1)",
    "update bitrix_sync.settings_versions set status = 'active'",
  ]) {
    await rejectsWith(
      t,
      asRole("bitrix_sync_admin", (c) => c.query(sql)),
      DENIED,
      sql,
    );
  }
  await asRole("bitrix_sync_admin", async (c) => {
    const { rows } = await c.query<{ id: string }>(
      "select bitrix_sync.request_bitrix_contact_rebind($1, '4242', 'duplicate merged by the CRM team', 'ops:test') as id",
      [u.id],
    );
    t.truthy(rows[0]?.id);
    const q = await c.query("select * from bitrix_sync.status_queue");
    t.true(q.rows.length >= 1);
    await c.query("select * from bitrix_sync.status_workflows");
    await c.query("select * from bitrix_sync.status_dead_letters");
  });
});

test("han_app_user cannot read bitrix_sync tables; its writes still enqueue through the trigger", async (t) => {
  for (const sql of [
    "select * from bitrix_sync.entity_external_mapping",
    "select * from bitrix_sync.settings_versions",
    "select bitrix_sync.active_settings()",
    "insert into han_app.sync_queue (task_type, entity_type, entity_id, dedup_key) values ('contact.update','user',gen_random_uuid(),'x')",
  ]) {
    await rejectsWith(
      t,
      asRole("han_app_user", (c) => c.query(sql)),
      DENIED,
      sql,
    );
  }
  await asRole("han_app_user", async (c) => {
    const u = await makeUser(c);
    const { rows } = await c.query("select task_type from han_app.sync_queue where entity_id = $1", [u.id]);
    t.deepEqual(rows, [{ task_type: "contact.map_or_create" }]);
  });
});
