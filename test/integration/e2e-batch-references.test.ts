// App users whose names and e-mails hold batch references (reference §3: the portal rewrites
// `$result[c1]` and its siblings inside a batch value) end to end: real PostgreSQL, the sync loop
// on graphile-worker, the emulator over HTTP, whose batch resolves references as the portal's core
// does. They sign up in the same run as ordinary users (some of whom have a Contact already, so
// reads and writes of other people share the batches), and every Contact must hold exactly its own
// user's values, nothing of anyone else's; no alert, no dead letter; and the values coming back from
// the CRM (robot webhooks) leave every App profile as it was.
import { randomUUID } from "node:crypto";
import test from "ava";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { createApp } from "../../src/http/app.js";
import { receiverConfig } from "../../src/inbound/config.js";
import {
  finishedWorkflow,
  type Rig,
  startRig,
  TEST_CONTACT_TOKEN,
  TEST_MEMBER_ID,
  waitFor,
} from "../helpers/e2e.js";
import { foldJournal, randomPhone } from "../helpers/factories.js";

const F = SANDBOX_FIELDS;
let rig: Rig;
let app: ReturnType<typeof createApp>;
test.before(async () => {
  rig = await startRig();
  app = createApp({ pool: rig.db.pool, log: rig.runtime.log, receiver: receiverConfig(rig.runtime.config) });
});
test.after.always(async () => {
  await rig?.close();
});

interface AppUser {
  id: string;
  phone: string;
  name: string;
  email: string | null;
  citizenship: string | null;
}

/** Names (and e-mails) the portal would read as references, and look-alikes that it would not. */
const HOSTILE: Array<Pick<AppUser, "name" | "email" | "citizenship">> = [
  { name: "$result[c0]", email: "$result[c0]@example.org", citizenship: "Россия" },
  { name: "$result[c1][0][ID]", email: null, citizenship: null },
  {
    name: "Ivan $result[c2][0][PHONE][0][VALUE]",
    email: "ivan.$result[c2][0][EMAIL][0][VALUE]@example.org",
    citizenship: "Казахстан",
  },
  { name: "$next[c0]", email: "next@example.org", citizenship: null },
  { name: "$error[c0]", email: "$error[c0][error_description]@example.org", citizenship: null },
  { name: "$total[c1]", email: null, citizenship: "Узбекистан" },
  { name: "$time[c0][start]", email: "t.$time[c0][start]@example.org", citizenship: null },
  { name: "%24result%5Bc0%5D", email: "%24result%5Bc1%5D@example.org", citizenship: null },
  { name: "$RESULT[C0]", email: "$RESULT[C0]@example.org", citizenship: null },
  { name: "$Result[c0]", email: null, citizenship: "Россия" },
];

/** Inserts a user as the App signs one up: identity and profile in one statement. */
async function signUp(u: Omit<AppUser, "id" | "phone">): Promise<AppUser> {
  const id = randomUUID();
  const phone = randomPhone();
  await rig.db.pool.query(
    `with i as (insert into han_app.user_identity (id, phone_number, record_status) values ($1, $2, 'active') returning id)
     insert into han_app.client_profile (user_id, full_name, email, citizenship, record_status)
       select id, $3, $4, $5, 'active' from i`,
    [id, phone, u.name, u.email, u.citizenship],
  );
  return { id, phone, ...u };
}

async function profile(userId: string) {
  const { rows } = await rig.db.pool.query(
    "select full_name, email, citizenship from han_app.client_profile where user_id = $1",
    [userId],
  );
  return rows[0];
}

async function robot(id: number): Promise<number> {
  const body = new URLSearchParams([
    ["document_id[0]", "crm"],
    ["document_id[1]", "CCrmDocumentContact"],
    ["document_id[2]", `CONTACT_${id}`],
    ["auth[domain]", rig.emulator.host],
    ["auth[client_endpoint]", `https://${rig.emulator.host}/rest/`],
    ["auth[server_endpoint]", "https://oauth.bitrix24.tech/rest/"],
    ["auth[member_id]", TEST_MEMBER_ID],
  ]);
  const res = await app.request(`/bitrix/sync/webhook/contact?token=${TEST_CONTACT_TOKEN}&ID=${id}`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: body.toString(),
  });
  return res.status;
}

const CITIZENSHIP_ID: Record<string, string> = { Россия: "45", Казахстан: "46", Узбекистан: "47" };

