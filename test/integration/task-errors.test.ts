// A failed graphile-worker task leaves a code, never data (src/worker/task-errors.ts): the runner
// stores the error's message in _private_jobs.last_error and logs it with the stack. Each task is
// made to fail for real (a payload that is not its schema, a database error whose message quotes a
// user id and a phone, a CRM outage whose answer carries values) through the real runner, and
// last_error and every log line are searched for the values.
import { randomBytes, randomUUID } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import test from "ava";
import { makeWorkerUtils } from "graphile-worker";
import { projectRoot } from "../../src/local/project-root.js";
import { DEFAULT_ALERT_SETTINGS } from "../../tools/emulator/store.js";
import { type Rig, startRig, waitFor } from "../helpers/e2e.js";
import { setSettings } from "../helpers/settings.js";

let rig: Rig;
const USER = randomUUID();
const PHONE = "+79161234567";
test.before(async () => {
  rig = await startRig();
  // Alert reconciliation runs only with the alert smart process configured.
  await setSettings(rig.db, { ...DEFAULT_ALERT_SETTINGS });
  await rig.runtime.settings.refresh();
  await rig.startWorker();
});
test.after.always(async () => {
  await rig?.close();
});

/**
 * Queues one attempt of `task` with `payload`; resolves with its last_error once it has failed. A job
 * that ends without an error is queued again: a reconciliation does nothing while another run holds
 * its cursor (the rig's worker runs the crontab's own; a CI run once timed out waiting here).
 */
async function failedJob(task: string, payload: unknown): Promise<string> {
  const end = Date.now() + 60_000;
  for (;;) {
    const utils = await makeWorkerUtils({ pgPool: rig.db.pool });
    let id: string;
    try {
      const job = await utils.addJob(task, payload as Record<string, unknown>, {
        maxAttempts: 1,
        jobKey: `task-errors-${randomUUID()}`,
      });
      id = String(job.id);
    } finally {
      await utils.release();
    }
    const outcome = await waitFor(
      async () => {
        const { rows } = await rig.db.pool.query<{ last_error: string | null; attempts: number }>(
          "select last_error, attempts from graphile_worker._private_jobs where id = $1",
          [id],
        );
        const row = rows[0];
        if (!row) return { succeeded: true as const }; // completed jobs are deleted
        return row.attempts >= 1 && row.last_error ? { lastError: row.last_error } : null;
      },
      30_000,
      `a failed ${task} job`,
    );
    if (outcome.lastError !== undefined) return outcome.lastError;
    if (Date.now() > end) throw new Error(`${task} kept ending without an error`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** Neither last_error nor any log line holds one of the values. */
function assertNoData(t: import("ava").ExecutionContext, lastError: string, values: string[]) {
  const logs = rig.logs.join("");
  for (const v of values) {
    t.false(lastError.includes(v), `last_error quotes ${v}: ${lastError}`);
    t.false(logs.includes(v), `a log line quotes ${v}`);
  }
}

const FIXED = (task: string) => new RegExp(`^${task} failed: [a-z][a-z0-9_]+( \\(SQLSTATE [0-9A-Z]{5}\\))?$`);

test.serial(
  "a payload that is not the task's schema: invalid_payload, and the payload stays out",
  async (t) => {
    for (const [task, payload] of [
      ["sync_loop", { budget_ms: PHONE }],
      ["reconcile_contacts", { force: PHONE }],
      ["reconcile_alerts", { force: USER }],
      ["retention", PHONE],
    ] as const) {
      const lastError = await failedJob(task, payload);
      t.is(lastError, `${task} failed: invalid_payload`, task);
      assertNoData(t, lastError, [PHONE, USER, "expected"]);
    }
  },
);

test.serial(
  "a database error quoting a user id and a phone: database_error with its SQLSTATE only",
  async (t) => {
    // A fault in the database itself: the reconciliation cursor refuses every change with a message
    // that quotes data, as a BS error naming a row or a cast of a bad parameter would.
    await rig.db.pool.query(`
    create function public.test_fault() returns trigger language plpgsql as $$
    begin
      raise exception 'cursor of user % with phone % refused', '${USER}', '${PHONE}';
    end $$;
    create trigger test_fault before insert or update on bitrix_sync.reconciliation_cursors
      for each row execute function public.test_fault();`);
    t.teardown(() =>
      rig.db.pool.query(
        "drop trigger if exists test_fault on bitrix_sync.reconciliation_cursors; drop function if exists public.test_fault()",
      ),
    );
    for (const task of ["reconcile_contacts", "reconcile_alerts"]) {
      const lastError = await failedJob(task, { force: true });
      t.regex(lastError, FIXED(task));
      t.is(lastError, `${task} failed: database_error (SQLSTATE P0001)`);
      assertNoData(t, lastError, [PHONE, USER, "refused", "cursor of user"]);
    }
  },
);

test.serial("a CRM outage whose answer carries values: the classifier's code only", async (t) => {
  // An open alert with an item, so that alert reconciliation has something to read.
  const { rows } = await rig.db.pool.query<{ id: string }>(
    "select id from bitrix_sync.raise_business_alert('duplicate_contacts', 'low', $1, $2, '801', null, '[\"801\"]', '{}', null)",
    [randomBytes(32).toString("hex"), randomUUID()],
  );
  await rig.db.pool.query("select bitrix_sync.record_alert_item($1, 9001, 'DT1040_7:NEW')", [rows[0]?.id]);
  rig.emulator.setOutage({
    kind: "http_error",
    status: 503,
    error: `USER_${USER}`,
    description: `phone ${PHONE}`,
  });
  t.teardown(() => rig.emulator.setOutage(null));
  for (const task of ["reconcile_contacts", "reconcile_alerts"]) {
    const lastError = await failedJob(task, { force: true });
    t.regex(lastError, FIXED(task));
    t.notRegex(lastError, /SQLSTATE/);
    assertNoData(t, lastError, [PHONE, USER]);
  }
});

test("every task in tasks/ is wrapped, under its own identifier", (t) => {
  const dir = join(projectRoot, "tasks");
  const files = readdirSync(dir).filter((f) => f.endsWith(".ts"));
  t.true(files.length >= 4);
  for (const f of files) {
    const id = f.replace(/\.ts$/, "");
    t.regex(readFileSync(join(dir, f), "utf8"), new RegExp(`safeTask\\("${id}",`), f);
  }
});
