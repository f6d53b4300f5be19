// contact.update (§5.2) and contact.deactivate (§5.3) end to end, happy and not-found paths.
import test from "ava";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { finishedWorkflow, type Rig, startRig, waitFor } from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";
import { withSettings } from "../helpers/settings.js";

let rig: Rig;
test.before(async () => {
  rig = await startRig();
  await rig.startWorker();
});
test.after.always(async () => {
  await rig?.close();
});

const F = SANDBOX_FIELDS;

async function linked(phone?: string) {
  const u = await makeUser(rig.db.pool, phone ? { phone } : {});
  await finishedWorkflow(rig, u.id);
  const { rows } = await rig.db.pool.query<{ external_id: string }>(
    "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
    [u.id],
  );
  const contact = rig.emulator.store.contacts.get(Number(rows[0]?.external_id));
  if (!contact) throw new Error("no Contact linked");
  return { u, contact };
}

async function newestWorkflow(userId: string, type: string) {
  return await waitFor(async () => {
    const { rows } = await rig.db.pool.query(
      "select * from bitrix_sync.workflow_instances where user_id = $1 and intent_type = $2 and state in ('succeeded','failed','waiting_manual') order by created_at desc limit 1",
      [userId, type],
    );
    return rows[0];
  });
}

test.serial(
  "a phone change overwrites the number bitrix-sync wrote, by entry ID; other numbers stay",
  async (t) => {
    const { u, contact } = await linked();
    const managerNumber = { id: 9_000_001, valueType: "WORK", value: "+74950000000" };
    contact.phones.push(managerNumber);
    const ownEntry = contact.phones[0]?.id;
    const next = randomPhone();
    await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [u.id, next]);
    const wf = await newestWorkflow(u.id, "contact.update");
    t.is(wf.outcome, "updated");
    t.deepEqual(
      contact.phones.map((p) => [p.id, p.value]),
      [
        [ownEntry, next],
        [managerNumber.id, managerNumber.value],
      ],
      "overwritten in place, nothing appended",
    );
  },
);

test.serial(
  "a phone change keeps the type of the entry it overwrites: a WORK entry stays WORK, no duplicate",
  async (t) => {
    const { u, contact } = await linked();
    // A manager filed the number bitrix-sync wrote as a work phone.
    const own = contact.phones[0];
    if (!own) throw new Error("the created Contact has no phone");
    own.valueType = "WORK";
    const next = randomPhone();
    await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [u.id, next]);
    const wf = await newestWorkflow(u.id, "contact.update");
    t.is(wf.outcome, "updated");
    t.deepEqual(
      contact.phones.map((p) => [p.id, p.value, p.valueType]),
      [[own.id, next, "WORK"]],
      "the same entry, the new number, its type kept",
    );
    // The command stored the entry and its type, never the number.
    const { rows } = await rig.db.pool.query(
      `select c.params from bitrix_sync.crm_commands c where c.workflow_id = $1 and c.command_type = 'contact.update'`,
      [wf.id],
    );
    t.deepEqual(rows[0]?.params, { contact_id: contact.id, phone: { entry_id: own.id, value_type: "WORK" } });
    t.false(JSON.stringify(rows).includes(next.slice(2)), "no phone digits in the stored parameters");
  },
);

test.serial("a phone already on the Contact changes nothing there", async (t) => {
  const { u, contact } = await linked();
  const extra = randomPhone();
  contact.phones.push({ id: 9_000_002, valueType: "MOBILE", value: extra });
  await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [u.id, extra]);
  const wf = await newestWorkflow(u.id, "contact.update");
  t.is(wf.outcome, "no_change");
  t.is(contact.phones.length, 2);
});

