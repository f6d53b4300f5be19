import test from "ava";
import fc from "fast-check";
import { type ParamObject, parsePhpQuery, toPhpQuery } from "../../../src/crm/php-query.js";

test("nested params become PHP bracket notation, percent-encoded", (t) => {
  const qs = toPhpQuery({
    filter: { ">=updatedTime": "2026-08-05T09:00:00+03:00", "@id": [1, 2] },
    select: ["id"],
    start: -1,
    flag: true,
    empty: null,
  });
  t.is(
    qs,
    [
      "filter%5B%3E%3DupdatedTime%5D=2026-08-05T09%3A00%3A00%2B03%3A00",
      "filter%5B%40id%5D%5B0%5D=1",
      "filter%5B%40id%5D%5B1%5D=2",
      "select%5B0%5D=id",
      "start=-1",
      "flag=1",
      "empty=",
    ].join("&"),
  );
});

test("'+' in an offset survives (it must travel as %2B, reference §3)", (t) => {
  const back = parsePhpQuery(toPhpQuery({ at: "2026-01-01T00:00:00+03:00" }));
  t.is(back.at, "2026-01-01T00:00:00+03:00");
});

test("a form '+' decodes to a space and [] appends, as PHP does", (t) => {
  t.deepEqual(parsePhpQuery("name=Ivan+Petrov&values[]=a&values[]=b"), {
    name: "Ivan Petrov",
    values: ["a", "b"],
  });
});

test("objects keyed n0/ID-like keep their keys; 0..n-1 become lists", (t) => {
  t.deepEqual(parsePhpQuery("fm[n0][value]=x&fm[15][value]=y&list[0]=a&list[1]=b"), {
    fm: { n0: { value: "x" }, 15: { value: "y" } },
    list: ["a", "b"],
  });
});

const leaf = fc.oneof(
  fc.string({ maxLength: 12 }),
  fc.integer({ min: -1_000_000, max: 1_000_000 }),
  fc.constantFrom("+79991234567", "a&b=c", "[x]", "100%", "Россия"),
);
const key = fc.stringMatching(/^[A-Za-z@>=<!%][A-Za-z0-9_@>=<!%]{0,10}$/);
const value: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  node: fc.oneof(
    { depthSize: "small" },
    leaf,
    fc.array(tie("node"), { minLength: 1, maxLength: 3 }),
    fc.dictionary(key, tie("node"), { minKeys: 1, maxKeys: 3 }),
  ),
})).node;

function stringify(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(stringify);
  if (v !== null && typeof v === "object") {
    return Object.fromEntries(
      Object.entries(v as Record<string, unknown>).map(([k, x]) => [k, stringify(x)]),
    );
  }
  return String(v);
}

test("round trip: parse(toPhpQuery(x)) equals x with every leaf as a string", (t) => {
  t.notThrows(() =>
    fc.assert(
      fc.property(fc.dictionary(key, value, { minKeys: 1, maxKeys: 4 }), (obj) => {
        const back = parsePhpQuery(toPhpQuery(obj as ParamObject));
        t.deepEqual(back, stringify(obj));
        return true;
      }),
      { numRuns: 200 },
    ),
  );
});

const FORBIDDEN = ["__proto__", "constructor", "prototype"];

/** Every own key at every depth of a parsed value. */
function allKeys(v: unknown, out: string[] = []): string[] {
  if (v !== null && typeof v === "object") {
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
      out.push(k);
      allKeys(x, out);
    }
  }
  return out;
}

function prototypeUntouched(t: { deepEqual: (a: unknown, b: unknown, m?: string) => void }) {
  t.deepEqual(Object.getOwnPropertyNames(Object.prototype).sort(), PROTO_NAMES, "Object.prototype unchanged");
  t.deepEqual(
    Object.getOwnPropertyNames(Array.prototype).sort(),
    ARRAY_PROTO_NAMES,
    "Array.prototype unchanged",
  );
}
const PROTO_NAMES = Object.getOwnPropertyNames(Object.prototype).sort();
const ARRAY_PROTO_NAMES = Object.getOwnPropertyNames(Array.prototype).sort();

test("prototype keys are never written: __proto__, constructor and prototype pairs are dropped", (t) => {
  for (const qs of [
    "__proto__[polluted]=1",
    "__proto__%5Bpolluted%5D=1",
    "constructor[prototype][polluted]=1",
    "a[__proto__][polluted]=1",
    "a[0]=x&a[__proto__][polluted]=1",
    "a[constructor][prototype][polluted]=1",
    "prototype=1&ok=2",
  ]) {
    const out = parsePhpQuery(qs);
    t.is(({} as Record<string, unknown>).polluted, undefined, qs);
    t.false(
      allKeys(out).some((k) => FORBIDDEN.includes(k)),
      qs,
    );
    prototypeUntouched(t);
  }
  t.deepEqual(parsePhpQuery("prototype=1&ok=2"), { ok: "2" });
  t.deepEqual(parsePhpQuery("a[0]=x&a[__proto__][polluted]=1"), { a: ["x"] });
});

test("property: no generated query string writes a prototype key or touches a prototype", (t) => {
  const segment = fc.oneof(
    fc.constantFrom(...FORBIDDEN, "", "0", "1", "a", "toString", "hasOwnProperty", "__defineGetter__"),
    fc.string({ maxLength: 6 }),
  );
  const pathKey = fc
    .tuple(
      segment.filter((s) => s !== ""),
      fc.array(segment, { maxLength: 4 }),
      fc.boolean(),
    )
    .map(([head, rest, encode]) => {
      const k = head + rest.map((s) => `[${s}]`).join("");
      return encode ? encodeURIComponent(k) : k;
    });
  const qs = fc
    .array(fc.tuple(pathKey, fc.string({ maxLength: 5 })), { maxLength: 8 })
    .map((pairs) => pairs.map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join("&"));
  t.notThrows(() =>
    fc.assert(
      fc.property(qs, (s) => {
        const out = parsePhpQuery(s);
        if (allKeys(out).some((k) => FORBIDDEN.includes(k))) return false;
        if (({} as Record<string, unknown>).polluted !== undefined) return false;
        const names = Object.getOwnPropertyNames(Object.prototype).sort();
        return JSON.stringify(names) === JSON.stringify(PROTO_NAMES);
      }),
      { numRuns: 2_000 },
    ),
  );
  prototypeUntouched(t);
});
