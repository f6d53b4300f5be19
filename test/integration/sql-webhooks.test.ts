// Webhook inbox (§7.3, §10.1, §5.5): durable record with event_id dedup, claims that coalesce the
// pending events of one entity into one CRM read, at most one processing event per entity whoever
// claims, and retry / dead letter / stale refusal under the lease token.
// Tests that call claim_webhooks() are serial: a claim takes every due event of this database.
import { randomInt, randomUUID } from "node:crypto";
import test from "ava";
import type pg from "pg";
import { claimWebhooks } from "../helpers/claims.js";
import { makeUser } from "../helpers/factories.js";
import { asRole } from "../helpers/roles.js";
import { one, type Queryable, rejectsWith, session } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

interface Webhook {
  id: string;
  receiver: string;
  event_id: string | null;
  entity_type_id: number;
  entity_id: string;
  status: string;
  coalesced_into: string | null;
  source_ip: string | null;
  attempt_count: number;
  next_attempt_at: Date;
  lease_token: string | null;
  locked_by: string | null;
  locked_until: Date | null;
  outcome: string | null;
  last_error_code: string | null;
  processed_at: Date | null;
}

/** A Contact ID nobody else in this file uses. */
const newEntity = () => String(randomInt(1, 2 ** 47));

async function record(
  entityId: string,
  opts: { receiver?: string; eventId?: string } = {},
): Promise<string | null> {
  const { record_webhook } = await one<{ record_webhook: string | null }>(
    db.pool,
    "select bitrix_sync.record_webhook($1, $2, $3, '203.0.113.7'::inet, $4)",
    [opts.receiver ?? "contact", opts.receiver === "alert" ? 1038 : 3, entityId, opts.eventId ?? null],
  );
  return record_webhook;
}

const claim = claimWebhooks<Webhook>;

const get = (id: string) =>
  one<Webhook>(db.pool, "select * from bitrix_sync.webhook_inbox where id = $1", [id]);
const ofEntity = async (entityId: string) =>
  (
    await db.pool.query<Webhook>("select * from bitrix_sync.webhook_inbox where entity_id = $1 order by id", [
      entityId,
    ])
  ).rows;
const complete = (id: string, token: string | null, outcome = "applied") =>
  one<Webhook>(db.pool, "select * from bitrix_sync.complete_webhook($1, $2, $3)", [id, token, outcome]);

/** Entities with more than one processing event; must always be empty. */
async function doubleProcessing(q: Queryable): Promise<string[]> {
  const { rows } = await q.query<{ entity_id: string }>(
    `select receiver || ':' || entity_id as entity_id from bitrix_sync.webhook_inbox
      where status = 'processing' group by receiver, entity_id having count(*) > 1`,
  );
  return rows.map((r) => r.entity_id);
}

test("record_webhook stores a received event with its audit metadata", async (t) => {
  const entity = newEntity();
  const id = await record(entity);
  t.truthy(id);
  t.like(await get(id ?? ""), {
    receiver: "contact",
    entity_type_id: 3,
    entity_id: entity,
    status: "received",
    source_ip: "203.0.113.7",
    attempt_count: 0,
    lease_token: null,
    event_id: null,
  });
});

test("record_webhook drops a duplicate stable event_id and returns null", async (t) => {
  const entity = newEntity();
  const eventId = `evt-${randomUUID()}`;
  const first = await record(entity, { eventId });
  t.truthy(first);
  t.is(await record(entity, { eventId }), null);
  // The same event_id on the other receiver is another event.
  t.truthy(await record(entity, { eventId, receiver: "alert" }));
  // Without an event_id nothing is deduplicated: coalescing handles repeats later.
  t.truthy(await record(entity));
  t.truthy(await record(entity));
  const rows = await ofEntity(entity);
  t.is(rows.filter((r) => r.receiver === "contact").length, 3);
  t.is(rows.filter((r) => r.event_id === eventId).length, 2);
});

