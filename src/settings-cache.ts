// The active settings version (§12.3), cached in the process and re-read every few seconds, so a
// newly activated version applies without a restart. Each version is parsed once, by the one schema
// (settings-schema.ts); every consumer reads the typed result. Reads never block a hot path.
import type pg from "pg";
import type { Logger } from "./observability/logger.js";
import { parseSettings, type Settings } from "./settings-schema.js";

/** The active version does not parse: the service keeps running on the last one that did. */
export interface SettingsProblem {
  code: "settings_unparsable";
  /** The version that was refused. */
  version: number | null;
}

export interface SettingsCache {
  /**
   * The settings of the newest version that parsed, e.g. `get().batch.size`. The same object until
   * another version takes effect, so a consumer may derive from it once per version.
   */
  get(): Settings;
  /** The version `get()` returns (settings_versions.version). */
  version(): number | null;
  /** Set while the active version does not parse; cleared when a later version does. */
  problem(): SettingsProblem | null;
  /** Reads now. */
  refresh(): Promise<void>;
  stop(): void;
}

/** The first read found settings the service cannot use; nothing to fall back to. */
export class SettingsError extends Error {
  override name = "SettingsError";
}

export async function createSettingsCache(
  pool: pg.Pool,
  opts: { log?: Pick<Logger, "error">; intervalMs?: number } = {},
): Promise<SettingsCache> {
  let current: { version: number | null; settings: Settings } | null = null;
  let problem: SettingsProblem | null = null;
  const refresh = async () => {
    const { rows } = await pool.query<{ s: unknown }>("select bitrix_sync.active_settings() as s");
    const raw = rows[0]?.s as { _version?: unknown } | undefined;
    const seen = typeof raw?._version === "number" ? raw._version : null;
    // One parse per version: the version in use, or the refused one, is not parsed again.
    if (current && seen === current.version) return;
    if (problem && seen === problem.version) return;
    const parsed = parseSettings(raw);
    if (parsed.ok) {
      current = { version: parsed.version, settings: parsed.settings };
      problem = null;
      return;
    }
    if (!current) {
      throw new SettingsError(
        `settings version ${parsed.version} does not parse: ${parsed.errors.join("; ")}`,
      );
    }
    problem = { code: "settings_unparsable", version: parsed.version };
    opts.log?.error(
      {
        event: "settings.unparsable",
        version: parsed.version,
        inUse: current.version,
        errors: parsed.errors,
      },
      "the active settings version does not parse; keeping the previous one",
    );
  };
  await refresh();
  const timer = setInterval(() => {
    refresh().catch(() => undefined);
  }, opts.intervalMs ?? 5_000);
  timer.unref();
  return {
    get: () => (current as NonNullable<typeof current>).settings,
    version: () => current?.version ?? null,
    problem: () => problem,
    refresh,
    stop: () => clearInterval(timer),
  };
}
