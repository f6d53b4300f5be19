/** Returns `url` pointing at another database on the same server. */
export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

/** A connection string with its password removed, safe for logs and status output. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    u.search = "";
    return u.toString();
  } catch {
    return "<unparseable database url>";
  }
}

/** Where a connection string points, as `host:port` (or a socket folder): never the user or the password. */
export function databaseAddress(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return "<unparseable database URL>";
  }
  const host = decodeURIComponent(u.hostname) || u.searchParams.get("host") || "localhost";
  const port = u.port || u.searchParams.get("port") || "5432";
  if (host.startsWith("/")) return `the socket in ${host} (port ${port})`;
  // URL keeps an IPv6 literal in brackets already; a `host=` parameter does not.
  return `${host.includes(":") && !host.startsWith("[") ? `[${host}]` : host}:${port}`;
}
