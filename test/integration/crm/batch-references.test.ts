// App values the portal would reinterpret inside a batch (reference §3) never travel in one:
// executeBatch against the emulator over loopback HTTP, whose batch resolves $result[...] and its
// siblings exactly as the portal's core does. A hostile value goes as a call of its own and lands
// verbatim; the rest still goes as one batch; the direct call is judged, limited, observed and
// counted like a sub-command. Serial: the metric counts are read as deltas.
import { Writable } from "node:stream";
import test from "ava";
import { SANDBOX_FIELDS } from "../../../src/config/env.js";
import { type CommandObservation, type CrmDeps, executeBatch } from "../../../src/crm/batch.js";
import type { CrmCommand } from "../../../src/crm/catalogue.js";
import { createCrmClient } from "../../../src/crm/client.js";
import type { CrmLimiter } from "../../../src/crm/limiter.js";
import { toPhpQuery } from "../../../src/crm/php-query.js";
import { createLogger } from "../../../src/observability/logger.js";
import { directCommands } from "../../../src/observability/metrics.js";
import { startEmulator } from "../../../tools/emulator/server.js";
import { createMemoryLimiter } from "../../helpers/memory-limiter.js";

const F = SANDBOX_FIELDS;
const UIDS = [
  "0b7e7dbd-4fcb-4b38-8d56-1f7c0d1f6b0e",
  "5f0c3a49-2a64-4f1f-9d3c-7f6a3f0e9b11",
  "8a1d2c3b-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
  "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f",
];
const open: Array<{ close(): Promise<void> }> = [];
test.after.always(async () => {
  await Promise.all(open.map((o) => o.close()));
});

/** A limiter that counts the permits it grants and how many are out at once. */
function counting(inner: CrmLimiter) {
  const stats = { acquired: 0, released: 0, out: 0, maxOut: 0 };
  const limiter: CrmLimiter = {
    ...inner,
    async acquire(a) {
      const p = await inner.acquire(a);
      stats.acquired++;
      stats.out++;
      stats.maxOut = Math.max(stats.maxOut, stats.out);
      let done = false;
      return {
        grantedAt: p.grantedAt,
        ...(p.reduced !== undefined ? { reduced: p.reduced } : {}),
        async release() {
          if (done) return;
          done = true;
          stats.released++;
          stats.out--;
          await p.release();
        },
      };
    },
  };
  return { limiter, stats };
}

async function setup(opts: { timeoutMs?: number; maxInFlight?: number } = {}) {
  const emu = await startEmulator({ fields: F });
  const client = createCrmClient({
    webhookUrl: emu.url,
    portalHost: emu.host,
    timeoutMs: opts.timeoutMs ?? 2000,
  });
  const inner = createMemoryLimiter({
    settings: { refillPerSec: 100, burst: 100, maxInFlight: opts.maxInFlight ?? 4 },
  });
  const { limiter, stats } = counting(inner);
  const lines: string[] = [];
  const log = createLogger({
    level: "trace",
    destination: new Writable({
      write(chunk, _enc, cb) {
        lines.push(String(chunk));
        cb();
      },
    }),
  });
  const observed: CommandObservation[][] = [];
  const deps: CrmDeps = {
    client,
    limiter,
    catalogue: { fields: F },
    log,
    observeCommands: (r) => observed.push([...r]),
  };
  open.push(emu, client);
  return { emu, client, deps, stats, observed, lines, inner };
}

function add(userId: string, phone: string, name: string | null, email: string | null = null): CrmCommand {
  return { type: "contact.add", params: { phone, userId, registered: true, name, email } };
}

async function directCount(type: string): Promise<number> {
  const m = await directCommands.get();
  return m.values.find((v) => v.labels.command_type === type)?.value ?? 0;
}

test.serial("the emulator's batch rewrites a hostile name: what the routing exists to prevent", async (t) => {
  // The control: the same sub-requests sent as one batch without the routing.
  const { emu, client } = await setup();
  const other = emu.store.createContact({
    name: "Other Person",
    phones: [{ value: "+79990000001", valueType: "MOBILE" }],
  });
  const line = (fields: Record<string, string>) => `crm.contact.add?${toPhpQuery({ fields })}`;
  const r = await client.call("batch", {
    halt: 0,
    cmd: {
      c0: `crm.contact.list?${toPhpQuery({ filter: { "@ID": [other.id] }, select: ["ID", "NAME", "PHONE"] })}`,
      c1: line({ NAME: "Ivan $result[c0][0][PHONE][0][VALUE]" }),
      c2: line({ NAME: "$result[c0][0][NAME]" }),
      c3: line({ NAME: "$RESULT[c0]" }),
    },
  });
  t.is(r.type, "reply");
  const names = [...emu.store.contacts.values()].filter((c) => c.id !== other.id).map((c) => c.name);
  t.deepEqual(names, ["Ivan +79990000001", "Other Person", ""], "another person's data, and a lost name");
});

