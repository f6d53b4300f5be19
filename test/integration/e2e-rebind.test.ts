// contact.rebind (§5.4, §18 "contact.rebind при success, partial CRM failure, retry и конфликте
// целевого Contact") end to end: an admin's request moves a user's link to another Contact through
// the worker and the emulator. The mapping, the request and the user's conflict alerts change
// together at the end (complete_rebind); every way the rebind can fail ends its request with a code,
// and an App change that arrives meanwhile is carried out after it.
import { randomBytes } from "node:crypto";
import test from "ava";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { finishedWorkflow, type Rig, startRig, waitFor } from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";
import { asRole } from "../helpers/roles.js";
import { forceRow } from "../helpers/sql-core.js";

let rig: Rig;
const F = SANDBOX_FIELDS;
test.before(async () => {
  rig = await startRig();
  await rig.startWorker();
  // Every state change of a rebind workflow, with the user's active link and open alerts at that
  // moment: what the link and the alerts were while the workflow waited.
  await rig.db.pool.query(`
    create table public.test_rebind_watch (
      seq bigint generated always as identity primary key, workflow_id uuid, state text,
      active_contact text, open_alerts int);
    create function public.tg_test_rebind_watch() returns trigger language plpgsql as $$
    begin
      insert into public.test_rebind_watch (workflow_id, state, active_contact, open_alerts)
      values (new.id, new.state,
              (select m.external_id from bitrix_sync.entity_external_mapping m
                where m.entity_id = new.user_id and m.status = 'active'),
              (select count(*) from bitrix_sync.business_alerts a where a.user_id = new.user_id and a.status = 'open'));
      return null;
    end $$;
    create trigger _998_test_rebind_watch after update of state on bitrix_sync.workflow_instances
      for each row when (new.workflow_type = 'contact.rebind' and old.state is distinct from new.state)
      execute function public.tg_test_rebind_watch();`);
});
test.after.always(async () => {
  await rig?.close();
});

async function linked() {
  const u = await makeUser(rig.db.pool, { phone: randomPhone() });
  await finishedWorkflow(rig, u.id);
  const { rows } = await rig.db.pool.query<{ external_id: string }>(
    "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
    [u.id],
  );
  const contact = rig.emulator.store.contacts.get(Number(rows[0]?.external_id));
  if (!contact) throw new Error("no Contact linked");
  return { u, contact };
}

const freeContact = () =>
  rig.emulator.store.createContact({ name: "The right one", phones: [{ value: randomPhone() }] });

/** The admin asks for a rebind (as bitrix_sync_admin); returns the request id. */
async function request(userId: string, target: number): Promise<string> {
  return await asRole(rig.db.pool, "bitrix_sync_admin", async (c) => {
    const { rows } = await c.query<{ id: string }>(
      "select bitrix_sync.request_bitrix_contact_rebind($1, $2, 'duplicate merged by the CRM team', 'ops:test') as id",
      [userId, String(target)],
    );
    return rows[0]?.id as string;
  });
}

interface Finished {
  status: string;
  failure_code: string | null;
  outcome: string | null;
  workflow_id: string;
}

async function finished(id: string, timeoutMs = 20_000): Promise<Finished> {
  return await waitFor(
    async () => {
      const r = await rig.db.pool.query<Finished>(
        "select status, failure_code, outcome, workflow_id from bitrix_sync.rebind_requests where id = $1 and status in ('succeeded', 'failed', 'cancelled')",
        [id],
      );
      return r.rows[0];
    },
    timeoutMs,
    `rebind request ${id}`,
  );
}

async function rebind(userId: string, target: number) {
  const { status, failure_code, outcome } = await finished(await request(userId, target));
  return { status, failure_code, outcome };
}

async function links(userId: string) {
  const { rows } = await rig.db.pool.query(
    "select external_id, status, close_reason from bitrix_sync.entity_external_mapping where entity_id = $1 order by opened_at",
    [userId],
  );
  return rows;
}

async function commands(workflowId: string) {
  const { rows } = await rig.db.pool.query<{
    command_type: string;
    params: Record<string, unknown>;
    status: string;
  }>("select command_type, params, status from bitrix_sync.crm_commands where workflow_id = $1 order by id", [
    workflowId,
  ]);
  return rows.map((c) => `${c.command_type}${c.params.set_user ? `:${c.params.set_user}` : ""} ${c.status}`);
}

async function watched(workflowId: string) {
  const { rows } = await rig.db.pool.query<{
    state: string;
    active_contact: string | null;
    open_alerts: number;
  }>(
    "select state, active_contact, open_alerts from public.test_rebind_watch where workflow_id = $1 order by seq",
    [workflowId],
  );
  return rows;
}

