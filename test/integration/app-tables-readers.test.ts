// Nothing the App's owner attaches to its tables runs with the project's rights (docs/security.md,
// "The App's tables"): every security definer function that reads han_app.user_identity or
// client_profile, or calls one that does, runs with row_security off (a policy is then an error,
// never executed code); no view of the project reads them (a view runs a policy's functions with its
// reader's rights); and the one function that writes them is the App writer's.
import test from "ava";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

test("every security definer reader of the App's tables runs with row_security off", async (t) => {
  const { rows } = await db.pool.query<{ sig: string; off: boolean }>(
    `with readers as (
       select p.oid from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where n.nspname in ('bitrix_sync', 'han_app')
          and p.prosrc ~ 'han_app\\.(user_identity|client_profile)'
     )
     select p.oid::regprocedure::text as sig, 'row_security=off' = any(coalesce(p.proconfig, '{}')) as off
       from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname in ('bitrix_sync', 'han_app') and p.prosecdef
        and (p.oid in (select oid from readers)
             or exists (select 1 from readers r join pg_proc q on q.oid = r.oid
                         where not q.prosecdef and p.prosrc ~ ('bitrix_sync\\.' || q.proname || '\\(')))
      order by 1`,
  );
  t.true(rows.length >= 10, `only ${rows.length} readers found: the query is wrong`);
  t.deepEqual(
    rows.filter((r) => !r.off).map((r) => r.sig),
    [],
  );
});

test("no view of the project reads the App's tables; the one writer of client_profile is the App writer's", async (t) => {
  const { rows } = await db.pool.query<{ view: string }>(
    `select distinct v.oid::regclass::text as view
       from pg_depend d
       join pg_rewrite w on w.oid = d.objid and d.classid = 'pg_rewrite'::regclass
       join pg_class v on v.oid = w.ev_class
       join pg_namespace n on n.oid = v.relnamespace
      where n.nspname in ('bitrix_sync', 'han_app')
        and d.refobjid in ('han_app.user_identity'::regclass, 'han_app.client_profile'::regclass)`,
  );
  t.deepEqual(rows, []);
  const writers = await db.pool.query<{ sig: string; owner: string; definer: boolean }>(
    `select p.oid::regprocedure::text as sig, p.proowner::regrole::text as owner, p.prosecdef as definer
       from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname in ('bitrix_sync', 'han_app')
        and p.prosrc ~* '(update|insert into|delete from)\\s+han_app\\.client_profile'`,
  );
  t.deepEqual(writers.rows, [
    {
      sig: "bitrix_sync._write_app_crm_master(uuid,text,text,text,timestamp with time zone)",
      owner: "bitrix_sync_app_writer",
      definer: true,
    },
  ]);
});
