// The convergence audit (docs/workflows.md, "Convergence audit"): one run compares App, snapshot and
// live Contact for a sample of active links (least recently compared first), judges App users and
// links in SQL, and scans Contacts with the registration flag set for users who are inactive or
// unknown. Read-only towards the CRM and the App: the only writes are its own findings. Every CRM
// request goes through the spare-budget limiter (createSpareLimiter): at most audit.budget_share of
// the portal's rate, and only what the sync path does not need. What it finds is in
// bitrix_sync.status_drift; sql/convergence_audit.sql says what each kind means and how it clears.
import { hostname } from "node:os";
import { loadAppUsers } from "../app-data.js";
import type { ServiceContext } from "../context.js";
import { type CrmDeps, executeBatch } from "../crm/batch.js";
import { type CrmCommand, PAGE_SIZE } from "../crm/catalogue.js";
import type { ContactRecord } from "../crm/contact-fields.js";
import { createSpareLimiter } from "../crm/limiter.js";
import { failureCode } from "../db/errors.js";
import { auditContactsRead, auditRequests, auditRuns } from "../observability/metrics.js";
import { inSpan, markFailed } from "../observability/tracing.js";
import type { Settings } from "../settings-schema.js";
import { judgeLink, type LinkFinding } from "./judge.js";

/** Sub-requests per HTTP batch (the portal's maximum). */
const BATCH_MAX = 50;
/** Links compared per round: one HTTP batch of contact.read commands of one page each. */
const LINKS_PER_ROUND = BATCH_MAX * PAGE_SIZE;
/** The registered scan lists every Contact with the flag set: the time filter must still be given. */
export const SINCE_EVER = "2000-01-01T00:00:00+00:00";
/** A range end above every Contact ID: the registered list ended, everything above was covered. */
const ID_MAX = "9223372036854775807";

export interface AuditReport {
  ran: boolean;
  /** busy: a full run was asked for while another run holds the audit (the caller retries). */
  status: "succeeded" | "failed" | "skipped" | "busy";
  mode: "sample" | "all" | null;
  /** Links compared with their Contacts and judged. */
  audited: number;
  /** Links the run meant to compare (the sample's size). */
  sampled: number;
  /** Registered Contacts listed by the scan (and read again by ID). */
  registeredListed: number;
  /** HTTP requests sent to the portal. */
  requests: number;
  /** The run stopped at its time budget; the next run goes on. */
  stoppedEarly: boolean;
  /** Users the automatic repair recorded intents for (audit.auto_repair_kinds). */
  autoRepaired: number;
  errorCode?: string;
}

interface Claim {
  lease_token: string;
  mode: "sample" | "all";
  started_at: Date;
  sample_limit: number | null;
  registered_after_id: string;
  registered_pages: number | null;
  recheck_contact_ids: string[] | null;
}

class RunFailed extends Error {
  constructor(readonly code: string) {
    super(`convergence audit failed: ${code}`);
  }
}

class OutOfTime extends Error {}

/** Requests sent, the run's deadline and the process's shutdown signal. */
interface Budget {
  requests: number;
  deadline: number;
  signal?: AbortSignal | undefined;
}

/** The CRM client with the spare-budget limiter in place of the sync path's. */
function spareDeps(deps: ServiceContext): CrmDeps {
  const main = deps.crm.limiter;
  // A limiter without a shared bucket (an in-memory one in tests) is used as it is.
  if (main.bucket === undefined) return deps.crm;
  return {
    ...deps.crm,
    limiter: createSpareLimiter({
      pool: deps.pool,
      main: main as typeof main & { bucket: string },
      holder: `${hostname()}:${process.pid}:audit`.slice(0, 200),
    }),
  };
}

async function send(crm: CrmDeps, commands: CrmCommand[], budget: Budget) {
  const out = [];
  for (let i = 0; i < commands.length; i += BATCH_MAX) {
    if (budget.signal?.aborted) throw new RunFailed("shutdown");
    if (Date.now() >= budget.deadline) throw new OutOfTime();
    budget.requests++;
    auditRequests.inc();
    const res = await executeBatch(
      crm,
      commands.slice(i, i + BATCH_MAX),
      budget.signal ? { signal: budget.signal } : {},
    );
    for (const o of res) {
      if (!o.ok) throw new RunFailed(o.failure.code);
      out.push(o);
    }
  }
  return out;
}

