// One step of a workflow (§5.1–§5.4, §7.1). The caller holds the workflow's lease and runs this in
// one transaction: it reads the outcome of the workflow's last command, does the local part of the
// scenario (mapping, snapshot, alerts) and either issues the next command (running -> waiting_crm)
// or finishes the workflow. Every decision is persisted before anything else happens.
//
// This file is what all four workflows share: the persisted transitions, the common reads and the
// convergence rule. What each workflow does is in its own module (./map-or-create.ts, ./update.ts,
// ./deactivate.ts, ./rebind.ts); ./dispatch.ts joins them into one table by step name.
import type pg from "pg";
import { type AlertInput, raiseAlert } from "../../alerts/raise.js";
import { type AppUser, loadAppUser, markSnapshotStale } from "../../app-data.js";
import { attemptsSpent, backoffDelayMs, type RetrySettings } from "../../crm/backoff.js";
import { registerSetForm } from "../../db/statement-batcher.js";
import { activeTraceparent } from "../../observability/tracing.js";
import type { Candidate, Holdings } from "../decide/candidates.js";
import {
  behindNewestIntent,
  businessStop,
  isNotFound,
  restartsBeforeStep,
  restartsInsteadOfFinishing,
} from "../decide/pass.js";
import { decideUnansweredWrite } from "../decide/unanswered-write.js";
import type { CommandRow, StepData, WorkflowRow, WorkflowType } from "../types.js";

/**
 * The issue of one step. A group of steps issues in one call of issue_commands() (its set form,
 * src/db/statement-batcher.ts): one UPDATE moves the group's workflows and one INSERT adds their
 * commands, where the grouped form would run issue_command() once per step (migration 000049).
 */
export const ISSUE_COMMAND = "select bitrix_sync.issue_command($1, $2, $3, $4, $5, $6, $7)";
registerSetForm(
  ISSUE_COMMAND,
  "select ord as __ord, command as issue_command from bitrix_sync.issue_commands(" +
    "$1::uuid[], $2::uuid[], $3::text[], $4::jsonb[], $5::text[], $6::text[], $7::jsonb[])",
);

/** A step's transition; a group's go in one call of fire_workflow_events() (its set form). */
export const FIRE_WORKFLOW_EVENT = "select bitrix_sync.fire_workflow_event($1, $2, $3, $4)";
registerSetForm(
  FIRE_WORKFLOW_EVENT,
  "select ord as __ord, workflow as fire_workflow_event from bitrix_sync.fire_workflow_events(" +
    "$1::uuid[], $2::uuid[], $3::text[], $4::jsonb[])",
);

/**
 * A step's read of its user's active link (Step.activeMapping says why it reads so). Exported
 * below, not here: an `export ... from '...'` in one statement reads as a re-export to the
 * production-imports check.
 */
const ACTIVE_MAPPING = `select id, external_id from bitrix_sync.entity_external_mapping
              where entity_id = $1 and status is not distinct from 'active'
              order by opened_at desc limit 1`;

export { ACTIVE_MAPPING };

/** A step's new link; a group's go in one call of open_mappings() (its set form). */
export const OPEN_MAPPING = "select bitrix_sync.open_mapping($1, $2, $3)";
registerSetForm(
  OPEN_MAPPING,
  "select ord as __ord, mapping as open_mapping from bitrix_sync.open_mappings($1::uuid[], $2::text[], $3::uuid[])",
);

/** What a workflow does with the outcome of its last command at one step. */
export type AfterStep = (s: Step, last: CommandRow) => Promise<void>;

/** Steps every workflow shares, by the name persisted in current_step. */
export const sharedSteps: Readonly<Record<string, AfterStep>> = {
  resend_write: (s, last) => s.resendLateWrite(last),
};

/** The first step of a pass of one workflow type. */
export type StartStep = (s: Step, user: AppUser | null) => Promise<void>;

/** The workflows the core dispatches to (./dispatch.ts). */
export interface StepTable {
  /** By the intent the pass executes (step_data.as). */
  start: Readonly<Record<WorkflowType, StartStep>>;
  /** By step name. The names are persisted in workflow_instances.current_step: never rename one. */
  after: Readonly<Record<string, AfterStep>>;
}

