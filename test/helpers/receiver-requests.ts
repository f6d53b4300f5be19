// Generated robot requests for the receivers' fuzzing (§10.1): valid requests with harmless
// variations, valid requests broken by one or two mutations (each mutation makes a request invalid
// whatever else happens to it), and random junk. Shared by the in-process property test
// (test/integration/inbound/fuzz.test.ts) and the network fuzz run (`npm run fuzz:receiver`,
// test/helpers/fuzz-receiver.ts), which adds the transport on top: slow, huge and broken bodies.
import fc from "fast-check";
import type { ReceiverName } from "../../src/config/receivers.js";
import { DOCUMENT_TYPES } from "../../src/inbound/contract.js";
import { isFormContentType } from "../../src/inbound/routes.js";

/** What the receivers under test are configured with. */
export interface Contract {
  tokens: { contact: string; contactPrevious: string; alert: string; alertPrevious: string };
  portalHost: string;
  memberId: string;
  alertEntityTypeId: number;
}

/** A request before serialisation, so mutations can work on its parts. */
export interface Req {
  receiver: ReceiverName;
  method: string;
  contentType: string | undefined;
  query: Array<[string, string]>;
  /** Raw query text appended after the pairs (junk). */
  queryTail: string;
  fields: Array<[string, string]>;
  /** Whether brackets are percent-encoded (PHP) or sent raw. */
  rawKeys: boolean;
  /** Raw body text appended after the fields (junk), or a whole binary body. */
  bodyTail: string;
  binaryBody?: Uint8Array;
  /** Bytes spliced into the body unencoded (odd encodings). */
  rawBytes?: Uint8Array;
  valid: boolean;
}

const enc = (s: string) => encodeURIComponent(s).replace(/%20/g, "+");
const encKey = (s: string, raw: boolean) => (raw ? enc(s).replace(/%5B/g, "[").replace(/%5D/g, "]") : enc(s));

/** The request's path with query, and its body bytes (undefined for GET and HEAD). */
export function serialise(r: Req): { path: string; method: string; contentType?: string; body?: Uint8Array } {
  const q = r.query.map(([k, v]) => `${enc(k)}=${enc(v)}`).join("&") + r.queryTail;
  const path = `/bitrix/sync/webhook/${r.receiver}?${q}`;
  let body: Uint8Array | undefined;
  if (r.method !== "GET" && r.method !== "HEAD") {
    if (r.binaryBody) body = r.binaryBody;
    else {
      const text = r.fields.map(([k, v]) => `${encKey(k, r.rawKeys)}=${enc(v)}`).join("&") + r.bodyTail;
      const bytes = new TextEncoder().encode(text);
      body = r.rawBytes ? Buffer.concat([bytes, r.rawBytes]) : bytes;
    }
  }
  return {
    path,
    method: r.method,
    ...(r.contentType !== undefined ? { contentType: r.contentType } : {}),
    body,
  };
}

/** The robot's form fields in the order it sends them, keys unencoded. */
function robotFields(c: Contract, receiver: ReceiverName, id: string): Array<[string, string]> {
  return [
    ["document_id[0]", "crm"],
    ["document_id[1]", DOCUMENT_TYPES[receiver]],
    ["document_id[2]", receiver === "contact" ? `CONTACT_${id}` : `DYNAMIC_${c.alertEntityTypeId}_${id}`],
    ["auth[domain]", c.portalHost],
    ["auth[client_endpoint]", `https://${c.portalHost}/rest/`],
    ["auth[server_endpoint]", "https://oauth.bitrix24.tech/rest/"],
    ["auth[member_id]", c.memberId],
  ];
}

/** A Contact or item ID: canonical decimal digits. */
export const digits = fc.bigInt({ min: 1n, max: 10n ** 18n - 1n }).map(String);

/** Content types the receivers accept: the form type, optionally with charset=utf-8, any case. */
export const FORM_TYPES = [
  "application/x-www-form-urlencoded",
  "application/x-www-form-urlencoded; charset=utf-8",
  "APPLICATION/X-WWW-FORM-URLENCODED;charset=UTF-8",
  'application/x-www-form-urlencoded; charset="utf-8"',
  "application/x-www-form-urlencoded ; charset = utf-8",
];

