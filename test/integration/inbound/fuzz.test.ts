// Property-based fuzzing of the receivers (§18 matrix, issue 6): 10 000 generated requests per run,
// a mix of valid robot requests (with harmless variations), valid requests broken by one or two
// mutations, and random junk. Properties: never a 5xx; a valid request gets 200 and exactly one
// inbox row; any other request gets a 4xx and no row; no reply or log line carries a secret.
import test from "ava";
import fc from "fast-check";
import type { ReceiverName } from "../../../src/inbound/config.js";
import { DOCUMENT_TYPES } from "../../../src/inbound/contract.js";
import { isFormContentType } from "../../../src/inbound/routes.js";
import {
  ALERT_ENTITY_TYPE_ID,
  captureLogger,
  inboxCount,
  MEMBER_ID,
  makeApp,
  PORTAL_HOST,
  receiverConfigFor,
  robotFields,
  setAlertEntityType,
  TOKENS,
} from "../../helpers/receiver.js";
import { createTestDb, type TestDb } from "../../helpers/testdb.js";

const RUNS = Number(process.env.RECEIVER_FUZZ_RUNS ?? 10_000);

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
  await setAlertEntityType(db.pool, ALERT_ENTITY_TYPE_ID);
});
test.after.always(async () => {
  await db?.drop();
});

/** A request before serialisation, so mutations can work on its parts. */
interface Req {
  receiver: ReceiverName;
  method: string;
  contentType: string | undefined;
  query: Array<[string, string]>;
  /** Raw query text appended after the pairs (junk). */
  queryTail: string;
  fields: Array<[string, string]>;
  /** Per field: whether brackets are percent-encoded (PHP) or sent raw. */
  rawKeys: boolean;
  /** Raw body text appended after the fields (junk), or a whole binary body. */
  bodyTail: string;
  binaryBody?: Uint8Array;
  valid: boolean;
}

const enc = (s: string) => encodeURIComponent(s).replace(/%20/g, "+");
const encKey = (s: string, raw: boolean) => (raw ? enc(s).replace(/%5B/g, "[").replace(/%5D/g, "]") : enc(s));

function serialise(r: Req): { url: string; init: RequestInit } {
  const q = r.query.map(([k, v]) => `${enc(k)}=${enc(v)}`).join("&") + r.queryTail;
  const url = `http://localhost/bitrix/sync/webhook/${r.receiver}?${q}`;
  const headers: Record<string, string> = {};
  if (r.contentType !== undefined) headers["content-type"] = r.contentType;
  const init: RequestInit = { method: r.method, headers };
  if (r.method !== "GET" && r.method !== "HEAD") {
    init.body =
      r.binaryBody ?? r.fields.map(([k, v]) => `${encKey(k, r.rawKeys)}=${enc(v)}`).join("&") + r.bodyTail;
  }
  return { url, init };
}

const digits = fc.bigInt({ min: 1n, max: 10n ** 18n - 1n }).map(String);
const FORM_TYPES = [
  "application/x-www-form-urlencoded",
  "application/x-www-form-urlencoded; charset=utf-8",
  "APPLICATION/X-WWW-FORM-URLENCODED;charset=UTF-8",
];

