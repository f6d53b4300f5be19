// The chaos run's invariants, checked after the run has settled, against the emulator's final state
// (the portal's truth) and the database. Each violation is one line naming the rule and internal IDs
// only (user and Contact IDs, no personal data).
import type pg from "pg";
import { pickEmail } from "../../src/crm/contact-fields.js";
import type { Emulator, RequestLogEntry } from "../../tools/emulator/server.js";
import {
  DEFAULT_CITIZENSHIP,
  DEFAULT_SMART_PROCESS,
  phoneKey,
  type StoredContact,
} from "../../tools/emulator/store.js";
import type { Window } from "./faults.js";
import type { Personal } from "./traffic.js";

/** The smart-process field the chaos run maps alerts.fields.alert_number to. */
export const ALERT_NUMBER_FIELD = "ufCrm14_1001";

const [STAGE_NEW, STAGE_PREPARATION, STAGE_SUCCESS, STAGE_FAIL] = DEFAULT_SMART_PROCESS.stages as [
  string,
  string,
  string,
  string,
];

/**
 * The emulator's alert smart process (its default one) and its stages, as the chaos run's alerts.*
 * settings name them.
 */
export const ALERT_PROCESS = {
  entityTypeId: DEFAULT_SMART_PROCESS.entityTypeId,
  stages: {
    /** alerts.stage_new first: the stage a new item is created in. */
    open: [STAGE_NEW, STAGE_PREPARATION] as readonly string[],
    resolved: STAGE_SUCCESS,
    closed: STAGE_FAIL,
  },
};

export interface Fields {
  userId: string;
  registered: string;
  citizenship: string;
}

export interface CheckResult {
  violations: string[];
  /** Users with more than one Contact, for the history. */
  suspects: string[];
  /** Contacts beyond the first that carry the same user id: creates the service repeated. */
  duplicates: number;
  /** Intents that did not reach their end: dead-lettered, failed, parked or still open. */
  lostIntents: number;
  users: { active: number; inactive: number };
  contacts: number;
  technicalDeadLetters: number;
  /** Business alerts raised, and the smart-process items that mirror them. */
  alerts: number;
  alertItems: number;
  /** Alerts no longer open, by status (resolved, closed, remote_missing). */
  alertsFinished: Record<string, number>;
}

interface UserRow {
  id: string;
  phone_number: string | null;
  identity_status: string;
  profile_status: string;
  full_name: string | null;
  email: string | null;
  citizenship: string | null;
}

/** Final states of every machine; anything else is unsettled. */
const OPEN = {
  queue: "status in ('pending', 'leased', 'retry_wait')",
  workflows: "state in ('created', 'running', 'waiting_crm', 'waiting_retry')",
  commands: "status in ('pending', 'leased', 'in_flight', 'retry_wait', 'uncertain', 'reconcile')",
  webhooks: "status in ('received', 'coalesced', 'processing', 'retry_wait')",
  alerts: "crm_sync_status = 'pending'",
} as const;

/** Rows still open in each machine: all zero means the run has settled. */
export async function openWork(pool: pg.Pool): Promise<Record<string, number>> {
  const { rows } = await pool.query<Record<string, number>>(
    `select ((select count(*) from han_app.sync_queue where ${OPEN.queue})
               + (select count(*) from han_app.sync_queue_journal))::int as queue,
            (select count(*) from bitrix_sync.workflow_instances where ${OPEN.workflows})::int as workflows,
            (select count(*) from bitrix_sync.crm_commands where ${OPEN.commands})::int as commands,
            (select count(*) from bitrix_sync.webhook_inbox where ${OPEN.webhooks})::int as webhooks,
            (select count(*) from bitrix_sync.business_alerts where ${OPEN.alerts})::int as alerts`,
  );
  return rows[0] ?? {};
}

/** A rebind's business refusals: an outcome for a person, not a lost intent (docs/admin.md). */
const REBIND_REFUSALS = ["user_not_eligible", "target_bound_to_other_user", "target_not_found"];

