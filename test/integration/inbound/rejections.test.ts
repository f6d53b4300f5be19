// Every refused variant of the robot contract (§10.1) gets its status and a generic body, and no
// inbox row: this file's database never sees a valid request, so webhook_inbox stays empty.
import test from "ava";
import { createApp } from "../../../src/http/app.js";
import type { ReceiverConfig } from "../../../src/inbound/config.js";
import { registry } from "../../../src/observability/metrics.js";
import {
  ALERT_ENTITY_TYPE_ID,
  captureLogger,
  encodeForm,
  inboxCount,
  MEMBER_ID,
  makeApp,
  PORTAL_HOST,
  receiverConfigFor,
  robotFields,
  robotInit,
  robotUrl,
  setAlertEntityType,
  TOKENS,
} from "../../helpers/receiver.js";
import { createTestDb, type TestDb } from "../../helpers/testdb.js";

let db: TestDb;
const captured = captureLogger();
test.before(async () => {
  db = await createTestDb();
  await setAlertEntityType(db.pool, ALERT_ENTITY_TYPE_ID);
});
test.after.always(async () => {
  await db?.drop();
});

type Fields = Array<[string, string]>;
const contactForm = (edit: (f: Fields) => Fields = (f) => f, id = "42") =>
  encodeForm(edit(robotFields("contact", id)));
const alertForm = (edit: (f: Fields) => Fields = (f) => f, id = "5", type = ALERT_ENTITY_TYPE_ID) =>
  encodeForm(edit(robotFields("alert", id, type)));
const set = (key: string, value: string) => (f: Fields) =>
  f.map(([k, v]): [string, string] => [k, k === key ? value : v]);
const drop = (key: string) => (f: Fields) => f.filter(([k]) => k !== key);
const add = (key: string, value: string) => (f: Fields) => [...f, [key, value]] as Fields;
const contactUrl = robotUrl("contact", "42");
const base = "http://localhost/bitrix/sync/webhook";

interface Case {
  name: string;
  url: string;
  init: RequestInit;
  status: number;
  error: string;
  config?: ReceiverConfig | null;
}

