// Incremental Contact reconciliation (§10.2): the safety net for lost webhooks. crm.item.list finds
// the Contacts changed since the watermark (minus an overlap that re-reads the boundary) with the
// open flag and the registration flag set, selecting ids only; the active mapped ones are read by ID
// and applied like a webhook. Pages are computed from `total` and fetched together in batches, so
// 10 000 changed Contacts cost about ten HTTP requests. A sub-request that fails (one page, one read)
// is sent again within the run after the retry backoff; one that keeps failing is reported and the
// others' Contacts are still applied, but the run counts as failed: the watermark moves only after a
// whole run succeeded. A failed run is due again after the backoff, not after a whole interval. Each
// run counts the Contacts it recovered without a webhook (§10.2: newer in the CRM than the snapshot,
// no robot call received since the App last took their values); a spike of their number or of their
// share raises the ops alert of §10.2.
import { crmMasterValues } from "../app-data.js";
import type { ServiceContext } from "../context.js";
import { backoffDelayMs, type RetrySettings } from "../crm/backoff.js";
import type { CommandOutcome } from "../crm/batch.js";
import { type CrmCommand, PAGE_SIZE, toPortalTimestamp } from "../crm/catalogue.js";
import type { ContactRecord } from "../crm/contact-fields.js";
import { RUN_REQUEST_ATTEMPTS, readBatches } from "../crm/read-batches.js";
import { failureCode } from "../db/errors.js";
import { inTransaction } from "../db/tx.js";
import { whileDatabaseAway } from "../db/while-away.js";
import { CLEARED_HASH, matchesPiiHash } from "../hash.js";
import {
  reconciliationRecovered,
  reconciliationRuns,
  reconciliationScanned,
  reconciliationUpdated,
} from "../observability/metrics.js";
import { inSpan, markFailed } from "../observability/tracing.js";
import type { Settings } from "../settings-schema.js";
import { activeMappings, applyContact, type ContactOutcome, type MappedContact } from "./apply-contact.js";

/** Contacts applied per transaction. */
const APPLY_CHUNK = 200;
/** A sub-request whose next send would wait longer is left to the run's own retry. */
const MAX_REQUEST_DELAY_MS = 30_000;

/** The `reconcile` group of the hot settings (reconcile.*). */
export type ReconcileSettings = Settings["reconcile"];

export interface ReconcileReport {
  ran: boolean;
  status: "succeeded" | "failed" | "skipped";
  scanned: number;
  mapped: number;
  updated: number;
  recovered: number;
  requests: number;
  /** Sub-requests (pages, reads) that still failed after their sends within the run. */
  failedRequests: number;
  spike: boolean;
  errorCode?: string;
  /** A failed run: when it is due again (the backoff), for the task to schedule it. */
  retryAt?: Date;
  outcomes: Partial<Record<ContactOutcome | "unchanged", number>>;
}

/** The claimed cursor: the run's lease and where its window starts. */
interface Claim {
  lease_token: string;
  watermark: Date | null;
  started: Date;
  cutover: Date | null;
  baseline: number | null;
  /** Runs that failed since the last success, before this one. */
  failed_runs: number;
}

class RunFailed extends Error {
  constructor(readonly code: string) {
    super(`reconciliation run failed: ${code}`);
  }
}

interface SnapshotHashes {
  name_hash: string | null;
  email_hash: string | null;
  citizenship_enum_id: string | null;
  stale: boolean;
}

/** What a Contact's snapshot says about where its values came from and when (§10.2). */
export interface SnapshotSource {
  crm_updated_at: Date | null;
  last_applied_at: Date | null;
  last_applied_source: string | null;
  last_webhook_received_at: Date | null;
}

/**
 * Whether reconciliation recovered a Contact without a webhook (§10.2), for a Contact whose
 * CRM-master values it has just changed in the App: the CRM's state was newer than the snapshot (its
 * values differ, its time is not older), the values the App holds now came from this run (source
 * attribution), and no robot call for the Contact was received since the App last took its values
 * (neither one processed meanwhile, whose time the snapshot keeps, nor one still waiting in the
 * inbox). A Contact whose webhook is on its way is updated by the run, not recovered.
 */
