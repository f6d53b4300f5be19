// One step of a workflow (§5.1–§5.4, §7.1). The caller holds the workflow's lease and runs this in
// one transaction: it reads the outcome of the workflow's last command, does the local part of the
// scenario (mapping, snapshot, alerts) and either issues the next command (running -> waiting_crm)
// or finishes the workflow. Every decision is persisted before anything else happens.
import type pg from "pg";
import { MAX_PHONES_PER_SEARCH } from "../crm/catalogue.js";
import { planPhoneUpdate } from "../crm/contact-fields.js";
import { raiseAlert } from "./alerts.js";
import {
  type AppUser,
  hasValidPhone,
  isEligible,
  loadAppUser,
  loadSnapshot,
  markSnapshotStale,
  snapshotCreated,
} from "./app-data.js";
import { type Candidate, decide } from "./decide.js";
import { sha256 } from "./hash.js";
import type { CommandRow, StepData, WorkflowRow, WorkflowType } from "./types.js";

/** Codes of command failures that are business problems, not technical ones (§9). */
const BUSINESS_CODES = new Set(["invalid_phone", "unknown_citizenship", "user_not_eligible"]);
/** Codes meaning the Contact (or item) does not exist (legacy replies carry an empty error code). */
const NOT_FOUND_CODES = new Set(["not_found"]);
/** Steps whose pending outcome is a read: a newer intent may restart the pass there. */
const READ_STEPS = new Set([
  "start",
  "manual",
  "read_mapped",
  "find_by_phone",
  "read_candidates",
  "read_for_update",
  "final_read",
  "rebind_read",
]);

export class Step {
  private sd: StepData;
  private done = false;

  constructor(
    private readonly tx: pg.PoolClient,
    private readonly wf: WorkflowRow,
  ) {
    this.sd = { ...wf.step_data };
  }

  // ---- persisted transitions ---------------------------------------------------------------

  private async issue(type: string, params: Record<string, unknown>, step: string): Promise<void> {
    await this.saveStepData();
    await this.tx.query("select bitrix_sync.issue_command($1, $2, $3, $4, $5)", [
      this.wf.id,
      this.wf.lease_token,
      type,
      JSON.stringify(params),
      step,
    ]);
    this.done = true;
  }

  private async event(event: string, changes: Record<string, unknown> = {}): Promise<void> {
    await this.tx.query("select bitrix_sync.fire_workflow_event($1, $2, $3, $4)", [
      this.wf.id,
      this.wf.lease_token,
      event,
      JSON.stringify({ step_data: this.sd, ...changes }),
    ]);
    this.done = true;
  }

  private async saveStepData(step?: string): Promise<void> {
    await this.tx.query("select bitrix_sync.save_workflow_step($1, $2, $3, $4)", [
      this.wf.id,
      this.wf.lease_token,
      JSON.stringify(this.sd),
      step ?? null,
    ]);
  }

  private async succeed(outcome: string): Promise<void> {
    if (await this.newerIntent()) return await this.restartPass();
    await this.event("succeed", { outcome, processed_revision: this.sd.pass ?? this.wf.revision });
  }

  /**
   * A newer intent joined while this pass ran a write (a restart happens only between reads): the
   * pass must not finish the workflow, or that intent would be lost. Nothing may be left unresolved.
   */
  private async newerIntent(): Promise<boolean> {
    if ((this.sd.pass ?? 0) >= this.wf.revision) return false;
    const { rows } = await this.tx.query(
      "select 1 from bitrix_sync.crm_commands where workflow_id = $1 and status in ('uncertain', 'reconcile') limit 1",
      [this.wf.id],
    );
    return rows.length === 0;
  }

  private async restartPass(): Promise<void> {
    this.sd = { pass: this.wf.revision, as: this.wf.intent_type };
    this.wf.current_step = "start";
    await this.saveStepData("start");
    return await this.start();
  }

  private async manual(code: string): Promise<void> {
    await this.event("need_manual", { last_error_code: code, current_step: "manual" });
  }

  private async fail(code: string): Promise<void> {
    // A newer intent gets its own pass; a failure that repeats then fails that pass too.
    if (await this.newerIntent()) return await this.restartPass();
    await this.event("fail", { last_error_code: code, outcome: "failed" });
  }

