// The public edge's database side (sql/webhooks/edge_refusals.sql, sql/reconciliation/spikes.sql): the journal
// of refused source addresses as the runtime role records it (grouped, validated, bounded to 30 days
// and 10 000 rows) and the admin reads it (which addresses are new), and a reconciliation run's
// recovered-without-webhook spike, recorded under its lease and exported by metrics_snapshot.
import { randomUUID } from "node:crypto";
import test from "ava";
import { asRole, asRoleRolledBack } from "../helpers/roles.js";
import { one, rejectsWith } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

const RECORD =
  "select bitrix_sync.record_refused_sources($1::inet[], $2::text[], $3::int[], $4::timestamptz[], $5::timestamptz[]) as n";
const ago = (sec: number) => new Date(Date.now() - sec * 1000);

test.serial(
  "the runtime role records refused sources: summed per address and route, first and last kept",
  async (t) => {
    await asRole(db.pool, "bitrix_sync_user", async (c) => {
      await c.query(RECORD, [
        ["198.51.100.7", "198.51.100.7", "2001:db8::7"],
        ["contact", "contact", "none"],
        [2, 3, 1],
        [ago(60), ago(50), ago(40)],
        [ago(55), ago(10), ago(40)],
      ]);
      await c.query(RECORD, [["198.51.100.7"], ["contact"], [1], [ago(5)], [ago(5)]]);
    });
    const rows = await asRole(db.pool, "bitrix_sync_admin", async (c) => {
      const { rows } = await c.query(
        "select host(source_ip) as ip, receiver, refusals::int, first_seen_at, last_seen_at, new from bitrix_sync.status_refused_sources",
      );
      return rows;
    });
    const v4 = rows.find((r) => r.ip === "198.51.100.7");
    t.like(v4, { receiver: "contact", refusals: 6, new: true });
    t.true(Math.abs(v4.first_seen_at.getTime() - ago(60).getTime()) < 2_000);
    t.true(Math.abs(v4.last_seen_at.getTime() - ago(5).getTime()) < 2_000);
    t.like(
      rows.find((r) => r.ip === "2001:db8::7"),
      { receiver: "none", refusals: 1 },
    );
    // Neither role may touch the journal itself: only the function writes, only the view reads.
    await rejectsWith(
      t,
      asRoleRolledBack(db.pool, "bitrix_sync_user", (c) =>
        c.query("select * from bitrix_sync.refused_sources"),
      ),
      "42501",
    );
    await rejectsWith(
      t,
      asRoleRolledBack(db.pool, "bitrix_sync_admin", (c) =>
        c.query("delete from bitrix_sync.refused_sources"),
      ),
      "42501",
    );
  },
);

test.serial(
  "what is not one address, a known route and a positive count is refused with BS004",
  async (t) => {
    for (const [what, params] of [
      ["a network", [["198.51.100.0/24"], ["contact"], [1], [ago(1)], [ago(1)]]],
      ["another route", [["198.51.100.7"], ["deal"], [1], [ago(1)], [ago(1)]]],
      ["no count", [["198.51.100.7"], ["contact"], [0], [ago(1)], [ago(1)]]],
      ["last before first", [["198.51.100.7"], ["contact"], [1], [ago(1)], [ago(9)]]],
      ["arrays of other lengths", [["198.51.100.7"], ["contact", "alert"], [1], [ago(1)], [ago(1)]]],
    ] as const) {
      const e = await rejectsWith(t, db.pool.query(RECORD, params as unknown as unknown[]), "BS004", what);
      t.truthy(e.hint, what);
    }
  },
);

