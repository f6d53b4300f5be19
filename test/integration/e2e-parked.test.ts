// Parked workflows end to end (docs/admin.md "Parked workflows"): a contact.map_or_create parks in
// waiting_manual, the admin lists it and decides (link a Contact, create one, retry after fixing the
// data, or cancel), and the worker carries the decision out against the emulator.
import test from "ava";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { MAX_PHONES_PER_SEARCH } from "../../src/crm/catalogue.js";
import { inTransaction } from "../../src/db/tx.js";
import { type Rig, startRig, waitFor } from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";
import { asRole } from "../helpers/roles.js";

let rig: Rig;
const F = SANDBOX_FIELDS;
test.before(async () => {
  rig = await startRig();
  await rig.startWorker();
});
test.after.always(async () => {
  await rig?.close();
});

interface Parked {
  workflow_id: string;
  reason: string;
  alert_number: string | null;
  decisions: string[];
}

/** Waits until the user's workflow is parked; returns it as the admin lists it. */
async function parkedOf(userId: string, reason: string): Promise<Parked> {
  const { rows } = await rig.db.pool.query<{ id: string }>(
    "select id from bitrix_sync.workflow_instances where user_id = $1 order by created_at desc limit 1",
    [userId],
  );
  const id = await waitFor(
    async () => {
      const r = await rig.db.pool.query<{ id: string }>(
        "select id from bitrix_sync.workflow_instances where user_id = $1 and state = 'waiting_manual' and last_error_code = $2",
        [userId, reason],
      );
      return r.rows[0]?.id;
    },
    20_000,
    `${userId} parked for ${reason} (was ${rows[0]?.id})`,
  );
  return await asRole(rig.db.pool, "bitrix_sync_admin", async (c) => {
    const r = await c.query<Parked>("select * from bitrix_sync.parked_workflows where workflow_id = $1", [
      id,
    ]);
    return r.rows[0] as Parked;
  });
}

/** A user whose phone matches more Contacts than the portal lists: parked, too_many_candidates. */
async function tooMany() {
  const phone = randomPhone();
  const ids: number[] = [];
  for (let i = 0; i < MAX_PHONES_PER_SEARCH + 1; i++) {
    ids.push(rig.emulator.store.createContact({ name: `Dup ${i}`, phones: [{ value: phone }] }).id);
  }
  const u = await makeUser(rig.db.pool, { phone });
  return { u, ids, parked: await parkedOf(u.id, "too_many_candidates") };
}

const resume = (workflowId: string, decision: string, contact: number | null = null) =>
  asRole(rig.db.pool, "bitrix_sync_admin", (c) =>
    c.query(
      "select * from bitrix_sync.resume_parked_workflow($1, $2, 'checked the duplicates', 'ops:test', $3)",
      [workflowId, decision, contact === null ? null : String(contact)],
    ),
  );

async function finishedWorkflow(id: string) {
  return await waitFor(
    async () => {
      const { rows } = await rig.db.pool.query(
        "select state, outcome, last_error_code, step_data from bitrix_sync.workflow_instances where id = $1 and state in ('succeeded', 'failed', 'cancelled', 'waiting_manual')",
        [id],
      );
      return rows[0];
    },
    20_000,
    `workflow ${id}`,
  );
}

const activeLink = async (userId: string) =>
  (
    await rig.db.pool.query<{ external_id: string }>(
      "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
      [userId],
    )
  ).rows.map((r) => r.external_id);

test.serial("too many candidates: the admin links the Contact a person chose", async (t) => {
  const { u, ids, parked } = await tooMany();
  t.like(parked, { reason: "too_many_candidates", decisions: ["retry", "link_contact", "create_contact"] });
  t.truthy(parked.alert_number, "the alert a person looks at in the CRM");
  const chosen = ids[ids.length - 1] as number;
  await resume(parked.workflow_id, "link_contact", chosen);
  const wf = await finishedWorkflow(parked.workflow_id);
  t.like(wf, { state: "succeeded", outcome: "mapped" });
  t.is(wf.step_data.branch, "manual_link");
  t.deepEqual(await activeLink(u.id), [String(chosen)]);
  const c = rig.emulator.store.contacts.get(chosen);
  t.is(c?.uf[F.userId], u.id);
  t.is(c?.uf[F.registered], 1);
  const others = ids
    .filter((id) => id !== chosen)
    .map((id) => rig.emulator.store.contacts.get(id)?.uf[F.userId]);
  t.true(
    others.every((x) => !x),
    "no other candidate was touched",
  );
});

