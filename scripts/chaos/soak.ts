// The chaos run's soak figures (docs/reliability.md, "Soak (30 minutes)"): every replica's resident
// memory (/proc), open database sessions (pg_stat_activity, matched to the process by its sockets'
// ports) and event-loop delay (the replica's own bitrix_sync_event_loop_delay_seconds, sampled by
// Node inside it) once a sample interval; a table at the end, and the growth bounds checked on a
// long run: what the last minutes show against the first minutes after the warm-up.
import type pg from "pg";
import { databaseSessionsOf, residentBytes, scrapeFamily } from "../drill/process.js";
import type { Replica } from "./replicas.js";

export interface SoakSample {
  at: number;
  replica: string;
  pid: number | null;
  rssBytes: number | null;
  sessions: number | null;
  loopP99Sec: number | null;
  loopMaxSec: number | null;
}

/** The bounds a soak holds (a long run only; short runs print the table). */
export const SOAK_BOUNDS = {
  /** The first minutes: caches fill, pools open, JIT warms. */
  warmUpMin: 5,
  /** Windows compared: the first minutes after the warm-up and the last minutes of the run. */
  windowMin: 5,
  /** Peak resident memory of any replica, last window against first: at most 25 % more. */
  rssGrowth: 0.25,
  /** Most database sessions of one replica in a sample, last window against first: at most 2 more. */
  sessionGrowth: 2,
  /** Sessions one replica may hold at all: its pools' sizes together (src/db/pools.ts) and LISTEN. */
  sessionsMax: 30,
  /** Median event-loop p99, last window against first: at most twice, plus 50 ms. */
  loopFactor: 2,
  loopSlackSec: 0.05,
};

export class Soak {
  readonly samples: SoakSample[] = [];
  private readonly started = Date.now();

  constructor(
    private readonly replicas: Replica[],
    private readonly pool: pg.Pool,
  ) {}

  async sample(): Promise<void> {
    const at = Date.now();
    await Promise.all(
      this.replicas.map(async (r) => {
        const pid = r.child?.pid ?? null;
        const s: SoakSample = {
          at,
          replica: r.name,
          pid,
          rssBytes: pid === null ? null : residentBytes(pid),
          sessions: null,
          loopP99Sec: null,
          loopMaxSec: null,
        };
        if (pid !== null) s.sessions = await databaseSessionsOf(this.pool, pid).catch(() => null);
        if (r.port !== null) {
          const loop = await scrapeFamily(r.port, "bitrix_sync_event_loop_delay_seconds").catch(() => null);
          s.loopP99Sec = loop?.get('{stat="p99"}') ?? null;
          s.loopMaxSec = loop?.get('{stat="max"}') ?? null;
        }
        this.samples.push(s);
      }),
    );
  }

  /** One row a sample time: minute, then per replica RSS MiB / sessions / loop p99 ms / max ms. */
  table(): string[] {
    const times = [...new Set(this.samples.map((s) => s.at))].sort((a, b) => a - b);
    const names = this.replicas.map((r) => r.name);
    const cell = (s: SoakSample | undefined) =>
      s
        ? `${s.rssBytes === null ? "-" : (s.rssBytes / 2 ** 20).toFixed(0)} / ${s.sessions ?? "-"} / ${
            s.loopP99Sec === null ? "-" : (s.loopP99Sec * 1000).toFixed(0)
          } / ${s.loopMaxSec === null ? "-" : (s.loopMaxSec * 1000).toFixed(0)}`.padEnd(24)
        : "".padEnd(24);
    return [
      `  min    ${names.map((n) => n.padEnd(24)).join("  ")}`,
      ...times.map(
        (t) =>
          `  ${((t - this.started) / 60_000).toFixed(1).padStart(5)}  ${names
            .map((n) => cell(this.samples.find((s) => s.at === t && s.replica === n)))
            .join("  ")}`,
      ),
    ];
  }

  /** The growth bounds, each as a line; violations are the ones that failed. */
  check(endAt: number): { lines: string[]; violations: string[] } {
    const b = SOAK_BOUNDS;
    const from = this.started + b.warmUpMin * 60_000;
    const first = this.samples.filter((s) => s.at >= from && s.at < from + b.windowMin * 60_000);
    const last = this.samples.filter((s) => s.at >= endAt - b.windowMin * 60_000 && s.at <= endAt);
    const lines: string[] = [];
    const violations: string[] = [];
    const verdict = (ok: boolean, line: string) => {
      lines.push(`  ${ok ? "ok  " : "FAIL"}  ${line}`);
      if (!ok) violations.push(line);
    };
    if (first.length === 0 || last.length === 0 || endAt - from < 2 * b.windowMin * 60_000) {
      lines.push("  (too short for the growth bounds: the table only)");
      return { lines, violations };
    }
    const max = (xs: (number | null)[]) => Math.max(0, ...xs.filter((x): x is number => x !== null));
    const median = (xs: (number | null)[]) => {
      const v = xs.filter((x): x is number => x !== null).sort((a, c) => a - c);
      return v.length === 0 ? 0 : (v[Math.floor(v.length / 2)] as number);
    };
    const rssFirst = max(first.map((s) => s.rssBytes));
    const rssLast = max(last.map((s) => s.rssBytes));
    verdict(
      rssLast <= rssFirst * (1 + b.rssGrowth),
      `resident memory: peak ${(rssLast / 2 ** 20).toFixed(0)} MiB in the last ${b.windowMin} min against ${(rssFirst / 2 ** 20).toFixed(0)} MiB after the warm-up (bound +${b.rssGrowth * 100} %: ${((rssFirst * (1 + b.rssGrowth)) / 2 ** 20).toFixed(0)} MiB)`,
    );
    const sFirst = max(first.map((s) => s.sessions));
    const sLast = max(last.map((s) => s.sessions));
    const sAll = max(this.samples.map((s) => s.sessions));
    verdict(
      sLast <= sFirst + b.sessionGrowth && sAll <= b.sessionsMax,
      `database sessions of one replica: at most ${sLast} in the last ${b.windowMin} min against ${sFirst} after the warm-up (bound +${b.sessionGrowth}), ${sAll} at any time (bound ${b.sessionsMax})`,
    );
    const lFirst = median(first.map((s) => s.loopP99Sec));
    const lLast = median(last.map((s) => s.loopP99Sec));
    verdict(
      lLast <= lFirst * b.loopFactor + b.loopSlackSec,
      `event-loop delay p99 (median of the samples): ${(lLast * 1000).toFixed(0)} ms in the last ${b.windowMin} min against ${(lFirst * 1000).toFixed(0)} ms after the warm-up (bound ×${b.loopFactor} + ${b.loopSlackSec * 1000} ms); worst minute ${(max(this.samples.map((s) => s.loopMaxSec)) * 1000).toFixed(0)} ms`,
    );
    return { lines, violations };
  }
}