test("record_webhook refuses malformed entity ids and unknown receivers (CHECK)", async (t) => {
  await rejectsWith(t, record("CONTACT_12"), "23514");
  await rejectsWith(t, record("0"), "23514");
  await rejectsWith(t, record(newEntity(), { receiver: "deal" }), "23514");
});

test.serial(
  "claim coalesces the received events of one entity into one, and completion covers them",
  async (t) => {
    const entity = newEntity();
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push((await record(entity)) ?? "");
    const other = newEntity();
    const otherId = (await record(other)) ?? "";

    const claimed = await claim(db.pool, "w1");
    const mine = claimed.filter((w) => w.entity_id === entity);
    t.is(mine.length, 1, "one claimed event per entity");
    t.like(mine[0], { id: ids[0], status: "processing", locked_by: "w1", attempt_count: 1 });
    t.true(
      claimed.some((w) => w.id === otherId),
      "another entity is claimed on its own",
    );

    const rows = await ofEntity(entity);
    t.deepEqual(
      rows.map((r) => [r.status, r.coalesced_into]),
      [
        ["processing", null],
        ["coalesced", ids[0]],
        ["coalesced", ids[0]],
        ["coalesced", ids[0]],
      ],
    );

    await complete(ids[0] ?? "", mine[0]?.lease_token ?? null, "applied");
    const after = await ofEntity(entity);
    t.deepEqual(
      after.map((r) => [r.status, r.outcome]),
      [
        ["processed", "applied"],
        ["processed", "coalesced"],
        ["processed", "coalesced"],
        ["processed", "coalesced"],
      ],
    );
    for (const r of after) {
      t.truthy(r.processed_at);
      t.is(r.lease_token, null);
    }
  },
);

test.serial("an event arriving while its entity is processing waits for the next claim", async (t) => {
  const entity = newEntity();
  const firstId = (await record(entity)) ?? "";
  const first = (await claim(db.pool, "w")).find((w) => w.id === firstId);
  const lateId = (await record(entity)) ?? "";

  t.false(
    (await claim(db.pool, "w2")).some((w) => w.entity_id === entity),
    "the entity is busy",
  );
  t.like(await get(lateId), { status: "received", coalesced_into: null });

  await complete(firstId, first?.lease_token ?? null);
  t.is((await get(lateId)).status, "received", "not covered by a read that started before it arrived");
  const next = (await claim(db.pool, "w3")).find((w) => w.entity_id === entity);
  t.like(next, { id: lateId, status: "processing" });
});

test.serial("claim_webhooks only takes the receiver it is asked for", async (t) => {
  const entity = newEntity();
  const contactId = (await record(entity)) ?? "";
  const alertId = (await record(entity, { receiver: "alert" })) ?? "";
  const byAlert = await claim(db.pool, "a", 1000, "alert");
  t.true(byAlert.some((w) => w.id === alertId));
  t.false(byAlert.some((w) => w.id === contactId));
  t.is((await get(contactId)).status, "received");
  await rejectsWith(t, claim(db.pool, "a", 0), "BS004");
});

test.serial("two claimers racing never process one entity twice (50 rounds)", async (t) => {
  const entities = Array.from({ length: 6 }, newEntity);
  const a = await session(db.pool);
  const b = await session(db.pool);
  const held: Array<{ id: string; token: string }> = [];
  try {
    for (let round = 0; round < 50; round++) {
      // New events for a random subset of the entities, some already processing.
      for (const e of entities) {
        const n = randomInt(0, 3);
        for (let i = 0; i < n; i++) await record(e);
      }
      const race = async (s: pg.PoolClient, worker: string): Promise<Webhook[]> => {
        await s.query("begin");
        try {
          const rows = await claim(s, worker, randomInt(1, 5));
          // Hold the claim uncommitted for a moment so the other claimer runs into it.
          await new Promise((r) => setTimeout(r, randomInt(0, 5)));
          t.deepEqual(await doubleProcessing(s), [], `round ${round}, inside ${worker}`);
          await s.query("commit");
          return rows;
        } catch (e) {
          await s.query("rollback");
          throw e;
        }
      };
      const [x, y] = await Promise.all([race(a.c, "a"), race(b.c, "b")]);
      const xs = new Set(x.map((w) => w.id));
      t.deepEqual(
        y.filter((w) => xs.has(w.id)).map((w) => w.id),
        [],
        `round ${round}: claimed twice`,
      );
      t.deepEqual(await doubleProcessing(db.pool), [], `round ${round}`);
      for (const w of [...x, ...y]) held.push({ id: w.id, token: w.lease_token ?? "" });

      // Finish some of what is held so entities free up; leave the rest processing.
      while (held.length > 0 && randomInt(0, 3) > 0) {
        const h = held.splice(randomInt(0, held.length), 1)[0];
        if (h) await complete(h.id, h.token);
      }
      t.deepEqual(await doubleProcessing(db.pool), [], `round ${round}, after completions`);
    }
  } finally {
    a.done();
    b.done();
  }
  const { rows } = await db.pool.query<{ n: string }>(
    "select count(*) as n from bitrix_sync.webhook_inbox where entity_id = any($1) and status = 'processed'",
    [entities],
  );
  t.true(Number(rows[0]?.n) > 0, "the race did process events");
});

