// Least privilege (§13, DESIGN.md): each role can do its job and nothing else.
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import test from "ava";
import type pg from "pg";
import { foldJournal, makeUser } from "../helpers/factories.js";
import { asRoleRolledBack } from "../helpers/roles.js";
import { rejectsWith } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

const DENIED = "42501";

test("bitrix_sync_user writes CRM-master profile fields but not the phone or any other App column", async (t) => {
  const u = await makeUser(db.pool);
  await asRoleRolledBack(db.pool, "bitrix_sync_user", async (c) => {
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
      asRoleRolledBack(db.pool, "bitrix_sync_user", (c) => c.query(sql, [u.id])),
      DENIED,
      sql,
    );
  }
});

test("bitrix_sync_user processes the queue through the lease functions", async (t) => {
  await makeUser(db.pool);
  await asRoleRolledBack(db.pool, "bitrix_sync_user", async (c) => {
    const { rows } = await c.query(
      "select * from bitrix_sync.claim_sync_tasks('w', 5, interval '60 seconds')",
    );
    t.true(rows.length >= 1);
    await c.query("select bitrix_sync.complete_sync_task($1, $2)", [rows[0].id, rows[0].lease_token]);
  });
  await rejectsWith(
    t,
    asRoleRolledBack(db.pool, "bitrix_sync_user", (c) =>
      c.query("update han_app.sync_queue set task_type = 'contact.update'"),
    ),
    DENIED,
    "only the lease columns of sync_queue are writable",
  );
  await rejectsWith(
    t,
    asRoleRolledBack(db.pool, "bitrix_sync_user", (c) =>
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
      asRoleRolledBack(db.pool, "bitrix_sync_user", (c) => c.query(sql)),
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
    "select * from bitrix_sync.claim_sync_tasks('admin', 1, interval '60 seconds')",
    "update bitrix_sync.settings_versions set status = 'active'",
  ]) {
    await rejectsWith(
      t,
      asRoleRolledBack(db.pool, "bitrix_sync_admin", (c) => c.query(sql)),
      DENIED,
      sql,
    );
  }
  await asRoleRolledBack(db.pool, "bitrix_sync_admin", async (c) => {
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
    "insert into han_app.sync_queue_journal (task_type, user_id, reason) values ('contact.update',gen_random_uuid(),'x')",
    "delete from han_app.sync_queue_journal",
    "select bitrix_sync.fold_intent_journal()",
  ]) {
    await rejectsWith(
      t,
      asRoleRolledBack(db.pool, "han_app_user", (c) => c.query(sql)),
      DENIED,
      sql,
    );
  }
  await asRoleRolledBack(db.pool, "han_app_user", async (c) => {
    const u = await makeUser(c, { fold: false });
    // The trigger appended the intent to the journal, which the App may read but not fold.
    const { rows: recorded } = await c.query(
      "select task_type, reason from han_app.sync_queue_journal where user_id = $1 order by recorded_at",
      [u.id],
    );
    t.deepEqual(recorded, [
      { task_type: "contact.map_or_create", reason: "identity_created" },
      { task_type: "contact.map_or_create", reason: "profile_created" },
    ]);
    // The service folds it (here as the owner, in the same transaction); the App sees the result.
    await c.query("reset role");
    await foldJournal(c);
    await c.query("set local role han_app_user");
    const { rows } = await c.query("select task_type from han_app.sync_queue where entity_id = $1", [u.id]);
    t.deepEqual(rows, [{ task_type: "contact.map_or_create" }]);
  });
});

// ---- the privilege catalogue (sql/privileges/, decisions beside their objects) -------------------

interface Drift {
  object_type: string;
  object_name: string;
  role: string | null;
  privilege: string | null;
  column_name: string | null;
  problem: string;
}

const drift = async (q: pg.Pool | pg.PoolClient = db.pool) =>
  (await q.query<Drift>("select * from bitrix_sync.role_privilege_drift order by 1, 2, 3, 4, 5")).rows;

