// Runs plpgsql_check over every PL/pgSQL function and trigger function of the project (schemas
// han_app and bitrix_sync) in a freshly migrated scratch database. Exit 1 on any error or warning.
// Needs a server with the plpgsql_check extension (Debian: postgresql-15-plpgsql-check).
import { randomBytes } from "node:crypto";
import pg from "pg";
import { migrateDatabase } from "../src/db/migrate.js";

/**
 * Parameters a function keeps only because the previous release passes them (its form is kept for
 * that release, inside the compatibility window: docs/operations.md); not using them is the point.
 */
const KEPT_FOR_PREVIOUS_RELEASE = new Map<string, string>([
  // 000040: the form without the values' hash records the first read and releases no hold.
  ["bitrix_sync.held_link_read(uuid,timestamp with time zone,boolean)", "p_robot_webhook"],
]);

import { withDatabase } from "../src/db/url.js";

const server = process.env.TEST_DATABASE_URL;
if (!server) throw new Error("set TEST_DATABASE_URL to a server with plpgsql_check installed");
const name = `bs_plpgsql_check_${randomBytes(4).toString("hex")}`;
const admin = new pg.Client({ connectionString: withDatabase(server, "postgres") });
await admin.connect();
await admin.query(`create database ${name}`);
let failures = 0;
try {
  const url = withDatabase(server, name);
  await migrateDatabase(url);
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query("create extension if not exists plpgsql_check");
    const { rows: fns } = await c.query<{ oid: number; sig: string; is_trigger: boolean }>(`
      select p.oid, p.oid::regprocedure::text as sig, p.prorettype = 'trigger'::regtype as is_trigger
        from pg_proc p
        join pg_namespace n on n.oid = p.pronamespace
        join pg_language l on l.oid = p.prolang
       where n.nspname in ('han_app', 'bitrix_sync') and l.lanname = 'plpgsql'
         and not exists (select 1 from pg_depend d where d.objid = p.oid and d.deptype = 'e')
       order by 2`);
    for (const fn of fns) {
      // A trigger function is checked against each table it is attached to, with the names of its
      // transition tables there (a statement-level trigger reads them as relations).
      const targets: Array<{ relid: number | null; oldtable: string | null; newtable: string | null }> = [];
      if (fn.is_trigger) {
        const { rows } = await c.query<{ tgrelid: number; oldtable: string | null; newtable: string | null }>(
          "select distinct tgrelid, tgoldtable::text as oldtable, tgnewtable::text as newtable from pg_trigger where tgfoid = $1",
          [fn.oid],
        );
        if (rows.length === 0) {
          console.log(`WARN ${fn.sig}: trigger function attached to no table`);
          failures++;
        }
        for (const r of rows) targets.push({ relid: r.tgrelid, oldtable: r.oldtable, newtable: r.newtable });
      } else {
        targets.push({ relid: null, oldtable: null, newtable: null });
      }
      for (const { relid, oldtable, newtable } of targets) {
        const { rows } = await c.query<{
          level: string;
          message: string;
          lineno: number | null;
          sqlstate: string;
        }>(
          `select level, message, lineno, sqlstate
             from plpgsql_check_function_tb($1::regprocedure, coalesce($2::oid, 0)::regclass,
                                            fatal_errors := false, extra_warnings := true,
                                            oldtable := $3::name, newtable := $4::name)`,
          [fn.oid, relid, oldtable, newtable],
        );
        for (const r of rows) {
          const kept = KEPT_FOR_PREVIOUS_RELEASE.get(fn.sig);
          if (kept && r.message === `unused parameter "${kept}"`) {
            console.log(`NOTE ${fn.sig}: ${r.message}, kept for the previous release's calls`);
            continue;
          }
          console.log(
            `${r.level.toUpperCase()} ${fn.sig} line ${r.lineno ?? "?"}: ${r.message} (${r.sqlstate})`,
          );
          if (r.level !== "performance") failures++;
        }
      }
    }
    console.log(`plpgsql_check: ${fns.length} functions checked, ${failures} problems`);
  } finally {
    await c.end();
  }
} finally {
  await admin.query(`drop database if exists ${name} with (force)`);
  await admin.end();
}
process.exitCode = failures > 0 ? 1 : 0;