// The interleaving that two claimers scanning at the same moment can produce, made deterministic:
// claimer B holds events 1 (entity Y) and 4 (entity X) and is claiming them slowly; claimer A then
// takes 2 (X) and 3 (Y). Waiting on each other's uncommitted claims in crossed order would be a lock
// cycle (a deadlock error for one of them). Both take entities in one order (receiver, entity ID),
// so one of them at most waits for the other's claim to commit, and skips the entity it claimed.
test.serial("crossing claims of two entities neither deadlock nor double-process", async (t) => {
  const x = newEntity();
  const y = newEntity();
  const e1 = (await record(y)) ?? "";
  const e2 = (await record(x)) ?? "";
  const e3 = (await record(y)) ?? "";
  const e4 = (await record(x)) ?? "";
  // B pauses just before it claims event 4, long enough for A to run into it.
  await db.pool.query(`
    create or replace function public.tg_test_pause() returns trigger language plpgsql as $$
    begin
      if new.locked_by = 'slow-b' and new.id = ${Number(e4)} and new.status = 'processing' then
        perform pg_sleep(1.5);
      end if;
      return new;
    end $$`);
  await db.pool.query(
    "create trigger _000_test_pause before update on bitrix_sync.webhook_inbox for each row execute function public.tg_test_pause()",
  );
  const h = await session(db.pool);
  const a = await session(db.pool);
  const b = await session(db.pool);
  try {
    // H hides 2 and 3 from B's scan, so B's candidates are exactly 1 and 4.
    await h.c.query("begin");
    await h.c.query("select 1 from bitrix_sync.webhook_inbox where id in ($1, $2) for update", [e2, e3]);
    const byB = claim(b.c, "slow-b", 10);
    await new Promise((r) => setTimeout(r, 400));
    await h.c.query("commit");
    const byA = claim(a.c, "a", 10);
    const [ra, rb] = await Promise.allSettled([byA, byB]);
    t.is(ra.status, "fulfilled", ra.status === "rejected" ? String(ra.reason) : "");
    t.is(rb.status, "fulfilled", rb.status === "rejected" ? String(rb.reason) : "");
    const mine = [
      ...(ra.status === "fulfilled" ? ra.value : []),
      ...(rb.status === "fulfilled" ? rb.value : []),
    ].filter((w) => [x, y].includes(w.entity_id));
    t.deepEqual(
      mine.map((w) => w.entity_id).sort(),
      [x, y].sort(),
      "each entity claimed once, by one of them",
    );
    t.deepEqual(await doubleProcessing(db.pool), []);
    // What neither took waits for the next claim, which covers it.
    for (const w of mine) await complete(w.id, w.lease_token);
    const next = (await claim(db.pool, "next", 10)).filter((w) => [x, y].includes(w.entity_id));
    for (const w of next) await complete(w.id, w.lease_token);
    for (const e of [e1, e2, e3, e4]) t.is((await get(e)).status, "processed", `event ${e}`);
  } finally {
    h.done();
    a.done();
    b.done();
    await db.pool.query("drop trigger if exists _000_test_pause on bitrix_sync.webhook_inbox");
  }
});

