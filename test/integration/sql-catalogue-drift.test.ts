// The command catalogue is written twice, once in TypeScript (src/crm/catalogue.ts) and once in the
// database; SQL owns what it enforces, and these tests hold the TypeScript copy to it: the command
// types equal the CHECK on crm_commands.command_type, and isWrite() agrees with _is_write_command(),
// which decides that an unanswered command is uncertain rather than retried.
import test from "ava";
import { COMMAND_TYPES, isWrite } from "../../src/crm/catalogue.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

/** The values the CHECK on crm_commands.command_type admits, read from the catalogue. */
async function checkedCommandTypes(): Promise<string[]> {
  const { rows } = await db.pool.query<{ def: string }>(
    `select pg_get_constraintdef(c.oid) as def
       from pg_constraint c
      where c.conrelid = 'bitrix_sync.crm_commands'::regclass and c.contype = 'c'
        and exists (select 1 from pg_attribute a
                     where a.attrelid = c.conrelid and a.attnum = any(c.conkey) and a.attname = 'command_type')`,
  );
  if (rows.length !== 1) throw new Error(`expected one CHECK on command_type, found ${rows.length}`);
  const def = rows[0]?.def ?? "";
  // CHECK (((command_type)::text = ANY ('{contact.find_by_phone,...}'::text[]))) (migration 000027)
  const list = /'\{([^}']*)\}'::text\[\]/.exec(def);
  if (!list) throw new Error(`the CHECK on command_type is not a text-array comparison: ${def}`);
  return (list[1] ?? "").split(",").sort();
}

test("COMMAND_TYPES equals the values of the CHECK on crm_commands.command_type", async (t) => {
  const inDb = await checkedCommandTypes();
  t.true(inDb.length >= 10, `only ${inDb.length} values parsed: is the query still right?`);
  t.deepEqual([...COMMAND_TYPES].sort(), inDb);
});

test("isWrite agrees with bitrix_sync._is_write_command for every command type", async (t) => {
  const { rows } = await db.pool.query<{ type: string; write: boolean }>(
    "select t as type, bitrix_sync._is_write_command(t) as write from unnest($1::text[]) t",
    [[...COMMAND_TYPES]],
  );
  t.deepEqual(
    Object.fromEntries(rows.map((r) => [r.type, r.write])),
    Object.fromEntries(COMMAND_TYPES.map((c) => [c, isWrite(c)])),
  );
  t.true(
    rows.some((r) => r.write) && rows.some((r) => !r.write),
    "both kinds exist, so the comparison can fail",
  );
});
