// Retention (issue 11; the rules and the lock behaviour are in sql/retention.sql): finished rows are
// deleted table by table, one short transaction per step (bitrix_sync.retention_step: a batch of at
// most retention.batch_size rows, for workflows one window of a sweep that remembers its place),
// until a table's step says there is no more or the run's budget (retention.run_budget_sec) is
// spent. Commands go before workflows, because a workflow is deleted only once its commands are gone.
import type pg from "pg";
import { sqlstate } from "../db/errors.js";
import type { Logger } from "../observability/logger.js";
import { retentionDeleted } from "../observability/metrics.js";
import type { Settings } from "../settings-schema.js";

/** The tables retention deletes from, in the order a run visits them. */
const RETENTION_TABLES = ["webhooks", "commands", "workflows", "queue"] as const;
export type RetentionTable = (typeof RETENTION_TABLES)[number];

export interface RetentionReport {
  ran: boolean;
  deleted: Record<RetentionTable, number>;
  batches: number;
  /** The budget ran out or the process is stopping: the next run goes on from here. */
  stoppedEarly: boolean;
  /** Tables left for the next run because a lock on them was not granted within lock_timeout. */
  skipped: RetentionTable[];
}

const LOCK_NOT_AVAILABLE = "55P03";

/** One retention run. Each batch is its own statement and so its own transaction (autocommit). */
export async function runRetention(
  pool: pg.Pool,
  s: Settings["retention"],
  log: Logger,
  opts: { signal?: AbortSignal; now?: () => number } = {},
): Promise<RetentionReport> {
  const deleted: Record<RetentionTable, number> = { webhooks: 0, commands: 0, workflows: 0, queue: 0 };
  const report: RetentionReport = { ran: false, deleted, batches: 0, stoppedEarly: false, skipped: [] };
  if (!s.enabled) return report;
  report.ran = true;
  const now = opts.now ?? Date.now;
  const endsAt = now() + s.runBudgetSec * 1000;
  // The database's clock, as the sweep's rounds are stamped with it (retention_step).
  const startedAt = (await pool.query<{ t: Date }>("select now() as t")).rows[0]?.t ?? null;
  outer: for (const table of RETENTION_TABLES) {
    for (;;) {
      if (opts.signal?.aborted || now() >= endsAt) {
        report.stoppedEarly = true;
        break outer;
      }
      let n: number;
      let more: boolean;
      try {
        const { rows } = await pool.query<{ deleted: number; more: boolean }>(
          "select deleted, more from bitrix_sync.retention_step($1, $2)",
          [table, startedAt],
        );
        n = rows[0]?.deleted ?? 0;
        more = rows[0]?.more ?? false;
      } catch (e) {
        // lock_timeout (200 ms): someone holds a lock on the table (a migration, a long transaction);
        // retention never waits for it. This table waits for the next run, the others go on.
        if (sqlstate(e) !== LOCK_NOT_AVAILABLE) throw e;
        log.warn(
          { event: "retention.lock_busy", table, sqlstate: LOCK_NOT_AVAILABLE },
          "table busy; left for the next run",
        );
        report.skipped.push(table);
        break;
      }
      report.batches++;
      deleted[table] += n;
      if (n > 0) retentionDeleted.inc({ table }, n);
      // Not `n < batchSize`: rows skipped as locked, or events deletable only once the events
      // coalesced into them are gone, can make a batch short while more rows are due; and a window
      // of the workflow sweep may delete nothing while the sweep goes on.
      if (!more) break;
    }
  }
  log.info(
    {
      event: "retention.run",
      ...deleted,
      batches: report.batches,
      stoppedEarly: report.stoppedEarly,
      skipped: report.skipped,
    },
    "retention run finished",
  );
  return report;
}
