// The active settings version (§12.3), cached in the process and re-read every few seconds, so a
// newly activated version applies without a restart. Reads never block a hot path.
import type pg from "pg";

export interface SettingsCache {
  /** The last active settings object read (catalogue defaults filled in, plus _version). */
  get(): Record<string, unknown>;
  /** Reads now. */
  refresh(): Promise<void>;
  stop(): void;
}

export async function createSettingsCache(
  pool: pg.Pool,
  opts: { intervalMs?: number } = {},
): Promise<SettingsCache> {
  let current: Record<string, unknown> = {};
  const refresh = async () => {
    const { rows } = await pool.query<{ s: Record<string, unknown> }>(
      "select bitrix_sync.active_settings() as s",
    );
    const next = rows[0]?.s;
    // Keep the same object while the version is the same: consumers derive from it once per version.
    if (next && next._version !== current._version) current = next;
  };
  await refresh();
  const timer = setInterval(() => {
    refresh().catch(() => undefined);
  }, opts.intervalMs ?? 5_000);
  timer.unref();
  return {
    get: () => current,
    refresh,
    stop: () => clearInterval(timer),
  };
}

function num(s: Record<string, unknown>, key: string, dflt: number): number {
  const v = s[key];
  return typeof v === "number" && Number.isFinite(v) ? v : dflt;
}

/** Typed accessors for the engine's own keys (the CRM client parses its keys itself). */
export function engineKeys(s: Record<string, unknown>) {
  return {
    claimSize: num(s, "claim.size", 50),
    leaseSec: num(s, "lease.ttl_sec", 60),
    pollMs: Math.min(5_000, num(s, "worker.poll_interval_ms", 2_000)),
  };
}
