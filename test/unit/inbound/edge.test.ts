// The proxy's refusal route (src/inbound/edge.ts) through app.request(), no database: who may call
// it (the trusted proxy and loopback; anyone else finds nothing), what it counts, what it answers,
// and what it notes in the journal of refused sources. nginx in front of it:
// test/integration/inbound/nginx.test.ts.
import test from "ava";
import type pg from "pg";
import { parseCidrList } from "../../../src/config/cidr.js";
import { EDGE_REFUSAL_PATH, EDGE_REFUSALS } from "../../../src/config/edge-contract.js";
import { edgeRoutes, RefusedSourceJournal } from "../../../src/inbound/edge.js";
import { webhookRejected } from "../../../src/observability/metrics.js";
import { captureLogger } from "../../helpers/receiver.js";

const proxies = parseCidrList("10.0.0.10/32");
if (!proxies.ok) throw new Error("test CIDR");

/** A journal whose database call is recorded, not made. */
function recordingJournal() {
  const calls: unknown[][] = [];
  const pool = { query: async (_sql: string, params: unknown[]) => calls.push(params) } as unknown as pg.Pool;
  return { journal: new RefusedSourceJournal(pool, captureLogger().log, { flushMs: 60_000 }), calls };
}

function call(app: ReturnType<typeof edgeRoutes>, peer: string, headers: Record<string, string>) {
  return app.request(EDGE_REFUSAL_PATH, { method: "POST", headers }, {
    incoming: { socket: { remoteAddress: peer } },
  } as never);
}

async function count(receiver: string, reason: string): Promise<number> {
  return (
    (await webhookRejected.get()).values.find(
      (v) => v.labels.receiver === receiver && v.labels.reason === reason,
    )?.value ?? 0
  );
}

test.serial(
  "a peer that is neither the trusted proxy nor loopback finds nothing, and nothing is counted",
  async (t) => {
    const { journal, calls } = recordingJournal();
    const app = edgeRoutes({ trustedProxies: proxies.cidrs, journal });
    const before = await count("contact", "source_ip");
    const headers = {
      "x-bitrix-sync-refusal": "source_ip",
      "x-bitrix-sync-receiver": "contact",
      "x-real-ip": "198.51.100.7",
    };
    for (const peer of ["198.51.100.7", "10.0.0.11", "::ffff:10.0.0.11"]) {
      const res = await call(app, peer, headers);
      t.is(res.status, 404, peer);
      t.deepEqual(await res.json(), { error: "not_found" });
    }
    t.is(await count("contact", "source_ip"), before);
    await journal.flush();
    t.deepEqual(calls, []);
  },
);

test.serial(
  "from the proxy each reason is counted and answered with the status and page the client got",
  async (t) => {
    const app = edgeRoutes({ trustedProxies: proxies.cidrs });
    for (const [reason, r] of Object.entries(EDGE_REFUSALS)) {
      for (const [peer, receiver] of [
        ["10.0.0.10", "alert"],
        ["::ffff:10.0.0.10", "none"],
        ["127.0.0.1", "contact"],
        ["::1", "contact"],
      ] as const) {
        const before = await count(receiver, reason);
        const res = await call(app, peer, {
          "x-bitrix-sync-refusal": reason,
          "x-bitrix-sync-receiver": receiver,
        });
        t.is(res.status, r.status, `${reason} from ${peer}`);
        t.deepEqual(await res.json(), { error: r.error });
        t.is(res.headers.get("cache-control"), null);
        t.is(await count(receiver, reason), before + 1, `${reason} ${receiver}`);
      }
    }
  },
);

test.serial(
  "only source_ip refusals with one valid address are journaled, gathered per address and route",
  async (t) => {
    const { journal, calls } = recordingJournal();
    const app = edgeRoutes({ trustedProxies: proxies.cidrs, journal });
    const send = (reason: string, receiver: string, ip?: string) =>
      call(app, "10.0.0.10", {
        "x-bitrix-sync-refusal": reason,
        "x-bitrix-sync-receiver": receiver,
        ...(ip !== undefined ? { "x-real-ip": ip } : {}),
      });
    await send("source_ip", "contact", "198.51.100.7");
    await send("source_ip", "contact", "198.51.100.7");
    await send("source_ip", "none", "::ffff:198.51.100.7");
    await send("source_ip", "contact", "198.51.100.8, 198.51.100.9");
    await send("source_ip", "contact");
    await send("rate_limited", "contact", "198.51.100.10");
    await journal.flush();
    t.is(calls.length, 1);
    const [ips, receivers, counts, first, last] = calls[0] as [string[], string[], number[], Date[], Date[]];
    t.deepEqual(ips, ["198.51.100.7", "198.51.100.7"]);
    t.deepEqual(receivers, ["contact", "none"]);
    t.deepEqual(counts, [2, 1]);
    t.true((first[0] as Date) <= (last[0] as Date));
    await journal.flush();
    t.is(calls.length, 1, "nothing gathered, no call");
  },
);

test.serial(
  "the journal holds a bounded number of addresses between two writes; the rest are dropped and said so",
  async (t) => {
    const calls: unknown[][] = [];
    const pool = { query: async (_s: string, p: unknown[]) => calls.push(p) } as unknown as pg.Pool;
    const captured = captureLogger();
    const journal = new RefusedSourceJournal(pool, captured.log, { flushMs: 60_000, maxEntries: 3 });
    for (let i = 1; i <= 5; i++) journal.note(`192.0.2.${i}`, "contact");
    journal.note("192.0.2.1", "contact");
    await journal.close();
    t.deepEqual((calls[0] as string[][])[0], ["192.0.2.1", "192.0.2.2", "192.0.2.3"]);
    t.deepEqual((calls[0] as number[][])[2], [2, 1, 1]);
    t.regex(captured.text(), /"event":"edge.refused_sources_dropped","dropped":2/);
  },
);

test.serial(
  "a journal write that fails is logged with its SQLSTATE only; the refusals stay counted",
  async (t) => {
    const pool = {
      query: async () => {
        throw Object.assign(new Error("relation ... 198.51.100.7"), { code: "42501" });
      },
    } as unknown as pg.Pool;
    const captured = captureLogger();
    const journal = new RefusedSourceJournal(pool, captured.log, { flushMs: 60_000 });
    journal.note("198.51.100.7", "contact");
    await journal.flush();
    t.regex(captured.text(), /"event":"edge.refused_sources_failed","sqlstate":"42501","addresses":1/);
    t.false(captured.text().includes("198.51.100.7"));
  },
);
