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
