// The one HTTP listener (docs/operations.md, "Health, status and metrics"): health, the receivers,
// the proxy's refusal route, internal status and metrics. Thin:
// handlers call src/ and SQL; errors are generic JSON with no ids or stack. Every handler that asks
// the database answers within a deadline (docs/operations.md, "Bounded waits").
import { Hono } from "hono";
import type pg from "pg";
import { schemaInfo } from "../db/schema-window.js";
import type { ReceiverConfig } from "../inbound/config.js";
import { edgeRoutes, type RefusedSourceJournal } from "../inbound/edge.js";
import { InboxWriter } from "../inbound/inbox.js";
import { RECEIVER_BASE_PATH, receiverRoutes } from "../inbound/routes.js";
import type { Logger } from "../observability/logger.js";
import { registry } from "../observability/metrics.js";
import { BUILD } from "../version.js";
import { API_PATHS, LiveBody } from "./api.js";
import { bearerAuth } from "./bearer.js";
import { collectScrape } from "./scrape.js";
import { cachedReadiness, readiness, type StatusSource, statusDocument } from "./status.js";

export interface AppDeps {
  /** The status endpoints' pool (src/db/pools.ts, use "status"); the receivers' too unless receiverPool is given. */
  pool: pg.Pool;
  /** The receivers' pool (use "receiver"): the robots' inbox writes only. */
  receiverPool?: pg.Pool;
  log: Logger;
  /** Robot webhook receivers (§10.1); absent: they answer 503 receiver_not_configured. */
  receiver?: ReceiverConfig;
  /** The running service (readiness matrix, status, metrics); absent: database checks only. */
  status?: StatusSource;
  /** Sampling of the receivers' refusal log lines (default: 10 per receiver and reason a minute). */
  receiverLogSampling?: { perWindow?: number; windowMs?: number };
  /** Where the proxy's source_ip refusals are journaled (src/inbound/edge.ts); absent: counted only. */
  refusedSources?: RefusedSourceJournal;
}

export function createApp(deps: AppDeps): Hono {
  const app = new Hono();
  const inbox = new InboxWriter(deps.receiverPool ?? deps.pool, deps.receiver?.inbox);
  // The probe of the receivers' write path (a test insert, rolled back) runs on the status pool: it
  // exercises the same statement and locks, and a probe storm never takes a connection the robots'
  // requests need (the receivers' pool is small on purpose: src/db/pools.ts).
  const prober = new InboxWriter(deps.pool);
  const probe = () => prober.probe();
  const ready = cachedReadiness(() => readiness(deps.pool, deps.status, probe));

  // Paths, bodies and answers: src/http/api.ts, from which docs/openapi.json is generated.
  const live = LiveBody.parse({ status: "live" });
  app.get(API_PATHS.live, (c) => c.json(live));

  // §14: not_ready answers 503; degraded (a CRM outage shorter than a credential problem) 200.
  // Served from a one-second cache (READINESS_CACHE_MS).
  app.get(API_PATHS.ready, async (c) => {
    const r = await ready();
    // The build that decided (src/version.ts): a probe of a rolling upgrade tells replicas apart.
    // And the schemas (src/db/schema-window.ts): this release's and the database's, as this round read it.
    const schema = schemaInfo(deps.status?.health.schema ?? null);
    return c.json({ ...r, build: BUILD, schema }, r.status === "not_ready" ? 503 : 200);
  });

  // Internal only: the public nginx exposes the receivers and nothing else (deploy/nginx).
  const status = deps.status;
  app.get(API_PATHS.status, bearerAuth(status?.config.secrets.BITRIX_SYNC_SERVICE_TOKEN), async (c) => {
    if (!status) return c.json({ error: "status_not_configured" }, 503);
    const doc = await statusDocument(deps.pool, status, probe);
    return c.json(doc.body, doc.ok ? 200 : 503);
  });

  app.get(API_PATHS.metrics, async (c) => {
    await collectScrape({ pool: deps.pool, probe, ...(deps.status ? { status: deps.status } : {}) });
    return c.text(await registry.metrics(), 200, { "content-type": registry.contentType });
  });

  app.route(
    RECEIVER_BASE_PATH,
    receiverRoutes({ inbox, log: deps.log, config: deps.receiver, logSampling: deps.receiverLogSampling }),
  );

  // The public nginx's own refusals, counted (docs/deployment.md, "The proxy's refusals"); only the
  // trusted proxy and loopback may call it, to anyone else it is an unknown path.
  app.route("/", edgeRoutes({ trustedProxies: deps.receiver?.trustedProxies, journal: deps.refusedSources }));

  app.notFound((c) => c.json({ error: "not_found" }, 404));
  app.onError((err, c) => {
    deps.log.error({ event: "http.unhandled", errorName: err.name }, "unhandled error in HTTP handler");
    return c.json({ error: "internal_error" }, 500);
  });
  return app;
}
