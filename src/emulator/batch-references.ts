// `batch` references (reference §3): the portal resolves `$result[key][...]` (and `$next`, `$total`,
// `$time`, `$error`) inside every decoded value of a sub-request, against the commands already run in
// the same batch. A value that is the whole reference becomes what it names (a scalar or an array);
// inside a longer value a number or string replaces the reference's text and anything else is left.
// Percent-encoding does not protect a value (it is decoded first); only a value that never travels in
// a batch escapes. So free text that happens to look like a reference is changed by the portal.

/** The maps of the batch so far, by the reference's name. */
export interface BatchSoFar {
  result: Record<string, unknown>;
  next: Record<string, unknown>;
  total: Record<string, unknown>;
  time: Record<string, unknown>;
  error: Record<string, unknown>;
}

const REFERENCE = /\$(result|next|total|time|error)([^\s]*)/gi;
const SEGMENT = /\[([^\]]*)\]/g;

/** Walks the `[key]` segments of `path` from `map`, stopping at the first key that is not there. */
function walk(map: unknown, path: string): unknown {
  let at = map;
  for (const m of path.matchAll(SEGMENT)) {
    const key = m[1] ?? "";
    if (at === null || typeof at !== "object" || !(key in (at as Record<string, unknown>))) break;
    at = (at as Record<string, unknown>)[key];
  }
  return at;
}

function resolveValue(value: string, so: BatchSoFar): unknown {
  const matches = [...value.matchAll(REFERENCE)];
  if (matches.length === 0) return value;
  const target = (m: RegExpMatchArray) =>
    walk(so[(m[1] ?? "result").toLowerCase() as keyof BatchSoFar], m[2] ?? "");
  const first = matches[0] as RegExpMatchArray;
  if (first[0] === value) return target(first);
  let out = value;
  for (const m of matches) {
    const v = target(m);
    if (typeof v === "string" || typeof v === "number") out = out.replace(m[0], String(v));
  }
  return out;
}

/** The sub-request's parameters with every reference resolved, as the portal passes them on. */
export function resolveBatchReferences(params: unknown, so: BatchSoFar): unknown {
  if (typeof params === "string") return resolveValue(params, so);
  if (Array.isArray(params)) return params.map((v) => resolveBatchReferences(v, so));
  if (params !== null && typeof params === "object") {
    return Object.fromEntries(
      Object.entries(params as Record<string, unknown>).map(([k, v]) => [k, resolveBatchReferences(v, so)]),
    );
  }
  return params;
}