export async function checkInvariants(
  pool: pg.Pool,
  emulator: Emulator,
  fields: Fields,
  /** Contacts that share a phone by design (a rebind's pair, the CRM team's duplicates). */
  sharedPhone: ReadonlySet<number> = new Set(),
  /** Numbers a manager added, by Contact: each must still be on its Contact. */
  managerPhones: ReadonlyMap<number, ReadonlySet<string>> = new Map(),
  /** The smart-process field that carries an alert's number (alerts.fields.alert_number). */
  alertNumberField = ALERT_NUMBER_FIELD,
  /** The alert stages (alerts.stage_*): the open ones, resolved, closed without resolution. */
  alertStages: { open: readonly string[]; resolved: string; closed: string } = ALERT_PROCESS.stages,
): Promise<CheckResult> {
  const v: string[] = [];
  const contacts = [...emulator.store.contacts.values()];
  const byId = new Map(contacts.map((c) => [c.id, c]));
  const { rows: users } = await pool.query<UserRow>(
    `select u.id, u.phone_number, u.record_status as identity_status, p.record_status as profile_status,
            p.full_name, p.email, p.citizenship
       from han_app.user_identity u join han_app.client_profile p on p.user_id = u.id`,
  );
  const { rows: mappings } = await pool.query<{ entity_id: string; external_id: string }>(
    `select entity_id, external_id from bitrix_sync.entity_external_mapping
      where status = 'active' and entity_type = 'user' and external_system = 'bitrix24'`,
  );
  const activeMaps = new Map<string, string[]>();
  for (const m of mappings)
    activeMaps.set(m.entity_id, [...(activeMaps.get(m.entity_id) ?? []), m.external_id]);

  const contactsOfUser = new Map<string, StoredContact[]>();
  for (const c of contacts) {
    const u = c.uf[fields.userId];
    if (typeof u === "string" && u !== "") contactsOfUser.set(u, [...(contactsOfUser.get(u) ?? []), c]);
  }

  let active = 0;
  for (const u of users) {
    const eligible = u.identity_status === "active" && u.profile_status === "active";
    const maps = activeMaps.get(u.id) ?? [];
    if (!eligible) {
      if (maps.length > 0) v.push(`inactive user ${u.id} still has an active mapping`);
      for (const c of contactsOfUser.get(u.id) ?? []) {
        if (c.uf[fields.registered] !== 0)
          v.push(`inactive user ${u.id}: Contact ${c.id} not flagged inactive`);
      }
      continue;
    }
    active++;
    if (maps.length !== 1) {
      v.push(`active user ${u.id} has ${maps.length} active mappings`);
      continue;
    }
    const c = byId.get(Number(maps[0]));
    if (!c) {
      v.push(`active user ${u.id} is mapped to Contact ${maps[0]}, which does not exist`);
      continue;
    }
    if (c.uf[fields.userId] !== u.id) v.push(`Contact ${c.id} of user ${u.id} does not carry its user id`);
    if (c.uf[fields.registered] !== 1) v.push(`Contact ${c.id} of active user ${u.id} not flagged active`);
    if (!c.phones.some((p) => p.value === u.phone_number))
      v.push(`Contact ${c.id} of user ${u.id} does not carry the user's phone`);
    // The App's CRM-master fields equal the Contact's (§3.1, the rules of src/app-data.ts).
    const name = c.name.trim() === "" ? null : c.name.trim();
    const email = pickEmail(c.emails.map((e) => ({ id: e.id, valueType: e.valueType, value: e.value })));
    const enumId = c.uf[fields.citizenship];
    const citizenship =
      enumId === null || enumId === undefined
        ? null
        : (DEFAULT_CITIZENSHIP.find((e) => e.ID === String(enumId))?.VALUE ?? null);
    if ((u.full_name ?? null) !== name) v.push(`user ${u.id}: App full_name differs from Contact ${c.id}`);
    if ((u.email ?? null) !== email) v.push(`user ${u.id}: App email differs from Contact ${c.id}`);
    if ((u.citizenship ?? null) !== citizenship)
      v.push(`user ${u.id}: App citizenship differs from Contact ${c.id}`);
  }

  // A number a person added is never removed or overwritten by the service.
  for (const [cid, phones] of managerPhones) {
    const c = byId.get(cid);
    const on = new Set((c?.phones ?? []).map((x) => phoneKey(x.value)));
    for (const p of phones)
      if (!on.has(phoneKey(p))) v.push(`Contact ${cid} lost a phone number a manager added`);
  }

  // Every business alert is mirrored into the portal as exactly one smart-process item: an alert.add
  // whose reply was lost is looked up before it is sent again, never repeated blindly.
  const { rows: alerts } = await pool.query<{
    n: string;
    item_id: string | null;
    sync: string;
    status: string;
  }>(
    `select alert_number::text as n, item_id::text as item_id, crm_sync_status as sync, status
       from bitrix_sync.business_alerts`,
  );
  const itemsOf = new Map<string, number[]>();
  const alertsFinished: Record<string, number> = {};
  let alertItems = 0;
  for (const i of emulator.store.items.values()) {
    const n = i.uf[alertNumberField];
    if (n === null || n === undefined) continue;
    alertItems++;
    itemsOf.set(String(n), [...(itemsOf.get(String(n)) ?? []), i.id]);
  }
  for (const a of alerts) {
    if (a.sync !== "synced" || a.item_id === null)
      v.push(`alert ${a.n} is not mirrored (${a.sync}, ${a.item_id === null ? "no item" : "item known"})`);
    const items = itemsOf.get(a.n) ?? [];
    if (items.length !== 1) v.push(`alert ${a.n} has ${items.length} items in the portal`);
    else if (a.item_id !== null && Number(a.item_id) !== items[0])
      v.push(`alert ${a.n} records item ${a.item_id}, the portal holds ${items[0]}`);
    if (a.status !== "open") alertsFinished[a.status] = (alertsFinished[a.status] ?? 0) + 1;
    // The item's stage and the alert's status agree (§10.3). A terminal stage a manager set finishes
    // the alert: through the alert webhook, or the alert reconciliation when the webhook was lost or
    // came before the service knew the item. An alert the service finished (a rebind resolves the
    // user's conflicts) moves its item to the resolved stage. A manager may still close an item the
    // service resolved a moment before: a finished alert stays finished, so either terminal stage
    // goes with either finished status, except that nothing moves a closed alert's item back.
    const item = items.length === 1 ? emulator.store.items.get(items[0] as number) : undefined;
    if (!item) continue;
    const terminal = item.stageId === alertStages.resolved || item.stageId === alertStages.closed;
    if (terminal && a.status === "open")
      v.push(`alert ${a.n} is still open; its item ${item.id} is in the terminal stage ${item.stageId}`);
    else if (!terminal && a.status !== "open")
      v.push(`alert ${a.n} is ${a.status}; its item ${item.id} is still in the open stage ${item.stageId}`);
    else if (a.status === "closed" && item.stageId !== alertStages.closed)
      v.push(`alert ${a.n} is closed; its item ${item.id} is in ${item.stageId}`);
  }

  // No Contact serves two active users.
  const servedBy = new Map<string, number>();
  for (const m of mappings) servedBy.set(m.external_id, (servedBy.get(m.external_id) ?? 0) + 1);
  for (const [cid, n] of servedBy) if (n > 1) v.push(`Contact ${cid} serves ${n} active users`);

  // One Contact per user id, and no phone on two Contacts: every App phone of the run was new, so a
  // second Contact with it can only be one the service created twice.
  let duplicates = 0;
  for (const [uid, cs] of contactsOfUser) {
    if (cs.length > 1) {
      duplicates += cs.length - 1;
      v.push(`user ${uid} has ${cs.length} Contacts: ${cs.map((c) => c.id).join(", ")}`);
    }
  }
  const byPhone = new Map<string, number[]>();
  for (const c of contacts) {
    if (sharedPhone.has(c.id)) continue;
    for (const p of new Set(c.phones.map((x) => phoneKey(x.value)))) {
      byPhone.set(p, [...(byPhone.get(p) ?? []), c.id]);
    }
  }
  for (const ids of byPhone.values()) {
    if (ids.length > 1) v.push(`one phone on ${ids.length} Contacts: ${ids.join(", ")}`);
  }

  // Every intent settled: nothing open, leased or parked; nothing dead-lettered or failed.
  const open = await openWork(pool);
  for (const [k, n] of Object.entries(open)) if (n > 0) v.push(`${n} ${k} rows not settled`);
  const { rows: lost } = await pool.query<{ what: string; code: string | null; n: number }>(
    `select 'intent dead_letter' as what, last_error_code as code, count(*)::int as n
       from han_app.sync_queue where status = 'dead_letter' group by 2
     union all
     select 'workflow ' || state, coalesce(last_error_code, outcome), count(*)::int
       from bitrix_sync.workflow_instances where state in ('failed', 'waiting_manual')
        and not (workflow_type = 'contact.rebind' and state = 'failed' and last_error_code = any($1::text[]))
      group by 1, 2
     union all
     select 'rebind request ' || status, null, count(*)::int
       from bitrix_sync.rebind_requests where status in ('requested', 'in_progress') group by 1`,
    [REBIND_REFUSALS],
  );
  let lostIntents = Object.values(open).reduce((a, b) => a + b, 0);
  for (const r of lost) {
    lostIntents += r.n;
    v.push(`${r.n} ${r.what} (${r.code ?? "no code"})`);
  }
  // A reconciliation run within reconcile.lease_sec is a live one (the crontab starts one a minute
  // while a replica runs, so a check taken beside a running fleet may meet it); one past its lease
  // was left behind by a process that is gone.
  const { rows: leases } = await pool.query<{ what: string; n: number }>(
    `select 'queue' as what, count(*)::int as n from han_app.sync_queue where lease_token is not null
     union all select 'workflows', count(*)::int from bitrix_sync.workflow_instances where lease_token is not null
     union all select 'commands', count(*)::int from bitrix_sync.crm_commands where lease_token is not null
     union all select 'webhooks', count(*)::int from bitrix_sync.webhook_inbox where lease_token is not null
     union all select 'reconciliation', count(*)::int from bitrix_sync.reconciliation_cursors
                where last_run_status = 'running'
                  and last_run_started_at < now() - make_interval(secs => (bitrix_sync._active_setting('reconcile.lease_sec') #>> '{}')::double precision)`,
  );
  for (const r of leases) if (r.n > 0) v.push(`${r.n} ${r.what} rows still hold a lease`);
  const { rows: dl } = await pool.query<{ code: string | null; n: number }>(
    "select error_code as code, count(*)::int as n from bitrix_sync.technical_dead_letters group by 1",
  );
  const technicalDeadLetters = dl.reduce((a, r) => a + r.n, 0);
  for (const r of dl) v.push(`${r.n} technical dead letters (${r.code ?? "no code"})`);

  const suspects = [...contactsOfUser].filter(([, cs]) => cs.length > 1).map(([uid]) => uid);
  return {
    suspects,
    violations: v,
    duplicates,
    lostIntents,
    users: { active, inactive: users.length - active },
    contacts: contacts.length,
    technicalDeadLetters,
    alerts: alerts.length,
    alertItems,
    alertsFinished,
  };
}

