// Expand-only, checked (docs/operations.md, "The compatibility window"; migrations/README.md): what a
// migration changes that a release before it may use, found by comparing the catalogue before and
// after it (src/db/catalogue.ts). A contract change is one that can break the code of an earlier
// release running on the new schema:
//
// - a dropped schema, type, table, column, sequence, view (or view column), function (a changed
//   signature is a drop and a create, unless the new one only adds trailing parameters that all
//   have defaults: an earlier release's call still resolves) or trigger;
// - a function whose result type changed, or that lost a parameter default its callers may omit;
// - a column whose type narrowed (anything but a known widening), that became NOT NULL, or lost its
//   default (an earlier release's insert may leave it out); a new NOT NULL column without a default
//   on a table that existed;
// - a new CHECK, UNIQUE, PRIMARY KEY, FOREIGN KEY or EXCLUDE constraint (or a changed one) on a
//   table that existed, over a column that existed (not a CHECK that holds whenever a column new in
//   that migration, without a default, is null: an earlier release never sets it); a new or changed
//   unique index there; row-level security switched on for such a table;
// - a privilege a runtime role (the service's bitrix_sync_user, the App's han_app_user) held and no
//   longer holds;
// - a settings key removed from the catalogue, or its value type changed (an earlier release's
//   settings schema requires its keys).
//
// A migration that makes one is a contract step and must declare it in its source, as a row of
// bitrix_sync.schema_contract_steps (src/db/schema-window.ts reads the floor it sets);
// test/integration/migrations-compatibility.test.ts applies the released chain, then every later
// migration, and fails on an undeclared contract change.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type pg from "pg";
import { type Catalogue, type CatalogueEntry, readCatalogue } from "./catalogue.js";

/**
 * Objects dropped on purpose without a contract step, each with its migration and why: only admin
 * tooling of an earlier release used them (never its service), and keeping them would keep a flaw.
 * The earlier release's service stays inside the window; its tool is refused by a missing function.
 * docs/migrations.md names each beside its migration.
 */
export const RETIREMENTS: ReadonlyMap<string, string> = new Map([
  [
    "function bitrix_sync.diagnose_app_values(p_user_id uuid, p_salt text)",
    "000040: its digest, salted by the caller, could be reversed by guessing; only npm run diagnose called it",
  ],
]);

/** The roles programs run as: what they lose breaks a running release. */
export const RUNTIME_ROLES = ["bitrix_sync_user", "han_app_user"] as const;

/** One change that can break an earlier release. */
export interface ContractChange {
  /** What kind of object. */
  kind: string;
  /** Its qualified name. */
  name: string;
  /** What happened to it, in words. */
  what: string;
}

/** The catalogue a compatibility check compares: readCatalogue's, view columns and settings keys. */
export async function readCompatCatalogue(client: pg.ClientBase): Promise<Catalogue> {
  const out = await readCatalogue(client, { rowsOf: ["bitrix_sync.settings"] });
  // A view's columns are what its readers select: readCatalogue gives only its definition.
  const { rows } = await client.query<{ name: string; type: string }>(
    `select format('%I.%I.%I', n.nspname, c.relname, a.attname) as name, format_type(a.atttypid, a.atttypmod) as type
       from pg_attribute a join pg_class c on c.oid = a.attrelid join pg_namespace n on n.oid = c.relnamespace
      where c.relkind in ('v', 'm') and a.attnum > 0 and not a.attisdropped
        and n.nspname not in ('pg_catalog', 'information_schema', 'graphile_migrate') and n.nspname !~ '^pg_'`,
  );
  // Kept under kind "column" with a marker, so they never collide with a table's columns.
  for (const r of rows)
    out.set(`view column ${r.name}`, { kind: "column", name: `view ${r.name}`, def: r.type });
  return out;
}

/** The type part of a column's definition (catalogue.ts: type, collate, not null, identity, default, storage). */
export function columnType(def: string): string {
  const m = / (?:collate |not null|generated |default |storage )/.exec(def);
  return (m ? def.slice(0, m.index) : def).trim();
}

const INT_ORDER = ["smallint", "integer", "bigint"];