test.serial(
  "a hostile value goes as a call of its own and lands verbatim; the rest is still one batch",
  async (t) => {
    const { emu, deps, stats, observed, lines } = await setup();
    const other = emu.store.createContact({
      name: "Other Person",
      phones: [{ value: "+79990000001", valueType: "MOBILE" }],
      emails: [{ value: "other@example.org", valueType: "WORK" }],
    });
    const before = await directCount("contact.add");
    const hostileName = "Ivan $result[c0][0][PHONE][0][VALUE]";
    const hostileEmail = "$RESULT[c0]@example.org";
    const out = await executeBatch(deps, [
      { type: "contact.read", params: { ids: [other.id] } },
      { type: "contact.find_by_phone", params: { phones: ["+79990000001"] } },
      add(UIDS[0] as string, "+79991110001", hostileName, hostileEmail),
      add(UIDS[1] as string, "+79991110002", "Plain Name"),
      add(UIDS[2] as string, "+79991110003", "$result[c1]"),
    ]);
    t.true(out.every((o) => o.ok));
    // One batch with the three commands that carry nothing hostile, and two direct calls.
    const batches = emu.log.filter((e) => e.method === "batch");
    t.is(batches.length, 1);
    t.deepEqual(batches[0]?.commands, ["crm.contact.list", "crm.duplicate.findbycomm", "crm.contact.add"]);
    t.deepEqual(
      emu.log.filter((e) => e.method !== "batch").map((e) => [e.method, e.batchSize]),
      [
        ["crm.contact.add", null],
        ["crm.contact.add", null],
      ],
    );
    const byUser = (u: string) => [...emu.store.contacts.values()].find((c) => c.uf[F.userId] === u);
    t.is(byUser(UIDS[0] as string)?.name, hostileName);
    t.deepEqual(
      byUser(UIDS[0] as string)?.emails.map((e) => e.value),
      [hostileEmail],
    );
    t.deepEqual(
      byUser(UIDS[0] as string)?.phones.map((p) => p.value),
      ["+79991110001"],
    );
    t.is(byUser(UIDS[1] as string)?.name, "Plain Name");
    t.is(byUser(UIDS[2] as string)?.name, "$result[c1]");
    // The outcomes are the sub-results a batch would have given, in input order.
    const ids = out.map((o) =>
      o.ok && o.type === "contact.add" ? (o.result as { contactId: number }).contactId : 0,
    );
    t.is(ids[2], byUser(UIDS[0] as string)?.id);
    t.is(ids[4], byUser(UIDS[2] as string)?.id);
    // One permit for the batch and one per direct call; all released.
    t.is(stats.acquired, 3);
    t.is(stats.released, 3);
    t.is((await directCount("contact.add")) - before, 2);
    // Readiness hears of all five commands.
    t.deepEqual(
      observed
        .flat()
        .map((o) => [o.method, o.ok])
        .sort(),
      [
        ["crm.contact.add", true],
        ["crm.contact.add", true],
        ["crm.contact.add", true],
        ["crm.contact.list", true],
        ["crm.duplicate.findbycomm", true],
      ],
    );
    // Logged by type and outcome, never by value.
    const text = lines.join("");
    t.regex(text, /"event":"crm\.direct"/);
    t.false(text.includes("Ivan"));
    t.false(text.includes("result[c0]"));
  },
);

test.serial(
  "every command direct: no batch is sent, and a permit the caller holds serves the first call",
  async (t) => {
    const { emu, deps, stats, inner } = await setup();
    const held = await inner.acquire();
    let heldReleased = false;
    const out = await executeBatch(
      deps,
      [
        add(UIDS[0] as string, "+79991110011", "$next[c0]"),
        add(UIDS[1] as string, "+79991110012", "$error[c0]"),
      ],
      {
        permit: {
          grantedAt: held.grantedAt,
          async release() {
            heldReleased = true;
            await held.release();
          },
        },
      },
    );
    t.true(out.every((o) => o.ok));
    t.deepEqual(
      emu.log.map((e) => e.method),
      ["crm.contact.add", "crm.contact.add"],
    );
    t.true(heldReleased, "the held permit was used and released");
    t.is(stats.acquired, 1, "one more permit for the second call");
    t.deepEqual([...emu.store.contacts.values()].map((c) => c.name).sort(), ["$error[c0]", "$next[c0]"]);
  },
);