test.serial(
  "the journal is bounded: 30 days after the last refusal, and only a day counts as new",
  async (t) => {
    await db.pool.query(RECORD, [
      ["192.0.2.1", "192.0.2.2"],
      ["alert", "alert"],
      [1, 1],
      [ago(40 * 86_400), ago(3 * 86_400)],
      [ago(31 * 86_400), ago(2 * 86_400)],
    ]);
    const { rows } = await db.pool.query(
      "select host(source_ip) as ip, new from bitrix_sync.status_refused_sources where receiver = 'alert'",
    );
    // The 31-day-old row was deleted by the same call; the 2-day-old one is kept, and not new.
    t.deepEqual(rows, [{ ip: "192.0.2.2", new: false }]);
    const { rows: all } = await db.pool.query(
      "select 1 from bitrix_sync.refused_sources where source_ip = '192.0.2.1'",
    );
    t.is(all.length, 0);
  },
);

test.serial("past 10 000 addresses the least recently seen go", async (t) => {
  const n = 10_050;
  const ips = Array.from({ length: n }, (_, i) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`);
  const at = ips.map((_, i) => ago(n - i));
  await db.pool.query(RECORD, [
    ips.slice(0, 10_000),
    ips.slice(0, 10_000).map(() => "none"),
    ips.slice(0, 10_000).map(() => 1),
    at.slice(0, 10_000),
    at.slice(0, 10_000),
  ]);
  await db.pool.query(RECORD, [
    ips.slice(10_000),
    ips.slice(10_000).map(() => "none"),
    ips.slice(10_000).map(() => 1),
    at.slice(10_000),
    at.slice(10_000),
  ]);
  const { rows } = await db.pool.query<{ n: number }>(
    "select count(*)::int as n from bitrix_sync.refused_sources where receiver = 'none' and source_ip << '10.0.0.0/8'",
  );
  const { rows: total } = await db.pool.query<{ n: number }>(
    "select count(*)::int as n from bitrix_sync.refused_sources",
  );
  t.is(total[0]?.n, 10_000);
  t.false(
    (await db.pool.query("select 1 from bitrix_sync.refused_sources where source_ip = '10.0.0.0'")).rows
      .length > 0,
    "the least recently seen address went",
  );
  t.true((rows[0]?.n ?? 0) > 9_900);
});

test.serial(
  "a spike is recorded only by the run that holds the cursor, and metrics_snapshot exports its time",
  async (t) => {
    const before = await one<{ value: number }>(
      db.pool,
      "select value from bitrix_sync.metrics_snapshot(null, false) where family = 'bitrix_sync_reconciliation_recovered_spike_timestamp_seconds'",
    );
    t.is(before.value, 0, "0 before the first spike");
    const claim = await one<{ lease_token: string }>(
      db.pool,
      "select lease_token from bitrix_sync.claim_reconciliation_cursor('contacts', interval '0', true)",
    );
    await rejectsWith(
      t,
      db.pool.query("select bitrix_sync.record_recovered_spike('contacts', $1, 5, 10, 1)", [randomUUID()]),
      "BS001",
      "a stale lease",
    );
    await rejectsWith(
      t,
      db.pool.query("select bitrix_sync.record_recovered_spike('contacts', $1, 11, 10, 1)", [
        claim.lease_token,
      ]),
      "BS004",
      "more recovered than read",
    );
    const spike = await asRole(db.pool, "bitrix_sync_user", (c) =>
      one<{ recorded_at: Date; recovered: number; baseline: number | null }>(
        c,
        "select * from bitrix_sync.record_recovered_spike('contacts', $1, 5, 10, null)",
        [claim.lease_token],
      ),
    );
    t.like(spike, { recovered: 5, baseline: null });
    const after = await one<{ value: number }>(
      db.pool,
      "select value from bitrix_sync.metrics_snapshot(null, false) where family = 'bitrix_sync_reconciliation_recovered_spike_timestamp_seconds'",
    );
    t.true(Math.abs(after.value - spike.recorded_at.getTime() / 1000) < 0.001, "to the millisecond");
    const shown = await asRole(db.pool, "bitrix_sync_admin", (c) =>
      one<{ recovered: number; mapped: number }>(
        c,
        "select recovered, mapped from bitrix_sync.status_recovered_spikes",
      ),
    );
    t.deepEqual(shown, { recovered: 5, mapped: 10 });
  },
);
