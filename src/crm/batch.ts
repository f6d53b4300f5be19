// Batching (§2.5, §8): one command is one sub-request of a Bitrix24 `batch`; commands of different
// workflows share a batch; every sub-result is parsed and classified on its own from `result` /
// `result_error` (empty maps arrive as `[]`). A batch is sent once: if it fails as a whole, each
// command gets its own verdict (a write that may have been applied is uncertain) and the caller
// decides per command; nothing here re-sends it.
//
// The portal rewrites `$result[...]` (and next, total, time, error) inside every value of a batch
// sub-request, after decoding it (reference §3). A command whose parameters hold such text (an App
// user named `$result[c1]`) is therefore never put in the batch: it goes as a call of its own, under
// a permit of its own, and its reply is judged exactly as its sub-result would have been.

import type { Attributes, Link } from "@opentelemetry/api";
import {
  batchDuration,
  batchSize,
  commandOutcomes,
  directCommands,
  RATE_LIMIT_CODES,
  rateLimited,
} from "../observability/metrics.js";
import { inSpan } from "../observability/tracing.js";
import {
  buildRequest,
  type CatalogueContext,
  CommandDataError,
  type CommandResults,
  type CommandType,
  type CrmCommand,
  isWrite,
  parseResult,
} from "./catalogue.js";
import {
  type Classification,
  type CrmOutcome,
  classify,
  type FailureCode,
  isPortalWide,
} from "./classify.js";
import { type CrmClient, type HttpResult, isAnswered } from "./client.js";
import type { CrmLimiter, LimiterPermit, OperatingSample } from "./limiter.js";
import { type ParamObject, type ParamValue, parsePhpQuery, toPhpQuery } from "./php-query.js";

/**
 * What happened to one command. `sent` is false when its bytes certainly never left: bad data, a
 * blocked method, or a connection that failed before the request was written.
 */
export type CommandOutcome<T extends CommandType = CommandType> =
  | { key: string; type: T; ok: true; result: CommandResults[T] }
  | { key: string; type: T; ok: false; sent: boolean; failure: Classification };

/** The portal refuses more than 50 sub-requests (reference §3). */
export const MAX_BATCH_SIZE = 50;

/** Minimal structured logger (pino fits). Only safe fields are ever passed. */
export interface CrmLog {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
}

/** One sub-command of an answered batch, as readiness sees it: its REST method and outcome. */
export interface CommandObservation {
  method: string;
  ok: boolean;
  /** The classifier's code when it failed. */
  code: FailureCode | null;
}

/** What a batch needs: the HTTP client, the limiter, field names, and optionally a logger. */
export interface CrmDeps {
  client: CrmClient;
  limiter: CrmLimiter;
  catalogue: CatalogueContext;
  /**
   * The client's deadline of one call (BITRIX_SYNC_HTTP_TIMEOUT_SEC in ms), when known: with the
   * pump's send window it bounds how long a write's request can be out (src/workflows/pump.ts).
   */
  timeoutMs?: number;
  log?: CrmLog;
  now?: () => number;
  /**
   * Told the outcome of every sub-command of a batch the portal answered (HTTP 200): a sub-command
   * refused for rights comes only this way, the transport saw a success (§14 readiness).
   */
  observeCommands?: (results: readonly CommandObservation[]) => void;
}

const KEY = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

function asMap(v: unknown): Record<string, unknown> {
  // PHP serialises an empty map as [] and a map keyed 0..n-1 as a list (reference §3).
  if (Array.isArray(v)) return Object.fromEntries(v.map((x, i) => [String(i), x]));
  if (v !== null && typeof v === "object") return v as Record<string, unknown>;
  return {};
}

function num(v: unknown): number | undefined {
  return typeof v === "number" && Number.isFinite(v) ? v : undefined;
}

