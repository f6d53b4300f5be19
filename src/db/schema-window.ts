// The compatibility window (docs/operations.md, "The compatibility window"; migrations/README.md):
// which database schemas this release runs on, and whether the database it is given is one of them.
//
// A schema is named by its newest applied migration's number (graphile-migrate records the number,
// e.g. 000042). This release's schema is its own newest committed migration. The window:
//
// - oldest: this release's own schema. Its code uses what its own migrations created (readiness
//   reads status_schema from 000042, the claim functions it calls are those of its migrations), so
//   it declares no older schema; a database without its newest migration is `behind`.
// - newest: open. Migrations are expand-only while the release before them runs, so every later
//   schema is inside, until a contract step (a migration that drops or narrows what earlier releases
//   use) records a contract floor above this release's schema in bitrix_sync.schema_contract_steps
//   (`contracted`). The release needs to know nothing about the future: the database says it.
//
// Startup refuses a schema outside the window (src/startup/schema-window.ts, exit 76); readiness
// answers not ready while the schema is outside it (migrations_pending when behind,
// schema_outside_window when contracted); preflight, the status document, readiness and the metric
// bitrix_sync_schema_info name both schemas.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type pg from "pg";
import { migrationsFolder } from "./migrate.js";

/** A release's schema: its newest committed migration. */
export interface ReleaseSchema {
  /** The migration's number, as the database records it: `000042`. */
  number: string;
  /** The file's name without `.sql`: `000042-compatibility-window`. */
  name: string;
  /** Its `--! Hash:`, which the database records when it is applied. */
  hash: string;
}

/** The newest committed migration of `folder` (a `migrations/` folder with `committed/`). */
export function readReleaseSchema(folder: string = migrationsFolder): ReleaseSchema {
  const dir = join(folder, "committed");
  const last = readdirSync(dir)
    .filter((f) => /^\d{6}-.*\.sql$/.test(f))
    .sort()
    .at(-1);
  if (!last) throw new Error(`no committed migration in ${dir}`);
  const hash = /^--! Hash: (\S+)$/m.exec(readFileSync(join(dir, last), "utf8"))?.[1];
  if (!hash) throw new Error(`${last} has no --! Hash: line`);
  return { number: last.slice(0, 6), name: last.replace(/\.sql$/, ""), hash };
}

let release: ReleaseSchema | undefined;

/** This release's schema (read once: the committed files do not change while the process runs). */
export function releaseSchema(): ReleaseSchema {
  release ??= readReleaseSchema();
  return release;
}

/** What the database says about its schema. */
export interface SchemaState {
  /** The newest applied migration's number; null when none is applied. */
  database: string | null;
  /** This release's own newest migration is among the applied ones. */
  ownApplied: boolean;
  /** The contract floor (status_schema.contract_floor); null: no contract step, or not read. */
  floor: string | null;
  /** The contract step that set the floor. */
  floorStep: string | null;
}

export type WindowVerdict = "inside" | "behind" | "contracted" | "unmigrated";

/** Where `state` lies against the window of `rel` (this release by default). */
export function windowVerdict(state: SchemaState, rel: ReleaseSchema = releaseSchema()): WindowVerdict {
  if (state.database === null) return "unmigrated";
  if (!state.ownApplied) return "behind";
  if (state.floor !== null && state.floor > rel.number) return "contracted";
  return "inside";
}

/** The window in words: `000042 (000042-compatibility-window) and every later schema whose contract floor is at most 000042`. */
export function windowText(rel: ReleaseSchema = releaseSchema()): string {
  return `schema ${rel.number} (${rel.name}) and every later schema whose contract floor is at most ${rel.number}`;
}

/** graphile-migrate's filename (`000042.sql`) as a schema number; null for anything else. */
export function schemaNumber(filename: string | null | undefined): string | null {
  const m = /^(\d{6})(?:\.sql)?$/.exec(filename ?? "");
  return m?.[1] ?? null;
}

/** The newest applied migration and whether this release's own is applied: one round trip. */
export async function readSchemaHead(
  client: pg.ClientBase | pg.Pool,
  rel: ReleaseSchema = releaseSchema(),
): Promise<Pick<SchemaState, "database" | "ownApplied">> {
  const { rows } = await client.query<{ newest: string | null; own: boolean }>(
    `select (select max(filename) from graphile_migrate.migrations) as newest,
            exists (select 1 from graphile_migrate.migrations where hash = $1) as own`,
    [rel.hash],
  );
  return { database: schemaNumber(rows[0]?.newest), ownApplied: rows[0]?.own === true };
}

/**
 * The whole state: graphile-migrate's table (none: nothing applied), then the contract floor when
 * this release's own migrations are there (status_schema exists from 000042 on; an older schema is
 * `behind` whatever its floor).
 */
export async function readSchemaState(
  client: pg.ClientBase | pg.Pool,
  rel: ReleaseSchema = releaseSchema(),
): Promise<SchemaState> {
  const { rows: t } = await client.query<{ t: boolean }>(
    "select to_regclass('graphile_migrate.migrations') is not null as t",
  );
  if (!t[0]?.t) return { database: null, ownApplied: false, floor: null, floorStep: null };
  const head = await readSchemaHead(client, rel);
  if (!head.ownApplied) return { ...head, floor: null, floorStep: null };
  const { rows } = await client.query<{ floor: string | null; step: string | null }>(
    "select contract_floor as floor, contract_step as step from bitrix_sync.status_schema",
  );
  return { ...head, floor: rows[0]?.floor ?? null, floorStep: rows[0]?.step ?? null };
}

/**
 * Why `state` is outside the window, and what to do, in one sentence (the startup line, the preflight
 * check); null when it is inside. Names schema numbers and commands only.
 */
export function outsideWindow(
  state: SchemaState,
  where: string,
  rel: ReleaseSchema = releaseSchema(),
): string | null {
  const window = `this release runs on ${windowText(rel)}`;
  switch (windowVerdict(state, rel)) {
    case "inside":
      return null;
    case "unmigrated":
      return `the database at ${where} has no migration applied, and ${window}: apply the migrations (npm run db:migrate as the schema owner, docs/operations.md), then start again.`;
    case "behind":
      return `the database at ${where} has schema ${state.database}, outside the window: ${window}, and its migration ${rel.number} is not applied: apply this release's migrations (npm run db:migrate as the schema owner), then start again.`;
    case "contracted":
      return `the database at ${where} has schema ${state.database}, outside the window: ${window}, and contract step ${state.floorStep} needs a release whose schema is ${state.floor} or later: run a newer release, or restore a backup taken before ${state.floorStep} (docs/runbook.md, "Rolling back").`;
  }
}

/** What readiness, the status document and the metric say about the schema (docs/openapi.json). */
export interface SchemaInfo {
  release: string;
  database: string | null;
  contract_floor: string | null;
  in_window: boolean | null;
}

/** The answer's `schema` from the last state readiness read (null: not read yet). */
export function schemaInfo(state: SchemaState | null, rel: ReleaseSchema = releaseSchema()): SchemaInfo {
  return {
    release: rel.number,
    database: state?.database ?? null,
    contract_floor: state?.floor ?? null,
    in_window: state === null ? null : windowVerdict(state, rel) === "inside",
  };
}