/** Users created on the CRM team's duplicates that raised no duplicate_contacts alert, and why. */
export interface UnalertedDuplicates {
  users: number;
  alerted: number;
  /** Of those without an alert: the App's phone is no longer the duplicates' one. */
  phoneChanged: number;
  /** Of those without an alert, phone unchanged: deactivated at some point (an intent says so). */
  deactivated: number;
  /** Without an alert and with neither reason: their ids, for the history. */
  unexplained: string[];
}

/**
 * Looks at the users created on the CRM team's duplicates (id -> the duplicates' phone): which raised
 * a duplicate_contacts alert, and for the others whether the phone changed or the user left before
 * the first search, which would explain it. Not a check: the phone and the deactivation race the
 * service fairly. Phones are compared here and never printed.
 */
export async function unalertedDuplicates(
  pool: pg.Pool,
  onDuplicates: ReadonlyMap<string, string>,
): Promise<UnalertedDuplicates> {
  const ids = [...onDuplicates.keys()];
  const { rows } = await pool.query<{ id: string; phone: string | null; alerted: boolean; left: boolean }>(
    `select u.id::text as id, u.phone_number as phone,
            exists (select 1 from bitrix_sync.business_alerts a
                     where a.alert_type = 'duplicate_contacts' and a.user_id = u.id) as alerted,
            (u.record_status <> 'active'
             or exists (select 1 from han_app.client_profile p where p.user_id = u.id and p.record_status <> 'active')
             or exists (select 1 from han_app.sync_queue q
                         where q.entity_id = u.id and q.task_type = 'contact.deactivate')
             or exists (select 1 from bitrix_sync.workflow_instances w
                         where w.user_id = u.id and w.intent_type = 'contact.deactivate')) as left
       from han_app.user_identity u where u.id = any($1::uuid[])`,
    [ids],
  );
  const out: UnalertedDuplicates = {
    users: rows.length,
    alerted: 0,
    phoneChanged: 0,
    deactivated: 0,
    unexplained: [],
  };
  for (const r of rows) {
    if (r.alerted) out.alerted++;
    else if (phoneKey(r.phone ?? "") !== phoneKey(onDuplicates.get(r.id) ?? "")) out.phoneChanged++;
    else if (r.left) out.deactivated++;
    else out.unexplained.push(r.id);
  }
  return out;
}