test.serial(
  "update of a Contact deleted in the CRM: mapping broken, snapshot kept and stale, alert",
  async (t) => {
    const { u, contact } = await linked();
    rig.emulator.store.contacts.delete(contact.id);
    await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [
      u.id,
      randomPhone(),
    ]);
    const wf = await newestWorkflow(u.id, "contact.update");
    t.is(wf.outcome, "contact_missing");
    const m = await rig.db.pool.query(
      "select status, close_reason from bitrix_sync.entity_external_mapping where entity_id = $1",
      [u.id],
    );
    t.deepEqual(m.rows, [{ status: "broken", close_reason: "contact_not_found" }]);
    const s = await rig.db.pool.query(
      "select stale, stale_reason from bitrix_sync.contact_snapshots where contact_id = $1",
      [String(contact.id)],
    );
    t.deepEqual(s.rows, [{ stale: true, stale_reason: "contact_not_found" }]);
    const a = await rig.db.pool.query(
      "select alert_type from bitrix_sync.business_alerts where user_id = $1",
      [u.id],
    );
    t.deepEqual(
      a.rows.map((r) => r.alert_type),
      ["contact_not_found"],
    );
  },
);

test.serial("update without a mapping becomes map_or_create", async (t) => {
  const u = await makeUser(rig.db.pool, { phone: "bad" });
  const first = await finishedWorkflow(rig, u.id);
  t.is(first.state, "waiting_manual");
  const phone = randomPhone();
  const c = rig.emulator.store.createContact({ phones: [{ value: phone }] });
  await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [u.id, phone]);
  const wf = await finishedWorkflow(rig, u.id);
  t.is(wf.state, "succeeded");
  t.is(c.uf[F.userId], u.id);
});

test.serial("deactivate sets the flag inactive and closes the mapping; the Contact stays", async (t) => {
  const { u, contact } = await linked();
  await rig.db.pool.query("update han_app.client_profile set record_status = 'inactive' where user_id = $1", [
    u.id,
  ]);
  const wf = await newestWorkflow(u.id, "contact.deactivate");
  t.is(wf.outcome, "deactivated");
  t.is(contact.uf[F.registered], 0);
  t.true(rig.emulator.store.contacts.has(contact.id));
  const m = await rig.db.pool.query(
    "select status, close_reason from bitrix_sync.entity_external_mapping where entity_id = $1",
    [u.id],
  );
  t.deepEqual(m.rows, [{ status: "closed", close_reason: "deactivated" }]);
});

test.serial("deactivate of a Contact already gone: mapping closed as broken, alert", async (t) => {
  const { u, contact } = await linked();
  rig.emulator.store.contacts.delete(contact.id);
  await rig.db.pool.query("update han_app.user_identity set record_status = 'deleted' where id = $1", [u.id]);
  const wf = await newestWorkflow(u.id, "contact.deactivate");
  t.is(wf.outcome, "contact_missing");
  const m = await rig.db.pool.query(
    "select status from bitrix_sync.entity_external_mapping where entity_id = $1",
    [u.id],
  );
  t.deepEqual(m.rows, [{ status: "broken" }]);
});

test.serial(
  "reactivation links the user again: the Contact carrying the user_id is restored, not duplicated",
  async (t) => {
    const { u, contact } = await linked();
    await rig.db.pool.query("update han_app.user_identity set record_status = 'inactive' where id = $1", [
      u.id,
    ]);
    await newestWorkflow(u.id, "contact.deactivate");
    const before = rig.emulator.store.contacts.size;
    await rig.db.pool.query("update han_app.user_identity set record_status = 'active' where id = $1", [
      u.id,
    ]);
    const wf = await finishedWorkflow(rig, u.id);
    t.is(wf.outcome, "restored");
    t.is(rig.emulator.store.contacts.size, before);
    t.is(contact.uf[F.registered], 1);
  },
);