/** True when a column of type `from` can become `to` without refusing a value it took before. */
export function isWidening(from: string, to: string): boolean {
  if (from === to) return true;
  const vc = (t: string) => /^character varying(?:\((\d+)\))?$/.exec(t);
  const a = vc(from);
  const b = vc(to);
  if (a && to === "text") return true;
  if (a && b) return b[1] === undefined || (a[1] !== undefined && Number(b[1]) >= Number(a[1]));
  const ia = INT_ORDER.indexOf(from);
  const ib = INT_ORDER.indexOf(to);
  if (ia >= 0 && ib >= 0) return ib >= ia;
  if (ia >= 0 && to === "numeric") return true;
  const num = (t: string) => /^numeric(?:\((\d+),(\d+)\))?$/.exec(t);
  const na = num(from);
  const nb = num(to);
  if (na && nb) {
    if (nb[1] === undefined) return true;
    if (na[1] === undefined) return false;
    const [pa, sa, pb, sb] = [na[1], na[2], nb[1], nb[2]].map(Number) as [number, number, number, number];
    return sb >= sa && pb - sb >= pa - sa;
  }
  return false;
}

/** How many parameters of a function have a default (from pg_get_functiondef's header). */
export function parameterDefaults(def: string): number {
  const header = def.split(/\n\s*RETURNS /)[0] ?? "";
  return (header.match(/ DEFAULT /g) ?? []).length;
}

/** The table a constraint or index entry is on (`schema.table` of `schema.table name`). */
const tableOfConstraint = (name: string) => name.split(" ")[0] as string;

/** Columns of `table` (qualified) present in `cat`. */
function columnsOf(cat: Catalogue, table: string): string[] {
  const prefix = `column ${table}.`;
  return [...cat.keys()].filter((k) => k.startsWith(prefix)).map((k) => k.slice(prefix.length));
}

/** Whether a constraint or index definition names one of `columns` (quoted or not). */
function mentionsAny(def: string, columns: string[]): boolean {
  return columns.some((c) =>
    new RegExp(`(^|[^a-z0-9_])"?${c.replace(/\W/g, "\\$&")}"?([^a-z0-9_]|$)`).test(def),
  );
}

/** A constraint's rule without casts, parentheses and spaces: two printings of one rule compare equal. */
export function bareRule(def: string): string {
  return def.replace(/::"?[a-z_][a-z0-9_ ]*"?(?:\(\d+(?:,\d+)?\))?(?:\[\])?/gi, "").replace(/[()\s]/g, "");
}

/**
 * The function that stands for `b` (gone from `after` under its own signature) when `b` is still
 * callable as it was:
 * `after` holds a function of the same name, the same leading parameters and result, whose added
 * trailing parameters all have defaults (an earlier release's call with the old arguments resolves
 * to it). Undefined when there is none.
 */
export function extendedWithDefaults(
  b: CatalogueEntry,
  before: Catalogue,
  after: Catalogue,
): string | undefined {
  const m = /^(.+)\((.*)\)$/.exec(b.name);
  if (!m) return undefined;
  const [, fn, args] = m as unknown as [string, string, string];
  const oldArgs = args === "" ? [] : args.split(", ");
  for (const [key, a] of after) {
    if (a.kind !== "function" || before.has(key)) continue;
    const n = /^(.+)\((.*)\)$/.exec(a.name);
    if (!n || n[1] !== fn) continue;
    const newArgs = (n[2] as string) === "" ? [] : (n[2] as string).split(", ");
    if (newArgs.length <= oldArgs.length || oldArgs.some((x, i) => newArgs[i] !== x)) continue;
    if ((a.attrs?.returns ?? "") !== (b.attrs?.returns ?? "")) continue;
    if ((a.attrs?.kind ?? "") !== (b.attrs?.kind ?? "")) continue;
    const added = newArgs.length - oldArgs.length;
    if (parameterDefaults(a.def) >= parameterDefaults(b.def) + added) return a.name;
  }
  return undefined;
}

/**
 * True when a new CHECK cannot refuse a row an earlier release writes: its rule is
 * `(col IS NULL) OR ...` over a column the table did not have before (so an earlier release never
 * sets it) and that has no default.
 */
