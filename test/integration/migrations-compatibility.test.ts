// Expand-only, checked on a real database (docs/operations.md, "The compatibility window"): the
// released chain (migrations/released.sha256, 000001-000035) applied, then every later committed
// migration one at a time, each compared with the catalogue before it (src/db/compatibility.ts). A
// migration that drops or narrows something the releases before it use fails the test unless its
// source declares it a contract step (a row of bitrix_sync.schema_contract_steps); a declared step
// must be in migrations/README.md's table of contract steps and set the database's floor, so the
// window says so. And the whole chain against the released one: what the previous release meets.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import pg from "pg";
import type { Catalogue } from "../../src/db/catalogue.js";
import {
  type ContractChange,
  contractChanges,
  declaredContractSteps,
  RETIREMENTS,
  readCompatCatalogue,
} from "../../src/db/compatibility.js";
import { migrateDatabase, migrationsFolder } from "../../src/db/migrate.js";
import { releaseSchema } from "../../src/db/schema-window.js";
import { projectRoot } from "../../src/local/project-root.js";
import { createEmptyDb } from "../helpers/testdb.js";

const released = readFileSync(join(migrationsFolder, "released.sha256"), "utf8")
  .split("\n")
  .map((l) => l.trim().split(/\s+/)[1])
  .filter((p): p is string => p !== undefined)
  .map((p) => p.split("/").at(-1) as string);
const committed = readdirSync(join(migrationsFolder, "committed"))
  .filter((f) => f.endsWith(".sql"))
  .sort();
const later = committed.filter((f) => !released.includes(f));
const declared = declaredContractSteps(join(migrationsFolder, "src"));

const show = (c: ContractChange) => `${c.kind} ${c.name}: ${c.what}`;

