// The PostgreSQL limiter (sql/limiter.sql + src/crm/limiter.ts) on a real server: two pools stand
// for two replicas sharing one bucket.
import test from "ava";
import pg from "pg";
import { createPgLimiter, type LimiterPermit, type LimiterSettings } from "../../../src/crm/limiter.js";
import { createTestDb, type TestDb } from "../../helpers/testdb.js";

let db: TestDb;
let other: pg.Pool;
test.before(async () => {
  db = await createTestDb();
  other = new pg.Pool({ connectionString: db.url, max: 4 });
  // pg-pool's end() resolves before its idle connections have closed; the forced drop in after.always
  // can then terminate one, which must not crash the test process (as in test/helpers/testdb.ts).
  other.on("error", () => undefined);
});
test.after.always(async () => {
  await other?.end();
  await db?.drop();
});

function limiterOn(
  pool: pg.Pool,
  bucket: string,
  settings: LimiterSettings,
  extra: { slotTtlMs?: number; holder?: string } = {},
) {
  return createPgLimiter({
    pool,
    bucket,
    holder: extra.holder ?? "test",
    settings,
    slotTtlMs: extra.slotTtlMs ?? 10_000,
    adaptive: { recoveryPerSec: 0.25, cooldownMs: 400 },
    maxPollMs: 50,
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test("two replicas hammering one bucket never exceed rate × elapsed + burst", async (t) => {
  const settings = { refillPerSec: 10, burst: 3, maxInFlight: 100 };
  const a = limiterOn(db.pool, "hammer", settings, { holder: "replica-a" });
  const b = limiterOn(other, "hammer", settings, { holder: "replica-b" });
  const grants: number[] = [];
  const started = performance.now();
  const until = started + 2000;
  const worker = async (l: typeof a) => {
    while (performance.now() < until) {
      const p = await l.acquire();
      grants.push(p.grantedAt);
      await p.release();
    }
  };
  await Promise.all([worker(a), worker(a), worker(b), worker(b)]);
  const elapsedSec = (performance.now() - started) / 1000;
  const bound = settings.burst + settings.refillPerSec * elapsedSec;
  t.true(grants.length <= bound, `${grants.length} grants > bound ${bound.toFixed(1)}`);
  // Not starved either: the bucket is used near its rate (a loose lower bound, not a timing test).
  t.true(grants.length >= settings.refillPerSec * elapsedSec * 0.5, `only ${grants.length} grants`);
  // Every window, by the server's clock of each decision, respects the same bound.
  grants.sort((x, y) => x - y);
  for (let i = 0; i < grants.length; i++) {
    for (let j = i; j < grants.length; j++) {
      const span = ((grants[j] as number) - (grants[i] as number)) / 1000;
      const count = j - i + 1;
      t.true(count <= settings.burst + settings.refillPerSec * span + 0.01, `grants ${i}..${j}`);
    }
  }
});

test("the in-flight cap holds across replicas and is reached", async (t) => {
  const settings = { refillPerSec: 200, burst: 50, maxInFlight: 2 };
  const a = limiterOn(db.pool, "inflight", settings);
  const b = limiterOn(other, "inflight", settings);
  let current = 0;
  let peak = 0;
  const work = async (l: typeof a) => {
    for (let i = 0; i < 4; i++) {
      const p = await l.acquire();
      current++;
      peak = Math.max(peak, current);
      await sleep(60);
      current--;
      await p.release();
    }
  };
  await Promise.all([work(a), work(a), work(b), work(b)]);
  t.is(peak, 2);
  const { rows } = await db.pool.query(
    "select count(*)::int as n from bitrix_sync.crm_inflight_slots where bucket = 'inflight'",
  );
  t.is(rows[0].n, 0, "every slot was released");
});

test("a slow request does not hold up another while a token and a slot are free", async (t) => {
  const l = limiterOn(db.pool, "slow", { refillPerSec: 2, burst: 5, maxInFlight: 2 });
  const slow = await l.acquire();
  // Granted while the slow request still holds its slot; were it blocked, this would time out.
  const fast = await l.acquire({ signal: AbortSignal.timeout(5000) });
  t.true(fast.grantedAt >= slow.grantedAt);
  const { rows } = await db.pool.query(
    "select count(*)::int as n from bitrix_sync.crm_inflight_slots where bucket = 'slow'",
  );
  t.is(rows[0].n, 2, "both requests are in flight at once");
  await fast.release();
  const again = await l.acquire();
  await again.release();
  await slow.release();
});

test("a crashed holder's slot frees itself when it expires", async (t) => {
  const l = limiterOn(db.pool, "crash", { refillPerSec: 50, burst: 10, maxInFlight: 1 }, { slotTtlMs: 400 });
  const lost = await l.acquire(); // never released: the holder "crashed"
  const next = await l.acquire();
  const waited = next.grantedAt - lost.grantedAt;
  t.true(waited >= 400, `granted ${waited} ms after the lost slot, before it expired`);
  await next.release();
});

test("after QUERY_LIMIT_EXCEEDED the rate drops, pauses, and climbs back gradually", async (t) => {
  const l = limiterOn(db.pool, "adaptive", { refillPerSec: 10, burst: 2, maxInFlight: 10 });
  await (await l.acquire()).release();
  const t0 = performance.now();
  await l.noteRateLimited();
  await l.noteRateLimited(); // the second refusal of the same moment does not cut again
  const s0 = await l.state();
  t.true(s0.rateFactor > 0.49 && s0.rateFactor < 0.55, String(s0.rateFactor));
  t.not(s0.throttledUntil, null);
  const p = await l.acquire();
  await p.release();
  t.true(performance.now() - t0 >= 390, "nothing is granted during the cool-down");
  await sleep(600);
  const s1 = await l.state();
  t.true(s1.rateFactor > s0.rateFactor && s1.rateFactor < 1, `climbing: ${s1.rateFactor}`);
  await sleep(1600);
  await (await l.acquire()).release();
  const s2 = await l.state();
  t.is(s2.rateFactor, 1);
  const { rows } = await db.pool.query(
    "select rate_limited_count from bitrix_sync.crm_rate_buckets where bucket = 'adaptive'",
  );
  t.is(Number(rows[0].rate_limited_count), 1);
});

test("a reply after a cut doubles the rate back, never inside a refusal's cool-down", async (t) => {
  const factor = async () =>
    Number(
      (await db.pool.query("select rate_factor from bitrix_sync.crm_rate_buckets where bucket = 'answered'"))
        .rows[0].rate_factor,
    );
  // No linear recovery here (0 per second), so only the replies move the factor.
  const answered = () => db.pool.query("select bitrix_sync.note_crm_answered('answered', 2, 0)");
  await db.pool.query("select * from bitrix_sync.acquire_crm_request('answered', 'h', 2, 5, 2, 1000, 0)");
  await db.pool.query("select bitrix_sync.note_rate_limited('answered', 0.25, 0.1, 600000, 0)");
  t.is(await factor(), 0.25);
  await answered();
  t.is(await factor(), 0.25, "inside the cool-down the refusal stands");
  await db.pool.query(
    "update bitrix_sync.crm_rate_buckets set throttled_until = null where bucket = 'answered'",
  );
  await answered();
  t.is(await factor(), 0.5);
  await answered();
  t.is(await factor(), 1);
  await answered();
  t.is(await factor(), 1, "never above the configured rate");
});

test("OPERATION_TIME_LIMIT blocks one method of one bucket until the later of the hint and the last reset", async (t) => {
  const l = limiterOn(db.pool, "methods", { refillPerSec: 2, burst: 5, maxInFlight: 2 });
  const otherBucket = limiterOn(db.pool, "methods-2", { refillPerSec: 2, burst: 5, maxInFlight: 2 });
  const now = Date.now();
  await l.noteOperating([{ method: "crm.contact.update", operating: 470.5, resetAt: now + 120_000 }]);
  const until = await l.noteMethodBlocked("crm.contact.update", now + 1_000);
  t.true(Math.abs(until - (now + 120_000)) < 5, "the stored reset time wins over a shorter hint");
  const blocked = await l.blockedMethods();
  t.deepEqual([...blocked.keys()], ["crm.contact.update"]);
  t.is((await otherBucket.blockedMethods()).size, 0);
  const short = await l.noteMethodBlocked("crm.item.add", Date.now() + 300);
  t.true(short > Date.now());
  t.true((await l.blockedMethods()).has("crm.item.add"));
  await sleep(400);
  t.false((await l.blockedMethods()).has("crm.item.add"), "the block ends by itself");
  const s = await l.state();
  t.deepEqual(
    s.blockedMethods.map((b) => b.method),
    ["crm.contact.update"],
  );
});

test("an aborted wait rejects and takes nothing", async (t) => {
  const l = limiterOn(db.pool, "abort", { refillPerSec: 0.1, burst: 1, maxInFlight: 5 });
  const p: LimiterPermit = await l.acquire();
  await p.release();
  await t.throwsAsync(() => l.acquire({ signal: AbortSignal.timeout(150) }), { name: "AbortError" });
  const { rows } = await db.pool.query(
    "select count(*)::int as n from bitrix_sync.crm_inflight_slots where bucket = 'abort'",
  );
  t.is(rows[0].n, 0);
});

test("errors carry a BS01x SQLSTATE, a sentence and a HINT", async (t) => {
  const cases: Array<[string, unknown[], string]> = [
    ["select * from bitrix_sync.acquire_crm_request($1, 'h', 0, 1, 1, 1000, 0.05)", ["b"], "BS010"],
    ["select * from bitrix_sync.acquire_crm_request($1, 'h', 2, 0, 1, 1000, 0.05)", ["b"], "BS010"],
    ["select bitrix_sync.note_rate_limited($1, 2, 0.1, 1000, 0.05)", ["b"], "BS010"],
    ["select bitrix_sync.note_crm_answered($1, 0.5, 0.05)", ["b"], "BS010"],
    ["select bitrix_sync.note_crm_operating($1, array['m'], array[1.0, 2.0], array[now()])", ["b"], "BS011"],
    ["select * from bitrix_sync.acquire_crm_request($1, 'h', 2, 1, 1, 1000, 0.05)", [""], "BS012"],
    ["select bitrix_sync.note_method_blocked('b', $1)", [""], "BS012"],
  ];
  for (const [sql, params, code] of cases) {
    const e = (await t.throwsAsync(() => db.pool.query(sql, params))) as Error & {
      code?: string;
      hint?: string;
    };
    t.is(e.code, code, sql);
    t.truthy(e.hint, sql);
    t.regex(e.message, /^[a-z].+/, sql);
  }
});

test("the runtime role may use the limiter; public may not", async (t) => {
  const fns = [
    "bitrix_sync.acquire_crm_request(text,text,double precision,integer,integer,integer,double precision)",
    "bitrix_sync.release_crm_request(uuid)",
    "bitrix_sync.note_rate_limited(text,double precision,double precision,integer,double precision)",
    "bitrix_sync.note_crm_answered(text,double precision,double precision)",
    "bitrix_sync.note_method_blocked(text,text,timestamptz)",
    "bitrix_sync.note_crm_operating(text,text[],double precision[],timestamptz[])",
    "bitrix_sync.blocked_crm_methods(text)",
    "bitrix_sync.crm_limiter_state(text)",
  ];
  const { rows } = await db.pool.query<{ fn: string; runtime: boolean; pub: boolean }>(
    `select f as fn,
            has_function_privilege('bitrix_sync_user', f, 'execute') as runtime,
            exists (select 1 from pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                     where p.oid = f::regprocedure and a.grantee = 0 and a.privilege_type = 'EXECUTE') as pub
       from unnest($1::text[]) f`,
    [fns],
  );
  for (const r of rows) {
    t.true(r.runtime, r.fn);
    t.false(r.pub, r.fn);
  }
  // Really as that role, through the public API.
  const c = await db.pool.connect();
  try {
    await c.query("begin");
    await c.query("set local role bitrix_sync_user");
    const g = await c.query(
      "select granted from bitrix_sync.acquire_crm_request('role-test', 'h', 2, 5, 2, 1000, 0.05)",
    );
    t.true(g.rows[0].granted);
    await c.query("rollback");
  } finally {
    c.release();
  }
});

test("every limiter table, column and function is commented", async (t) => {
  const { rows: tables } = await db.pool.query<{ name: string; c: string | null }>(
    `select c.relname as name, obj_description(c.oid, 'pg_class') as c from pg_class c
      where c.relnamespace = 'bitrix_sync'::regnamespace
        and c.relname in ('crm_rate_buckets', 'crm_inflight_slots', 'crm_method_blocks')`,
  );
  t.is(tables.length, 3);
  for (const r of tables) t.truthy(r.c, r.name);
  const { rows: fns } = await db.pool.query<{ name: string; c: string | null }>(
    `select p.oid::regprocedure::text as name, obj_description(p.oid, 'pg_proc') as c from pg_proc p
      where p.pronamespace = 'bitrix_sync'::regnamespace
        and p.proname in ('acquire_crm_request', 'release_crm_request', 'note_rate_limited', 'note_method_blocked',
                          'note_crm_operating', 'blocked_crm_methods', 'crm_limiter_state', '_check_limiter_name',
                          'note_crm_answered', 'crm_last_answered_at')`,
  );
  // release_crm_request has two overloads: the slot alone, and the slot with the answer (sql/limiter/health.sql).
  t.is(fns.length, 11);
  for (const r of fns) t.truthy(r.c, r.name);
  const { rows: cols } = await db.pool.query<{ name: string }>(
    `select a.attrelid::regclass || '.' || a.attname as name from pg_attribute a
      where a.attrelid = 'bitrix_sync.crm_rate_buckets'::regclass and a.attnum > 0 and not a.attisdropped
        and a.attname <> 'updated_at' and col_description(a.attrelid, a.attnum) is null`,
  );
  t.deepEqual(cols, []);
});

test("a release after an answer records it on the shared bucket for every replica, at most once a second", async (t) => {
  const settings = { refillPerSec: 50, burst: 10, maxInFlight: 10 };
  const a = limiterOn(db.pool, "shared-answer", settings, { holder: "replica-a" });
  const b = limiterOn(other, "shared-answer", settings, { holder: "replica-b" });
  t.is(await b.lastAnswered?.(), null, "no answer yet");
  // A request that got no answer (or a failure) records nothing.
  await (await a.acquire()).release(false);
  await (await a.acquire()).release();
  t.is(await b.lastAnswered?.(), null);
  const before = Date.now();
  const p = await a.acquire();
  await p.release(true);
  const first = await b.lastAnswered?.();
  t.true(typeof first === "number" && first >= before - 1000, "replica b sees replica a's answer");
  const { rows } = await db.pool.query<{ n: string }>(
    "select count(*) as n from bitrix_sync.crm_inflight_slots where bucket = 'shared-answer'",
  );
  t.is(rows[0]?.n, "0", "the slot is freed as by the plain release");
  // Within the second the row is not written again; after it, it is.
  await (await b.acquire()).release(true);
  t.is(await a.lastAnswered?.(), first);
  await sleep(1100);
  await (await b.acquire()).release(true);
  t.true(((await a.lastAnswered?.()) ?? 0) > (first ?? 0));
});