/** A valid request with harmless variations: field order, bracket encoding, optional endpoints, case. */
const validReq: fc.Arbitrary<Req> = fc
  .record({
    receiver: fc.constantFrom<ReceiverName>("contact", "alert"),
    id: digits,
    previousToken: fc.boolean(),
    contentType: fc.constantFrom(...FORM_TYPES),
    order: fc.nat(),
    rawKeys: fc.boolean(),
    dropEndpoints: fc.boolean(),
    upperDomain: fc.boolean(),
    idFirst: fc.boolean(),
    extraAuth: fc.option(fc.string({ maxLength: 40 }), { nil: undefined }),
  })
  .map((g) => {
    let fields = robotFields(g.receiver, g.id);
    if (g.dropEndpoints) fields = fields.filter(([k]) => !k.includes("endpoint"));
    if (g.upperDomain) fields = fields.map(([k, v]) => [k, k === "auth[domain]" ? v.toUpperCase() : v]);
    if (g.extraAuth !== undefined) fields.push(["auth[application_token]", g.extraAuth]);
    // A rotation of the field order.
    const n = g.order % fields.length;
    fields = [...fields.slice(n), ...fields.slice(0, n)];
    const token =
      g.receiver === "contact"
        ? g.previousToken
          ? TOKENS.contactPrevious
          : TOKENS.contact
        : g.previousToken
          ? TOKENS.alertPrevious
          : TOKENS.alert;
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

type Mutation = (r: Req) => Req;
const withField = (r: Req, key: string, f: (v: string) => string): Req => ({
  ...r,
  fields: r.fields.map(([k, v]): [string, string] => [k, k === key ? f(v) : v]),
});
const REQUIRED = ["document_id[0]", "document_id[1]", "document_id[2]", "auth[domain]", "auth[member_id]"];
const VALID_DOCUMENT = /^(CONTACT_[1-9][0-9]{0,17}|DYNAMIC_[1-9][0-9]{0,8}_[1-9][0-9]{0,17})$/;
const allowedKey = (k: string) => /^document_id\[[0-2]\]$/.test(k) || /^auth\[[a-z][a-z_]{0,31}\]$/.test(k);

/** Each mutation makes the request invalid, whatever else it is. */
const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.constantFrom("GET", "PUT", "DELETE", "PATCH", "OPTIONS").map(
    (m): Mutation =>
      (r) => ({ ...r, method: m }),
  ),
  fc
    .option(
      fc.oneof(
        fc.string({ maxLength: 60 }),
        fc.constantFrom("application/json", "text/plain", "multipart/form-data; boundary=x"),
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
      fc.constantFrom(TOKENS.contact.toUpperCase(), `${TOKENS.alert}x`, TOKENS.contact.slice(1)),
    )
    .filter((t) => !Object.values(TOKENS).includes(t as never))
    .map(
      (t): Mutation =>
        (r) => ({ ...r, query: r.query.map(([k, v]) => [k, k === "token" ? t : v]) }),
    ),
  fc.constant<Mutation>((r) => ({ ...r, query: r.query.filter(([k]) => k !== "token") })),
  fc.constant<Mutation>((r) => ({
    ...r,
    // The other receiver's token.
    query: r.query.map(([k, v]) => [
      k,
      k === "token" ? (r.receiver === "contact" ? TOKENS.alert : TOKENS.contact) : v,
    ]),
  })),
  // Twice, so that it stays a duplicate even after another mutation removed the token.
  fc.constant<Mutation>((r) => ({
    ...r,
    query: [...r.query, ["token", TOKENS[r.receiver]], ["token", TOKENS[r.receiver]]],
  })),
  // A leading zero: never the canonical digits of a document ID, whatever else changes.
  fc.constant<Mutation>((r) => ({ ...r, query: r.query.map(([k, v]) => [k, k === "ID" ? `0${v}` : v]) })),
  fc.constant<Mutation>((r) => ({ ...r, query: r.query.filter(([k]) => k !== "ID") })),
  fc
    .tuple(fc.string({ minLength: 1, maxLength: 10 }), fc.string({ maxLength: 10 }))
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
      digits.map((d) => `DYNAMIC_${ALERT_ENTITY_TYPE_ID}_${d}x`),
      digits.map((d) => `DEAL_${d}`),
      fc.constantFrom("CONTACT_0", "CONTACT_", "DYNAMIC__1", `DYNAMIC_${ALERT_ENTITY_TYPE_ID}_01`),
    )
    .map(
      (s): Mutation =>
        (r) =>
          withField(r, "document_id[2]", () => s),
    ),
  fc
    .integer({ min: 1, max: 99_999 })
    .filter((t) => t !== ALERT_ENTITY_TYPE_ID)
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
    .tuple(fc.constantFrom(...REQUIRED, "auth[client_endpoint]"), fc.string({ maxLength: 20 }), fc.boolean())
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
        ),
      ),
      fc.string({ maxLength: 20 }),
    )
    .filter(([k]) => !allowedKey(k))
    .map(
      (p): Mutation =>
        (r) => ({ ...r, fields: [...r.fields, p] }),
    ),
  fc
    .string({ maxLength: 40 })
    .filter((d) => d.toLowerCase() !== PORTAL_HOST)
    .map(
      (d): Mutation =>
        (r) =>
          withField(r, "auth[domain]", () => d),
    ),
  fc
    .string({ maxLength: 40 })
    .filter((m) => m !== MEMBER_ID)
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
  fc.constantFrom("&broken", "&x=%zz", "&auth%5Bx%5D=%E0%A4%A", "&%zz=1", "&=").map(
    (tail): Mutation =>
      (r) => ({ ...r, bodyTail: tail }),
  ),
  fc.uint8Array({ minLength: 0, maxLength: 300 }).map(
    (bytes): Mutation =>
      (r) => ({ ...r, binaryBody: bytes }),
  ),
);

