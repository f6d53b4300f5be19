// The long-running sync loop behind the sync_loop task: intake, workflow steps, alert mirroring and
// the CRM pump, each repeated while there is work and otherwise woken by NOTIFY, with a fallback
// poll (worker.poll_interval_ms, at most 5 s) so a lost NOTIFY costs seconds. It stops starting new
// rounds at its time budget or when `signal` aborts, and returns when the rounds in progress end.
//
// The App's intents NOTIFY only while a loop sleeps on the intake watch (sql/enqueue.sql): before
// its intake sleeps, the loop takes the watch in a transaction on a connection of its own (which
// waits for the App transactions that recorded an intent without a NOTIFY), looks at the queue once
// more, and ends that transaction when it wakes. A busy loop thus costs the App no NOTIFY per
// transaction. The watch is a table lock, held by an open transaction, so it cannot live on the
// LISTEN connection (no notification arrives inside a transaction); that transaction takes no
// transaction ID and keeps no snapshot, so it holds back no vacuum.
import pg from "pg";
import { runAlertSync } from "./alerts/mirror.js";
import { runAlertRecovery } from "./alerts/recover.js";
import type { ServiceContext } from "./context.js";
import { withSearchPath } from "./db/search-path.js";
import { processAlertWebhooks, processContactWebhooks } from "./inbound/webhooks.js";
import { runIntake } from "./workflows/intake.js";
import { startPump } from "./workflows/pump.js";
import { runWorkflows } from "./workflows/step-lane.js";

export interface LoopOptions {
  /** Stop starting new rounds after this long (the task's run budget). */
  budgetMs: number;
  signal?: AbortSignal;
  connectionString: string;
}

const CHANNELS = {
  bitrix_sync_queue: "intake",
  bitrix_sync_workflows: "workflows",
  bitrix_sync_commands: "pump",
  bitrix_sync_webhooks: "webhooks",
} as const;
type Lane = (typeof CHANNELS)[keyof typeof CHANNELS];

/**
 * Per-lane wake-ups. A wake that arrives while the lane is busy is remembered, so the lane's next
 * wait returns at once: a NOTIFY landing between a round's claim and its wait is never lost.
 */
class Waker {
  private waiters = new Map<Lane, Array<() => void>>();
  private pending = new Set<Lane>();
  wake(lane: Lane): void {
    const list = this.waiters.get(lane) ?? [];
    this.waiters.set(lane, []);
    if (list.length === 0) this.pending.add(lane);
    for (const w of list) w();
  }
  wakeAll(): void {
    for (const lane of Object.values(CHANNELS)) this.wake(lane);
  }
  wait(lane: Lane, ms: number): Promise<void> {
    if (this.pending.delete(lane)) return Promise.resolve();
    return new Promise((resolve) => {
      const t = setTimeout(done, Math.max(1, ms));
      const list = this.waiters.get(lane) ?? [];
      list.push(done);
      this.waiters.set(lane, list);
      function done() {
        clearTimeout(t);
        resolve();
      }
    });
  }
}

let running = 0;

/** Sync loops running in this process right now (the sync_loop task keeps it at one). */
export function runningLoops(): number {
  return running;
}

export async function runSyncLoop(deps: ServiceContext, opts: LoopOptions): Promise<void> {
  running++;
  try {
    await runLoop(deps, opts);
  } finally {
    running--;
  }
}

async function runLoop(deps: ServiceContext, opts: LoopOptions): Promise<void> {
  const deadline = Date.now() + opts.budgetMs;
  const waker = new Waker();
  const loop: LoopState = { deps, waker, active: () => Date.now() < deadline && !opts.signal?.aborted };
  const onAbort = () => waker.wakeAll();
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  // At the end of the budget, lanes waiting for work stop at once (the successor is taking over).
  const budgetEnd = setTimeout(onAbort, opts.budgetMs);
  const listener = await listen(deps, opts.connectionString, waker);

  const flights = new Set<Promise<void>>();
  const intakeRound = async () => {
    const n = await runIntake(deps);
    if (n > 0) waker.wake("workflows");
    return n;
  };
  const watch = new IntakeWatch(opts.connectionString);
  const lanes = [
    runLane(loop, "intake", intakeRound, intakeSleep(loop, listener, watch, intakeRound)),
    // Woken by the receivers' NOTIFY, one per call however many requests it grouped
    // (sql/receiver.sql); the fallback poll covers a lost one.
    runLane(loop, "webhooks", async () => {
      const n = await processContactWebhooks(deps);
      const a = await processAlertWebhooks(deps, deps.settings().alerts);
      return n + a;
    }),
    runLane(loop, "workflows", async () => {
      const n = await runWorkflows(deps);
      const r = await runAlertRecovery(deps.pool, deps.settings(), deps.log);
      const a = await runAlertSync(deps.pool, deps.settings().alerts);
      if (n + r + a > 0) waker.wake("pump");
      return n + r;
    }),
    runLane(loop, "pump", pumpRound(loop, flights, opts.signal)),
  ];
  try {
    await Promise.all(lanes);
    // The batches still in flight settle before the loop returns (their send markers are committed).
    await Promise.allSettled([...flights]);
  } finally {
    clearTimeout(budgetEnd);
    opts.signal?.removeEventListener("abort", onAbort);
    await watch.close();
    await listener.close();
  }
}

