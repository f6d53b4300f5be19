// Reconciliation runs (§10.2, §10.3) through their SQL functions: the cursor row is the lock, a run
// that died is taken over after reconcile.lease_sec (a hot setting), the lease token fences the
// finish, and the watermark moves only with a successful run. The two cursors are shared by every
// test of this file, so the tests are serial.
import { randomUUID } from "node:crypto";
import test from "ava";
import { withSettings } from "../helpers/settings.js";
import { one, rejectsWith } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

interface Cursor {
  job_type: string;
  watermark: Date | null;
  overlap: { minutes?: number; seconds?: number };
  last_run_started_at: Date | null;
  last_success_at: Date | null;
  last_run_status: string | null;
  last_error_code: string | null;
  last_scanned: number | null;
  last_updated: number | null;
  last_recovered: number | null;
  recovered_baseline: string | null;
  lease_token: string | null;
}

async function claim(job: string, intervalSec: number, force = false, overlapSec: number | null = null) {
  const { rows } = await db.pool.query<Cursor>(
    `select * from bitrix_sync.claim_reconciliation_cursor($1, make_interval(secs => $2), $3,
                                                            case when $4::int is null then null else make_interval(secs => $4) end)`,
    [job, intervalSec, force, overlapSec],
  );
  return rows[0];
}
const cursor = (job: string) =>
  one<Cursor>(db.pool, "select * from bitrix_sync.reconciliation_cursors where job_type = $1", [job]);
const finish = (
  job: string,
  token: string | null,
  scanned: number,
  updated: number,
  recovered: number | null,
) =>
  one<Cursor>(db.pool, "select * from bitrix_sync.finish_reconciliation_run($1, $2, $3, $4, $5)", [
    job,
    token,
    scanned,
    updated,
    recovered,
  ]);
const fail = (job: string, token: string | null, code: string) =>
  one<Cursor>(db.pool, "select * from bitrix_sync.fail_reconciliation_run($1, $2, $3)", [job, token, code]);
/** Moves the last run's start back, as if it had started `sec` seconds ago. */
const startedAgo = (job: string, sec: number) =>
  db.pool.query(
    "update bitrix_sync.reconciliation_cursors set last_run_started_at = now() - make_interval(secs => $2) where job_type = $1",
    [job, sec],
  );

test.serial("the first claim creates the cursor and starts a run under a new lease", async (t) => {
  const run = await claim("contacts", 900, false, 120);
  t.like(run, { job_type: "contacts", last_run_status: "running", watermark: null, overlap: { minutes: 2 } });
  t.truthy(run?.lease_token);
  t.truthy(run?.last_run_started_at);
  t.is(await claim("contacts", 900, true), undefined, "a run in progress is not started twice, even forced");

  const done = await finish("contacts", run?.lease_token ?? null, 10, 3, 2);
  t.like(done, {
    last_run_status: "succeeded",
    last_error_code: null,
    last_scanned: 10,
    last_updated: 3,
    last_recovered: 2,
    lease_token: null,
  });
  t.deepEqual(done.watermark, run?.last_run_started_at, "the watermark is the run's start");
  t.is(Number(done.recovered_baseline), 2);
  await rejectsWith(t, finish("contacts", run?.lease_token ?? null, 1, 1, 1), "BS001");
});

test.serial("a run is due only after the interval, unless forced", async (t) => {
  t.is(await claim("contacts", 3600), undefined, "the last run started moments ago");
  await startedAgo("contacts", 3601);
  const due = await claim("contacts", 3600);
  t.truthy(due?.lease_token);
  const next = await finish("contacts", due?.lease_token ?? null, 0, 0, 7);
  t.is(Number(next.recovered_baseline), 3, "the baseline is smoothed: 2 * 0.8 + 7 * 0.2");
  const forced = await claim("contacts", 3600, true);
  t.truthy(forced?.lease_token);
  await finish("contacts", forced?.lease_token ?? null, 0, 0, 0);
});

test.serial("a failed run keeps the watermark and records a safe code", async (t) => {
  const before = await cursor("contacts");
  const run = await claim("contacts", 0, true);
  await rejectsWith(
    t,
    fail("contacts", run?.lease_token ?? null, "Timeout at https://portal/rest/1/secret"),
    "BS004",
  );
  const failed = await fail("contacts", run?.lease_token ?? null, "server_error");
  t.like(failed, { last_run_status: "failed", last_error_code: "server_error", lease_token: null });
  t.deepEqual(failed.watermark, before.watermark);
  await rejectsWith(t, fail("contacts", run?.lease_token ?? null, "server_error"), "BS001");
  // The next run reads the same window again.
  const again = await claim("contacts", 0, true);
  t.deepEqual(again?.watermark, before.watermark);
  await finish("contacts", again?.lease_token ?? null, 0, 0, 0);
});