  private alert(a: Parameters<typeof raiseAlert>[1]): Promise<number> {
    return raiseAlert(this.tx, { correlationId: this.wf.correlation_id, ...a });
  }

  // ---- reads -------------------------------------------------------------------------------

  private async lastCommand(): Promise<CommandRow | null> {
    const { rows } = await this.tx.query<CommandRow>(
      // The most recently changed command: after a recovery search, the re-sent create is newer than the search.
      "select * from bitrix_sync.crm_commands where workflow_id = $1 and alert_id is null order by updated_at desc, id desc limit 1",
      [this.wf.id],
    );
    return rows[0] ?? null;
  }

  private async activeMapping(): Promise<{ id: string; external_id: string } | null> {
    const { rows } = await this.tx.query<{ id: string; external_id: string }>(
      "select id, external_id from bitrix_sync.active_mapping_for_user($1) where id is not null",
      [this.wf.user_id],
    );
    return rows[0] ?? null;
  }

  private async openMapping(contactId: number): Promise<void> {
    const current = await this.activeMapping();
    if (current?.external_id === String(contactId)) return;
    if (current) {
      await this.tx.query("select bitrix_sync.close_mapping($1, 'relinked', $2)", [current.id, this.wf.id]);
    }
    await this.tx.query("select bitrix_sync.open_mapping($1, $2, $3)", [
      this.wf.user_id,
      String(contactId),
      this.wf.id,
    ]);
  }

  private async breakMapping(mappingId: string, contactId: string): Promise<void> {
    await this.tx.query("select bitrix_sync.close_mapping($1, 'contact_not_found', $2, true)", [
      mappingId,
      this.wf.id,
    ]);
    await markSnapshotStale(this.tx, contactId, this.wf.user_id, "contact_not_found");
    await this.alert({ type: "contact_not_found", userId: this.wf.user_id, currentContactId: contactId });
  }

  // ---- the step ----------------------------------------------------------------------------

  /** Runs until a command is issued or the workflow leaves `running`. */
  async run(): Promise<void> {
    const parked = await this.tx.query<{ id: string }>(
      "select id from bitrix_sync.crm_commands where workflow_id = $1 and status in ('uncertain', 'reconcile') limit 1",
      [this.wf.id],
    );
    // Converge to the newest intent (DESIGN.md): between read steps, never while a write is unresolved.
    if (
      (this.sd.pass ?? 0) < this.wf.revision &&
      parked.rows.length === 0 &&
      READ_STEPS.has(this.wf.current_step)
    ) {
      this.sd = { pass: this.wf.revision, as: this.wf.intent_type };
      await this.saveStepData("start");
      this.wf.current_step = "start";
    }
    const last = this.wf.current_step === "start" ? null : await this.lastCommand();
    for (let guard = 0; guard < 8 && !this.done; guard++) {
      await this.dispatch(last);
    }
    if (!this.done) throw new Error("workflow step did not reach a persisted transition");
  }

  private as(): WorkflowType {
    return this.sd.as ?? this.wf.intent_type;
  }

  private async dispatch(last: CommandRow | null): Promise<void> {
    const step = this.wf.current_step;
    if (step === "start") return await this.start();
    if (!last) return await this.fail("command_missing");
    if (last.status === "dead_letter" && BUSINESS_CODES.has(last.last_error_code ?? "")) {
      const code = last.last_error_code as string;
      if (code === "user_not_eligible") return await this.succeed("not_eligible");
      await this.alert({
        type: code === "invalid_phone" ? "invalid_phone" : "unknown_citizenship",
        userId: this.wf.user_id,
        currentContactId: this.sd.contact ?? null,
      });
      return await this.manual(code);
    }
    switch (step) {
      case "read_mapped":
        return await this.afterReadMapped(last);
      case "find_by_phone":
        return await this.afterFind(last);
      case "read_candidates":
        return await this.afterCandidates(last);
      case "claim_contact":
        return await this.afterClaim(last);
      case "restore_flag":
        return await this.afterWrite(last, () => this.finalRead());
      case "create_contact":
        return await this.afterCreate(last);
      case "recover_find":
        return await this.afterRecoverFind(last);
      case "recover_read":
        return await this.afterRecoverRead(last);
      case "final_read":
        return await this.afterFinalRead(last);
      case "read_for_update":
        return await this.afterReadForUpdate(last);
      case "update_contact":
        return await this.afterUpdate(last);
      case "deactivate_contact":
        return await this.afterDeactivate(last);
      case "rebind_read":
        return await this.afterRebindRead(last);
      case "rebind_target":
        return await this.afterWrite(last, () => this.rebindClearPrevious());
      case "rebind_clear_previous":
        return await this.afterRebindClear(last);
      default:
        return await this.fail("unknown_step");
    }
  }

