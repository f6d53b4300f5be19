// Hot settings (§12.3): typed validation, activation of validated versions only, rollback, audit.
import test from "ava";
import { rejectsWith } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

async function active(): Promise<Record<string, unknown>> {
  const { rows } = await db.pool.query<{ s: Record<string, unknown> }>(
    "select bitrix_sync.active_settings() as s",
  );
  return rows[0]?.s ?? {};
}

async function propose(changes: object, actor = "ops:test"): Promise<number> {
  const { rows } = await db.pool.query<{ v: number }>("select bitrix_sync.propose_settings($1, $2) as v", [
    JSON.stringify(changes),
    actor,
  ]);
  return rows[0]?.v ?? -1;
}

async function validate(version: number): Promise<string[]> {
  const { rows } = await db.pool.query<{ e: string[] }>(
    "select bitrix_sync.validate_settings_version($1) as e",
    [version],
  );
  return rows[0]?.e ?? [];
}

test.serial("a fresh database runs on the catalogue defaults as version 1", async (t) => {
  const s = await active();
  t.is(s._version, 1);
  t.is(s["batch.size"], 20);
  t.is(s["limiter.refill_per_sec"], 2);
  t.is(s["limiter.max_in_flight"], 2);
  t.is(s["retry.horizon_sec"], 86400);
  t.is(s["reconcile.opened_filter"], "Y");
  t.is(s["alerts.entity_type_id"], null);
});

test.serial("invalid values are rejected with reasons and can never be activated", async (t) => {
  const bad = [
    [{ "batch.size": 0 }, /batch\.size: must be at least 1/],
    [{ "batch.size": 51 }, /batch\.size: must be at most 50/],
    [{ "batch.size": 2.5 }, /batch\.size: must be a whole number/],
    [{ "limiter.max_in_flight": 0 }, /limiter\.max_in_flight: must be at least 1/],
    [{ "limiter.refill_per_sec": 0 }, /limiter\.refill_per_sec: must be at least/],
    [{ "reconcile.contacts_interval_sec": -5 }, /reconcile\.contacts_interval_sec: must be at least/],
    [{ "batch.size": "20" }, /batch\.size: must be a number/],
    [{ "reconcile.opened_filter": "yes" }, /reconcile\.opened_filter: must be one of/],
    [{ "no.such_key": 1 }, /no\.such_key: unknown setting/],
    [{ "retry.base_ms": 500000, "retry.max_ms": 1000 }, /retry\.base_ms: must not exceed retry\.max_ms/],
  ] as const;
  for (const [changes, reason] of bad) {
    const v = await propose(changes);
    const errors = await validate(v);
    t.true(
      errors.some((e) => reason.test(e)),
      `${JSON.stringify(changes)} -> ${JSON.stringify(errors)}`,
    );
    const err = await rejectsWith(
      t,
      db.pool.query("select bitrix_sync.activate_settings_version($1, 'ops:test')", [v]),
      "BS008",
    );
    t.regex(err.message, /only a validated version can be activated/);
    t.regex(err.hint ?? "", /validation_errors/);
  }
  t.is((await active())._version, 1, "nothing was half-applied");
});

test.serial("a draft must be validated before activation", async (t) => {
  const v = await propose({ "batch.size": 30 });
  const err = await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.activate_settings_version($1, 'ops:test')", [v]),
    "BS008",
  );
  t.regex(err.hint ?? "", /validate_settings_version/);
});

