// What docs/openapi.json says against what the app really answers: a request for each refusal of
// the receivers, each answered with a status, error code and reason the document lists for that
// operation (and every documented receiver status seen at least once); the health, status and
// metrics answers match their schemas.
import { Writable } from "node:stream";
import test from "ava";
import type pg from "pg";
import { z } from "zod";
import { HealthState } from "../../../src/health/state.js";
import { API_OPERATIONS, LiveBody, ReadinessBody, StatusBody } from "../../../src/http/api.js";
import { createApp } from "../../../src/http/app.js";
import { buildOpenApi } from "../../../src/http/openapi.js";
import type { StatusSource } from "../../../src/http/status.js";
import { createLogger } from "../../../src/observability/logger.js";
import { registry } from "../../../src/observability/metrics.js";
import { loadConfigWithSecretFiles } from "../../helpers/config.js";
import { createMemoryLimiter } from "../../helpers/memory-limiter.js";
import {
  ALERT_ENTITY_TYPE_ID,
  captureLogger,
  encodeForm,
  MEMBER_ID,
  makeApp,
  receiverConfigFor,
  robotFields,
  robotInit,
  robotUrl,
  setAlertEntityType,
  TOKENS,
} from "../../helpers/receiver.js";
import { testSettings } from "../../helpers/settings.js";
import { createTestDb, type TestDb } from "../../helpers/testdb.js";

let db: TestDb;
let noAlerts: TestDb;
test.before(async () => {
  db = await createTestDb();
  await setAlertEntityType(db.pool, ALERT_ENTITY_TYPE_ID);
  noAlerts = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
  await noAlerts?.drop();
});

// biome-ignore lint/suspicious/noExplicitAny: the generated JSON document
type Doc = any;
const doc: Doc = buildOpenApi("test");
const captured = captureLogger();

type Fields = Array<[string, string]>;
const form = (receiver: "contact" | "alert", edit: (f: Fields) => Fields = (f) => f, id = "42") =>
  encodeForm(edit(robotFields(receiver, id)));
const set = (key: string, value: string) => (f: Fields) =>
  f.map(([k, v]): [string, string] => [k, k === key ? value : v]);
const base = "http://localhost/bitrix/sync/webhook";

interface Case {
  what: string;
  receiver: "contact" | "alert";
  url: string;
  init: RequestInit;
  pool?: () => pg.Pool;
  configured?: boolean;
}

const contactUrl = robotUrl("contact", "42");
const cases: Case[] = [
  { what: "a robot request", receiver: "contact", url: contactUrl, init: robotInit(form("contact")) },
  { what: "GET", receiver: "contact", url: contactUrl, init: { method: "GET" } },
  { what: "JSON", receiver: "contact", url: contactUrl, init: robotInit("{}", "application/json") },
  {
    what: "a big body",
    receiver: "contact",
    url: contactUrl,
    init: robotInit(`${form("contact")}&auth%5Bp%5D=${"x".repeat(9000)}`),
  },
  {
    what: "a long query",
    receiver: "contact",
    url: `${contactUrl}&p=${"p".repeat(1100)}`,
    init: robotInit(form("contact")),
  },
  { what: "no token", receiver: "contact", url: `${base}/contact?ID=42`, init: robotInit(form("contact")) },
  {
    what: "a wrong token",
    receiver: "contact",
    url: robotUrl("contact", "42", "wrong"),
    init: robotInit(form("contact")),
  },
  {
    what: "no ID",
    receiver: "contact",
    url: `${base}/contact?token=${TOKENS.contact}`,
    init: robotInit(form("contact")),
  },
  {
    what: "another ID",
    receiver: "contact",
    url: robotUrl("contact", "43"),
    init: robotInit(form("contact")),
  },
  {
    what: "a deal document",
    receiver: "contact",
    url: contactUrl,
    init: robotInit(form("contact", set("document_id[1]", "CCrmDocumentDeal"))),
  },
  {
    what: "a bad document ID",
    receiver: "contact",
    url: contactUrl,
    init: robotInit(form("contact", set("document_id[2]", "CONTACT_042"))),
  },
  {
    what: "another portal",
    receiver: "contact",
    url: contactUrl,
    init: robotInit(form("contact", set("auth[domain]", "other.test"))),
  },
  {
    what: "another member",
    receiver: "contact",
    url: contactUrl,
    init: robotInit(form("contact", set("auth[member_id]", `${MEMBER_ID}x`))),
  },
  {
    what: "an extra field",
    receiver: "contact",
    url: contactUrl,
    init: robotInit(`${form("contact")}&event=x`),
  },
  {
    what: "not configured",
    receiver: "contact",
    url: contactUrl,
    init: robotInit(form("contact")),
    configured: false,
  },
  {
    what: "an alert robot request",
    receiver: "alert",
    url: robotUrl("alert", "5"),
    init: robotInit(form("alert", undefined, "5")),
  },
  {
    what: "an alert of another smart process",
    receiver: "alert",
    url: robotUrl("alert", "5"),
    init: robotInit(encodeForm(robotFields("alert", "5", ALERT_ENTITY_TYPE_ID + 1))),
  },
  {
    what: "an alert with no alert settings",
    receiver: "alert",
    url: robotUrl("alert", "5"),
    init: robotInit(form("alert", undefined, "5")),
    pool: () => noAlerts.pool,
  },
];