  /** Outcome of a write whose success continues with `next`; uncertain is resolved by retrying it. */
  private async afterWrite(last: CommandRow, next: () => Promise<void>): Promise<void> {
    if (last.status === "succeeded") return await next();
    if (last.status === "uncertain") {
      // Setting a flag or a user_id is idempotent: sending it again cannot duplicate anything.
      await this.tx.query("select bitrix_sync.begin_command_reconcile($1, $2)", [
        last.id,
        this.wf.lease_token,
      ]);
      await this.tx.query(
        "select bitrix_sync.resolve_command_reconcile($1, $2, 'retry', null, 'idempotent_resend')",
        [last.id, this.wf.lease_token],
      );
      return await this.event("await_crm", { current_step: this.wf.current_step });
    }
    if (NOT_FOUND_CODES.has(last.last_error_code ?? "")) {
      // The Contact vanished between read and write: start the pass again from the top.
      this.sd = { pass: this.sd.pass, as: this.as() };
      this.wf.current_step = "start";
      await this.saveStepData("start");
      return await this.start();
    }
    return await this.fail(last.last_error_code ?? "command_failed");
  }

  private response(last: CommandRow): Record<string, unknown> {
    return last.response ?? {};
  }

  private async start(): Promise<void> {
    if (this.sd.pass === undefined) this.sd = { pass: this.wf.revision, as: this.wf.intent_type };
    const user = await loadAppUser(this.tx, this.wf.user_id);
    switch (this.as()) {
      case "contact.deactivate":
        return await this.startDeactivate();
      case "contact.rebind":
        return await this.startRebind(user);
      case "contact.update":
        return await this.startUpdate(user);
      default:
        return await this.startMapOrCreate(user);
    }
  }

  // ---- contact.map_or_create (§5.1) --------------------------------------------------------

  private async startMapOrCreate(user: AppUser | null): Promise<void> {
    if (!isEligible(user)) return await this.succeed("not_eligible");
    if (!hasValidPhone(user)) {
      await this.alert({ type: "invalid_phone", userId: user.id });
      return await this.manual("invalid_phone");
    }
    const mapping = await this.activeMapping();
    if (mapping) {
      this.sd.contact = Number(mapping.external_id);
      return await this.issue("contact.read", { ids: [this.sd.contact], purpose: "apply" }, "read_mapped");
    }
    return await this.issue("contact.find_by_phone", {}, "find_by_phone");
  }

  private async afterReadMapped(last: CommandRow): Promise<void> {
    if (last.status !== "succeeded") return await this.fail(last.last_error_code ?? "command_failed");
    const r = this.response(last);
    const mapping = await this.activeMapping();
    if (r.found === false) {
      if (mapping) await this.breakMapping(mapping.id, mapping.external_id);
      delete this.sd.contact;
      return await this.issue("contact.find_by_phone", {}, "find_by_phone");
    }
    if (r.user_id_matches === false) {
      await this.alert({
        type: "user_id_mismatch",
        userId: this.wf.user_id,
        currentContactId: this.sd.contact ?? null,
      });
      return await this.succeed("user_id_mismatch");
    }
    if (r.registered !== true) {
      return await this.issue(
        "contact.update",
        { contact_id: this.sd.contact, set_user: "self", registered: true },
        "restore_flag",
      );
    }
    return await this.succeed("already_mapped");
  }

