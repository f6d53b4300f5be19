// Hashes over personal data: the phone, name and e-mail bitrix-sync wrote into or read from a
// Contact (contact_snapshots, command results) and the App-master content of an intent
// (workflow_instances.content_hash, which covers the phone). They make values comparable without
// storing them. A plain SHA-256 of a +7 phone is not that: there are only 10^10 such numbers, and
// a laptop tries them all in minutes. So these are HMAC-SHA256 under a secret key,
// BITRIX_SYNC_HASH_KEY (docs/security.md), and read as "v2:" plus 43 base64url characters (46, so
// the varchar(64) columns hold them).
//
// Rows written before the key existed hold plain SHA-256 hex (64 characters, no prefix): the
// legacy form. They stay valid. `matchesPiiHash` compares a stored hash of either form with a value,
// and the one place that holds both a legacy hash and the value it covers upgrades the row (the
// phone entry bitrix-sync wrote, src/workflows/command-io.ts). Nothing rewrites Contacts in the CRM
// for the switch: a user's next phone change overwrites the same entry, as before.
import { createHash, createHmac } from "node:crypto";

const PREFIX = "v2:";
const LEGACY = /^[0-9a-f]{64}$/;

let key: Buffer | null = null;

/**
 * Sets the process's hash key (src/runtime.ts, from BITRIX_SYNC_HASH_KEY). Until it is set, hashing
 * personal data throws: a silent fallback to an unkeyed hash is what this replaces.
 */
export function configureHashKey(secret: string | undefined): void {
  key = secret === undefined || secret === "" ? null : Buffer.from(secret, "utf8");
}

function hmac(text: string): string {
  if (key === null) {
    throw new Error(
      "BITRIX_SYNC_HASH_KEY is not configured: personal data cannot be hashed (configure the secret; it is required when BITRIX_SYNC_ENABLED=true)",
    );
  }
  return PREFIX + createHmac("sha256", key).update(text, "utf8").digest("base64url");
}

/** The keyed hash of a personal value (phone, name, e-mail). Null stays null. */
export function piiHash(value: string | null | undefined): string | null {
  if (value === null || value === undefined) return null;
  return hmac(value);
}

/** The keyed hash of a JSON value with sorted keys (stable across key order), e.g. intent content. */
export function contentHash(value: unknown): string {
  return hmac(stableJson(value));
}

/** True for a hash in the form written before the key existed (plain SHA-256 hex). */
export function isLegacyHash(stored: string | null | undefined): boolean {
  return typeof stored === "string" && LEGACY.test(stored);
}

/** Plain SHA-256 hex: the legacy form, kept to recognise old rows, never written anew. */
export function legacySha256(value: string): string {
  return createHash("sha256").update(value, "utf8").digest("hex");
}

/** Whether `stored` (either form) is the hash of `value`; null matches null only. */
export function matchesPiiHash(stored: string | null | undefined, value: string | null | undefined): boolean {
  if (stored === null || stored === undefined || value === null || value === undefined)
    return (stored ?? null) === null && (value ?? null) === null;
  return isLegacyHash(stored) ? legacySha256(value) === stored : hmac(value) === stored;
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
