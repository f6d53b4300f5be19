// The chaos run's load: App traffic written the App's way (SQL on han_app tables as han_app_user, in
// the App's own transactions, so the enqueue trigger records the intents) and CRM traffic (a manager
// editing Contacts or moving alert items in the portal, then the robot calling a replica's contact or
// alert receiver), with robot webhooks lost, duplicated and delivered out of order.
import { randomBytes, randomInt, randomUUID } from "node:crypto";
import type pg from "pg";
import { DOCUMENT_TYPES } from "../../src/inbound/contract.js";
import type { Emulator } from "../../tools/emulator/server.js";
import { DEFAULT_CITIZENSHIP } from "../../tools/emulator/store.js";
import type { Replica } from "./replicas.js";

const ignore = (): void => undefined;

/** Every value the run made up that counts as personal data: none may reach a replica's output. */
export interface Personal {
  phones: Set<string>;
  names: Set<string>;
  emails: Set<string>;
}

export interface RobotIdentity {
  token: string;
  /** The alert receiver's token (BITRIX_SYNC_ALERT_RECEIVER_TOKEN). */
  alertToken: string;
  /** The smart process business alerts are mirrored into, and its stages (alerts.* settings). */
  alertEntityTypeId: number;
  alertStages: { open: readonly string[]; resolved: string; closed: string };
  /** The smart-process field that carries an alert's number (alerts.fields.alert_number). */
  alertNumberField: string;
  portalHost: string;
  memberId: string;
  userIdField: string;
  citizenshipField: string;
}

export interface TrafficStats {
  app: Record<string, number>;
  appFailed: number;
  crmEdits: number;
  /** Of the CRM edits: numbers a manager added to a linked Contact's phones. */
  phonesAdded: number;
  /** Alert items a manager moved, by the stage they were moved to (open, resolved, closed). */
  alertMoves: Record<string, number>;
  webhooks: Record<string, number>;
  /** Rebind requests by what the admin function answered: requested, or the SQLSTATE of a refusal. */
  rebinds: Record<string, number>;
}

const word = () => randomBytes(6).toString("base64url").replace(/[-_]/g, "x");

/** A valid Russian phone no other user of this run has had. */
function newPhone(personal: Personal): string {
  for (;;) {
    const p = `+79${String(randomInt(0, 1_000_000_000)).padStart(9, "0")}`;
    if (!personal.phones.has(p)) {
      personal.phones.add(p);
      return p;
    }
  }
}

function pick<T>(xs: readonly T[]): T | undefined {
  return xs.length === 0 ? undefined : xs[randomInt(0, xs.length)];
}

export class Traffic {
  readonly personal: Personal = { phones: new Set(), names: new Set(), emails: new Set() };
  readonly stats: TrafficStats = {
    app: {},
    appFailed: 0,
    crmEdits: 0,
    phonesAdded: 0,
    alertMoves: {},
    webhooks: {},
    rebinds: {},
  };
  /**
   * Contacts that share a phone by design, which the one-phone-one-Contact check leaves out: a
   * rebind's target and the user's previous Contact (the CRM team's duplicate of the same person),
   * and the pairs of duplicateStep().
   */
  readonly sharedPhone = new Set<number>();
  /**
   * Numbers a manager added to a Contact, by Contact: the service never removes or overwrites a
   * number a person added (it overwrites only the number it wrote itself), so each must still be
   * there when the run has settled.
   */
  readonly managerPhones = new Map<number, Set<string>>();
  /**
   * Users created on the CRM team's duplicates, with that phone: each should raise a
   * duplicate_contacts alert unless its phone changed, or it left, before its first search.
   */
  readonly onDuplicates = new Map<string, string>();
  /** Webhooks held back, delivered after later ones (out of order). */
  private held = new Set<Promise<void>>();

  constructor(
    private readonly pool: pg.Pool,
    private readonly emulator: Emulator,
    private readonly replicas: Replica[],
    private readonly robot: RobotIdentity,
    /** Webhook faults on (false once the run stops injecting faults). */
    public webhookFaults = true,
  ) {}

  private count(kind: string) {
    this.stats.app[kind] = (this.stats.app[kind] ?? 0) + 1;
  }

