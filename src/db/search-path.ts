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

/** The schemas of the path, in order. */
const SEARCH_PATH = ["pg_catalog", "pg_temp"] as const;

/** The path as a setting's value (`pg_catalog, pg_temp`). */
export const SEARCH_PATH_SETTING = SEARCH_PATH.join(", ");

/** The startup option that sets it (no space: `options` splits its words on spaces). */
const SEARCH_PATH_OPTION = `-c search_path=${SEARCH_PATH.join(",")}`;

/**
 * `url` with the service's search path as a startup option, after any `options` the URL already
 * carries (a later `-c` wins). A connection string that is not a URL is returned as it is: use
 * `connectionOptions` for those.
 */
export function withSearchPath(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return url;
  }
  const before = u.searchParams.get("options");
  u.searchParams.set("options", before ? `${before} ${SEARCH_PATH_OPTION}` : SEARCH_PATH_OPTION);
  return u.toString();
}
