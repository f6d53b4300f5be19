// The sync_loop task's hand-over: with a short budget the loop ends and a successor takes over many
// times; work keeps flowing, and this process never runs two loops at once.
import test from "ava";
import { makeWorkerUtils } from "graphile-worker";
import { runningLoops } from "../../src/sync-loop.js";
import { finishedWorkflow, type Rig, startRig } from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";

let rig: Rig;
test.before(async () => {
  rig = await startRig();
});
test.after.always(async () => {
  await rig?.close();
});

test("short budgets hand over without a gap; never more than a loop and its successor", async (t) => {
  // The successor is enqueued with the default payload, so keep re-adding short-budget jobs the way
  // the cron entry would, racing the hand-over.
  await rig.startWorker({ budget_ms: 1500 });
  const utils = await makeWorkerUtils({ pgPool: rig.db.pool });
  let maxLoops = 0;
  const sample = setInterval(() => {
    maxLoops = Math.max(maxLoops, runningLoops());
  }, 5);
  try {
    const lags: number[] = [];
    for (let i = 0; i < 8; i++) {
      await utils.addJob("sync_loop", { budget_ms: 1500 });
      const started = Date.now();
      const u = await makeUser(rig.db.pool, { phone: randomPhone() });
      const wf = await finishedWorkflow(rig, u.id, 20_000);
      t.is(wf.state, "succeeded");
      lags.push(Date.now() - started);
      await new Promise((r) => setTimeout(r, 400));
    }
    t.log(`lags ms: ${lags.join(", ")}`);
    t.true(maxLoops <= 2, `at most a loop and its successor at a time (saw ${maxLoops})`);
  } finally {
    clearInterval(sample);
    await utils.release();
  }
});