  /**
   * One App transaction as han_app_user; true when it committed having done its action. A failure is
   * the App's (the database was away): counted.
   */
  private async appTx(kind: string, fn: (c: pg.PoolClient) => Promise<boolean>): Promise<boolean> {
    let c: pg.PoolClient | null = null;
    try {
      c = await this.pool.connect();
      // A database restart can end the connection between two statements: node-postgres then emits
      // 'error' on the checked-out client, which must not end the run (the next statement fails).
      c.on("error", ignore);
      await c.query("begin");
      await c.query("set local role han_app_user");
      const did = await fn(c);
      await c.query("commit");
      if (did) this.count(kind);
      return did;
    } catch {
      this.stats.appFailed++;
      await c?.query("rollback").catch(() => undefined);
      return false;
    } finally {
      c?.off("error", ignore);
      c?.release(true);
    }
  }

  /** A random user in the given identity state, read from the App's tables. */
  private async someUser(c: pg.PoolClient, active: boolean): Promise<{ id: string } | undefined> {
    const { rows } = await c.query<{ id: string }>(
      `select u.id from han_app.user_identity u join han_app.client_profile p on p.user_id = u.id
        where (u.record_status = 'active' and p.record_status = 'active') = $1
        order by random() limit 1`,
      [active],
    );
    return rows[0];
  }

  /**
   * A new App user: identity and profile in one statement, counted as `kind`. Returns its id, or
   * null when the App's transaction failed.
   */
  private async createUser(kind: string, phone: string, name: string): Promise<string | null> {
    const id = randomUUID();
    const created = await this.appTx(kind, async (c) => {
      await c.query(
        `with u as (insert into han_app.user_identity (id, phone_number, record_status) values ($1, $2, 'active') returning id)
         insert into han_app.client_profile (id, user_id, full_name, record_status) select $3, id, $4, 'active' from u`,
        [id, phone, randomUUID(), name],
      );
      return true;
    });
    return created ? id : null;
  }

  /** A new App user with a phone and a name no other user of the run has had; its id, or null. */
  async signUp(): Promise<string | null> {
    const name = `Chaos ${word()}`;
    this.personal.names.add(name);
    return await this.createUser("user_created", newPhone(this.personal), name);
  }

  /** One App action, chosen at random with the run's mix. */
  async appStep(): Promise<void> {
    const r = randomInt(0, 100);
    if (r < 35) {
      await this.signUp();
    } else if (r < 55) {
      const phone = newPhone(this.personal);
      await this.appTx("phone_changed", async (c) => {
        const u = await this.someUser(c, true);
        if (!u) return false;
        await c.query(
          "update han_app.user_identity set phone_number = $2, updated_at = now() where id = $1",
          [u.id, phone],
        );
        return true;
      });
    } else if (r < 67) {
      // Half through the identity, half through the profile: both leave the user not eligible.
      const table = randomInt(0, 2) === 0 ? "user_identity" : "client_profile";
      const key = table === "user_identity" ? "id" : "user_id";
      await this.appTx(`deactivated_${table === "user_identity" ? "identity" : "profile"}`, async (c) => {
        const u = await this.someUser(c, true);
        if (!u) return false;
        await c.query(
          `update han_app.${table} set record_status = 'inactive', updated_at = now() where ${key} = $1`,
          [u.id],
        );
        return true;
      });
    } else if (r < 79) {
      await this.appTx("returned", async (c) => {
        const u = await this.someUser(c, false);
        if (!u) return false;
        await c.query(
          "update han_app.user_identity set record_status = 'active', updated_at = now() where id = $1",
          [u.id],
        );
        await c.query(
          "update han_app.client_profile set record_status = 'active', updated_at = now() where user_id = $1",
          [u.id],
        );
        return true;
      });
    } else {
      // A profile edit the App makes on its own fields: no intent, nothing for the CRM.
      const foreign = `+4915${String(randomInt(0, 100_000_000)).padStart(8, "0")}`;
      this.personal.phones.add(foreign);
      await this.appTx("profile_edited", async (c) => {
        const u = await this.someUser(c, true);
        if (!u) return false;
        await c.query(
          "update han_app.client_profile set foreign_phone = $2, updated_at = now() where user_id = $1",
          [u.id, foreign],
        );
        return true;
      });
    }
  }

