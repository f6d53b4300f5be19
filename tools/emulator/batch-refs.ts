// References inside a `batch` (reference §3), resolved the way the portal's core resolves them
// (CRestUtil::ParseBatchQuery → processBatchStructure → processBatchElement, fed by
// CRestProvider::methodsBatch). Pure: no I/O, no clock. The emulator's batch runs every decoded
// sub-request through resolveParams before the method sees it, and records every reply with
// recordReply, so a value that names `$result[...]` (or next/total/time/error, in any letter case)
// is rewritten exactly as a real portal would rewrite it, hostile or not.
//
// What the core does, and so what this does:
// - keys are resolved with an empty word list (`/\$()([^\s]*)/i`): a key that is exactly such a
//   reference becomes null, i.e. the empty key; a key that merely contains one is kept;
// - values are resolved against the words that are the result map's top keys at the time
//   (`result|next|total|time|error`, plus `error_description` once a command has failed), case
//   insensitively, but the map lookup is by the word as written: `$RESULT[..]` finds nothing;
// - the `[segment]`s of the match are walked with PHP `isset` semantics, stopping at the first one
//   that is missing (or null), so a missing key leaves the walk where it stopped;
// - a value that is exactly the match becomes what the walk reached, whatever it is (an array, a
//   number, null); inside a longer value the match text is replaced (every occurrence) only by a
//   string or a number, and anything else leaves the value as it was;
// - whitespace ends a match (PCRE's `\s` without the UTF flag: space, \t, \n, \v, \f, \r).

/** The map the core builds while a batch runs: top key (result, next, ...) → command key → value. */
export type BatchResults = Record<string, Record<string, unknown>>;

/** `$arResult` before the first command: the five maps, empty, in the core's order. */
export function newBatchResults(): BatchResults {
  return { result: {}, next: {}, total: {}, time: {}, error: {} };
}

/**
 * Records one command's reply as methodsBatch does: `$res` is the reply array (result, next, total,
 * time; or error and error_description). An error reply first gets `$res['error'] = $res`, so the
 * error map holds the whole error array and `error_description` becomes a top key of its own.
 */
export function recordReply(results: BatchResults, key: string, reply: Record<string, unknown>): void {
  let res = reply;
  if (reply.error !== undefined && reply.error !== null) res = { ...reply, error: { ...reply } };
  for (const [k, v] of Object.entries(res)) {
    if (!Object.hasOwn(results, k)) results[k] = {};
    (results[k] as Record<string, unknown>)[key] = v;
  }
}

// PCRE `\s` without the UTF flag: ASCII whitespace only (JavaScript's `\s` also takes NBSP & co).
const NOT_SPACE = "[^ \\t\\n\\v\\f\\r]";

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** `implode('|', array_keys($arResult))`, made safe for a RegExp (the words are identifiers). */
export function keysCacheOf(results: BatchResults): string {
  return Object.keys(results).map(escapeRegExp).join("|");
}

const INDEX = /^(0|[1-9]\d*)$/;
const PHP_INT = /^-?\d+$/;

/** PHP `isset($r[$key])` followed by `$r[$key]`: the element, or undefined when isset is false. */
function phpElement(r: unknown, key: string): unknown {
  if (typeof r === "string") {
    // A string offset: an integer within range (negative counts from the end), one byte long.
    if (!PHP_INT.test(key)) return undefined;
    const bytes = Buffer.from(r, "utf8");
    const n = Number(key);
    const i = n < 0 ? bytes.length + n : n;
    if (i < 0 || i >= bytes.length) return undefined;
    return bytes.subarray(i, i + 1).toString("latin1");
  }
  if (Array.isArray(r)) {
    // A PHP list: only its integer keys exist ("length" and friends are JavaScript's, not PHP's).
    if (!INDEX.test(key)) return undefined;
    const v = r[Number(key)];
    return v === null ? undefined : v;
  }
  if (r !== null && typeof r === "object") {
    if (!Object.hasOwn(r, key)) return undefined;
    const v = (r as Record<string, unknown>)[key];
    return v === null ? undefined : v;
  }
  return undefined;
}

/**
 * PHP's `(string)` of a number: an integer exactly; a float with 14 significant digits (the
 * `precision` setting), in E notation below 1e-4 or from 1e14 up (`1.0E+25`).
 */
export function phpNumberString(n: number): string {
  if (Number.isInteger(n) && Math.abs(n) <= Number.MAX_SAFE_INTEGER) return String(n);
  if (!Number.isFinite(n)) return Number.isNaN(n) ? "NAN" : n > 0 ? "INF" : "-INF";
  const [mantissa = "", exp = "0"] = n.toExponential(13).split("e");
  const e = Number(exp);
  if (e < -4 || e >= 14) {
    let m = mantissa.replace(/0+$/, "").replace(/\.$/, "");
    if (!m.includes(".")) m += ".0";
    return `${m}E${e < 0 ? "-" : "+"}${Math.abs(e)}`;
  }
  const fixed = Number(n.toPrecision(14));
  return String(fixed);
}

/**
 * processBatchElement($query, $arResult, $keysCache): one key or one scalar value. Returns the
 * value unchanged, rewritten, or replaced by what a reference points at.
 */
export function resolveElement(query: unknown, results: BatchResults, keysCache = ""): unknown {
  if (typeof query !== "string" && typeof query !== "number") return query;
  const subject = String(query);
  const re = new RegExp(`\\$(${keysCache})(${NOT_SPACE}*)`, "gi");
  // preg_match_all: every match of the original text, found before anything is replaced.
  const matches = [...subject.matchAll(re)];
  let out: unknown = query;
  for (const m of matches) {
    const whole = m[0];
    const segments = [...(m[2] ?? "").matchAll(/\[([^\]]+)\]/g)].map((s) => s[1] as string);
    if (segments.length === 0) continue;
    // `$arResult[$arMatch[1]]`: the word as written; `RESULT` is not `result`.
    const word = m[1] ?? "";
    let r: unknown = Object.hasOwn(results, word) ? results[word] : null;
    for (const key of segments) {
      const next = phpElement(r, key);
      if (next === undefined) break;
      r = next;
    }
    if (whole === out) {
      out = r === undefined ? null : structuredClone(r);
      continue;
    }
    // is_numeric($r) → (string)$r; a numeric string is already itself.
    const text = typeof r === "number" ? phpNumberString(r) : r;
    if (typeof text !== "string" || typeof out !== "string") continue;
    out = out.split(whole).join(text);
  }
  return out;
}

/**
 * processBatchStructure($params, $arResult): every key (with no words, as the core passes none)
 * and every value (arrays recursively, against the words of the result map as it is now).
 */
export function resolveParams(params: unknown, results: BatchResults, keysCache?: string): unknown {
  if (Array.isArray(params)) {
    const cache = keysCache ?? keysCacheOf(results);
    // A list's keys are 0..n-1: no key of it can hold a reference.
    return params.map((v) =>
      v !== null && typeof v === "object"
        ? resolveParams(v, results, cache)
        : resolveElement(v, results, cache),
    );
  }
  const out: Record<string, unknown> = {};
  if (params === null || typeof params !== "object") return out;
  const cache = keysCache ?? keysCacheOf(results);
  for (const [key, value] of Object.entries(params as Record<string, unknown>)) {
    const newKey = resolveElement(key, results);
    // A key that was exactly a reference became null: PHP files it under "".
    const k = typeof newKey === "string" ? newKey : newKey === null ? "" : String(newKey);
    out[k] =
      value !== null && typeof value === "object"
        ? resolveParams(value, results, cache)
        : resolveElement(value, results, cache);
  }
  return out;
}
