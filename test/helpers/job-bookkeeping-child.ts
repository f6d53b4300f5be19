// A child process for test/integration/job-bookkeeping.test.ts: a real graphile-worker runner whose
// database connections go through a TCP hop, and a job that closes that hop while it runs. When the
// job returns, graphile-worker records it without awaiting (worker.ts: completeJob(job)), the
// connection is refused, and the rejection is unhandled. This process reports what
// isJobBookkeepingLoss says about that rejection, as one JSON line, and exits.
import { Logger } from "@graphile/logger";
import { run } from "graphile-worker";
import pg from "pg";
import { isConnectionLost, isJobBookkeepingLoss } from "../../src/db/errors.js";
import { startTcpHop } from "./tcp-hop.js";

const url = new URL(process.env.DATABASE_URL ?? "");
const hop = await startTcpHop({ host: url.hostname, port: Number(url.port || 5432) });
const through = new URL(url);
through.port = String(hop.port);

const report = (r: Record<string, unknown>, code: number) => {
  process.stdout.write(`${JSON.stringify(r)}\n`);
  process.exit(code);
};
process.on("unhandledRejection", (e) => {
  report(
    {
      unhandled: true,
      bookkeeping: isJobBookkeepingLoss(e),
      connectionLost: isConnectionLost(e),
      code: (e as { code?: string }).code ?? null,
    },
    0,
  );
});
setTimeout(() => report({ unhandled: false }, 1), 30_000).unref();

const pool = new pg.Pool({ connectionString: through.toString(), max: 4 });
pool.on("error", () => undefined);
const silent = new Logger(() => () => undefined);
await run({
  pgPool: pool,
  noHandleSignals: true,
  logger: silent,
  concurrency: 1,
  pollInterval: 200,
  taskList: {
    // Closes the hop: every connection through it ends, and new ones are refused.
    close_the_hop: () => hop.close(),
  },
});
const direct = new pg.Client({ connectionString: url.toString() });
await direct.connect();
await direct.query("select graphile_worker.add_job('close_the_hop', '{}'::json)");
await direct.end();