test.serial(
  "a validated version activates, records who and when, and NOTIFYs; rollback restores an earlier one",
  async (t) => {
    const v2 = await propose({ "batch.size": 25, "limiter.burst": 10 }, "ops:anna");
    t.deepEqual(await validate(v2), []);
    const c = await db.pool.connect();
    const notes: string[] = [];
    c.on("notification", (n) => notes.push(n.payload ?? ""));
    await c.query("listen bitrix_sync_settings");
    try {
      await db.pool.query("select bitrix_sync.activate_settings_version($1, 'ops:anna')", [v2]);
      for (let i = 0; i < 50 && notes.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
      t.deepEqual(notes, [String(v2)]);
    } finally {
      c.release();
    }
    let s = await active();
    t.is(s._version, v2);
    t.is(s["batch.size"], 25);
    const audit = await db.pool.query(
      "select status, created_by, activated_by, activated_at is not null as stamped from bitrix_sync.settings_versions where version = any($1) order by version",
      [[1, v2]],
    );
    t.deepEqual(audit.rows, [
      { status: "superseded", created_by: "migration", activated_by: "migration", stamped: true },
      { status: "active", created_by: "ops:anna", activated_by: "ops:anna", stamped: true },
    ]);

    const { rows } = await db.pool.query<{ version: number; rollback_of: number }>(
      "select * from bitrix_sync.rollback_settings(1, 'ops:boris')",
    );
    t.is(rows[0]?.rollback_of, 1);
    s = await active();
    t.is(s["batch.size"], 20);
    t.is(s._version, rows[0]?.version);
    const superseded = await db.pool.query(
      "select status from bitrix_sync.settings_versions where version = $1",
      [v2],
    );
    t.is(superseded.rows[0].status, "superseded");

    await rejectsWith(
      t,
      db.pool.query("select bitrix_sync.rollback_settings(2, 'ops:boris')"),
      "BS008",
      "a rejected or draft version is no rollback target",
    );
  },
);

test.serial("settings history cannot be deleted or edited around the guard", async (t) => {
  await rejectsWith(t, db.pool.query("delete from bitrix_sync.settings_versions where version = 1"), "BS003");
  await rejectsWith(
    t,
    db.pool.query("update bitrix_sync.settings_versions set status = 'active' where status = 'rejected'"),
    "BS002",
  );
});

/** propose_settings with the changes as written (JSON text), so 1036.0 reaches the database as such. */
async function proposeRaw(json: string): Promise<number> {
  const { rows } = await db.pool.query<{ v: number }>(
    "select bitrix_sync.propose_settings($1::jsonb, 'ops:test') as v",
    [json],
  );
  return rows[0]?.v ?? -1;
}

async function storedText(version: number, key: string): Promise<string | undefined> {
  const { rows } = await db.pool.query<{ v: string }>(
    "select settings_values ->> $2 as v from bitrix_sync.settings_versions where version = $1",
    [version, key],
  );
  return rows[0]?.v;
}

test.serial("integer settings are stored as int4 prints them: 1036.0 and 1.0360e3 become 1036", async (t) => {
  for (const written of ["1036.0", "1.0360e3"]) {
    const v = await proposeRaw(
      `{"alerts.entity_type_id": ${written}, "alerts.database_only": true, "batch.size": 25.00}`,
    );
    t.is(await storedText(v, "alerts.entity_type_id"), "1036", written);
    t.is(await storedText(v, "batch.size"), "25", written);
    t.deepEqual(await validate(v), []);
  }
  // A draft written without propose_settings() (by the owner) is normalised when validated.
  const { rows } = await db.pool.query<{ version: number }>(
    `insert into bitrix_sync.settings_versions (settings_values, created_by)
     values ('{"alerts.entity_type_id": 1036.0, "alerts.database_only": true}'::jsonb, 'owner') returning version`,
  );
  const v = rows[0]?.version as number;
  t.is(await storedText(v, "alerts.entity_type_id"), "1036.0");
  t.deepEqual(await validate(v), []);
  t.is(await storedText(v, "alerts.entity_type_id"), "1036");
  // What every SQL reader does with it.
  const r = await db.pool.query(
    "select (settings_values ->> 'alerts.entity_type_id')::integer as id from bitrix_sync.settings_versions where version = $1",
    [v],
  );
  t.is(r.rows[0].id, 1036);
});

test.serial(
  "every key is bounded: int4 for the alert IDs, a maximum length for text, known entries for alerts.fields",
  async (t) => {
    const cases: Array<[string, string]> = [
      ['{"alerts.entity_type_id": 2147483648}', "alerts.entity_type_id: must be at most 2147483647"],
      ['{"alerts.entity_type_id": 1e12}', "alerts.entity_type_id: must be at most 2147483647"],
      ['{"alerts.responsible_id": 2147483648}', "alerts.responsible_id: must be at most 2147483647"],
      ['{"alerts.category_id": 2147483648}', "alerts.category_id: must be at most 2147483647"],
      [`{"alerts.stage_new": "${"S".repeat(65)}"}`, "alerts.stage_new: must be at most 64 characters"],
      ['{"alerts.fields": {"bogus": "ufCrm1_x"}}', "alerts.fields: unknown entry bogus"],
      [
        '{"alerts.fields": {"fingerprint": 7}}',
        "alerts.fields: entry fingerprint must be a non-empty string",
      ],
      [
        `{"alerts.fields": {"fingerprint": "${"f".repeat(65)}"}}`,
        "alerts.fields: entry fingerprint must be a non-empty string",
      ],
    ];
    for (const [json, message] of cases) {
      const errors = await validate(await proposeRaw(json));
      t.true(
        errors.some((e) => e.startsWith(message)),
        `${json.slice(0, 60)}: ${JSON.stringify(errors)}`,
      );
    }
    const ok = await validate(
      await proposeRaw(
        `{"alerts.entity_type_id": 2147483647, "alerts.database_only": true, "alerts.stage_new": "${"S".repeat(64)}", "alerts.fields": {"fingerprint": "ufCrm14_1"}}`,
      ),
    );
    t.deepEqual(ok, []);
  },
);

test.serial("the catalogue itself refuses a key without bounds", async (t) => {
  for (const sql of [
    "insert into bitrix_sync.settings (key, value_type, description) values ('x.unbounded', 'integer', 'x')",
    "insert into bitrix_sync.settings (key, value_type, min_value, max_value, description) values ('x.big', 'integer', 0, 3000000000, 'x')",
    "insert into bitrix_sync.settings (key, value_type, description) values ('x.text', 'text', 'x')",
    "insert into bitrix_sync.settings (key, value_type, max_length, description) values ('x.json', 'json', 10, 'x')",
    "update bitrix_sync.settings set max_value = null where key = 'alerts.responsible_id'",
  ]) {
    await rejectsWith(t, db.pool.query(sql), "23514", sql);
  }
});

test.serial(
  "a version's values and audit never change once it left draft, not even by the owner",
  async (t) => {
    const { rows } = await db.pool.query<{ version: number }>(
      "select version from bitrix_sync.settings_versions where status = 'active'",
    );
    const v = rows[0]?.version as number;
    for (const set of [
      `settings_values = settings_values || '{"batch.size": 5000}'`,
      "created_by = 'someone else'",
      "activated_by = 'someone else'",
      "activated_at = now() - interval '1 year'",
      "validation_errors = '[]'",
      "based_on = null",
      "note = 'rewritten'",
    ]) {
      await rejectsWith(
        t,
        db.pool.query(`update bitrix_sync.settings_versions set ${set} where version = $1`, [v]),
        "BS031",
        set,
      );
    }
    // A version is born a draft.
    await rejectsWith(
      t,
      db.pool.query(
        `insert into bitrix_sync.settings_versions (status, settings_values, created_by, activated_by, activated_at)
       values ('validated', '{}', 'owner', null, null)`,
      ),
      "BS030",
    );
    // A draft's values may still change (nobody has validated them yet).
    const d = await proposeRaw('{"batch.size": 30}');
    await db.pool.query(
      `update bitrix_sync.settings_versions set settings_values = settings_values || '{"batch.size": 31}' where version = $1`,
      [d],
    );
    t.deepEqual(await validate(d), []);
    await rejectsWith(
      t,
      db.pool.query("update bitrix_sync.settings_versions set created_by = 'x' where version = $1", [d]),
      "BS031",
      "who created it never changes",
    );
  },
);
