// The service's PostgreSQL pools, one per use, each with its own deadlines (docs/operations.md,
// "Bounded waits"). Before, one pool without any timeout served everything: with the inbox table
// locked by another session, the receivers waited as long as the lock, /metrics hung and nothing
// told anyone. Separate pools also keep the receivers' connections free when the sync lanes use all
// of theirs, and a slow status scrape from holding a connection a robot needs.
//
// The server-side timeouts (statement_timeout, lock_timeout, idle_in_transaction_session_timeout)
// are startup parameters of every connection, so they cost no round trip: the receivers' single
// statement stays one round trip. When one fires, PostgreSQL cancels the statement and rolls its
// transaction back, so a receiver that answers 503 has written nothing. `queryMs` is a client-side
// backstop, longer than the statement timeout: it fires only when the server cannot (the network or
// the server is gone), and the pool then drops that connection.
import pg from "pg";
import { withSearchPath } from "./search-path.js";

/** What a pool is for; each gets the deadlines in POOL_LIMITS. */
export type PoolUse = "work" | "receiver" | "status";

export interface PoolLimits {
  /** Most connections open at once. */
  max: number;
  /** Waiting for a free pooled connection or for a new one to connect (pg's connectionTimeoutMillis). */
  connectMs: number;
  /** PostgreSQL statement_timeout. */
  statementMs: number;
  /** PostgreSQL lock_timeout: a lock wait longer than this fails the statement (55P03). */
  lockMs: number;
  /** PostgreSQL idle_in_transaction_session_timeout: a transaction left open this long is ended. */
  idleInTransactionMs: number;
  /** Client-side deadline of a query, for when the server cannot answer at all. */
  queryMs: number;
}

/**
 * The deadlines of each use (`max` of `work` comes from BITRIX_SYNC_DB_POOL_SIZE).
 *
 * - work: the sync lanes, graphile-worker, reconciliation, the settings cache and the CRM limiter.
 *   Statements are short, but a lane's transaction can wait on a row another lane holds for a
 *   moment, and a transaction can stay open across one CRM call (at most
 *   BITRIX_SYNC_HTTP_TIMEOUT_SEC, 60 s), hence the generous limits: they only end what is stuck.
 * - receiver: the robots' inbox writes and the readiness probe of that path. A robot does not retry,
 *   and a 503 after a few seconds (the event is then recovered by reconciliation) beats a request
 *   held as long as someone holds a lock.
 * - status: /health/ready, /internal/sync/v1/status and /metrics: read-only views; an answer in
 *   seconds with what is known beats a probe that hangs.
 */
const POOL_LIMITS: Record<PoolUse, PoolLimits> = {
  work: {
    max: 5,
    connectMs: 10_000,
    statementMs: 30_000,
    lockMs: 10_000,
    idleInTransactionMs: 120_000,
    queryMs: 45_000,
  },
  receiver: {
    // Two grouped inbox calls in flight (InboxWriter) and the readiness probe.
    max: 3,
    connectMs: 1_000,
    statementMs: 2_000,
    lockMs: 1_000,
    idleInTransactionMs: 5_000,
    queryMs: 3_000,
  },
  status: {
    max: 3,
    connectMs: 2_000,
    statementMs: 3_000,
    lockMs: 1_000,
    idleInTransactionMs: 5_000,
    queryMs: 4_000,
  },
};

/** A pool for `use` with its deadlines; `overrides` adjust them (e.g. `max` from the configuration). */
export function createPool(
  connectionString: string,
  use: PoolUse,
  overrides: Partial<PoolLimits> = {},
): pg.Pool {
  const l = { ...POOL_LIMITS[use], ...overrides };
  const pool = new pg.Pool({
    // The service's search path, on every connection (src/db/search-path.ts).
    connectionString: withSearchPath(connectionString),
    max: l.max,
    application_name: `bitrix-sync:${use}`,
    connectionTimeoutMillis: l.connectMs,
    statement_timeout: l.statementMs,
    lock_timeout: l.lockMs,
    idle_in_transaction_session_timeout: l.idleInTransactionMs,
    query_timeout: l.queryMs,
    // A peer that vanished without a FIN is noticed by the kernel instead of never.
    keepAlive: true,
  });
  // A connection that dies idle, or while checked out, must not crash the process: the query
  // using it fails instead, and the pool opens another one.
  pool.on("error", () => undefined);
  pool.on("connect", (client) => client.on("error", () => undefined));
  return pool;
}

/** The three pools of the service. */
export interface ServicePools {
  work: pg.Pool;
  receiver: pg.Pool;
  status: pg.Pool;
  end(): Promise<void>;
}

export function createServicePools(connectionString: string, opts: { workMax: number }): ServicePools {
  const work = createPool(connectionString, "work", { max: opts.workMax });
  const receiver = createPool(connectionString, "receiver");
  const status = createPool(connectionString, "status");
  return {
    work,
    receiver,
    status,
    async end() {
      await Promise.allSettled([work.end(), receiver.end(), status.end()]);
    },
  };
}