  /**
   * A manager edits a Contact the service linked: the name, the e-mail, the citizenship, or adds a
   * phone number of their own (a new one, next to the App's); the robot fires.
   */
  async crmStep(): Promise<void> {
    const linked = [...this.emulator.store.contacts.values()].filter(
      (c) => typeof c.uf[this.robot.userIdField] === "string",
    );
    const c = pick(linked);
    if (!c) return;
    const what = randomInt(0, 4);
    if (what === 0) {
      const name = `Chaos ${word()}`;
      this.personal.names.add(name);
      c.name = name;
    } else if (what === 1) {
      const email = `${word().toLowerCase()}@example.test`;
      this.personal.emails.add(email);
      c.emails = [this.emulator.store.newMulti("WORK", email)];
    } else if (what === 2) {
      c.uf[this.robot.citizenshipField] = (pick(DEFAULT_CITIZENSHIP) ?? { ID: "45" }).ID;
    } else {
      const phone = newPhone(this.personal);
      c.phones = [...c.phones, this.emulator.store.newMulti("WORK", phone)];
      this.managerPhones.set(c.id, (this.managerPhones.get(c.id) ?? new Set()).add(phone));
      this.stats.phonesAdded++;
    }
    this.emulator.store.touch(c);
    this.stats.crmEdits++;
    await this.robotCall(c.id);
  }

  /**
   * The CRM team's duplicates: two Contacts with one new phone and no user, then a new App user with
   * that phone. The service links the newer one and raises a duplicate_contacts alert, which it
   * mirrors into the portal's smart process as an item (an alert.add write, under the run's faults).
   */
  async duplicateStep(): Promise<void> {
    const phone = newPhone(this.personal);
    const name = `Chaos ${word()}`;
    this.personal.names.add(name);
    for (let i = 0; i < 2; i++) {
      const c = this.emulator.store.createContact({ name, phones: [{ valueType: "MOBILE", value: phone }] });
      this.sharedPhone.add(c.id);
    }
    const id = await this.createUser("user_created_on_duplicates", phone, name);
    if (id) this.onDuplicates.set(id, phone);
  }

  /**
   * A manager works an alert in the portal: moves a mirrored alert's smart-process item that is
   * still open to another open stage, to the resolved stage or to the closed-without-resolution
   * one, and the smart process's robot calls the alert receiver (with the run's webhook faults). A
   * terminal stage must finish the alert (resolved or closed): through the webhook, or through the
   * alert reconciliation when the webhook was lost or came before the service knew the item.
   */
  async alertStageStep(): Promise<void> {
    const { alertNumberField, alertEntityTypeId, alertStages } = this.robot;
    const terminal = new Set([alertStages.resolved, alertStages.closed]);
    const open = [...this.emulator.store.items.values()].filter(
      (i) =>
        i.entityTypeId === alertEntityTypeId &&
        i.uf[alertNumberField] !== null &&
        i.uf[alertNumberField] !== undefined &&
        !terminal.has(i.stageId),
    );
    const item = pick(open);
    if (!item) return;
    const r = randomInt(0, 10);
    const [kind, stage] =
      r < 4
        ? ["resolved", alertStages.resolved]
        : r < 7
          ? ["closed", alertStages.closed]
          : ["open", pick(alertStages.open.filter((s) => s !== item.stageId)) ?? item.stageId];
    item.stageId = stage;
    this.emulator.store.touch(item);
    this.stats.alertMoves[kind] = (this.stats.alertMoves[kind] ?? 0) + 1;
    await this.robotCall(item.id, "alert");
  }