function operatingOf(method: string, time: unknown): OperatingSample | null {
  if (time === null || typeof time !== "object") return null;
  const t = time as Record<string, unknown>;
  const operating = num(t.operating);
  if (operating === undefined) return null;
  const reset = num(t.operating_reset_at);
  return { method, operating, resetAt: reset === undefined ? null : reset * 1000 };
}

/** The batch envelope's inner maps, or null when the reply is not a batch success. */
function batchMaps(http: HttpResult): {
  result: Record<string, unknown>;
  error: Record<string, unknown>;
  total: Record<string, unknown>;
  next: Record<string, unknown>;
  time: Record<string, unknown>;
} | null {
  if (http.type !== "reply" || http.status !== 200) return null;
  const body = http.body;
  if (body === null || typeof body !== "object" || Array.isArray(body)) return null;
  const inner = (body as Record<string, unknown>).result;
  if (inner === null || typeof inner !== "object" || Array.isArray(inner)) return null;
  const r = inner as Record<string, unknown>;
  if (!("result" in r) && !("result_error" in r)) return null;
  return {
    result: asMap(r.result),
    error: asMap(r.result_error),
    total: asMap(r.result_total),
    next: asMap(r.result_next),
    time: asMap(r.result_time),
  };
}

interface Prepared {
  index: number;
  key: string;
  cmd: CrmCommand;
  method: string;
  params: ParamObject;
  /** The sub-request: `method?query`. */
  line: string;
}

/**
 * The words the portal's core resolves inside a batch value, in any letter case (reference §3:
 * `/\$(result|next|total|time|error)([^\s]*)/i`, the words being the result map's keys; a failed
 * command adds `error_description`, which starts with `error`). Broader than the core on purpose: the
 * core only rewrites a match followed by `[segment]`, this takes the word alone.
 */
const BATCH_REFERENCE = /\$(result|next|total|time|error)/i;

/**
 * True when any key or value of `params`, at any depth, is text the portal would reinterpret inside
 * a batch: a value holding `$` and one of the core's words, or a key holding `$` at all (the core
 * resolves keys against no words, so any `$...[x]` key is one). Encoding cannot protect such a value
 * (the core decodes before it resolves); the command must travel outside the batch.
 */
export function reinterpretedInBatch(params: ParamValue): boolean {
  if (typeof params === "string") return BATCH_REFERENCE.test(params);
  if (Array.isArray(params)) return params.some(reinterpretedInBatch);
  if (params !== null && typeof params === "object") {
    for (const [k, v] of Object.entries(params)) {
      if (k.includes("$") || reinterpretedInBatch(v)) return true;
    }
  }
  return false;
}

export interface BatchOptions {
  /** A limiter permit the caller already holds (the pump does); otherwise one is acquired here. */
  permit?: LimiterPermit;
  signal?: AbortSignal;
  /** Span links to the work this batch serves (each command's or inbox event's span). */
  links?: Link[];
  /** The pump's batch id (crm_commands.batch_id), for the span. */
  batchId?: string;
  /**
   * Epoch ms (deps.now's clock): a request that has not left by then does not leave at all, and its
   * commands come back not sent. The pump sets it a short window after its send marker, so that a
   * write's request is out, and given up by the client, by a moment it recorded with the marker
   * (crm_commands.reply_deadline_at), whatever held it up before it left: a wait for the limiter, a
   * database that answers slowly.
   */
  leaveBy?: number;
}

/**
 * Sends up to 50 commands as one `batch` (halt=0) under one limiter permit and returns one outcome
 * per command, in input order. Pass `permit` when the caller already holds one (the pump does);
 * otherwise one is acquired here. A command whose parameters hold a batch reference
 * (`reinterpretedInBatch`) goes instead as a call of its own beside the batch, under a permit of its
 * own (or the caller's, when no batch goes). Limit signals from the replies are reported to the
 * limiter. The batch is a span (bitrix_sync.crm.batch) with its HTTP calls as children.
 */
