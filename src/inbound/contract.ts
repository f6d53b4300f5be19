// The robot webhook contract of §10.1, as pure functions: the query token, then the form body with
// PHP-bracket keys, then the portal identity. No I/O and no logging here; each refusal carries a
// safe reason code (src/inbound/refusals.ts lists them) and never a value from the request. The
// form's fields are validated with ROBOT_FORM, the zod schemas docs/openapi.json is generated from.
import { z } from "zod";
import type { ReceiverName } from "../config/receivers.js";
import type { ReasonOf } from "./refusals.js";
import type { SecretMatcher } from "./token.js";

/** Safe, low-cardinality reason codes: the only thing a refusal may log. */
export type RejectReason = ReasonOf<400> | ReasonOf<403>;

export type Rejected = { ok: false } & (
  | { status: 400; reason: ReasonOf<400> }
  | { status: 403; reason: ReasonOf<403> }
);

export interface RobotEvent {
  ok: true;
  /** 3 for a Contact; the smart process's entityTypeId for an alert (checked against settings in SQL). */
  entityTypeId: number;
  /** The Contact or item ID, canonical decimal digits. */
  entityId: string;
}

/** The portal a robot must come from. */
export interface PortalIdentity {
  /** Lower-case host, optionally with :port. */
  host: string;
  memberId: SecretMatcher;
}

/** Document type of each receiver's robot (document_id[1]). */
export const DOCUMENT_TYPES: Record<ReceiverName, string> = {
  contact: "CCrmDocumentContact",
  alert: "Bitrix\\Crm\\Integration\\BizProc\\Document\\Dynamic",
};

const CONTACT_DOCUMENT = /^CONTACT_([1-9][0-9]{0,17})$/;
// The entity type fits a PostgreSQL integer; the item ID matches webhook_inbox.entity_id.
const DYNAMIC_DOCUMENT = /^DYNAMIC_([1-9][0-9]{0,8})_([1-9][0-9]{0,17})$/;
/** An ID as the query and the document carry it: canonical decimal digits, no leading zero. */
const ENTITY_ID = /^[1-9][0-9]{0,17}$/;
const DOCUMENT_KEY = /^document_id\[([0-2])\]$/;
// auth[...] members other than domain and member_id are allowed and ignored (the platform adds
// client_endpoint and server_endpoint, and might add more); they are never used or stored.
const AUTH_KEY = /^auth\[([a-z][a-z_]{0,31})\]$/;
/** The robot sends 7 fields; a few spare for auth members the platform may add. */
const MAX_BODY_FIELDS = 12;
const MAX_QUERY_PARAMS = 4;

interface Pairs {
  pairs: Array<[string, string]>;
  /** A pair had no `=` or an invalid percent escape. */
  malformed: boolean;
  /** More pairs than allowed; `pairs` is cut there. */
  tooMany: boolean;
}

function decodeComponent(s: string): string | undefined {
  try {
    return decodeURIComponent(s.includes("+") ? s.replaceAll("+", " ") : s);
  } catch {
    return undefined;
  }
}

/** Splits `a=1&b=2` (application/x-www-form-urlencoded); empty segments are skipped. */
function splitPairs(raw: string, max: number): Pairs {
  const out: Pairs = { pairs: [], malformed: false, tooMany: false };
  if (raw === "") return out;
  for (const segment of raw.split("&")) {
    if (segment === "") continue;
    if (out.pairs.length >= max) {
      out.tooMany = true;
      break;
    }
    const eq = segment.indexOf("=");
    if (eq < 0) {
      out.malformed = true;
      continue;
    }
    const key = decodeComponent(segment.slice(0, eq));
    const value = decodeComponent(segment.slice(eq + 1));
    if (key === undefined || value === undefined) {
      out.malformed = true;
      continue;
    }
    out.pairs.push([key, value]);
  }
  return out;
}

function reject(status: 400, reason: ReasonOf<400>): Rejected;
function reject(status: 403, reason: ReasonOf<403>): Rejected;
function reject(status: 400 | 403, reason: RejectReason): Rejected {
  return { ok: false, status, reason } as Rejected;
}

/** The robot's query string: the receiver's token and the document's ID, nothing else. */
export const ROBOT_QUERY = z
  .object({
    token: z.string().min(1).meta({
      description:
        "The receiver's token (BITRIX_SYNC_CONTACT_RECEIVER_TOKEN or BITRIX_SYNC_ALERT_RECEIVER_TOKEN, or its _PREVIOUS during a rotation), compared in constant time. Exactly once.",
    }),
    ID: z
      .string()
      .regex(ENTITY_ID)
      .meta({ description: "The document's ID; must equal the ID in document_id[2]." }),
  })
  .strict();

/**
 * The robot's form body (application/x-www-form-urlencoded, PHP-bracket keys, each at most once),
 * one schema per receiver. Besides these, only other `auth[<lower-case name>]` members are allowed
 * (the platform may add some); they are ignored. At most 12 fields.
 */