  private async afterFind(last: CommandRow): Promise<void> {
    if (last.status !== "succeeded") return await this.fail(last.last_error_code ?? "command_failed");
    const found = ((this.response(last).contact_ids as number[] | undefined) ?? []).map(Number);
    if (found.length === 0) {
      this.sd.branch = "B0";
      return await this.issue("contact.add", {}, "create_contact");
    }
    if (found.length >= MAX_PHONES_PER_SEARCH) {
      // The portal answers at most 20 IDs, the oldest ones: the newest may be missing, so no choice
      // made from this list is safe. A person decides (docs/workflows.md).
      await this.alert({ type: "too_many_candidates", userId: this.wf.user_id, candidates: found });
      return await this.manual("too_many_candidates");
    }
    return await this.issue("contact.read", { ids: found, purpose: "candidates" }, "read_candidates");
  }

  private async holdings(
    candidates: Candidate[],
  ): Promise<{ mappedTo: Map<number, string>; activeUsers: Set<string> }> {
    const ids = candidates.map((c) => String(c.id));
    const { rows: maps } = await this.tx.query<{ external_id: string; entity_id: string }>(
      "select external_id, entity_id from bitrix_sync.entity_external_mapping where status = 'active' and external_id = any($1)",
      [ids],
    );
    const mappedTo = new Map(maps.map((m) => [Number(m.external_id), m.entity_id]));
    const users = [...new Set([...maps.map((m) => m.entity_id), ...candidates.map((c) => c.userId)])].filter(
      (u): u is string => typeof u === "string" && /^[0-9a-f-]{36}$/i.test(u),
    );
    const { rows: active } = await this.tx.query<{ id: string }>(
      "select id::text from han_app.user_identity where id = any($1::uuid[]) and record_status = 'active'",
      [users],
    );
    return { mappedTo, activeUsers: new Set(active.map((r) => r.id)) };
  }

  private candidatesOf(last: CommandRow): Candidate[] {
    const list = (this.response(last).contacts as Array<Record<string, unknown>> | undefined) ?? [];
    return list.map((c) => ({
      id: Number(c.id),
      userId: typeof c.user_id === "string" ? c.user_id : null,
      registered: typeof c.registered === "boolean" ? c.registered : null,
      createdAt: typeof c.created_at === "string" ? c.created_at : null,
    }));
  }

  private async afterCandidates(last: CommandRow): Promise<void> {
    if (last.status !== "succeeded") return await this.fail(last.last_error_code ?? "command_failed");
    const candidates = this.candidatesOf(last);
    const d = decide(this.wf.user_id, candidates, await this.holdings(candidates));
    this.sd.branch = d.kind === "restore" ? "restore" : d.branch;
    switch (d.kind) {
      case "restore":
        this.sd.contact = d.contactId;
        await this.openMapping(d.contactId);
        if (d.fixFlag) {
          return await this.issue(
            "contact.update",
            { contact_id: d.contactId, set_user: "self", registered: true },
            "restore_flag",
          );
        }
        return await this.finalRead();
      case "take":
        this.sd.contact = d.contactId;
        this.sd.previous_user = d.previousUserId;
        this.sd.others = d.others;
        return await this.issue(
          "contact.update",
          { contact_id: d.contactId, set_user: "self", registered: true },
          "claim_contact",
        );
      case "create":
        if (d.branch !== "B0") {
          await this.alert({
            type: "contact_bound_to_other_user",
            userId: this.wf.user_id,
            selectedContactId: d.conflictContactId,
            candidates: d.candidates,
            details: { branch: d.branch, candidate_count: d.candidates.length },
          });
        }
        return await this.issue("contact.add", {}, "create_contact");
    }
  }

  private async afterClaim(last: CommandRow): Promise<void> {
    return await this.afterWrite(last, async () => {
      const contactId = this.sd.contact as number;
      if (this.sd.previous_user) {
        // Takeover of a Contact of an inactive/deleted user: close that link, keep it as history.
        const { rows } = await this.tx.query<{ id: string }>(
          "select id from bitrix_sync.active_mapping_for_contact($1) where id is not null",
          [String(contactId)],
        );
        if (rows[0])
          await this.tx.query("select bitrix_sync.close_mapping($1, 'taken_over', $2)", [
            rows[0].id,
            this.wf.id,
          ]);
      }
      await this.openMapping(contactId);
      const others = (this.sd.others as number[] | undefined) ?? [];
      if (this.sd.branch === "B2.1" && others.length > 0) {
        await this.alert({
          type: "duplicate_contacts",
          userId: this.wf.user_id,
          selectedContactId: contactId,
          candidates: [contactId, ...others],
          details: { candidate_count: others.length + 1 },
        });
      }
      return await this.finalRead();
    });
  }

