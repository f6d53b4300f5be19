// Which configured database sandbox mode may use (docs/operations.md, "Sandbox mode"): only one it
// created itself. Sandbox mode processes the database's intents against the built-in emulator and
// records emulator Contact IDs as the users' mappings; on a real deployment's database that would
// link every user to a Contact that does not exist. So with BITRIX_SYNC_SANDBOX=true and a configured
// BITRIX_SYNC_DATABASE_URL, the service creates that database when it does not exist yet and marks it
// with a comment; a database without the mark is refused. The other way round, a service with a real
// portal refuses a database that carries the mark: its mappings name the emulator's Contacts.
//
// The mark is the database's comment (`COMMENT ON DATABASE`), which only the database's owner or a
// superuser can write: it guards against a mistake (a secret file missing, the wrong URL), not
// against someone who owns the database.
import pg from "pg";
import { withSearchPath } from "../db/search-path.js";
import { databaseAddress, withDatabase } from "../db/url.js";
import { databaseStartupError } from "./database.js";
import { EXIT, StartupError } from "./errors.js";

/** The first words of the comment of a database the sandbox created. */
export const SANDBOX_DATABASE_MARK = "bitrix-sync sandbox database:";

const CONNECT_TIMEOUT_MS = 10_000;

function client(url: string): pg.Client {
  const c = new pg.Client({
    connectionString: withSearchPath(url),
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
  });
  c.on("error", () => undefined);
  return c;
}

const sqlstate = (e: unknown): string | undefined => {
  const code = (e as { code?: unknown }).code;
  return typeof code === "string" ? code : undefined;
};

/** The comment of the database `url` names, or null; throws as the database check does when it cannot connect. */
async function databaseComment(url: string): Promise<string | null> {
  const c = client(url);
  try {
    await c.connect();
    const { rows } = await c.query<{ note: string | null }>(
      "select pg_catalog.shobj_description(d.oid, 'pg_database') as note from pg_catalog.pg_database d where d.datname = pg_catalog.current_database()",
    );
    return rows[0]?.note ?? null;
  } finally {
    await c.end().catch(() => undefined);
  }
}

/** True when `comment` is the sandbox's mark. */
function isSandboxMark(comment: string | null): boolean {
  return comment?.startsWith(SANDBOX_DATABASE_MARK) ?? false;
}

function databaseName(url: string): string {
  const name = decodeURIComponent(new URL(url).pathname.replace(/^\//, ""));
  if (name === "") {
    throw new StartupError("sandbox_database_refused", EXIT.config, [
      "BITRIX_SYNC_SANDBOX=true needs BITRIX_SYNC_DATABASE_URL to name a database (its path is empty): name one that does not exist yet, then start again.",
    ]);
  }
  return name;
}

function refused(url: string): StartupError {
  return new StartupError("sandbox_database_refused", EXIT.config, [
    `BITRIX_SYNC_SANDBOX=true but the database named in BITRIX_SYNC_DATABASE_URL at ${databaseAddress(url)} was not created by the sandbox: sandbox mode would record the emulator's Contacts as its users' mappings, so it runs only on the embedded database or on a database it created itself. Name a database that does not exist yet (the sandbox creates it), or unset BITRIX_SYNC_DATABASE_URL for the embedded one, then start again.`,
  ]);
}

/**
 * Makes sure the configured database may be used in sandbox mode: creates it (and marks it) when it
 * does not exist, accepts it when it carries the mark, and throws a StartupError otherwise.
 * Returns whether it was created now.
 */
export async function prepareSandboxDatabase(url: string): Promise<{ created: boolean }> {
  const name = databaseName(url);
  try {
    if (isSandboxMark(await databaseComment(url))) return { created: false };
    throw refused(url);
  } catch (e) {
    if (e instanceof StartupError) throw e;
    if (sqlstate(e) !== "3D000") throw databaseStartupError(url, e, CONNECT_TIMEOUT_MS);
  }
  // The database does not exist: create it from the server's maintenance database.
  const admin = client(withDatabase(url, "postgres"));
  try {
    await admin.connect();
  } catch (e) {
    throw databaseStartupError(url, e, CONNECT_TIMEOUT_MS);
  }
  try {
    const ident = admin.escapeIdentifier(name);
    try {
      await admin.query(`create database ${ident}`);
    } catch (e) {
      if (sqlstate(e) === "42P04") {
        // Another sandbox process created it a moment ago; it marks it next.
        for (let i = 0; i < 20; i++) {
          if (isSandboxMark(await databaseComment(url))) return { created: false };
          await new Promise((r) => setTimeout(r, 250));
        }
        throw refused(url);
      }
      if (sqlstate(e) === "42501") {
        throw new StartupError("sandbox_database_refused", EXIT.config, [
          `BITRIX_SYNC_SANDBOX=true: the database named in BITRIX_SYNC_DATABASE_URL does not exist on ${databaseAddress(url)} and its user may not create it (SQLSTATE 42501): give that user CREATEDB, or create nothing and unset BITRIX_SYNC_DATABASE_URL for the embedded database, then start again.`,
        ]);
      }
      throw e;
    }
    const note = `${SANDBOX_DATABASE_MARK} created by bitrix-sync in sandbox mode (BITRIX_SYNC_SANDBOX=true) at ${new Date().toISOString()}. Its mappings name the built-in emulator's Contacts: never point a service with a real portal at it.`;
    await admin.query(`comment on database ${ident} is ${admin.escapeLiteral(note)}`);
    return { created: true };
  } finally {
    await admin.end().catch(() => undefined);
  }
}

/** A service with a real portal refuses a database the sandbox created. */
export async function refuseSandboxDatabase(url: string): Promise<void> {
  let comment: string | null;
  try {
    comment = await databaseComment(url);
  } catch (e) {
    throw databaseStartupError(url, e, CONNECT_TIMEOUT_MS);
  }
  if (isSandboxMark(comment)) {
    throw new StartupError("sandbox_database_refused", EXIT.config, [
      `the database named in BITRIX_SYNC_DATABASE_URL at ${databaseAddress(url)} was created by the sandbox (its comment says so) and its mappings name the emulator's Contacts, while a real portal is configured in BITRIX_SYNC_CRM_REST_WEBHOOK_URL: point BITRIX_SYNC_DATABASE_URL at the deployment's database, then start again.`,
    ]);
  }
}