export function recoveredWithoutWebhook(
  before: SnapshotSource | undefined,
  after: SnapshotSource | undefined,
  crmUpdatedAt: Date | null,
  pendingWebhookAt: Date | null,
): boolean {
  if (after?.last_applied_source !== "reconciliation") return false;
  // Not older than the snapshot (the portal's times have one-second resolution: an edit in the
  // second of the last read carries the same time, and its values decide).
  const was = before?.crm_updated_at ?? null;
  if (was !== null && (crmUpdatedAt === null || crmUpdatedAt.getTime() < was.getTime())) return false;
  const since = before?.last_applied_at?.getTime() ?? Number.NEGATIVE_INFINITY;
  for (const at of [after.last_webhook_received_at, pendingWebhookAt]) {
    if (at !== null && at.getTime() > since) return false;
  }
  return true;
}

/**
 * The spike of §10.2: the number of Contacts recovered without a webhook reaches
 * reconcile.recovered_spike_threshold and more than twice the usual (the smoothed baseline), or
 * their share of the changed linked Contacts exceeds reconcile.recovered_spike_ratio. Either one is
 * enough: on a quiet portal that loses every webhook the count stays small, the share does not.
 */
export function isRecoveredSpike(
  recovered: number,
  mapped: number,
  baseline: number | null,
  s: Pick<ReconcileSettings, "recoveredSpikeThreshold" | "recoveredSpikeRatio">,
): boolean {
  if (recovered <= 0) return false;
  const byCount = recovered >= s.recoveredSpikeThreshold && (baseline === null || recovered > 2 * baseline);
  const byShare = mapped > 0 && recovered / mapped > s.recoveredSpikeRatio;
  return byCount || byShare;
}

/**
 * Whether applying `contact` left the App's CRM-master values as they were. The hashes before are
 * compared with the applied values themselves, so a snapshot hash of an older form (v2, plain
 * SHA-256: src/hash.ts) is not counted as a change, and a hash cleared by migration 000029 (the value
 * before is unknown) is not counted either: a change of the hash form raises no recovery spike.
 */
function sameValues(
  before: SnapshotHashes | undefined,
  after: SnapshotHashes | undefined,
  contact: ContactRecord | undefined,
): boolean {
  if (!before || !after || !contact) return false;
  const { name, email } = crmMasterValues(contact);
  const same = (stored: string | null, field: "name" | "email", value: string | null) =>
    stored === CLEARED_HASH || matchesPiiHash(stored, field, value);
  return (
    same(before.name_hash, "name", name) &&
    same(before.email_hash, "email", email) &&
    before.citizenship_enum_id === after.citizenship_enum_id &&
    before.stale === after.stale
  );
}

/**
 * Requests sent by the run, the process's shutdown signal (a run stops before its next request),
 * the backoff, and the safe codes of the sub-requests that still failed.
 */
interface Counter {
  requests: number;
  signal?: AbortSignal | undefined;
  retry: Pick<RetrySettings, "baseMs" | "maxMs">;
  failed: string[];
}

/** Reads `commands`, each sent again after a transient failure; outcomes in their order. */
async function send(
  deps: ServiceContext,
  commands: CrmCommand[],
  counter: Counter,
): Promise<CommandOutcome[]> {
  return await readBatches(deps.crm, commands, {
    attempts: RUN_REQUEST_ATTEMPTS,
    retry: counter.retry,
    maxDelayMs: MAX_REQUEST_DELAY_MS,
    signal: counter.signal,
    beforeRequest: () => {
      // On SIGTERM the run ends here and gives its cursor back (fail_reconciliation_run keeps the
      // watermark), rather than holding it until reconcile.lease_sec after the process is gone.
      if (counter.signal?.aborted) throw new RunFailed("shutdown");
      counter.requests++;
    },
  });
}