/** What the lanes of one loop share. */
interface LoopState {
  deps: ServiceContext;
  waker: Waker;
  /** Within the budget and not aborted. */
  active: () => boolean;
}

/** The lane's sleep: until woken or `ms` have passed. */
type Sleep = (ms: number) => Promise<void>;

/** The loop's LISTEN connection: a NOTIFY wakes its lane; after a gap every lane looks. */
async function listen(deps: ServiceContext, connectionString: string, waker: Waker): Promise<Listener> {
  const listener = new Listener(
    connectionString,
    (channel) => {
      const lane = CHANNELS[channel as keyof typeof CHANNELS];
      if (lane) waker.wake(lane);
      // A finished command or a new workflow also means work for the next stage.
      if (lane === "intake") waker.wake("workflows");
    },
    // Whatever was notified while it was away is lost: every lane looks now.
    () => waker.wakeAll(),
  );
  const listenError = await listener.start();
  if (listenError) {
    deps.log.warn(
      { event: "loop.listen_failed", errorName: listenError.name },
      "LISTEN unavailable; polling until it connects",
    );
  }
  return listener;
}

/**
 * One lane: rounds while the loop is active. A round returns how much it did (more: go on at once),
 * 0 (sleep the poll interval) or a negative wait in ms; a failed round backs off a second at most.
 */
async function runLane(
  loop: LoopState,
  name: Lane,
  round: () => Promise<number>,
  sleep?: Sleep,
): Promise<void> {
  const { deps, waker, active } = loop;
  while (active()) {
    deps.health?.beat();
    let waitMs = deps.settings().worker.pollIntervalMs;
    try {
      const n = await round();
      if (n > 0) continue;
      if (n < 0) waitMs = Math.min(waitMs, -n);
    } catch (e) {
      deps.log.warn(
        {
          event: "loop.round_failed",
          lane: name,
          errorName: (e as Error).name,
          sqlstate: (e as { code?: string }).code,
        },
        "sync round failed; backing off",
      );
      waitMs = Math.min(waitMs, 1000);
    }
    if (!active()) break;
    await (sleep ? sleep(waitMs) : waker.wait(name, waitMs));
  }
}

/**
 * The pump lane's round. One pump lane per process: it starts a batch (one limiter permit, a claim,
 * the send marker) and lets it fly while it starts the next, up to limiter.max_in_flight batches in
 * flight at once (`flights`).
 */
function pumpRound(
  loop: LoopState,
  flights: Set<Promise<void>>,
  signal?: AbortSignal,
): () => Promise<number> {
  const { deps, waker } = loop;
  return async () => {
    if (flights.size >= Math.max(1, deps.settings().limiter.maxInFlight)) {
      await Promise.race(flights);
      return 1;
    }
    const r = await startPump(deps, signal);
    if (r.flight) {
      const f: Promise<void> = r.flight
        .catch((e) => {
          deps.log.warn(
            {
              event: "loop.round_failed",
              lane: "pump",
              errorName: (e as Error).name,
              sqlstate: (e as { code?: string }).code,
            },
            "CRM batch failed",
          );
        })
        .finally(() => {
          flights.delete(f);
          waker.wake("workflows");
          waker.wake("pump");
        });
      flights.add(f);
      return r.sent;
    }
    // Negative: "nothing now, look again in this many ms" (a batch filling up).
    return Number.isFinite(r.waitMs) ? -Math.max(1, r.waitMs) : 0;
  };
}

/**
 * Intake sleeps on the intake watch (bitrix_sync.watch_intake()) when LISTEN works: only then do the
 * App's intents NOTIFY. Without the watch (another loop holds it, a long App transaction, no LISTEN,
 * the watch connection lost) the fallback poll covers the wait.
 */