export async function executeBatch(
  deps: CrmDeps,
  commands: readonly CrmCommand[],
  opts: BatchOptions = {},
): Promise<CommandOutcome[]> {
  if (commands.length > MAX_BATCH_SIZE)
    throw new RangeError(`a batch holds at most ${MAX_BATCH_SIZE} commands`);
  const spanOptions = () => {
    const attributes: Attributes = {
      "bitrix_sync.batch.size": commands.length,
      "bitrix_sync.batch.command_types": [...new Set(commands.map((c) => c.type))].sort().join(","),
    };
    if (opts.batchId) attributes["bitrix_sync.batch.id"] = opts.batchId;
    return { attributes, ...(opts.links && opts.links.length > 0 ? { links: opts.links } : {}) };
  };
  return await inSpan("bitrix_sync.crm.batch", spanOptions, async (span) => {
    const { outcomes, direct } = await sendBatch(deps, commands, opts);
    let ok = 0;
    for (const o of outcomes) if (o?.ok) ok++;
    span.setAttributes({
      "bitrix_sync.batch.ok": ok,
      "bitrix_sync.batch.failed": outcomes.length - ok,
      "bitrix_sync.batch.direct": direct,
    });
    return outcomes;
  });
}

async function sendBatch(
  deps: CrmDeps,
  commands: readonly CrmCommand[],
  opts: BatchOptions,
): Promise<{ outcomes: CommandOutcome[]; direct: number }> {
  const now = deps.now ?? Date.now;
  const outcomes: CommandOutcome[] = new Array(commands.length);
  const keys = new Set<string>();
  const toSend: Prepared[] = [];
  const direct: Prepared[] = [];
  // The methods blocked now, read once; null when the limiter could not say.
  let blocked: Map<string, number> | null | undefined;

  for (const [index, cmd] of commands.entries()) {
    const key = cmd.key ?? `c${index}`;
    if (!KEY.test(key) || keys.has(key)) throw new RangeError("batch keys must be unique identifiers");
    keys.add(key);
    let req: ReturnType<typeof buildRequest>;
    try {
      req = buildRequest(cmd, deps.catalogue);
    } catch (e) {
      if (!(e instanceof CommandDataError)) throw e;
      outcomes[index] = {
        key,
        type: cmd.type,
        ok: false,
        sent: false,
        failure: classify({ type: "invalid_data", code: e.code }, { write: isWrite(cmd.type) }),
      };
      continue;
    }
    // Without the limiter's word (its database away) nothing leaves: a request sent now could not
    // be recorded either.
    if (blocked === undefined) blocked = await deps.limiter.blockedMethods().catch(() => null);
    if (blocked === null) {
      outcomes[index] = notSent(key, cmd, "LIMITER_UNAVAILABLE", now());
      continue;
    }
    const until = blocked.get(req.method);
    if (until !== undefined && until > now()) {
      // OPERATION_TIME_LIMIT holds back only this method (§9); the rest of the batch goes.
      outcomes[index] = {
        key,
        type: cmd.type,
        ok: false,
        sent: false,
        failure: classify(
          { type: "command_error", entry: { error: "OPERATION_TIME_LIMIT", error_description: "" } },
          { write: isWrite(cmd.type), now: now(), operatingResetAt: until },
        ),
      };
      continue;
    }
    const line = `${req.method}?${toPhpQuery(req.params)}`;
    const p: Prepared = { index, key, cmd, method: req.method, params: req.params, line };
    // The rule (docs/crm-client.md, "Batching"): a command whose parameters hold anything the
    // portal's core would read as a batch reference goes as a call of its own, which resolves
    // nothing; no encoding survives the core (it decodes first), so the value must not travel in a
    // batch at all. Everything else goes in the one batch request as before.
    if (reinterpretedInBatch(req.params)) {
      direct.push(p);
      directCommands.inc({ command_type: cmd.type });
    } else {
      toSend.push(p);
    }
  }

  if (toSend.length === 0 && direct.length === 0) {
    await opts.permit?.release();
    countOutcomes(outcomes);
    return { outcomes, direct: 0 };
  }

  // The batch's permit is taken before anything leaves (as before): if that fails, nothing was sent.
  // With no batch to send, a permit the caller holds serves the first direct call instead.
  const batchPermit =
    toSend.length > 0
      ? (opts.permit ?? (await deps.limiter.acquire(opts.signal ? { signal: opts.signal } : {})))
      : null;
  const spare = toSend.length === 0 ? opts.permit : undefined;
  // The direct calls run beside the batch, each under a permit of its own from the same limiter
  // (acquired while the batch is out, so a caller's held permit never waits for another). Commands
  // of one batch belong to different workflows: their order does not matter.
  const settled = await Promise.allSettled<Report | null>([
    batchPermit ? sendAsBatch(deps, toSend, batchPermit, opts, outcomes) : Promise.resolve(null),
    ...direct.map((p, i) => sendDirect(deps, p, i === 0 ? spare : undefined, opts, outcomes)),
  ]);
  const reports: Report[] = [];
  for (const s of settled) {
    if (s.status === "rejected") throw s.reason;
    if (s.value) reports.push(s.value);
  }

  // What the replies said, reported once for the batch and its direct calls together.
  const observed = reports.flatMap((r) => r.observed);
  if (observed.length > 0) deps.observeCommands?.(observed);
  const samples = new Map<string, OperatingSample>();
  for (const r of reports) {
    for (const s of r.samples) {
      if ((samples.get(s.method)?.operating ?? -1) < s.operating) samples.set(s.method, s);
    }
  }
  if (samples.size > 0) await learn(deps, deps.limiter.noteOperating([...samples.values()]), undefined);
  const blocks = new Map<string, number>();
  for (const r of reports) {
    for (const [method, until] of r.blocks) blocks.set(method, Math.max(blocks.get(method) ?? 0, until));
  }
  const sent = [...toSend, ...direct];
  for (const [method, until] of blocks) {
    const end = await learn(deps, deps.limiter.noteMethodBlocked(method, until), until);
    for (const p of sent) {
      const o = outcomes[p.index];
      if (p.method === method && o && !o.ok && o.failure.code === "operation_time_limit") {
        o.failure.blockMethodUntil = end;
        o.failure.retryAfterMs = Math.max(0, end - now());
      }
    }
  }
  if (reports.some((r) => r.lowerRate)) await learn(deps, deps.limiter.noteRateLimited(), undefined);
  else {
    for (const r of reports) {
      if (r.answered?.reduced) await learn(deps, deps.limiter.noteAnswered?.(r.answered), undefined);
    }
  }
  countOutcomes(outcomes);
  return { outcomes, direct: direct.length };
}

