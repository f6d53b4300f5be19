// The search_path of every connection the service and its migrator open (docs/security.md, "Search
// path"). An unqualified name resolves through the search path, so a schema on it where an untrusted
// role can CREATE lets that role plant a function or a table the service then uses by mistake (the
// classic `public` trap of PostgreSQL before 15). The service's and the migrations' SQL qualify every
// name of their own, so the path holds only pg_catalog (built-ins) and, explicitly last, pg_temp
// (otherwise searched first for tables).
//
// It is a startup option of the connection (`-c search_path=...` in the `options` parameter): it costs
// no round trip, and it wins over ALTER ROLE/DATABASE ... SET search_path. Preflight checks that no
// role but the owners and superusers can CREATE in a schema on it (src/preflight/database.ts).
//
// The same option turns row security off (`-c row_security=off`): a row-security policy the App's
// owner puts on its tables would run the functions it calls with the rights of whoever reads the
// table, here the service's. With row_security off PostgreSQL refuses a query such a policy would
// apply to (SQLSTATE 42501) instead of running the policy (docs/security.md, "The App's tables").

/** The schemas of the path, in order. */
const SEARCH_PATH = ["pg_catalog", "pg_temp"] as const;

/** The path as a setting's value (`pg_catalog, pg_temp`). */
export const SEARCH_PATH_SETTING = SEARCH_PATH.join(", ");

/**
 * The startup options that set it and row_security (no space inside one: `options` splits its words
 * on spaces).
 */
const SESSION_OPTIONS = `-c search_path=${SEARCH_PATH.join(",")} -c row_security=off`;

/** Stands in for the empty host of `postgres://user@/db?host=/socket/dir` while it is parsed. */
const NO_HOST = "bitrix-sync-no-host.invalid";

/**
 * The connection string as node-postgres reads it (pg-connection-string), as a URL to add to, and the
 * way back to a string of the same form. Every form pg takes: a URL with a host; a socket directory in
 * the `host` parameter, with or without user and password (`postgresql:///db?host=/var/run/postgresql`,
 * `postgres://user:pw@/db?host=...`, which WHATWG URL refuses); `socket:/dir?db=...`; and pg's own
 * `/socket/dir database`.
 */
function asUrl(connectionString: string): { url: URL; back: (url: URL) => string } {
  const same = (url: URL) => url.toString();
  if (connectionString.startsWith("/")) {
    // pg reads `<directory> [<database>]` (split on spaces) and nothing else: a URL says the same.
    const [host, database] = connectionString.split(" ");
    const url = new URL("postgresql://");
    url.pathname = `/${database ?? ""}`;
    url.searchParams.set("host", host as string);
    return { url, back: same };
  }
  // pg's own steps: spaces and stray % encoded, then parsed against postgres://base, then again with a
  // stand-in host when the host is empty but a user is given.
  let str = connectionString;
  if (/ |%[^a-f0-9]|%[a-f0-9][^a-f0-9]/i.test(str)) str = encodeURI(str).replace(/%25(\d\d)/g, "%$1");
  try {
    return { url: new URL(str, "postgres://base"), back: same };
  } catch {
    // Not rethrown: the parser's error carries the whole string, password included.
  }
  try {
    const url = new URL(str.replace("@/", `@${NO_HOST}/`), "postgres://base");
    return { url, back: (u) => u.toString().replace(`@${NO_HOST}/`, "@/") };
  } catch {
    throw new Error(
      "the database connection string is not one node-postgres can read (neither a URL nor a socket directory)",
    );
  }
}

/**
 * `connectionString` with the service's search path and row_security=off as startup options, after
 * any `options` it already carries (a later `-c` wins), in every form node-postgres takes (see `asUrl`): to pg, the
 * result names the same server, database, user and password, and pins the path. Throws, without the
 * string in the message, on one pg could not read either.
 */
export function withSearchPath(connectionString: string): string {
  const { url, back } = asUrl(connectionString);
  const before = url.searchParams.get("options");
  url.searchParams.set("options", before ? `${before} ${SESSION_OPTIONS}` : SESSION_OPTIONS);
  return back(url);
}
