// A flood of accepted webhooks for one Contact (issue 11: 9 000 in about 8 s) does not grow the
// database without bound: every request is accepted through the real receiver behind a real
// listener, the events are coalesced into a few CRM reads, and a retention run deletes them all in
// small batches once they are past retention.webhooks_days.
import type { AddressInfo } from "node:net";
import { type ServerType, serve } from "@hono/node-server";
import test from "ava";
import { Pool as HttpPool } from "undici";
import { createApp } from "../../src/http/app.js";
import { receiverConfig } from "../../src/inbound/config.js";
import { runRetention } from "../../src/maintenance/retention.js";
import {
  finishedWorkflow,
  type Rig,
  startRig,
  TEST_CONTACT_TOKEN,
  TEST_MEMBER_ID,
  waitFor,
} from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";
import { one } from "../helpers/sql-core.js";

const FLOOD = 9_000;
const CONNECTIONS = 32;

let rig: Rig;
let server: ServerType;
let http: HttpPool;
test.before(async () => {
  rig = await startRig();
  const app = createApp({
    pool: rig.db.pool,
    log: rig.runtime.log,
    receiver: receiverConfig(rig.runtime.config),
  });
  await new Promise<void>((resolve) => {
    server = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, () => resolve());
  });
  http = new HttpPool(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, {
    connections: CONNECTIONS,
  });
  await rig.startWorker();
});
test.after.always(async () => {
  await http?.close();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  await rig?.close();
});

test("9 000 webhooks for one Contact: all accepted, a few CRM reads, and retention deletes every row in batches", async (t) => {
  const u = await makeUser(rig.db.pool, { phone: randomPhone() });
  await finishedWorkflow(rig, u.id, 30_000);
  const { external_id: contactId } = await one<{ external_id: string }>(
    rig.db.pool,
    "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
    [u.id],
  );
  const body = new URLSearchParams([
    ["document_id[0]", "crm"],
    ["document_id[1]", "CCrmDocumentContact"],
    ["document_id[2]", `CONTACT_${contactId}`],
    ["auth[domain]", rig.emulator.host],
    ["auth[client_endpoint]", `https://${rig.emulator.host}/rest/`],
    ["auth[server_endpoint]", "https://oauth.bitrix24.tech/rest/"],
    ["auth[member_id]", TEST_MEMBER_ID],
  ]).toString();
  const path = `/bitrix/sync/webhook/contact?token=${TEST_CONTACT_TOKEN}&ID=${contactId}`;
  const readsBefore = rig.emulator.log.filter((e) => e.commands.includes("crm.contact.list")).length;

  const statuses = new Map<number, number>();
  let sent = 0;
  const started = Date.now();
  await Promise.all(
    Array.from({ length: CONNECTIONS }, async () => {
      while (sent < FLOOD) {
        sent++;
        const res = await http.request({
          method: "POST",
          path,
          headers: { "content-type": "application/x-www-form-urlencoded" },
          body,
        });
        await res.body.dump();
        statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
      }
    }),
  );
  const floodMs = Date.now() - started;
  t.deepEqual(Object.fromEntries(statuses), { 200: FLOOD }, "every request accepted");
  t.log(`${FLOOD} requests in ${floodMs} ms (${Math.round((FLOOD * 1000) / floodMs)}/s)`);

  const rows = await waitFor(
    async () => {
      const r = await one<{ total: number; unfinished: number }>(
        rig.db.pool,
        `select count(*)::int as total, count(*) filter (where status <> 'processed')::int as unfinished
           from bitrix_sync.webhook_inbox where entity_id = $1`,
        [contactId],
      );
      return r.unfinished === 0 ? r : null;
    },
    90_000,
    "the flood processed",
  );
  t.is(rows.total, FLOOD, "one durable row per accepted request");
  const reads = rig.emulator.log.filter((e) => e.commands.includes("crm.contact.list")).length - readsBefore;
  const outcomes = await rig.db.pool.query<{ outcome: string; n: number }>(
    "select outcome, count(*)::int as n from bitrix_sync.webhook_inbox where entity_id = $1 group by outcome order by 2 desc",
    [contactId],
  );
  t.log(`CRM reads: ${reads}; outcomes: ${JSON.stringify(outcomes.rows)}`);
  t.true(reads < FLOOD / 20, `coalesced into few reads (${reads})`);
  const size = await one<{ bytes: string }>(
    rig.db.pool,
    "select pg_total_relation_size('bitrix_sync.webhook_inbox') as bytes",
  );
  t.log(`webhook_inbox with the flood: ${Math.round(Number(size.bytes) / 1024)} kB`);

  // Past retention.webhooks_days (7 by default): a retention run removes every row of the flood.
  await rig.db.pool.query(
    "update bitrix_sync.webhook_inbox set processed_at = now() - interval '8 days' where entity_id = $1",
    [contactId],
  );
  const s = rig.runtime.settings.get().retention;
  const retentionStarted = Date.now();
  const report = await runRetention(rig.db.pool, s, rig.runtime.log);
  t.is(report.deleted.webhooks, FLOOD);
  t.true(report.batches >= FLOOD / s.batchSize, `batches of at most ${s.batchSize} rows (${report.batches})`);
  t.is(
    (
      await one<{ n: number }>(
        rig.db.pool,
        "select count(*)::int as n from bitrix_sync.webhook_inbox where entity_id = $1",
        [contactId],
      )
    ).n,
    0,
  );
  t.log(`retention: ${report.batches} batches in ${Date.now() - retentionStarted} ms`);
});
