// A user's intents in the order the App recorded them last, after a pause (found by drill:rollback):
// while nothing is claimed, a user's phone change, deactivation and reactivation wait together; the
// reactivation coalesces into the user's map_or_create intent, which must then stand after the
// deactivation, so the intake applies it last and the user ends linked, with an active Contact.
// The fold and the claim on their own (fold_intent_journal, claim_sync_tasks: the order, one intake
// per user at a time), then the real sync loop under the runtime role against the emulator.
import test from "ava";
import { pauseSync, resumeSync, waitDrained } from "../../scripts/drill/pause.js";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { finishedWorkflow, type Rig, startRig, waitFor } from "../helpers/e2e.js";
import { foldJournal, makeUser, randomPhone } from "../helpers/factories.js";

let rig: Rig;
test.before(async () => {
  rig = await startRig({ asRuntimeRole: true });
});
test.after.always(async () => {
  await rig?.close();
});

/** A phone change, a deactivation and a reactivation of the profile, in the App's transactions. */
async function changeLeaveReturn(userId: string): Promise<void> {
  const q = (sql: string, p: unknown[] = []) => rig.db.pool.query(sql, [userId, ...p]);
  await q("update han_app.user_identity set phone_number = $2 where id = $1", [randomPhone()]);
  await q("update han_app.client_profile set record_status = 'inactive' where user_id = $1");
  await q("update han_app.client_profile set record_status = 'active' where user_id = $1");
}

test.serial("the fold places a row at its newest intent; the claim returns rows in that order", async (t) => {
  const u = await makeUser(rig.db.pool, { phone: randomPhone(), fold: false });
  await foldJournal(rig.db.pool); // its map_or_create is pending in the queue
  await changeLeaveReturn(u.id);
  await foldJournal(rig.db.pool); // the reactivation coalesces into it
  // The times in microseconds, as the database orders them (a JavaScript Date keeps milliseconds,
  // and the App's three writes can fall in one).
  const { rows } = await rig.db.pool.query<{ task_type: string; created_us: string; next_us: string }>(
    `select task_type, (extract(epoch from created_at) * 1e6)::bigint::text as created_us,
            (extract(epoch from next_attempt_at) * 1e6)::bigint::text as next_us
       from bitrix_sync.claim_sync_tasks('test', 100, interval '1 minute') where entity_id = $1`,
    [u.id],
  );
  t.deepEqual(
    rows.map((r) => r.task_type),
    ["contact.update", "contact.deactivate", "contact.map_or_create"],
    "the reactivation, recorded last, comes last",
  );
  const mapOrCreate = rows[2];
  t.true(BigInt(mapOrCreate?.created_us ?? 0) < BigInt(rows[0]?.created_us ?? 0), "it says since when");
  t.true(
    BigInt(mapOrCreate?.next_us ?? 0) > BigInt(rows[1]?.next_us ?? 0),
    "it stands after the deactivation",
  );
  await rig.db.pool.query(
    "update han_app.sync_queue set status = 'cancelled', cancel_reason = 'test', locked_by = null, locked_until = null, lease_token = null, completed_at = now() where entity_id = $1",
    [u.id],
  );
});

test.serial(
  "a user's intents are taken one intake at a time: none while another intake holds one",
  async (t) => {
    const u = await makeUser(rig.db.pool, { phone: randomPhone(), fold: false });
    await changeLeaveReturn(u.id);
    await foldJournal(rig.db.pool);
    const claim = async (worker: string) =>
      (
        await rig.db.pool.query<{ id: string; task_type: string; lease_token: string }>(
          `select id, task_type, lease_token from bitrix_sync.claim_sync_tasks($1, 1, interval '1 minute')
          where entity_id = $2`,
          [worker, u.id],
        )
      ).rows;
    const [first] = await claim("replica-a");
    t.is(first?.task_type, "contact.update", "the oldest first");
    t.deepEqual(await claim("replica-b"), [], "not the user's next intent while replica-a holds one");
    await rig.db.pool.query("select bitrix_sync.complete_sync_task($1, $2)", [first?.id, first?.lease_token]);
    t.is((await claim("replica-b"))[0]?.task_type, "contact.deactivate", "then the next, in order");
    await rig.db.pool.query(
      "update han_app.sync_queue set status = 'cancelled', cancel_reason = 'test', locked_by = null, locked_until = null, lease_token = null, completed_at = now() where entity_id = $1 and status in ('pending', 'leased')",
      [u.id],
    );
  },
);

test.serial("deactivated and reactivated during a pause: linked and active after the resume", async (t) => {
  await rig.startWorker();
  const synced = await makeUser(rig.db.pool, { phone: randomPhone() });
  t.is((await finishedWorkflow(rig, synced.id)).state, "succeeded");
  const p = await pauseSync(rig.db.pool, "ops:test", "the intake order after a pause");
  // The documented bound (docs/runbook.md, Rolling back, step 2): a slot or lease left by a release
  // that missed its moment (a loaded machine) counts until it expires.
  t.true(await waitDrained(rig.db.pool, 60_000), "drained within the bound");
  const fresh = await makeUser(rig.db.pool, { phone: randomPhone() });
  for (const u of [synced, fresh]) await changeLeaveReturn(u.id);
  await resumeSync(rig.db.pool, "ops:test", "over", p.pauseId);
  for (const u of [synced, fresh]) {
    const linked = await waitFor(async () => {
      const { rows } = await rig.db.pool.query<{ c: string }>(
        `select m.external_id as c from bitrix_sync.entity_external_mapping m
          where m.entity_id = $1 and m.status = 'active'
            and not exists (select 1 from bitrix_sync.workflow_instances w
                             where w.user_id = $1 and w.state not in ('succeeded', 'failed', 'cancelled'))`,
        [u.id],
      );
      return rows[0]?.c ?? null;
    }, 30_000);
    t.truthy(
      linked,
      `user ${u === synced ? "synced before" : "created during"} the pause has an active link`,
    );
    const c = rig.emulator.store.contacts.get(Number(linked));
    t.is(c?.uf[SANDBOX_FIELDS.registered], 1, "its Contact is flagged active");
  }
});