test("the database's ACLs equal the privilege catalogue, and every object has a decision for each role", async (t) => {
  t.deepEqual(await drift(), []);
  const { rows } = await db.pool.query<{ roles: number; objects: number }>(
    "select count(distinct role)::int as roles, count(distinct (object_type, object_name))::int as objects from bitrix_sync.role_privileges",
  );
  // The runtime, the admin, the App and the App writer (docs/security.md, "The App's tables").
  t.is(rows[0]?.roles, 4);
  t.true((rows[0]?.objects ?? 0) >= 100, "the catalogue covers the schemas");
});

test("every table, view, sequence and function of han_app and bitrix_sync is in the catalogue", async (t) => {
  // The drift view looks at han_app's objects the catalogue names only (production's han_app also
  // holds the App's own tables); in a test database every han_app object is the project's.
  const { rows } = await db.pool.query<{ name: string }>(`
    with objects as (
      select case c.relkind when 'S' then 'sequence' when 'v' then 'view' else 'table' end as object_type,
             c.oid::regclass::text as object_name
        from pg_class c join pg_namespace n on n.oid = c.relnamespace
       where n.nspname in ('han_app', 'bitrix_sync') and c.relkind in ('r', 'p', 'v', 'm', 'S')
      union all
      select 'function', p.oid::regprocedure::text
        from pg_proc p join pg_namespace n on n.oid = p.pronamespace
       where n.nspname in ('han_app', 'bitrix_sync')
    )
    select o.object_type || ' ' || o.object_name as name from objects o
     where not exists (select 1 from bitrix_sync.role_privileges rp
                        where rp.object_type = o.object_type and rp.object_name = o.object_name)
     order by 1`);
  t.deepEqual(
    rows.map((r) => r.name),
    [],
  );
});

test("a new function without a decision shows as undecided, and apply_privileges() (sql/grants.sql) refuses to run", async (t) => {
  const grants = readFileSync(join(import.meta.dirname, "..", "..", "sql", "grants.sql"), "utf8");
  t.regex(grants, /^select bitrix_sync\.apply_privileges\(\);$/m);
  const c = await db.pool.connect();
  try {
    await c.query("begin");
    await c.query("create function bitrix_sync.undecided_fn() returns int language sql as 'select 1'");
    await c.query("comment on function bitrix_sync.undecided_fn() is 'test'");
    t.deepEqual(
      (await drift(c)).map((d) => `${d.object_name} ${d.role} ${d.privilege ?? ""} ${d.problem}`),
      [
        "bitrix_sync.undecided_fn() PUBLIC EXECUTE extra",
        "bitrix_sync.undecided_fn() bitrix_sync_admin  undecided",
        "bitrix_sync.undecided_fn() bitrix_sync_app_writer  undecided",
        "bitrix_sync.undecided_fn() bitrix_sync_user  undecided",
        "bitrix_sync.undecided_fn() han_app_user  undecided",
      ],
    );
    await c.query("savepoint before_apply");
    const err = await rejectsWith(t, c.query("select bitrix_sync.apply_privileges()"), "BS092");
    t.regex(err.message, /bitrix_sync\.undecided_fn\(\) \(undecided\)/);
    await c.query("rollback to savepoint before_apply");
    await rejectsWith(t, c.query(grants), "BS092");
    await c.query("rollback to savepoint before_apply");
    // Its decision, as its sql/ file would write it, and the catalogue applies: PUBLIC loses the
    // EXECUTE the function was created with, the runtime role gets it.
    await c.query(
      `insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
         ('function', 'bitrix_sync.undecided_fn()', array['EXECUTE'], array[]::text[], array[]::text[], 'test')
       on conflict (object_type, object_name) do update
         set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note`,
    );
    await c.query("select bitrix_sync.apply_privileges()");
    t.deepEqual(await drift(c), []);
    const { rows } = await c.query<{ user_ok: boolean; public_ok: boolean }>(
      `select has_function_privilege('bitrix_sync_user', 'bitrix_sync.undecided_fn()', 'execute') as user_ok,
              has_function_privilege('han_app_user', 'bitrix_sync.undecided_fn()', 'execute') as public_ok`,
    );
    t.deepEqual(rows[0], { user_ok: true, public_ok: false });
    // A decision left behind by a dropped object names nothing: refused too.
    await c.query("drop function bitrix_sync.undecided_fn()");
    const gone = await rejectsWith(t, c.query("select bitrix_sync.apply_privileges()"), "BS092");
    t.regex(gone.message, /function bitrix_sync\.undecided_fn\(\) \(unknown_object\)/);
  } finally {
    await c.query("rollback");
    c.release();
  }
});