test("every migration after the released ones is expand-only, or a contract step it declares and the window states", async (t) => {
  t.timeout(300_000);
  t.true(released.length >= 30 && later.length > 0, `${released.length} released, ${later.length} later`);
  const db = await createEmptyDb();
  const folder = mkdtempSync(join(tmpdir(), "bitrix-sync-compat-"));
  mkdirSync(join(folder, "committed"));
  const client = new pg.Client({ connectionString: db.url });
  try {
    for (const f of released)
      writeFileSync(join(folder, "committed", f), readFileSync(join(migrationsFolder, "committed", f)));
    await migrateDatabase(db.url, undefined, folder);
    await client.connect();
    const atRelease: Catalogue = await readCompatCatalogue(client);
    let before = atRelease;
    const found: { file: string; change: ContractChange }[] = [];
    const perMigration: string[] = [];
    for (const f of later) {
      writeFileSync(join(folder, "committed", f), readFileSync(join(migrationsFolder, "committed", f)));
      await migrateDatabase(db.url, undefined, folder);
      const after = await readCompatCatalogue(client);
      const changes = contractChanges(before, after);
      const step = declared.find((d) => d.migration === f.slice(0, 6));
      perMigration.push(`${f.slice(0, 6)}: ${changes.length} contract change(s)${step ? " (declared)" : ""}`);
      if (!step) found.push(...changes.map((change) => ({ file: f, change })));
      before = after;
    }
    t.log(perMigration.join("; "));
    // A change a later migration of the same release undoes (a function dropped, then restored with
    // its signature and result) is not one the previous release meets: the release applies all its
    // migrations in one run of the migrator. What stays is named with the migration that made it.
    const stays = new Set(contractChanges(atRelease, before).map((c) => `${c.kind} ${c.name}`));
    // A retirement (RETIREMENTS: admin tooling only, dropped for a flaw) is named, not failed.
    const retired = (c: ContractChange) => RETIREMENTS.has(`${c.kind} ${c.name}`);
    for (const { file, change } of found.filter(({ change }) => retired(change)))
      t.log(`retired: ${file}: ${show(change)} (${RETIREMENTS.get(`${change.kind} ${change.name}`)})`);
    const undeclared = found
      .filter(({ change }) => stays.has(`${change.kind} ${change.name}`) && !retired(change))
      .map(({ file, change }) => `${file}: ${show(change)}`);
    const undone = found.filter(
      ({ change }) => !stays.has(`${change.kind} ${change.name}`) && !retired(change),
    );
    if (undone.length > 0)
      t.log(
        `undone within the release: ${undone.map(({ file, change }) => `${file}: ${show(change)}`).join("; ")}`,
      );
    t.deepEqual(
      undeclared,
      [],
      "a migration drops or narrows what an earlier release uses: wait a release, restore compatibility in a new migration, or declare it a contract step (migrations/README.md)",
    );

    // What the previous release meets on this release's schema.
    const overall = contractChanges(atRelease, before).filter((c) => !retired(c));
    if (declared.length === 0)
      t.deepEqual(
        overall.map(show),
        [],
        "the released chain's objects are all still there, as wide as before (but the retirements)",
      );

    // Every declared step: its own migration, in the window table, and in the database.
    const readme = readFileSync(join(projectRoot, "migrations", "README.md"), "utf8");
    const table = [...readme.matchAll(/^\| (\d{6}) \| (\d{6}) \| (.+) \|$/gm)].map((m) => `${m[1]} ${m[2]}`);
    t.deepEqual(
      table.sort(),
      declared.map((d) => `${d.migration} ${d.floor}`).sort(),
      "migrations/README.md's contract steps are the declared ones",
    );
    for (const d of declared) t.is(d.file.slice(0, 6), d.migration, `${d.file} declares its own number`);
    const { rows } = await client.query<{ migration: string; floor: string }>(
      "select migration, oldest_release_schema as floor from bitrix_sync.schema_contract_steps order by 1",
    );
    t.deepEqual(
      rows.map((r) => `${r.migration} ${r.floor}`),
      declared.map((d) => `${d.migration} ${d.floor}`),
    );
    const { rows: w } = await client.query<{ newest: string; floor: string | null }>(
      "select newest_migration as newest, contract_floor as floor from bitrix_sync.status_schema",
    );
    t.is(w[0]?.newest, releaseSchema().number, "the schema is this release's");
    const floor =
      declared
        .map((d) => d.floor)
        .sort()
        .at(-1) ?? null;
    t.is(w[0]?.floor ?? null, floor);
    const previous = (released.at(-1) as string).slice(0, 6);

    // The check bites: a contract migration's statements, on this schema, in a transaction rolled back.
    await client.query("begin");
    try {
      await client.query(`
        alter table bitrix_sync.schema_contract_steps drop column recorded_at;
        alter table bitrix_sync.sync_pauses alter column resume_reason type varchar(100);
        alter table bitrix_sync.sync_pauses alter column resumed_by type varchar(256);
        alter table bitrix_sync.sync_pauses alter column paused_db_user set not null;
        alter table bitrix_sync.sync_pauses alter column paused_at drop default;
        alter table bitrix_sync.sync_pauses add constraint sync_pauses_short check (length(pause_reason) < 100);
        alter function bitrix_sync.sync_paused() rename to sync_paused_before;
        revoke select on bitrix_sync.status_schema from bitrix_sync_user;`);
      const found = contractChanges(before, await readCompatCatalogue(client)).map(show);
      t.deepEqual(found, [
        "column bitrix_sync.schema_contract_steps.recorded_at: drops the column",
        "column bitrix_sync.sync_pauses.paused_at: loses its default",
        "column bitrix_sync.sync_pauses.paused_db_user: becomes NOT NULL",
        "column bitrix_sync.sync_pauses.resume_reason: narrows or changes its type: text -> character varying(100)",
        "constraint bitrix_sync.sync_pauses sync_pauses_short: adds a constraint over existing columns: CHECK ((length(pause_reason) < 100))",
        "function bitrix_sync.sync_paused(): drops the function",
        "grant view bitrix_sync.status_schema to bitrix_sync_user: revokes SELECT",
      ]);
    } finally {
      await client.query("rollback");
    }
    t.log(
      floor === null || floor <= previous
        ? `the previous release (schema ${previous}) is inside this schema's window`
        : `contract floor ${floor}: the previous release (schema ${previous}) is outside; a rollback needs a restore`,
    );
  } finally {
    await client.end().catch(() => undefined);
    rmSync(folder, { recursive: true, force: true });
    await db.drop();
  }
});
