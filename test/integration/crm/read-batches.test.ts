// Reads that must not lose their other results to one failed sub-request (src/crm/read-batches.ts),
// against the emulator over loopback HTTP with injected faults: a sub-request that fails is sent
// again alone after the backoff, one that keeps failing comes back as its failure while every other
// result is kept, a permanent refusal is not sent again, and writes are refused outright.
import test from "ava";
import { SANDBOX_FIELDS } from "../../../src/config/env.js";
import type { CrmDeps } from "../../../src/crm/batch.js";
import type { CrmCommand } from "../../../src/crm/catalogue.js";
import { createCrmClient } from "../../../src/crm/client.js";
import { readBatches } from "../../../src/crm/read-batches.js";
import { type Emulator, startEmulator } from "../../../tools/emulator/server.js";
import { createMemoryLimiter } from "../../helpers/memory-limiter.js";

const F = SANDBOX_FIELDS;
let emu: Emulator;
let deps: CrmDeps;
let close: () => Promise<void>;

test.before(async () => {
  emu = await startEmulator({ fields: F });
  const client = createCrmClient({ webhookUrl: emu.url, portalHost: emu.host, timeoutMs: 2000 });
  const limiter = createMemoryLimiter({ settings: { refillPerSec: 100, burst: 100, maxInFlight: 4 } });
  deps = { client, limiter, catalogue: { fields: F } };
  close = async () => {
    await client.close();
    await emu.close();
  };
  for (let i = 0; i < 120; i++) emu.store.createContact({ name: `Reader ${i}`, uf: { [F.registered]: 1 } });
});
test.after.always(async () => {
  await close?.();
});

const page = (start: number): CrmCommand => ({
  type: "contact.list_changed",
  params: { updatedSince: "2000-01-01T00:00:00+00:00", start, opened: "Y" },
});
const PAGES = [page(0), page(50), page(100)];
const FAULT = {
  kind: "command_error",
  error: "INTERNAL_SERVER_ERROR",
  description: "boom",
  status: 500,
} as const;

function options(waits: number[]) {
  let requests = 0;
  return {
    opts: {
      attempts: 3,
      retry: { baseMs: 10, maxMs: 40 },
      maxDelayMs: 1000,
      beforeRequest: () => {
        requests++;
      },
      sleep: async (ms: number) => {
        waits.push(ms);
      },
    },
    requests: () => requests,
  };
}

const idsOf = (o: { ok: boolean; result?: unknown }) => (o.result as { ids: number[] }).ids;

test.serial("a sub-request that fails once is sent again, alone, after the backoff", async (t) => {
  emu.clearFaults();
  emu.failNext(FAULT, { method: "crm.item.list", params: { start: 50 } });
  const waits: number[] = [];
  const { opts, requests } = options(waits);
  const before = emu.log.length;
  const out = await readBatches(deps, PAGES, opts);
  t.true(
    out.every((o) => o.ok),
    JSON.stringify(out.map((o) => o.ok)),
  );
  t.deepEqual(
    out.map((o) => idsOf(o).length),
    [50, 50, 20],
  );
  t.is(requests(), 2, "one batch, then the failed page alone");
  t.is(waits.length, 1);
  t.true((waits[0] ?? -1) >= 0 && (waits[0] ?? 99) <= 10, "the first backoff is at most retry.base_ms");
  t.is(emu.log.length - before, 2);
});

test.serial("a sub-request that keeps failing comes back failed; the others' results are kept", async (t) => {
  emu.clearFaults();
  emu.failNext(FAULT, { method: "crm.item.list", params: { start: 50 }, times: 10 });
  const waits: number[] = [];
  const { opts, requests } = options(waits);
  const out = await readBatches(deps, PAGES, opts);
  t.true(out[0]?.ok);
  t.true(out[2]?.ok);
  t.false(out[1]?.ok);
  t.like(out[1], { ok: false, failure: { kind: "transient" } });
  t.deepEqual(idsOf(out[0] as { ok: boolean; result?: unknown }).length, 50);
  t.is(requests(), 3, "sent three times in all, the last two alone");
  t.is(waits.length, 2);
  emu.clearFaults();
});

test.serial("a permanent refusal and a delay past maxDelayMs are not sent again", async (t) => {
  emu.clearFaults();
  emu.failNext(
    { kind: "command_error", error: "ACCESS_DENIED", description: "no", status: 403 },
    { method: "crm.item.list", params: { start: 0 } },
  );
  const waits: number[] = [];
  const { opts, requests } = options(waits);
  const out = await readBatches(deps, PAGES, opts);
  t.false(out[0]?.ok);
  t.not((out[0] as { failure?: { kind: string } }).failure?.kind, "transient");
  t.is(requests(), 1);
  // QUERY_LIMIT_EXCEEDED asks for a wait the run is not allowed to spend.
  emu.failNext("QUERY_LIMIT_EXCEEDED", { method: "crm.item.list" });
  const again = options([]);
  const r = await readBatches(deps, [page(0)], { ...again.opts, maxDelayMs: 1 });
  t.false(r[0]?.ok);
  t.is(again.requests(), 1);
  emu.clearFaults();
});

test("writes are refused: they are never sent twice here", async (t) => {
  await t.throwsAsync(
    readBatches(
      deps,
      [{ type: "contact.update", params: { id: 1, fields: {} } } as unknown as CrmCommand],
      options([]).opts,
    ),
    { instanceOf: TypeError },
  );
});
