// The compatibility window's rules without a database (src/db/compatibility.ts,
// src/db/schema-window.ts): which column type changes widen, how a contract step is declared, what a
// settings key's removal means, where a schema lies against a release's window and what the start
// line says. test/integration/migrations-compatibility.test.ts runs the same rules on the chain.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import type { Catalogue, CatalogueEntry } from "../../../src/db/catalogue.js";
import {
  bareRule,
  columnType,
  contractChanges,
  declaredContractSteps,
  isWidening,
  parameterDefaults,
} from "../../../src/db/compatibility.js";
import { migrationsFolder } from "../../../src/db/migrate.js";
import {
  outsideWindow,
  type ReleaseSchema,
  readReleaseSchema,
  type SchemaState,
  schemaInfo,
  schemaNumber,
  windowVerdict,
} from "../../../src/db/schema-window.js";

const cat = (...entries: CatalogueEntry[]): Catalogue =>
  new Map(entries.map((e) => [`${e.kind} ${e.name}`, e]));

test("column types: widenings pass, anything else is a narrowing", (t) => {
  t.true(isWidening("character varying(64)", "character varying(128)"));
  t.true(isWidening("character varying(64)", "text"));
  t.true(isWidening("character varying(64)", "character varying"));
  t.true(isWidening("integer", "bigint"));
  t.true(isWidening("numeric(10,2)", "numeric(12,2)"));
  t.true(isWidening("numeric(10,2)", "numeric"));
  t.false(isWidening("character varying(128)", "character varying(64)"));
  t.false(isWidening("text", "character varying(100)"));
  t.false(isWidening("bigint", "integer"));
  t.false(isWidening("numeric(12,2)", "numeric(12,3)"));
  t.false(isWidening("timestamp with time zone", "timestamp without time zone"));
  t.is(
    columnType("character varying(128) not null default 'x'::character varying"),
    "character varying(128)",
  );
  t.is(columnType("timestamp with time zone not null default now()"), "timestamp with time zone");
  t.is(columnType('text collate "C"'), "text");
});

test("a function's parameter defaults are counted from its header; casts do not make a new rule", (t) => {
  const def =
    "CREATE OR REPLACE FUNCTION s.f(p_a integer, p_b text DEFAULT NULL::text, p_c boolean DEFAULT false)\n RETURNS integer\n LANGUAGE sql\nAS $function$ select 1 $function$";
  t.is(parameterDefaults(def), 2);
  t.is(
    bareRule("CHECK (((resumed_by IS NULL) OR (length(btrim((resumed_by)::text)) > 0)))"),
    bareRule("CHECK (((resumed_by IS NULL) OR (length(btrim(resumed_by)) > 0)))"),
  );
  t.not(bareRule("CHECK ((length(x) < 100))"), bareRule("CHECK ((length(x) < 50))"));
});