  /**
   * An operator rebinds a linked user to the CRM team's duplicate of their Contact: a new Contact in
   * the portal with the same name, phone, e-mail and citizenship, then
   * request_bitrix_contact_rebind as bitrix_sync_admin. A refusal (BS005 to BS007: the user changed
   * meanwhile, a rebind or workflow is open) is counted by its SQLSTATE.
   */
  async rebindStep(): Promise<void> {
    let c: pg.PoolClient | null = null;
    let outcome = "failed";
    try {
      c = await this.pool.connect();
      c.on("error", ignore);
      const { rows } = await c.query<{ user_id: string; contact_id: string }>(
        `select m.entity_id as user_id, m.external_id as contact_id
           from bitrix_sync.entity_external_mapping m
           join han_app.user_identity u on u.id = m.entity_id and u.record_status = 'active'
           join han_app.client_profile p on p.user_id = u.id and p.record_status = 'active'
          where m.status = 'active' order by random() limit 1`,
      );
      const link = rows[0];
      const previous = link ? this.emulator.store.contacts.get(Number(link.contact_id)) : undefined;
      if (!link || !previous) return;
      const duplicate = this.emulator.store.createContact({
        name: previous.name,
        phones: previous.phones.map((x) => ({ valueType: x.valueType, value: x.value })),
        emails: previous.emails.map((x) => ({ valueType: x.valueType, value: x.value })),
        uf: { [this.robot.citizenshipField]: previous.uf[this.robot.citizenshipField] ?? null },
      });
      this.sharedPhone.add(previous.id);
      this.sharedPhone.add(duplicate.id);
      await c.query("begin");
      await c.query("set local role bitrix_sync_admin");
      await c.query(
        "select bitrix_sync.request_bitrix_contact_rebind($1, $2, 'chaos: duplicate merged', 'ops:chaos')",
        [link.user_id, String(duplicate.id)],
      );
      await c.query("commit");
      outcome = "requested";
    } catch (e) {
      outcome = (e as { code?: string }).code ?? "failed";
      await c?.query("rollback").catch(() => undefined);
    } finally {
      c?.off("error", ignore);
      c?.release(true);
    }
    this.stats.rebinds[outcome] = (this.stats.rebinds[outcome] ?? 0) + 1;
  }

  private countHook(kind: string) {
    this.stats.webhooks[kind] = (this.stats.webhooks[kind] ?? 0) + 1;
  }

  /** The robot's call for one change of a document, with the run's webhook faults. */
  private async robotCall(contactId: number, receiver: "contact" | "alert" = "contact"): Promise<void> {
    const r = this.webhookFaults ? randomInt(0, 100) : 100;
    if (r < 12) {
      this.countHook("lost");
      return;
    }
    if (r < 24) {
      this.countHook("duplicated");
      await this.deliver(contactId, receiver);
      await this.deliver(contactId, receiver);
      return;
    }
    if (r < 36) {
      this.countHook("reordered");
      const p = new Promise<void>((resolve) => setTimeout(resolve, randomInt(1500, 6000)))
        .then(() => this.deliver(contactId, receiver))
        .finally(() => this.held.delete(p));
      this.held.add(p);
      return;
    }
    await this.deliver(contactId, receiver);
  }

  /**
   * POSTs the robot's form for a Contact, or for a smart-process item to the alert receiver, to a
   * running replica; a refusal or no replica is a lost webhook.
   */
  private async deliver(id: number, receiver: "contact" | "alert" = "contact"): Promise<void> {
    const port = pick(this.replicas.filter((x) => x.port !== null))?.port;
    if (!port) {
      this.countHook("no_replica");
      return;
    }
    const document =
      receiver === "contact" ? `CONTACT_${id}` : `DYNAMIC_${this.robot.alertEntityTypeId}_${id}`;
    const body = new URLSearchParams([
      ["document_id[0]", "crm"],
      ["document_id[1]", DOCUMENT_TYPES[receiver]],
      ["document_id[2]", document],
      ["auth[domain]", this.robot.portalHost],
      ["auth[client_endpoint]", `https://${this.robot.portalHost}/rest/`],
      ["auth[server_endpoint]", "https://oauth.bitrix24.tech/rest/"],
      ["auth[member_id]", this.robot.memberId],
    ]);
    const query = new URLSearchParams([
      ["token", receiver === "contact" ? this.robot.token : this.robot.alertToken],
      ["ID", String(id)],
    ]);
    try {
      const res = await fetch(`http://127.0.0.1:${port}/bitrix/sync/webhook/${receiver}?${query}`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: body.toString(),
        signal: AbortSignal.timeout(5_000),
      });
      await res.arrayBuffer();
      const prefix = receiver === "contact" ? "" : "alert_";
      this.countHook(`${prefix}${res.status === 200 ? "accepted" : `refused_${res.status}`}`);
    } catch {
      this.countHook("unanswered");
    }
  }

  /** Waits for the webhooks held back to be delivered. */
  async drain(): Promise<void> {
    while (this.held.size > 0) await Promise.allSettled([...this.held]);
  }
}