const cases: Case[] = [
  // Method, before anything else.
  ...["GET", "PUT", "DELETE", "PATCH", "OPTIONS"].map((method) => ({
    name: `${method} is not allowed`,
    url: contactUrl,
    init: { method, headers: { "content-type": "application/x-www-form-urlencoded" } },
    status: 405,
    error: "method_not_allowed",
  })),
  // Content type.
  ...[
    undefined,
    "application/json",
    "text/plain",
    "multipart/form-data; boundary=x",
    "application/x-www-form-urlencoded; charset=latin1",
    "application/x-www-form-urlencoded; charset=utf-8; x=y",
    "application/x-www-form-urlencodedx",
  ].map((ct) => ({
    name: `content type ${ct ?? "(none)"} is unsupported`,
    url: contactUrl,
    init: {
      method: "POST",
      headers: (ct === undefined ? {} : { "content-type": ct }) as Record<string, string>,
      body: contactForm(),
    },
    status: 415,
    error: "unsupported_media_type",
  })),
  // Sizes.
  {
    name: "a body over 8 KiB is too large (streamed, no content-length)",
    url: contactUrl,
    init: robotInit(contactForm(add("auth[padding]", "x".repeat(9000)))),
    status: 413,
    error: "payload_too_large",
  },
  {
    name: "a declared content-length over 8 KiB is too large",
    url: contactUrl,
    init: {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", "content-length": "9000" },
      body: "x".repeat(9000),
    },
    status: 413,
    error: "payload_too_large",
  },
  {
    name: "a query over 1 KiB is too long",
    url: `${contactUrl}&pad=${"p".repeat(1100)}`,
    init: robotInit(contactForm()),
    status: 414,
    error: "uri_too_long",
  },
  // Token (403).
  ...[
    ["no token", `${base}/contact?ID=42`],
    ["an empty token", `${base}/contact?token=&ID=42`],
    ["a wrong token", robotUrl("contact", "42", "wrong")],
    ["the alert receiver's token", robotUrl("contact", "42", TOKENS.alert)],
    ["the previous token outside a rotation", robotUrl("contact", "42", TOKENS.contactPrevious)],
    ["the token in upper case", robotUrl("contact", "42", TOKENS.contact.toUpperCase())],
    ["a prefix of the token", robotUrl("contact", "42", TOKENS.contact.slice(0, -1))],
    ["the token and one more character", robotUrl("contact", "42", `${TOKENS.contact}0`)],
    ["the token twice", `${contactUrl}&token=${TOKENS.contact}`],
    ["a right and a wrong token", `${contactUrl}&token=wrong`],
    ["a token with a broken escape", `${base}/contact?token=${TOKENS.contact}%zz&ID=42`],
    ["the token as Token", `${base}/contact?Token=${TOKENS.contact}&ID=42`],
  ].map(([what, url]) => ({
    name: `${what} is forbidden`,
    url: url as string,
    init: robotInit(contactForm()),
    status: 403,
    error: "forbidden",
  })),
  {
    name: "a contact token on the alert receiver is forbidden",
    url: robotUrl("alert", "5", TOKENS.contact),
    init: robotInit(alertForm()),
    status: 403,
    error: "forbidden",
  },
  // Query shape (400).
  ...[
    ["no ID", `${base}/contact?token=${TOKENS.contact}`],
    ["a different ID", robotUrl("contact", "43")],
    ["ID twice", `${contactUrl}&ID=42`],
    ["id in lower case", `${base}/contact?token=${TOKENS.contact}&id=42`],
    ["an extra parameter", `${contactUrl}&x=1`],
    ["an ID with a leading zero", `${base}/contact?token=${TOKENS.contact}&ID=042`],
    ["an unresolved ID template", `${base}/contact?token=${TOKENS.contact}&ID={{ID}}`],
    ["a broken escape next to the token", `${contactUrl}&x=%zz`],
  ].map(([what, url]) => ({
    name: `${what} is malformed`,
    url: url as string,
    init: robotInit(contactForm()),
    status: 400,
    error: "bad_request",
  })),
  // Body shape (400).
  ...(
    [
      ["an empty body", ""],
      ["a JSON body", JSON.stringify({ document_id: ["crm", "CCrmDocumentContact", "CONTACT_42"] })],
      ["a broken percent escape", `${contactForm()}&auth%5Bx%5D=%E0%A4%A`],
      ["a pair without =", `${contactForm()}&document_id`],
      ["document_id[0] other than crm", contactForm(set("document_id[0]", "disk"))],
      ["a deal document", contactForm(set("document_id[1]", "CCrmDocumentDeal"))],
      ["a DEAL_ id", contactForm(set("document_id[2]", "DEAL_42"))],
      ["CONTACT_ without an id", contactForm(set("document_id[2]", "CONTACT_"))],
      ["CONTACT_0", contactForm(set("document_id[2]", "CONTACT_0"))],
      ["CONTACT_042", contactForm(set("document_id[2]", "CONTACT_042"))],
      ["CONTACT_-42", contactForm(set("document_id[2]", "CONTACT_-42"))],
      ["CONTACT_42 with a trailing space", contactForm(set("document_id[2]", "CONTACT_42 "))],
      ["contact in lower case", contactForm(set("document_id[2]", "contact_42"))],
      ["an id of 19 digits", contactForm(set("document_id[2]", `CONTACT_${"9".repeat(19)}`))],
      ["a dynamic document on the contact receiver", alertForm(undefined, "42")],
      ["document_id[2] twice (same value)", contactForm(add("document_id[2]", "CONTACT_42"))],
      ["auth[member_id] twice", contactForm(add("auth[member_id]", MEMBER_ID))],
      ["auth[domain] twice (second differs)", contactForm(add("auth[domain]", "evil.example"))],
      ["document_id[] without an index", contactForm(add("document_id[]", "x"))],
      ["document_id[3]", contactForm(add("document_id[3]", "x"))],
      ["document_id[0][x]", contactForm(add("document_id[0][x]", "crm"))],
      ["document_id as a scalar", contactForm(add("document_id", "crm"))],
      ["auth as a scalar", contactForm(add("auth", "x"))],
      ["an event field", contactForm(add("event", "ONCRMCONTACTUPDATE"))],
      ["an auth member with upper case", contactForm(add("auth[Domain]", PORTAL_HOST))],
      ["no auth[domain]", contactForm(drop("auth[domain]"))],
      ["no auth[member_id]", contactForm(drop("auth[member_id]"))],
      ["no document_id[1]", contactForm(drop("document_id[1]"))],
      [
        "too many fields",
        contactForm((f) => [
          ...f,
          ...Array.from({ length: 8 }, (_, i): [string, string] => [`auth[x${i}]`, "1"]),
        ]),
      ],
    ] as Array<[string, string]>
  ).map(([what, body]) => ({
    name: `${what} is malformed`,
    url: contactUrl,
    init: robotInit(body),
    status: 400,
    error: "bad_request",
  })),
  {
    name: "a body that is not UTF-8 is malformed",
    url: contactUrl,
    init: {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new Uint8Array([...Buffer.from(`${contactForm()}&auth%5Bx%5D=`), 0xff, 0xfe]),
    },
    status: 400,
    error: "bad_request",
  },
  {
    name: "a body with a raw invalid UTF-8 escape is malformed",
    url: contactUrl,
    init: robotInit(`${contactForm()}&auth%5Bx%5D=%FF`),
    status: 400,
    error: "bad_request",
  },
  // Portal identity (403).
  ...(
    [
      ["another portal's domain", contactForm(set("auth[domain]", "other.bitrix24.test"))],
      ["the domain with a port", contactForm(set("auth[domain]", `${PORTAL_HOST}:443`))],
      ["another member id", contactForm(set("auth[member_id]", "0".repeat(32)))],
      ["a prefix of the member id", contactForm(set("auth[member_id]", MEMBER_ID.slice(0, -1)))],
      ["an empty member id", contactForm(set("auth[member_id]", ""))],
    ] as Array<[string, string]>
  ).map(([what, body]) => ({
    name: `${what} is forbidden`,
    url: contactUrl,
    init: robotInit(body),
    status: 403,
    error: "forbidden",
  })),
  // Alert receiver.
  {
    name: "an alert of another smart process is malformed",
    url: robotUrl("alert", "5"),
    init: robotInit(alertForm(undefined, "5", ALERT_ENTITY_TYPE_ID + 1)),
    status: 400,
    error: "bad_request",
  },
  {
    name: "an alert with a Contact document is malformed",
    url: robotUrl("alert", "42"),
    init: robotInit(contactForm()),
    status: 400,
    error: "bad_request",
  },
  {
    name: "an alert whose document type is Dynamic in other case is malformed",
    url: robotUrl("alert", "5"),
    init: robotInit(alertForm(set("document_id[1]", "bitrix\\crm\\integration\\bizproc\\document\\dynamic"))),
    status: 400,
    error: "bad_request",
  },
  {
    name: "an alert whose ID is the entity type is malformed",
    url: robotUrl("alert", String(ALERT_ENTITY_TYPE_ID)),
    init: robotInit(alertForm()),
    status: 400,
    error: "bad_request",
  },
  // Not configured (503): never accept without a token.
  {
    name: "no receiver configuration answers 503",
    url: contactUrl,
    init: robotInit(contactForm()),
    status: 503,
    error: "receiver_not_configured",
    config: null,
  },
  {
    name: "a receiver without a current token answers 503 even with the previous one",
    url: robotUrl("contact", "42", TOKENS.contactPrevious),
    init: robotInit(contactForm()),
    status: 503,
    error: "receiver_not_configured",
    config: {
      ...receiverConfigFor(),
      tokens: { contact: { previous: TOKENS.contactPrevious }, alert: { current: TOKENS.alert } },
    },
  },
  {
    name: "no portal member id configured answers 503",
    url: contactUrl,
    init: robotInit(contactForm()),
    status: 503,
    error: "receiver_not_configured",
    config: { ...receiverConfigFor(), memberId: undefined },
  },
];