function raiseDuplicates(userId: string) {
  return rig.db.pool
    .query<{ id: string }>(
      "select id from bitrix_sync.raise_business_alert('duplicate_contacts', 'low', $1, $2)",
      [randomBytes(32).toString("hex"), userId],
    )
    .then((r) => r.rows[0]?.id as string);
}

const alertStatus = (id: string) =>
  rig.db.pool
    .query<{ status: string }>("select status from bitrix_sync.business_alerts where id = $1", [id])
    .then((r) => r.rows[0]?.status);

/** Waits until the user's newest workflow of `type` has finished. */
async function workflowOf(userId: string, type: string) {
  return await waitFor(
    async () => {
      const { rows } = await rig.db.pool.query(
        "select * from bitrix_sync.workflow_instances where user_id = $1 and workflow_type = $2 and state in ('succeeded', 'failed') order by created_at desc limit 1",
        [userId, type],
      );
      return rows[0];
    },
    20_000,
    `${type} of ${userId}`,
  );
}

test.serial(
  "success: the link moves to the target, the previous Contact is checked again and cleared, the alerts resolve after",
  async (t) => {
    const { u, contact: previous } = await linked();
    const target = freeContact();
    const alert = await raiseDuplicates(u.id);
    const id = await request(u.id, target.id);
    const done = await finished(id);
    t.like(done, { status: "succeeded", failure_code: null, outcome: "rebound" });
    t.is(target.uf[F.userId], u.id);
    t.is(target.uf[F.registered], 1);
    t.falsy(previous.uf[F.userId], "the previous Contact no longer carries the user");
    t.is(previous.uf[F.registered], 0);
    t.deepEqual(await links(u.id), [
      { external_id: String(previous.id), status: "closed", close_reason: "rebound" },
      { external_id: String(target.id), status: "active", close_reason: null },
    ]);
    t.is(await alertStatus(alert), "resolved");
    t.deepEqual(await commands(done.workflow_id), [
      "contact.read succeeded",
      "contact.update:self succeeded",
      "contact.read succeeded",
      "contact.update:clear succeeded",
    ]);
    // While the workflow waited for the CRM the old link was the active one and the alert open.
    const path = await watched(done.workflow_id);
    for (const p of path.slice(0, -1))
      t.like(p, { active_contact: String(previous.id), open_alerts: 1 }, p.state);
    t.like(path.at(-1), { state: "succeeded", active_contact: String(target.id), open_alerts: 0 });
  },
);

test.serial(
  "the clear fails transiently: the workflow waits with the old link, reads again, then completes",
  async (t) => {
    const { u, contact: previous } = await linked();
    const target = freeContact();
    const alert = await raiseDuplicates(u.id);
    // The target write passes; the clear of the previous Contact is refused before it executes.
    rig.emulator.failNext(
      { kind: "http_error", status: 408, error: "REQUEST_TIMEOUT", description: "Request timeout" },
      { method: "crm.contact.update", skip: 1 },
    );
    const done = await finished(await request(u.id, target.id));
    t.like(done, { status: "succeeded", outcome: "rebound" });
    t.deepEqual(await commands(done.workflow_id), [
      "contact.read succeeded",
      "contact.update:self succeeded",
      "contact.read succeeded",
      "contact.update:clear dead_letter",
      "contact.read succeeded",
      "contact.update:clear succeeded",
    ]);
    const path = await watched(done.workflow_id);
    const waiting = path.filter((p) => p.state === "waiting_retry");
    t.is(waiting.length, 1, "the workflow waited (waiting_retry)");
    t.like(
      waiting[0],
      { active_contact: String(previous.id), open_alerts: 1 },
      "the new link not active yet",
    );
    t.falsy(previous.uf[F.userId]);
    t.is(target.uf[F.userId], u.id);
    t.is(await alertStatus(alert), "resolved");
    const dlq = await rig.db.pool.query(
      "select 1 from bitrix_sync.technical_dead_letters where workflow_id = $1",
      [done.workflow_id],
    );
    t.is(dlq.rows.length, 0, "a transient failure is no technical dead letter");
  },
);

