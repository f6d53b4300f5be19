// What the drills (`npm run drill:<name>`, docs/reliability.md) share: a checker that prints every
// invariant it verified, the service's environment and secrets for replicas (scripts/chaos/replicas.ts),
// settings activated through the validated path, readiness and process probes, and PostgreSQL
// clusters the drill creates itself (initdb, pg_ctl, pg_basebackup) and always removes.
import { type ChildProcess, execFileSync, spawn, spawnSync } from "node:child_process";
import { randomBytes, randomInt, randomUUID } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import type pg from "pg";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import type { Emulator } from "../../src/emulator/server.js";

const started = Date.now();

/** One progress line, with the seconds since the drill started. */
export function say(tag: string, line: string): void {
  process.stdout.write(`[${tag} +${((Date.now() - started) / 1000).toFixed(1)}s] ${line}\n`);
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Every invariant the drill verified, printed as it is decided; a violation makes the exit code 1. */
export class Checker {
  readonly results: { name: string; ok: boolean; detail: string }[] = [];

  check(name: string, ok: boolean, detail = ""): boolean {
    this.results.push({ name, ok, detail });
    process.stdout.write(`  ${ok ? "ok  " : "FAIL"}  ${name}${detail ? ` (${detail})` : ""}\n`);
    return ok;
  }

  get violations(): number {
    return this.results.filter((r) => !r.ok).length;
  }
}

/** Activates a settings version through the validated path (propose, validate, activate). */
export async function activateSettings(pool: pg.Pool, changes: Record<string, unknown>, by: string) {
  const { rows } = await pool.query<{ v: number }>("select bitrix_sync.propose_settings($1, $2) as v", [
    JSON.stringify(changes),
    by,
  ]);
  const v = rows[0]?.v;
  const { rows: errs } = await pool.query<{ e: string[] }>(
    "select bitrix_sync.validate_settings_version($1) as e",
    [v],
  );
  if ((errs[0]?.e ?? []).length > 0) throw new Error(`settings refused: ${JSON.stringify(errs[0]?.e)}`);
  await pool.query("select bitrix_sync.activate_settings_version($1, $2)", [v, by]);
}

const token = (prefix: string) => `${prefix}-${randomBytes(24).toString("hex")}`;

/**
 * The secrets (as files, the production layout) and environment of replicas of `npm start` against
 * `databaseUrl` and the emulator, as the chaos run sets them.
 */
export function replicaEnv(
  databaseUrl: string,
  emulator: Emulator,
  secretsDir: string,
  dataDir: string,
  memberId: string,
): { env: Record<string, string>; secrets: Record<string, string> } {
  const secrets: Record<string, string> = {
    BITRIX_SYNC_DATABASE_URL: databaseUrl,
    BITRIX_SYNC_CRM_REST_WEBHOOK_URL: emulator.url,
    BITRIX_SYNC_CONTACT_RECEIVER_TOKEN: token("contact"),
    BITRIX_SYNC_ALERT_RECEIVER_TOKEN: token("alert"),
    BITRIX_SYNC_SERVICE_TOKEN: token("service"),
    BITRIX_SYNC_HASH_KEY: token("hash"),
  };
  for (const [k, v] of Object.entries(secrets)) writeFileSync(join(secretsDir, k), `${v}\n`, { mode: 0o600 });
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? "",
    HOME: process.env.HOME ?? "/tmp",
    SECRETS_SOURCE: "file",
    BITRIX_SYNC_SECRETS_DIR: secretsDir,
    BITRIX_SYNC_ENABLED: "true",
    BITRIX_SYNC_PORTAL_HOST: emulator.host,
    BITRIX_SYNC_PORTAL_MEMBER_ID: memberId,
    BITRIX_SYNC_CONTACT_USER_ID_FIELD: SANDBOX_FIELDS.userId,
    BITRIX_SYNC_CONTACT_REGISTERED_FIELD: SANDBOX_FIELDS.registered,
    BITRIX_SYNC_CONTACT_CITIZENSHIP_FIELD: SANDBOX_FIELDS.citizenship,
    BITRIX_SYNC_HTTP_TIMEOUT_SEC: "2",
    BITRIX_SYNC_MIGRATE_ON_START: "false",
    BITRIX_SYNC_DATA_DIR: dataDir,
    PORT: "0",
    HOST: "127.0.0.1",
    LOG_LEVEL: "info",
  };
  return { env, secrets };
}