for (const c of cases) {
  test.serial(c.name, async (t) => {
    const config = c.config === undefined ? receiverConfigFor() : c.config;
    const app = makeApp(db.pool, captured.log, config);
    const res = await app.request(c.url, c.init);
    t.is(res.status, c.status);
    const text = await res.text();
    if (c.init.method !== "HEAD") t.deepEqual(JSON.parse(text), { error: c.error });
    t.is(res.headers.get("location"), null);
    if (c.status === 405) t.is(res.headers.get("allow"), "POST");
    t.is(await inboxCount(db.pool), 0, "a refused request writes no inbox row");
  });
}

test.serial("the alert receiver answers 503 while alerts.entity_type_id is unset", async (t) => {
  await setAlertEntityType(db.pool, null);
  try {
    const app = makeApp(db.pool, captured.log);
    const res = await app.request(robotUrl("alert", "5"), robotInit(alertForm()));
    t.is(res.status, 503);
    t.deepEqual(await res.json(), { error: "receiver_not_configured" });
    t.is(await inboxCount(db.pool), 0);
  } finally {
    await setAlertEntityType(db.pool, ALERT_ENTITY_TYPE_ID);
  }
});

test.serial("a trailing slash or another path is not found, never redirected", async (t) => {
  const app = makeApp(db.pool, captured.log);
  for (const url of [
    `${base}/contact/?token=${TOKENS.contact}&ID=42`,
    `${base}/Contact?token=${TOKENS.contact}&ID=42`,
    `${base}/contact/x?token=${TOKENS.contact}&ID=42`,
    `${base}?token=${TOKENS.contact}&ID=42`,
  ]) {
    const res = await app.request(url, robotInit(contactForm()));
    t.is(res.status, 404, url.replace(TOKENS.contact, "<token>"));
    t.is(res.headers.get("location"), null);
    t.deepEqual(await res.json(), { error: "not_found" });
  }
  t.is(await inboxCount(db.pool), 0);
});

