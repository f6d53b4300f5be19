// The one HTTP listener (DESIGN.md): health, and later the receivers, status and metrics. Thin:
// handlers call src/ and SQL; errors are generic JSON with no ids or stack.
import { Hono } from "hono";
import type pg from "pg";
import { migrationsCurrent } from "../db/migrate.js";
import type { Logger } from "../observability/logger.js";
import type { ReceiverConfig } from "../receiver/config.js";
import { RECEIVER_BASE_PATH, receiverRoutes } from "../receiver/routes.js";

export interface AppDeps {
  pool: pg.Pool;
  log: Logger;
  /** Robot webhook receivers (§10.1); absent: they answer 503 receiver_not_configured. */
  receiver?: ReceiverConfig;
}

/** Readiness checks; each returns a safe reason when it fails. */
async function readinessProblems(deps: AppDeps): Promise<string[]> {
  const problems: string[] = [];
  try {
    if (!(await migrationsCurrent(deps.pool))) problems.push("migrations_pending");
  } catch {
    problems.push("database_unreachable");
  }
  return problems;
}

export function createApp(deps: AppDeps): Hono {
  const app = new Hono();

  app.get("/health/live", (c) => c.json({ status: "live" }));

  app.get("/health/ready", async (c) => {
    const problems = await readinessProblems(deps);
    if (problems.length > 0) return c.json({ status: "not_ready", problems }, 503);
    return c.json({ status: "ready" });
  });

  app.route(RECEIVER_BASE_PATH, receiverRoutes({ pool: deps.pool, log: deps.log, config: deps.receiver }));

  app.notFound((c) => c.json({ error: "not_found" }, 404));
  app.onError((err, c) => {
    deps.log.error({ event: "http.unhandled", errorName: err.name }, "unhandled error in HTTP handler");
    return c.json({ error: "internal_error" }, 500);
  });
  return app;
}
