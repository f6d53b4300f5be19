// The compatibility window at startup (docs/operations.md, "The compatibility window"): after the
// database check and any migration at start, one connection reads the schema (its newest migration
// and the contract floor, src/db/schema-window.ts). A schema outside this release's window stops the
// start with one line naming the window and the fix, exit 76, before a pool, a runner or a listener
// could work on tables this release does not know how to use.
import pg from "pg";
import { outsideWindow, readSchemaState, type SchemaState } from "../db/schema-window.js";
import { withSearchPath } from "../db/search-path.js";
import { databaseAddress } from "../db/url.js";
import { databaseStartupError } from "./database.js";
import { EXIT, StartupError } from "./errors.js";

/** The startup error for a schema outside the window; null when it is inside. */
export function schemaWindowStartupError(url: string, state: SchemaState): StartupError | null {
  const line = outsideWindow(state, databaseAddress(url));
  return line === null ? null : new StartupError("schema_outside_window", EXIT.schemaOutsideWindow, [line]);
}

/** Reads the schema of `url` and throws a StartupError when it is outside this release's window. */
export async function checkSchemaWindow(url: string, timeoutMs = 10_000): Promise<SchemaState> {
  const client = new pg.Client({ connectionString: withSearchPath(url), connectionTimeoutMillis: timeoutMs });
  client.on("error", () => undefined);
  let state: SchemaState;
  try {
    await client.connect();
    state = await readSchemaState(client);
  } catch (e) {
    const code = (e as { code?: unknown }).code;
    // The database answered and refused the read (e.g. no SELECT on graphile-migrate's table).
    if (typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) && !/^(08|57P|28|3D)/.test(code))
      throw new StartupError("database_refused", EXIT.config, [
        `the database at ${databaseAddress(url)} refused to say which schema it holds (SQLSTATE ${code}): run npm run db:migrate as the schema owner (it grants the runtime role what it reads), then start again.`,
      ]);
    throw databaseStartupError(url, e, timeoutMs);
  } finally {
    await client.end().catch(() => undefined);
  }
  const refused = schemaWindowStartupError(url, state);
  if (refused) throw refused;
  return state;
}
