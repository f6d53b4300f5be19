// What runs on the App's tables besides the project's own (docs/security.md, "The App's tables"):
// bitrix_sync.app_table_hooks() lists it (sql/status/app_tables.sql), BITRIX_SYNC_APP_TABLE_HOOKS
// names the App's own entries the operator knows of, and what is left is unknown. Preflight names
// every unknown entry (database.app_tables); readiness reports one as `app_tables_changed`, looking
// at most once a minute. Nothing of it runs with the service's rights either way (the App writer,
// row_security off): this is so that an operator knows of it.
import type pg from "pg";

/** One row of app_table_hooks(). */
export interface AppTableHook {
  relation: string;
  kind: string;
  name: string;
  detail: string | null;
}

/**
 * Kinds an operator may allow: code the App runs on its own tables that the service's write may
 * fire (as the App writer). Not allowed: row security and policies (with row_security off every
 * statement of the service on such a table fails), a table that is missing, not an ordinary table,
 * inherited from, or a project table owned by someone else (a name that means something else now).
 */
export const ALLOWABLE_KINDS = [
  "trigger",
  "rule",
  "default",
  "generated",
  "check",
  "index",
  "column_type",
] as const;

const ENTRY = new RegExp(`^(${ALLOWABLE_KINDS.join("|")}):(user_identity|client_profile):[^\\s,:]{1,63}$`);

/** `kind:table:name`, the form of an allow-list entry. */
export function hookKey(h: Pick<AppTableHook, "kind" | "relation" | "name">): string {
  return `${h.kind}:${h.relation}:${h.name}`;
}

/** BITRIX_SYNC_APP_TABLE_HOOKS: comma-separated `kind:table:name`; blank is none. */
export function parseHookList(
  text: string | undefined,
): { ok: true; keys: string[] } | { ok: false; problems: string[] } {
  const keys = (text ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
  const bad = keys.filter((k) => !ENTRY.test(k));
  if (bad.length > 0) {
    return {
      ok: false,
      problems: bad.map(
        (k) =>
          `entry "${k.slice(0, 80)}" is not kind:table:name with kind one of ${ALLOWABLE_KINDS.join(", ")} and table user_identity or client_profile`,
      ),
    };
  }
  return { ok: true, keys: [...new Set(keys)] };
}

/** The rows of app_table_hooks(). */
export async function appTableHooks(db: Pick<pg.Pool, "query"> | pg.Client): Promise<AppTableHook[]> {
  const { rows } = await db.query<AppTableHook>(
    "select relation, kind, name, detail from bitrix_sync.app_table_hooks()",
  );
  return rows;
}

/** The rows the allow-list does not name. */
export function unknownHooks(rows: readonly AppTableHook[], allowed: readonly string[]): AppTableHook[] {
  const known = new Set(allowed);
  return rows.filter((r) => !known.has(hookKey(r)));
}

/** One row in words, for preflight: `trigger client_profile.audit_changes (han_app.audit())`. */
export function describeHook(h: AppTableHook): string {
  const detail = h.detail ? ` (${h.detail.replace(/\s+/g, " ").slice(0, 120)})` : "";
  return `${h.kind} ${h.relation}${h.name === h.relation ? "" : `.${h.name}`}${detail}`;
}
