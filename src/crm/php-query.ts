// Bitrix24 `batch` sub-requests are query strings that the portal parses with PHP's rules
// (reference §3): nested data in bracket notation, every name and value percent-encoded. The
// emulator parses them back with the same rules, so both directions live here.

/** A JSON-like value a command parameter may hold. */
export type ParamValue = string | number | boolean | null | undefined | ParamValue[] | ParamObject;
export interface ParamObject {
  [key: string]: ParamValue;
}

function enc(s: string): string {
  // encodeURIComponent leaves !'()* alone; PHP decodes them either way.
  return encodeURIComponent(s);
}

function scalar(v: string | number | boolean | null): string {
  if (v === null) return "";
  if (typeof v === "boolean") return v ? "1" : "0";
  if (typeof v === "number") {
    if (!Number.isFinite(v)) throw new TypeError("a command parameter must be a finite number");
    return String(v);
  }
  return v;
}

function walk(prefix: string, value: ParamValue, out: string[]): void {
  if (value === undefined) return;
  if (Array.isArray(value)) {
    value.forEach((v, i) => {
      walk(`${prefix}[${i}]`, v, out);
    });
    return;
  }
  if (value !== null && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) walk(`${prefix}[${k}]`, v, out);
    return;
  }
  out.push(`${enc(prefix)}=${enc(scalar(value))}`);
}

/**
 * Encodes params the way PHP's http_build_query does: `a[b][0]=x`. Empty arrays and objects vanish
 * (PHP cannot express them), `null` becomes an empty value and booleans become 1/0.
 */
export function toPhpQuery(params: ParamObject): string {
  const out: string[] = [];
  for (const [k, v] of Object.entries(params)) walk(k, v, out);
  return out.join("&");
}

type Tree = { [key: string]: Tree | string };

/**
 * Keys that would reach Object.prototype through a plain object (`__proto__[x]=1` polluted every
 * object of the process): a pair naming one of them anywhere in its path is dropped. PHP has no such
 * keys in any Bitrix24 method's parameters, so nothing legitimate is lost.
 */
const FORBIDDEN_KEYS = new Set(["__proto__", "constructor", "prototype"]);

/** Null-prototype, so a lookup sees own keys only, even for names no one checked. */
function tree(): Tree {
  return Object.create(null) as Tree;
}

function dec(s: string): string {
  try {
    return decodeURIComponent(s.replace(/\+/g, " "));
  } catch {
    return s;
  }
}

/** Objects keyed exactly "0".."n-1" become arrays, as a PHP list would serialise to JSON. */
function listify(node: Tree | string): unknown {
  if (typeof node === "string") return node;
  const keys = Object.keys(node);
  const values = keys.map((k) => listify(node[k] as Tree | string));
  if (keys.length > 0 && keys.every((k, i) => k === String(i))) return values;
  const out: Record<string, unknown> = {};
  keys.forEach((k, i) => {
    out[k] = values[i];
  });
  return out;
}

/**
 * Parses a PHP-style query string into nested objects and arrays (all leaves are strings). A pair
 * whose key path holds `__proto__`, `constructor` or `prototype` is ignored.
 */
export function parsePhpQuery(qs: string): Record<string, unknown> {
  const root = tree();
  for (const part of qs.split("&")) {
    if (part === "") continue;
    const eq = part.indexOf("=");
    const rawKey = dec(eq < 0 ? part : part.slice(0, eq));
    const value = dec(eq < 0 ? "" : part.slice(eq + 1));
    const m = /^([^[\]]+)((?:\[[^[\]]*\])*)$/.exec(rawKey);
    if (!m) continue;
    const path = [m[1] as string];
    for (const seg of (m[2] ?? "").matchAll(/\[([^[\]]*)\]/g)) path.push(seg[1] as string);
    if (path.some((k) => FORBIDDEN_KEYS.has(k))) continue;
    let node: Tree = root;
    for (let i = 0; i < path.length; i++) {
      let key = path[i] as string;
      const last = i === path.length - 1;
      if (key === "") key = String(Object.keys(node).length);
      if (last) {
        node[key] = value;
      } else {
        const next = Object.hasOwn(node, key) ? node[key] : undefined;
        if (next === undefined || typeof next === "string") {
          const fresh = tree();
          node[key] = fresh;
          node = fresh;
        } else {
          node = next;
        }
      }
    }
  }
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(root)) out[k] = listify(v);
  return out;
}
