// The citizenship dictionary when the portal has no usable list (§3.3): the field deleted or renamed
// by a CRM admin, or its list emptied. The answer is cached for the TTL like a present list, so a
// backlog of creates costs one crm.contact.userfield.list, not one per batch; readiness says
// degraded with the reason, a metric and a log line say the same.

import { randomUUID } from "node:crypto";
import test from "ava";
import { collectScrape } from "../../src/http/scrape.js";
import { readiness } from "../../src/http/status.js";
import { registry } from "../../src/observability/metrics.js";
import { finishedWorkflow, type Rig, startRig } from "../helpers/e2e.js";
import { foldJournal, randomPhone } from "../helpers/factories.js";

async function signUp(rig: Rig, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const id = randomUUID();
    // Identity and profile in one statement, as the App signs a user up; a citizenship the create
    // would like to send.
    await rig.db.pool.query(
      `with u as (insert into han_app.user_identity (id, phone_number, record_status) values ($1, $2, 'active') returning id)
       insert into han_app.client_profile (user_id, full_name, citizenship, record_status)
       select id, 'Dict User', 'Россия', 'active' from u`,
      [id, randomPhone()],
    );
    ids.push(id);
  }
  await foldJournal(rig.db.pool);
  return ids;
}

function dictionaryReads(rig: Rig): number {
  return rig.emulator.log.filter((e) => e.commands.includes("crm.contact.userfield.list")).length;
}

function statusSource(rig: Rig) {
  return {
    config: rig.runtime.config,
    health: rig.runtime.health,
    limiter: rig.runtime.crm.limiter,
    settings: rig.runtime.settings,
  };
}

for (const [what, emulator, problem] of [
  [
    "the citizenship field is missing from the portal",
    { userFieldTypes: { citizenship: null } },
    "citizenship_field_missing",
  ],
  ["the citizenship list is empty", { citizenship: [] as never[] }, "citizenship_list_empty"],
] as const) {
  test.serial(`${what}: a backlog of creates reads the dictionary once, and readiness says so`, async (t) => {
    const rig = await startRig({
      emulator,
      settings: { "batch.size": 5, "batch.max_wait_ms": 20 },
    });
    try {
      const users = await signUp(rig, 30);
      await rig.startWorker();
      for (const id of users) {
        const wf = await finishedWorkflow(rig, id, 30_000);
        t.is(wf.state, "succeeded", "the Contact is created without citizenship");
      }
      // 30 users in batches of 5: at least 6 batches of finds and 6 of adds went out.
      const batches = rig.emulator.log.filter((e) => e.method === "batch").length;
      t.true(batches >= 12, `${batches} batches`);
      t.is(dictionaryReads(rig), 1, "one read of crm.contact.userfield.list for the whole backlog");

      const r = await readiness(rig.db.pool, statusSource(rig));
      t.is(r.status, "degraded");
      t.true(r.problems.includes(problem), r.problems.join(","));

      await collectScrape({ pool: rig.db.pool, status: statusSource(rig) });
      const gauge = (await registry.getSingleMetric("bitrix_sync_citizenship_dictionary_items")?.get())
        ?.values;
      t.is(gauge?.[0]?.value, 0);
      const state =
        (await registry.getSingleMetric("bitrix_sync_citizenship_dictionary_state")?.get())?.values ?? [];
      t.is(
        state.find((v) => v.value === 1)?.labels.state,
        problem === "citizenship_field_missing" ? "field_missing" : "list_empty",
      );

      const line = rig.logs.find((l) => l.includes('"event":"citizenship.dictionary_unusable"'));
      t.truthy(line, "a log line says what is wrong");
      t.regex(line ?? "", /citizenship/);
    } finally {
      await rig.close();
    }
  });
}