/** A sub-request that still failed: reported, the run goes on with the others. */
function failedRequest(deps: ServiceContext, counter: Counter, o: CommandOutcome & { ok: false }): void {
  counter.failed.push(o.failure.code);
  deps.log.warn(
    { event: "reconciliation.request_failed", code: o.failure.code, commandType: o.type },
    "a reconciliation request kept failing; the run goes on with the others and will read this window again",
  );
}

/**
 * Every changed Contact ID since `since`, page 1 first, then the other pages together. Without page
 * 1 nothing is known (its `total` says how many pages there are): the run fails. A later page that
 * keeps failing is reported and its IDs are missing from this run.
 */
async function changedIds(
  deps: ServiceContext,
  since: string,
  opened: ReconcileSettings["openedFilter"],
  counter: Counter,
) {
  const list = (start: number): CrmCommand => ({
    type: "contact.list_changed",
    params: { updatedSince: since, start, opened },
  });
  const [first] = await send(deps, [list(0)], counter);
  if (!first?.ok) throw new RunFailed(first?.failure.code ?? "run_failed");
  const r0 = (first as { result: { ids: number[]; total: number | null } }).result;
  const ids = new Set(r0.ids);
  const total = r0.total ?? r0.ids.length;
  const rest: CrmCommand[] = [];
  for (let start = PAGE_SIZE; start < total; start += PAGE_SIZE) rest.push(list(start));
  for (const o of await send(deps, rest, counter)) {
    if (!o.ok) {
      failedRequest(deps, counter, o);
      continue;
    }
    for (const id of (o as { result: { ids: number[] } }).result.ids) ids.add(id);
  }
  if (ids.size < total && counter.failed.length === 0) {
    // Offsets shift when a Contact leaves the filter during the scan; walk by keyset to be sure
    // nothing at a page boundary was skipped. (After a failed page the run fails anyway, and the
    // next one reads the window again.)
    let afterId = 0;
    for (;;) {
      const [o] = await send(
        deps,
        [{ type: "contact.list_changed", params: { updatedSince: since, afterId, opened } }],
        counter,
      );
      if (!o?.ok) {
        if (o) failedRequest(deps, counter, o);
        break;
      }
      const r = (o as { result: { ids: number[]; lastId: number | null; complete: boolean } }).result;
      for (const id of r.ids) ids.add(id);
      if (r.complete || r.lastId === null) break;
      afterId = r.lastId;
    }
  }
  return [...ids];
}

/**
 * One reconciliation run, unless the last one started less than the interval ago (`force` skips
 * that check). Only one run at a time: a second caller finds the cursor locked and skips.
 */
export async function reconcileContacts(
  deps: ServiceContext,
  s: ReconcileSettings,
  opts: { force?: boolean; signal?: AbortSignal } = {},
): Promise<ReconcileReport> {
  const report: ReconcileReport = {
    ran: false,
    status: "skipped",
    scanned: 0,
    mapped: 0,
    updated: 0,
    recovered: 0,
    requests: 0,
    failedRequests: 0,
    spike: false,
    outcomes: {},
  };
  // Claim the run (sql/reconciliation.sql): the cursor row is the lock, a run that died is taken over
  // after reconcile.lease_sec, and the run's start time becomes the next watermark.
  const { rows: claimed } = await deps.pool.query<Claim>(
    `select r.lease_token, r.watermark, r.last_run_started_at as started,
            (select cutover_watermark from bitrix_sync.cutover) as cutover,
            r.recovered_baseline::float8 as baseline, r.failed_runs
       from bitrix_sync.claim_reconciliation_cursor('contacts', make_interval(secs => $1), $2,
                                                     make_interval(secs => $3)) r`,
    [s.contactsIntervalSec, opts.force === true, s.overlapSec],
  );
  const claim = claimed[0];
  if (!claim) return report;
  report.ran = true;
  // A run is a trace of its own; its CRM batches and HTTP calls are its children.
  return await inSpan(
    "bitrix_sync.reconcile.run",
    { root: true, attributes: { "bitrix_sync.reconcile.job": "contacts" } },
    async (span) => {
      await runClaimed(deps, s, claim, report, opts.signal);
      span.setAttributes({
        "bitrix_sync.outcome": report.status,
        "bitrix_sync.reconcile.scanned": report.scanned,
        "bitrix_sync.reconcile.mapped": report.mapped,
        "bitrix_sync.reconcile.updated": report.updated,
        "bitrix_sync.reconcile.recovered": report.recovered,
        "bitrix_sync.reconcile.requests": report.requests,
        "bitrix_sync.reconcile.failed_requests": report.failedRequests,
      });
      if (report.errorCode) markFailed(span, report.errorCode);
      return report;
    },
  );
}

