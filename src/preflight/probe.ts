// `npm run preflight -- --write` (docs/deployment.md, "The write probe"; docs/portal-setup.md): an
// opt-in contract probe against the configured portal. It creates throw-away Contacts of its own (a
// recognisable name with the run id, phones of the +7 0xx range no subscriber has) and sends every
// call form the service uses, built by the service's own code (the catalogue's builders through
// executeBatch, under the service's limiter): the add with every field the service writes, the reads
// and lists with reconciliation's and the audit's selects and filters, the phone search, a phone
// overwritten by its entry ID, the flag and the user id cleared, a batch carrying a `$result[...]`
// reference in a name, and the alert smart process's add, stage move and lookup. Where the portal
// does not do what the service expects, it tries the other form and names the setting to change.
// Whatever it created it deletes in `finally` (also after SIGINT: the caller aborts `signal`), and it
// names by ID what it could not delete. A probe that passed is recorded in the database
// (bitrix_sync.record_crm_contract_probe): readiness stops reporting crm_contract_unconfirmed.
import { randomBytes, randomUUID } from "node:crypto";
import type pg from "pg";
import { type AlertRow, alertItemFields, alertTitle, mirrorsToCrm } from "../alerts/mirror.js";
import { SINCE_EVER } from "../audit/run.js";
import type { Config } from "../config/env.js";
import type { CrmClient } from "../crm/client.js";
import {
  type CommandOutcome,
  type CommandResults,
  type CommandType,
  type ContactRecord,
  type ContractForms,
  type Crm,
  type CrmCommand,
  type CrmDeps,
  contractForms,
  createCrm,
  createPortalLimiter,
  executeBatch,
  PAGE_SIZE,
  phoneChange,
  planPhoneUpdate,
  toPortalTimestamp,
} from "../crm/index.js";
import { createPool } from "../db/pools.js";
import type { Settings } from "../settings-schema.js";
import { type CheckResult, check, notChecked } from "./types.js";

/** Every line the probe writes, in order. */
export const PROBE_IDS = [
  "probe.contact_add",
  "probe.contact_read",
  "probe.registered_write",
  "probe.find_by_user_id",
  "probe.find_by_phone",
  "probe.list_changed",
  "probe.date_filter",
  "probe.phone_update",
  "probe.batch_references",
  "probe.clear",
  "probe.registered_filter",
  "probe.alert_item",
  "probe.cleanup",
  "probe.operating_time",
  "probe.recorded",
] as const;
export type ProbeId = (typeof PROBE_IDS)[number];

/** The default name of the probe's Contacts; the run id follows it. */
export const DEFAULT_PROBE_NAME = "bitrix-sync preflight probe";

export interface ProbeOptions {
  /** Name prefix of the throw-away Contacts (--probe-name, BITRIX_SYNC_PROBE_NAME). */
  name?: string;
  /**
   * The first phone of the probe's Contacts (--probe-phone, BITRIX_SYNC_PROBE_PHONE), +7XXXXXXXXXX;
   * the next two differ in the last digit. Default: a random number of the +7 0xx range, which the
   * Russian numbering plan gives to no subscriber.
   */
  phone?: string;
  /** Aborted on SIGINT: the remaining steps are not run, the clean-up is. */
  signal?: AbortSignal;
  /** The run id (8-32 lowercase hex); random by default. */
  runId?: string;
}

/** Why the probe options cannot be used, or null. Names the variable, never the value. */
export function probeOptionsProblem(o: ProbeOptions): string | null {
  if (o.name !== undefined && !/^[^\s$][^$]{0,79}$/u.test(o.name))
    return "--probe-name / BITRIX_SYNC_PROBE_NAME: 1 to 80 characters, not starting with a space, without $";
  if (o.phone !== undefined && !/^\+70\d{9}$/.test(o.phone))
    return "--probe-phone / BITRIX_SYNC_PROBE_PHONE: +70 and 9 digits (the +7 0xx range no subscriber has)";
  if (o.runId !== undefined && !/^[0-9a-f]{8,32}$/.test(o.runId)) return "the run id: 8 to 32 hex digits";
  return null;
}

/** The portal's operating time seen per REST method (time.operating of direct calls, result_time of batches). */
interface MethodTime {
  calls: number;
  inBatch: number;
  /** The largest `operating` the portal reported for the method (its sum over the last 10 minutes). */
  operating: number | null;
}

function rec(v: unknown): Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
}

function asMap(v: unknown): Record<string, unknown> {
  if (Array.isArray(v)) return Object.fromEntries(v.map((x, i) => [String(i), x]));
  return rec(v);
}