/**
 * What the limiter learns from a reply (operating times, a blocked method, a rate to cut or to raise)
 * is kept in its database. When that is away the lesson is lost, never the replies: the caller still
 * has the commands' outcomes to record.
 */
async function learn<T>(deps: CrmDeps, lesson: Promise<T> | undefined, fallback: T): Promise<T> {
  try {
    return (await lesson) ?? fallback;
  } catch {
    deps.log?.warn({ event: "crm.limiter_note_failed" }, "the limiter did not record what a reply said");
    return fallback;
  }
}

/** A command held back before its request left: it is retried like a connection that failed. */
function notSent(key: string, cmd: CrmCommand, why: string, now: number): CommandOutcome {
  return {
    key,
    type: cmd.type,
    ok: false,
    sent: false,
    failure: classify({ type: "network", sent: false, code: why }, { write: isWrite(cmd.type), now }),
  };
}

/** True once the request may no longer leave (opts.leaveBy passed). */
function pastLeaveBy(deps: CrmDeps, opts: BatchOptions): boolean {
  return opts.leaveBy !== undefined && (deps.now ?? Date.now)() > opts.leaveBy;
}

/** What one HTTP request (the batch, or one command sent direct) told the limiter and readiness. */
interface Report {
  /** Sub-commands the portal answered, for readiness (§14). */
  observed: CommandObservation[];
  /** Operating times from the reply, the largest per method. */
  samples: OperatingSample[];
  /** Methods refused with OPERATION_TIME_LIMIT, with the estimated end of the block. */
  blocks: Map<string, number>;
  /** A limit refusal: the rate is cut. */
  lowerRate: boolean;
  /** The permit of a request the portal answered (no limit refusal), for a rate climbing back. */
  answered: LimiterPermit | null;
}

