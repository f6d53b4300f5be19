// The service's configuration in tests, loaded the way production loads it: every secret-named key
// of `env` becomes a file in a folder of its own (SECRETS_SOURCE=file), the rest stays environment.
// SECRETS_SOURCE=env is refused when sync is enabled, so tests of an enabled service need this.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Config, loadConfig } from "../../src/config/env.js";
import { OPTIONAL_SECRET_NAMES, SECRET_NAMES } from "../../src/config/secrets.js";

const SECRETS = new Set<string>([...SECRET_NAMES, ...OPTIONAL_SECRET_NAMES]);
const dirs: string[] = [];
process.once("exit", () => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** `loadConfig` with the secrets of `env` as files. */
export function loadConfigWithSecretFiles(env: Record<string, string>): Config {
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-config-"));
  dirs.push(dir);
  const rest: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) {
    if (SECRETS.has(k)) writeFileSync(join(dir, k), `${v}\n`, { mode: 0o600 });
    else if (k !== "SECRETS_SOURCE") rest[k] = v;
  }
  return loadConfig({ ...rest, SECRETS_SOURCE: "file", BITRIX_SYNC_SECRETS_DIR: dir });
}