/** What a step ended with, for its span: the persisted event and, when one was issued, the command. */
export interface StepResult {
  event: string;
  commandType?: string;
  /** The workflow's outcome code when the step finished it. */
  outcome?: string;
  /** The safe error code a failed or manual step recorded. */
  code?: string;
}

export class Step {
  /** The pass's safe state (IDs, flags, counts), saved with every transition. */
  sd: StepData;
  private done = false;
  private result: StepResult = { event: "none" };

  constructor(
    readonly tx: pg.PoolClient,
    readonly wf: WorkflowRow,
    private readonly table: StepTable,
    /** The backoff settings (retry.base_ms, retry.max_ms) an unanswered write waits by. */
    private readonly retry: Pick<RetrySettings, "baseMs" | "maxMs">,
  ) {
    this.sd = { ...wf.step_data };
  }

  // ---- persisted transitions ---------------------------------------------------------------

  /** Issues the next command and waits for it at `step` (running -> waiting_crm). */
  async issue(type: string, params: Record<string, unknown>, step: string): Promise<void> {
    // One call persists the step state, the command and the wait. The step's own span context goes
    // with the command: its sends are traced under this step.
    await this.tx.query(ISSUE_COMMAND, [
      this.wf.id,
      this.wf.lease_token,
      type,
      JSON.stringify(params),
      step,
      activeTraceparent(),
      JSON.stringify(this.sd),
    ]);
    this.done = true;
    this.result = { event: "await_crm", commandType: type };
  }

  async event(event: string, changes: Record<string, unknown> = {}): Promise<void> {
    await this.tx.query(FIRE_WORKFLOW_EVENT, [
      this.wf.id,
      this.wf.lease_token,
      event,
      JSON.stringify({ step_data: this.sd, ...changes }),
    ]);
    this.done = true;
    this.result = { event };
    if (typeof changes.outcome === "string") this.result.outcome = changes.outcome;
    if (typeof changes.last_error_code === "string") this.result.code = changes.last_error_code;
  }

  private async saveStepData(step?: string): Promise<void> {
    await this.tx.query("select bitrix_sync.save_workflow_step($1, $2, $3, $4)", [
      this.wf.id,
      this.wf.lease_token,
      JSON.stringify(this.sd),
      step ?? null,
    ]);
  }

  async succeed(outcome: string): Promise<void> {
    if (await this.newerIntent()) return await this.restartPass();
    await this.event("succeed", { outcome, processed_revision: this.sd.pass ?? this.wf.revision });
  }

  /**
   * A newer intent joined while this pass ran a write (a restart happens only between reads): the
   * pass must not finish the workflow, or that intent would be lost. Nothing may be left unresolved.
   */
  private async newerIntent(): Promise<boolean> {
    if (!behindNewestIntent({ pass: this.sd.pass, revision: this.wf.revision })) return false;
    return restartsInsteadOfFinishing({
      pass: this.sd.pass,
      revision: this.wf.revision,
      unresolvedWrite: await this.hasUnresolvedWrite(),
    });
  }

  private async hasUnresolvedWrite(): Promise<boolean> {
    const { rows } = await this.tx.query(
      "select 1 from bitrix_sync.crm_commands where workflow_id = $1 and status in ('uncertain', 'reconcile') limit 1",
      [this.wf.id],
    );
    return rows.length > 0;
  }

  private async restartPass(): Promise<void> {
    this.sd = { pass: this.wf.revision, as: this.wf.intent_type };
    this.wf.current_step = "start";
    await this.saveStepData("start");
    return await this.start();
  }

  /**
   * Waits and comes back at `step` (running -> waiting_retry). SQL decides whether the retry still
   * fits the workflow's horizon; past it the workflow fails with retry_horizon_exceeded instead.
   * `retryAt` is when the failed command asked to be retried (bitrix_sync.retry_command).
   */
  async retryLater(code: string, retryAt: unknown, step: string): Promise<void> {
    this.wf.current_step = step;
    await this.saveStepData(step);
    await this.tx.query(
      `select bitrix_sync.schedule_workflow_retry($1, $2, $3,
         greatest(coalesce($4::timestamptz, now()) - now(), interval '0'))`,
      [this.wf.id, this.wf.lease_token, code, typeof retryAt === "string" ? retryAt : null],
    );
    this.done = true;
  }