export function guardedByNewColumn(def: string, table: string, before: Catalogue, after: Catalogue): boolean {
  const m = /^CHECK \(+"?([a-z_][a-z0-9_]*)"? IS NULL\) OR /.exec(def);
  if (!m) return false;
  const col = `column ${table}.${m[1]}`;
  const added = after.get(col);
  return !before.has(col) && added !== undefined && !/ (default|generated) /.test(added.def);
}

const DROPPABLE = new Set(["schema", "type", "table", "column", "sequence", "view", "function", "trigger"]);

/** The contract changes from `before` to `after`, in a stable order. */
export function contractChanges(before: Catalogue, after: Catalogue): ContractChange[] {
  const out: ContractChange[] = [];
  const add = (e: CatalogueEntry, what: string) => out.push({ kind: e.kind, name: e.name, what });
  const dropped = new Set<string>();
  const extendedAs = new Map<string, string>();
  const tableExisted = (t: string) => before.has(`table ${t}`);

  for (const [key, b] of before) {
    const a = after.get(key);
    if (!a) {
      const extended = b.kind === "function" ? extendedWithDefaults(b, before, after) : undefined;
      if (extended !== undefined) {
        extendedAs.set(b.name, extended);
        continue;
      }
      if (DROPPABLE.has(b.kind)) {
        dropped.add(b.name);
        add(b, b.name.startsWith("view ") ? "drops the view column" : `drops the ${b.kind}`);
      } else if (b.kind === "row" && b.name.startsWith("bitrix_sync.settings ")) {
        add(b, "removes the settings key");
      }
      continue;
    }
    if (a.def === b.def && JSON.stringify(a.attrs ?? {}) === JSON.stringify(b.attrs ?? {})) continue;
    switch (b.kind) {
      case "function": {
        if ((a.attrs?.returns ?? "") !== (b.attrs?.returns ?? ""))
          add(b, `changes its result: ${b.attrs?.returns} -> ${a.attrs?.returns}`);
        if ((a.attrs?.kind ?? "") !== (b.attrs?.kind ?? "")) add(b, `becomes a ${a.attrs?.kind}`);
        if (parameterDefaults(a.def) < parameterDefaults(b.def)) add(b, "loses a parameter default");
        break;
      }
      case "column": {
        if (b.name.startsWith("view ")) {
          add(b, `changes the view column's type: ${b.def} -> ${a.def}`);
          break;
        }
        const [tb, ta] = [columnType(b.def), columnType(a.def)];
        if (!isWidening(tb, ta)) add(b, `narrows or changes its type: ${tb} -> ${ta}`);
        if (!/ not null/.test(b.def) && / not null/.test(a.def)) add(b, "becomes NOT NULL");
        if (/ default /.test(b.def) && !/ default /.test(a.def) && !/ generated /.test(a.def))
          add(b, "loses its default");
        break;
      }
      case "constraint":
        if (!/^PRIMARY KEY|^CHECK|^UNIQUE|^FOREIGN KEY|^EXCLUDE/.test(a.def)) break;
        // A column's new type prints its casts differently; the same rule is not a new one.
        if (bareRule(a.def) === bareRule(b.def)) break;
        add(b, `changes the constraint: ${a.def}`);
        break;
      case "index":
        if (/^CREATE UNIQUE INDEX/.test(a.def)) add(b, `changes the unique index: ${a.def}`);
        break;
      case "table":
        if (!/row level security/.test(b.def) && /row level security/.test(a.def))
          add(b, "switches row-level security on");
        break;
      case "row": {
        if (!b.name.startsWith("bitrix_sync.settings ")) break;
        const vb = (JSON.parse(b.def) as { value_type?: string }).value_type;
        const va = (JSON.parse(a.def) as { value_type?: string }).value_type;
        if (vb !== va) add(b, `changes the settings key's type: ${vb} -> ${va}`);
        break;
      }
      case "grant":
        break;
      default:
        break;
    }
  }

  for (const [key, a] of after) {
    if (before.has(key)) continue;
    if (a.kind === "column" && !a.name.startsWith("view ")) {
      const table = a.name.replace(/\.[^.]+$/, "");
      if (tableExisted(table) && / not null/.test(a.def) && !/ (default|generated) /.test(a.def))
        add(a, "adds a NOT NULL column without a default (an earlier release's insert leaves it out)");
    } else if (a.kind === "constraint" && /^PRIMARY KEY|^CHECK|^UNIQUE|^FOREIGN KEY|^EXCLUDE/.test(a.def)) {
      const table = tableOfConstraint(a.name);
      if (!tableExisted(table)) continue;
      if (guardedByNewColumn(a.def, table, before, after)) continue;
      if (mentionsAny(a.def, columnsOf(before, table)))
        add(a, `adds a constraint over existing columns: ${a.def}`);
    } else if (a.kind === "index" && /^CREATE UNIQUE INDEX/.test(a.def)) {
      const m = /^CREATE UNIQUE INDEX \S+ ON (?:ONLY )?(\S+) USING \w+ \((.*)\)/.exec(a.def);
      const table = m?.[1] ?? "";
      if (tableExisted(table) && mentionsAny(m?.[2] ?? "", columnsOf(before, table)))
        add(a, `adds a unique index over existing columns: ${a.def}`);
    }
  }

  // Privileges a runtime role held and lost (on an object that is still there: a drop is named above).
  const runtime = new Set<string>(RUNTIME_ROLES);
  const privileges = (e: CatalogueEntry | undefined) =>
    new Set((e?.def ?? "").split(", ").filter((p) => p !== ""));
  for (const [key, b] of before) {
    if (b.kind !== "grant") continue;
    const m = /^(\w+) (.+) to (\S+)$/.exec(b.name);
    if (!m || !runtime.has(m[3] as string)) continue;
    const object = m[2] as string;
    const table = m[1] === "column" ? object.replace(/\.[^.]+$/, "") : object;
    if (dropped.has(object) || dropped.has(table)) continue;
    const had = privileges(b);
    const standsFor = m[1] === "function" ? extendedAs.get(object) : undefined;
    const has = privileges(after.get(standsFor ? `grant function ${standsFor} to ${m[3]}` : key));
    const lost = [...had].filter((p) => !has.has(p));
    // A column privilege the role now holds on the whole table is not lost.
    const onTable = m[1] === "column" ? privileges(after.get(`grant table ${table} to ${m[3]}`)) : new Set();
    const reallyLost = lost.filter((p) => !onTable.has(p));
    if (reallyLost.length > 0) add(b, `revokes ${reallyLost.join(", ")}`);
  }
  const key = (c: ContractChange) => `${c.kind} ${c.name}: ${c.what}`;
  return out.sort((x, y) => (key(x) < key(y) ? -1 : key(x) > key(y) ? 1 : 0));
}