/** The rejected counter's per-label values, to see which reason a request was counted under. */
async function rejected(): Promise<Map<string, number>> {
  const m = await registry.getSingleMetric("bitrix_sync_webhook_rejected_total")?.get();
  return new Map((m?.values ?? []).map((v) => [`${v.labels.receiver}:${v.labels.reason}`, v.value]));
}

test.serial("every receiver answer is one the document lists, with its error code and reason", async (t) => {
  const seen = new Map<string, Set<number>>();
  for (const c of cases) {
    const app = makeApp(
      c.pool ? c.pool() : db.pool,
      captured.log,
      c.configured === false ? null : receiverConfigFor(),
    );
    const before = await rejected();
    const res = await app.request(c.url, c.init);
    const body = (await res.json()) as { error?: string; status?: string };
    const after = await rejected();
    const reasons = [...after].filter(([k, v]) => v > (before.get(k) ?? 0)).map(([k]) => k.split(":")[1]);
    const op = doc.paths[`/bitrix/sync/webhook/${c.receiver}`].post;
    const documented = op.responses[String(res.status)];
    t.truthy(documented, `${c.what}: status ${res.status} is not documented`);
    if (!documented) continue;
    const schema = z.fromJSONSchema(
      documented.content["application/json"].schema.$ref
        ? doc.components.schemas[documented.content["application/json"].schema.$ref.split("/").pop()]
        : documented.content["application/json"].schema,
    );
    t.true(
      schema.safeParse(body).success,
      `${c.what}: body ${JSON.stringify(body)} does not match the documented ${res.status}`,
    );
    if (res.status !== 200) {
      t.is(reasons.length, 1, `${c.what}: counted once`);
      t.true(
        documented["x-bitrix-sync-reasons"].includes(reasons[0]),
        `${c.what}: reason ${reasons[0]} not documented for ${res.status}`,
      );
      if (res.status === 405) t.is(res.headers.get("allow"), "POST");
    }
    const s = seen.get(c.receiver) ?? new Set<number>();
    s.add(res.status);
    seen.set(c.receiver, s);
  }
  // Every documented status of the receivers is really answered (500, an unhandled error, aside).
  for (const receiver of ["contact", "alert"] as const) {
    const statuses = Object.keys(doc.paths[`/bitrix/sync/webhook/${receiver}`].post.responses)
      .map(Number)
      .filter((s) => s !== 500);
    const got = [...(seen.get(receiver) ?? [])].sort((a, b) => a - b);
    // The contact cases cover every status; the alert cases what differs for alerts (entity type, settings).
    if (receiver === "contact")
      t.deepEqual(
        got,
        statuses.sort((a, b) => a - b),
      );
    else t.deepEqual(got, [200, 400, 503]);
  }
});

const TOKEN = "status-token-0b7c2d9e4f6a1c3e5b7d9f2a4c6e8b0d";

test("health, readiness, status and metrics answer what their schemas say", async (t) => {
  const log = createLogger({ destination: new Writable({ write: (_c, _e, cb) => cb() }) });
  const config = loadConfigWithSecretFiles({ BITRIX_SYNC_SERVICE_TOKEN: TOKEN });
  const health = new HealthState();
  health.beat();
  const s = testSettings();
  const status: StatusSource = {
    config,
    health,
    limiter: createMemoryLimiter({ settings: { refillPerSec: 2, burst: 5, maxInFlight: 2 } }),
    settings: { get: () => s, version: () => 1, problem: () => null },
  };
  const app = createApp({ pool: db.pool, log, status });
  const live = await app.request("/health/live");
  t.is(live.status, 200);
  t.true(LiveBody.safeParse(await live.json()).success);
  const ready = await app.request("/health/ready");
  const readyBody = await ready.json();
  t.true(ReadinessBody.safeParse(readyBody).success, JSON.stringify(readyBody));
  t.truthy(doc.paths["/health/ready"].get.responses[String(ready.status)]);
  const st = await app.request("/internal/sync/v1/status", { headers: { authorization: `Bearer ${TOKEN}` } });
  t.is(st.status, 200);
  const stBody = await st.json();
  const parsed = StatusBody.safeParse(stBody);
  t.true(parsed.success, parsed.success ? "" : JSON.stringify(parsed.error.issues.slice(0, 3)));
  const unauthorized = await app.request("/internal/sync/v1/status");
  t.is(unauthorized.status, 401);
  t.deepEqual(await unauthorized.json(), { error: "unauthorized" });
  const metrics = await app.request("/metrics");
  t.is(metrics.status, 200);
  t.truthy(
    doc.paths["/metrics"].get.responses["200"].content[metrics.headers.get("content-type") ?? ""],
    `content type ${metrics.headers.get("content-type")} documented`,
  );
  t.is(
    API_OPERATIONS.length,
    Object.values(doc.paths).reduce((n: number, p) => n + Object.keys(p as object).length, 0),
  );
});
