// The claim functions as tests call them: one fixture per lease table, each a real claim (it takes
// every due row of the database, so tests that claim are serial). Row types are the caller's.
import type pg from "pg";
import type { Queryable } from "./sql-core.js";

/** claim_commands: leases due CRM commands. */
export async function claimCommands<T extends pg.QueryResultRow>(
  q: Queryable,
  worker: string,
  limit = 1000,
  lease = "60 seconds",
): Promise<T[]> {
  return (
    await q.query<T>("select * from bitrix_sync.claim_commands($1, $2, $3::interval)", [worker, limit, lease])
  ).rows;
}

/** claim_workflows: leases runnable workflows. */
export async function claimWorkflows<T extends pg.QueryResultRow>(
  q: Queryable,
  worker: string,
  limit = 1000,
  lease = "60 seconds",
): Promise<T[]> {
  return (
    await q.query<T>("select * from bitrix_sync.claim_workflows($1, $2, $3::interval)", [
      worker,
      limit,
      lease,
    ])
  ).rows;
}

/** claim_webhooks: leases due inbox events, of one receiver or (null) of both. */
export async function claimWebhooks<T extends pg.QueryResultRow>(
  q: Queryable,
  worker: string,
  limit = 1000,
  receiver: string | null = null,
  lease = "60 seconds",
): Promise<T[]> {
  return (
    await q.query<T>("select * from bitrix_sync.claim_webhooks($1, $2, $3::interval, $4)", [
      worker,
      limit,
      lease,
      receiver,
    ])
  ).rows;
}

/** claim_sync_tasks: leases due App intents. */
export async function claimSyncTasks<T extends pg.QueryResultRow>(
  q: Queryable,
  worker: string,
  limit = 10,
  lease = "60 seconds",
): Promise<T[]> {
  return (
    await q.query<T>("select * from bitrix_sync.claim_sync_tasks($1, $2, $3::interval)", [
      worker,
      limit,
      lease,
    ])
  ).rows;
}