test.serial(
  "a user whose phone changed while inactive comes back: the previous Contact is linked again with the new phone, not a second one",
  async (t) => {
    // Found by the chaos suite (docs/reliability.md): the phone search found nothing under the new
    // number and a second Contact was created.
    const { u, contact } = await linked();
    await rig.db.pool.query("update han_app.user_identity set record_status = 'inactive' where id = $1", [
      u.id,
    ]);
    await newestWorkflow(u.id, "contact.deactivate");
    contact.name = "Renamed While Away";
    rig.emulator.store.touch(contact);
    const next = randomPhone();
    const before = rig.emulator.store.contacts.size;
    await rig.db.pool.query(
      "update han_app.user_identity set record_status = 'active', phone_number = $2 where id = $1",
      [u.id, next],
    );
    const wf = await finishedWorkflow(rig, u.id, 30_000);
    t.is(wf.state, "succeeded");
    t.is(rig.emulator.store.contacts.size, before, "no second Contact");
    t.deepEqual(
      contact.phones.map((p) => p.value),
      [next],
      "the number bitrix-sync wrote is overwritten by the new one",
    );
    t.is(contact.uf[F.registered], 1);
    const m = await rig.db.pool.query(
      "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
      [u.id],
    );
    t.deepEqual(
      m.rows.map((r) => r.external_id),
      [String(contact.id)],
    );
    const p = await rig.db.pool.query("select full_name from han_app.client_profile where user_id = $1", [
      u.id,
    ]);
    t.is(p.rows[0]?.full_name, "Renamed While Away", "the CRM-master fields applied by the final read");
  },
);

test.serial(
  "a phone change, a deactivation and a return taken together: the pass that runs as map_or_create writes the new phone",
  async (t) => {
    // Found by the chaos suite (docs/reliability.md): the intents joined one workflow, the pass ran as
    // the newest (map_or_create), found the link active and never looked at the phone.
    const { u, contact } = await linked();
    await rig.stopWorker();
    const next = randomPhone();
    await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [u.id, next]);
    await rig.db.pool.query("update han_app.user_identity set record_status = 'inactive' where id = $1", [
      u.id,
    ]);
    await rig.db.pool.query("update han_app.user_identity set record_status = 'active' where id = $1", [
      u.id,
    ]);
    await rig.startWorker();
    const wf = await finishedWorkflow(rig, u.id, 30_000);
    t.is(wf.state, "succeeded");
    t.deepEqual(
      contact.phones.map((p) => p.value),
      [next],
    );
    t.is(contact.uf[F.registered], 1);
  },
);

test.serial(
  "a phone change joining while the last step of the create runs is not marked processed without a pass",
  async (t) => {
    // Found by the chaos suite (docs/reliability.md): the step used the revision read when it was
    // claimed; the join bumped it meanwhile and the workflow succeeded with the new intent unsent.
    const c = await rig.db.pool.connect();
    try {
      // Creating the Contact's snapshot waits for this lock: the create's last step stalls there.
      await c.query("begin");
      await c.query("lock table bitrix_sync.contact_snapshots in exclusive mode");
      const u = await makeUser(rig.db.pool, { phone: randomPhone() });
      await waitFor(
        async () =>
          (
            await rig.db.pool.query(
              `select 1 from pg_locks l join pg_class r on r.oid = l.relation
                where r.relname = 'contact_snapshots' and not l.granted`,
            )
          ).rows.length > 0,
        20_000,
        "the create's step to wait for the snapshot",
      );
      const next = randomPhone();
      await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [
        u.id,
        next,
      ]);
      // Time for the intake to take the phone change while the step still waits.
      await new Promise((r) => setTimeout(r, 1_500));
      await c.query("rollback");
      await finishedWorkflow(rig, u.id, 30_000);
      const mine = [...rig.emulator.store.contacts.values()].filter((x) => x.uf[F.userId] === u.id);
      t.is(mine.length, 1);
      t.deepEqual(
        mine[0]?.phones.map((p) => p.value),
        [next],
        "the phone change reached the Contact",
      );
    } finally {
      await c.query("rollback").catch(() => undefined);
      c.release();
    }
  },
);

test.serial("applying CRM-master fields enqueues no App->CRM work", async (t) => {
  const { u } = await linked();
  // makeUser inserts identity and profile in two transactions: intake may finish the first intent
  // before the second arrives, so creation can leave one or two rows. Nothing else may appear.
  const q = await rig.db.pool.query(
    `select count(*)::int as n from han_app.sync_queue
      where entity_id = $1 and payload_json ->> 'reason' not in ('identity_created', 'profile_created')`,
    [u.id],
  );
  const p = await rig.db.pool.query(
    "select source_updated_at from han_app.client_profile where user_id = $1",
    [u.id],
  );
  t.is(q.rows[0].n, 0, "only the creation's intents");
  t.truthy(p.rows[0]);
});