test("contract changes: a removed settings key, a type changed, a lost default parameter; widening is none", (t) => {
  const key = (k: string, type: string): CatalogueEntry => ({
    kind: "row",
    name: `bitrix_sync.settings ${k}`,
    def: JSON.stringify({ key: k, value_type: type }),
  });
  const fn = (def: string, returns: string): CatalogueEntry => ({
    kind: "function",
    name: "bitrix_sync.f(integer,text)",
    def,
    attrs: { kind: "function", returns },
  });
  const before = cat(
    key("batch.size", "integer"),
    key("health.crm_stale_sec", "integer"),
    key("retry.base_ms", "integer"),
    fn("CREATE FUNCTION bitrix_sync.f(p integer, q text DEFAULT NULL::text)\n RETURNS integer", "integer"),
    { kind: "table", name: "bitrix_sync.t", def: "" },
    { kind: "column", name: "bitrix_sync.t.a", def: "character varying(64)" },
    { kind: "constraint", name: "bitrix_sync.t t_a_check", def: "CHECK ((length((a)::text) > 0))" },
  );
  const after = cat(
    key("batch.size", "integer"),
    key("health.crm_stale_sec", "number"),
    fn("CREATE FUNCTION bitrix_sync.f(p integer, q text)\n RETURNS bigint", "bigint"),
    { kind: "table", name: "bitrix_sync.t", def: "" },
    { kind: "column", name: "bitrix_sync.t.a", def: "text" },
    { kind: "constraint", name: "bitrix_sync.t t_a_check", def: "CHECK ((length(a) > 0))" },
    { kind: "column", name: "bitrix_sync.t.b", def: "text not null default ''::text" },
    { kind: "column", name: "bitrix_sync.t.c", def: "integer not null" },
    { kind: "constraint", name: "bitrix_sync.t t_b_check", def: "CHECK ((length(b) > 0))" },
  );
  t.deepEqual(
    contractChanges(before, after).map((c) => `${c.name}: ${c.what}`),
    [
      "bitrix_sync.t.c: adds a NOT NULL column without a default (an earlier release's insert leaves it out)",
      "bitrix_sync.f(integer,text): changes its result: integer -> bigint",
      "bitrix_sync.f(integer,text): loses a parameter default",
      "bitrix_sync.settings health.crm_stale_sec: changes the settings key's type: integer -> number",
      "bitrix_sync.settings retry.base_ms: removes the settings key",
    ],
    "a new NOT NULL column with a default and its own new CHECK is an expansion; varchar to text widens",
  );
});

test("a contract step is declared by its insert, not by a comment that shows the form", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-steps-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(
    join(dir, "000044-example.sql"),
    "-- insert into bitrix_sync.schema_contract_steps (migration, oldest_release_schema, what)\n-- values ('000044', '000041', 'a comment');\nselect 1;\n",
  );
  writeFileSync(
    join(dir, "000045-drop-old-column.sql"),
    "alter table bitrix_sync.t drop column old;\ninsert into bitrix_sync.schema_contract_steps (migration, oldest_release_schema, what)\nvalues ('000045', '000043', 'drops column bitrix_sync.t.old, which releases before 000043 read; it''s unused since');\n",
  );
  t.deepEqual(declaredContractSteps(dir), [
    {
      file: "000045-drop-old-column.sql",
      migration: "000045",
      floor: "000043",
      what: "drops column bitrix_sync.t.old, which releases before 000043 read; it's unused since",
    },
  ]);
});

const REL: ReleaseSchema = { number: "000040", name: "000040-compatibility-window", hash: "sha1:x" };
const state = (s: Partial<SchemaState>): SchemaState => ({
  database: "000040",
  ownApplied: true,
  floor: null,
  floorStep: null,
  ...s,
});

test("the window: inside from the release's own schema on, until a contract floor above it", (t) => {
  t.is(windowVerdict(state({}), REL), "inside");
  t.is(windowVerdict(state({ database: "000047", floor: "000040", floorStep: "000045" }), REL), "inside");
  t.is(windowVerdict(state({ database: "000047", floor: "000043", floorStep: "000045" }), REL), "contracted");
  t.is(windowVerdict(state({ database: "000035", ownApplied: false }), REL), "behind");
  t.is(windowVerdict(state({ database: null, ownApplied: false }), REL), "unmigrated");
  t.is(outsideWindow(state({}), "db:5432", REL), null);
  t.is(
    outsideWindow(state({ database: "000047", floor: "000043", floorStep: "000045" }), "db:5432", REL),
    'the database at db:5432 has schema 000047, outside the window: this release runs on schema 000040 (000040-compatibility-window) and every later schema whose contract floor is at most 000040, and contract step 000045 needs a release whose schema is 000043 or later: run a newer release, or restore a backup taken before 000045 (docs/runbook.md, "Rolling back").',
  );
  t.regex(
    outsideWindow(state({ database: "000035", ownApplied: false }), "db:5432", REL) ?? "",
    /has schema 000035, outside the window: .* its migration 000040 is not applied: apply this release's migrations \(npm run db:migrate/,
  );
  t.deepEqual(schemaInfo(state({ database: "000041", floor: "000038" }), REL), {
    release: "000040",
    database: "000041",
    contract_floor: "000038",
    in_window: true,
  });
  t.deepEqual(schemaInfo(null, REL), {
    release: "000040",
    database: null,
    contract_floor: null,
    in_window: null,
  });
  t.is(schemaNumber("000039.sql"), "000039");
  t.is(schemaNumber("current.sql"), null);
});