test.serial(
  "a run still marked running after reconcile.lease_sec is taken over; its holder is fenced off",
  async (t) => {
    const dead = await claim("alerts", 3600, true);
    t.truthy(dead?.lease_token);
    await startedAgo("alerts", 599);
    t.is(await claim("alerts", 0, true), undefined, "within the default 10 minutes the run is alive");
    await startedAgo("alerts", 601);
    const next = await claim("alerts", 0, true);
    t.truthy(next?.lease_token);
    t.not(next?.lease_token, dead?.lease_token);
    await rejectsWith(t, finish("alerts", dead?.lease_token ?? null, 5, 1, null), "BS001");
    await rejectsWith(t, fail("alerts", dead?.lease_token ?? null, "run_failed"), "BS001");
    const done = await finish("alerts", next?.lease_token ?? null, 5, 1, null);
    t.like(done, { last_scanned: 5, last_updated: 1, last_recovered: null, recovered_baseline: null });

    // The window is the hot setting.
    const again = await claim("alerts", 0, true);
    await startedAgo("alerts", 120);
    t.is(await claim("alerts", 0, true), undefined);
    await withSettings(db.pool, { "reconcile.lease_sec": 60 }, async () => {
      const taken = await claim("alerts", 0, true);
      t.truthy(taken?.lease_token, "two minutes exceed a one-minute lease");
      await finish("alerts", taken?.lease_token ?? null, 0, 0, null);
    });
    await rejectsWith(t, finish("alerts", again?.lease_token ?? null, 0, 0, null), "BS001");
  },
);

test.serial("claims refuse a negative interval (BS004) and an unknown job (CHECK)", async (t) => {
  const err = await rejectsWith(t, claim("contacts", -1), "BS004");
  t.truthy(err.hint);
  await rejectsWith(t, claim("everything", 60), "23514");
  await rejectsWith(t, finish("contacts", randomUUID(), 0, 0, 0), "BS001");
});

test("the SQL reading of a setting fills the catalogue default and refuses an unknown key", async (t) => {
  const { v } = await one<{ v: number }>(
    db.pool,
    "select bitrix_sync._active_setting('reconcile.lease_sec') as v",
  );
  t.is(v, 600);
  const err = await rejectsWith(
    t,
    db.pool.query("select bitrix_sync._active_setting('retry.horizon')"),
    "BS004",
  );
  t.truthy(err.hint);
});

test.serial(
  "a failed run is due again at its backoff, not after the interval; failures count until a success",
  async (t) => {
    const failWith = (token: string | null, code: string, retrySec: number | null) =>
      one<Cursor & { failed_runs: number; retry_at: Date | null }>(
        db.pool,
        `select * from bitrix_sync.fail_reconciliation_run($1, $2, $3,
                  case when $4::float8 is null then null else make_interval(secs => $4) end)`,
        ["alerts", token, code, retrySec],
      );
    const first = await claim("alerts", 3600, true);
    t.is((first as unknown as { failed_runs: number }).failed_runs, 0);
    const failed = await failWith(first?.lease_token ?? null, "server_error", 2);
    t.is(failed.failed_runs, 1);
    t.truthy(failed.retry_at);
    t.is(await claim("alerts", 3600), undefined, "not before its retry time");
    await db.pool.query(
      "update bitrix_sync.reconciliation_cursors set retry_at = now() - interval '1 second' where job_type = 'alerts'",
    );
    const retried = await claim("alerts", 3600);
    t.truthy(retried?.lease_token, "due at its retry time although the hour has not passed");
    t.is(
      (retried as unknown as { failed_runs: number }).failed_runs,
      1,
      "the claim says how many failed before",
    );
    const twice = await failWith(retried?.lease_token ?? null, "server_error", 0);
    t.is(twice.failed_runs, 2);
    // Given back at shutdown: due at once, and not a failure.
    const third = await claim("alerts", 3600);
    t.truthy(third?.lease_token);
    const stopped = await failWith(third?.lease_token ?? null, "shutdown", null);
    t.is(stopped.failed_runs, 2);
    const fourth = await claim("alerts", 3600);
    t.truthy(fourth?.lease_token, "the next replica starts at once");
    // Without a delay (an older caller): due after the interval, as before.
    const plain = await fail("alerts", fourth?.lease_token ?? null, "server_error");
    t.like(plain, { last_run_status: "failed" });
    t.is(await claim("alerts", 3600), undefined);
    await startedAgo("alerts", 3601);
    const late = await claim("alerts", 3600);
    t.truthy(late?.lease_token);
    await rejectsWith(
      t,
      db.pool.query(
        "select bitrix_sync.fail_reconciliation_run('alerts', $1, 'server_error', interval '-1 second')",
        [late?.lease_token],
      ),
      "BS004",
    );
    const ok = await one<{ failed_runs: number; retry_at: Date | null }>(
      db.pool,
      "select * from bitrix_sync.finish_reconciliation_run('alerts', $1, 0, 0)",
      [late?.lease_token],
    );
    t.like(ok, { failed_runs: 0, retry_at: null });
  },
);
