// npm run bench:reconcile — one incremental reconciliation run over 10 000 changed, mapped Contacts
// in the emulator, with the production default limiter (2 requests/s, burst 5). Prints HTTP requests
// and seconds (goal: at most 12 requests). Env: BENCH_CONTACTS (default 10000).
import { randomUUID } from "node:crypto";
import { SANDBOX_FIELDS } from "../src/config/env.js";
import { reconcileContacts } from "../src/inbound/reconcile.js";
import { startRig } from "../test/helpers/e2e.js";

const N = Number(process.env.BENCH_CONTACTS ?? 10_000);
const rig = await startRig({
  settings: { "limiter.refill_per_sec": 2, "limiter.burst": 5, "limiter.max_in_flight": 2, "batch.size": 20 },
});
try {
  const F = SANDBOX_FIELDS;
  const users: string[] = [];
  const contacts: number[] = [];
  for (let i = 0; i < N; i++) {
    const id = randomUUID();
    const c = rig.emulator.store.createContact({
      name: `Contact ${i}`,
      phones: [{ value: `+7900${String(i).padStart(7, "0")}` }],
      uf: { [F.userId]: id, [F.registered]: 1 },
    });
    users.push(id);
    contacts.push(c.id);
  }
  // The App side: users and their active mappings, written without intents (suppress) as if linked earlier.
  const c = await rig.db.pool.connect();
  try {
    await c.query("begin");
    await c.query("set local han.sync_suppress = 'true'");
    await c.query(
      `insert into han_app.user_identity (id, phone_number) select u, '+79000000000' from unnest($1::uuid[]) u`,
      [users],
    );
    await c.query("insert into han_app.client_profile (user_id) select u from unnest($1::uuid[]) u", [users]);
    await c.query(
      `insert into bitrix_sync.entity_external_mapping (entity_id, external_id)
       select u, c::text from unnest($1::uuid[], $2::bigint[]) as t(u, c)`,
      [users, contacts],
    );
    await c.query("commit");
  } finally {
    c.release();
  }
  const before = rig.emulator.log.length;
  const started = Date.now();
  const report = await reconcileContacts(rig.runtime.services, rig.runtime.settings.get().reconcile, {
    force: true,
  });
  const seconds = (Date.now() - started) / 1000;
  const requests = rig.emulator.log.length - before;
  console.log(`reconciliation of ${N} changed mapped Contacts: ${report.status}`);
  console.log(`  ${requests} HTTP requests (goal <= 12), ${seconds.toFixed(1)} s`);
  console.log(
    `  scanned ${report.scanned}, applied ${report.updated}, recovered without webhook ${report.recovered}, spike alert ${report.spike}`,
  );
} finally {
  await rig.close();
}
