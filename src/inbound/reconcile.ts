// Incremental Contact reconciliation (§10.2): the safety net for lost webhooks. crm.item.list finds
// the Contacts changed since the watermark (minus an overlap that re-reads the boundary) with the
// open flag and the registration flag set, selecting ids only; the active mapped ones are read by ID
// and applied like a webhook. Pages are computed from `total` and fetched together in batches, so
// 10 000 changed Contacts cost about ten HTTP requests. The watermark moves only after a whole run
// succeeded. Each run counts Contacts the App was behind on without a webhook having repaired them;
// a spike raises the ops alert of §10.2.
import { crmMasterValues } from "../app-data.js";
import type { ServiceContext } from "../context.js";
import { executeBatch } from "../crm/batch.js";
import { type CrmCommand, PAGE_SIZE, toPortalTimestamp } from "../crm/catalogue.js";
import type { ContactRecord } from "../crm/contact-fields.js";
import { inTransaction } from "../db/tx.js";
import { CLEARED_HASH, matchesPiiHash } from "../hash.js";
import {
  reconciliationRecovered,
  reconciliationRuns,
  reconciliationScanned,
  reconciliationSpikes,
  reconciliationUpdated,
} from "../observability/metrics.js";
import { inSpan, markFailed } from "../observability/tracing.js";
import type { Settings } from "../settings-schema.js";
import { activeMappings, applyContact, type ContactOutcome, type MappedContact } from "./apply-contact.js";

/** Contacts applied per transaction. */
const APPLY_CHUNK = 200;
/** Sub-requests per HTTP batch (the portal's maximum). */
const BATCH_MAX = 50;

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
  spike: boolean;
  errorCode?: string;
  outcomes: Partial<Record<ContactOutcome | "unchanged", number>>;
}