test.serial(
  "an expired processing lease is reclaimed with a new token; the old holder is refused",
  async (t) => {
    const entity = newEntity();
    const id = (await record(entity)) ?? "";
    const first = (await claim(db.pool, "old")).find((w) => w.id === id);
    await db.pool.query(
      "update bitrix_sync.webhook_inbox set locked_until = now() - interval '1 second' where id = $1",
      [id],
    );
    const second = (await claim(db.pool, "new")).find((w) => w.id === id);
    t.like(second, { status: "processing", locked_by: "new", attempt_count: 2 });
    t.not(second?.lease_token, first?.lease_token);
    await rejectsWith(t, complete(id, first?.lease_token ?? null), "BS001");
    t.like(await complete(id, second?.lease_token ?? null), { status: "processed" });
  },
);

test.serial(
  "bring_forward_webhooks: events that waited for the portal are due now and their receivers told; others keep their time",
  async (t) => {
    // Each event claimed and parked for an hour with a code: two portal-wide ones (a contact and an
    // alert event) and one that is not.
    const park = async (receiver: "contact" | "alert", code: string) => {
      const id = (await record(newEntity(), { receiver })) ?? "";
      const claimed = (await claim(db.pool, "w")).find((w) => w.id === id);
      await one(db.pool, "select * from bitrix_sync.retry_webhook($1, $2, $3, '1 hour')", [
        id,
        claimed?.lease_token,
        code,
      ]);
      return id;
    };
    const down = await park("contact", "server_error");
    const alert = await park("alert", "timeout_no_reply");
    const own = await park("contact", "apply_failed");
    const portalWide = ["server_error", "timeout_no_reply", "query_limit_exceeded"];
    const listener = await db.pool.connect();
    const heard: string[] = [];
    listener.on("notification", (n) => {
      if (n.channel === "bitrix_sync_webhooks" && n.payload) heard.push(n.payload);
    });
    try {
      await listener.query("listen bitrix_sync_webhooks");
      const before = Date.now();
      const moved = await one<{ n: number }>(db.pool, "select bitrix_sync.bring_forward_webhooks($1) as n", [
        portalWide,
      ]);
      t.is(moved.n, 2);
      for (const id of [down, alert]) {
        const w = await get(id);
        t.is(w.status, "retry_wait");
        t.true(w.next_attempt_at.getTime() <= Date.now() && w.next_attempt_at.getTime() >= before - 1000, id);
      }
      t.true(
        (await get(own)).next_attempt_at.getTime() > Date.now() + 50 * 60_000,
        "not a portal failure: keeps its time",
      );
      const due = (await claim(db.pool, "w")).map((w) => w.id);
      t.true(due.includes(down) && due.includes(alert) && !due.includes(own));
      for (let i = 0; i < 50 && heard.length < 2; i++) await new Promise((r) => setTimeout(r, 20));
      t.deepEqual([...new Set(heard)].sort(), ["alert", "contact"], "both receivers' loops are woken");
      t.is(
        (
          await one<{ n: number }>(db.pool, "select bitrix_sync.bring_forward_webhooks($1) as n", [
            portalWide,
          ])
        ).n,
        0,
        "nothing waits any more",
      );
      await rejectsWith(t, db.pool.query("select bitrix_sync.bring_forward_webhooks(null)"), "BS004");
    } finally {
      listener.release();
    }
  },
);