test.serial(
  "a deactivation arriving while the create is in flight is not lost: the workflow converges to it",
  async (t) => {
    rig.emulator.setLatency(600);
    try {
      const u = await makeUser(rig.db.pool, { phone: randomPhone() });
      await waitFor(async () => {
        const { rows } = await rig.db.pool.query(
          `select 1 from bitrix_sync.crm_commands c join bitrix_sync.workflow_instances w on w.id = c.workflow_id
          where w.user_id = $1 and c.command_type = 'contact.add' and c.status = 'in_flight'`,
          [u.id],
        );
        return rows.length > 0;
      });
      await rig.db.pool.query("update han_app.user_identity set record_status = 'inactive' where id = $1", [
        u.id,
      ]);
      const wf = await waitFor(async () => {
        const { rows } = await rig.db.pool.query(
          `select * from bitrix_sync.workflow_instances where user_id = $1 and state = 'succeeded'
            and not exists (select 1 from han_app.sync_queue q where q.entity_id = $1 and q.status <> 'processed')
          order by created_at desc limit 1`,
          [u.id],
        );
        return rows[0];
      }, 20_000);
      t.is(wf.processed_revision, wf.revision, "the result confirms the newest revision");
      t.is(wf.outcome, "deactivated");
      const contact = [...rig.emulator.store.contacts.values()].find((c) => c.uf[F.userId] === u.id);
      t.is(contact?.uf[F.registered], 0);
      const m = await rig.db.pool.query(
        "select status, close_reason from bitrix_sync.entity_external_mapping where entity_id = $1",
        [u.id],
      );
      t.deepEqual(m.rows, [{ status: "closed", close_reason: "deactivated" }]);
    } finally {
      rig.emulator.setLatency(0);
    }
  },
);

test.serial(
  "an appended phone whose reply is lost is settled by a fresh read: the new phone once, no technical dead letter",
  async (t) => {
    // Found by the chaos suite (docs/reliability.md): the superseded update was dead-lettered with a
    // technical dead letter row although nothing failed.
    const { u, contact } = await linked();
    contact.phones = []; // a manager removed the number: the new one is appended
    const next = randomPhone();
    rig.emulator.failNext({ kind: "timeout_after_commit", holdMs: 5_000 }, { method: "crm.contact.update" });
    await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [u.id, next]);
    const wf = await finishedWorkflow(rig, u.id, 30_000);
    t.is(wf.state, "succeeded");
    t.deepEqual(
      contact.phones.map((p) => p.value),
      [next],
      "the number landed once; the fresh read saw it",
    );
    const cmd = await rig.db.pool.query(
      `select c.status, c.last_error_code from bitrix_sync.crm_commands c
        where c.workflow_id = $1 and c.command_type = 'contact.update' order by c.id`,
      [wf.id],
    );
    t.deepEqual(cmd.rows[0], { status: "dead_letter", last_error_code: "superseded_by_reread" });
    const dl = await rig.db.pool.query(
      "select count(*)::int as n from bitrix_sync.technical_dead_letters where workflow_id = $1",
      [wf.id],
    );
    t.is(dl.rows[0].n, 0);
  },
);

test.serial(
  "a phone update the portal executes late does not overwrite a newer phone sent after it",
  async (t) => {
    // Found by the chaos suite (docs/reliability.md): the read after the unanswered update came before
    // the slow portal executed it, the newer phone was written, then the late update put the older
    // number back.
    const { u, contact } = await linked();
    const second = randomPhone();
    const third = randomPhone();
    rig.emulator.failNext({ kind: "latency", ms: 3_500 }, { method: "crm.contact.update" });
    await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [
      u.id,
      second,
    ]);
    await waitFor(
      async () =>
        (
          await rig.db.pool.query(
            `select 1 from bitrix_sync.crm_commands c join bitrix_sync.workflow_instances w on w.id = c.workflow_id
              where w.user_id = $1 and c.command_type = 'contact.update' and c.status = 'in_flight'`,
            [u.id],
          )
        ).rows.length > 0,
      20_000,
      "the update to be sent",
    );
    // While the portal still holds the update, the App changes the phone again.
    await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [
      u.id,
      third,
    ]);
    await finishedWorkflow(rig, u.id, 30_000);
    await new Promise((r) => setTimeout(r, 2_000)); // nothing late may land after the end
    t.deepEqual(
      contact.phones.map((p) => p.value),
      [third],
    );
  },
);