function num(v: unknown): number | null {
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

/** The client with every reply's operating time recorded per method (batch: per sub-command). */
function metered(client: CrmClient, times: Map<string, MethodTime>): CrmClient {
  const note = (method: string, time: unknown, inBatch: boolean) => {
    const t = times.get(method) ?? { calls: 0, inBatch: 0, operating: null };
    t.calls++;
    if (inBatch) t.inBatch++;
    const op = num(rec(time).operating);
    if (op !== null) t.operating = Math.max(t.operating ?? 0, op);
    times.set(method, t);
  };
  return {
    portalHost: client.portalHost,
    close: () => client.close(),
    async call(method, params, opts) {
      const r = await client.call(method, params, opts);
      if (r.type !== "reply" || r.status !== 200) return r;
      const body = rec(r.body);
      if (method === "batch") {
        const cmd = rec(rec(params).cmd);
        const inner = rec(body.result);
        const time = asMap(inner.result_time);
        const answered = { ...asMap(inner.result), ...asMap(inner.result_error) };
        for (const [key, line] of Object.entries(cmd)) {
          if (!(key in answered)) continue;
          const m = String(line).split("?")[0] ?? "";
          note(m, time[key], true);
        }
        note("batch", body.time, false);
      } else {
        note(method, body.time, false);
      }
      return r;
    },
  };
}

const FLAG = { "1": "1/0", Y: "Y/N" } as const;
const other = {
  write: (f: ContractForms["registeredWrite"]) => (f === "1" ? "Y" : "1") as ContractForms["registeredWrite"],
  filter: (f: ContractForms["registeredFilter"]) =>
    (f === "1" ? "Y" : "1") as ContractForms["registeredFilter"],
  date: (f: ContractForms["dateFilter"]) =>
    (f === "offset" ? "no_offset" : "offset") as ContractForms["dateFilter"],
};
const DATE_FORM = {
  offset: "with an offset (+00:00)",
  no_offset: "without an offset, 12 h earlier",
} as const;
/** How far after the Contact's last change a filter value must lie to exclude it, per form. */
const AFTER_MS = { offset: 60_000, no_offset: 27 * 3600_000 } as const;

/** What went wrong with a command, in words and codes only. */
function failed(o: CommandOutcome | undefined): string {
  if (!o) return "no answer";
  if (o.ok) return "ok";
  const f = o.failure;
  return `${f.code}${f.bitrixError ? ` ${f.bitrixError}` : ""}${f.httpStatus ? `, HTTP ${f.httpStatus}` : ""}`;
}

class Interrupted extends Error {
  override name = "Interrupted";
}

/** The state of one run. */
class Run {
  readonly lines = new Map<ProbeId, CheckResult>();
  readonly contacts = new Set<number>();
  readonly items = new Set<number>();
  readonly times = new Map<string, MethodTime>();
  readonly runId: string;
  readonly name: string;
  readonly phones: [string, string, string];
  readonly userIds = [randomUUID(), randomUUID()] as const;
  readonly email: string;
  deps!: CrmDeps;
  crm!: Crm;

  constructor(
    readonly config: Config,
    readonly settings: Settings,
    readonly forms: ContractForms,
    readonly opts: ProbeOptions,
  ) {
    this.runId = opts.runId ?? randomBytes(4).toString("hex");
    this.name = `${opts.name ?? DEFAULT_PROBE_NAME} ${this.runId}`;
    const first = opts.phone ?? `+70${String(Math.floor(Math.random() * 1e9)).padStart(9, "0")}`;
    const bump = (n: number) => `${first.slice(0, -1)}${(Number(first.slice(-1)) + n) % 10}`;
    this.phones = [first, bump(1), bump(2)];
    this.email = `probe-${this.runId}@example.invalid`;
  }

  line(id: ProbeId, r: CheckResult): void {
    this.lines.set(id, r);
  }

  ok(id: ProbeId, detail: string): void {
    this.line(id, check(id, "ok", detail));
  }

  fail(id: ProbeId, detail: string, hint: string): void {
    this.line(id, check(id, "fail", detail, hint));
  }

  unknown(id: ProbeId, why: string, hint?: string): void {
    this.line(id, notChecked(id, why, hint));
  }

  checkSignal(): void {
    if (this.opts.signal?.aborted) throw new Interrupted("interrupted");
  }

  /** The catalogue's builders with other forms than the settings', for trying the other form. */
  with(forms: Partial<ContractForms>): CrmDeps {
    return {
      ...this.deps,
      catalogue: { fields: this.deps.catalogue.fields, forms: { ...this.forms, ...forms } },
    };
  }

  async send(cmds: CrmCommand[], deps: CrmDeps = this.deps): Promise<CommandOutcome[]> {
    this.checkSignal();
    const out = await executeBatch(deps, cmds, this.opts.signal ? { signal: this.opts.signal } : {});
    // A request cut off by SIGINT is the interruption, not the portal's answer (a create it carried
    // may still have happened: the clean-up looks for it by the probe's phones and user ids).
    this.checkSignal();
    return out;
  }

  async one<T extends CommandType>(
    cmd: Extract<CrmCommand, { type: T }>,
    deps: CrmDeps = this.deps,
  ): Promise<{ ok: true; result: CommandResults[T] } | { ok: false; why: string }> {
    const [o] = await this.send([cmd], deps);
    if (o?.ok) return { ok: true, result: o.result as CommandResults[T] };
    return { ok: false, why: failed(o) };
  }

  async read(id: number): Promise<ContactRecord | string> {
    const r = await this.one({ type: "contact.read", params: { ids: [id] } });
    if (!r.ok) return `contact.read failed (${r.why})`;
    return r.result.contacts.find((c) => c.id === id) ?? "contact.read did not return it";
  }

  /**
   * Whether contact.list_changed (keyset form, from just above the Contact) returns `id` with these
   * forms and since `since`.
   */
  async listed(
    id: number,
    since: string,
    deps: CrmDeps = this.deps,
    opened = this.opened,
  ): Promise<boolean | string> {
    const r = await this.one(
      { type: "contact.list_changed", params: { updatedSince: since, afterId: id - 1, opened } },
      deps,
    );
    if (!r.ok) return `contact.list_changed failed (${r.why})`;
    return r.result.ids.includes(id);
  }

  get opened(): Settings["reconcile"]["openedFilter"] {
    return this.settings.reconcile.openedFilter;
  }

  /** A direct call (deletes) under a limiter permit, as every request to the portal. */
  async direct(method: string, params: object): Promise<{ ok: boolean; why: string }> {
    const permit = await this.deps.limiter.acquire();
    try {
      const r = await this.deps.client.call(method, params);
      if (r.type === "reply" && r.status === 200 && "result" in rec(r.body)) return { ok: true, why: "" };
      if (r.type === "reply") {
        const b = rec(r.body);
        const code = typeof b.error === "string" && /^[A-Za-z0-9_]{1,64}$/.test(b.error) ? b.error : "";
        const text =
          typeof b.error_description === "string" && b.error_description.length <= 80
            ? b.error_description
            : "";
        return { ok: false, why: `${code || text || "refused"}, HTTP ${r.status}` };
      }
      return { ok: false, why: r.type === "network" ? r.code : "malformed reply" };
    } finally {
      await permit.release();
    }
  }
}

/**
 * Runs the probe and returns its lines (PROBE_IDS, in order). `databaseUrl`: the service's
 * connection (the limiter is shared with a running service, and the pass is recorded there).
 */
export async function runWriteProbe(
  config: Config,
  settings: Settings,
  databaseUrl: string,
  opts: ProbeOptions = {},
): Promise<CheckResult[]> {
  const forms = contractForms(settings);
  const run = new Run(config, settings, forms, opts);
  const host = config.env.BITRIX_SYNC_PORTAL_HOST as string;
  const timeoutMs = config.env.BITRIX_SYNC_HTTP_TIMEOUT_SEC * 1000;
  const pool = createPool(databaseUrl, "work", { max: 2 });
  pool.on("error", () => undefined);
  const crm = createCrm({
    webhookUrl: config.secrets.BITRIX_SYNC_CRM_REST_WEBHOOK_URL as string,
    portalHost: host,
    timeoutMs,
    fields: config.fields,
    limiter: createPortalLimiter(pool, host, timeoutMs, () => settings),
    settings: () => settings,
    observe: (c) => metered(c, run.times),
  });
  run.crm = crm;
  run.deps = crm.deps;
  try {
    try {
      await steps(run);
    } catch (e) {
      const why =
        e instanceof Interrupted || (e as { name?: string }).name === "AbortError"
          ? "interrupted (SIGINT) before this step"
          : `the probe stopped: ${(e as Error).name} (${String((e as { code?: unknown }).code ?? "no code")})`;
      for (const id of PROBE_IDS.slice(0, PROBE_IDS.indexOf("probe.cleanup")))
        if (!run.lines.has(id)) run.unknown(id, why);
    } finally {
      await cleanup(run);
    }
    operatingTime(run);
    await record(run, pool, host);
    return PROBE_IDS.map((id) => run.lines.get(id) ?? notChecked(id, "not reached"));
  } finally {
    await crm.close();
    await pool.end().catch(() => undefined);
  }
}

async function steps(run: Run): Promise<void> {
  const { fields } = run.config;
  // The citizenship list, as the dictionary reads it, for the add's enumeration value.
  const cit = await run.one({ type: "citizenship.list", params: {} });
  const citizenship = cit.ok ? (cit.result.items[0]?.id ?? null) : null;

  // The add with every field the service writes (src/workflows/command-payloads.ts, hydrate).
  const added = await run.one({
    type: "contact.add",
    params: {
      phone: run.phones[0],
      userId: run.userIds[0],
      registered: true,
      name: run.name,
      email: run.email,
      citizenshipEnumId: citizenship,
    },
  });
  if (!added.ok) {
    run.fail(
      "probe.contact_add",
      `contact.add (crm.contact.add with the phone, ${fields.userId}, ${fields.registered}, the citizenship, name and e-mail) failed: ${added.why}`,
      "the technical user must be allowed to add Contacts (docs/portal-setup.md); the other steps need the probe's Contact",
    );
    for (const id of PROBE_IDS.slice(1, PROBE_IDS.indexOf("probe.alert_item")))
      run.unknown(id, "the probe's Contact could not be created (probe.contact_add)");
    await alertItem(run);
    return;
  }
  const id = added.result.contactId;
  run.contacts.add(id);
  run.ok(
    "probe.contact_add",
    `crm.contact.add created Contact ${id} with the phone, the user id, the registration flag (${FLAG[run.forms.registeredWrite]}), ${citizenship === null ? "no citizenship (the list has no element)" : "a citizenship element"}, a name and an e-mail`,
  );

  // contact.read: what was written comes back.
  let c = await run.read(id);
  if (typeof c === "string") {
    run.fail("probe.contact_read", c, "the technical user must be allowed to read Contacts");
    for (const i of PROBE_IDS.slice(2, PROBE_IDS.indexOf("probe.alert_item")))
      run.unknown(i, "the probe's Contact could not be read (probe.contact_read)");
    await alertItem(run);
    return;
  }
  const wrong: string[] = [];
  if (c.name !== run.name) wrong.push("NAME");
  if (c.phones.length !== 1 || c.phones[0]?.value !== run.phones[0])
    wrong.push(`PHONE (${c.phones.length} entries)`);
  if (c.emails[0]?.value !== run.email) wrong.push("EMAIL");
  if (c.userId !== run.userIds[0]) wrong.push(`${fields.userId} (the user id)`);
  if (citizenship !== null && c.citizenshipEnumId !== citizenship)
    wrong.push(`${fields.citizenship} (citizenship)`);
  if (wrong.length > 0) {
    run.fail(
      "probe.contact_read",
      `contact.read (crm.contact.list, the service's select) returned the probe's Contact with other values in: ${wrong.join(", ")}`,
      "check the field names (BITRIX_SYNC_CONTACT_*_FIELD) and the technical user's rights on those fields; the service reads back what it writes",
    );
  } else {
    run.ok(
      "probe.contact_read",
      "contact.read returned every field as written (name, phone, e-mail, user id, citizenship)",
    );
  }

  // The registration flag: written in the configured form, read back set.
  let writeForms: Partial<ContractForms> = {};
  if (c.registered === true) {
    run.ok(
      "probe.registered_write",
      `the flag written as ${FLAG[run.forms.registeredWrite]} (contract.registered_write=${run.forms.registeredWrite}) reads back set`,
    );
  } else {
    const alt = other.write(run.forms.registeredWrite);
    const retry = await run.one(
      { type: "contact.update", params: { id, registered: true } },
      run.with({ registeredWrite: alt }),
    );
    const again = retry.ok ? await run.read(id) : retry.why;
    const altWorks = typeof again !== "string" && again.registered === true;
    run.fail(
      "probe.registered_write",
      `the flag written as ${FLAG[run.forms.registeredWrite]} (contract.registered_write=${run.forms.registeredWrite}) reads back ${c.registered === false ? "cleared" : "empty"}${altWorks ? `; written as ${FLAG[alt]} it reads back set` : `; written as ${FLAG[alt]} it does not either`}`,
      altWorks
        ? `set contract.registered_write to ${alt} (docs/configuration.md), then run the probe again`
        : `the portal keeps neither form: check that ${fields.registered} is a boolean field (Yes/No) the technical user may write`,
    );
    if (altWorks) {
      writeForms = { registeredWrite: alt };
      c = again;
    }
  }
  const flagSet = c.registered === true;
  const modified = c.updatedAt;

  // Lookups: by the user id (a lost create's recovery), by the phone (mapping).
  const byUser = await run.one({ type: "contact.find_by_user_id", params: { userId: run.userIds[0] } });
  if (byUser.ok && byUser.result.contactIds.includes(id)) {
    run.ok(
      "probe.find_by_user_id",
      `crm.contact.list filtered on ${fields.userId} finds the probe's Contact`,
    );
  } else {
    run.fail(
      "probe.find_by_user_id",
      byUser.ok
        ? `crm.contact.list filtered on ${fields.userId} = the probe's user id did not return it (${byUser.result.contactIds.length} other(s))`
        : `contact.find_by_user_id failed (${byUser.why})`,
      "a lost create could not be recovered by its user id (docs/decisions.md, 8); check that the field is a plain string field",
    );
  }
  const byPhone = await run.one({ type: "contact.find_by_phone", params: { phones: [run.phones[0]] } });
  if (byPhone.ok && byPhone.result.contactIds.includes(id)) {
    run.ok(
      "probe.find_by_phone",
      "crm.duplicate.findbycomm (PHONE, CONTACT) finds the probe's Contact by its phone",
    );
  } else {
    run.fail(
      "probe.find_by_phone",
      byPhone.ok
        ? "crm.duplicate.findbycomm did not find the probe's Contact by the phone it was created with"
        : `contact.find_by_phone failed (${byPhone.why})`,
      "mapping by phone would create duplicates: report it with the portal's edition; the technical user must see Contacts' phones",
    );
  }

  // The lists reconciliation and the audit send, and their filters.
  let listForms: Partial<ContractForms> = {};
  let opened = run.opened;
  // Whether some form of the list returns the probe's Contact (the service's, or the one named).
  let listed = false;
  if (!flagSet || modified === null) {
    const why = !flagSet
      ? "the flag could not be set (probe.registered_write)"
      : "the Contact has no DATE_MODIFY";
    run.unknown("probe.list_changed", why);
    run.unknown("probe.date_filter", why);
  } else {
    const before = toPortalTimestamp(new Date(Date.parse(modified) - 60_000));
    ({ listForms, opened, listed } = await listChanged(run, id, before));
    if (!listed && !run.lines.has("probe.date_filter")) {
      run.unknown("probe.date_filter", "the list does not return the probe's Contact (probe.list_changed)");
    } else if (!run.lines.has("probe.date_filter")) {
      await dateFilter(run, id, modified, before, listForms, opened);
    }
  }

  // A phone overwritten by its entry ID (planPhoneUpdate, phoneChange), never appended.
  const current = await run.read(id);
  if (typeof current === "string") {
    run.unknown("probe.phone_update", current);
  } else {
    const plan = planPhoneUpdate(current.phones, run.phones[1], run.phones[0]);
    if (plan === null || !("entryId" in plan)) {
      run.unknown("probe.phone_update", "the probe's phone entry was not found to overwrite");
    } else {
      const upd = await run.one({
        type: "contact.update",
        params: { id, phones: [phoneChange(plan, run.phones[1])] },
      });
      const after = upd.ok ? await run.read(id) : `contact.update failed (${upd.why})`;
      if (typeof after === "string") {
        run.fail("probe.phone_update", after, "the technical user must be allowed to change Contacts");
      } else if (
        after.phones.length === 1 &&
        after.phones[0]?.value === run.phones[1] &&
        after.phones[0]?.id === plan.entryId
      ) {
        run.ok(
          "probe.phone_update",
          `PHONE entry ${plan.entryId} overwritten by its ID: still one entry, the new number`,
        );
      } else {
        run.fail(
          "probe.phone_update",
          `after an update of PHONE entry ${plan.entryId} by its ID the Contact has ${after.phones.length} phone entr${after.phones.length === 1 ? "y" : "ies"}${after.phones.some((p) => p.value === run.phones[1]) ? "" : ", none with the new number"}`,
          "the service overwrites a phone by its entry ID (reference §5); a portal that appends would pile up numbers: report it",
        );
      }
    }
  }

  await batchReferences(run, id);

  // The flag and the user id cleared (a deactivation, a rebind's clear).
  const cleared = await run.one(
    { type: "contact.update", params: { id, registered: false, userId: null } },
    run.with(writeForms),
  );
  const afterClear = cleared.ok ? await run.read(id) : `contact.update failed (${cleared.why})`;
  if (typeof afterClear === "string") {
    run.fail("probe.clear", afterClear, "the technical user must be allowed to change Contacts");
    run.unknown("probe.registered_filter", "the flag could not be cleared (probe.clear)");
  } else {
    const left: string[] = [];
    if (afterClear.registered === true) left.push(`${fields.registered} still set`);
    if (afterClear.userId !== null) left.push(`${fields.userId} still holds a value`);
    if (left.length === 0) {
      run.ok("probe.clear", "clearing the flag and the user id reads back cleared and empty");
    } else {
      run.fail(
        "probe.clear",
        `after contact.update cleared them: ${left.join("; ")}`,
        left.some((l) => l.startsWith(fields.registered))
          ? `the flag is written as ${FLAG[run.forms.registeredWrite]}: set contract.registered_write to the form the portal keeps (probe.registered_write)`
          : "the service clears the user id with an empty value: report it",
      );
    }
    if (!run.lines.has("probe.registered_filter")) {
      if (!listed || modified === null) {
        run.unknown(
          "probe.registered_filter",
          "no form of the list returned the probe's Contact with the flag set (probe.list_changed)",
        );
      } else {
        const before = toPortalTimestamp(new Date(Date.parse(modified) - 60_000));
        const still = await run.listed(id, before, run.with(listForms), opened);
        const f = { ...run.forms, ...listForms }.registeredFilter;
        if (still === false) {
          run.ok(
            "probe.registered_filter",
            `filtered as ${f} (contract.registered_filter), the list returns the probe's Contact with the flag set and not after it was cleared`,
          );
        } else if (typeof still === "string") {
          run.unknown("probe.registered_filter", still);
        } else {
          const alt = other.filter(f);
          const altStill = await run.listed(
            id,
            before,
            run.with({ ...listForms, registeredFilter: alt }),
            opened,
          );
          run.fail(
            "probe.registered_filter",
            `filtered as ${f}, the list still returns the probe's Contact after its flag was cleared: the filter does not narrow, reconciliation and the audit would read every changed Contact as registered`,
            altStill === false
              ? `filtered as ${alt} it does not: set contract.registered_filter to ${alt}, then run the probe again to confirm it finds a flagged Contact`
              : "no form narrows: report it with the portal's edition",
          );
        }
      }
    }
  }

  await alertItem(run);
}

/**
 * contact.list_changed in the three forms the service sends: reconciliation's keyset (afterId,
 * start=-1) and offset (start, with total; the other pages in one batch), the audit's (afterId,
 * start, withUserId). When the service's forms miss the probe's Contact, each other form is tried
 * alone and the one that finds it is named.
 */
async function listChanged(
  run: Run,
  id: number,
  before: string,
): Promise<{
  listForms: Partial<ContractForms>;
  opened: Settings["reconcile"]["openedFilter"];
  listed: boolean;
}> {
  const opened = run.opened;
  const baseline = await run.listed(id, before);
  if (typeof baseline === "string") {
    run.fail("probe.list_changed", baseline, "the technical user must be allowed to list Contacts");
    run.unknown("probe.date_filter", "the list failed (probe.list_changed)");
    run.unknown("probe.registered_filter", "the list failed (probe.list_changed)");
    return { listForms: {}, opened, listed: false };
  }
  if (!baseline) {
    const f = run.forms;
    const tries: Array<{
      what: string;
      setting: string;
      value: string;
      forms: Partial<ContractForms>;
      opened: typeof opened;
    }> = [
      {
        what: `the flag filtered as ${other.filter(f.registeredFilter)}`,
        setting: "contract.registered_filter",
        value: other.filter(f.registeredFilter),
        forms: { registeredFilter: other.filter(f.registeredFilter) },
        opened,
      },
      {
        what: `>=updatedTime ${DATE_FORM[other.date(f.dateFilter)]}`,
        setting: "contract.date_filter",
        value: other.date(f.dateFilter),
        forms: { dateFilter: other.date(f.dateFilter) },
        opened,
      },
      ...(["Y", "1"] as const)
        .filter((v) => v !== opened)
        .map((v) => ({
          what: `opened=${v}`,
          setting: "reconcile.opened_filter",
          value: v,
          forms: {},
          opened: v,
        })),
    ];
    let fix: (typeof tries)[number] | null = null;
    for (const t of tries) {
      if ((await run.listed(id, before, run.with(t.forms), t.opened)) === true) {
        fix = t;
        break;
      }
    }
    const service = `the flag filtered as ${f.registeredFilter}, opened=${opened}, >=updatedTime ${DATE_FORM[f.dateFilter]}`;
    if (fix === null) {
      run.fail(
        "probe.list_changed",
        `crm.item.list with the service's filters (${service}) does not return the probe's Contact, nor with any other form`,
        "reconciliation would find no change: check that Contacts the service creates are open (OPENED) and visible to the technical user, and report it",
      );
      run.unknown(
        "probe.date_filter",
        "no form of the list returns the probe's Contact (probe.list_changed)",
      );
      run.unknown(
        "probe.registered_filter",
        "no form of the list returns the probe's Contact (probe.list_changed)",
      );
      return { listForms: {}, opened, listed: false };
    }
    const detail = `crm.item.list with the service's filters (${service}) does not return the probe's Contact; with ${fix.what} it does`;
    const hint = `set ${fix.setting} to ${fix.value} (docs/configuration.md), then run the probe again: reconciliation and the audit would find nothing`;
    if (fix.setting === "contract.registered_filter") run.fail("probe.registered_filter", detail, hint);
    else if (fix.setting === "contract.date_filter") run.fail("probe.date_filter", detail, hint);
    run.fail("probe.list_changed", detail, hint);
    return { listForms: fix.forms, opened: fix.opened, listed: true };
  }

  // The service's forms find it: every form the service sends must.
  const [offset, audit] = await run.send([
    { type: "contact.list_changed", key: "offset", params: { updatedSince: before, start: 0, opened } },
    {
      type: "contact.list_changed",
      key: "audit",
      params: { updatedSince: SINCE_EVER, afterId: id - 1, start: 0, opened, withUserId: true },
    },
  ]);
  const problems: string[] = [];
  if (!offset?.ok) problems.push(`the offset form failed (${failed(offset)})`);
  else {
    const r = offset.result as CommandResults["contact.list_changed"];
    let found = r.ids.includes(id);
    const total = r.total ?? r.ids.length;
    // The other pages go out together, as reconciliation sends them (at most 20 pages here).
    const rest: CrmCommand[] = [];
    for (let start = PAGE_SIZE; !found && start < total && rest.length < 20; start += PAGE_SIZE)
      rest.push({ type: "contact.list_changed", params: { updatedSince: before, start, opened } });
    for (const o of rest.length > 0 ? await run.send(rest) : [])
      if (o.ok && (o.result as CommandResults["contact.list_changed"]).ids.includes(id)) found = true;
    if (r.total === null) problems.push("the offset form came back without a total");
    if (!found) problems.push(`the offset form (start, with total ${total}) did not return it`);
  }
  if (!audit?.ok) problems.push(`the audit's form failed (${failed(audit)})`);
  else {
    const r = audit.result as CommandResults["contact.list_changed"];
    const row = r.rows?.find((x) => x.id === id);
    if (!row) problems.push("the audit's form (withUserId) did not return it");
    else if (row.userId !== run.userIds[0]) problems.push("the audit's form returned it without its user id");
  }
  if (problems.length > 0) {
    run.fail(
      "probe.list_changed",
      `the keyset form finds the probe's Contact, but ${problems.join("; ")}`,
      "report it: reconciliation pages by offset and the audit reads the user id field from the list",
    );
  } else {
    run.ok(
      "probe.list_changed",
      `crm.item.list finds the probe's Contact in the keyset form (afterId, start=-1), the offset form (start, total) and the audit's (withUserId, with its user id); the flag filtered as ${run.forms.registeredFilter}, opened=${opened}`,
    );
  }
  return { listForms: {}, opened, listed: true };
}

/** The modification-date filter narrows: a value after the Contact's change excludes it, one before includes it. */
async function dateFilter(
  run: Run,
  id: number,
  modified: string,
  before: string,
  listForms: Partial<ContractForms>,
  opened: Settings["reconcile"]["openedFilter"],
): Promise<void> {
  const form = { ...run.forms, ...listForms }.dateFilter;
  const afterOf = (f: ContractForms["dateFilter"]) =>
    toPortalTimestamp(new Date(Date.parse(modified) + AFTER_MS[f]));
  const excluded = await run.listed(id, afterOf(form), run.with(listForms), opened);
  const included = await run.listed(id, before, run.with(listForms), opened);
  if (typeof excluded === "string" || typeof included === "string") {
    run.unknown("probe.date_filter", String(typeof excluded === "string" ? excluded : included));
    return;
  }
  if (!excluded && included) {
    run.ok(
      "probe.date_filter",
      `>=updatedTime ${DATE_FORM[form]} (contract.date_filter=${form}) narrows: a value after the Contact's change excludes it, one before includes it`,
    );
    return;
  }
  const alt = other.date(form);
  const altDeps = run.with({ ...listForms, dateFilter: alt });
  const altWorks =
    (await run.listed(id, afterOf(alt), altDeps, opened)) === false &&
    (await run.listed(id, before, altDeps, opened)) === true;
  run.fail(
    "probe.date_filter",
    `>=updatedTime ${DATE_FORM[form]} does not narrow: a value after the Contact's change ${excluded ? "still returns it (the filter is ignored or misread)" : "excludes it"}, one before ${included ? "returns it" : "does not"}`,
    altWorks
      ? `${DATE_FORM[alt]} it narrows: set contract.date_filter to ${alt} (docs/configuration.md), then run the probe again`
      : "no form narrows: reconciliation would read every Contact each run or miss changes; report it with the portal's edition",
  );
}

/**
 * A name carrying a `$result[...]` reference, sent the way the service sends a create: through
 * executeBatch, next to another command. It must be stored as sent (reference §3: the portal
 * resolves references inside every value of a batch).
 */
async function batchReferences(run: Run, id: number): Promise<void> {
  const name = `${run.name} $result[c0][0][ID]`;
  const [, o] = await run.send([
    { type: "contact.read", key: "c0", params: { ids: [id] } },
    {
      type: "contact.add",
      key: "c1",
      params: { phone: run.phones[2], userId: run.userIds[1], registered: false, name },
    },
  ]);
  if (!o?.ok) {
    run.unknown("probe.batch_references", `the batch's contact.add failed (${failed(o)})`);
    return;
  }
  const second = (o.result as CommandResults["contact.add"]).contactId;
  run.contacts.add(second);
  const c = await run.read(second);
  if (typeof c === "string") {
    run.unknown("probe.batch_references", c);
  } else if (c.name === name) {
    run.ok(
      "probe.batch_references",
      "a name holding $result[c0][0][ID], created through executeBatch, is stored as sent",
    );
  } else {
    run.fail(
      "probe.batch_references",
      `a name holding $result[c0][0][ID], created through executeBatch, came back ${c.name === null ? "empty" : c.name.startsWith(run.name) ? `as "${c.name.slice(0, 120)}"` : "changed"}: the portal resolved the reference inside a value of the batch`,
      "free text (a name, an e-mail) must not travel inside a batch (reference §3): the service's send path must send such values in a direct call; report it",
    );
  }
}

/** The alert smart process: an item added, looked up by its number, moved to the resolved stage. */
async function alertItem(run: Run): Promise<void> {
  const s = run.settings.alerts;
  if (!mirrorsToCrm(s)) {
    run.line(
      "probe.alert_item",
      check(
        "probe.alert_item",
        "warn",
        s.databaseOnly
          ? "skipped: alerts.database_only is true, no item is ever made"
          : "skipped: alerts.entity_type_id is not set",
        "configure the alert smart process and run the probe again to test its calls (docs/portal-setup.md)",
      ),
    );
    return;
  }
  const numberField = s.fields.alert_number;
  const number = 2_000_000_000 + Math.floor(Math.random() * 100_000_000);
  const row: AlertRow = {
    id: "0",
    alert_number: String(number),
    alert_type: `preflight_probe_${run.runId}`,
    severity: "low",
    fingerprint: run.runId.padEnd(64, "0"),
    user_id: null,
    current_contact_id: null,
    selected_contact_id: null,
    candidate_contact_ids: [],
    details: { probe: run.runId },
    status: "open",
    item_id: null,
    occurrence_count: 1,
    first_occurred_at: new Date(),
    last_occurred_at: new Date(),
    previous_number: null,
    correlation_id: null,
  };
  const added = await run.one({
    type: "alert.add",
    params: { entityTypeId: s.entityTypeId, fields: alertItemFields(row, s) },
  });
  if (!added.ok) {
    run.fail(
      "probe.alert_item",
      `alert.add (crm.item.add, smart process ${s.entityTypeId}) failed: ${added.why}`,
      "the technical user must be allowed to add items of the alert smart process; check the alerts.* settings (portal.alert_process)",
    );
    return;
  }
  const itemId = added.result.item.id;
  run.items.add(itemId);
  const problems: string[] = [];
  if (added.result.item.stageId !== s.stageNew)
    problems.push(`it was created in stage ${added.result.item.stageId ?? "?"}, not ${s.stageNew}`);
  if (numberField) {
    const found = await run.one({
      type: "alert.list",
      params: { entityTypeId: s.entityTypeId, match: { field: numberField, value: number } },
    });
    if (!found.ok) problems.push(`the lookup by alert number failed (${found.why})`);
    else if (!found.result.items.some((i) => i.id === itemId))
      problems.push("the lookup by alert number did not find it");
  }
  const moved = await run.one({
    type: "alert.update",
    params: {
      entityTypeId: s.entityTypeId,
      id: itemId,
      fields: alertItemFields({ ...row, status: "resolved", item_id: String(itemId) }, s),
    },
  });
  if (!moved.ok) problems.push(`the stage move failed (${moved.why})`);
  else {
    const got = await run.one({ type: "alert.get", params: { entityTypeId: s.entityTypeId, id: itemId } });
    if (!got.ok) problems.push(`alert.get failed (${got.why})`);
    else if (got.result.item.stageId !== s.stageResolved)
      problems.push(
        `after the move it is in stage ${got.result.item.stageId ?? "?"}, not ${s.stageResolved}`,
      );
  }
  if (problems.length > 0) {
    run.fail(
      "probe.alert_item",
      `smart process ${s.entityTypeId}, item ${itemId} ("${alertTitle(row)}"): ${problems.join("; ")}`,
      "make the alerts.* settings name the smart process's stages and fields (portal.alert_process), and give the technical user its rights",
    );
  } else {
    run.ok(
      "probe.alert_item",
      `smart process ${s.entityTypeId}: item ${itemId} added in ${s.stageNew}${numberField ? ", found by its alert number" : ""}, moved to ${s.stageResolved}`,
    );
  }
}

/**
 * Deletes what the probe created, and whatever carries its run id although a create got no answer
 * (found by the probe's phones and user ids). Never anything else: a Contact is deleted only when
 * the probe created it or its name holds the run id.
 */
async function cleanup(run: Run): Promise<void> {
  const left: string[] = [];
  try {
    const lookups = await executeBatch(run.deps, [
      { type: "contact.find_by_phone", params: { phones: [...run.phones] } },
      ...run.userIds.map((u) => ({ type: "contact.find_by_user_id" as const, params: { userId: u } })),
    ]);
    const seen = new Set<number>();
    for (const o of lookups)
      if (o.ok) for (const i of (o.result as { contactIds: number[] }).contactIds) seen.add(i);
    const unknown = [...seen].filter((i) => !run.contacts.has(i)).slice(0, 50);
    if (unknown.length > 0) {
      const [r] = await executeBatch(run.deps, [{ type: "contact.read", params: { ids: unknown } }]);
      if (r?.ok)
        for (const c of (r.result as CommandResults["contact.read"]).contacts)
          if (c.name?.includes(run.runId)) run.contacts.add(c.id);
    }
  } catch {
    // The lookups are a safety net; what was created is known by ID.
  }
  for (const id of run.contacts) {
    const r = await run.direct("crm.contact.delete", { id });
    if (!r.ok) left.push(`Contact ${id} (${r.why})`);
  }
  const t = run.settings.alerts.entityTypeId;
  for (const id of run.items) {
    const r = await run.direct("crm.item.delete", { entityTypeId: t, id });
    if (!r.ok) left.push(`item ${id} of smart process ${t} (${r.why})`);
  }
  const made = `${run.contacts.size} Contact(s)${run.items.size > 0 ? ` and ${run.items.size} item(s)` : ""}`;
  if (left.length > 0) {
    run.fail(
      "probe.cleanup",
      `could not delete: ${left.join("; ")}`,
      `delete them by hand in the portal (their name holds "${run.name}"); the technical user needs the right to delete Contacts${run.items.size > 0 ? " and items" : ""} for the probe to clean up after itself`,
    );
  } else {
    run.ok("probe.cleanup", `deleted everything the probe made: ${made} (run ${run.runId})`);
  }
}

/** The portal's operating time per method for the calls the probe made (reference §2). */
function operatingTime(run: Run): void {
  const rows = [...run.times.entries()]
    .filter(([m]) => m !== "batch")
    .sort(([a], [b]) => a.localeCompare(b))
    .map(
      ([m, t]) =>
        `${m} ${t.operating === null ? "n/a" : `${t.operating.toFixed(3)} s`} (${t.calls} call(s), ${t.inBatch} in a batch)`,
    );
  const batch = run.times.get("batch");
  const envelope =
    batch === undefined
      ? ""
      : `; the batch envelope itself: ${batch.operating === null ? "no operating time (not billed)" : `${batch.operating.toFixed(3)} s`} over ${batch.calls} batch(es)`;
  run.ok(
    "probe.operating_time",
    rows.length === 0
      ? "no call was answered"
      : `time.operating per method (the portal's 10-minute sum, the largest seen; each command of a batch is billed to its own method): ${rows.join("; ")}${envelope}`,
  );
}

/** Records the pass, when every step passed (warnings allowed). */
async function record(run: Run, pool: pg.Pool, host: string): Promise<void> {
  const notPassed = [...run.lines.values()].filter((l) => l.status === "fail" || l.status === "unknown");
  if (notPassed.length > 0) {
    run.line(
      "probe.recorded",
      check(
        "probe.recorded",
        "warn",
        `not recorded: ${notPassed.length} step(s) did not pass (${notPassed.map((l) => l.id).join(", ")}); readiness keeps crm_contract_unconfirmed`,
        "fix what the lines above name and run the probe again",
      ),
    );
    return;
  }
  const f = run.forms;
  try {
    await pool.query("select bitrix_sync.record_crm_contract_probe($1, $2, $3)", [
      host,
      JSON.stringify({
        registered_write: f.registeredWrite,
        registered_filter: f.registeredFilter,
        date_filter: f.dateFilter,
        opened_filter: run.opened,
      }),
      run.runId,
    ]);
    run.ok(
      "probe.recorded",
      `recorded for ${host.toLowerCase()} with contract.registered_write=${f.registeredWrite}, contract.registered_filter=${f.registeredFilter}, contract.date_filter=${f.dateFilter}, reconcile.opened_filter=${run.opened}: readiness no longer reports crm_contract_unconfirmed`,
    );
  } catch (e) {
    run.unknown(
      "probe.recorded",
      `the pass could not be recorded (${String((e as { code?: unknown }).code ?? "no answer")})`,
      "the database must be migrated (bitrix_sync.record_crm_contract_probe) and BITRIX_SYNC_DATABASE_URL the service's role",
    );
  }
}