/** The run itself, once the cursor is held: fills `report`; a failure is recorded, not thrown. */
async function runClaimed(
  deps: ServiceContext,
  s: ReconcileSettings,
  claim: Claim,
  report: ReconcileReport,
  signal?: AbortSignal,
): Promise<void> {
  const from =
    claim.watermark ?? claim.cutover ?? new Date(claim.started.getTime() - s.contactsIntervalSec * 1000);
  const since = toPortalTimestamp(new Date(from.getTime() - s.overlapSec * 1000));
  const retry = deps.settings().retry;
  const counter: Counter = { requests: 0, signal, retry, failed: [] };
  try {
    const ids = await changedIds(deps, since, s.openedFilter, counter);
    report.scanned = ids.length;
    const mappings = await activeMappings(deps.pool, ids);
    const mapped = ids.filter((id) => mappings.has(id));
    report.mapped = mapped.length;
    const { contacts, read } = await readContacts(deps, mapped, counter);
    const before = await snapshotsOf(deps, mapped);
    const todo = mapped.filter(
      (id) => read.has(id) && mappings.has(id) && !isStaleRead(contacts.get(id), before.get(id), report),
    );
    const applied = await applyInChunks(deps, todo, mappings, contacts, report);
    await countChanges(deps, applied, before, contacts, report);
    report.requests = counter.requests;
    report.failedRequests = counter.failed.length;
    report.spike = isRecoveredSpike(report.recovered, report.mapped, claim.baseline, s);
    reconciliationScanned.inc(report.scanned);
    reconciliationUpdated.inc(report.updated);
    reconciliationRecovered.inc(report.recovered);
    if (report.spike) await recordSpike(deps, claim, report);
    // A sub-request kept failing: what it would have found is unknown, so the window is read again.
    if (counter.failed.length > 0) throw new RunFailed(counter.failed[0] as string);
    await finishRun(deps, claim, report);
  } catch (e) {
    await failRun(deps, claim, report, counter, e);
  }
}

/**
 * Reads the mapped Contacts by ID, a page a sub-request. `read`: the Contacts whose read answered
 * (one missing from the answer was deleted; one whose read failed is simply not known in this run).
 */
async function readContacts(
  deps: ServiceContext,
  mapped: number[],
  counter: Counter,
): Promise<{ contacts: Map<number, ContactRecord>; read: Set<number> }> {
  const chunks: number[][] = [];
  for (let i = 0; i < mapped.length; i += PAGE_SIZE) chunks.push(mapped.slice(i, i + PAGE_SIZE));
  const contacts = new Map<number, ContactRecord>();
  const read = new Set<number>();
  const answers = await send(
    deps,
    chunks.map((ids) => ({ type: "contact.read", params: { ids } })),
    counter,
  );
  answers.forEach((o, i) => {
    if (!o.ok) {
      failedRequest(deps, counter, o);
      return;
    }
    for (const id of chunks[i] ?? []) read.add(id);
    for (const c of (o as { result: { contacts: ContactRecord[] } }).result.contacts) contacts.set(c.id, c);
  });
  return { contacts, read };
}

/**
 * What the App held: the CRM timestamp, the hashes of the CRM-master values, and where they came
 * from and when (source attribution, §10.2).
 */