export interface ReadinessSample {
  /** When the probe was sent, and when its answer came. */
  at: number;
  doneAt: number;
  /** HTTP status of GET /health/ready; 0 when the replica did not answer. */
  http: number;
  status: string;
  problems: string[];
}

/** GET /health/ready of a replica, within 4 s. */
export async function readReadiness(port: number | null): Promise<ReadinessSample> {
  const at = Date.now();
  if (port === null) return { at, doneAt: at, http: 0, status: "down", problems: [] };
  try {
    const res = await fetch(`http://127.0.0.1:${port}/health/ready`, { signal: AbortSignal.timeout(4_000) });
    const body = (await res.json()) as { status?: string; problems?: string[] };
    return {
      at,
      doneAt: Date.now(),
      http: res.status,
      status: body.status ?? "?",
      problems: body.problems ?? [],
    };
  } catch {
    return { at, doneAt: Date.now(), http: 0, status: "no_answer", problems: [] };
  }
}

/** Resident memory of a process, from /proc (bytes); null when it is gone. */
export function residentBytes(pid: number): number | null {
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

/** The local TCP ports of a process's open sockets (its client ends), from /proc. */
export function localPortsOf(pid: number): Set<number> {
  const inodes = new Set<string>();
  try {
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (m) inodes.add(m[1] as string);
      } catch {
        // closed meanwhile
      }
    }
  } catch {
    return new Set();
  }
  const ports = new Set<number>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    if (!existsSync(table)) continue;
    for (const line of readFileSync(table, "utf8").split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 10 || !inodes.has(f[9] as string)) continue;
      ports.add(Number.parseInt((f[1] as string).split(":")[1] as string, 16));
    }
  }
  return ports;
}

/** Sessions in pg_stat_activity whose client is the process `pid` (matched by its socket ports). */
export async function databaseSessionsOf(pool: pg.Pool, pid: number): Promise<number> {
  const ports = [...localPortsOf(pid)];
  if (ports.length === 0) return 0;
  const { rows } = await pool.query<{ n: number }>(
    "select count(*)::int as n from pg_stat_activity where client_port = any($1::int[])",
    [ports],
  );
  return rows[0]?.n ?? 0;
}

/** A family's samples from a replica's /metrics text, by label set. */
export async function scrapeFamily(port: number, family: string): Promise<Map<string, number>> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(10_000) });
  const text = await res.text();
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (!line.startsWith(family)) continue;
    const m = /^([a-z_]+)(\{[^}]*\})?\s+(\S+)$/.exec(line);
    if (m && m[1] === family) out.set(m[2] ?? "", Number(m[3]));
  }
  return out;
}

/** The OS user PostgreSQL's programs run as: `postgres` when we are root (initdb refuses root). */
export function postgresUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const uid = Number(execFileSync("id", ["-u", "postgres"]).toString().trim());
  const gid = Number(execFileSync("id", ["-g", "postgres"]).toString().trim());
  return { uid, gid };
}

export const PG_BIN = process.env.PG_BIN ?? "/usr/lib/postgresql/15/bin";

/** Runs a PostgreSQL program (as `postgres` when root); throws with its output on failure. */
export async function pgRun(program: string, args: string[], timeoutMs = 120_000): Promise<string> {
  const as = postgresUser();
  const child = spawn(join(PG_BIN, program), args, {
    stdio: ["ignore", "pipe", "pipe"],
    env: { PATH: process.env.PATH ?? "", LANG: "C", LC_ALL: "C" },
    ...(as ?? {}),
  });
  let out = "";
  child.stdout.on("data", (d: Buffer) => {
    out += d.toString("utf8");
  });
  child.stderr.on("data", (d: Buffer) => {
    out += d.toString("utf8");
  });
  const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
  const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
  clearTimeout(timer);
  if (code !== 0) throw new Error(`${program} ${args[0] ?? ""} exited ${code}: ${out.trim().slice(-600)}`);
  return out;
}

