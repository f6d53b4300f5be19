// Secrets and PII must not reach logs, traces, metric labels or error messages (§2.10, §9, §15).
// The CRM code never puts the webhook URL, a body or a reply into an error; these helpers are for
// the few places where a person-readable hint is still useful, and for tests that grep for leaks.
import type { Classification, FailureCode, FailureKind } from "./classify.js";

/**
 * Masks a PII value to its first two and last two readable characters (§15): "+79991234567" becomes
 * "+7********67". Values of six characters or fewer are masked completely.
 */
export function maskPii(value: string): string {
  const chars = [...value];
  if (chars.length <= 6) return "*".repeat(chars.length);
  return `${chars.slice(0, 2).join("")}${"*".repeat(chars.length - 4)}${chars.slice(-2).join("")}`;
}

/** Replaces every occurrence of each secret (and its URL-encoded form) in `text` with [redacted]. */
export function scrubSecrets(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const s of secrets) {
    if (s.length < 4) continue;
    for (const form of new Set([s, encodeURIComponent(s)])) out = out.split(form).join("[redacted]");
  }
  return out;
}

/**
 * An error a CRM call raises when the caller asked for an exception instead of an outcome. It
 * carries only the classification: kind, code, HTTP status and the Bitrix error code.
 */
export class CrmError extends Error {
  override name = "CrmError";
  readonly kind: FailureKind;
  readonly code: FailureCode;
  readonly httpStatus: number | undefined;
  readonly bitrixError: string | undefined;
  readonly classification: Classification;

  constructor(c: Classification) {
    const parts = [`kind=${c.kind}`, `code=${c.code}`];
    if (c.httpStatus !== undefined) parts.push(`http=${c.httpStatus}`);
    if (c.bitrixError !== undefined) parts.push(`bitrix=${c.bitrixError}`);
    super(`CRM call failed: ${parts.join(" ")}`);
    this.kind = c.kind;
    this.code = c.code;
    this.httpStatus = c.httpStatus;
    this.bitrixError = c.bitrixError;
    this.classification = c;
  }
}

/** Raised for a CRM configuration problem at startup. The message names variables, never values. */
export class CrmConfigError extends Error {
  override name = "CrmConfigError";
}