  /**
   * An unanswered write that is safe to send again (setting a flag or a user_id) goes out again.
   * False when the command is past its retry horizon: SQL dead-lettered it instead.
   */
  async resendUnanswered(last: CommandRow, code: string): Promise<boolean> {
    await this.tx.query("select bitrix_sync.begin_command_reconcile($1, $2)", [last.id, this.wf.lease_token]);
    const { rows } = await this.tx.query<{ status: string }>(
      "select status from bitrix_sync.resolve_command_reconcile($1, $2, 'retry', null, $3)",
      [last.id, this.wf.lease_token, code],
    );
    return rows[0]?.status === "retry_wait";
  }

  async manual(code: string): Promise<void> {
    await this.event("need_manual", { last_error_code: code, current_step: "manual" });
  }

  async fail(code: string): Promise<void> {
    // A newer intent gets its own pass; a failure that repeats then fails that pass too.
    if (await this.newerIntent()) return await this.restartPass();
    await this.event("fail", { last_error_code: code, outcome: "failed" });
  }

  /** Fails with the last command's error code. */
  async failWith(last: CommandRow, fallback = "command_failed"): Promise<void> {
    return await this.fail(last.last_error_code ?? fallback);
  }

  alert(a: Omit<AlertInput, "correlationId">): Promise<number> {
    return raiseAlert(this.tx, { correlationId: this.wf.correlation_id, ...a });
  }

  // ---- reads -------------------------------------------------------------------------------

  /**
   * Where the step starts, in one call (step_context): the workflow's row locked until the step
   * commits, with its revision, intent and trace context, then, read after the lock, its last
   * command (the most recently changed one: after a recovery search, the re-sent create is newer
   * than the search) and whether one of its writes is unresolved.
   */
  private async stepContext(): Promise<{
    fresh: Pick<WorkflowRow, "revision" | "intent_type" | "trace_context"> | null;
    last: CommandRow | null;
    unresolvedWrite: boolean;
  }> {
    const { rows } = await this.tx.query<
      CommandRow & {
        _revision: number | null;
        _intent_type: WorkflowRow["intent_type"];
        _trace_context: string | null;
        _unresolved_write: boolean;
        _has_last: boolean;
      }
    >(
      `select s.revision as _revision, s.intent_type as _intent_type, s.trace_context as _trace_context,
              s.unresolved_write as _unresolved_write, (s.last_command).id is not null as _has_last,
              (s.last_command).*
         from bitrix_sync.step_context($1) s`,
      [this.wf.id],
    );
    const r = rows[0];
    if (!r) return { fresh: null, last: null, unresolvedWrite: false };
    const {
      _revision: revision,
      _intent_type: intentType,
      _trace_context: traceContext,
      _unresolved_write: unresolvedWrite,
      _has_last: hasLast,
      ...row
    } = r;
    return {
      fresh: revision === null ? null : { revision, intent_type: intentType, trace_context: traceContext },
      last: hasLast ? (row as CommandRow) : null,
      unresolvedWrite,
    };
  }

  async activeMapping(): Promise<{ id: string; external_id: string } | null> {
    // What active_mapping_for_user() returns, as a prepared statement (the function form is planned
    // anew on every call). The system and entity type are fixed by CHECKs, so only the user and the
    // status are tested, and the status with IS NOT DISTINCT FROM: the user's own index answers it
    // whatever the statistics say. With `status = 'active'` and the system, statistics of an empty
    // table let the planner take the Contact side's partial index and scan every active link.
    // `order by opened_at desc limit 1` (a user has one active link at most: a unique index) is the
    // user's index in its own order, for the grouped form too: without it, a step group's lateral
    // join planned while the table looked empty materialised a scan of every link and kept that
    // plan as the table grew (bench:engine, 12 000 users: 3.6 ms a group, a fifth of the run).
    const { rows } = await this.tx.query<{ id: string; external_id: string }>({
      name: "bitrix_sync.step.active_mapping",
      text: ACTIVE_MAPPING,
      values: [this.wf.user_id],
    });
    return rows[0] ?? null;
  }

  async openMapping(contactId: number): Promise<void> {
    const current = await this.activeMapping();
    if (current?.external_id === String(contactId)) return;
    if (current) {
      await this.tx.query("select bitrix_sync.close_mapping($1, 'relinked', $2)", [current.id, this.wf.id]);
    }
    await this.tx.query(OPEN_MAPPING, [this.wf.user_id, String(contactId), this.wf.id]);
  }