test.serial("refusals log a reason code and never a value from the request", async (t) => {
  const logs = captured.text();
  t.true(logs.includes('"reason":"token_invalid"'));
  t.true(logs.includes('"route":"/bitrix/sync/webhook/contact"'));
  for (const secret of [
    TOKENS.contact,
    TOKENS.contactPrevious,
    TOKENS.alert,
    MEMBER_ID,
    PORTAL_HOST,
    "ONCRMCONTACTUPDATE",
    "CONTACT_42",
    "token=",
  ]) {
    t.false(logs.includes(secret), `logs must not contain ${secret.slice(0, 8)}...`);
  }
});

test.serial("refusal warnings are sampled per reason; the metric still counts every request", async (t) => {
  const sampledLog = captureLogger();
  const app = createApp({
    pool: db.pool,
    log: sampledLog.log,
    receiver: receiverConfigFor(),
    receiverLogSampling: { perWindow: 5, windowMs: 300 },
  });
  const count = async () => {
    const text = await registry.getSingleMetricAsString("bitrix_sync_webhook_rejected_total");
    const m = /receiver="contact",reason="token_invalid"\} (\d+)/.exec(text);
    return Number(m?.[1] ?? 0);
  };
  const before = await count();
  for (let i = 0; i < 40; i++) {
    const res = await app.request(
      robotUrl("contact", "42", "wrong-token"),
      robotInit(encodeForm(robotFields("contact", "42"))),
    );
    t.is(res.status, 403);
  }
  t.is((await count()) - before, 40, "every refusal is counted");
  const lines = () =>
    sampledLog
      .text()
      .split("\n")
      .filter((l) => l.includes('"reason":"token_invalid"'));
  t.is(lines().filter((l) => l.includes('"event":"receiver.rejected"')).length, 5, "five lines, not forty");
  await new Promise((r) => setTimeout(r, 500));
  const summary = lines().filter((l) => l.includes('"event":"receiver.rejected.suppressed"'));
  t.is(summary.length, 1);
  t.regex(summary[0] ?? "", /"suppressed":35/);
});
