// The hash key of a sandbox run (src/hash.ts) when BITRIX_SYNC_HASH_KEY is not configured. Sandbox
// mode configures nothing, yet hashes over personal data are always keyed: the service generates a
// key once and keeps it in the local data folder (mode 0600, next to the embedded database whose
// rows it covers), so the hashes of one run still match in the next. Never used with a real portal.
import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const SANDBOX_HASH_KEY_FILE = "sandbox-hash-key";

/** The kept key, or a new one written there; `kept` false when the folder cannot hold it. */
export function sandboxHashKey(dataDir: string): { key: string; created: boolean; kept: boolean } {
  const file = join(dataDir, SANDBOX_HASH_KEY_FILE);
  try {
    const key = readFileSync(file, "utf8").trim();
    if (/^[A-Za-z0-9._~-]{32,512}$/.test(key)) return { key, created: false, kept: true };
  } catch {
    // Absent or unreadable: make one below.
  }
  const key = randomBytes(32).toString("hex");
  try {
    mkdirSync(dataDir, { recursive: true });
    writeFileSync(file, `${key}\n`, { mode: 0o600 });
    return { key, created: true, kept: true };
  } catch {
    return { key, created: true, kept: false };
  }
}
