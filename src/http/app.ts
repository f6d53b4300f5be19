// The one HTTP listener (DESIGN.md): health, the receivers, internal status and metrics. Thin:
// handlers call src/ and SQL; errors are generic JSON with no ids or stack.
import { Hono } from "hono";
import type pg from "pg";
import type { ReceiverConfig } from "../inbound/config.js";
import { RECEIVER_BASE_PATH, receiverRoutes } from "../inbound/routes.js";
import { secretMatcher } from "../inbound/token.js";
import type { Logger } from "../observability/logger.js";
import { registry } from "../observability/metrics.js";
import { collectScrape } from "../observability/scrape.js";
import { readiness, type StatusSource, statusDocument } from "./status.js";

export interface AppDeps {
  pool: pg.Pool;
  log: Logger;
  /** Robot webhook receivers (§10.1); absent: they answer 503 receiver_not_configured. */
  receiver?: ReceiverConfig;
  /** The running service (readiness matrix, status, metrics); absent: database checks only. */
  status?: StatusSource;
}

export function createApp(deps: AppDeps): Hono {
  const app = new Hono();

  app.get("/health/live", (c) => c.json({ status: "live" }));

  // §14: not_ready answers 503; degraded (a CRM outage shorter than a credential problem) 200.
  app.get("/health/ready", async (c) => {
    const r = await readiness(deps.pool, deps.status);
    return c.json(r, r.status === "not_ready" ? 503 : 200);
  });

  // Internal only: the public nginx exposes the receivers and nothing else (deploy/nginx).
  const serviceToken = deps.status?.config.secrets.BITRIX_SYNC_SERVICE_TOKEN;
  const serviceTokenOk = secretMatcher([serviceToken]);
  app.get("/internal/sync/v1/status", async (c) => {
    if (!deps.status || !serviceToken) return c.json({ error: "status_not_configured" }, 503);
    const m = /^Bearer (\S+)$/.exec(c.req.header("authorization") ?? "");
    if (!m?.[1] || !serviceTokenOk(m[1])) return c.json({ error: "unauthorized" }, 401);
    return c.json(await statusDocument(deps.pool, deps.status));
  });

  app.get("/metrics", async (c) => {
    await collectScrape({ pool: deps.pool, ...(deps.status ? { status: deps.status } : {}) });
    return c.text(await registry.metrics(), 200, { "content-type": registry.contentType });
  });

  app.route(RECEIVER_BASE_PATH, receiverRoutes({ pool: deps.pool, log: deps.log, config: deps.receiver }));

  app.notFound((c) => c.json({ error: "not_found" }, 404));
  app.onError((err, c) => {
    deps.log.error({ event: "http.unhandled", errorName: err.name }, "unhandled error in HTTP handler");
    return c.json({ error: "internal_error" }, 500);
  });
  return app;
}
