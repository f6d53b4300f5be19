// Who really did it (docs/admin.md): every audited admin action records the database login
// (session_user) beside the operator name the caller declares, in the table or view that audits it.
// Each case runs as a throwaway login that is a member of bitrix_sync_admin (SET SESSION
// AUTHORIZATION, so session_user is that login and not the operator name), in a transaction that is
// rolled back: the role and its membership are never visible outside it (roles are cluster-wide).
import { randomBytes, randomInt } from "node:crypto";
import test from "ava";
import type pg from "pg";
import { createdWorkflow } from "../helpers/builders.js";
import { deadLetteredIntent } from "../helpers/dead-letters.js";
import { makeUser } from "../helpers/factories.js";
import { setSettings } from "../helpers/settings.js";
import { forceRow, one } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  // The cutover is one of the audited actions: this database starts without one.
  db = await createTestDb({ cutover: false });
});
test.after.always(async () => {
  await db?.drop();
});

/**
 * Runs `act` as a new login `bs_audit_<hex>` holding bitrix_sync_admin (the operator's psql
 * session), then `check` as the superuser in the same transaction, then rolls everything back.
 */
async function asThrowawayLogin<T>(
  act: (c: pg.PoolClient) => Promise<T>,
  check: (c: pg.PoolClient, login: string, acted: T) => Promise<void>,
): Promise<void> {
  const login = `bs_audit_${randomBytes(5).toString("hex")}`;
  const c = await db.pool.connect();
  try {
    await c.query("begin");
    await c.query(`create role ${login} nologin`);
    await c.query(`grant bitrix_sync_admin to ${login}`);
    await c.query(`set local session authorization ${login}`);
    await c.query("set local role bitrix_sync_admin");
    const acted = await act(c);
    await c.query("reset role");
    await c.query("reset session authorization");
    await check(c, login, acted);
  } finally {
    await c.query("rollback").catch(() => undefined);
    c.release();
  }
}

test.serial("perform_cutover records the login beside performed_by", async (t) => {
  await asThrowawayLogin(
    (c) => c.query("select * from bitrix_sync.perform_cutover('ops:declared')"),
    async (c, login) => {
      const row = await one(c, "select performed_by, performed_db_user from bitrix_sync.cutover");
      t.deepEqual(row, { performed_by: "ops:declared", performed_db_user: login });
    },
  );
});

test.serial("settings versions record the login that proposed, validated and activated them", async (t) => {
  await asThrowawayLogin(
    async (c) => {
      const { v } = await one<{ v: number }>(
        c,
        `select bitrix_sync.propose_settings('{"batch.size": 21}', 'ops:declared', 'audit test') as v`,
      );
      await c.query("select bitrix_sync.validate_settings_version($1)", [v]);
      await c.query("select * from bitrix_sync.activate_settings_version($1, 'ops:declared')", [v]);
      const { r } = await one<{ r: number }>(
        c,
        "select (bitrix_sync.rollback_settings(1, 'ops:declared', 'back')).version as r",
      );
      return { v, r };
    },
    async (c, login, { v, r }) => {
      const { rows } = await c.query(
        `select version, created_by, created_db_user, validated_db_user, activated_by, activated_db_user
           from bitrix_sync.settings_versions where version = any($1) order by version`,
        [[v, r]],
      );
      t.deepEqual(rows, [
        {
          version: v,
          created_by: "ops:declared",
          created_db_user: login,
          validated_db_user: login,
          activated_by: "ops:declared",
          activated_db_user: login,
        },
        {
          version: r,
          created_by: "ops:declared",
          created_db_user: login,
          validated_db_user: login,
          activated_by: "ops:declared",
          activated_db_user: login,
        },
      ]);
    },
  );
});

test.serial(
  "a rebind request and its cancel record the login, in the table and in rebind_request_status",
  async (t) => {
    const user = await makeUser(db.pool);
    await db.pool.query("select bitrix_sync.open_mapping($1, $2, null)", [
      user.id,
      String(randomInt(1, 2 ** 40)),
    ]);
    await asThrowawayLogin(
      async (c) => {
        const { id } = await one<{ id: string }>(
          c,
          "select bitrix_sync.request_bitrix_contact_rebind($1, $2, 'duplicate merged in the CRM', 'ops:declared') as id",
          [user.id, String(randomInt(1, 2 ** 40))],
        );
        await c.query(
          "select * from bitrix_sync.cancel_rebind_request($1, 'asked by mistake', 'ops:other')",
          [id],
        );
        return id;
      },
      async (c, login, id) => {
        t.deepEqual(
          await one(
            c,
            "select operator_id, requested_db_user, cancelled_by, cancelled_db_user from bitrix_sync.rebind_requests where id = $1",
            [id],
          ),
          {
            operator_id: "ops:declared",
            requested_db_user: login,
            cancelled_by: "ops:other",
            cancelled_db_user: login,
          },
        );
        t.deepEqual(
          await one(
            c,
            "select operator_id, requested_db_user, cancelled_by, cancelled_db_user from bitrix_sync.rebind_request_status where request_id = $1",
            [id],
          ),
          {
            operator_id: "ops:declared",
            requested_db_user: login,
            cancelled_by: "ops:other",
            cancelled_db_user: login,
          },
        );
        t.deepEqual(
          await one(
            c,
            "select operator_id, db_user from bitrix_sync.admin_actions where rebind_request_id = $1",
            [id],
          ),
          { operator_id: "ops:other", db_user: login },
        );
      },
    );
  },
);