/** Form types with another charset: refused (415) even though the bytes might be ASCII. */
const OTHER_CHARSETS = [
  "application/x-www-form-urlencoded; charset=iso-8859-1",
  "application/x-www-form-urlencoded; charset=utf-16",
  "application/x-www-form-urlencoded; charset=koi8-r",
  "application/x-www-form-urlencoded; charset=windows-1251",
  "application/x-www-form-urlencoded; charset=utf-8; boundary=x",
  "application/x-www-form-urlencoded; charset=utf8",
];

/**
 * Extra auth members are ignored (the platform may add some): names that are JavaScript's own
 * property names must be ignored like any other.
 */
const HARMLESS_AUTH_KEYS = [
  "application_token",
  "constructor",
  "prototype",
  "tostring",
  "valueof",
  "__x",
].filter((k) => /^[a-z][a-z_]{0,31}$/.test(k));

/** A valid request with harmless variations: field order, bracket encoding, optional endpoints, case. */
export function validRequest(c: Contract, id: fc.Arbitrary<string> = digits): fc.Arbitrary<Req> {
  return fc
    .record({
      receiver: fc.constantFrom<ReceiverName>("contact", "alert"),
      id,
      previousToken: fc.boolean(),
      contentType: fc.constantFrom(...FORM_TYPES),
      order: fc.nat(),
      rawKeys: fc.boolean(),
      dropEndpoints: fc.boolean(),
      upperDomain: fc.boolean(),
      idFirst: fc.boolean(),
      extraAuth: fc.option(fc.tuple(fc.constantFrom(...HARMLESS_AUTH_KEYS), fc.string({ maxLength: 40 })), {
        nil: undefined,
      }),
    })
    .map((g) => {
      let fields = robotFields(c, g.receiver, g.id);
      if (g.dropEndpoints) fields = fields.filter(([k]) => !k.includes("endpoint"));
      if (g.upperDomain) fields = fields.map(([k, v]) => [k, k === "auth[domain]" ? v.toUpperCase() : v]);
      if (g.extraAuth !== undefined) fields.push([`auth[${g.extraAuth[0]}]`, g.extraAuth[1]]);
      // A rotation of the field order.
      const n = g.order % fields.length;
      fields = [...fields.slice(n), ...fields.slice(0, n)];
      const t = c.tokens;
      const token =
        g.receiver === "contact"
          ? g.previousToken
            ? t.contactPrevious
            : t.contact
          : g.previousToken
            ? t.alertPrevious
            : t.alert;
      const query: Array<[string, string]> = g.idFirst
        ? [
            ["ID", g.id],
            ["token", token],
          ]
        : [
            ["token", token],
            ["ID", g.id],
          ];
      return {
        receiver: g.receiver,
        method: "POST",
        contentType: g.contentType,
        query,
        queryTail: "",
        fields,
        rawKeys: g.rawKeys,
        bodyTail: "",
        valid: true,
      };
    });
}

type Mutation = (r: Req) => Req;
const withField = (r: Req, key: string, f: (v: string) => string): Req => ({
  ...r,
  fields: r.fields.map(([k, v]): [string, string] => [k, k === key ? f(v) : v]),
});
const REQUIRED = ["document_id[0]", "document_id[1]", "document_id[2]", "auth[domain]", "auth[member_id]"];
const VALID_DOCUMENT = /^(CONTACT_[1-9][0-9]{0,17}|DYNAMIC_[1-9][0-9]{0,8}_[1-9][0-9]{0,17})$/;
const allowedKey = (k: string) => /^document_id\[[0-2]\]$/.test(k) || /^auth\[[a-z][a-z_]{0,31}\]$/.test(k);

