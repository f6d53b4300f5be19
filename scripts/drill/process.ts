// The replicas of a drill as processes: their readiness, their resident memory, database sessions
// and metrics (also the chaos run's soak, scripts/chaos/soak.ts), a restart after a crash, and their
// output kept for a run with a violation.
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type pg from "pg";
import { sleep } from "./common.js";

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

/** The error lines of a replica's output, by event (JSON logs: level 50 and above). */
export function errorEvents(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (!/"level":(5\d|6\d|"error"|"fatal")/.test(line)) continue;
    const event = /"event":"([^"]+)"/.exec(line)?.[1] ?? "no event";
    const code = /"(?:code|errorCode|error_code)":"([^"]+)"/.exec(line)?.[1];
    const key = code ? `${event} (${code})` : event;
    out.set(key, (out.get(key) ?? 0) + 1);
  }
  return out;
}