/** A PostgreSQL cluster of the drill's own: a data folder, a port, a server started with pg_ctl. */
export class Cluster {
  constructor(
    readonly name: string,
    readonly dataDir: string,
    readonly port: number,
  ) {}

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  urlOf(database: string): string {
    return `postgres://postgres@127.0.0.1:${this.port}/${database}`;
  }

  /** Starts the server on its port, loopback only, its socket in its own folder. */
  async start(): Promise<void> {
    await pgRun("pg_ctl", [
      "start",
      "-w",
      "-t",
      "60",
      "-D",
      this.dataDir,
      "-l",
      `${this.dataDir}.log`,
      "-o",
      `-c port=${this.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=${this.dataDir}`,
    ]);
  }

  async stop(mode: "fast" | "immediate" = "fast"): Promise<void> {
    await pgRun("pg_ctl", ["stop", "-w", "-t", "60", "-m", mode, "-D", this.dataDir]);
  }

  /** The postmaster's pid while it runs (postmaster.pid), else null. */
  pid(): number | null {
    try {
      const pid = Number(readFileSync(join(this.dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
      process.kill(pid, 0);
      return pid;
    } catch {
      return null;
    }
  }

  /** For an exit path that cannot wait: stops the server at once if it still runs. */
  stopNowSync(): void {
    if (this.pid() === null) return;
    const as = postgresUser();
    spawnSync(join(PG_BIN, "pg_ctl"), ["stop", "-w", "-m", "immediate", "-D", this.dataDir], {
      stdio: "ignore",
      ...(as ?? {}),
    });
  }
}

/**
 * A new primary: initdb (trust on loopback, replication allowed, as initdb's default pg_hba has it),
 * wal_level=replica and WAL senders, then started.
 */
export async function createPrimary(dataDir: string, port: number): Promise<Cluster> {
  await pgRun("initdb", ["-D", dataDir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"]);
  const conf = [
    "wal_level = replica",
    "max_wal_senders = 5",
    "wal_keep_size = '256MB'",
    "hot_standby = on",
    // The drill is about who answers and what was committed, not about surviving a power cut.
    "fsync = off",
    "max_connections = 200",
  ];
  const as = postgresUser();
  const file = join(dataDir, "postgresql.conf");
  writeFileSync(file, `${readFileSync(file, "utf8")}\n# drill\n${conf.join("\n")}\n`);
  if (as) spawnSync("chown", [`${as.uid}:${as.gid}`, file]);
  const c = new Cluster("primary", dataDir, port);
  await c.start();
  return c;
}

/** A streaming standby of `primary`: pg_basebackup -R (standby.signal, primary_conninfo), started. */
export async function createStandby(primary: Cluster, dataDir: string, port: number): Promise<Cluster> {
  await pgRun("pg_basebackup", [
    "-h",
    "127.0.0.1",
    "-p",
    String(primary.port),
    "-U",
    "postgres",
    "-D",
    dataDir,
    "-R",
    "-X",
    "stream",
    "-c",
    "fast",
  ]);
  const c = new Cluster("standby", dataDir, port);
  await c.start();
  return c;
}

/**
 * Everything a drill created, undone in reverse order at the end, on failure and on SIGINT/SIGTERM;
 * `sync` parts also on a sudden exit of the drill.
 */
export class Cleanup {
  private readonly steps: { what: string; run: () => Promise<void> | void; sync?: () => void }[] = [];
  private done = false;

  constructor() {
    process.on("exit", () => {
      if (this.done) return;
      for (const s of [...this.steps].reverse()) {
        try {
          s.sync?.();
        } catch {
          // best effort on the way out
        }
      }
    });
    for (const sig of ["SIGINT", "SIGTERM"] as const) {
      process.once(sig, () => {
        say("cleanup", `${sig}: removing what the drill created`);
        void this.run().finally(() => process.exit(130));
      });
    }
  }

  add(what: string, run: () => Promise<void> | void, sync?: () => void): void {
    this.steps.push({ what, run, ...(sync ? { sync } : {}) });
  }

  async run(): Promise<string[]> {
    const failed: string[] = [];
    while (this.steps.length > 0) {
      const s = this.steps.pop();
      if (!s) break;
      try {
        await s.run();
      } catch (e) {
        failed.push(`${s.what}: ${e instanceof Error ? e.message : String(e)}`);
        try {
          s.sync?.();
        } catch {
          // reported above
        }
      }
    }
    this.done = true;
    return failed;
  }
}

/** Kills a child at once on a sudden exit. */
export function killSync(child: ChildProcess | null): void {
  child?.kill("SIGKILL");
}

/** Removes a folder (and the drill's server logs beside it). */
export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/** A valid Russian phone no other user of the drill has had. */
export function newPhone(taken: Set<string>): string {
  for (;;) {
    const p = `+79${String(randomInt(0, 1_000_000_000)).padStart(9, "0")}`;
    if (!taken.has(p)) {
      taken.add(p);
      return p;
    }
  }
}

/** One App transaction as han_app_user (the App's role), so the App's trigger records the intent. */
async function appTx(pool: pg.Pool, fn: (c: pg.PoolClient) => Promise<void>): Promise<boolean> {
  let c: pg.PoolClient | null = null;
  try {
    c = await pool.connect();
    c.on("error", () => undefined);
    await c.query("begin");
    await c.query("set local role han_app_user");
    await fn(c);
    await c.query("commit");
    return true;
  } catch {
    await c?.query("rollback").catch(() => undefined);
    return false;
  } finally {
    c?.release(true);
  }
}

/** A user signs up in the App (identity and profile in one statement); false when the App's write failed. */
export function signUp(pool: pg.Pool, id: string, phone: string, name: string): Promise<boolean> {
  return appTx(pool, async (c) => {
    await c.query(
      `with u as (insert into han_app.user_identity (id, phone_number, record_status) values ($1, $2, 'active') returning id)
       insert into han_app.client_profile (id, user_id, full_name, record_status) select $3, id, $4, 'active' from u`,
      [id, phone, randomUUID(), name],
    );
  });
}

/** A user changes the phone in the App; false when the App's write failed. */
export function changePhone(pool: pg.Pool, id: string, phone: string): Promise<boolean> {
  return appTx(pool, async (c) => {
    await c.query("update han_app.user_identity set phone_number = $2, updated_at = now() where id = $1", [
      id,
      phone,
    ]);
  });
}

/**
 * Keeps the replicas' output (no secret or personal value: the service redacts both) in `dir`, for a
 * run with a violation or when DRILL_LOG_DIR asks for it; returns where, or null.
 */
export function keepLogs(
  replicas: { name: string; text(): string }[],
  violations: number,
  fallbackDir: string,
): string | null {
  const dir = process.env.DRILL_LOG_DIR ?? (violations > 0 ? fallbackDir : null);
  if (!dir) return null;
  mkdirSync(dir, { recursive: true });
  for (const r of replicas) writeFileSync(join(dir, `${r.name}.log`), r.text());
  return dir;
}

/**
 * What an orchestrator does with a replica that exited: start it again, every 2 s while it cannot
 * start (e.g. a database that takes no writes refuses its startup), until it listens.
 */
export async function restartUntilUp(r: {
  start(): Promise<void>;
  readonly running: boolean;
}): Promise<number> {
  let tries = 0;
  for (;;) {
    tries++;
    try {
      await r.start();
      return tries;
    } catch {
      await sleep(2_000);
    }
  }
}
