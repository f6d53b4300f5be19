// A burst of 500 new users (§18 Load): the rate and batch limits hold, asserted from the emulator's
// request log, and every workflow finishes.
import test from "ava";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { type Rig, startRig, waitFor } from "../helpers/e2e.js";
import { randomPhone } from "../helpers/factories.js";

let rig: Rig;
const RATE = 2;
const BURST = 5;
const BATCH = 20;
test.before(async () => {
  rig = await startRig({
    settings: {
      "limiter.refill_per_sec": RATE,
      "limiter.burst": BURST,
      "limiter.max_in_flight": 2,
      "batch.size": BATCH,
      "batch.max_wait_ms": 200,
      "lease.ttl_sec": 30,
    },
    emulator: { latencyMs: 20 },
  });
});
test.after.always(async () => {
  await rig?.close();
});

test("500 new users: ≤ batch.size commands per request, requests ≤ rate × elapsed + burst, ≤ 2 in flight, all finish", async (t) => {
  const N = 500;
  const values: string[] = [];
  const params: unknown[] = [];
  for (let i = 0; i < N; i++) {
    values.push(`(gen_random_uuid(), $${i + 1}, 'active')`);
    params.push(randomPhone());
  }
  // The App commits the burst in one transaction; the trigger records 500 intents.
  await rig.db.pool.query(
    `with u as (insert into han_app.user_identity (id, phone_number, record_status) values ${values.join(",")} returning id)
     insert into han_app.client_profile (user_id, record_status) select id, 'active' from u`,
    params,
  );
  await rig.startWorker();
  const started = Date.now();
  await waitFor(
    async () => {
      const { rows } = await rig.db.pool.query(
        "select count(*)::int as n from bitrix_sync.workflow_instances where state = 'succeeded'",
      );
      return rows[0].n >= N;
    },
    180_000,
    "all workflows",
  );
  const seconds = (Date.now() - started) / 1000;
  const mapped = await rig.db.pool.query(
    "select count(*)::int as n from bitrix_sync.entity_external_mapping where status = 'active'",
  );
  t.is(mapped.rows[0].n, N);
  t.is(
    [...rig.emulator.store.contacts.values()].filter((c) => typeof c.uf[SANDBOX_FIELDS.userId] === "string")
      .length,
    N,
    "one Contact per user",
  );

  const log = rig.emulator.log.filter((e) => e.method === "batch");
  t.true(
    log.every((e) => (e.batchSize ?? 0) <= BATCH),
    "batch size limit",
  );
  t.false(
    rig.emulator.log.some((e) => e.status === 503),
    "the portal never had to refuse a request (QUERY_LIMIT_EXCEEDED)",
  );
  // Token bucket: in any window [a, b], requests started ≤ RATE × (b − a) + BURST (+1 for rounding).
  const at = rig.emulator.log.map((e) => e.at).sort((a, b) => a - b);
  let worst = 0;
  for (let i = 0; i < at.length; i++) {
    for (let j = i; j < at.length; j++) {
      const allowed = (RATE * ((at[j] as number) - (at[i] as number))) / 1000 + BURST + 1;
      worst = Math.max(worst, j - i + 1 - allowed);
    }
  }
  t.true(worst <= 0, `rate exceeded by ${worst} requests`);
  // In flight: at no moment more than two requests open.
  const edges = rig.emulator.log.flatMap((e) => [
    [e.at, 1],
    [e.finishedAt, -1],
  ]) as Array<[number, number]>;
  edges.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let open = 0;
  let maxOpen = 0;
  for (const [, d] of edges) {
    open += d;
    maxOpen = Math.max(maxOpen, open);
  }
  t.true(maxOpen <= 2, `max in flight ${maxOpen}`);
  const mean = log.reduce((s, e) => s + (e.batchSize ?? 0), 0) / log.length;
  t.log(
    `${N} users in ${seconds.toFixed(1)} s, ${rig.emulator.log.length} requests, mean ${mean.toFixed(1)} commands/request`,
  );
});