/**
 * The history of the users a violation names (workflows and commands: types, states, codes, times;
 * internal IDs only), for finding the cause after a failed run.
 */
export async function historyOf(pool: pg.Pool, userIds: string[]): Promise<string[]> {
  const out: string[] = [];
  for (const id of userIds.slice(0, 5)) {
    const { rows } = await pool.query<{ line: string }>(
      `select format('%s wf %s %s %s/%s rev %s out %s err %s', to_char(w.created_at, 'HH24:MI:SS.MS'),
                     left(w.id::text, 8), w.intent_type, w.state, w.current_step, w.revision, w.outcome,
                     w.last_error_code) as line, w.created_at as at
         from bitrix_sync.workflow_instances w where w.user_id = $1
       union all
       select format('%s   intent %s %s %s att %s upd %s', to_char(q.created_at, 'HH24:MI:SS.MS'), q.task_type,
                     q.payload_json ->> 'reason', q.status, q.attempt_count, to_char(q.updated_at, 'HH24:MI:SS.MS')),
              q.created_at
         from han_app.sync_queue q where q.entity_id = $1
       union all
       select format('%s   recorded %s %s (not folded yet)', to_char(j.recorded_at, 'HH24:MI:SS.MS'), j.task_type, j.reason),
              j.recorded_at
         from han_app.sync_queue_journal j where j.user_id = $1
       union all
       select format('%s   App identity %s, updated %s', to_char(u.created_at, 'HH24:MI:SS.MS'), u.record_status,
                     to_char(u.updated_at, 'HH24:MI:SS.MS')), u.created_at
         from han_app.user_identity u where u.id = $1
       union all
       select format('%s   cmd %s %s %s err %s sent %s upd %s resp %s', to_char(c.created_at, 'HH24:MI:SS.MS'),
                     c.id, c.command_type, c.status, c.last_error_code, to_char(c.sent_at, 'HH24:MI:SS.MS'),
                     to_char(c.updated_at, 'HH24:MI:SS.MS'), c.response ->> 'contact_id'), c.created_at
         from bitrix_sync.crm_commands c join bitrix_sync.workflow_instances w on w.id = c.workflow_id
        where w.user_id = $1
       order by at`,
      [id],
    );
    out.push(`history of user ${id}:`, ...rows.map((r) => `  ${r.line}`));
  }
  return out;
}