test.serial(
  "a retried clear reads the previous Contact again and leaves it alone once another user holds it",
  async (t) => {
    const { u, contact: previous } = await linked();
    const other = await linked();
    const target = freeContact();
    rig.emulator.setLatency(400);
    try {
      rig.emulator.failNext(
        { kind: "http_error", status: 408, error: "REQUEST_TIMEOUT", description: "Request timeout" },
        { method: "crm.contact.update", skip: 1 },
      );
      const id = await request(u.id, target.id);
      const { rows } = await rig.db.pool.query<{ workflow_id: string }>(
        "select workflow_id from bitrix_sync.rebind_requests where id = $1",
        [id],
      );
      // While the first clear is on its way (and about to fail), a manager puts another user on it.
      await waitFor(
        async () => {
          const c = await rig.db.pool.query(
            "select 1 from bitrix_sync.crm_commands where workflow_id = $1 and params->>'set_user' = 'clear' and status = 'in_flight'",
            [rows[0]?.workflow_id],
          );
          return c.rows.length > 0;
        },
        20_000,
        "the clear in flight",
      );
      previous.uf[F.userId] = other.u.id;
      const done = await finished(id);
      t.like(done, { status: "succeeded", outcome: "rebound" });
      t.deepEqual(await commands(done.workflow_id), [
        "contact.read succeeded",
        "contact.update:self succeeded",
        "contact.read succeeded",
        "contact.update:clear dead_letter",
        "contact.read succeeded",
      ]);
      t.is(previous.uf[F.userId], other.u.id, "not cleared: it no longer held this user");
    } finally {
      rig.emulator.setLatency(0);
    }
  },
);

test.serial(
  "the clear gets no answer: the Contact is read again, once a late clear would have landed",
  async (t) => {
    const { u, contact: previous } = await linked();
    const target = freeContact();
    // The clear lands in the portal but its answer never comes (uncertain).
    rig.emulator.failNext("timeout_after_commit", { method: "crm.contact.update", skip: 1 });
    const done = await finished(await request(u.id, target.id));
    t.like(done, { status: "succeeded", outcome: "rebound" });
    t.deepEqual(await commands(done.workflow_id), [
      "contact.read succeeded",
      "contact.update:self succeeded",
      "contact.read succeeded",
      "contact.update:clear dead_letter",
      "contact.read succeeded",
    ]);
    t.falsy(previous.uf[F.userId]);
    // The read again waits (waiting_retry) until the unanswered clear would have landed: given up after
    // the client's 2 s deadline, twice that again, so at least 6 s after the clear was sent.
    const { rows } = await rig.db.pool.query<{ gap_ms: number }>(
      `select extract(epoch from (select created_at from bitrix_sync.crm_commands
                                 where workflow_id = $1 order by id desc limit 1)
                            - (select sent_at from bitrix_sync.crm_commands
                                where workflow_id = $1 and command_type = 'contact.update'
                                order by id desc limit 1)) * 1000 as gap_ms`,
      [done.workflow_id],
    );
    t.true(Number(rows[0]?.gap_ms) >= 6_000, `read again ${rows[0]?.gap_ms} ms after the clear was sent`);
    t.true((await watched(done.workflow_id)).some((w) => w.state === "waiting_retry"));
  },
);

test.serial(
  "retries exhausted on the target write: failed with a code, the link unchanged, a new request possible",
  async (t) => {
    const { u, contact } = await linked();
    const target = freeContact();
    rig.emulator.setLatency(400);
    let id: string;
    try {
      rig.emulator.failNext(
        { kind: "http_error", status: 408, error: "REQUEST_TIMEOUT", description: "Request timeout" },
        {
          method: "crm.contact.update",
        },
      );
      id = await request(u.id, target.id);
      // The write was first sent a day ago, as far as the horizon (retry.horizon_sec) is concerned.
      const cmd = await waitFor(
        async () => {
          const { rows } = await rig.db.pool.query<{ id: string }>(
            `select c.id from bitrix_sync.crm_commands c join bitrix_sync.rebind_requests r on r.workflow_id = c.workflow_id
          where r.id = $1 and c.params->>'set_user' = 'self' and c.status = 'in_flight'`,
            [id],
          );
          return rows[0];
        },
        20_000,
        "the target write in flight",
      );
      await forceRow(rig.db.pool, "bitrix_sync.crm_commands", cmd.id, {
        first_sent_at: new Date(Date.now() - 25 * 3600_000),
      });
    } finally {
      rig.emulator.setLatency(0);
    }
    const done = await finished(id);
    t.like(done, {
      status: "failed",
      failure_code: "retry_horizon_exceeded",
      outcome: "target_write_unconfirmed",
    });
    t.deepEqual(await links(u.id), [
      { external_id: String(contact.id), status: "active", close_reason: null },
    ]);
    const dlq = await rig.db.pool.query(
      "select error_code from bitrix_sync.technical_dead_letters where workflow_id = $1",
      [done.workflow_id],
    );
    t.deepEqual(dlq.rows, [{ error_code: "retry_horizon_exceeded" }]);
    t.like(await rebind(u.id, target.id), { status: "succeeded" }, "the user can be rebound again");
  },
);

