// The exact robot request of §10.1 is accepted: one webhook_inbox row with the receiver, entity
// type and ID, and the peer address; a 200 with a tiny JSON body. Token rotation overlap included.
import test from "ava";
import pg from "pg";
import { InboxWriter } from "../../../src/inbound/inbox.js";
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
import { forceActiveSettingValue } from "../../helpers/settings.js";
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

interface InboxRow {
  receiver: string;
  entity_type_id: number;
  entity_id: string;
  status: string;
  source_ip: string | null;
  event_type: string;
  event_id: string | null;
}

async function lastRow(): Promise<InboxRow | undefined> {
  const { rows } = await db.pool.query<InboxRow>(
    `select receiver, entity_type_id, entity_id, status, host(source_ip) as source_ip, event_type, event_id
       from bitrix_sync.webhook_inbox order by id desc limit 1`,
  );
  return rows[0];
}

/** The body of §10.1 byte for byte as the robot sends it (PHP http_build_query: brackets escaped). */
const EXACT_CONTACT_BODY =
  "document_id%5B0%5D=crm&document_id%5B1%5D=CCrmDocumentContact&document_id%5B2%5D=CONTACT_777" +
  `&auth%5Bdomain%5D=${PORTAL_HOST}` +
  `&auth%5Bclient_endpoint%5D=https%3A%2F%2F${PORTAL_HOST}%2Frest%2F` +
  "&auth%5Bserver_endpoint%5D=https%3A%2F%2Foauth.bitrix24.tech%2Frest%2F" +
  `&auth%5Bmember_id%5D=${MEMBER_ID}`;

test.serial("the exact robot body of §10.1 is recorded and answered 200", async (t) => {
  const app = makeApp(db.pool, captured.log);
  const before = await inboxCount(db.pool);
  const res = await app.request(robotUrl("contact", "777"), robotInit(EXACT_CONTACT_BODY));
  t.is(res.status, 200);
  t.deepEqual(await res.json(), { status: "accepted" });
  t.is(res.headers.get("cache-control"), "no-store");
  t.is(await inboxCount(db.pool), before + 1);
  t.like(await lastRow(), {
    receiver: "contact",
    entity_type_id: 3,
    entity_id: "777",
    status: "received",
    event_type: "robot",
    event_id: null,
  });
});

test.serial("brackets may also arrive unescaped, in any field order, with charset=utf-8", async (t) => {
  const app = makeApp(db.pool, captured.log);
  const fields = robotFields("contact", "778").reverse();
  const body = fields.map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join("&");
  const res = await app.request(
    robotUrl("contact", "778"),
    robotInit(body, "Application/X-WWW-Form-URLEncoded; charset=UTF-8"),
  );
  t.is(res.status, 200);
  t.like(await lastRow(), { receiver: "contact", entity_id: "778" });
});

test.serial("client_endpoint and server_endpoint are optional and never used", async (t) => {
  const app = makeApp(db.pool, captured.log);
  const fields = robotFields("contact", "779")
    .filter(([k]) => !k.includes("endpoint"))
    .concat([["auth[client_endpoint]", "https://attacker.example/rest/"]]);
  const res = await app.request(robotUrl("contact", "779"), robotInit(encodeForm(fields)));
  t.is(res.status, 200);
  t.like(await lastRow(), { entity_id: "779" });
});

test.serial("the portal domain is compared without regard to case", async (t) => {
  const app = makeApp(db.pool, captured.log);
  const fields = robotFields("contact", "780").map(([k, v]): [string, string] => [
    k,
    k === "auth[domain]" ? v.toUpperCase() : v,
  ]);
  const res = await app.request(robotUrl("contact", "780"), robotInit(encodeForm(fields)));
  t.is(res.status, 200);
});

test.serial("the alert receiver records an item of the configured smart process", async (t) => {
  const app = makeApp(db.pool, captured.log);
  const res = await app.request(robotUrl("alert", "15"), robotInit(encodeForm(robotFields("alert", "15"))));
  t.is(res.status, 200);
  t.like(await lastRow(), { receiver: "alert", entity_type_id: ALERT_ENTITY_TYPE_ID, entity_id: "15" });
});

test.serial("the alert receiver follows a change of alerts.entity_type_id without a restart", async (t) => {
  const app = makeApp(db.pool, captured.log);
  await setAlertEntityType(db.pool, 2000);
  try {
    const before = await inboxCount(db.pool);
    const old = await app.request(robotUrl("alert", "16"), robotInit(encodeForm(robotFields("alert", "16"))));
    t.is(old.status, 400);
    t.is(await inboxCount(db.pool), before);
    const res = await app.request(
      robotUrl("alert", "16"),
      robotInit(encodeForm(robotFields("alert", "16", 2000))),
    );
    t.is(res.status, 200);
    t.like(await lastRow(), { receiver: "alert", entity_type_id: 2000, entity_id: "16" });
  } finally {
    await setAlertEntityType(db.pool, ALERT_ENTITY_TYPE_ID);
  }
});