/** Sends the batch under `permit`, fills its commands' outcomes and reports what the reply said. */
async function sendAsBatch(
  deps: CrmDeps,
  toSend: readonly Prepared[],
  permit: LimiterPermit,
  opts: BatchOptions,
  outcomes: CommandOutcome[],
): Promise<Report> {
  const now = deps.now ?? Date.now;
  const report: Report = { observed: [], samples: [], blocks: new Map(), lowerRate: false, answered: null };
  if (pastLeaveBy(deps, opts)) {
    await permit.release();
    for (const p of toSend) outcomes[p.index] = notSent(p.key, p.cmd, "SEND_WINDOW_PASSED", now());
    return report;
  }
  let http: HttpResult | undefined;
  try {
    http = await deps.client.call(
      "batch",
      { halt: 0, cmd: Object.fromEntries(toSend.map((p) => [p.key, p.line])) },
      opts.signal ? { signal: opts.signal } : {},
    );
  } finally {
    // An answer is news for every replica's readiness (sql/limiter/health.sql), in the same call.
    await permit.release(isAnswered(http));
  }

  const maps = batchMaps(http);
  batchSize.observe(toSend.length);
  batchDuration.observe({ outcome: maps ? "batch" : transportOutcome(http) }, http.elapsedMs / 1000);
  if (!maps) {
    // The batch failed as a whole: the same transport outcome, judged per command.
    const outcome = transportFailure(http);
    const sent = http.type !== "network" || http.sent;
    for (const p of toSend) {
      const failure = classify(outcome, { write: isWrite(p.cmd.type), now: now() });
      report.lowerRate ||= failure.lowerRate === true;
      outcomes[p.index] = { key: p.key, type: p.cmd.type, ok: false, sent, failure };
    }
    // One refused request is one refusal, however many commands it carried.
    const first = outcomes[toSend[0]?.index ?? -1];
    if (first && !first.ok && isRateLimit(first.failure.code)) rateLimited.inc({ code: first.failure.code });
  } else {
    const samples = new Map<string, OperatingSample>();
    for (const p of toSend) {
      const s = operatingOf(p.method, maps.time[p.key]);
      if (s && (samples.get(p.method)?.operating ?? -1) < s.operating) samples.set(p.method, s);
    }
    for (const p of toSend) {
      const write = isWrite(p.cmd.type);
      if (p.key in maps.error) {
        const failure = classify(
          { type: "command_error", entry: maps.error[p.key] },
          { write, now: now(), ...resetOf(samples.get(p.method)) },
        );
        if (isRateLimit(failure.code)) rateLimited.inc({ code: failure.code });
        if (failure.blockMethodUntil !== undefined) {
          report.blocks.set(p.method, Math.max(report.blocks.get(p.method) ?? 0, failure.blockMethodUntil));
        }
        report.lowerRate ||= failure.lowerRate === true;
        outcomes[p.index] = { key: p.key, type: p.cmd.type, ok: false, sent: true, failure };
      } else if (p.key in maps.result) {
        const meta: { total?: number; next?: number } = {};
        const total = num(maps.total[p.key]);
        const next = num(maps.next[p.key]);
        if (total !== undefined) meta.total = total;
        if (next !== undefined) meta.next = next;
        outcomes[p.index] = parsedOutcome(deps, p, maps.result[p.key], meta);
      } else {
        outcomes[p.index] = {
          key: p.key,
          type: p.cmd.type,
          ok: false,
          sent: true,
          failure: classify({ type: "missing" }, { write, now: now() }),
        };
      }
    }
    report.observed = toSend.map((p) => observation(p, outcomes[p.index]));
    report.samples = [...samples.values()];
    report.answered = permit;
  }

  deps.log?.info(
    {
      event: "crm.batch",
      size: toSend.length,
      status: http.type === "reply" || http.type === "malformed" ? http.status : 0,
      transport: http.type,
      elapsedMs: http.elapsedMs,
      ok: toSend.filter((p) => outcomes[p.index]?.ok).length,
      failed: summarise(toSend.map((p) => outcomes[p.index])),
    },
    "CRM batch sent",
  );
  return report;
}