test("a grant outside the catalogue, or one missing, shows as drift", async (t) => {
  const c = await db.pool.connect();
  try {
    await c.query("begin");
    await c.query(
      "grant execute on function bitrix_sync.propose_settings(jsonb, text, text) to bitrix_sync_user",
    );
    await c.query("grant update (phone_number) on han_app.user_identity to bitrix_sync_user");
    await c.query("revoke select on bitrix_sync.status_queue from bitrix_sync_admin");
    t.deepEqual(
      (await drift(c)).map((d) => [d.object_name, d.role, d.privilege, d.column_name, d.problem]),
      [
        ["bitrix_sync.propose_settings(jsonb,text,text)", "bitrix_sync_user", "EXECUTE", null, "extra"],
        ["han_app.user_identity", "bitrix_sync_user", "UPDATE", "phone_number", "extra"],
        ["bitrix_sync.status_queue", "bitrix_sync_admin", "SELECT", null, "missing"],
      ],
    );
  } finally {
    await c.query("rollback");
    c.release();
  }
});

/**
 * Runs `fn` in a transaction that is rolled back, with throwaway roles named `<prefix>_<hex>` created
 * in it (roles are cluster-wide: neither they nor their memberships are ever seen outside it).
 */
async function withThrowawayRoles(
  names: string[],
  fn: (c: pg.PoolClient, role: Record<string, string>) => Promise<void>,
): Promise<void> {
  const suffix = randomBytes(4).toString("hex");
  const role = Object.fromEntries(names.map((n) => [n, `bs_${n}_${suffix}`]));
  const c = await db.pool.connect();
  try {
    await c.query("begin");
    for (const r of Object.values(role)) await c.query(`create role ${r} nologin`);
    await fn(c, role);
  } finally {
    await c.query("rollback");
    c.release();
  }
}

test("a role outside the catalogue holding a privilege on the project's objects shows as drift", async (t) => {
  await withThrowawayRoles(["reporting"], async (c, { reporting }) => {
    await c.query(`grant select on bitrix_sync.entity_external_mapping to ${reporting}`);
    await c.query(`grant update (status) on han_app.sync_queue to ${reporting}`);
    await c.query(`grant execute on function bitrix_sync.active_settings() to ${reporting}`);
    await c.query(`grant usage on schema bitrix_sync to ${reporting}`);
    // The App's own tables and schema are the App's to share: not the project's business.
    await c.query(`grant select on han_app.client_profile to ${reporting}`);
    await c.query(`grant usage on schema han_app to ${reporting}`);
    t.deepEqual(
      (await drift(c)).map((d) => [d.object_name, d.role, d.privilege, d.column_name, d.problem]),
      [
        ["bitrix_sync.active_settings()", reporting, "EXECUTE", null, "extra"],
        ["bitrix_sync", reporting, "USAGE", null, "extra"],
        ["bitrix_sync.entity_external_mapping", reporting, "SELECT", null, "extra"],
        ["han_app.sync_queue", reporting, "UPDATE", "status", "extra"],
      ],
    );
  });
});

test("role memberships the catalogue does not list show as drift; a login holding one project role does not", async (t) => {
  await withThrowawayRoles(
    ["app", "ops", "ops_team", "other", "admin_giver", "service"],
    async (c, { app, ops, ops_team, other, admin_giver, service }) => {
      // What deployment does: logins holding one project role each, directly or through a group.
      await c.query(`grant han_app_user to ${app}`);
      await c.query(`grant bitrix_sync_admin to ${ops_team}`);
      await c.query(`grant ${ops_team} to ${ops}`);
      await c.query(`grant bitrix_sync_user to ${service}`);
      t.deepEqual(await drift(c), [], "one project role per login is the catalogue's rule");

      // The admin role granted to the App's login; a project role holding another role; a project
      // role in another project role; a membership that may be handed on.
      await c.query(`grant bitrix_sync_admin to ${app}`);
      await c.query(`grant ${other} to bitrix_sync_user`);
      await c.query("grant bitrix_sync_user to han_app_user");
      await c.query(`grant bitrix_sync_admin to ${admin_giver} with admin option`);
      t.deepEqual(
        (await drift(c)).map((d) => [d.object_type, d.object_name, d.role, d.privilege, d.problem]),
        [
          ["role", "bitrix_sync_admin", admin_giver, "MEMBER WITH ADMIN OPTION", "extra_membership"],
          ["role", "bitrix_sync_admin", app, "MEMBER", "conflicting_membership"],
          // the App's login now holds the runtime role too, through han_app_user
          ["role", "bitrix_sync_user", app, "MEMBER", "conflicting_membership"],
          ["role", "bitrix_sync_user", "han_app_user", "MEMBER", "extra_membership"],
          ["role", other, "bitrix_sync_user", "MEMBER", "extra_membership"],
          ["role", "han_app_user", app, "MEMBER", "conflicting_membership"],
        ],
      );
    },
  );
});

