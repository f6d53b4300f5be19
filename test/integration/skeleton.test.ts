import test from "ava";
import { migrationsCurrent } from "../../src/db/migrate.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

test("a cloned test database has every committed migration applied", async (t) => {
  t.true(await migrationsCurrent(db.pool));
});

test("a schema a newer release migrated further is current; one without this release's newest migration is not", async (t) => {
  const c = await db.pool.connect();
  try {
    await c.query("begin");
    const { rows } = await c.query<{ hash: string; filename: string }>(
      "select hash, filename from graphile_migrate.migrations order by date desc, filename desc limit 1",
    );
    const newest = rows[0];
    t.truthy(newest);
    // A newer release's migration on top (its hash names ours as the previous one).
    await c.query(
      `insert into graphile_migrate.migrations (hash, previous_hash, filename, date)
       values ('sha1:newer-release', $1, '999999-newer-release.sql', now() + interval '1 minute')`,
      [newest?.hash],
    );
    t.true(await migrationsCurrent(c), "a newer schema keeps this release ready");
    await c.query("delete from graphile_migrate.migrations where hash in ('sha1:newer-release', $1)", [
      newest?.hash,
    ]);
    t.false(await migrationsCurrent(c), "this release's newest migration missing: pending");
  } finally {
    await c.query("rollback");
    c.release();
  }
});