/** Reads Contacts by ID (contact.read, a page of IDs per command); a missing one is absent. */
async function readContacts(
  crm: CrmDeps,
  ids: number[],
  budget: Budget,
): Promise<Map<number, ContactRecord>> {
  const commands: CrmCommand[] = [];
  for (let i = 0; i < ids.length; i += PAGE_SIZE)
    commands.push({ type: "contact.read", params: { ids: ids.slice(i, i + PAGE_SIZE) } });
  const contacts = new Map<number, ContactRecord>();
  for (const o of await send(crm, commands, budget)) {
    for (const c of (o as { result: { contacts: ContactRecord[] } }).result.contacts) contacts.set(c.id, c);
  }
  auditContactsRead.inc(ids.length);
  return contacts;
}

async function dbNow(deps: ServiceContext): Promise<Date> {
  const { rows } = await deps.pool.query<{ t: Date }>("select clock_timestamp() as t");
  return rows[0]?.t ?? new Date();
}

/**
 * One audit run, when one is due (a sampled run every audit.interval_sec while audit.enabled), or
 * now with `force`; `all` compares every active link and scans every registered Contact. One run
 * at a time: a second caller finds the audit held and skips (a full run reports busy).
 */
export async function runConvergenceAudit(
  deps: ServiceContext,
  s: Settings,
  opts: { all?: boolean; force?: boolean; signal?: AbortSignal } = {},
): Promise<AuditReport> {
  const report: AuditReport = {
    ran: false,
    status: "skipped",
    mode: null,
    audited: 0,
    sampled: 0,
    registeredListed: 0,
    requests: 0,
    stoppedEarly: false,
    autoRepaired: 0,
  };
  const { rows } = await deps.pool.query<Claim>(
    `select lease_token, mode, started_at, sample_limit, registered_after_id, registered_pages, recheck_contact_ids
       from bitrix_sync.claim_audit_run($1, $2)`,
    [opts.all === true, opts.force === true],
  );
  const claim = rows[0];
  if (!claim) {
    if (opts.all === true) report.status = "busy";
    return report;
  }
  report.ran = true;
  report.mode = claim.mode;
  return await inSpan(
    "bitrix_sync.audit.run",
    { root: true, attributes: { "bitrix_sync.audit.mode": claim.mode } },
    async (span) => {
      await runClaimed(deps, s, claim, report, opts.signal);
      span.setAttributes({
        "bitrix_sync.outcome": report.status,
        "bitrix_sync.audit.audited": report.audited,
        "bitrix_sync.audit.requests": report.requests,
      });
      if (report.errorCode) markFailed(span, report.errorCode);
      return report;
    },
  );
}