test.serial("during a rotation overlap the previous and the current token are both accepted", async (t) => {
  const app = makeApp(db.pool, captured.log, receiverConfigFor({ previous: true }));
  for (const [receiver, token] of [
    ["contact", TOKENS.contact],
    ["contact", TOKENS.contactPrevious],
    ["alert", TOKENS.alert],
    ["alert", TOKENS.alertPrevious],
  ] as const) {
    const before = await inboxCount(db.pool);
    const res = await app.request(
      robotUrl(receiver, "901", token),
      robotInit(encodeForm(robotFields(receiver, "901"))),
    );
    t.is(
      res.status,
      200,
      `${receiver} with its ${token.includes("previous") ? "previous" : "current"} token`,
    );
    t.is(await inboxCount(db.pool), before + 1);
  }
  // The overlap does not mix receivers: the alert's previous token is no Contact token.
  const res = await app.request(
    robotUrl("contact", "902", TOKENS.alertPrevious),
    robotInit(encodeForm(robotFields("contact", "902"))),
  );
  t.is(res.status, 403);
});

test.serial("after the overlap the previous token is refused", async (t) => {
  const app = makeApp(db.pool, captured.log, receiverConfigFor({ previous: false }));
  const before = await inboxCount(db.pool);
  const res = await app.request(
    robotUrl("contact", "903", TOKENS.contactPrevious),
    robotInit(encodeForm(robotFields("contact", "903"))),
  );
  t.is(res.status, 403);
  t.deepEqual(await res.json(), { error: "forbidden" });
  t.is(await inboxCount(db.pool), before);
});

test.serial("repeated events of one Contact are each recorded (coalescing happens later)", async (t) => {
  const app = makeApp(db.pool, captured.log);
  const before = await inboxCount(db.pool);
  for (let i = 0; i < 3; i++) {
    const res = await app.request(
      robotUrl("contact", "904"),
      robotInit(encodeForm(robotFields("contact", "904"))),
    );
    t.is(res.status, 200);
  }
  t.is(await inboxCount(db.pool), before + 3);
});

test.serial("the source IP is the socket peer's; X-Forwarded-For is ignored", async (t) => {
  const app = makeApp(db.pool, captured.log);
  const init = robotInit(encodeForm(robotFields("contact", "905")));
  (init.headers as Record<string, string>)["x-forwarded-for"] = "198.51.100.7";
  (init.headers as Record<string, string>)["x-real-ip"] = "198.51.100.8";
  const bindings = { incoming: { socket: { remoteAddress: "::ffff:203.0.113.9" } } };
  const res = await app.request(robotUrl("contact", "905"), init, bindings);
  t.is(res.status, 200);
  t.like(await lastRow(), { entity_id: "905", source_ip: "203.0.113.9" });

  const v6 = await app.request(
    robotUrl("contact", "906"),
    robotInit(encodeForm(robotFields("contact", "906"))),
    { incoming: { socket: { remoteAddress: "2001:db8::1" } } },
  );
  t.is(v6.status, 200);
  t.like(await lastRow(), { entity_id: "906", source_ip: "2001:db8::1" });
});

test.serial(
  "behind a trusted proxy the source IP is its X-Real-IP; from anyone else the header is ignored",
  async (t) => {
    const app = makeApp(db.pool, captured.log, receiverConfigFor({ trustedProxies: "10.20.0.5/32" }));
    const send = (id: string, peer: string, realIp?: string) => {
      const init = robotInit(encodeForm(robotFields("contact", id)));
      if (realIp !== undefined) (init.headers as Record<string, string>)["x-real-ip"] = realIp;
      return app.request(robotUrl("contact", id), init, { incoming: { socket: { remoteAddress: peer } } });
    };
    t.is((await send("907", "::ffff:10.20.0.5", "203.0.113.44")).status, 200);
    t.like(await lastRow(), { entity_id: "907", source_ip: "203.0.113.44" });
    t.is((await send("908", "10.20.0.6", "203.0.113.44")).status, 200);
    t.like(await lastRow(), { entity_id: "908", source_ip: "10.20.0.6" });
    t.is((await send("909", "10.20.0.5", "203.0.113.44, 198.51.100.1")).status, 200);
    t.like(await lastRow(), { entity_id: "909", source_ip: "10.20.0.5" });
    t.is((await send("910", "10.20.0.5")).status, 200);
    t.like(await lastRow(), { entity_id: "910", source_ip: "10.20.0.5" });
  },
);