test.serial("parked workflow decisions record the login in admin_actions", async (t) => {
  const user = await makeUser(db.pool);
  const wf = await createdWorkflow(db.pool, { userId: user.id });
  await forceRow(db.pool, "bitrix_sync.workflow_instances", wf.id, {
    state: "waiting_manual",
    current_step: "manual",
    last_error_code: "invalid_phone",
    step_data: JSON.stringify({ pass: 1, as: "contact.map_or_create" }),
  });
  await asThrowawayLogin(
    (c) =>
      c.query("select * from bitrix_sync.cancel_parked_workflow($1, 'user left', 'ops:declared')", [wf.id]),
    async (c, login) => {
      t.deepEqual(
        await one(
          c,
          "select action, operator_id, db_user from bitrix_sync.admin_actions where workflow_id = $1",
          [wf.id],
        ),
        { action: "cancel_workflow", operator_id: "ops:declared", db_user: login },
      );
    },
  );
});

test.serial(
  "a dead letter's resolution records the login, in the table, list_dead_letters and admin_actions",
  async (t) => {
    const { dl } = await deadLetteredIntent(db.pool);
    await asThrowawayLogin(
      async (c) => {
        await c.query(
          "select * from bitrix_sync.acknowledge_dead_letter($1, 'ops:declared', 'looked at it')",
          [dl.id],
        );
        return await one<{ resolved_by: string; resolved_db_user: string }>(
          c,
          "select resolved_by, resolved_db_user from bitrix_sync.list_dead_letters(true, 10000) where id = $1",
          [dl.id],
        );
      },
      async (c, login, listed) => {
        t.deepEqual(listed, { resolved_by: "ops:declared", resolved_db_user: login });
        t.deepEqual(
          await one(
            c,
            "select resolved_by, resolved_db_user from bitrix_sync.technical_dead_letters where id = $1",
            [dl.id],
          ),
          { resolved_by: "ops:declared", resolved_db_user: login },
        );
        t.deepEqual(
          await one(
            c,
            "select operator_id, db_user from bitrix_sync.admin_actions where dead_letter_id = $1",
            [dl.id],
          ),
          { operator_id: "ops:declared", db_user: login },
        );
      },
    );
  },
);

test.serial("confirming a held phone link records the login in admin_actions", async (t) => {
  const user = await makeUser(db.pool);
  const contact = String(randomInt(1, 2 ** 40));
  await setSettings(db, { "mapping.hold_after_phone_link": true });
  await db.pool.query("select bitrix_sync.open_mapping($1, $2, null)", [user.id, contact]);
  const { held } = await one<{ held: boolean }>(
    db.pool,
    "select bitrix_sync.hold_phone_link($1, $2) as held",
    [user.id, contact],
  );
  t.true(held);
  await setSettings(db, { "mapping.hold_after_phone_link": false });
  await asThrowawayLogin(
    (c) =>
      c.query("select * from bitrix_sync.confirm_phone_link($1, 'confirmed by call', 'ops:declared')", [
        user.id,
      ]),
    async (c, login) => {
      t.deepEqual(
        await one(
          c,
          "select action, contact_id, operator_id, db_user from bitrix_sync.admin_actions where action = 'confirm_phone_link' and contact_id = $1",
          [contact],
        ),
        { action: "confirm_phone_link", contact_id: contact, operator_id: "ops:declared", db_user: login },
      );
    },
  );
});

test.serial(
  "the login columns: session_user by default where a row is inserted, set by the function where one is updated",
  async (t) => {
    // The migration adds the columns without a value for existing rows: the migration's own login
    // would be a false record. New rows take session_user from the column default.
    const { rows } = await db.pool.query<{
      table_name: string;
      column_name: string;
      column_default: string | null;
    }>(
      `select table_name, column_name, column_default from information_schema.columns
      where table_schema = 'bitrix_sync' and column_name like '%db_user'
        and table_name in (select tablename from pg_tables where schemaname = 'bitrix_sync') order by 1, 2`,
    );
    t.deepEqual(
      rows.map((r) => `${r.table_name}.${r.column_name} ${r.column_default ?? "-"}`),
      [
        "admin_actions.db_user SESSION_USER",
        "crm_contract_probes.recorded_db_user SESSION_USER",
        "cutover.performed_db_user SESSION_USER",
        "drift_repairs.db_user SESSION_USER",
        "rebind_requests.cancelled_db_user -",
        "rebind_requests.requested_db_user SESSION_USER",
        "settings_versions.activated_db_user -",
        "settings_versions.created_db_user SESSION_USER",
        "settings_versions.validated_db_user -",
        "sync_pauses.paused_db_user SESSION_USER",
        "sync_pauses.resumed_db_user -",
        "technical_dead_letters.resolved_db_user -",
      ],
    );
  },
);
