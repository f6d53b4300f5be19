import { readFileSync } from "node:fs";
import { join } from "node:path";
import test from "ava";
import { migrationsCurrent, migrationsFolder } from "../../src/db/migrate.js";
import { expandMigrations } from "../../src/db/migration-source.js";
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

test("committed migrations are exactly what migrations/src expands to", (t) => {
  for (const m of expandMigrations()) {
    t.is(readFileSync(join(migrationsFolder, "committed", m.filename), "utf8"), m.text, m.filename);
  }
});