test("a login holding two project roles through groups shows as drift", async (t) => {
  await withThrowawayRoles(["team", "login"], async (c, { team, login }) => {
    await c.query(`grant bitrix_sync_admin to ${team}`);
    await c.query(`grant ${team} to ${login}`);
    await c.query(`grant bitrix_sync_user to ${login}`);
    t.deepEqual(
      (await drift(c)).map((d) => [d.object_name, d.role, d.problem]),
      [
        ["bitrix_sync_admin", login, "conflicting_membership"],
        ["bitrix_sync_user", login, "conflicting_membership"],
      ],
    );
  });
});

test("the App writer has the CRM-master columns and nothing in bitrix_sync; held with the service's role, it is drift", async (t) => {
  const { rows } = await db.pool.query(
    `select r.rolcanlogin as login,
            has_schema_privilege(r.oid, 'bitrix_sync', 'USAGE') as project_schema,
            has_schema_privilege(r.oid, 'han_app', 'USAGE') as app_schema,
            has_column_privilege(r.oid, 'han_app.client_profile', 'full_name', 'UPDATE') as crm_master,
            has_column_privilege(r.oid, 'han_app.client_profile', 'record_status', 'UPDATE') as status,
            has_column_privilege(r.oid, 'han_app.client_profile', 'full_name', 'SELECT') as read_name,
            has_table_privilege(r.oid, 'han_app.user_identity', 'SELECT') as identity,
            (select p.proowner = r.oid from pg_proc p
              where p.oid = 'bitrix_sync._write_app_crm_master(uuid,text,text,text,timestamptz)'::regprocedure) as owns_write
       from pg_roles r where r.rolname = 'bitrix_sync_app_writer'`,
  );
  t.deepEqual(rows, [
    {
      login: false,
      project_schema: false,
      app_schema: true,
      crm_master: true,
      status: false,
      read_name: false,
      identity: false,
      owns_write: true,
    },
  ]);
  await withThrowawayRoles(["login", "service"], async (c, { login, service }) => {
    // Another database's schema owner in the same cluster holds the writer alone: no drift.
    await c.query(`grant bitrix_sync_app_writer to ${login}`);
    t.deepEqual(await drift(c), []);
    // The runtime role holding it, or the service's login holding both.
    await c.query("grant bitrix_sync_app_writer to bitrix_sync_user");
    await c.query(`grant bitrix_sync_user to ${service}`);
    t.deepEqual(
      (await drift(c)).map((d) => [d.object_type, d.object_name, d.role, d.privilege, d.problem]),
      [
        ["role", "bitrix_sync_app_writer", "bitrix_sync_user", "MEMBER", "extra_membership"],
        ["role", "bitrix_sync_app_writer", service, "MEMBER", "conflicting_membership"],
        ["role", "bitrix_sync_user", service, "MEMBER", "conflicting_membership"],
      ],
    );
  });
});

