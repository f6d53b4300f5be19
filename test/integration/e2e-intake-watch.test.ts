// The intake watch (sql/enqueue.sql, src/sync-loop.ts; issue 14): a sync loop with nothing to take
// in sleeps holding the watch, so the App's next intent NOTIFYs it; the intent is processed, and the
// loop, asleep again, holds the watch again. Runs as the runtime role, so the grants are exercised.
import test from "ava";
import { finishedWorkflow, type Rig, startRig } from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";

let rig: Rig;
test.before(async () => {
  rig = await startRig({ asRuntimeRole: true });
});
test.after.always(async () => {
  await rig?.close();
});

/** Waits until the watch connection of a sync loop holds the intake watch (a state, not a time). */
async function watchHeld(): Promise<void> {
  for (;;) {
    const { rows } = await rig.db.pool.query<{ n: number }>(
      `select count(*)::int as n
         from pg_locks l join pg_stat_activity a on a.pid = l.pid
        where l.locktype = 'relation' and l.relation = 'bitrix_sync.lock_intake_watch'::regclass
          and l.mode = 'ShareLock' and l.granted and a.application_name = 'bitrix-sync-watch'`,
    );
    if (rows[0]?.n === 1) return;
    await new Promise((r) => setTimeout(r, 20));
  }
}

test("an idle loop holds the intake watch; the App's intent is processed and the loop watches again", async (t) => {
  await rig.startWorker();
  await watchHeld();
  const u = await makeUser(rig.db.pool, { phone: randomPhone() });
  const wf = await finishedWorkflow(rig, u.id, 20_000);
  t.is(wf.state, "succeeded");
  await watchHeld();
  t.pass("asleep again, the loop watches again");
});