/** Keys that try to reach a prototype or nest deeper than the contract allows: never accepted. */
const PROTOTYPE_AND_NESTED_KEYS = [
  "__proto__",
  "__proto__[domain]",
  "constructor[prototype][domain]",
  "auth[__proto__]",
  "auth[__proto__][domain]",
  "auth[domain][]",
  "auth[domain][0]",
  "auth[Domain]",
  "document_id[0][x]",
  "document_id[]",
  "document_id[00]",
  "document_id[0]x",
  "document_id[__proto__]",
  "prototype",
];

/** Each mutation makes the request invalid, whatever else it is. */
export function mutation(c: Contract): fc.Arbitrary<Mutation> {
  const TOKENS = c.tokens;
  const allTokens: string[] = Object.values(TOKENS);
  return fc.oneof(
    fc.constantFrom("GET", "PUT", "DELETE", "PATCH", "OPTIONS").map(
      (m): Mutation =>
        (r) => ({ ...r, method: m }),
    ),
    fc
      .option(
        fc.oneof(
          fc.string({ maxLength: 60 }).filter((s) => /^[\x20-\x7e]*$/.test(s)),
          fc.constantFrom(
            "application/json",
            "text/plain",
            "multipart/form-data; boundary=x",
            ...OTHER_CHARSETS,
          ),
        ),
        { nil: undefined },
      )
      .filter((ct) => !isFormContentType(ct))
      .map(
        (ct): Mutation =>
          (r) => ({ ...r, contentType: ct }),
      ),
    fc
      .oneof(
        fc.string({ maxLength: 70 }),
        fc.constantFrom(
          TOKENS.contact.toUpperCase(),
          `${TOKENS.alert}x`,
          TOKENS.contact.slice(1),
          `${TOKENS.contact} `,
          `${TOKENS.contact}\n`,
          // A token of an earlier rotation, configured nowhere any more.
          "retired-contact-token-0b1c2d3e4f5a6b7c8d9e0f1a",
        ),
      )
      .filter((t) => !allTokens.includes(t))
      .map(
        (t): Mutation =>
          (r) => ({ ...r, query: r.query.map(([k, v]) => [k, k === "token" ? t : v]) }),
      ),
    fc.constant<Mutation>((r) => ({ ...r, query: r.query.filter(([k]) => k !== "token") })),
    // The other receiver's tokens, current or previous.
    fc.boolean().map(
      (previous): Mutation =>
        (r) => ({
          ...r,
          query: r.query.map(([k, v]) => [
            k,
            k === "token"
              ? r.receiver === "contact"
                ? previous
                  ? TOKENS.alertPrevious
                  : TOKENS.alert
                : previous
                  ? TOKENS.contactPrevious
                  : TOKENS.contact
              : v,
          ]),
        }),
    ),
    // Twice, so that it stays a duplicate even after another mutation removed the token.
    fc.constant<Mutation>((r) => ({
      ...r,
      query: [...r.query, ["token", TOKENS[r.receiver]], ["token", TOKENS[r.receiver]]],
    })),
    // A leading zero: never the canonical digits of a document ID, whatever else changes.
    fc.constant<Mutation>((r) => ({ ...r, query: r.query.map(([k, v]) => [k, k === "ID" ? `0${v}` : v]) })),
    fc.constant<Mutation>((r) => ({ ...r, query: r.query.filter(([k]) => k !== "ID") })),
    fc
      .tuple(
        fc.oneof(
          fc.string({ minLength: 1, maxLength: 10 }),
          fc.constantFrom("__proto__", "constructor", "token[]", "ID[]", "token[0]"),
        ),
        fc.string({ maxLength: 10 }),
      )
      .filter(([k]) => k !== "token" && k !== "ID")
      .map(
        (p): Mutation =>
          (r) => ({ ...r, query: [...r.query, p] }),
      ),
    fc
      .string({ maxLength: 20 })
      .filter((s) => s !== "crm")
      .map(
        (s): Mutation =>
          (r) =>
            withField(r, "document_id[0]", () => s),
      ),
    fc
      .oneof(
        fc.string({ maxLength: 60 }),
        fc.constantFrom(...Object.values(DOCUMENT_TYPES), "CCrmDocumentDeal"),
      )
      .map(
        (s): Mutation =>
          (r) =>
            withField(r, "document_id[1]", () => (s === DOCUMENT_TYPES[r.receiver] ? `${s}x` : s)),
      ),
    // Document IDs that are wrong for both receivers, so no later mutation can make them match.
    fc
      .oneof(
        fc.string({ maxLength: 40 }).filter((s) => !VALID_DOCUMENT.test(s)),
        digits.map((d) => `CONTACT_0${d}`),
        digits.map((d) => `DYNAMIC_${c.alertEntityTypeId}_${d}x`),
        digits.map((d) => `DEAL_${d}`),
        fc.constantFrom("CONTACT_0", "CONTACT_", "DYNAMIC__1", `DYNAMIC_${c.alertEntityTypeId}_01`),
      )
      .map(
        (s): Mutation =>
          (r) =>
            withField(r, "document_id[2]", () => s),
      ),
    fc
      .integer({ min: 1, max: 99_999 })
      .filter((t) => t !== c.alertEntityTypeId)
      .map(
        (t): Mutation =>
          (r) =>
            r.receiver === "alert"
              ? withField(r, "document_id[2]", (old) => old.replace(/^DYNAMIC_\d+_/, `DYNAMIC_${t}_`))
              : withField(r, "document_id[2]", (old) => old.replace(/^CONTACT_/, `DYNAMIC_${t}_`)),
      ),
    fc.constantFrom(...REQUIRED).map(
      (key): Mutation =>
        (r) => ({ ...r, fields: r.fields.filter(([k]) => k !== key) }),
    ),
    fc
      .tuple(
        fc.constantFrom(...REQUIRED, "auth[client_endpoint]"),
        fc.string({ maxLength: 20 }),
        fc.boolean(),
      )
      .map(
        ([key, value, same]): Mutation =>
          (r) => {
            const existing = r.fields.find(([k]) => k === key);
            if (!existing) return { ...r, fields: [...r.fields, [key, value], [key, value]] };
            return { ...r, fields: [...r.fields, [key, same ? existing[1] : value]] };
          },
      ),
    fc
      .tuple(
        fc.oneof(
          fc.string({ minLength: 1, maxLength: 20 }),
          fc.constantFrom(
            "document_id",
            "document_id[]",
            "document_id[3]",
            "auth",
            "auth[]",
            "event",
            "data[FIELDS][ID]",
            ...PROTOTYPE_AND_NESTED_KEYS,
          ),
        ),
        fc.string({ maxLength: 20 }),
      )
      .filter(([k]) => !allowedKey(k))
      .map(
        (p): Mutation =>
          (r) => ({ ...r, fields: [...r.fields, p] }),
      ),
    // A required key written the way a naive parser would still read as it (prototype tricks,
    // double encoding, a BOM, full-width brackets): the real key is then missing.
    fc
      .tuple(
        fc.constantFrom(...REQUIRED),
        fc.constantFrom(
          (k: string) => `__proto__[${k}]`,
          (k: string) => k.replace("[", "%5B").replace("]", "%5D"),
          (k: string) => `\uFEFF${k}`,
          (k: string) => k.replace("[", "\uFF3B").replace("]", "\uFF3D"),
          (k: string) => `${k}[]`,
          (k: string) => k.replace(/^([a-z_]+)\[/, "$1[__proto__]["),
        ),
      )
      .map(
        ([key, rewrite]): Mutation =>
          (r) => ({
            ...r,
            fields: r.fields.map(([k, v]): [string, string] => [k === key ? rewrite(k) : k, v]),
          }),
      ),
    fc
      .string({ maxLength: 40 })
      .filter((d) => d.toLowerCase() !== c.portalHost)
      .map(
        (d): Mutation =>
          (r) =>
            withField(r, "auth[domain]", () => d),
      ),
    fc
      .string({ maxLength: 40 })
      .filter((m) => m !== c.memberId)
      .map(
        (m): Mutation =>
          (r) =>
            withField(r, "auth[member_id]", () => m),
      ),
    fc.integer({ min: 8200, max: 20_000 }).map(
      (n): Mutation =>
        (r) => ({ ...r, bodyTail: `&auth%5Bpad%5D=${"x".repeat(n)}` }),
    ),
    fc.integer({ min: 1030, max: 4000 }).map(
      (n): Mutation =>
        (r) => ({ ...r, queryTail: `&pad=${"q".repeat(n)}` }),
    ),
    fc
      .constantFrom(
        "&broken",
        "&x=%zz",
        "&auth%5Bx%5D=%E0%A4%A",
        "&%zz=1",
        "&=",
        // Percent-encoded bytes that are not UTF-8: overlong, a lone surrogate, a stray continuation.
        "&auth%5Bx%5D=%C0%AF",
        "&auth%5Bx%5D=%ED%A0%80",
        "&auth%5Bx%5D=%80",
        "&auth%5Bx%5D=%u0041",
      )
      .map(
        (tail): Mutation =>
          (r) => ({ ...r, bodyTail: tail }),
      ),
    // Raw bytes that are not UTF-8 in the body: Latin-1, overlong, UTF-16.
    fc
      .constantFrom(
        Uint8Array.from([0x26, 0x61, 0x3d, 0xe9]),
        Uint8Array.from([0x26, 0x61, 0x3d, 0xc0, 0xaf]),
        Uint8Array.from([0x26, 0x61, 0x3d, 0xff, 0xfe]),
        Uint8Array.from([0x26, 0x61, 0x3d, 0xed, 0xa0, 0x80]),
      )
      .map(
        (bytes): Mutation =>
          (r) => ({ ...r, rawBytes: bytes }),
      ),
    // The whole form in UTF-16: every key gains NUL bytes.
    fc.constant<Mutation>((r) => ({
      ...r,
      binaryBody: Buffer.from(
        r.fields.map(([k, v]) => `${encKey(k, r.rawKeys)}=${enc(v)}`).join("&"),
        "utf16le",
      ),
    })),
    fc.uint8Array({ minLength: 0, maxLength: 300 }).map(
      (bytes): Mutation =>
        (r) => ({ ...r, binaryBody: bytes }),
    ),
  );
}

export function mutatedRequest(c: Contract, id: fc.Arbitrary<string> = digits): fc.Arbitrary<Req> {
  return fc
    .tuple(validRequest(c, id), fc.array(mutation(c), { minLength: 1, maxLength: 2 }))
    .map(([r, ms]) => ms.reduce<Req>((acc, m) => m(acc), { ...r, valid: false }));
}

/** Junk from the ground up: any method, content type, query and body. */
export const randomRequest: fc.Arbitrary<Req> = fc.record({
  receiver: fc.constantFrom<ReceiverName>("contact", "alert"),
  method: fc.constantFrom("POST", "POST", "GET", "PUT"),
  contentType: fc.option(fc.constantFrom(...FORM_TYPES, "text/plain"), { nil: undefined }),
  query: fc.array(fc.tuple(fc.string({ maxLength: 12 }), fc.string({ maxLength: 40, unit: "binary" })), {
    maxLength: 4,
  }),
  queryTail: fc.constant(""),
  fields: fc.array(fc.tuple(fc.string({ maxLength: 20 }), fc.string({ maxLength: 40, unit: "binary" })), {
    maxLength: 10,
  }),
  rawKeys: fc.boolean(),
  bodyTail: fc.string({ maxLength: 30 }),
  valid: fc.constant(false),
});

/** The mix: 3 valid to 6 mutated to 1 junk. */
export function robotRequest(c: Contract, id: fc.Arbitrary<string> = digits): fc.Arbitrary<Req> {
  return fc.oneof(
    { arbitrary: validRequest(c, id), weight: 3 },
    { arbitrary: mutatedRequest(c, id), weight: 6 },
    { arbitrary: randomRequest, weight: 1 },
  );
}