test.serial("retry_webhook parks the event with its coalesced ones until it is due", async (t) => {
  const entity = newEntity();
  const ids = [(await record(entity)) ?? "", (await record(entity)) ?? ""];
  const first = (await claim(db.pool, "w")).find((w) => w.id === ids[0]);
  const parked = await one<Webhook>(
    db.pool,
    "select * from bitrix_sync.retry_webhook($1, $2, 'crm_timeout', '1 hour')",
    [ids[0], first?.lease_token],
  );
  t.like(parked, {
    status: "retry_wait",
    last_error_code: "crm_timeout",
    lease_token: null,
    locked_by: null,
  });
  t.like(await get(ids[1] ?? ""), { status: "coalesced", coalesced_into: ids[0] });
  t.false(
    (await claim(db.pool, "w")).some((w) => w.entity_id === entity),
    "not before it is due",
  );

  await db.pool.query(
    "update bitrix_sync.webhook_inbox set next_attempt_at = now() - interval '1 second' where id = $1",
    [ids[0]],
  );
  const again = (await claim(db.pool, "w2")).find((w) => w.entity_id === entity);
  t.like(again, { id: ids[0], status: "processing", attempt_count: 2 });
  await complete(ids[0] ?? "", again?.lease_token ?? null);
  t.like(await get(ids[1] ?? ""), { status: "processed", outcome: "coalesced" });
});

test.serial(
  "dead_letter_webhook writes a technical dead letter and closes the coalesced events",
  async (t) => {
    const entity = newEntity();
    const ids = [(await record(entity)) ?? "", (await record(entity)) ?? ""];
    const held = (await claim(db.pool, "w")).find((w) => w.id === ids[0]);
    await rejectsWith(
      t,
      db.pool.query(
        "select bitrix_sync.dead_letter_webhook($1, $2, 'Contact 12: name Ivan Petrov invalid')",
        [ids[0], held?.lease_token],
      ),
      "BS004",
    );
    t.is((await get(ids[0] ?? "")).status, "processing", "refused raw text changed nothing");

    const dead = await one<Webhook>(
      db.pool,
      "select * from bitrix_sync.dead_letter_webhook($1, $2, 'crm_permission_denied')",
      [ids[0], held?.lease_token],
    );
    t.like(dead, { status: "dead_letter", last_error_code: "crm_permission_denied", lease_token: null });
    t.like(await get(ids[1] ?? ""), { status: "processed", outcome: "coalesced_into_dead_letter" });
    const { rows } = await db.pool.query(
      "select source, source_id, operation, error_code, attempt_count from bitrix_sync.technical_dead_letters where source = 'webhook' and source_id = $1",
      [ids[0]],
    );
    t.deepEqual(rows, [
      {
        source: "webhook",
        source_id: ids[0],
        operation: "webhook.contact",
        error_code: "crm_permission_denied",
        attempt_count: 1,
      },
    ]);
    // A dead letter is final: the next event of the entity is claimed normally.
    const nextId = (await record(entity)) ?? "";
    t.true((await claim(db.pool, "w")).some((w) => w.id === nextId));
  },
);

test.serial(
  "retry_webhook past the retry horizon dead-letters the event itself, counted from its arrival",
  async (t) => {
    const entity = newEntity();
    const ids = [(await record(entity)) ?? "", (await record(entity)) ?? ""];
    const held = (await claim(db.pool, "w")).find((w) => w.id === ids[0]);
    // Received 23 h 59 min 30 s ago: a one-minute back-off would land past the 24 h horizon.
    const received = new Date(Date.now() - 86_400_000 + 30_000);
    await db.pool.query("update bitrix_sync.webhook_inbox set received_at = $2 where id = $1", [
      ids[0],
      received,
    ]);
    const out = await one<Webhook>(
      db.pool,
      "select * from bitrix_sync.retry_webhook($1, $2, 'crm_timeout', '1 minute')",
      [ids[0], held?.lease_token],
    );
    t.like(out, { status: "dead_letter", last_error_code: "retry_horizon_exceeded", lease_token: null });
    t.like(await get(ids[1] ?? ""), { status: "processed", outcome: "coalesced_into_dead_letter" });
    const { rows } = await db.pool.query(
      "select operation, error_code, attempt_count, first_attempt_at, deadline_at from bitrix_sync.technical_dead_letters where source = 'webhook' and source_id = $1",
      [ids[0]],
    );
    t.deepEqual(rows, [
      {
        operation: "webhook.contact",
        error_code: "retry_horizon_exceeded",
        attempt_count: 1,
        first_attempt_at: received,
        deadline_at: new Date(received.getTime() + 86_400_000),
      },
    ]);
  },
);

