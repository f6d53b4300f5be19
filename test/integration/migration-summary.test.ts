// What a DBA reviews (migrations/README.md): every migration after 000027 opens with a generated
// summary of what it creates, replaces and drops, worked out on a scratch database; `db:check`
// regenerates it and the committed schema dump and fails when either is not what the chain gives.
// Each test plays the developer on a copy of migrations/ and sql/ in a temporary folder (--root),
// never on the project's own migrations.
import { execFile } from "node:child_process";
import {
  appendFileSync,
  cpSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import test from "ava";
import pg from "pg";
import { migrateDatabase } from "../../src/db/migrate.js";
import { planMigrations, serialize, sqlApplyOrder } from "../../src/db/migration-source.js";
import { extractSummary } from "../../src/db/migration-summary.js";
import { projectRoot } from "../../src/local/project-root.js";
import { createEmptyDb, serverUrl } from "../helpers/testdb.js";

const run = promisify(execFile);

/** A copy of migrations/ and sql/ to play the developer in; removed after the test. */
function sandboxTree(t: { teardown(fn: () => void): void }): string {
  const root = mkdtempSync(join(tmpdir(), "bitrix-sync-summary-"));
  cpSync(join(projectRoot, "migrations"), join(root, "migrations"), { recursive: true });
  cpSync(join(projectRoot, "sql"), join(root, "sql"), { recursive: true });
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  return root;
}

function committedFiles(root: string): Map<string, string> {
  const dir = join(root, "migrations", "committed");
  return new Map(readdirSync(dir).map((f) => [f, readFileSync(join(dir, f), "utf8")]));
}

function nextNumber(root: string): string {
  const last = [...committedFiles(root).keys()].sort().at(-1) ?? "000000";
  return String(Number(last.slice(0, 6)) + 1).padStart(6, "0");
}

/** Runs the real script (npm run db:build / db:check / db:dump) on `root` with the tests' server. */
async function script(
  file: "build-migrations.ts" | "schema-dump.ts",
  root: string,
  ...args: string[]
): Promise<{ code: number; out: string }> {
  try {
    const r = await run(
      process.execPath,
      ["--import", "tsx", join(projectRoot, "scripts", file), "--root", root, ...args],
      { cwd: projectRoot, env: { ...process.env, TEST_DATABASE_URL: serverUrl() } },
    );
    return { code: 0, out: r.stdout + r.stderr };
  } catch (e) {
    const x = e as { code: number; stdout: string; stderr: string };
    return { code: x.code, out: x.stdout + x.stderr };
  }
}

const builder = (root: string, ...args: string[]) => script("build-migrations.ts", root, ...args);

test("a new migration opens with what it creates, replaces and drops; graphile-migrate applies it; db:check holds it to its body", async (t) => {
  const root = sandboxTree(t);
  const name = `${nextNumber(root)}-reviewable.sql`;
  // A function change (body and volatility) through its sql/ file, and table changes of its own.
  const cutover = join(root, "sql", "cutover", "cutover.sql");
  const original = readFileSync(cutover, "utf8");
  // A function as replacement: in a replacement string "$$" stands for one "$".
  const changed = original.replace(
    "language sql stable parallel safe set search_path = pg_catalog, pg_temp as $$\n  select exists (select 1 from bitrix_sync.cutover)",
    () =>
      "language sql volatile parallel safe set search_path = pg_catalog, pg_temp as $$\n  -- the gate\n  select exists (select 1 from bitrix_sync.cutover)",
  );
  t.not(changed, original, "the fixture's edit of sql/cutover/cutover.sql must apply");
  writeFileSync(cutover, changed);
  // A grant through the privilege catalogue: the table's decision, applied by apply_privileges().
  const tables = join(root, "sql", "admin", "tables.sql");
  const decisions = readFileSync(tables, "utf8");
  const granted = decisions.replace("performed_at)'], array[]::text[],", "performed_at)'], array['SELECT'],");
  t.not(granted, decisions, "the fixture's edit of sql/admin/tables.sql must apply");
  writeFileSync(tables, granted);
  writeFileSync(
    join(root, "migrations", "src", name),
    [
      "set local lock_timeout = '10s';",
      "alter table bitrix_sync.admin_actions add column note text",
      "  constraint admin_actions_note_short check (length(note) <= 200);",
      "comment on column bitrix_sync.admin_actions.note is 'A reviewer''s note.';",
      "create index admin_actions_note_idx on bitrix_sync.admin_actions (note);",
      "drop index bitrix_sync.crm_commands_completed_idx;",
      "-- #include sql/cutover/cutover.sql",
      "-- #include sql/admin/tables.sql",
      "select bitrix_sync.apply_privileges();",
      "",
    ].join("\n"),
  );

  const build = await builder(root);
  t.is(build.code, 0, build.out);
  t.regex(build.out, new RegExp(`wrote migrations/committed/${name}`));
  const text = committedFiles(root).get(name) as string;
  // graphile-migrate's header first, then the summary inside the hashed body.
  t.regex(
    text,
    /^--! Previous: sha1:[0-9a-f]+\n--! Hash: sha1:[0-9a-f]+\n--! Message: reviewable\n\n-- >>> what this migration changes/,
  );
  const summary = extractSummary(text) as string;
  t.truthy(summary);
  const lines = summary.split("\n");
  const section = (verb: string) => {
    const start = lines.findIndex((l) => l.startsWith(`-- ${verb} (`));
    if (start < 0) return [];
    const end = lines.findIndex((l, i) => i > start && /^-- \w/.test(l) && !l.startsWith("--  "));
    return lines.slice(start + 1, end < 0 ? undefined : end);
  };
  const creates = section("creates");
  const replaces = section("replaces");
  const drops = section("drops");
  t.true(creates.includes("--  column bitrix_sync.admin_actions.note: text"), summary);
  t.true(
    creates.includes(
      "--  constraint bitrix_sync.admin_actions admin_actions_note_short: CHECK ((length(note) <= 200))",
    ),
    summary,
  );
  t.true(
    creates.includes(
      "--  index bitrix_sync.admin_actions_note_idx: CREATE INDEX admin_actions_note_idx ON bitrix_sync.admin_actions USING btree (note)",
    ),
    summary,
  );
  t.true(creates.includes("--  grant SELECT on table bitrix_sync.admin_actions to han_app_user"), summary);
  t.true(
    creates.some((l) => l.startsWith("--  comment on table column bitrix_sync.admin_actions.note")),
    summary,
  );
  t.true(
    replaces.some((l) =>
      /^-- {2}function bitrix_sync\.cutover_performed\(\): sha [0-9a-f]{12} -> [0-9a-f]{12}; changed: body; volatility stable -> volatile$/.test(
        l,
      ),
    ),
    summary,
  );
  // The function's change as a unified diff of pg_get_functiondef.
  t.true(replaces.includes("--  |   LANGUAGE sql"), summary);
  const minus = replaces.indexOf("--  | - STABLE PARALLEL SAFE");
  t.true(minus > 0, summary);
  t.is(replaces[minus + 1], "--  | + PARALLEL SAFE", summary);
  t.true(replaces.includes("--  | +  -- the gate"), summary);
  t.true(
    drops.some((l) => l.startsWith("--  index bitrix_sync.crm_commands_completed_idx: CREATE INDEX")),
    summary,
  );
  t.true(
    drops.includes(
      "--  comment on index bitrix_sync.crm_commands_completed_idx: Retention: finished commands by age.",
    ),
    summary,
  );
  // Nothing else of sql/cutover/cutover.sql changed, so nothing else is listed as replaced.
  t.false(
    replaces.some((l) => l.includes("perform_cutover")),
    summary,
  );

  // graphile-migrate itself accepts the file: a database migrates through the whole chain.
  const db = await createEmptyDb();
  t.teardown(() => db.drop());
  await migrateDatabase(db.url, undefined, join(root, "migrations"));
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  try {
    const { rows } = await c.query(
      "select filename from graphile_migrate.migrations order by filename desc limit 1",
    );
    // graphile-migrate records the number without the words.
    t.is(rows[0]?.filename, `${name.slice(0, 6)}.sql`);
    const col = await c.query(
      "select 1 from information_schema.columns where table_name = 'admin_actions' and column_name = 'note'",
    );
    t.is(col.rowCount, 1);
  } finally {
    await c.end();
  }

  // The schema dump followed, and db:check holds.
  t.regex(readFileSync(join(root, "migrations", "schema.sql"), "utf8"), /\n {4}note text,?\n/);
  const check = await builder(root, "--check");
  t.is(check.code, 0, check.out);

  // A summary edited by hand, even with its hash made to match, is refused.
  const plan = planMigrations(root);
  const mine = plan.committed.find((m) => m.filename === name);
  const before = plan.committed.at(-2);
  if (!mine || !before) throw new Error("the fixture's migration is missing");
  const forged = mine.body.replace("--  column bitrix_sync.admin_actions.note: text\n", "");
  t.not(forged, mine.body);
  writeFileSync(join(root, "migrations", "committed", name), serialize(name, forged, before.hash));
  t.deepEqual(planMigrations(root).problems, []);
  const forgedCheck = await builder(root, "--check");
  t.is(forgedCheck.code, 1);
  t.regex(
    forgedCheck.out,
    new RegExp(`migrations/committed/${name}: its summary is not what the migration changes`),
  );
});

test("a migration that includes every sql/ file unchanged changes nothing, and says so", async (t) => {
  const root = sandboxTree(t);
  const name = `${nextNumber(root)}-everything-again.sql`;
  const includes = sqlApplyOrder(root).map((rel) => `-- #include ${rel}`);
  t.true(includes.length >= 20);
  writeFileSync(
    join(root, "migrations", "src", name),
    // Every file again locks every table it touches. A CI run on a loaded machine once timed out
    // here at 10 s (the lock it waited for was not recorded); what this test checks is the summary.
    ["set local lock_timeout = '60s';", ...includes, ""].join("\n"),
  );
  const build = await builder(root);
  t.is(build.code, 0, build.out);
  const summary = extractSummary(committedFiles(root).get(name) as string) as string;
  t.true(summary.split("\n").includes("-- No change to the catalogue."), summary);
  t.is((await builder(root, "--check")).code, 0);
});

test("a migration that does not apply is reported with PostgreSQL's reason, and nothing is written", async (t) => {
  const root = sandboxTree(t);
  const before = committedFiles(root);
  const name = `${nextNumber(root)}-broken.sql`;
  writeFileSync(
    join(root, "migrations", "src", name),
    "alter table bitrix_sync.no_such_table add column x int;\n",
  );
  const build = await builder(root);
  t.is(build.code, 1);
  t.regex(
    build.out,
    new RegExp(
      `migrations/src/${name}: does not apply on migrations 000001-\\d{6}: .*no_such_table.* does not exist`,
    ),
  );
  t.deepEqual(committedFiles(root), before);
});

test("db:check names a schema dump that is not what the migrations leave; db:dump rewrites it", async (t) => {
  const root = sandboxTree(t);
  const dump = join(root, "migrations", "schema.sql");
  const good = readFileSync(dump, "utf8");
  appendFileSync(dump, "-- edited by hand\n");
  const check = await builder(root, "--check");
  t.is(check.code, 1);
  t.regex(
    check.out,
    /migrations\/schema\.sql: is not the schema the migrations leave \(first difference at line \d+: .*\); run npm run db:dump/,
  );
  const dumpCheck = await script("schema-dump.ts", root, "--check");
  t.is(dumpCheck.code, 1);
  const rewrite = await script("schema-dump.ts", root);
  t.is(rewrite.code, 0, rewrite.out);
  t.is(readFileSync(dump, "utf8"), good);
  // What a review needs and what differs by machine: grants yes, owners and versions no, and nothing
  // of graphile-migrate's schema (a view may read its table: bitrix_sync.status_schema does).
  t.regex(good, /^GRANT SELECT ON TABLE bitrix_sync\.cutover TO bitrix_sync_user;$/m);
  t.notRegex(
    good,
    /Owner: (?!-)|OWNER TO|Dumped (from|by)|Schema: graphile_migrate;|SCHEMA graphile_migrate/,
  );
  t.regex(good, /^\\restrict bitrixsyncschemadump$/m);
});

test("a sql/ change after a release: db:check names the object and its file until a new migration includes it; moved text needs none", async (t) => {
  const root = sandboxTree(t);
  const before = committedFiles(root);
  // Moving a function (with its decision) into a file of its own changes no object: no migration.
  const alerts = join(root, "sql", "alerts", "alerts.sql");
  const text = readFileSync(alerts, "utf8");
  const start = text.indexOf("create or replace function bitrix_sync.record_alert_item(");
  const end = text.indexOf("\n\n", start);
  t.true(start > 0 && end > start);
  const moved = text.slice(start, end + 1);
  writeFileSync(alerts, text.slice(0, start) + text.slice(end + 2));
  writeFileSync(join(root, "sql", "alerts", "items.sql"), `-- Alert items (test fixture).\n\n${moved}`);
  const manifest = join(root, "sql", "manifest.txt");
  writeFileSync(
    manifest,
    readFileSync(manifest, "utf8").replace("alerts/alerts.sql\n", "alerts/alerts.sql\nalerts/items.sql\n"),
  );
  const check0 = await builder(root, "--check");
  t.is(check0.code, 0, check0.out);

  // A changed body and a new function, without a migration.
  const items = join(root, "sql", "alerts", "items.sql");
  writeFileSync(
    items,
    `${readFileSync(items, "utf8").replace("begin\n  update bitrix_sync.business_alerts", "begin\n  -- a later change\n  update bitrix_sync.business_alerts")}
create or replace function bitrix_sync.alert_items_probe() returns integer
language sql stable set search_path = pg_catalog, pg_temp as $$ select 1 $$;
comment on function bitrix_sync.alert_items_probe() is 'A probe of the test.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.alert_items_probe()', array['EXECUTE'], array[]::text[], array[]::text[], 'A probe.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
`,
  );
  const check1 = await builder(root, "--check");
  t.is(check1.code, 1);
  t.regex(
    check1.out,
    /^sql\/alerts\/items\.sql: changes what no migration applied yet: function bitrix_sync\.record_alert_item\(.*changed: body; add a migration in migrations\/src\/ that includes this file \(-- #include sql\/alerts\/items\.sql\)/m,
  );
  t.regex(
    check1.out,
    /^sql\/alerts\/items\.sql: adds what no migration applied yet: function bitrix_sync\.alert_items_probe\(\)/m,
  );
  t.regex(
    check1.out,
    /^sql\/alerts\/items\.sql: adds what no migration applied yet: row bitrix_sync\.privilege_decisions function bitrix_sync\.alert_items_probe\(\)/m,
  );
  t.notRegex(check1.out, /sql\/alerts\/alerts\.sql:/, "the file the function left is not named");
  // Building alone cannot fix it and rewrites nothing.
  const build1 = await builder(root);
  t.is(build1.code, 1);
  t.deepEqual(committedFiles(root), before);

  const name = `${nextNumber(root)}-later-change.sql`;
  writeFileSync(
    join(root, "migrations", "src", name),
    "-- later change\n-- #include sql/alerts/items.sql\nselect bitrix_sync.apply_privileges();\n",
  );
  const check2 = await builder(root, "--check");
  t.is(check2.code, 1);
  t.regex(check2.out, new RegExp(`migrations/src/${name}: not built yet`));

  const build2 = await builder(root);
  t.is(build2.code, 0, build2.out);
  const after = committedFiles(root);
  t.deepEqual([...after.keys()].sort(), [...before.keys(), name].sort());
  for (const [f, text] of before) t.is(after.get(f), text, `${f} must not change`);
  const summary = extractSummary(after.get(name) as string) as string;
  t.regex(summary, /^-- {2}function bitrix_sync\.record_alert_item\(.*changed: body$/m);
  t.regex(summary, /^-- {2}function bitrix_sync\.alert_items_probe\(\): sha/m);
  t.regex(
    summary,
    /^-- {2}grant EXECUTE on function bitrix_sync\.alert_items_probe\(\) to bitrix_sync_user$/m,
  );
  t.notRegex(summary, /to public/, "apply_privileges() took PUBLIC's default EXECUTE back");
  // The new file continues graphile-migrate's chain from the last committed hash.
  const plan = planMigrations(root);
  t.deepEqual(plan.problems, []);
  t.is(plan.committed.at(-1)?.previous, plan.committed.at(-2)?.hash);
  t.is((await builder(root, "--check")).code, 0);
});

test("on the embedded PostgreSQL fallback (no TEST_DATABASE_URL) db:dump prints the same schema.sql", async (t) => {
  // What .ci/run does on a machine without a local server: an embedded PostgreSQL 15 and the
  // system's pg_dump 15 (the embedded package ships none).
  const root = sandboxTree(t);
  const env: Record<string, string> = { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/tmp" };
  let out: string;
  try {
    const r = await run(
      process.execPath,
      ["--import", "tsx", join(projectRoot, "scripts", "schema-dump.ts"), "--root", root, "--check"],
      { cwd: projectRoot, env },
    );
    out = r.stdout + r.stderr;
  } catch (e) {
    const x = e as { stdout: string; stderr: string };
    return t.fail(x.stdout + x.stderr);
  }
  t.regex(out, /migrations\/schema\.sql is up to date \(an embedded PostgreSQL\)/);
});