test.serial(
  "hostile names and e-mails land verbatim, touch nobody else, and come back unchanged",
  async (t) => {
    // Ordinary users, half of whom the CRM already knows by phone: their workflows read those
    // Contacts (find by phone, read) in the same batches as the creates of everyone else.
    const ordinary: AppUser[] = [];
    const seeded = new Map<number, { userId: string }>();
    for (let i = 0; i < 10; i++) {
      const u = await signUp({ name: `Ordinary ${i}`, email: `ordinary${i}@example.org`, citizenship: null });
      ordinary.push(u);
      if (i % 2 === 0) {
        const c = rig.emulator.store.createContact({
          name: `Ordinary ${i}`,
          phones: [{ value: u.phone, valueType: "MOBILE" }],
          emails: [{ value: `ordinary${i}@example.org`, valueType: "WORK" }],
        });
        seeded.set(c.id, { userId: u.id });
      }
    }
    const hostile: AppUser[] = [];
    for (const h of HOSTILE) hostile.push(await signUp(h));
    const users = [...ordinary, ...hostile];
    // One fold: every intent is claimable at once, so the pump fills its batches from all of them.
    await foldJournal(rig.db.pool);
    await rig.startWorker();
    for (const u of users) {
      const wf = await finishedWorkflow(rig, u.id, 30_000);
      t.is(wf.state, "succeeded", u.name);
    }

    // Every Contact, every field: exactly its own user's values.
    const byId = new Map(users.map((u) => [u.id, u]));
    const owners = new Set<string>();
    for (const c of rig.emulator.store.contacts.values()) {
      const owner = byId.get(String(c.uf[F.userId]));
      if (!owner) {
        t.fail(`Contact ${c.id} belongs to no App user`);
        continue;
      }
      owners.add(owner.id);
      const wasSeeded = seeded.has(c.id);
      t.deepEqual(
        {
          name: c.name,
          lastName: c.lastName,
          secondName: c.secondName,
          opened: c.opened,
          phones: c.phones.map((p) => p.value),
          emails: c.emails.map((e) => e.value),
          uf: c.uf,
        },
        {
          name: owner.name,
          lastName: "",
          secondName: "",
          opened: true,
          phones: [owner.phone],
          emails: owner.email ? [owner.email] : [],
          uf: {
            [F.userId]: owner.id,
            [F.registered]: 1,
            ...(owner.citizenship && !wasSeeded
              ? { [F.citizenship]: CITIZENSHIP_ID[owner.citizenship] }
              : {}),
          },
        },
        `Contact ${c.id} of ${owner.name}`,
      );
    }
    t.is(owners.size, users.length, "one Contact per user");
    t.is(rig.emulator.store.contacts.size, users.length);

    // Batches carried several workflows' commands; the hostile creates (all but the percent-encoded
    // look-alike, which the portal does not read as a reference) went as calls of their own.
    const batches = rig.emulator.log.filter((e) => e.method === "batch" && e.status === 200);
    t.true(
      batches.some((b) => (b.batchSize ?? 0) > 1),
      "commands of different users shared a batch",
    );
    const directAdds = rig.emulator.log.filter((e) => e.method === "crm.contact.add");
    t.is(directAdds.length, HOSTILE.length - 1);

    // Ordinary data: no business alert, no dead letter.
    const alerts = await rig.db.pool.query("select count(*)::int as n from bitrix_sync.business_alerts");
    t.is(alerts.rows[0].n, 0);
    const dead = await rig.db.pool.query("select count(*)::int as n from bitrix_sync.technical_dead_letters");
    t.is(dead.rows[0].n, 0);

    // The CRM's values come back (a robot webhook per hostile Contact, read in a batch): the App
    // keeps exactly what it had.
    const before = new Map<string, unknown>();
    for (const u of hostile) before.set(u.id, await profile(u.id));
    t.deepEqual(await profile(hostile[0]?.id as string), {
      full_name: "$result[c0]",
      email: "$result[c0]@example.org",
      citizenship: "Россия",
    });
    const contactOf = new Map(
      [...rig.emulator.store.contacts.values()].map((c) => [String(c.uf[F.userId]), c.id] as const),
    );
    for (const u of hostile) t.is(await robot(contactOf.get(u.id) as number), 200);
    for (const u of hostile) {
      const id = contactOf.get(u.id) as number;
      const rows = await waitFor(async () => {
        const { rows } = await rig.db.pool.query(
          "select status, outcome from bitrix_sync.webhook_inbox where entity_id = $1",
          [String(id)],
        );
        return rows.length > 0 && rows.every((r) => r.status === "processed") ? rows : null;
      }, 20_000);
      t.deepEqual(rows, [{ status: "processed", outcome: "applied" }], u.name);
    }
    for (const u of hostile) t.deepEqual(await profile(u.id), before.get(u.id), u.name);
    const snaps = await rig.db.pool.query(
      "select count(*)::int as n from bitrix_sync.contact_snapshots where contact_id = any($1) and last_applied_source = 'webhook'",
      [hostile.map((u) => String(contactOf.get(u.id)))],
    );
    t.is(snaps.rows[0].n, hostile.length, "every hostile Contact was read back and applied");
    const alertsAfter = await rig.db.pool.query("select count(*)::int as n from bitrix_sync.business_alerts");
    t.is(alertsAfter.rows[0].n, 0);
  },
);