const mutatedReq: fc.Arbitrary<Req> = fc
  .tuple(validReq, fc.array(mutation, { minLength: 1, maxLength: 2 }))
  .map(([r, ms]) => ms.reduce<Req>((acc, m) => m(acc), { ...r, valid: false }));

/** Junk from the ground up: any method, content type, query and body. */
const randomReq: fc.Arbitrary<Req> = fc.record({
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

const request = fc.oneof(
  { arbitrary: validReq, weight: 3 },
  { arbitrary: mutatedReq, weight: 6 },
  { arbitrary: randomReq, weight: 1 },
);

test("fuzz: no 5xx, one row per valid request, none per invalid one, no secret echoed", async (t) => {
  t.timeout(180_000);
  const captured = captureLogger("info");
  const app = makeApp(db.pool, captured.log, receiverConfigFor({ previous: true }));
  let rows = await inboxCount(db.pool);
  let requests = 0;
  let valid = 0;
  const statuses = new Map<number, number>();
  const started = Date.now();
  await fc.assert(
    fc.asyncProperty(request, async (r) => {
      const { url, init } = serialise(r);
      const res = await app.request(url, init);
      const text = await res.text();
      requests++;
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      const now = await inboxCount(db.pool);
      const added = now - rows;
      rows = now;
      if (res.status >= 500) throw new Error(`5xx: ${res.status} ${text}`);
      for (const secret of [...Object.values(TOKENS), MEMBER_ID]) {
        if (text.includes(secret)) throw new Error("a reply echoed a secret");
      }
      if (r.valid) {
        valid++;
        if (res.status !== 200 || added !== 1) throw new Error(`valid request: ${res.status}, ${added} rows`);
      } else if (res.status < 400 || added !== 0) {
        throw new Error(`invalid request: ${res.status}, ${added} rows`);
      }
    }),
    { numRuns: RUNS },
  );
  t.log(
    `${requests} requests (${valid} valid) in ${((Date.now() - started) / 1000).toFixed(1)} s; statuses ${JSON.stringify(
      Object.fromEntries(statuses),
    )}`,
  );
  t.true(requests >= RUNS);
  t.true(valid > RUNS / 10, "the mix must contain a fair share of valid requests");
  t.true((statuses.get(403) ?? 0) > 0 && (statuses.get(400) ?? 0) > 0 && (statuses.get(415) ?? 0) > 0);
  const logs = captured.text();
  for (const secret of [...Object.values(TOKENS), MEMBER_ID, PORTAL_HOST]) {
    t.false(logs.toLowerCase().includes(secret.toLowerCase()), "logs must not carry request values");
  }
});