/** The claimed cursor: the run's lease and where its window starts. */
interface Claim {
  lease_token: string;
  watermark: Date | null;
  started: Date;
  cutover: Date | null;
  baseline: number | null;
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

/** Requests sent by the run, and the process's shutdown signal: a run stops before its next batch. */
interface Counter {
  requests: number;
  signal?: AbortSignal | undefined;
}

async function send(deps: ServiceContext, commands: CrmCommand[], counter: Counter) {
  const out = [];
  for (let i = 0; i < commands.length; i += BATCH_MAX) {
    // On SIGTERM the run ends here and gives its cursor back (fail_reconciliation_run keeps the
    // watermark), rather than holding it until reconcile.lease_sec after the process is gone.
    if (counter.signal?.aborted) throw new RunFailed("shutdown");
    counter.requests++;
    const res = await executeBatch(deps.crm, commands.slice(i, i + BATCH_MAX));
    for (const o of res) {
      if (!o.ok) throw new RunFailed(o.failure.code);
      out.push(o);
    }
  }
  return out;
}

/** Every changed Contact ID since `since`, page 1 first, then the other pages together. */
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
  const r0 = (first as { result: { ids: number[]; total: number | null } }).result;
  const ids = new Set(r0.ids);
  const total = r0.total ?? r0.ids.length;
  const rest: CrmCommand[] = [];
  for (let start = PAGE_SIZE; start < total; start += PAGE_SIZE) rest.push(list(start));
  for (const o of await send(deps, rest, counter)) {
    for (const id of (o as { result: { ids: number[] } }).result.ids) ids.add(id);
  }
  if (ids.size < total) {
    // Offsets shift when a Contact leaves the filter during the scan; walk by keyset to be sure
    // nothing at a page boundary was skipped.
    let afterId = 0;
    for (;;) {
      const [o] = await send(
        deps,
        [{ type: "contact.list_changed", params: { updatedSince: since, afterId, opened } }],
        counter,
      );
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
    spike: false,
    outcomes: {},
  };
  // Claim the run (sql/reconciliation.sql): the cursor row is the lock, a run that died is taken over
  // after reconcile.lease_sec, and the run's start time becomes the next watermark.
  const { rows: claimed } = await deps.pool.query<Claim>(
    `select r.lease_token, r.watermark, r.last_run_started_at as started,
            (select cutover_watermark from bitrix_sync.cutover) as cutover,
            r.recovered_baseline::float8 as baseline
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
  const counter: Counter = { requests: 0, signal };
  try {
    const ids = await changedIds(deps, since, s.openedFilter, counter);
    report.scanned = ids.length;
    const mappings = await activeMappings(deps.pool, ids);
    const mapped = ids.filter((id) => mappings.has(id));
    report.mapped = mapped.length;
    const reads: CrmCommand[] = [];
    for (let i = 0; i < mapped.length; i += PAGE_SIZE)
      reads.push({ type: "contact.read", params: { ids: mapped.slice(i, i + PAGE_SIZE) } });
    const contacts = new Map<number, ContactRecord>();
    for (const o of await send(deps, reads, counter)) {
      for (const c of (o as { result: { contacts: ContactRecord[] } }).result.contacts) contacts.set(c.id, c);
    }
    // What the App held before: the CRM timestamp and the hashes of the CRM-master values.
    const snapshotOf = async (ids: number[]) => {
      const { rows } = await deps.pool.query<
        SnapshotHashes & { contact_id: string; crm_updated_at: Date | null }
      >(
        `select contact_id, crm_updated_at, name_hash, email_hash, citizenship_enum_id, stale
           from bitrix_sync.contact_snapshots where contact_id = any($1)`,
        [ids.map(String)],
      );
      return new Map(rows.map((r) => [Number(r.contact_id), r]));
    };
    const before = await snapshotOf(mapped);
    const applied: number[] = [];
    // Applied in chunks, one transaction each: a commit per Contact would dominate a large run.
    const todo = mapped.filter((id) => {
      const contact = contacts.get(id);
      const was = before.get(id)?.crm_updated_at ?? null;
      const crmAt = contact?.updatedAt ? new Date(contact.updatedAt) : null;
      // Strictly older only: the portal's timestamps have one-second resolution.
      const stale =
        contact !== undefined && was !== null && crmAt !== null && crmAt.getTime() < was.getTime();
      if (stale) report.outcomes.stale = (report.outcomes.stale ?? 0) + 1;
      return !stale && mappings.has(id);
    });
    for (let i = 0; i < todo.length; i += APPLY_CHUNK) {
      const chunk = todo.slice(i, i + APPLY_CHUNK);
      const outcomes = await inTransaction(deps.pool, async (c) => {
        const out: Array<[number, ContactOutcome]> = [];
        for (const id of chunk) {
          out.push([
            id,
            await applyContact(
              c,
              deps,
              mappings.get(id) as MappedContact,
              contacts.get(id),
              "reconciliation",
            ),
          ]);
        }
        return out;
      });
      for (const [id, outcome] of outcomes) {
        report.outcomes[outcome] = (report.outcomes[outcome] ?? 0) + 1;
        if (outcome === "applied") applied.push(id);
      }
    }
    // Updated = the App's CRM-master values changed; each such Contact had been missed by webhooks.
    const after = await snapshotOf(applied);
    for (const id of applied) {
      if (!sameValues(before.get(id), after.get(id), contacts.get(id))) {
        report.updated++;
        report.recovered++;
      } else {
        report.outcomes.unchanged = (report.outcomes.unchanged ?? 0) + 1;
        report.outcomes.applied = (report.outcomes.applied ?? 1) - 1;
      }
    }
    report.requests = counter.requests;
    const baseline = claim.baseline ?? report.recovered;
    report.spike =
      report.recovered >= s.recoveredSpikeThreshold &&
      (report.recovered > 2 * baseline ||
        (report.mapped > 0 && report.recovered / report.mapped > s.recoveredSpikeRatio));
    await deps.pool.query("select bitrix_sync.finish_reconciliation_run('contacts', $1, $2, $3, $4)", [
      claim.lease_token,
      report.scanned,
      report.updated,
      report.recovered,
    ]);
    report.status = "succeeded";
    reconciliationRuns.inc({ status: "succeeded" });
    reconciliationScanned.inc(report.scanned);
    reconciliationUpdated.inc(report.updated);
    reconciliationRecovered.inc(report.recovered);
    if (report.spike) reconciliationSpikes.inc();
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
    if (report.spike) {
      deps.log.error(
        { event: "reconciliation.recovered_spike", recovered: report.recovered, baseline },
        "reconciliation recovered many Contacts without a webhook: webhooks may be lost (check the nginx source-IP rejections, docs/operations.md)",
      );
    }
  } catch (e) {
    report.status = "failed";
    reconciliationRuns.inc({ status: "failed" });
    report.requests = counter.requests;
    const leaseLost = (e as { code?: unknown }).code === "BS001";
    report.errorCode = e instanceof RunFailed ? e.code : leaseLost ? "lease_lost" : "run_failed";
    // The watermark stays: the next run reads the same window again. A run whose lease was taken
    // over leaves the cursor to the run that holds it now.
    if (!leaseLost) {
      await deps.pool
        .query("select bitrix_sync.fail_reconciliation_run('contacts', $1, $2)", [
          claim.lease_token,
          report.errorCode,
        ])
        .catch((err) => {
          if ((err as { code?: unknown }).code !== "BS001") throw err;
        });
    }
    deps.log.warn(
      { event: "reconciliation.failed", code: report.errorCode },
      "Contact reconciliation run failed; watermark kept",
    );
  }
}