async function runClaimed(
  deps: ServiceContext,
  s: Settings,
  claim: Claim,
  report: AuditReport,
  signal?: AbortSignal,
): Promise<void> {
  const lease = claim.lease_token;
  // A sampled run stops at its budget and the next one goes on; a full run has the whole lease
  // (docs/operations.md: raise audit.lease_sec for a portal too large for it).
  const budgetMs = claim.mode === "all" ? s.audit.leaseSec * 900 : s.audit.runBudgetSec * 1000;
  const budget: Budget = { requests: 0, deadline: Date.now() + budgetMs, signal };
  const crm = spareDeps(deps);
  try {
    try {
      await deps.pool.query("select bitrix_sync.refresh_user_drift($1, $2)", [lease, claim.started_at]);
      await auditLinks(deps, s, crm, claim, report, budget);
      await recheckRegistered(deps, crm, claim, report, budget);
      await scanRegistered(deps, s, crm, claim, report, budget);
    } catch (e) {
      if (!(e instanceof OutOfTime)) throw e;
      // What was judged so far is recorded; the rest waits for the next run.
      if (claim.mode === "all") throw new RunFailed("run_budget_exceeded");
      report.stoppedEarly = true;
    }
    const kinds = Object.entries(s.audit.autoRepairKinds)
      .filter(([, v]) => v === "on")
      .map(([k]) => k);
    if (kinds.length > 0) {
      const { rows } = await deps.pool.query<{ n: number }>("select bitrix_sync.auto_repair_drift($1) as n", [
        kinds,
      ]);
      report.autoRepaired = rows[0]?.n ?? 0;
    }
    report.requests = budget.requests;
    await deps.pool.query("select bitrix_sync.finish_audit_run($1, $2, $3)", [
      lease,
      report.audited,
      report.requests,
    ]);
    report.status = "succeeded";
    auditRuns.inc({ mode: claim.mode, status: "succeeded" });
    deps.log.info(
      {
        event: "audit.run",
        mode: claim.mode,
        sampled: report.sampled,
        audited: report.audited,
        registeredListed: report.registeredListed,
        requests: report.requests,
        stoppedEarly: report.stoppedEarly,
        autoRepaired: report.autoRepaired,
      },
      "convergence audit run finished",
    );
  } catch (e) {
    report.status = "failed";
    report.requests = budget.requests;
    auditRuns.inc({ mode: claim.mode, status: "failed" });
    const leaseLost = (e as { code?: unknown }).code === "BS001";
    report.errorCode =
      e instanceof RunFailed ? e.code : leaseLost ? "lease_lost" : failureCode(e, "run_failed");
    if (!leaseLost) {
      await deps.pool
        .query("select bitrix_sync.fail_audit_run($1, $2)", [lease, report.errorCode])
        .catch((err) => {
          if ((err as { code?: unknown }).code !== "BS001") throw err;
        });
    }
    deps.log.warn(
      { event: "audit.failed", mode: claim.mode, code: report.errorCode, requests: report.requests },
      "convergence audit run failed; what it had judged is kept",
    );
  }
}

interface SampleRow {
  mapping_id: string;
  user_id: string;
  contact_id: string;
}

/** Compares the sampled links with their Contacts, a batch of reads at a time. */
async function auditLinks(
  deps: ServiceContext,
  s: Settings,
  crm: CrmDeps,
  claim: Claim,
  report: AuditReport,
  budget: Budget,
): Promise<void> {
  const { rows: sample } = await deps.pool.query<SampleRow>(
    "select mapping_id, user_id, contact_id from bitrix_sync.audit_sample($1, $2)",
    [claim.lease_token, claim.sample_limit],
  );
  report.sampled = sample.length;
  for (let i = 0; i < sample.length; i += LINKS_PER_ROUND) {
    const round = sample.slice(i, i + LINKS_PER_ROUND);
    const readAt = await dbNow(deps);
    const contacts = await readContacts(
      crm,
      round.map((r) => Number(r.contact_id)),
      budget,
    );
    // The App's side is read after the Contacts: a change made in between recorded an intent,
    // which keeps the user out of this run's judgement (record_audit_findings).
    const users = await loadAppUsers(
      deps.pool,
      round.map((r) => r.user_id),
    );
    const { rows: snaps } = await deps.pool.query<{ contact_id: string; crm_updated_at: Date | null }>(
      "select contact_id, crm_updated_at from bitrix_sync.contact_snapshots where contact_id = any($1)",
      [round.map((r) => r.contact_id)],
    );
    const snapshotAt = new Map(snaps.map((r) => [r.contact_id, r.crm_updated_at]));
    const results: Array<{
      mapping_id: string;
      user_id: string;
      contact_id: string;
      findings: LinkFinding[];
    }> = [];
    for (const r of round) {
      const user = users.get(r.user_id);
      if (!user) continue; // gone since the sample: refresh_user_drift judges it next run
      const contact = contacts.get(Number(r.contact_id));
      let citizenship: string | null | undefined = null;
      if (contact?.citizenshipEnumId) {
        const found = await deps.dictionary.resolve(contact.citizenshipEnumId);
        citizenship = found.found ? found.item.value : undefined;
      }
      results.push({
        mapping_id: r.mapping_id,
        user_id: r.user_id,
        contact_id: r.contact_id,
        findings: judgeLink(
          {
            userId: r.user_id,
            phone: user.phone,
            fullName: user.fullName,
            email: user.email,
            citizenship: user.citizenship,
          },
          contact,
          {
            snapshotCrmUpdatedAt: snapshotAt.get(r.contact_id) ?? null,
            citizenship,
            nowMs: Date.now(),
            graceMs: s.audit.graceSec * 1000,
          },
        ),
      });
    }
    const { rows } = await deps.pool.query<{ n: number }>(
      "select bitrix_sync.record_audit_findings($1, $2, $3) as n",
      [claim.lease_token, readAt, JSON.stringify(results)],
    );
    report.audited += rows[0]?.n ?? 0;
  }
}