  /**
   * A link made by phone alone (B1.1, B2.1) is held when mapping.hold_after_phone_link is on: its
   * Contact's CRM-master fields wait for a robot webhook or an admin (sql/held_links.sql).
   */
  async holdPhoneLink(contactId: number): Promise<boolean> {
    const { rows } = await this.tx.query<{ held: boolean }>(
      "select bitrix_sync.hold_phone_link($1, $2) as held",
      [this.wf.user_id, String(contactId)],
    );
    return rows[0]?.held === true;
  }

  /**
   * A link found through the user id the Contact carries keeps the hold of an earlier link of the
   * same user and Contact made by phone alone and never released (sql/held_links.sql).
   */
  async keepPhoneLinkHold(contactId: number): Promise<void> {
    await this.tx.query("select bitrix_sync.keep_phone_link_hold($1, $2)", [
      this.wf.user_id,
      String(contactId),
    ]);
  }

  async breakMapping(mappingId: string, contactId: string): Promise<void> {
    await this.tx.query("select bitrix_sync.close_mapping($1, 'contact_not_found', $2, true)", [
      mappingId,
      this.wf.id,
    ]);
    await markSnapshotStale(this.tx, contactId, this.wf.user_id, "contact_not_found");
    await this.alert({ type: "contact_not_found", userId: this.wf.user_id, currentContactId: contactId });
  }

  /** The active mapping, if any, is broken: its Contact no longer exists. */
  async breakActiveMapping(): Promise<void> {
    const mapping = await this.activeMapping();
    if (mapping) await this.breakMapping(mapping.id, mapping.external_id);
  }