test.serial(
  "a permanent CRM error on the clear fails the request and records that the target was written",
  async (t) => {
    const { u, contact: previous } = await linked();
    const target = freeContact();
    rig.emulator.failNext(
      { kind: "command_error", error: "ACCESS_DENIED", description: "Access denied", status: 403 },
      { method: "crm.contact.update", skip: 1 },
    );
    t.deepEqual(await rebind(u.id, target.id), {
      status: "failed",
      failure_code: "permission_denied",
      outcome: "target_written_clear_unconfirmed",
    });
    t.deepEqual(await links(u.id), [
      { external_id: String(previous.id), status: "active", close_reason: null },
    ]);
    t.is(target.uf[F.userId], u.id, "what the outcome says: the target carries the user");
    t.like(await rebind(u.id, target.id), { status: "succeeded" }, "asking again finishes the job");
    t.falsy(previous.uf[F.userId]);
  },
);

test.serial(
  "the target is held by another active user at worker time: failed, business alert, link untouched",
  async (t) => {
    const { u, contact } = await linked();
    const other = await linked();
    // The target carries another active user's id in the CRM but no mapping, so the request is
    // accepted and only the workflow's read of the target can refuse it.
    const target = rig.emulator.store.createContact({ uf: { [F.userId]: other.u.id, [F.registered]: 1 } });
    t.deepEqual(await rebind(u.id, target.id), {
      status: "failed",
      failure_code: "target_bound_to_other_user",
      outcome: "crm_unchanged",
    });
    t.is(target.uf[F.userId], other.u.id, "the target was not touched");
    t.deepEqual(await links(u.id), [
      { external_id: String(contact.id), status: "active", close_reason: null },
    ]);
    const { rows } = await rig.db.pool.query(
      "select alert_type, status, selected_contact_id, details from bitrix_sync.business_alerts where user_id = $1 and alert_type = 'contact_bound_to_other_user'",
      [u.id],
    );
    t.deepEqual(rows, [
      {
        alert_type: "contact_bound_to_other_user",
        status: "open",
        selected_contact_id: String(target.id),
        details: { source: "rebind" },
      },
    ]);
  },
);

test.serial("a phone change during the rebind is carried out after it, on the new Contact", async (t) => {
  const { u, contact: previous } = await linked();
  const target = freeContact();
  const oldPhone = u.phone;
  rig.emulator.setLatency(300);
  let id: string;
  const newPhone = randomPhone();
  try {
    id = await request(u.id, target.id);
    await waitFor(
      async () => {
        const { rows } = await rig.db.pool.query(
          "select 1 from bitrix_sync.rebind_requests where id = $1 and status = 'in_progress'",
          [id],
        );
        return rows.length > 0;
      },
      20_000,
      "the rebind in progress",
    );
    await asRole(rig.db.pool, "han_app_user", (c) =>
      c.query("update han_app.user_identity set phone_number = $2 where id = $1", [u.id, newPhone]),
    );
  } finally {
    rig.emulator.setLatency(0);
  }
  const done = await finished(id);
  t.like(done, { status: "succeeded" });
  const update = await workflowOf(u.id, "contact.update");
  t.like(update, { state: "succeeded", outcome: "updated" });
  const { rows } = await rig.db.pool.query<{ workflow_type: string; held_intent_type: string | null }>(
    "select workflow_type, held_intent_type from bitrix_sync.workflow_instances where user_id = $1 order by created_at",
    [u.id],
  );
  t.deepEqual(rows, [
    { workflow_type: "contact.map_or_create", held_intent_type: null },
    { workflow_type: "contact.rebind", held_intent_type: "contact.update" },
    { workflow_type: "contact.update", held_intent_type: null },
  ]);
  t.true(
    target.phones.some((p) => p.value === newPhone),
    "the new phone went to the Contact the user is linked to now",
  );
  t.false(
    previous.phones.some((p) => p.value === newPhone),
    "not to the previous one",
  );
  t.true(previous.phones.some((p) => p.value === oldPhone));
});

test.serial("a deactivation during the rebind is carried out after it: the new link is closed", async (t) => {
  const { u } = await linked();
  const target = freeContact();
  rig.emulator.setLatency(300);
  let id: string;
  try {
    id = await request(u.id, target.id);
    await waitFor(
      async () => {
        const { rows } = await rig.db.pool.query(
          "select 1 from bitrix_sync.rebind_requests where id = $1 and status = 'in_progress'",
          [id],
        );
        return rows.length > 0;
      },
      20_000,
      "the rebind in progress",
    );
    await rig.db.pool.query("update han_app.user_identity set record_status = 'inactive' where id = $1", [
      u.id,
    ]);
  } finally {
    rig.emulator.setLatency(0);
  }
  t.like(await finished(id), { status: "succeeded", outcome: "rebound" });
  t.like(await workflowOf(u.id, "contact.deactivate"), { state: "succeeded", outcome: "deactivated" });
  t.is(target.uf[F.registered], 0);
  t.deepEqual((await links(u.id)).slice(-1), [
    { external_id: String(target.id), status: "closed", close_reason: "deactivated" },
  ]);
});
