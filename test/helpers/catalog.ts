// A comparable picture of what the project defines in a database: functions, triggers, views,
// policies, grants and comments of its schemas, and the settings catalogue. Two databases with the
// same picture behave the same; the drift tests compare them.
import type pg from "pg";

/** Schemas whose objects the project defines or grants on. */
export const PROJECT_SCHEMAS = ["bitrix_sync", "han_app", "graphile_worker", "graphile_migrate"];

// aclitem arrays keep grant order; sort them so equal rights compare equal.
const ACL = (col: string) =>
  `(select coalesce(array_agg(x::text order by x::text), '{}') from unnest(${col}) x)`;

const QUERIES: Record<string, string> = {
  functions: `
    select p.oid::regprocedure::text as name, pg_get_functiondef(p.oid) as def, ${ACL("p.proacl")} as acl,
           obj_description(p.oid, 'pg_proc') as comment
      from pg_proc p join pg_namespace n on n.oid = p.pronamespace
     where n.nspname = any($1) and p.prokind in ('f', 'p')
       and n.nspname not in ('graphile_worker', 'graphile_migrate')
     order by 1`,
  function_grants: `
    select p.oid::regprocedure::text as name, ${ACL("p.proacl")} as acl
      from pg_proc p join pg_namespace n on n.oid = p.pronamespace
     where n.nspname in ('graphile_worker', 'graphile_migrate')
     order by 1`,
  triggers: `
    select t.tgrelid::regclass::text as tbl, t.tgname as name, pg_get_triggerdef(t.oid) as def,
           obj_description(t.oid, 'pg_trigger') as comment
      from pg_trigger t join pg_class c on c.oid = t.tgrelid join pg_namespace n on n.oid = c.relnamespace
     where not t.tgisinternal and n.nspname = any($1)
     order by 1, 2`,
  views: `
    select c.oid::regclass::text as name, pg_get_viewdef(c.oid) as def, obj_description(c.oid, 'pg_class') as comment
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
     where c.relkind in ('v', 'm') and n.nspname = any($1)
     order by 1`,
  relation_grants: `
    select c.oid::regclass::text as name, c.relkind as kind, ${ACL("c.relacl")} as acl, c.relrowsecurity as rls
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
     where c.relkind in ('r', 'p', 'v', 'm', 'S') and n.nspname = any($1)
     order by 1`,
  column_grants: `
    select a.attrelid::regclass::text as tbl, a.attname as col, ${ACL("a.attacl")} as acl
      from pg_attribute a join pg_class c on c.oid = a.attrelid join pg_namespace n on n.oid = c.relnamespace
     where a.attacl is not null and a.attnum > 0 and not a.attisdropped and n.nspname = any($1)
     order by 1, 2`,
  schema_grants: `
    select n.nspname as name, ${ACL("n.nspacl")} as acl, obj_description(n.oid, 'pg_namespace') as comment
      from pg_namespace n where n.nspname = any($1) order by 1`,
  policies: `
    select schemaname, tablename, policyname, permissive, roles::text[] as roles, cmd, qual, with_check
      from pg_policies where schemaname = any($1) order by 1, 2, 3`,
  settings_catalogue: `
    select key, value_type, default_value::text, min_value::text, max_value::text, allowed_values::text,
           nullable, description
      from bitrix_sync.settings order by key`,
};

export type CatalogPicture = Record<string, unknown[]>;

/** The picture of `db`. */
export async function catalogPicture(db: pg.Pool | pg.Client): Promise<CatalogPicture> {
  const out: CatalogPicture = {};
  for (const [k, q] of Object.entries(QUERIES)) {
    const { rows } = await db.query(q, q.includes("$1") ? [PROJECT_SCHEMAS] : []);
    out[k] = rows;
  }
  return out;
}
