// STYLE.md: every table, view, function and trigger of the project carries a COMMENT ON, so a DBA
// with psql (\d+, \df+) reads what an object is for. This lists whatever is missing one.
import test from "ava";
import { inTransaction } from "../../src/db/tx.js";
import type { Queryable } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

const SCHEMAS = ["han_app", "bitrix_sync"];

interface Obj {
  name: string;
  comment: string | null;
}

/** Objects of one kind in the project's schemas with their comments (extension members excluded). */
async function objects(
  kind: "relation" | "function" | "trigger" | "schema",
  q: Queryable = db.pool,
): Promise<Obj[]> {
  const sql = {
    relation: `
      select format('%I.%I (%s)', n.nspname, c.relname,
                    case c.relkind when 'r' then 'table' when 'p' then 'table' when 'v' then 'view'
                                   when 'm' then 'materialized view' else 'foreign table' end) as name,
             obj_description(c.oid, 'pg_class') as comment
        from pg_class c join pg_namespace n on n.oid = c.relnamespace
       where n.nspname = any($1) and c.relkind in ('r', 'p', 'v', 'm', 'f')
         and not exists (select 1 from pg_depend d
                          where d.classid = 'pg_class'::regclass and d.objid = c.oid and d.deptype = 'e')`,
    function: `
      select p.oid::regprocedure::text as name, obj_description(p.oid, 'pg_proc') as comment
        from pg_proc p join pg_namespace n on n.oid = p.pronamespace
       where n.nspname = any($1)
         and not exists (select 1 from pg_depend d
                          where d.classid = 'pg_proc'::regclass and d.objid = p.oid and d.deptype = 'e')`,
    trigger: `
      select format('%s on %s', t.tgname, t.tgrelid::regclass) as name, obj_description(t.oid, 'pg_trigger') as comment
        from pg_trigger t join pg_class c on c.oid = t.tgrelid join pg_namespace n on n.oid = c.relnamespace
       where n.nspname = any($1) and not t.tgisinternal`,
    schema: `
      select nspname as name, obj_description(oid, 'pg_namespace') as comment
        from pg_namespace where nspname = any($1)`,
  }[kind];
  const { rows } = await q.query<Obj>(sql, [SCHEMAS]);
  return rows;
}

const missing = (objs: Obj[]) =>
  objs
    .filter((o) => o.comment === null || o.comment.trim() === "")
    .map((o) => o.name)
    .sort();

test("both schemas have a comment", async (t) => {
  const objs = await objects("schema");
  t.is(objs.length, 2);
  t.deepEqual(missing(objs), []);
});

test("every table and view of han_app and bitrix_sync has a comment", async (t) => {
  const objs = await objects("relation");
  t.true(objs.length >= 20, `only ${objs.length} relations found: is the query still right?`);
  t.deepEqual(missing(objs), []);
});

test("every function of han_app and bitrix_sync has a comment", async (t) => {
  const objs = await objects("function");
  t.true(objs.length >= 40, `only ${objs.length} functions found: is the query still right?`);
  t.deepEqual(missing(objs), []);
});

test("every trigger on tables of han_app and bitrix_sync has a comment", async (t) => {
  const objs = await objects("trigger");
  t.true(objs.length >= 15, `only ${objs.length} triggers found: is the query still right?`);
  t.deepEqual(missing(objs), []);
});

test("an object added without a comment is reported", async (t) => {
  // Inside a transaction that is rolled back, so the other tests never see these objects.
  await t.throwsAsync(
    inTransaction(db.pool, async (c) => {
      await c.query("create table bitrix_sync.test_uncommented (id int)");
      await c.query("create function bitrix_sync.test_uncommented() returns int language sql as 'select 1'");
      await c.query(`create trigger _999_test_uncommented before insert on bitrix_sync.test_uncommented
                       for each row execute function bitrix_sync.tg__set_updated_at()`);
      t.deepEqual(missing(await objects("relation", c)), ["bitrix_sync.test_uncommented (table)"]);
      t.deepEqual(missing(await objects("function", c)), ["bitrix_sync.test_uncommented()"]);
      t.deepEqual(missing(await objects("trigger", c)), [
        "_999_test_uncommented on bitrix_sync.test_uncommented",
      ]);
      throw new Error("roll back");
    }),
    { message: "roll back" },
  );
});