/** A 503 that is not a limit refusal: the portal (or its gateway) failed, the update may have landed. */
const PLAIN_503 = {
  kind: "http_error",
  status: 503,
  error: "SERVICE_UNAVAILABLE",
  description: "Service temporarily unavailable",
} as const;

async function phoneUpdate(userId: string) {
  return await waitFor(async () => {
    const { rows } = await rig.db.pool.query(
      `select c.* from bitrix_sync.crm_commands c join bitrix_sync.workflow_instances w on w.id = c.workflow_id
        where w.user_id = $1 and c.command_type = 'contact.update' order by c.id desc limit 1`,
      [userId],
    );
    return rows[0];
  });
}

test.serial(
  "a plain 503 on contact.update: uncertain, resent after its backoff, and the phone lands once",
  async (t) => {
    const { u, contact } = await linked();
    const own = contact.phones[0];
    const logFrom = rig.emulator.log.length;
    rig.emulator.failNext(PLAIN_503, { method: "crm.contact.update", times: 2 });
    const next = randomPhone();
    await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [u.id, next]);
    const wf = await newestWorkflow(u.id, "contact.update");
    t.is(wf.outcome, "updated");
    t.deepEqual(
      contact.phones.map((p) => [p.id, p.value]),
      [[own?.id, next]],
      "overwritten by its entry ID: resending it cannot append",
    );
    const cmd = await phoneUpdate(u.id);
    t.like(cmd, { status: "succeeded", attempt_count: 3, limit_hits: 0 }, "one command, sent three times");
    const log = rig.emulator.log.slice(logFrom);
    t.is(log.filter((e) => e.status === 503).length, 2, "two 503s");
    t.is(log.filter((e) => e.commands.includes("crm.contact.update")).length, 1, "one update executed");
    const dl = await rig.db.pool.query(
      "select count(*)::int as n from bitrix_sync.technical_dead_letters where workflow_id = $1",
      [wf.id],
    );
    t.is(dl.rows[0].n, 0);
  },
);

test.serial(
  "a plain 503 on contact.update waits for the backoff of its attempts, not two response times",
  async (t) => {
    const { u } = await linked();
    // A backoff far longer than the response time: the resend waits up to 10 min (full jitter).
    await withSettings(rig.db.pool, { "retry.base_ms": 600_000, "retry.max_ms": 600_000 }, async () => {
      await rig.runtime.settings.refresh();
      rig.emulator.failNext(PLAIN_503, { method: "crm.contact.update" });
      await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [
        u.id,
        randomPhone(),
      ]);
      const waiting = await waitFor(async () => {
        const { rows } = await rig.db.pool.query(
          `select w.last_error_code, w.current_step,
                  extract(epoch from w.next_attempt_at - c.updated_at) * 1000 as wait_ms,
                  extract(epoch from c.updated_at - c.sent_at) * 1000 as unanswered_ms,
                  c.status, c.last_error_code as command_code
             from bitrix_sync.workflow_instances w
             join bitrix_sync.crm_commands c on c.workflow_id = w.id and c.command_type = 'contact.update'
            where w.user_id = $1 and w.state = 'waiting_retry'`,
          [u.id],
        );
        return rows[0];
      }, 15_000);
      t.like(waiting, {
        last_error_code: "awaiting_late_write",
        current_step: "resend_write",
        status: "uncertain",
        command_code: "server_error",
      });
      // Not twice the response time (what a late execution needs): the backoff of the first attempt,
      // uniform in [0, 600 s]. It falls below the settling time only with a chance of about 1 in 10 000.
      const settle = 2 * Number(waiting.unanswered_ms);
      t.true(Number(waiting.wait_ms) > settle, `waits ${waiting.wait_ms} ms, settling needs ${settle} ms`);
      t.true(Number(waiting.wait_ms) <= 600_000 + 1);
    });
    await rig.runtime.settings.refresh();
  },
);
