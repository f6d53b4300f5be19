import test from "ava";
import {
  checkToken,
  DOCUMENT_TYPES,
  type PortalIdentity,
  parseRobotEvent,
  rawQuery,
} from "../../../src/inbound/contract.js";
import { isFormContentType, peerAddress } from "../../../src/inbound/routes.js";
import { secretMatcher } from "../../../src/inbound/token.js";

const portal: PortalIdentity = { host: "portal.bitrix24.test", memberId: secretMatcher(["m-1"]) };
const tokens = secretMatcher(["tok"]);
const body = (s: string) => new TextEncoder().encode(s);
const contactBody = (id = "42", extra = "") =>
  body(
    `document_id%5B0%5D=crm&document_id%5B1%5D=CCrmDocumentContact&document_id%5B2%5D=CONTACT_${id}` +
      `&auth%5Bdomain%5D=portal.bitrix24.test&auth%5Bmember_id%5D=m-1${extra}`,
  );

test("rawQuery takes the text between ? and #", (t) => {
  t.is(rawQuery("http://h/p?token=a&ID=1#frag"), "token=a&ID=1");
  t.is(rawQuery("http://h/p"), "");
  t.is(rawQuery("http://h/p?"), "");
});

test("checkToken wants exactly one matching token", (t) => {
  t.is(checkToken("token=tok&ID=1", tokens), undefined);
  t.is(checkToken("ID=1&token=tok", tokens), undefined);
  t.like(checkToken("ID=1", tokens), { status: 403, reason: "token_missing" });
  t.like(checkToken("token=&ID=1", tokens), { status: 403, reason: "token_missing" });
  t.like(checkToken("token=nope&ID=1", tokens), { status: 403, reason: "token_invalid" });
  t.like(checkToken("token=tok&token=tok", tokens), { status: 403, reason: "token_invalid" });
  t.like(checkToken("token=t%zzok", tokens), { status: 403, reason: "token_missing" });
  t.is(checkToken("token=t%6Fk", tokens), undefined, "percent-encoding is decoded before the compare");
});

test("a Contact robot body yields entity type 3 and the Contact ID", (t) => {
  t.deepEqual(parseRobotEvent("contact", "token=tok&ID=42", contactBody(), portal), {
    ok: true,
    entityTypeId: 3,
    entityId: "42",
  });
});

test("an alert robot body yields the smart process type and the item ID", (t) => {
  const b = body(
    `document_id[0]=crm&document_id[1]=${encodeURIComponent(DOCUMENT_TYPES.alert)}&document_id[2]=DYNAMIC_1038_7` +
      "&auth[domain]=PORTAL.bitrix24.test&auth[member_id]=m-1&auth[client_endpoint]=x&auth[server_endpoint]=y",
  );
  t.deepEqual(parseRobotEvent("alert", "token=tok&ID=7", b, portal), {
    ok: true,
    entityTypeId: 1038,
    entityId: "7",
  });
});

test("refusals carry the right status and reason", (t) => {
  const cases: Array<[string, string, Uint8Array, number, string]> = [
    ["ID differs", "token=tok&ID=43", contactBody(), 400, "id_mismatch"],
    ["no ID", "token=tok", contactBody(), 400, "id_missing"],
    ["extra param", "token=tok&ID=42&x=1", contactBody(), 400, "query_unexpected"],
    [
      "dup field",
      "token=tok&ID=42",
      contactBody("42", "&auth%5Bmember_id%5D=m-1"),
      400,
      "body_duplicate_field",
    ],
    ["unknown field", "token=tok&ID=42", contactBody("42", "&event=X"), 400, "body_unexpected_field"],
    ["bad escape", "token=tok&ID=42", contactBody("42", "&auth%5Bx%5D=%zz"), 400, "body_encoding"],
    ["bad utf-8", "token=tok&ID=42", new Uint8Array([0x61, 0x3d, 0xff]), 400, "body_encoding"],
    ["empty", "token=tok&ID=42", body(""), 400, "body_missing_field"],
    [
      "wrong domain",
      "token=tok&ID=42",
      body(new TextDecoder().decode(contactBody()).replace("portal.", "other.")),
      403,
      "portal_domain",
    ],
    [
      "wrong member",
      "token=tok&ID=42",
      body(new TextDecoder().decode(contactBody()).replace("=m-1", "=m-2")),
      403,
      "portal_member",
    ],
  ];
  for (const [name, query, b, status, reason] of cases) {
    t.like(parseRobotEvent("contact", query, b, portal), { ok: false, status, reason }, name);
  }
});

test("only the form media type, with at most charset=utf-8, is accepted", (t) => {
  t.true(isFormContentType("application/x-www-form-urlencoded"));
  t.true(isFormContentType("application/x-www-form-urlencoded;charset=UTF-8"));
  t.true(isFormContentType('application/x-www-form-urlencoded; charset="utf-8"'));
  t.false(isFormContentType(undefined));
  t.false(isFormContentType("application/x-www-form-urlencoded; charset=koi8-r"));
  t.false(isFormContentType("application/x-www-form-urlencoded; boundary=x"));
  t.false(isFormContentType("multipart/form-data"));
});

test("peerAddress unwraps IPv4-mapped addresses and refuses non-addresses", (t) => {
  const b = (a: unknown) => ({ incoming: { socket: { remoteAddress: a } } }) as never;
  t.is(peerAddress(b("::ffff:10.0.0.1")), "10.0.0.1");
  t.is(peerAddress(b("::1")), "::1");
  t.is(peerAddress(b("not-an-ip")), null);
  t.is(peerAddress(b(undefined)), null);
  t.is(peerAddress(undefined), null);
});