/**
 * Sends one command as a call of its own (its parameters hold a batch reference) and fills its
 * outcome as a batch sub-result would have been judged. `held`: a permit the caller already holds
 * (used when no batch goes); otherwise one is acquired here. A wait for it that the caller aborts
 * ends like a call aborted before it connected: not sent.
 */
async function sendDirect(
  deps: CrmDeps,
  p: Prepared,
  held: LimiterPermit | undefined,
  opts: BatchOptions,
  outcomes: CommandOutcome[],
): Promise<Report> {
  const now = deps.now ?? Date.now;
  const write = isWrite(p.cmd.type);
  const report: Report = { observed: [], samples: [], blocks: new Map(), lowerRate: false, answered: null };
  let permit: LimiterPermit;
  // The wait for a permit ends with the caller's signal, and at opts.leaveBy.
  const window =
    opts.leaveBy === undefined ? undefined : AbortSignal.timeout(Math.max(0, opts.leaveBy - now()));
  const signals = [opts.signal, window].filter((x): x is AbortSignal => x !== undefined);
  const signal = signals.length > 0 ? AbortSignal.any(signals) : undefined;
  try {
    permit = held ?? (await deps.limiter.acquire(signal ? { signal } : {}));
  } catch (e) {
    if (!signal?.aborted) throw e;
    outcomes[p.index] = notSent(
      p.key,
      p.cmd,
      opts.signal?.aborted ? "CLIENT_ABORTED" : "SEND_WINDOW_PASSED",
      now(),
    );
    return report;
  }
  if (pastLeaveBy(deps, opts)) {
    await permit.release();
    outcomes[p.index] = notSent(p.key, p.cmd, "SEND_WINDOW_PASSED", now());
    return report;
  }
  let http: HttpResult | undefined;
  try {
    // The same values the batch would have delivered (what the portal's parse_str makes of the
    // sub-request: strings, 1/0 for booleans, "" for null), as the JSON body of the method's call.
    http = await deps.client.call(
      p.method,
      parsePhpQuery(p.line.slice(p.line.indexOf("?") + 1)),
      opts.signal ? { signal: opts.signal } : {},
    );
  } finally {
    await permit.release(isAnswered(http));
  }

  const body =
    http.type === "reply" && http.body !== null && typeof http.body === "object" && !Array.isArray(http.body)
      ? (http.body as Record<string, unknown>)
      : null;
  const sample = body ? operatingOf(p.method, body.time) : null;
  if (sample) report.samples.push(sample);
  let outcome: CommandOutcome;
  if (http.type === "reply" && http.status === 200 && body && "result" in body && !("error" in body)) {
    const meta: { total?: number; next?: number } = {};
    const total = num(body.total);
    const next = num(body.next);
    if (total !== undefined) meta.total = total;
    if (next !== undefined) meta.next = next;
    outcome = parsedOutcome(deps, p, body.result, meta);
  } else {
    const failure = classify(transportFailure(http), { write, now: now(), ...resetOf(sample ?? undefined) });
    if (isRateLimit(failure.code)) rateLimited.inc({ code: failure.code });
    if (failure.blockMethodUntil !== undefined) report.blocks.set(p.method, failure.blockMethodUntil);
    report.lowerRate = failure.lowerRate === true;
    outcome = {
      key: p.key,
      type: p.cmd.type,
      ok: false,
      sent: http.type !== "network" || http.sent,
      failure,
    };
  }
  outcomes[p.index] = outcome;
  // Readiness hears of the command as of a batch's sub-command when the portal answered for the
  // method itself; a refusal of the whole request (credentials, a redirect, an outage, a limit) is
  // the transport's news, which the client's observer already has.
  if (
    http.type === "reply" &&
    (outcome.ok ||
      !(
        outcome.failure.code === "credential_rejected" ||
        outcome.failure.code === "portal_redirect" ||
        isPortalWide(outcome.failure.code)
      ))
  ) {
    report.observed.push(observation(p, outcome));
  }
  if (report.observed.length > 0 && !report.lowerRate) report.answered = permit;

  deps.log?.info(
    {
      event: "crm.direct",
      commandType: p.cmd.type,
      method: p.method,
      reason: "batch_reference",
      status: http.type === "reply" || http.type === "malformed" ? http.status : 0,
      transport: http.type,
      elapsedMs: http.elapsedMs,
      ok: outcome.ok,
      ...(outcome.ok ? {} : { code: outcome.failure.code }),
    },
    "CRM command sent as a call of its own (a parameter holds a batch reference)",
  );
  return report;
}

