// What of a PostgreSQL error may be looked at and logged: its SQLSTATE (a refusal such as BS001 is
// handled by code), never its message, which may quote data.

/** The error's SQLSTATE, when it has one. */
export function sqlstate(e: unknown): string | undefined {
  return typeof e === "object" && e !== null && "code" in e
    ? String((e as { code: unknown }).code)
    : undefined;
}

/** The error's SQLSTATE or class name: safe to log (messages may quote data). */
export function safeError(e: unknown): { sqlstate?: string; errorName: string } {
  const s = sqlstate(e);
  return { ...(s ? { sqlstate: s } : {}), errorName: e instanceof Error ? e.name : typeof e };
}
