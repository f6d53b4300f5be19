// Which database the service uses, worked out without starting anything: the configured
// BITRIX_SYNC_DATABASE_URL secret, else the embedded server in the local state folder. `npm run psql`
// and `npm run demo` use this so they look at the same database as `npm start`.
import type { Config } from "../config/env.js";
import { embeddedDir } from "../local/data-dir.js";
import { type EmbeddedMeta, readEmbeddedMeta } from "./embedded.js";

export type DatabaseTarget =
  | { kind: "configured"; url: string }
  /** `meta` is null when `npm start` has never initialised the folder. */
  | { kind: "embedded"; dir: string; meta: EmbeddedMeta | null };

export function databaseTarget(config: Pick<Config, "env" | "secrets">): DatabaseTarget {
  const url = config.secrets.BITRIX_SYNC_DATABASE_URL;
  if (url !== undefined) return { kind: "configured", url };
  const dir = embeddedDir(config.env);
  return { kind: "embedded", dir, meta: readEmbeddedMeta(dir) };
}