export interface RateResult {
  violations: string[];
  /** Requests the portal's own bucket refused (not injected). */
  bucketRefusals: number;
  /** Highest level of the portal's bucket, replayed from the accepted requests. */
  maxLevel: number;
}

/**
 * The portal's limit across all replicas together: the leaky bucket replayed over every request it
 * counted must stay within its threshold, and no request may be refused by the bucket itself (the
 * injected storms' refusals are labelled as faults in the log and do not count).
 */
export function checkRate(
  log: readonly RequestLogEntry[],
  rate: { drainPerSec: number; threshold: number },
  windows: readonly Window[],
): RateResult {
  const v: string[] = [];
  let level = 0;
  let last = log[0]?.at ?? 0;
  let maxLevel = 0;
  let bucketRefusals = 0;
  for (const e of log) {
    level = Math.max(0, level - ((e.at - last) / 1000) * rate.drainPerSec);
    last = e.at;
    const refusedByBucket = e.status === 503 && e.fault === undefined && e.commands.length === 0;
    if (refusedByBucket) {
      bucketRefusals++;
      const after = windows.filter((w) => w.kind === "query_limit_storm" && w.to <= e.at).at(-1);
      v.push(
        `request at +${e.at - (log[0]?.at ?? 0)} ms refused by the portal's rate limit${after ? `, ${e.at - after.to} ms after a storm ended` : ""}`,
      );
      continue;
    }
    level += 1;
    maxLevel = Math.max(maxLevel, level);
  }
  if (maxLevel > rate.threshold) v.push(`portal bucket reached ${maxLevel.toFixed(1)} > ${rate.threshold}`);
  return { violations: v, bucketRefusals, maxLevel };
}

/**
 * Personal data and secrets must not appear in any replica's output. Phones are looked up as whole
 * digit runs (with or without the +), so a timestamp that happens to contain a phone's digits does
 * not count; names and e-mails as whole words.
 */
export function checkOutput(outputs: Map<string, string>, personal: Personal, secrets: string[]): string[] {
  const v: string[] = [];
  for (const [name, text] of outputs) {
    const digitRuns = new Set(text.match(/\d+/g) ?? []);
    const words = new Set(text.match(/[A-Za-z0-9_-]+/g) ?? []);
    const emails = new Set(text.match(/[A-Za-z0-9._+-]+@[A-Za-z0-9.-]+/g) ?? []);
    const found = new Map<string, number>();
    const hit = (what: string) => found.set(what, (found.get(what) ?? 0) + 1);
    for (const p of personal.phones) if (digitRuns.has(p.replace(/^\+/, ""))) hit("a phone");
    for (const n of personal.names) if (words.has(n.replace(/^Chaos /, ""))) hit("a name");
    for (const e of personal.emails) if (emails.has(e)) hit("an e-mail");
    for (const s of secrets) if (s.length >= 8 && text.includes(s)) hit("a secret");
    for (const [what, n] of found) v.push(`${name}'s output holds ${what} (${n} distinct values)`);
  }
  return v;
}