/** Reads the Contacts of open registered findings by ID, so a repair is confirmed at once. */
async function recheckRegistered(
  deps: ServiceContext,
  crm: CrmDeps,
  claim: Claim,
  report: AuditReport,
  budget: Budget,
): Promise<void> {
  const ids = (claim.recheck_contact_ids ?? []).map(Number);
  if (ids.length === 0) return;
  const readAt = await dbNow(deps);
  const contacts = await readContacts(crm, ids, budget);
  const rows = [...contacts.values()]
    .filter((c) => c.registered === true)
    .map((c) => ({ contact_id: c.id, user_id: c.userId }));
  report.registeredListed += rows.length;
  await deps.pool.query("select bitrix_sync.record_registered_contacts($1, $2, null, null, $3, $4)", [
    claim.lease_token,
    readAt,
    ids,
    JSON.stringify(rows),
  ]);
}

/**
 * The scan of Contacts with the registration flag set (the reconciliation's crm.item.list filter,
 * §10.2, without its time window), keyset by Contact ID with the pages above the cursor fetched
 * together: a sampled run reads its share of the pages, a full run to the end.
 */
async function scanRegistered(
  deps: ServiceContext,
  s: Settings,
  crm: CrmDeps,
  claim: Claim,
  report: AuditReport,
  budget: Budget,
): Promise<void> {
  let cursor = Number(claim.registered_after_id);
  let pagesLeft = claim.registered_pages ?? Number.POSITIVE_INFINITY;
  // Flagged Contacts above the cursor, as the first page of the last batch counted them: the next
  // batch asks for no more pages than there are (the first batch for one page, to learn it).
  let above: number | null = null;
  while (pagesLeft > 0) {
    const n = Math.max(1, Math.min(BATCH_MAX, pagesLeft, above === null ? 1 : Math.ceil(above / PAGE_SIZE)));
    const commands: CrmCommand[] = Array.from({ length: n }, (_, k) => ({
      type: "contact.list_changed",
      params: {
        updatedSince: SINCE_EVER,
        afterId: cursor,
        start: k * PAGE_SIZE,
        opened: s.reconcile.openedFilter,
        withUserId: true,
      },
    }));
    const readAt = await dbNow(deps);
    const pages = await send(crm, commands, budget);
    const rows: Array<{ contact_id: number; user_id: string | null }> = [];
    let complete = false;
    let maxId = cursor;
    let total: number | null = null;
    for (const o of pages) {
      const r = (
        o as {
          result: {
            ids: number[];
            complete: boolean;
            total: number | null;
            rows?: Array<{ id: number; userId: string | null }>;
          };
        }
      ).result;
      total ??= r.total;
      if (r.ids.length > 0 && r.rows === undefined) throw new RunFailed("user_field_missing");
      for (const row of r.rows ?? []) {
        rows.push({ contact_id: row.id, user_id: row.userId });
        maxId = Math.max(maxId, row.id);
      }
      if (r.complete) {
        complete = true;
        break;
      }
    }
    report.registeredListed += rows.length;
    await deps.pool.query("select bitrix_sync.record_registered_contacts($1, $2, $3, $4, null, $5)", [
      claim.lease_token,
      readAt,
      cursor,
      complete ? ID_MAX : maxId,
      JSON.stringify(rows),
    ]);
    await deps.pool.query("select bitrix_sync.advance_registered_scan($1, $2, $3, $4)", [
      claim.lease_token,
      maxId,
      rows.length,
      complete,
    ]);
    if (complete) return;
    above = total === null ? null : Math.max(0, total - rows.length);
    cursor = maxId;
    pagesLeft -= n;
  }
}