/** A contract step a migration declares in its source (an insert into schema_contract_steps). */
export interface DeclaredStep {
  /** The migration file (migrations/src/...). */
  file: string;
  migration: string;
  floor: string;
  what: string;
}

const DECLARATION =
  /insert\s+into\s+bitrix_sync\.schema_contract_steps\s*\(\s*migration\s*,\s*oldest_release_schema\s*,\s*what\s*\)\s*values\s*\(\s*'(\d{6})'\s*,\s*'(\d{6})'\s*,\s*'((?:[^']|'')*)'\s*\)/gi;

/** The contract steps the migrations of `srcDir` declare, each with its file. */
export function declaredContractSteps(srcDir: string): DeclaredStep[] {
  const out: DeclaredStep[] = [];
  for (const file of readdirSync(srcDir)
    .filter((f) => /^\d{6}-.*\.sql$/.test(f))
    .sort()) {
    // Comments are not declarations (000042's header shows the form).
    const text = readFileSync(join(srcDir, file), "utf8").replace(/--[^\n]*/g, "");
    for (const m of text.matchAll(DECLARATION))
      out.push({
        file,
        migration: m[1] as string,
        floor: m[2] as string,
        what: (m[3] as string).replace(/''/g, "'"),
      });
  }
  return out;
}