async function snapshotsOf(
  deps: ServiceContext,
  ids: number[],
): Promise<Map<number, SnapshotHashes & SnapshotSource & { contact_id: string }>> {
  const { rows } = await deps.pool.query<SnapshotHashes & SnapshotSource & { contact_id: string }>(
    `select contact_id, crm_updated_at, name_hash, email_hash, citizenship_enum_id, stale,
            last_applied_at, last_applied_source, last_webhook_received_at
       from bitrix_sync.contact_snapshots where contact_id = any($1)`,
    [ids.map(String)],
  );
  return new Map(rows.map((r) => [Number(r.contact_id), r]));
}

/**
 * A read strictly older than what the App holds, counted as stale: the portal's timestamps have
 * one-second resolution, so an equal one is not older.
 */
function isStaleRead(
  contact: ContactRecord | undefined,
  was: SnapshotSource | undefined,
  report: ReconcileReport,
): boolean {
  const wasAt = was?.crm_updated_at ?? null;
  const crmAt = contact?.updatedAt ? new Date(contact.updatedAt) : null;
  const stale =
    contact !== undefined && wasAt !== null && crmAt !== null && crmAt.getTime() < wasAt.getTime();
  if (stale) report.outcomes.stale = (report.outcomes.stale ?? 0) + 1;
  return stale;
}

/**
 * Applies the Contacts in chunks, one transaction each (a commit per Contact would dominate a large
 * run), counting each outcome; returns those applied.
 */
async function applyInChunks(
  deps: ServiceContext,
  todo: number[],
  mappings: Map<number, MappedContact>,
  contacts: Map<number, ContactRecord>,
  report: ReconcileReport,
): Promise<number[]> {
  const applied: number[] = [];
  for (let i = 0; i < todo.length; i += APPLY_CHUNK) {
    const chunk = todo.slice(i, i + APPLY_CHUNK);
    const outcomes = await inTransaction(deps.pool, async (c) => {
      const out: Array<[number, ContactOutcome]> = [];
      for (const id of chunk) {
        out.push([
          id,
          await applyContact(c, deps, mappings.get(id) as MappedContact, contacts.get(id), "reconciliation"),
        ]);
      }
      return out;
    });
    for (const [id, outcome] of outcomes) {
      report.outcomes[outcome] = (report.outcomes[outcome] ?? 0) + 1;
      if (outcome === "applied") applied.push(id);
    }
  }
  return applied;
}

/**
 * Updated = the App's CRM-master values changed. Recovered = updated, and no webhook had brought or
 * announced the change (recoveredWithoutWebhook). An applied Contact whose values stayed is unchanged.
 */
async function countChanges(
  deps: ServiceContext,
  applied: number[],
  before: Map<number, SnapshotHashes & SnapshotSource>,
  contacts: Map<number, ContactRecord>,
  report: ReconcileReport,
): Promise<void> {
  const after = await snapshotsOf(deps, applied);
  const pending = await pendingWebhooks(deps, applied);
  for (const id of applied) {
    if (!sameValues(before.get(id), after.get(id), contacts.get(id))) {
      report.updated++;
      const crmAt = contacts.get(id)?.updatedAt;
      if (
        recoveredWithoutWebhook(
          before.get(id),
          after.get(id),
          crmAt ? new Date(crmAt) : null,
          pending.get(id) ?? null,
        )
      )
        report.recovered++;
    } else {
      report.outcomes.unchanged = (report.outcomes.unchanged ?? 0) + 1;
      report.outcomes.applied = (report.outcomes.applied ?? 1) - 1;
    }
  }
}

/**
 * A spike of recovered Contacts: in the database at once, under the run's lease, whatever happens to
 * the run or the process next (/metrics on every replica shows it at the next scrape,
 * sql/reconciliation/spikes.sql), and an error line.
 */
