// The chaos run's fault injector: one fault at a time, chosen at random, with a random pause between
// faults. Replica faults restart the replica after a moment; portal faults end by themselves.
import { randomInt } from "node:crypto";
import type pg from "pg";
import type { Emulator } from "../../tools/emulator/server.js";
import type { Replica, ReplicaExit } from "./replicas.js";

/**
 * How long a SIGTERM'd replica may take to exit: the drain bound of docs/reliability.md, the HTTP
 * timeout (2 s in the chaos run) plus 15 s.
 */
export const SIGTERM_BOUND_MS = 17_000;

export type FaultKind =
  | "replica_sigkill"
  | "replica_sigterm"
  | "db_connections_killed"
  | "db_restart"
  | "portal_outage"
  | "query_limit_storm"
  | "operation_time_limit"
  | "reply_lost_after_create";

export interface FaultTargets {
  emulator: Emulator;
  replicas: Replica[];
  /** The harness's own pool (superuser): used to kill the service's connections. */
  pool: pg.Pool;
  /** Stops and starts the run's own embedded PostgreSQL. */
  restartDatabase(downMs: number): Promise<void>;
  /** Long mode: a portal outage lasts minutes instead of seconds. */
  long: boolean;
}

export interface Window {
  kind: FaultKind;
  from: number;
  to: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function pick<T>(xs: readonly T[]): T {
  return xs[randomInt(0, xs.length)] as T;
}

export class Faults {
  readonly counts: Partial<Record<FaultKind, number>> = {};
  /** When each fault was in force (portal faults: the span during which requests were refused). */
  readonly windows: Window[] = [];
  readonly sigterms: ReplicaExit[] = [];
  /** Problems a fault itself revealed (a SIGTERM past its bound, a replica that would not start). */
  readonly problems: string[] = [];
  lastFaultEnd = 0;
  private restarts = new Set<Promise<void>>();
  private outageDone = false;

  /** Replicas that exited without being told, by cause (the crash line's kind and error class). */
  readonly unaskedExits: Record<string, number> = {};

  constructor(private readonly t: FaultTargets) {
    // As an orchestrator does (deploy/compose.yaml: restart: unless-stopped): a replica that exits on
    // its own is started again; the run counts it, and the report names the cause.
    for (const r of t.replicas) {
      r.onUnaskedExit = (_exit, cause) => {
        this.unaskedExits[cause] = (this.unaskedExits[cause] ?? 0) + 1;
        this.restartLater(r, 1_000);
      };
    }
  }

  /** Injects faults until `until` (epoch ms). */
  async run(until: number): Promise<void> {
    const half = Date.now() + (until - Date.now()) / 2;
    while (Date.now() < until) {
      await sleep(randomInt(this.t.long ? 4_000 : 2_000, this.t.long ? 15_000 : 6_000));
      if (Date.now() >= until) break;
      const kinds: FaultKind[] = [
        "replica_sigkill",
        "replica_sigterm",
        "db_connections_killed",
        "db_restart",
        "query_limit_storm",
        "operation_time_limit",
        "reply_lost_after_create",
        "replica_sigkill",
        "reply_lost_after_create",
      ];
      // One outage per run (minutes long in the long mode, seconds in the short one).
      if (!this.outageDone) kinds.push("portal_outage", "portal_outage");
      // The outage comes once per run: at random, or at the latest past the middle of the run.
      const kind = !this.outageDone && Date.now() > half ? "portal_outage" : pick(kinds);
      await this.inject(kind);
    }
    await this.settleReplicas();
  }

  private note(kind: FaultKind, from: number, to = Date.now()) {
    this.counts[kind] = (this.counts[kind] ?? 0) + 1;
    this.windows.push({ kind, from, to });
    this.lastFaultEnd = Math.max(this.lastFaultEnd, to);
  }

