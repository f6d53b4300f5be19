// Batching (§2.5, §8): one command is one sub-request of a Bitrix24 `batch`; commands of different
// workflows share a batch; every sub-result is parsed and classified on its own from `result` /
// `result_error` (empty maps arrive as `[]`). A batch is sent once: if it fails as a whole, each
// command gets its own verdict (a write that may have been applied is uncertain) and the caller
// decides per command; nothing here re-sends it.

import type { Attributes, Link } from "@opentelemetry/api";
import {
  batchDuration,
  batchSize,
  commandOutcomes,
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
import { type Classification, classify, type FailureCode } from "./classify.js";
import type { CrmClient, HttpResult } from "./client.js";
import type { CrmLimiter, LimiterPermit, OperatingSample } from "./limiter.js";
import { toPhpQuery } from "./php-query.js";

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
  line: string;
}

export interface BatchOptions {
  /** A limiter permit the caller already holds (the pump does); otherwise one is acquired here. */
  permit?: LimiterPermit;
  signal?: AbortSignal;
  /** Span links to the work this batch serves (each command's or inbox event's span). */
  links?: Link[];
  /** The pump's batch id (crm_commands.batch_id), for the span. */
  batchId?: string;
}

/**
 * Sends up to 50 commands as one `batch` (halt=0) under one limiter permit and returns one outcome
 * per command, in input order. Pass `permit` when the caller already holds one (the pump does);
 * otherwise one is acquired here. Limit signals from the reply are reported to the limiter. The
 * batch is a span (bitrix_sync.crm.batch) with the HTTP call as its child.
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
    const outcomes = await sendBatch(deps, commands, opts);
    let ok = 0;
    for (const o of outcomes) if (o?.ok) ok++;
    span.setAttributes({ "bitrix_sync.batch.ok": ok, "bitrix_sync.batch.failed": outcomes.length - ok });
    return outcomes;
  });
}

async function sendBatch(
  deps: CrmDeps,
  commands: readonly CrmCommand[],
  opts: BatchOptions,
): Promise<CommandOutcome[]> {
  const now = deps.now ?? Date.now;
  const outcomes: CommandOutcome[] = new Array(commands.length);
  const keys = new Set<string>();
  const toSend: Prepared[] = [];
  let blocked: Map<string, number> | null = null;

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
    blocked ??= await deps.limiter.blockedMethods();
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
    toSend.push({ index, key, cmd, method: req.method, line: `${req.method}?${toPhpQuery(req.params)}` });
  }

  if (toSend.length === 0) {
    await opts.permit?.release();
    countOutcomes(outcomes);
    return outcomes;
  }

  const permit = opts.permit ?? (await deps.limiter.acquire(opts.signal ? { signal: opts.signal } : {}));
  let http: HttpResult;
  try {
    http = await deps.client.call(
      "batch",
      { halt: 0, cmd: Object.fromEntries(toSend.map((p) => [p.key, p.line])) },
      opts.signal ? { signal: opts.signal } : {},
    );
  } finally {
    await permit.release();
  }

  const maps = batchMaps(http);
  batchSize.observe(toSend.length);
  batchDuration.observe({ outcome: maps ? "batch" : transportOutcome(http) }, http.elapsedMs / 1000);
  let lowerRate = false;
  if (!maps) {
    // The batch failed as a whole: the same transport outcome, judged per command.
    const outcome =
      http.type === "reply"
        ? ({ type: "reply", status: http.status, body: http.body } as const)
        : http.type === "malformed"
          ? ({ type: "malformed", status: http.status } as const)
          : ({ type: "network", sent: http.sent, code: http.code } as const);
    const sent = http.type !== "network" || http.sent;
    for (const p of toSend) {
      const failure = classify(outcome, { write: isWrite(p.cmd.type), now: now() });
      lowerRate ||= failure.lowerRate === true;
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
    const blocks = new Map<string, number>();
    for (const p of toSend) {
      const write = isWrite(p.cmd.type);
      if (p.key in maps.error) {
        const failure = classify(
          { type: "command_error", entry: maps.error[p.key] },
          { write, now: now(), ...resetOf(samples.get(p.method)) },
        );
        if (isRateLimit(failure.code)) rateLimited.inc({ code: failure.code });
        if (failure.blockMethodUntil !== undefined) {
          blocks.set(p.method, Math.max(blocks.get(p.method) ?? 0, failure.blockMethodUntil));
        }
        lowerRate ||= failure.lowerRate === true;
        outcomes[p.index] = { key: p.key, type: p.cmd.type, ok: false, sent: true, failure };
      } else if (p.key in maps.result) {
        const meta: { total?: number; next?: number } = {};
        const total = num(maps.total[p.key]);
        const next = num(maps.next[p.key]);
        if (total !== undefined) meta.total = total;
        if (next !== undefined) meta.next = next;
        const parsed = parseResult(p.cmd.type, maps.result[p.key], deps.catalogue, meta);
        outcomes[p.index] =
          parsed === null
            ? {
                key: p.key,
                type: p.cmd.type,
                ok: false,
                sent: true,
                failure: classify({ type: "malformed", status: 200 }, { write, now: now() }),
              }
            : ({ key: p.key, type: p.cmd.type, ok: true, result: parsed } as CommandOutcome);
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
    deps.observeCommands?.(
      toSend.map((p) => {
        const o = outcomes[p.index];
        return { method: p.method, ok: o?.ok === true, code: o && !o.ok ? o.failure.code : null };
      }),
    );
    if (samples.size > 0) await deps.limiter.noteOperating([...samples.values()]);
    for (const [method, until] of blocks) {
      const end = await deps.limiter.noteMethodBlocked(method, until);
      for (const p of toSend) {
        const o = outcomes[p.index];
        if (p.method === method && o && !o.ok && o.failure.code === "operation_time_limit") {
          o.failure.blockMethodUntil = end;
          o.failure.retryAfterMs = Math.max(0, end - now());
        }
      }
    }
  }
  if (lowerRate) await deps.limiter.noteRateLimited();
  else if (maps && permit.reduced) await deps.limiter.noteAnswered?.(permit);
  countOutcomes(outcomes);

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
  return outcomes;
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