test("the admin functions are the admin's; the runtime role executes none of them", async (t) => {
  const { rows } = await db.pool.query<{ fn: string; user_ok: boolean; admin_ok: boolean; app_ok: boolean }>(
    `select f::regprocedure::text as fn,
            has_function_privilege('bitrix_sync_user', f::regprocedure, 'execute') as user_ok,
            has_function_privilege('bitrix_sync_admin', f::regprocedure, 'execute') as admin_ok,
            has_function_privilege('han_app_user', f::regprocedure, 'execute') as app_ok
       from unnest(array['bitrix_sync.perform_cutover(text)', 'bitrix_sync.propose_settings(jsonb,text,text)',
                         'bitrix_sync.validate_settings_version(integer)', 'bitrix_sync.activate_settings_version(integer,text)',
                         'bitrix_sync.rollback_settings(integer,text,text)',
                         'bitrix_sync.request_bitrix_contact_rebind(uuid,text,text,text)',
                         'bitrix_sync.accept_webhook(text,integer,text,inet)']) f`,
  );
  t.is(rows.length, 7);
  for (const r of rows) t.deepEqual([r.user_ok, r.admin_ok, r.app_ok], [false, true, false], r.fn);
});

test("bitrix_sync_user cannot rewrite settings, audit, the cutover or a link, nor insert a row past its initial state", async (t) => {
  const u = await makeUser(db.pool);
  const { rows: m } = await db.pool.query("select * from bitrix_sync.open_mapping($1, '98765', null)", [
    u.id,
  ]);
  const { rows: r } = await db.pool.query<{ id: string }>(
    "select bitrix_sync.request_bitrix_contact_rebind($1, '98766', 'duplicate merged by the CRM team', 'ops:test') as id",
    [u.id],
  );
  for (const sql of [
    `update bitrix_sync.settings_versions set settings_values = settings_values || '{"batch.size": 5000}' where status = 'active'`,
    "update bitrix_sync.settings set max_value = 100000 where key = 'batch.size'",
    "insert into bitrix_sync.settings_versions (settings_values, created_by) values ('{}', 'svc')",
    `update bitrix_sync.rebind_requests set reason = 'rewritten', operator_id = 'svc' where id = '${r[0]?.id}'`,
    "update bitrix_sync.settings_versions set created_by = 'svc', activated_by = 'svc'",
    "update bitrix_sync.cutover set cutover_watermark = now() + interval '10 years'",
    `update bitrix_sync.entity_external_mapping set external_id = '11111' where id = '${m[0]?.id}'`,
    `update bitrix_sync.entity_external_mapping set entity_id = gen_random_uuid() where id = '${m[0]?.id}'`,
    `insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, state, finished_at)
       values ('contact.update', 'contact.update', gen_random_uuid(), 'succeeded', now())`,
    `insert into bitrix_sync.crm_commands (workflow_id, command_type, status, lease_token, locked_until)
       values (null, 'contact.read', 'in_flight', gen_random_uuid(), now())`,
    "insert into bitrix_sync.webhook_inbox (receiver, entity_type_id, entity_id, status) values ('contact', 3, '5', 'processed')",
    `insert into bitrix_sync.entity_external_mapping (entity_id, external_id, status, closed_at, close_reason)
       values (gen_random_uuid(), '5', 'closed', now(), 'x')`,
    `insert into bitrix_sync.business_alerts (alert_type, fingerprint, status, closed_at)
       values ('duplicate_contacts', repeat('d', 64), 'resolved', now())`,
    `insert into bitrix_sync.rebind_requests (user_id, target_contact_id, reason, operator_id) values (gen_random_uuid(), '7', 'abc', 'svc')`,
    "update bitrix_sync.technical_dead_letters set resolved_at = now(), resolved_by = 'svc'",
    "delete from bitrix_sync.webhook_inbox",
    "delete from bitrix_sync.crm_commands",
  ]) {
    await rejectsWith(
      t,
      asRoleRolledBack(db.pool, "bitrix_sync_user", (c) => c.query(sql)),
      DENIED,
      sql.replace(/\s+/g, " ").slice(0, 90),
    );
  }
});