function intakeSleep(
  loop: LoopState,
  listener: Listener,
  watch: IntakeWatch,
  intakeRound: () => Promise<number>,
): Sleep {
  return async (ms) => {
    const watching = listener.listening && (await watch.take());
    try {
      // Intents committed before the watch was taken sent no NOTIFY: look once more.
      if (watching && loop.active() && (await intakeRound().catch(() => 0)) > 0) return;
      await loop.waker.wait("intake", ms);
    } finally {
      if (watching) await watch.release();
    }
  };
}

/** How often a lost LISTEN connection tries to connect again. */
const LISTEN_RETRY_MS = 1_000;

/**
 * The loop's LISTEN connection. A database restart (or a terminated backend) ends it: it connects
 * again every LISTEN_RETRY_MS while the loop runs, and once it listens again `onBack` wakes every
 * lane, since what was notified meanwhile is lost. Until then the lanes poll (worker.poll_interval_ms),
 * so after a restart each hop of a workflow (step, command, settle, step) no longer waits for a poll.
 */
class Listener {
  private client: pg.Client | undefined;
  private retry: NodeJS.Timeout | undefined;
  private closed = false;
  constructor(
    private readonly connectionString: string,
    private readonly onNotify: (channel: string) => void,
    private readonly onBack: () => void,
  ) {}

  get listening(): boolean {
    return this.client !== undefined;
  }

  /** Connects and listens; on failure returns the error and keeps trying in the background. */
  async start(): Promise<Error | null> {
    return await this.connect();
  }

  private async connect(): Promise<Error | null> {
    const c = new pg.Client({
      // The service's search path, like the pools' connections (src/db/search-path.ts).
      connectionString: withSearchPath(this.connectionString),
      application_name: "bitrix-sync-listen",
      // Bounded like the pools' connections (src/db/pools.ts); without LISTEN the lanes poll.
      connectionTimeoutMillis: 10_000,
      keepAlive: true,
    });
    c.on("notification", (n) => this.onNotify(n.channel));
    c.on("error", () => this.lost(c));
    c.on("end", () => this.lost(c));
    try {
      await c.connect();
      for (const ch of Object.keys(CHANNELS)) await c.query(`listen ${ch}`);
    } catch (e) {
      await c.end().catch(() => undefined);
      this.again();
      return e instanceof Error ? e : new Error(String(e));
    }
    if (this.closed) {
      await c.end().catch(() => undefined);
      return null;
    }
    this.client = c;
    return null;
  }

  private lost(c: pg.Client): void {
    if (this.client !== c) return;
    this.client = undefined;
    c.end().catch(() => undefined);
    this.again();
  }

  private again(): void {
    if (this.closed || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      if (this.closed) return;
      void this.connect().then((e) => {
        if (e === null && this.listening) this.onBack();
      });
    }, LISTEN_RETRY_MS);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retry);
    const c = this.client;
    this.client = undefined;
    await c?.end().catch(() => undefined);
  }
}

/**
 * The connection that holds the intake watch while the loop sleeps: `take()` opens a transaction
 * and calls bitrix_sync.watch_intake() in it; `release()` ends the transaction. Connected on first
 * use and again after a failure; any failure means "not watching" (the loop polls).
 */
class IntakeWatch {
  private client: pg.Client | undefined;
  constructor(private readonly connectionString: string) {}

  async take(): Promise<boolean> {
    try {
      const c = await this.connect();
      await c.query("begin");
      const { rows } = await c.query<{ w: boolean }>("select bitrix_sync.watch_intake() as w");
      if (rows[0]?.w === true) return true;
      await c.query("rollback");
      return false;
    } catch {
      await this.close();
      return false;
    }
  }

  async release(): Promise<void> {
    try {
      await this.client?.query("commit");
    } catch {
      await this.close();
    }
  }

  async close(): Promise<void> {
    const c = this.client;
    this.client = undefined;
    await c?.end().catch(() => undefined);
  }

  private async connect(): Promise<pg.Client> {
    if (this.client) return this.client;
    const c = new pg.Client({
      connectionString: withSearchPath(this.connectionString),
      application_name: "bitrix-sync-watch",
      connectionTimeoutMillis: 10_000,
      keepAlive: true,
      // The transaction stays open while the loop sleeps (worker.poll_interval_ms, at most 5 s). A
      // server-wide idle-in-transaction timeout below that would end the session at every sleep; a
      // process that stops answering still loses the watch after 30 s. watch_intake() itself gives
      // up after about 1 s.
      options: "-c idle_in_transaction_session_timeout=30s -c statement_timeout=5s",
    });
    c.on("error", () => undefined); // the next take() connects again
    await c.connect();
    this.client = c;
    return c;
  }
}
