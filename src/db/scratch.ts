// A PostgreSQL server for throw-away databases: the migration builder applies the chain there to
// write each migration's summary and the schema dump (docs/migrations.md). The same order as the
// tests: TEST_DATABASE_URL (a server URL; only databases named bs_scratch_* are created and dropped
// on it), else an embedded PostgreSQL 15 in a temporary folder that is removed afterwards.
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { withSearchPath } from "./search-path.js";
import { withDatabase } from "./url.js";

export interface ScratchServer {
  /** Connection string of the `postgres` database (a superuser). */
  url: string;
  /** Where it came from, for messages: "TEST_DATABASE_URL" or "an embedded PostgreSQL". */
  origin: string;
  stop(): Promise<void>;
}

/** TEST_DATABASE_URL's server, or an embedded one started for this process. */
export async function startScratchServer(): Promise<ScratchServer> {
  const url = process.env.TEST_DATABASE_URL;
  if (url)
    return { url: withDatabase(url, "postgres"), origin: "TEST_DATABASE_URL", stop: async () => undefined };
  // Imported here: embedded.ts takes over the process's signal handlers when loaded.
  const { startEmbedded } = await import("./embedded.js");
  // Not under /root: initdb runs as the `postgres` system user and must reach the folder.
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-scratchpg-"));
  try {
    const srv = await startEmbedded({ dir, persistent: false });
    return {
      url: srv.url,
      origin: "an embedded PostgreSQL",
      stop: async () => {
        await srv.stop();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
}

/** Runs `fn` on a new empty database of `server`, dropped afterwards whatever happens. */
export async function withScratchDatabase<T>(
  server: ScratchServer,
  fn: (url: string) => Promise<T>,
): Promise<T> {
  const name = `bs_scratch_${randomBytes(6).toString("hex")}`;
  const admin = new pg.Client({ connectionString: withSearchPath(server.url) });
  await admin.connect();
  try {
    // Encoding and locale fixed, not the cluster's defaults (initdb takes them from the environment):
    // pg_dump prints the encoding, and the collation orders what the catalogue queries aggregate.
    await admin.query(`create database ${name} template template0 encoding 'UTF8' locale 'C'`);
    try {
      return await fn(withDatabase(server.url, name));
    } finally {
      await admin.query(`drop database if exists ${name} with (force)`);
    }
  } finally {
    await admin.end();
  }
}