async function recordSpike(deps: ServiceContext, claim: Claim, report: ReconcileReport): Promise<void> {
  const baseline = claim.baseline;
  await deps.pool.query("select bitrix_sync.record_recovered_spike('contacts', $1, $2, $3, $4)", [
    claim.lease_token,
    report.recovered,
    report.mapped,
    baseline,
  ]);
  deps.log.error(
    {
      event: "reconciliation.recovered_spike",
      recovered: report.recovered,
      mapped: report.mapped,
      baseline,
    },
    "reconciliation recovered many Contacts without a webhook: webhooks may be lost (check the proxy's source_ip refusals and status_refused_sources, docs/runbook.md)",
  );
}

/** A run that succeeded: the watermark moves on. */
async function finishRun(deps: ServiceContext, claim: Claim, report: ReconcileReport): Promise<void> {
  await deps.pool.query("select bitrix_sync.finish_reconciliation_run('contacts', $1, $2, $3, $4)", [
    claim.lease_token,
    report.scanned,
    report.updated,
    report.recovered,
  ]);
  report.status = "succeeded";
  reconciliationRuns.inc({ status: "succeeded" });
  deps.log.info(
    {
      event: "reconciliation.contacts",
      scanned: report.scanned,
      mapped: report.mapped,
      updated: report.updated,
      recovered: report.recovered,
      requests: report.requests,
    },
    "Contact reconciliation run finished",
  );
}

/**
 * A run that failed: the watermark stays, so the next run reads the same window again after the
 * backoff. A run whose lease was taken over leaves the cursor to the run that holds it now.
 */
async function failRun(
  deps: ServiceContext,
  claim: Claim,
  report: ReconcileReport,
  counter: Counter,
  e: unknown,
): Promise<void> {
  report.status = "failed";
  reconciliationRuns.inc({ status: "failed" });
  report.requests = counter.requests;
  report.failedRequests = counter.failed.length;
  const leaseLost = (e as { code?: unknown }).code === "BS001";
  report.errorCode =
    e instanceof RunFailed ? e.code : leaseLost ? "lease_lost" : failureCode(e, "run_failed");
  if (!leaseLost) {
    const delayMs = backoffDelayMs(claim.failed_runs + 1, counter.retry); // this run failed too
    // Across a failover too (a run that failed on the fenced primary): a cursor not given back stays
    // leased for reconcile.lease_sec, and no reconciliation runs meanwhile. Tried again while the
    // database is away, up to the run's lease end (src/db/while-away.ts).
    const { rows } = await whileDatabaseAway(
      () =>
        deps.pool.query<{ retry_at: Date | null }>(
          "select retry_at from bitrix_sync.fail_reconciliation_run('contacts', $1, $2, make_interval(secs => $3))",
          [claim.lease_token, report.errorCode, delayMs / 1000],
        ),
      { until: claim.started.getTime() + deps.settings().reconcile.leaseSec * 1000, signal: counter.signal },
    ).catch((err) => {
      if ((err as { code?: unknown }).code !== "BS001") throw err;
      return { rows: [] };
    });
    if (rows[0]?.retry_at) report.retryAt = rows[0].retry_at;
  }
  deps.log.warn(
    {
      event: "reconciliation.failed",
      code: report.errorCode,
      failedRequests: report.failedRequests,
      updated: report.updated,
      retryAt: report.retryAt?.toISOString(),
    },
    "Contact reconciliation run failed; watermark kept, the run is retried after its backoff",
  );
}

/** When a robot call still waiting in the inbox was received, per Contact (the newest). */
async function pendingWebhooks(deps: ServiceContext, contactIds: number[]): Promise<Map<number, Date>> {
  if (contactIds.length === 0) return new Map();
  // The inbox's pending index (receiver, entity_id) serves this; processed calls are in the snapshot.
  const { rows } = await deps.pool.query<{ entity_id: string; received_at: Date }>(
    `select entity_id, max(received_at) as received_at from bitrix_sync.webhook_inbox
      where receiver = 'contact' and entity_id = any($1) and status in ('received', 'retry_wait', 'processing')
      group by entity_id`,
    [contactIds.map(String)],
  );
  return new Map(rows.map((r) => [Number(r.entity_id), r.received_at]));
}