  /**
   * Starts a replica as an orchestrator does: again after a pause while it fails (it refuses to start
   * while the database is away, with its startup error), up to a minute.
   */
  private async startPersistently(r: Replica): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await r.start();
      } catch (e) {
        if (attempt >= 20) throw e;
        await sleep(3_000);
      }
    }
  }

  /** Restarts a stopped replica after `afterMs`, in the background. */
  private restartLater(r: Replica, afterMs: number) {
    const p = sleep(afterMs)
      .then(() => this.startPersistently(r))
      .catch((e) => {
        this.problems.push(`${r.name} did not start again: ${(e as Error).message}`);
      })
      .finally(() => this.restarts.delete(p));
    this.restarts.add(p);
  }

  async inject(kind: FaultKind): Promise<void> {
    const { emulator } = this.t;
    const from = Date.now();
    switch (kind) {
      case "replica_sigkill":
      case "replica_sigterm": {
        const up = this.t.replicas.filter((r) => r.running && r.port !== null);
        // Keep one replica up most of the time, but now and then take the last one down too.
        if (up.length === 0 || (up.length === 1 && randomInt(0, 4) > 0)) return;
        const r = pick(up);
        const signal = kind === "replica_sigkill" ? "SIGKILL" : "SIGTERM";
        const exit = await r.stop(signal);
        if (exit && signal === "SIGTERM") {
          this.sigterms.push(exit);
          if (exit.code !== 0 || (exit.tookMs ?? 0) > SIGTERM_BOUND_MS) {
            this.problems.push(
              `${r.name} after SIGTERM: exit code ${exit.code}, ${exit.tookMs} ms (bound ${SIGTERM_BOUND_MS} ms)`,
            );
          }
        }
        this.note(kind, from);
        this.restartLater(r, randomInt(500, 5_000));
        return;
      }
      case "db_connections_killed": {
        await this.t.pool
          .query(
            `select count(pg_terminate_backend(pid)) from pg_stat_activity
              where usename = 'bitrix_sync_user' and pid <> pg_backend_pid()`,
          )
          .catch(() => undefined);
        this.note(kind, from);
        return;
      }
      case "db_restart": {
        await this.t.restartDatabase(randomInt(500, this.t.long ? 8_000 : 3_000));
        this.note(kind, from);
        return;
      }
      case "portal_outage": {
        this.outageDone = true;
        const phase = this.t.long ? randomInt(60_000, 120_000) : randomInt(4_000, 8_000);
        // First the portal answers 503, then it stops answering within the client's deadline (and
        // still executes late, as a slow portal does).
        emulator.setOutage({
          kind: "http_error",
          status: 503,
          error: "SERVICE_UNAVAILABLE",
          description: "Service temporarily unavailable",
        });
        await sleep(phase);
        emulator.setOutage({ kind: "latency", ms: 4_000 });
        await sleep(phase);
        emulator.setOutage(null);
        this.note(kind, from);
        return;
      }
      case "query_limit_storm": {
        emulator.setOutage("QUERY_LIMIT_EXCEEDED");
        await sleep(randomInt(2_000, this.t.long ? 20_000 : 6_000));
        emulator.setOutage(null);
        this.note(kind, from);
        return;
      }
      case "operation_time_limit": {
        // One method used up its operating time: the portal blocks it until the oldest bucket of
        // the window drops out; other methods go on.
        const seen = emulator.log
          .slice(-50)
          .flatMap((e) => e.commands)
          .filter((m) => m.startsWith("crm.contact."));
        const method = seen.length > 0 ? pick(seen) : "crm.contact.update";
        emulator.operating.charge(method, emulator.operating.opts.limitSec + 1);
        const until = emulator.operating.state(method).operatingResetAt * 1000;
        this.note(kind, from, Math.max(from, until));
        return;
      }
      case "reply_lost_after_create": {
        emulator.failNext({ kind: "timeout_after_commit", holdMs: 4_000 }, { method: "crm.contact.add" });
        this.note(kind, from);
        return;
      }
    }
  }

  /** Ends every fault: queued portal faults dropped, every replica running again. */
  async settleReplicas(): Promise<void> {
    this.t.emulator.setOutage(null);
    this.t.emulator.clearFaults();
    while (this.restarts.size > 0) await Promise.allSettled([...this.restarts]);
    for (const r of this.t.replicas) {
      if (!r.running) {
        await this.startPersistently(r).catch((e) =>
          this.problems.push(`${r.name} did not start: ${(e as Error).message}`),
        );
      }
    }
    this.lastFaultEnd = Math.max(this.lastFaultEnd, Date.now());
  }
}