test("the row guards stop the owner too: rows are born in their initial state, links and audit never change", async (t) => {
  const u = await makeUser(db.pool);
  const { rows: m } = await db.pool.query("select * from bitrix_sync.open_mapping($1, '97531', null)", [
    u.id,
  ]);
  await rejectsWith(
    t,
    db.pool.query("update bitrix_sync.entity_external_mapping set external_id = '97532' where id = $1", [
      m[0]?.id,
    ]),
    "BS031",
  );
  for (const sql of [
    `insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, state, finished_at)
       values ('contact.update', 'contact.update', gen_random_uuid(), 'succeeded', now())`,
    `insert into bitrix_sync.crm_commands (alert_id, command_type, status, completed_at)
       values (null, 'alert.get', 'succeeded', now())`,
    "insert into bitrix_sync.webhook_inbox (receiver, entity_type_id, entity_id, status, processed_at) values ('contact', 3, '5', 'processed', now())",
    `insert into han_app.sync_queue (task_type, entity_type, entity_id, dedup_key, status, completed_at)
       values ('contact.update', 'user', gen_random_uuid(), 'x', 'processed', now())`,
    `insert into bitrix_sync.business_alerts (alert_type, fingerprint, status, closed_at)
       values ('duplicate_contacts', repeat('e', 64), 'resolved', now())`,
    `insert into bitrix_sync.rebind_requests (user_id, target_contact_id, reason, operator_id, status, completed_at)
       values (gen_random_uuid(), '7', 'abc', 'owner', 'succeeded', now())`,
  ]) {
    await rejectsWith(t, db.pool.query(sql), "BS030", sql.replace(/\s+/g, " ").slice(0, 90));
  }
});

test("bitrix_sync_admin reads settings, rebind requests, the cutover and the catalogue; han_app_user has nothing in bitrix_sync", async (t) => {
  await asRoleRolledBack(db.pool, "bitrix_sync_admin", async (c) => {
    for (const sql of [
      "select * from bitrix_sync.settings",
      "select * from bitrix_sync.settings_versions",
      "select * from bitrix_sync.rebind_requests",
      "select * from bitrix_sync.cutover",
      "select * from bitrix_sync.role_privileges",
      "select * from bitrix_sync.role_privilege_drift",
    ]) {
      await t.notThrowsAsync(c.query(sql), sql);
    }
  });
  for (const sql of [
    "update bitrix_sync.settings_versions set note = 'x'",
    "select * from bitrix_sync.webhook_inbox",
  ]) {
    await rejectsWith(
      t,
      asRoleRolledBack(db.pool, "bitrix_sync_admin", (c) => c.query(sql)),
      DENIED,
      sql,
    );
  }
  const { rows } = await db.pool.query<{ n: number }>(
    "select count(*)::int as n from bitrix_sync.role_privileges where role = 'han_app_user' and object_name like 'bitrix\\_sync%' and cardinality(privileges) > 0",
  );
  t.is(rows[0]?.n, 0);
});

test("bitrix_sync_user runs the alert path and the dead-letter path with its column grants", async (t) => {
  const u = await makeUser(db.pool);
  await asRoleRolledBack(db.pool, "bitrix_sync_user", async (c) => {
    const { rows: a } = await c.query<{ id: string }>(
      "select id from bitrix_sync.raise_business_alert('duplicate_contacts', 'low', repeat('f', 64), $1, '1', null, '[\"2\"]', '{}', null)",
      [u.id],
    );
    const id = a[0]?.id;
    // What runAlertSync does: lock pending alerts, issue the command, mark the alert mirrored.
    await c.query(
      "select a.id from bitrix_sync.business_alerts a where a.crm_sync_status = 'pending' for update of a skip locked",
    );
    await c.query("select bitrix_sync.issue_alert_command($1, 'alert.add', '{}')", [id]);
    await c.query("select bitrix_sync.mark_alert_mirrored($1)", [id]);
    await c.query("select bitrix_sync.record_alert_item($1, 77, 'DT1036_1:NEW')", [id]);
    await c.query("select bitrix_sync.finish_business_alert($1, 'resolved')", [id]);
    // A queue intent that dead-letters writes its technical DLQ row.
    const { rows: q } = await c.query<{ id: string; lease_token: string }>(
      "select id, lease_token from bitrix_sync.claim_sync_tasks('w', 100, interval '60 seconds') where entity_id = $1",
      [u.id],
    );
    const { rows: d } = await c.query<{ status: string }>(
      "select status from bitrix_sync.dead_letter_sync_task($1, $2, 'test_failure')",
      [q[0]?.id, q[0]?.lease_token],
    );
    t.is(d[0]?.status, "dead_letter");
  });
});