  private async finalRead(): Promise<void> {
    return await this.issue("contact.read", { ids: [this.sd.contact], purpose: "apply" }, "final_read");
  }

  private async afterCreate(last: CommandRow): Promise<void> {
    if (last.status === "succeeded") {
      const r = this.response(last);
      const contactId = Number(r.contact_id);
      if (!Number.isSafeInteger(contactId) || contactId <= 0) return await this.fail("malformed_result");
      const w = (r.written as Record<string, string | null> | undefined) ?? {};
      await this.openMapping(contactId);
      await snapshotCreated(this.tx, String(contactId), this.wf.user_id, {
        nameHash: w.name_hash ?? null,
        emailHash: w.email_hash ?? null,
        phoneHash: w.phone_hash ?? null,
        citizenshipEnumId: w.citizenship_enum_id ?? null,
      });
      this.sd.contact = contactId;
      return await this.succeed("created");
    }
    if (last.status === "uncertain") {
      // The create may have landed: search by phone (first for this user_id), never create blindly.
      await this.tx.query("select bitrix_sync.begin_command_reconcile($1, $2)", [
        last.id,
        this.wf.lease_token,
      ]);
      this.sd.recovering = last.id;
      return await this.issue("contact.find_by_phone", {}, "recover_find");
    }
    return await this.fail(last.last_error_code ?? "command_failed");
  }

  private async resolveCreate(
    outcome: "succeeded" | "retry" | "dead_letter",
    extra: { contactId?: number; code?: string } = {},
  ) {
    const id = this.sd.recovering;
    await this.tx.query("select bitrix_sync.resolve_command_reconcile($1, $2, $3, $4, $5)", [
      id,
      this.wf.lease_token,
      outcome,
      extra.contactId === undefined ? null : JSON.stringify({ contact_id: extra.contactId, recovered: true }),
      extra.code ?? null,
    ]);
    delete this.sd.recovering;
  }

  private async afterRecoverFind(last: CommandRow): Promise<void> {
    if (last.status !== "succeeded") {
      await this.resolveCreate("dead_letter", { code: "recovery_search_failed" });
      return await this.fail(last.last_error_code ?? "recovery_search_failed");
    }
    const found = ((this.response(last).contact_ids as number[] | undefined) ?? []).map(Number);
    if (found.length === 0) {
      // Proved not applied: the same create command goes out again.
      await this.resolveCreate("retry");
      return await this.event("await_crm", { current_step: "create_contact" });
    }
    return await this.issue("contact.read", { ids: found, purpose: "candidates" }, "recover_read");
  }

  private async afterRecoverRead(last: CommandRow): Promise<void> {
    if (last.status !== "succeeded") {
      await this.resolveCreate("dead_letter", { code: "recovery_search_failed" });
      return await this.fail(last.last_error_code ?? "recovery_search_failed");
    }
    const mine = this.candidatesOf(last)
      .filter((c) => c.userId === this.wf.user_id)
      .sort((a, b) => b.id - a.id)[0];
    if (!mine) {
      await this.resolveCreate("retry");
      return await this.event("await_crm", { current_step: "create_contact" });
    }
    await this.resolveCreate("succeeded", { contactId: mine.id });
    this.sd.contact = mine.id;
    this.sd.branch = `${this.sd.branch ?? "B0"}+recovered`;
    await this.openMapping(mine.id);
    return await this.finalRead();
  }

  private async afterFinalRead(last: CommandRow): Promise<void> {
    if (last.status !== "succeeded") return await this.fail(last.last_error_code ?? "command_failed");
    const r = this.response(last);
    const mapping = await this.activeMapping();
    if (r.found === false) {
      if (mapping) await this.breakMapping(mapping.id, mapping.external_id);
      return await this.succeed("contact_missing");
    }
    if (r.user_id_matches === false) {
      await this.alert({
        type: "user_id_mismatch",
        userId: this.wf.user_id,
        currentContactId: this.sd.contact ?? null,
      });
      return await this.succeed("user_id_mismatch");
    }
    const branch = this.sd.branch ?? "mapped";
    return await this.succeed(branch === "restore" ? "restored" : "mapped");
  }