test("this release's schema is its newest committed migration", (t) => {
  const r = readReleaseSchema(migrationsFolder);
  t.regex(r.name, /^\d{6}-[a-z0-9-]+$/);
  t.is(r.number, r.name.slice(0, 6));
  t.regex(r.hash, /^sha1:[0-9a-f]{40}$/);
});

test("a function that only gains defaulted trailing parameters is still callable; a grant follows it", (t) => {
  const fn = (args: string, header: string, returns = "integer"): CatalogueEntry => ({
    kind: "function",
    name: `s.f(${args})`,
    def: `CREATE OR REPLACE FUNCTION s.f(${header})\n RETURNS ${returns}\n LANGUAGE sql\nAS $function$ select 1 $function$`,
    attrs: { kind: "function", returns },
  });
  const grant = (args: string, def = "EXECUTE"): CatalogueEntry => ({
    kind: "grant",
    name: `function s.f(${args}) to bitrix_sync_user`,
    def,
  });
  const before = cat(fn("p_a integer", "p_a integer"), grant("p_a integer"));
  const extended = cat(
    fn("p_a integer, p_b text", "p_a integer, p_b text DEFAULT NULL::text"),
    grant("p_a integer, p_b text"),
  );
  t.deepEqual(contractChanges(before, extended), []);
  // Without the grant on the new form, the runtime role lost EXECUTE.
  const ungranted = cat(fn("p_a integer, p_b text", "p_a integer, p_b text DEFAULT NULL::text"));
  t.deepEqual(
    contractChanges(before, ungranted).map((c) => c.what),
    ["revokes EXECUTE"],
  );
  // A trailing parameter without a default, or another result, breaks the old call.
  t.deepEqual(
    contractChanges(
      before,
      cat(fn("p_a integer, p_b text", "p_a integer, p_b text"), grant("p_a integer, p_b text")),
    ).map((c) => c.what),
    ["drops the function"],
  );
  t.deepEqual(
    contractChanges(
      before,
      cat(
        fn("p_a integer, p_b text", "p_a integer, p_b text DEFAULT NULL::text", "bigint"),
        grant("p_a integer, p_b text"),
      ),
    ).map((c) => c.what),
    ["drops the function"],
  );
});

test("a new CHECK that holds while a column new in that migration is null is no contract change", (t) => {
  const table: CatalogueEntry = { kind: "table", name: "s.t", def: "" };
  const col = (name: string, def: string): CatalogueEntry => ({ kind: "column", name: `s.t.${name}`, def });
  const check = (def: string): CatalogueEntry => ({ kind: "constraint", name: "s.t t_check", def });
  const before = cat(table, col("a", "text"));
  const guarded = "CHECK (((h IS NULL) OR ((a IS NOT NULL) AND (h ~ '^x'::text))))";
  t.deepEqual(contractChanges(before, cat(table, col("a", "text"), col("h", "text"), check(guarded))), []);
  // The same rule over a column that existed, or a new column an earlier insert fills by default, bites.
  t.is(
    contractChanges(before, cat(table, col("a", "text"), check("CHECK (((a IS NULL) OR (a ~ '^x'::text)))")))
      .length,
    1,
  );
  t.is(
    contractChanges(before, cat(table, col("a", "text"), col("h", "text default 'y'::text"), check(guarded)))
      .length,
    1,
  );
});