  /** Who holds each candidate: active mappings, and which of the users involved are active. */
  async holdings(candidates: Candidate[]): Promise<Holdings> {
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

  response(last: CommandRow): Record<string, unknown> {
    return last.response ?? {};
  }

  // ---- the step ----------------------------------------------------------------------------

  /** Runs until a command is issued or the workflow leaves `running`. */
  async run(): Promise<StepResult> {
    // The step holds its workflow's row from here to its commit, and works with the revision read
    // now: the one of the claim may be stale, and a newer intent joining between the claim and the
    // end of the step would be marked as processed without a pass (found by the chaos suite: a
    // phone change lost that way). A join that comes now waits for the step, then finds the
    // workflow still running (and the pass restarts for it) or finished (and starts a new one).
    // The revision comes with the intent it names: a pass restarted for revision N executes N's
    // intent, never the one read at claim time (found by the chaos suite: a deactivation joined by a
    // return ran as a deactivation for the return's revision, and the returned user lost the link).
    const read = await this.stepContext();
    if (read.fresh) {
      this.wf.revision = read.fresh.revision;
      this.wf.intent_type = read.fresh.intent_type;
      this.wf.trace_context = read.fresh.trace_context;
    }
    // Converge to the newest intent (docs/workflows.md, "Guarantees"): between read steps, never while a write is unresolved.
    if (
      restartsBeforeStep({
        step: this.wf.current_step,
        pass: this.sd.pass,
        revision: this.wf.revision,
        unresolvedWrite: read.unresolvedWrite,
      })
    ) {
      this.sd = { pass: this.wf.revision, as: this.wf.intent_type };
      // Already at start (a new workflow): the step's transition writes the new state with its
      // step, so no write of its own is needed here.
      if (this.wf.current_step !== "start") await this.saveStepData("start");
      this.wf.current_step = "start";
    }
    const last = this.wf.current_step === "start" ? null : read.last;
    for (let guard = 0; guard < 8 && !this.done; guard++) {
      await this.dispatch(last);
    }
    if (!this.done) throw new Error("workflow step did not reach a persisted transition");
    return this.result;
  }

  /** The intent the current pass executes. */
  as(): WorkflowType {
    return this.sd.as ?? this.wf.intent_type;
  }

  private async dispatch(last: CommandRow | null): Promise<void> {
    const step = this.wf.current_step;
    if (step === "start") return await this.start();
    if (!last) return await this.fail("command_missing");
    const stop = businessStop(last);
    if (stop?.kind === "not_eligible") return await this.succeed("not_eligible");
    if (stop?.kind === "manual") {
      await this.alert({
        type: stop.alert,
        userId: this.wf.user_id,
        currentContactId: this.sd.contact ?? null,
      });
      return await this.manual(stop.code);
    }
    const after = Object.hasOwn(this.table.after, step) ? this.table.after[step] : undefined;
    if (!after) return await this.fail("unknown_step");
    return await after(this, last);
  }

  /** Outcome of a write whose success continues with `next`; an unanswered one goes to unanswered(). */
  async afterWrite(last: CommandRow, next: () => Promise<void>): Promise<void> {
    if (last.status === "succeeded") return await next();
    if (last.status === "uncertain") return await this.unanswered(last);
    if (isNotFound(last)) {
      // The Contact vanished between read and write: start the pass again from the top.
      this.sd = { pass: this.sd.pass, as: this.as() };
      this.wf.current_step = "start";
      await this.saveStepData("start");
      return await this.start();
    }
    return await this.failWith(last);
  }

  /**
   * A write of this step got no answer (uncertain): ../decide/unanswered-write.ts decides whether it
   * is resent, superseded by a fresh read or searched for, and when; this applies the decision. The
   * wait is waiting_retry with awaiting_late_write; the portal-wide recovery shortens it to the late
   * execution's settling (step_data.late_write_settles_at), never below.
   */
  async unanswered(last: CommandRow): Promise<void> {
    const step = this.wf.current_step;
    const d = decideUnansweredWrite(
      {
        step,
        commandType: last.command_type,
        params: last.params,
        sentAt: last.sent_at,
        givenUpAt: last.updated_at,
        replyDeadlineAt: last.reply_deadline_at ?? null,
        code: last.last_error_code,
      },
      backoffDelayMs(attemptsSpent(last), this.retry),
    );
    if (d.action === "fail") return await this.fail(d.code);
    switch (d.action) {
      case "resend":
        // The command stays uncertain meanwhile, so the pass does not restart over it; step
        // resend_write sends it and comes back to the step that issued it.
        this.sd.resend_step = step;
        break;
      case "search":
        // The recovery (./create-recovery.ts) resolves the create under reconcile.
        await this.tx.query("select bitrix_sync.begin_command_reconcile($1, $2)", [
          last.id,
          this.wf.lease_token,
        ]);
        this.sd.recovering = last.id;
        break;
      case "reread":
        // Superseded, not dead-lettered: nothing failed for good, so no technical dead letter.
        await this.tx.query("select bitrix_sync.begin_command_reconcile($1, $2)", [
          last.id,
          this.wf.lease_token,
        ]);
        await this.tx.query(
          "select bitrix_sync.resolve_command_reconcile($1, $2, 'superseded', null, 'superseded_by_reread')",
          [last.id, this.wf.lease_token],
        );
        break;
    }
    // When the portal answers again after failing as a whole, the wait is cut to this moment, never
    // below it (bring_forward_commands): the backoff was the portal's, the late execution's is not.
    this.sd.late_write_settles_at = d.settledAt.toISOString();
    return await this.retryLater("awaiting_late_write", d.at.toISOString(), d.resumeStep);
  }

  /** Step resend_write: back from waiting for a late execution, the unanswered write goes again. */
  async resendLateWrite(last: CommandRow): Promise<void> {
    const step = typeof this.sd.resend_step === "string" ? this.sd.resend_step : null;
    delete this.sd.resend_step;
    if (!step || last.status !== "uncertain") return await this.fail("resend_lost_track");
    if (await this.resendUnanswered(last, "idempotent_resend")) {
      return await this.event("await_crm", { current_step: step });
    }
    return await this.fail("retry_horizon_exceeded");
  }

  /** The first step of a pass: dispatched by the intent the pass executes. */
  async start(): Promise<void> {
    if (this.sd.pass === undefined) this.sd = { pass: this.wf.revision, as: this.wf.intent_type };
    const user = await loadAppUser(this.tx, this.wf.user_id);
    const as = this.as();
    // An intent type this code does not know runs as map_or_create, the default workflow.
    const start = Object.hasOwn(this.table.start, as)
      ? this.table.start[as]
      : this.table.start["contact.map_or_create"];
    return await start(this, user);
  }
}