test.serial("too many candidates: the admin asks for a new Contact", async (t) => {
  const { u, ids, parked } = await tooMany();
  const before = rig.emulator.store.contacts.size;
  await resume(parked.workflow_id, "create_contact");
  const wf = await finishedWorkflow(parked.workflow_id);
  t.like(wf, { state: "succeeded", outcome: "created" });
  t.is(rig.emulator.store.contacts.size, before + 1);
  const [link] = await activeLink(u.id);
  t.false(ids.includes(Number(link)), "a new Contact, none of the candidates");
  t.is(rig.emulator.store.contacts.get(Number(link))?.uf[F.userId], u.id);
});

test.serial(
  "a chosen Contact held by another active user parks the workflow again for another decision",
  async (t) => {
    const { u, ids, parked } = await tooMany();
    const other = await makeUser(rig.db.pool);
    const held = rig.emulator.store.contacts.get(ids[0] as number);
    if (held) held.uf[F.userId] = other.id;
    await resume(parked.workflow_id, "link_contact", ids[0] as number);
    const again = await parkedOf(u.id, "manual_link_bound_to_other_user");
    t.like(again, {
      workflow_id: parked.workflow_id,
      decisions: ["retry", "link_contact", "create_contact"],
    });
    t.is(held?.uf[F.userId], other.id, "the other user's Contact was not touched");
    t.deepEqual(await activeLink(u.id), []);
    await resume(parked.workflow_id, "create_contact");
    t.like(await finishedWorkflow(parked.workflow_id), { state: "succeeded", outcome: "created" });
  },
);

test.serial(
  "an invalid phone: retry parks again until the phone is fixed, then the workflow finishes",
  async (t) => {
    const u = await makeUser(rig.db.pool, { phone: "8-999-000" });
    const parked = await parkedOf(u.id, "invalid_phone");
    t.deepEqual(parked.decisions, ["retry"]);
    await resume(parked.workflow_id, "retry");
    await waitFor(
      async () => {
        const { rows } = await rig.db.pool.query(
          "select occurrence_count from bitrix_sync.business_alerts where user_id = $1 and alert_type = 'invalid_phone' and occurrence_count = 2",
          [u.id],
        );
        return rows.length > 0;
      },
      20_000,
      "parked again, the alert counted twice",
    );
    t.like(await finishedWorkflow(parked.workflow_id), {
      state: "waiting_manual",
      last_error_code: "invalid_phone",
    });
    // The phone is fixed without an App intent (e.g. by a data repair), so only a person resumes it.
    const phone = randomPhone();
    await inTransaction(rig.db.pool, async (c) => {
      await c.query("set local han.sync_suppress = 'true'");
      await c.query("update han_app.user_identity set phone_number = $2 where id = $1", [u.id, phone]);
    });
    await resume(parked.workflow_id, "retry");
    t.like(await finishedWorkflow(parked.workflow_id), { state: "succeeded", outcome: "created" });
    t.is((await activeLink(u.id)).length, 1);
  },
);

test.serial(
  "cancel: the parked workflow ends, and the user's next App change starts a new one",
  async (t) => {
    const u = await makeUser(rig.db.pool, { phone: "12345" });
    const parked = await parkedOf(u.id, "invalid_phone");
    await asRole(rig.db.pool, "bitrix_sync_admin", (c) =>
      c.query(
        "select * from bitrix_sync.cancel_parked_workflow($1, 'test account, not a client', 'ops:test')",
        [parked.workflow_id],
      ),
    );
    t.like(await finishedWorkflow(parked.workflow_id), { state: "cancelled", outcome: "cancelled_by_admin" });
    await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [
      u.id,
      randomPhone(),
    ]);
    const next = await waitFor(
      async () => {
        const { rows } = await rig.db.pool.query(
          "select state, outcome from bitrix_sync.workflow_instances where user_id = $1 and id <> $2 and state = 'succeeded'",
          [u.id, parked.workflow_id],
        );
        return rows[0];
      },
      20_000,
      "the next workflow",
    );
    t.is(next.state, "succeeded");
  },
);