test.serial("an accepted request logs the route and the inbox id, never the token or body", async (t) => {
  const logs = captured.text();
  t.true(logs.includes('"event":"receiver.accepted"'));
  for (const secret of [
    TOKENS.contact,
    TOKENS.contactPrevious,
    TOKENS.alert,
    TOKENS.alertPrevious,
    MEMBER_ID,
  ]) {
    t.false(logs.includes(secret));
  }
  t.false(logs.toLowerCase().includes(PORTAL_HOST));
  t.false(logs.includes("CONTACT_"));
  t.false(logs.includes("attacker.example"));
});

test.serial(
  "requests arriving together share a write; a refused one does not affect the others",
  async (t) => {
    const app = makeApp(db.pool, captured.log);
    const before = await inboxCount(db.pool);
    const kinds = Array.from({ length: 60 }, (_, i) =>
      i % 6 === 0 ? "alert_wrong" : i % 6 === 1 ? "alert" : "contact",
    );
    const replies = await Promise.all(
      kinds.map((k, i) => {
        const id = String(5000 + i);
        if (k === "contact")
          return app.request(robotUrl("contact", id), robotInit(encodeForm(robotFields("contact", id))));
        const type = k === "alert" ? ALERT_ENTITY_TYPE_ID : ALERT_ENTITY_TYPE_ID + 7;
        return app.request(robotUrl("alert", id), robotInit(encodeForm(robotFields("alert", id, type))));
      }),
    );
    t.deepEqual(
      replies.map((r) => r.status),
      kinds.map((k) => (k === "alert_wrong" ? 400 : 200)),
    );
    t.is(await inboxCount(db.pool), before + kinds.filter((k) => k !== "alert_wrong").length);
    const { rows } = await db.pool.query<{ n: number }>(
      "select count(*)::int as n from bitrix_sync.webhook_inbox where entity_type_id = $1",
      [ALERT_ENTITY_TYPE_ID + 7],
    );
    t.is(rows[0]?.n, 0);
  },
);

test.serial(
  "a broken alert setting refuses the alert requests only; Contact requests written with them are recorded",
  async (t) => {
    // A version activated before the int4 bound: 3e9 cannot be an entityTypeId.
    const restore = await forceActiveSettingValue(db.pool, "alerts.entity_type_id", "3000000000");
    try {
      const app = makeApp(db.pool, captured.log);
      const before = await inboxCount(db.pool);
      const kinds = ["contact", "alert", "contact", "alert", "contact"];
      const replies = await Promise.all(
        kinds.map((k, i) => {
          const id = String(9100 + i);
          return k === "contact"
            ? app.request(robotUrl("contact", id), robotInit(encodeForm(robotFields("contact", id))))
            : app.request(robotUrl("alert", id), robotInit(encodeForm(robotFields("alert", id, 1036))));
        }),
      );
      t.deepEqual(
        replies.map((r) => r.status),
        [200, 503, 200, 503, 200],
      );
      t.is(await inboxCount(db.pool), before + 3);
    } finally {
      await restore();
    }
  },
);

test.serial(
  "an event whose values the database refuses fails alone; the others of its call are written",
  async (t) => {
    const writer = new InboxWriter(db.pool);
    const before = await inboxCount(db.pool);
    const event = (id: string, sourceIp: string | null) => ({
      receiver: "contact" as const,
      entityTypeId: 3,
      entityId: id,
      sourceIp,
    });
    // Written in one turn, so in one call: the bad address fails the call's parameters (22P02).
    const results = await Promise.allSettled([
      writer.write(event("9201", "10.0.0.1")),
      writer.write(event("9202", "not-an-address")),
      writer.write(event("9203", null)),
    ]);
    t.deepEqual(
      results.map((r) => r.status),
      ["fulfilled", "rejected", "fulfilled"],
    );
    t.is(((results[1] as PromiseRejectedResult).reason as { code?: string }).code, "22P02");
    t.is(await inboxCount(db.pool), before + 2);
  },
);

test.serial("when the database fails, every request of the group gets 503 and no row", async (t) => {
  const { log, text } = captureLogger();
  const broken = new pg.Pool({
    connectionString: db.url,
    max: 2,
    options: "-c default_transaction_read_only=on",
  });
  // A connection this pool opened as it ended is closed by the database's drop (with force) after
  // the file: its error must not crash the test process (it did once in CI), as createTestDb's pool.
  broken.on("error", () => undefined);
  broken.on("connect", (client) => client.on("error", () => undefined));
  try {
    const app = makeApp(broken, log);
    const before = await inboxCount(db.pool);
    const replies = await Promise.all(
      ["7001", "7002", "7003"].map((id) =>
        app.request(robotUrl("contact", id), robotInit(encodeForm(robotFields("contact", id)))),
      ),
    );
    for (const r of replies) {
      t.is(r.status, 503);
      t.deepEqual(await r.json(), { error: "unavailable" });
    }
    t.is(await inboxCount(db.pool), before);
    t.true(text().includes('"sqlstate":"25006"'), "the log carries the SQLSTATE only");
    t.false(text().includes("7001"));
  } finally {
    await broken.end();
  }
});
