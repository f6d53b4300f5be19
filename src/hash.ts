// Hashes over personal data: the phone, name and e-mail bitrix-sync wrote into or read from a
// Contact (contact_snapshots, command results) and the App-master content of an intent
// (workflow_instances.content_hash, which covers the phone). They make values comparable without
// storing them. A plain SHA-256 of a +7 phone is not that: there are only 10^10 such numbers, and
// a laptop tries them all in minutes. So these are HMAC-SHA256 under a secret key,
// BITRIX_SYNC_HASH_KEY (docs/security.md), over the field's name, a NUL and the value
// ("phone\0+79991234567"): two fields with equal values (a name that is also an e-mail, a phone
// written into the name) never share a hash. Written as "v3:" plus 43 base64url characters (46, so
// the varchar(64) columns hold them).
//
// Two older forms are read as legacy, never written:
//   - "v2:" + base64url: HMAC under the same key over the value alone (no field label);
//   - 64 hex characters: plain SHA-256, written before the key existed.
// `matchesPiiHash` compares a stored hash of any form with a value. Where a legacy hash and the value
// it covers are at hand it is rewritten (the phone entry bitrix-sync wrote,
// src/workflows/command-payloads.ts; the snapshots' phones against the App's, src/maintenance/rekey.ts).
// Migration 000029 cleared the unkeyed ones whose value is never at hand (bitrix_sync.
// clear_unkeyed_hashes()): a snapshot's name or e-mail hash then reads "cleared", which matches
// nothing and tells reconciliation that the value before is unknown (CLEARED_HASH).
import { createHash, createHmac } from "node:crypto";

const PREFIX = "v3:";
const V2 = /^v2:[A-Za-z0-9_-]{43}$/;
const HEX = /^[0-9a-f]{64}$/;

/** What a keyed hash is of. The label is part of the HMAC input; it is never stored. */
export type HashField = "phone" | "name" | "email" | "content" | "held";

/** A snapshot hash cleared by migration 000029: the value it stood for is unknown. */
export const CLEARED_HASH = "cleared";

let key: Buffer | null = null;

/**
 * Sets the process's hash key (src/runtime.ts, from BITRIX_SYNC_HASH_KEY). Until it is set, hashing
 * personal data throws: a silent fallback to an unkeyed hash is what this replaces.
 */
export function configureHashKey(secret: string | undefined): void {
  key = secret === undefined || secret === "" ? null : Buffer.from(secret, "utf8");
}

function hmac(text: string): Buffer {
  if (key === null) {
    throw new Error(
      "BITRIX_SYNC_HASH_KEY is not configured: personal data cannot be hashed (configure the secret; it is required when BITRIX_SYNC_ENABLED=true)",
    );
  }
  return createHmac("sha256", key).update(text, "utf8").digest();
}

function labelled(field: HashField, text: string): string {
  return PREFIX + hmac(`${field}\0${text}`).toString("base64url");
}

/** The keyed hash of a personal value (phone, name, e-mail), labelled with its field. Null stays null. */
export function piiHash(
  field: Exclude<HashField, "content" | "held">,
  value: string | null | undefined,
): string | null {
  if (value === null || value === undefined) return null;
  return labelled(field, value);
}

/** The keyed hash of a JSON value with sorted keys (stable across key order): an intent's content. */
export function contentHash(value: unknown): string {
  return labelled("content", stableJson(value));
}

/**
 * A short id of the hash key (8 base64url characters of an HMAC over a fixed label): says whether two
 * stored hashes were made under the same key, and nothing about the key itself.
 */
export function hashKeyId(): string {
  return hmac("key-id\0").toString("base64url").slice(0, 8);
}

/**
 * The CRM-master values of a Contact as a held link compares them (sql/mapping/held.sql): the key's
 * id, a colon and the keyed hash of the name, the e-mail (by the pick rule) and the citizenship's enum
 * ID. A hold ends when a robot webhook reads other values than the first read after the link saw;
 * bitrix-sync never writes these fields into a Contact it linked, so only a change made in the CRM
 * does that. The key's id lets the database tell a change of values from a change of key.
 */
export function heldValuesHash(v: {
  name: string | null;
  email: string | null;
  citizenshipEnumId: string | null;
}): string {
  return `${hashKeyId()}:${labelled("held", stableJson({ name: v.name, email: v.email, citizenship: v.citizenshipEnumId }))}`;
}

/** True for a hash in a form that is read but no longer written: v2 (unlabelled) or plain SHA-256. */
export function isLegacyHash(stored: string | null | undefined): boolean {
  return typeof stored === "string" && (V2.test(stored) || HEX.test(stored));
}

/** True for a hash in the unkeyed form (plain SHA-256 hex): the one to re-key or clear. */
export function isUnkeyedHash(stored: string | null | undefined): boolean {
  return typeof stored === "string" && HEX.test(stored);
}

/** Plain SHA-256 hex: the unkeyed legacy form, kept to recognise old rows, never written anew. */
export function legacySha256(value: string): string {
  return createHash("sha256").update(value, "utf8").digest("hex");
}

/** The v2 form (HMAC without the field label): kept to recognise old rows, never written anew. */
export function legacyV2Hash(value: string): string {
  return `v2:${hmac(value).toString("base64url")}`;
}

/**
 * Whether `stored` (any form) is the hash of `value` as field `field`; null matches null only, and
 * a cleared hash matches nothing.
 */
export function matchesPiiHash(
  stored: string | null | undefined,
  field: Exclude<HashField, "content" | "held">,
  value: string | null | undefined,
): boolean {
  if (stored === null || stored === undefined || value === null || value === undefined)
    return (stored ?? null) === null && (value ?? null) === null;
  if (HEX.test(stored)) return legacySha256(value) === stored;
  if (V2.test(stored)) return legacyV2Hash(value) === stored;
  return stored === labelled(field, value);
}

/**
 * Plain SHA-256 hex of a JSON value with sorted keys, for identifiers that are stored in the clear
 * next to it anyway (an alert's type, user and Contact IDs: src/alerts/raise.ts). Not for personal
 * values: use piiHash or contentHash.
 */
export function stableHash(value: unknown): string {
  return legacySha256(stableJson(value));
}

function stableJson(v: unknown): string {
  if (v === null || typeof v !== "object") return JSON.stringify(v) ?? "null";
  if (Array.isArray(v)) return `[${v.map(stableJson).join(",")}]`;
  const keys = Object.keys(v as Record<string, unknown>).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${stableJson((v as Record<string, unknown>)[k])}`).join(",")}}`;
}