test.serial(
  "one in-flight slot, held by the caller: the batch goes first, the direct call after it (no deadlock)",
  async (t) => {
    const { emu, deps, inner } = await setup({ maxInFlight: 1 });
    const permit = await inner.acquire();
    const out = await executeBatch(
      deps,
      [
        { type: "contact.find_by_phone", params: { phones: ["+79990000009"] } },
        add(UIDS[0] as string, "+79991110021", "$total[c0]"),
      ],
      { permit },
    );
    t.true(out.every((o) => o.ok));
    const [batch, direct] = emu.log;
    t.is(batch?.method, "batch");
    t.is(direct?.method, "crm.contact.add");
    t.true((direct?.at ?? 0) >= (batch?.finishedAt ?? Number.POSITIVE_INFINITY));
  },
);

test.serial(
  "a direct write with no reply is uncertain and marked sent; the batch beside it is unaffected",
  async (t) => {
    const { emu, deps } = await setup({ timeoutMs: 800 });
    emu.failNext({ kind: "timeout_after_commit", holdMs: 5_000 }, { method: "crm.contact.add" });
    const out = await executeBatch(deps, [
      { type: "contact.find_by_phone", params: { phones: ["+79990000009"] } },
      add(UIDS[0] as string, "+79991110031", "$time[c0][start]"),
    ]);
    t.like(out[0], { ok: true });
    t.like(out[1], { ok: false, sent: true, failure: { kind: "uncertain", code: "timeout_no_reply" } });
    // The write was committed, verbatim.
    t.is([...emu.store.contacts.values()][0]?.name, "$time[c0][start]");
  },
);

test.serial("a direct write whose connection breaks after sending is uncertain, as in a batch", async (t) => {
  const { emu, deps } = await setup();
  emu.failNext("reset_before_execute", { method: "crm.contact.add" });
  const [o] = await executeBatch(deps, [add(UIDS[0] as string, "+79991110041", "$result[c0]")]);
  t.like(o, { ok: false, sent: true, failure: { kind: "uncertain", code: "connection_lost" } });
  t.is(emu.store.contacts.size, 0);
});

test.serial(
  "a direct call's error reply is classified as its sub-result would be, and readiness hears it",
  async (t) => {
    const { emu, deps, observed } = await setup();
    emu.failNext(
      { kind: "command_error", error: "", description: "Access denied." },
      { method: "crm.contact.add" },
    );
    const [o] = await executeBatch(deps, [add(UIDS[0] as string, "+79991110051", "$result[c0]")]);
    t.like(o, {
      ok: false,
      sent: true,
      failure: { kind: "permanent", code: "permission_denied", httpStatus: 400 },
    });
    t.deepEqual(observed.flat(), [{ method: "crm.contact.add", ok: false, code: "permission_denied" }]);
  },
);

test.serial(
  "limits on a direct call reach the limiter: OPERATION_TIME_LIMIT blocks the method, a 503 cuts the rate",
  async (t) => {
    const { emu, deps, inner } = await setup();
    emu.operating.charge("crm.contact.add", 10_000);
    const [blocked] = await executeBatch(deps, [add(UIDS[0] as string, "+79991110061", "$result[c0]")]);
    t.like(blocked, {
      ok: false,
      failure: { kind: "transient", code: "operation_time_limit", spendsAttempt: false },
    });
    t.true((await inner.blockedMethods()).has("crm.contact.add"));

    const second = await setup();
    second.emu.failNext("QUERY_LIMIT_EXCEEDED", { method: "crm.contact.add" });
    const [refused] = await executeBatch(second.deps, [
      add(UIDS[1] as string, "+79991110062", "$result[c0]"),
    ]);
    t.like(refused, { ok: false, failure: { kind: "transient", code: "query_limit_exceeded" } });
    t.true((await second.inner.state()).rateFactor < 1);
  },
);

test.serial("a direct success reports its operating time like a sub-result", async (t) => {
  const { deps, inner } = await setup();
  const noted: string[] = [];
  const deps2: CrmDeps = {
    ...deps,
    limiter: {
      ...deps.limiter,
      async noteOperating(samples) {
        for (const s of samples) noted.push(s.method);
        await inner.noteOperating(samples);
      },
    },
  };
  await executeBatch(deps2, [add(UIDS[0] as string, "+79991110071", "$result[c0]")]);
  t.deepEqual(noted, ["crm.contact.add"]);
});