test.serial("a stale holder is refused by complete, retry and dead letter (BS001)", async (t) => {
  const entity = newEntity();
  const id = (await record(entity)) ?? "";
  const held = (await claim(db.pool, "w")).find((w) => w.id === id);
  const stale = randomUUID();
  const err = await rejectsWith(t, complete(id, stale), "BS001");
  t.truthy(err.hint);
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.retry_webhook($1, $2, 'crm_timeout', '1 minute')", [id, stale]),
    "BS001",
  );
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.dead_letter_webhook($1, $2, 'crm_timeout')", [id, stale]),
    "BS001",
  );
  await rejectsWith(t, complete(id, held?.lease_token ?? null, "Applied OK"), "BS004");
  t.like(await get(id), { status: "processing", lease_token: held?.lease_token });
  await complete(id, held?.lease_token ?? null);
  // Finished: the former holder cannot act on it again.
  await rejectsWith(t, complete(id, held?.lease_token ?? null), "BS001");
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.retry_webhook($1, $2, 'crm_timeout', '1 minute')", [
      id,
      held?.lease_token,
    ]),
    "BS001",
  );
  // Never claimed: no token can complete it.
  const unclaimed = (await record(newEntity())) ?? "";
  await rejectsWith(t, complete(unclaimed, null), "BS001");
});

test("a hand-written UPDATE that skips a webhook edge is refused (BS002)", async (t) => {
  const id = (await record(newEntity())) ?? "";
  for (const to of ["processed", "retry_wait", "dead_letter"]) {
    await rejectsWith(
      t,
      db.pool.query("update bitrix_sync.webhook_inbox set status = $2 where id = $1", [id, to]),
      "BS002",
    );
  }
  t.is((await get(id)).status, "received");
});

test.serial(
  "a robot call answered unknown_mapping while the link was being made is read again once the link stands",
  async (t) => {
    const openLink = async (entityId: string) => {
      const u = await makeUser(db.pool);
      // As the service runs it: the runtime role queues the read (a column it may insert).
      await asRole(db.pool, "bitrix_sync_user", (c) =>
        c.query("select bitrix_sync.open_mapping($1, $2, null)", [u.id, entityId]),
      );
    };
    const linked = async (entityId: string) =>
      (await ofEntity(entityId)).filter((w) => w.status === "received").length;

    // Processed as not ours before the link committed: one more read is queued by the link.
    const early = newEntity();
    const id = await record(early);
    const [row] = (await claim(db.pool, "w-link")).filter((w) => w.entity_id === early);
    t.truthy(row);
    await complete(id as string, row?.lease_token ?? null, "unknown_mapping");
    await openLink(early);
    t.is(await linked(early), 1);
    t.is(
      (
        await one<{ event_type: string }>(
          db.pool,
          "select event_type from bitrix_sync.webhook_inbox where entity_id = $1 and status = 'received'",
          [early],
        )
      ).event_type,
      "linked",
    );

    // Claimed (its read of the mappings may predate the link) and not yet completed: queued too.
    const inFlight = newEntity();
    await record(inFlight);
    t.is((await claim(db.pool, "w-link")).filter((w) => w.entity_id === inFlight).length, 1);
    await openLink(inFlight);
    t.is(await linked(inFlight), 1);

    // No call about the Contact, or one answered before the workflow began: nothing more to read.
    const quiet = newEntity();
    await openLink(quiet);
    t.deepEqual(await ofEntity(quiet), []);
    const old = newEntity();
    const oldId = await record(old);
    const [oldRow] = (await claim(db.pool, "w-link")).filter((w) => w.entity_id === old);
    await complete(oldId as string, oldRow?.lease_token ?? null, "unknown_mapping");
    await db.pool.query(
      "update bitrix_sync.webhook_inbox set received_at = now() - interval '2 hours' where id = $1",
      [oldId],
    );
    await openLink(old);
    t.is(await linked(old), 0);
  },
);