  // ---- contact.update (§5.2) ---------------------------------------------------------------

  private async startUpdate(user: AppUser | null): Promise<void> {
    if (!isEligible(user)) return await this.succeed("not_eligible");
    const mapping = await this.activeMapping();
    if (!mapping) {
      // No link yet: this becomes a map_or_create (§5.2), which does its own phone search.
      this.sd.as = "contact.map_or_create";
      return await this.startMapOrCreate(user);
    }
    if (!hasValidPhone(user)) {
      await this.alert({ type: "invalid_phone", userId: user.id, currentContactId: mapping.external_id });
      return await this.manual("invalid_phone");
    }
    this.sd.contact = Number(mapping.external_id);
    return await this.issue("contact.read", { ids: [this.sd.contact], purpose: "phones" }, "read_for_update");
  }

  private async afterReadForUpdate(last: CommandRow): Promise<void> {
    if (last.status !== "succeeded") return await this.fail(last.last_error_code ?? "command_failed");
    const contacts = (this.response(last).contacts as Array<Record<string, unknown>> | undefined) ?? [];
    const c = contacts[0];
    const mapping = await this.activeMapping();
    if (!c) {
      if (mapping) await this.breakMapping(mapping.id, mapping.external_id);
      return await this.succeed("contact_missing");
    }
    if (c.user_id !== this.wf.user_id) {
      await this.alert({
        type: "user_id_mismatch",
        userId: this.wf.user_id,
        currentContactId: c.id as number,
      });
      return await this.succeed("user_id_mismatch");
    }
    const user = await loadAppUser(this.tx, this.wf.user_id);
    const desired = user && hasValidPhone(user) ? sha256(user.phone) : null;
    if (desired === null) return await this.start();
    const phones = (c.phones as Array<{ id: number | null; type?: string; hash: string }> | undefined) ?? [];
    const params: Record<string, unknown> = { contact_id: c.id };
    // The phone rule on hashes: no number is stored; hydration writes the App's number at send time.
    const snap = await loadSnapshot(this.tx, String(c.id));
    const plan = planPhoneUpdate(
      phones.map((p) => ({ id: p.id, valueType: p.type ?? "", value: p.hash })),
      desired,
      snap?.phoneHash,
    );
    if (plan)
      params.phone = "entryId" in plan ? { entry_id: plan.entryId, value_type: plan.valueType } : plan;
    if (c.registered !== true) params.registered = true;
    if (Object.keys(params).length === 1) return await this.succeed("no_change");
    return await this.issue("contact.update", params, "update_contact");
  }

  private async afterUpdate(last: CommandRow): Promise<void> {
    if (last.status === "succeeded") return await this.succeed("updated");
    if (last.status === "uncertain") {
      // An append may have landed: read again and plan from what the Contact holds now.
      await this.tx.query("select bitrix_sync.begin_command_reconcile($1, $2)", [
        last.id,
        this.wf.lease_token,
      ]);
      await this.tx.query(
        "select bitrix_sync.resolve_command_reconcile($1, $2, 'dead_letter', null, 'superseded_by_reread')",
        [last.id, this.wf.lease_token],
      );
      return await this.issue(
        "contact.read",
        { ids: [this.sd.contact], purpose: "phones" },
        "read_for_update",
      );
    }
    if (NOT_FOUND_CODES.has(last.last_error_code ?? "")) {
      const mapping = await this.activeMapping();
      if (mapping) await this.breakMapping(mapping.id, mapping.external_id);
      return await this.succeed("contact_missing");
    }
    return await this.fail(last.last_error_code ?? "command_failed");
  }

  // ---- contact.deactivate (§5.3) -----------------------------------------------------------

  private async startDeactivate(): Promise<void> {
    const mapping = await this.activeMapping();
    if (!mapping) return await this.succeed("no_mapping");
    this.sd.contact = Number(mapping.external_id);
    return await this.issue(
      "contact.update",
      { contact_id: this.sd.contact, registered: false },
      "deactivate_contact",
    );
  }

