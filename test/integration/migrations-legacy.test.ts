// The expand and contract migrations on a database that already has the stub era's tables and
// rows (§6.1, §6.3): nothing is lost, the mapping moves once and verified, the column goes last.
import { randomBytes, randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import test from "ava";
import pg from "pg";
import { migrateDatabase, migrationsFolder } from "../../src/db/migrate.js";
import { withDatabase } from "../../src/db/url.js";
import { serverUrl } from "../helpers/testdb.js";

/** A new empty database holding only the baseline (the stub era's shapes). */
async function legacyDatabase(): Promise<{ url: string; client: pg.Client; drop: () => Promise<void> }> {
  const name = `bs_legacy_${randomBytes(5).toString("hex")}`;
  const admin = new pg.Client({ connectionString: withDatabase(serverUrl(), "postgres") });
  await admin.connect();
  await admin.query(`create database ${name}`);
  const url = withDatabase(serverUrl(), name);
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const baseline = readFileSync(join(migrationsFolder, "committed", "000001-baseline.sql"), "utf8");
  await client.query(baseline.replace(/^--! .*$/gm, ""));
  return {
    url,
    client,
    drop: async () => {
      await client.end();
      await admin.query(`drop database if exists ${name} with (force)`);
      await admin.end();
    },
  };
}

test("legacy sync_queue and mapping rows survive expand; bitrix_contact_id is gone after contract", async (t) => {
  const db = await legacyDatabase();
  try {
    const c = db.client;
    const users = Array.from({ length: 5 }, () => randomUUID());
    for (const [i, id] of users.entries()) {
      await c.query("insert into han_app.user_identity (id, phone_number) values ($1, $2)", [
        id,
        `+7999000000${i}`,
      ]);
      await c.query("insert into han_app.client_profile (user_id, bitrix_contact_id) values ($1, $2)", [
        id,
        i === 4 ? "555" : null,
      ]);
    }
    // Stub-era queue rows in every legacy status, one with an unknown type, one with a raw error.
    const legacy = [
      ["contact.map_or_create", "pending", null],
      ["contact.update", "processing", null],
      ["contact.map_or_create", "done", null],
      ["contact.deactivate", "failed", "timeout for +79990000003"],
      ["stub.ping", "pending", null],
    ] as const;
    for (const [i, [type, status, err]] of legacy.entries()) {
      await c.query(
        `insert into han_app.sync_queue (task_type, entity_type, entity_id, dedup_key, status, last_error, payload_json)
         values ($1, 'user', $2, $3, $4, $5, '{"schema_version":1}')`,
        [type, users[i], `${type}:user:${users[i]}`, status, err],
      );
    }
    // Legacy mapping: two users on distinct Contacts, and a third user on the first one's Contact.
    await c.query(
      `insert into han_app.entity_external_mapping (entity_type, entity_id, external_system, external_entity_type, external_id, created_at)
       values ('user', $1, 'bitrix24', 'contact', '101', now() - interval '2 days'),
              ('user', $2, 'bitrix24', 'contact', '102', now() - interval '2 days'),
              ('user', $3, 'bitrix24', 'contact', '101', now() - interval '1 day')`,
      [users[0], users[1], users[2]],
    );

    await migrateDatabase(db.url);

    const q = await c.query(
      "select task_type, status, last_error_code, cancel_reason from han_app.sync_queue order by task_type, status",
    );
    t.is(q.rows.length, legacy.length, "no queue row lost");
    t.deepEqual(q.rows, [
      {
        task_type: "contact.deactivate",
        status: "dead_letter",
        last_error_code: "legacy_stub_error",
        cancel_reason: null,
      },
      { task_type: "contact.map_or_create", status: "pending", last_error_code: null, cancel_reason: null },
      { task_type: "contact.map_or_create", status: "processed", last_error_code: null, cancel_reason: null },
      { task_type: "contact.update", status: "pending", last_error_code: null, cancel_reason: null },
      {
        task_type: "stub.ping",
        status: "cancelled",
        last_error_code: null,
        cancel_reason: "legacy_unknown_task_type",
      },
    ]);
    const cols = await c.query(
      "select column_name from information_schema.columns where table_schema = 'han_app' and table_name = 'sync_queue' order by ordinal_position",
    );
    t.deepEqual(
      cols.rows.map((r) => r.column_name).sort(),
      [
        "attempt_count",
        "cancel_reason",
        "completed_at",
        "created_at",
        "dedup_key",
        "entity_id",
        "entity_type",
        "id",
        "last_error_at",
        "last_error_code",
        "lease_token",
        "locked_by",
        "locked_until",
        "next_attempt_at",
        "payload_json",
        "status",
        "task_type",
        "updated_at",
      ],
      "exactly the columns of §6.1; the free-text last_error is gone",
    );

    // A finished intent no longer blocks a new one with the same dedup_key.
    await c.query(
      `insert into han_app.sync_queue (task_type, entity_type, entity_id, dedup_key)
       values ('contact.map_or_create', 'user', $1, $2)`,
      [users[2], `contact.map_or_create:user:${users[2]}`],
    );

    const m = await c.query(
      "select entity_id, external_id, status, close_reason from bitrix_sync.entity_external_mapping order by opened_at, external_id",
    );
    t.deepEqual(m.rows, [
      { entity_id: users[0], external_id: "101", status: "active", close_reason: null },
      { entity_id: users[1], external_id: "102", status: "active", close_reason: null },
      { entity_id: users[2], external_id: "101", status: "broken", close_reason: "legacy_duplicate" },
      { entity_id: users[4], external_id: "555", status: "active", close_reason: null },
    ]);
    const legacyTable = await c.query("select to_regclass('han_app.entity_external_mapping') as t");
    t.is(legacyTable.rows[0].t, null, "no second writable copy");
    const col = await c.query(
      "select 1 from information_schema.columns where table_schema = 'han_app' and table_name = 'client_profile' and column_name = 'bitrix_contact_id'",
    );
    t.is(col.rows.length, 0, "contract migration dropped the column");
    const idx = await c.query("select to_regclass('han_app.client_profile_bitrix_contact_id_idx') as i");
    t.is(idx.rows[0].i, null);
  } finally {
    await db.drop();
  }
});

test("the expand migration aborts with a clear message on legacy links it cannot represent, changing nothing", async (t) => {
  const db = await legacyDatabase();
  try {
    await db.client.query("insert into han_app.user_identity (id) values ($1)", [randomUUID()]);
    await db.client.query(
      `insert into han_app.entity_external_mapping (entity_type, entity_id, external_system, external_entity_type, external_id)
       values ('user', gen_random_uuid(), 'amocrm', 'contact', '77')`,
    );
    const err = await t.throwsAsync(migrateDatabase(db.url));
    t.regex(err?.message ?? "", /legacy mapping has 1 row\(s\) that are not bitrix24 user->Contact links/);
    const still = await db.client.query("select count(*)::int as n from han_app.entity_external_mapping");
    t.is(still.rows[0].n, 1, "the legacy table is untouched");
    const schema = await db.client.query("select to_regnamespace('bitrix_sync') as s");
    t.is(schema.rows[0].s, null, "the expand migration rolled back as a whole");
  } finally {
    await db.drop();
  }
});
