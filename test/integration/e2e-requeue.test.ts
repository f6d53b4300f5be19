// The operator's loop end to end (issue 11): the portal refuses a sub-command for rights inside an
// answered batch, so the command is dead-lettered, the workflow fails and readiness drops; an admin
// fixes the rights, requeues the dead letter from psql, and the same workflow starts over and
// finishes, readiness recovers, and the open-DLQ gauge is back where it was.
import test from "ava";
import { collectScrape } from "../../src/http/scrape.js";
import { readiness } from "../../src/http/status.js";
import { registry } from "../../src/observability/metrics.js";
import { queryAsRole } from "../helpers/dead-letters.js";
import { finishedWorkflow, type Rig, startRig, waitFor } from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";
import { one } from "../helpers/sql-core.js";

let rig: Rig;
test.before(async () => {
  rig = await startRig();
  await rig.startWorker();
});
test.after.always(async () => {
  await rig?.close();
});

const openGauge = async () => {
  await collectScrape({ pool: rig.db.pool });
  const values = (await registry.getSingleMetric("bitrix_sync_dead_letters_open")?.get())?.values ?? [];
  return values.reduce((n, v) => n + v.value, 0);
};

test("a workflow failed by a permission refusal finishes after the admin requeues its dead letter", async (t) => {
  const src = {
    config: rig.runtime.config,
    health: rig.runtime.health,
    limiter: rig.runtime.crm.limiter,
    settings: rig.runtime.settings,
  };
  const gaugeBefore = await openGauge();
  rig.emulator.failNext(
    { kind: "command_error", error: "ACCESS_DENIED", description: "Access denied", status: 400 },
    { method: "crm.duplicate.findbycomm" },
  );
  const u = await makeUser(rig.db.pool, { phone: randomPhone() });
  const failed = await finishedWorkflow(rig, u.id);
  t.like(failed, { state: "failed", last_error_code: "permission_denied" });
  t.true((await readiness(rig.db.pool, src)).problems.includes("crm_permission_denied"));
  t.is(await openGauge(), gaugeBefore + 1);

  const listed = await queryAsRole<{
    id: string;
    operation: string;
    error_code: string;
    requeue: string;
    workflow_state: string;
  }>(
    rig.db.pool,
    "bitrix_sync_admin",
    "select * from bitrix_sync.list_dead_letters() where workflow_id = $1",
    [failed.id],
  );
  t.is(listed.length, 1);
  t.like(listed[0], {
    operation: "contact.find_by_phone",
    error_code: "permission_denied",
    requeue: "ready",
    workflow_state: "failed",
  });

  const [r] = await queryAsRole<{ requeued_to: string }>(
    rig.db.pool,
    "bitrix_sync_admin",
    "select * from bitrix_sync.requeue_dead_letter($1, 'ops:test', 'webhook scope crm added')",
    [listed[0]?.id],
  );
  t.is(r?.requeued_to, `workflow:${failed.id}`);
  const done = await waitFor(async () => {
    const w = await one<{ state: string; outcome: string | null }>(
      rig.db.pool,
      "select state, outcome from bitrix_sync.workflow_instances where id = $1",
      [failed.id],
    );
    return w.state === "succeeded" ? w : null;
  });
  t.is(done.outcome, "created");
  const mapping = await one<{ external_id: string }>(
    rig.db.pool,
    "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
    [u.id],
  );
  t.truthy(rig.emulator.store.contacts.get(Number(mapping.external_id)), "the Contact exists in the CRM");
  const phoneHolders = [...rig.emulator.store.contacts.values()].filter((c) =>
    c.phones.some((p) => p.value === u.phone),
  );
  t.is(phoneHolders.length, 1, "one Contact for the user");
  t.false(
    (await readiness(rig.db.pool, src)).problems.includes("crm_permission_denied"),
    "crm.duplicate.findbycomm answered again: ready",
  );
  t.is(await openGauge(), gaugeBefore);
  const dl = await one<{ resolution: string; resolved_by: string; resolution_reason: string }>(
    rig.db.pool,
    "select resolution, resolved_by, resolution_reason from bitrix_sync.technical_dead_letters where id = $1",
    [listed[0]?.id],
  );
  t.deepEqual(dl, {
    resolution: "requeued",
    resolved_by: "ops:test",
    resolution_reason: "webhook scope crm added",
  });
  // Nothing about the user reached the log lines of the whole loop.
  const logs = rig.logs.join("");
  t.false(logs.includes(u.id));
  t.false(logs.includes(u.phone));
});