  private async afterDeactivate(last: CommandRow): Promise<void> {
    const mapping = await this.activeMapping();
    if (last.status === "succeeded") {
      if (mapping)
        await this.tx.query("select bitrix_sync.close_mapping($1, 'deactivated', $2)", [
          mapping.id,
          this.wf.id,
        ]);
      return await this.succeed("deactivated");
    }
    if (NOT_FOUND_CODES.has(last.last_error_code ?? "")) {
      if (mapping) await this.breakMapping(mapping.id, mapping.external_id);
      return await this.succeed("contact_missing");
    }
    return await this.afterWrite(last, () => this.fail(last.last_error_code ?? "command_failed"));
  }

  // ---- contact.rebind (§5.4) ---------------------------------------------------------------

  private async rebindRequest(): Promise<{
    id: string;
    previous_contact_id: string | null;
    target_contact_id: string;
  } | null> {
    const { rows } = await this.tx.query<{
      id: string;
      previous_contact_id: string | null;
      target_contact_id: string;
    }>(
      "select id, previous_contact_id, target_contact_id from bitrix_sync.rebind_requests where workflow_id = $1",
      [this.wf.id],
    );
    return rows[0] ?? null;
  }

  private async failRebind(code: string): Promise<void> {
    await this.tx.query("select bitrix_sync.fail_rebind_request($1, $2, $3)", [
      this.wf.id,
      this.wf.lease_token,
      code,
    ]);
    return await this.fail(code);
  }

  private async startRebind(user: AppUser | null): Promise<void> {
    const req = await this.rebindRequest();
    if (!req) return await this.fail("rebind_request_missing");
    if (!isEligible(user)) return await this.failRebind("user_not_eligible");
    await this.tx.query("select bitrix_sync.start_rebind_request($1, $2)", [this.wf.id, this.wf.lease_token]);
    const ids = [
      Number(req.target_contact_id),
      ...(req.previous_contact_id ? [Number(req.previous_contact_id)] : []),
    ];
    return await this.issue("contact.read", { ids, purpose: "candidates" }, "rebind_read");
  }

  private async afterRebindRead(last: CommandRow): Promise<void> {
    if (last.status !== "succeeded") return await this.failRebind(last.last_error_code ?? "command_failed");
    const req = await this.rebindRequest();
    if (!req) return await this.fail("rebind_request_missing");
    const cs = this.candidatesOf(last);
    const target = cs.find((c) => String(c.id) === req.target_contact_id);
    if (!target) return await this.failRebind("target_not_found");
    const h = await this.holdings([target]);
    const holder = h.mappedTo.get(target.id) ?? target.userId;
    if (holder && holder !== this.wf.user_id && h.activeUsers.has(holder)) {
      return await this.failRebind("target_bound_to_other_user");
    }
    const previous = req.previous_contact_id
      ? cs.find((c) => String(c.id) === req.previous_contact_id)
      : undefined;
    this.sd.contact = target.id;
    this.sd.clear_previous = previous?.userId === this.wf.user_id ? previous.id : null;
    return await this.issue(
      "contact.update",
      { contact_id: target.id, set_user: "self", registered: true },
      "rebind_target",
    );
  }

  private async rebindClearPrevious(): Promise<void> {
    const prev = this.sd.clear_previous as number | null | undefined;
    if (!prev) return await this.finishRebind();
    return await this.issue(
      "contact.update",
      { contact_id: prev, set_user: "clear", registered: false },
      "rebind_clear_previous",
    );
  }

  private async afterRebindClear(last: CommandRow): Promise<void> {
    if (last.status === "succeeded" || NOT_FOUND_CODES.has(last.last_error_code ?? ""))
      return await this.finishRebind();
    return await this.afterWrite(last, () => this.finishRebind());
  }

  /** Both Contacts updated: move the link, finish the request and resolve the alerts in one call. */
  private async finishRebind(): Promise<void> {
    await this.tx.query("select bitrix_sync.complete_rebind($1, $2)", [this.wf.id, this.wf.lease_token]);
    return await this.succeed("rebound");
  }
}