/** A result parsed for its command, or malformed_reply when it does not have the documented shape. */
function parsedOutcome(
  deps: CrmDeps,
  p: Prepared,
  result: unknown,
  meta: { total?: number; next?: number },
): CommandOutcome {
  const parsed = parseResult(p.cmd.type, result, deps.catalogue, meta);
  if (parsed !== null) return { key: p.key, type: p.cmd.type, ok: true, result: parsed } as CommandOutcome;
  return {
    key: p.key,
    type: p.cmd.type,
    ok: false,
    sent: true,
    failure: classify(
      { type: "malformed", status: 200 },
      { write: isWrite(p.cmd.type), now: (deps.now ?? Date.now)() },
    ),
  };
}

/** A command's outcome as readiness sees it. */
function observation(p: Prepared, o: CommandOutcome | undefined): CommandObservation {
  return { method: p.method, ok: o?.ok === true, code: o && !o.ok ? o.failure.code : null };
}

/** An HTTP result that is not a success, as the classifier takes it. */
function transportFailure(http: HttpResult): CrmOutcome {
  return http.type === "reply"
    ? { type: "reply", status: http.status, body: http.body }
    : http.type === "malformed"
      ? { type: "malformed", status: http.status }
      : { type: "network", sent: http.sent, code: http.code };
}

const isRateLimit = (code: string) => (RATE_LIMIT_CODES as readonly string[]).includes(code);

/** The batch duration's outcome label for a request that got no batch reply. */
function transportOutcome(http: HttpResult): string {
  if (http.type === "reply") return `http_${http.status}`;
  return http.type === "malformed" ? "malformed_reply" : "network";
}

/** One sample per command of the batch, sent or held back, by type, kind and safe code. */
function countOutcomes(list: Array<CommandOutcome | undefined>): void {
  for (const o of list) {
    if (!o) continue;
    commandOutcomes.inc({
      command_type: o.type,
      kind: o.ok ? "ok" : o.failure.kind,
      code: o.ok ? "ok" : o.failure.code,
    });
  }
}

function resetOf(s: OperatingSample | undefined): { operatingResetAt?: number } {
  return s?.resetAt != null ? { operatingResetAt: s.resetAt } : {};
}

/** Counts failures by safe code, for the log line (no keys, no data). */
function summarise(list: Array<CommandOutcome | undefined>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const o of list) if (o && !o.ok) out[o.failure.code] = (out[o.failure.code] ?? 0) + 1;
  return out;
}
