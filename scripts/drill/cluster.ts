// PostgreSQL clusters a drill creates itself (initdb, pg_ctl, pg_basebackup) and always removes: a
// primary with WAL senders and a streaming standby of it (`npm run drill:failover`).
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

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