function robotForm(receiver: ReceiverName, document: RegExp, example: string) {
  return z
    .object({
      "document_id[0]": z.literal("crm"),
      "document_id[1]": z.literal(DOCUMENT_TYPES[receiver]),
      "document_id[2]": z
        .string()
        .regex(document)
        .meta({ examples: [example] }),
      "auth[domain]": z
        .string()
        .meta({ description: "The portal's host; must equal BITRIX_SYNC_PORTAL_HOST." }),
      "auth[member_id]": z
        .string()
        .meta({ description: "The portal's member ID; must equal BITRIX_SYNC_PORTAL_MEMBER_ID." }),
    })
    .catchall(z.string().meta({ description: "Other auth[<lower-case name>] members: allowed, ignored." }));
}

export const ROBOT_FORM = {
  contact: robotForm("contact", CONTACT_DOCUMENT, "CONTACT_42"),
  alert: robotForm("alert", DYNAMIC_DOCUMENT, "DYNAMIC_1040_5"),
} as const;

/** The raw query string of a URL, without `?` and fragment ("" when absent). */
export function rawQuery(url: string): string {
  const q = url.indexOf("?");
  if (q < 0) return "";
  const h = url.indexOf("#", q);
  return h < 0 ? url.slice(q + 1) : url.slice(q + 1, h);
}

/**
 * Step 1 of the contract: exactly one `token` query parameter, equal (constant time) to an accepted
 * token. Anything else is 403, including a token whose percent-encoding is broken.
 */
export function checkToken(query: string, tokens: SecretMatcher): Rejected | undefined {
  // The query is already bounded in bytes; scan all of it so a duplicate token is always seen.
  const { pairs } = splitPairs(query, query.length);
  let token: string | undefined;
  let count = 0;
  for (const [k, v] of pairs) {
    if (k === "token") {
      token = v;
      count++;
    }
  }
  if (count === 0 || token === undefined || token === "") return reject(403, "token_missing");
  if (count > 1 || !tokens(token)) return reject(403, "token_invalid");
  return undefined;
}

/**
 * Step 2 and 3 of the contract, after the token: the query carries only `token` and `ID`, the body
 * has exactly the robot's fields, the document is the receiver's type, the query ID equals the
 * document's ID (400 otherwise), and the portal domain and member ID are the configured ones (403).
 */
export function parseRobotEvent(
  receiver: ReceiverName,
  query: string,
  body: Uint8Array,
  portal: PortalIdentity,
): RobotEvent | Rejected {
  // Query: token (already checked) and ID, once each, nothing else.
  const q = splitPairs(query, MAX_QUERY_PARAMS);
  if (q.malformed || q.tooMany) return reject(400, "query_encoding");
  let queryId: string | undefined;
  for (const [k, v] of q.pairs) {
    if (k === "ID") {
      if (queryId !== undefined) return reject(400, "query_unexpected");
      queryId = v;
    } else if (k !== "token") {
      return reject(400, "query_unexpected");
    }
  }
  if (queryId === undefined) return reject(400, "id_missing");

  // Body: UTF-8 form with PHP-bracket keys, each at most once.
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(body);
  } catch {
    return reject(400, "body_encoding");
  }
  const b = splitPairs(text, MAX_BODY_FIELDS);
  if (b.malformed) return reject(400, "body_encoding");
  if (b.tooMany) return reject(400, "body_too_many_fields");
  const doc: Array<string | undefined> = [undefined, undefined, undefined];
  const auth = new Map<string, string>();
  for (const [k, v] of b.pairs) {
    const d = DOCUMENT_KEY.exec(k);
    if (d) {
      const i = Number(d[1]);
      if (doc[i] !== undefined) return reject(400, "body_duplicate_field");
      doc[i] = v;
      continue;
    }
    const a = AUTH_KEY.exec(k);
    if (a) {
      const name = a[1] as string;
      if (auth.has(name)) return reject(400, "body_duplicate_field");
      auth.set(name, v);
      continue;
    }
    return reject(400, "body_unexpected_field");
  }
  const [doc0, doc1, doc2] = doc;
  const domain = auth.get("domain");
  const memberId = auth.get("member_id");
  if (doc0 === undefined || doc1 === undefined || doc2 === undefined)
    return reject(400, "body_missing_field");
  if (domain === undefined || memberId === undefined) return reject(400, "body_missing_field");

  const form = ROBOT_FORM[receiver].safeParse({
    "document_id[0]": doc0,
    "document_id[1]": doc1,
    "document_id[2]": doc2,
    "auth[domain]": domain,
    "auth[member_id]": memberId,
  });
  if (!form.success) {
    const bad = new Set(form.error.issues.map((i) => i.path[0]));
    return reject(
      400,
      bad.has("document_id[0]") || bad.has("document_id[1]") ? "document_type" : "document_id",
    );
  }
  let entityTypeId: number;
  let entityId: string;
  if (receiver === "contact") {
    const m = CONTACT_DOCUMENT.exec(doc2) as RegExpExecArray;
    entityTypeId = 3;
    entityId = m[1] as string;
  } else {
    const m = DYNAMIC_DOCUMENT.exec(doc2) as RegExpExecArray;
    entityTypeId = Number(m[1]);
    entityId = m[2] as string;
  }
  if (queryId !== entityId) return reject(400, "id_mismatch");

  // Portal identity: a source check (§10.1), so a mismatch is an authentication failure.
  if (domain.toLowerCase() !== portal.host) return reject(403, "portal_domain");
  if (!portal.memberId(memberId)) return reject(403, "portal_member");
  return { ok: true, entityTypeId, entityId };
}
