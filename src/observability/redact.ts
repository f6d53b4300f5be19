// Secrets and PII must not reach logs, traces, metric labels or error messages (§2.10, §9, §15).
// This helper is for the few places where a person-readable hint is still useful.

/**
 * Masks a PII value to its first two and last two readable characters (§15): "+79991234567" becomes
 * "+7********67". Values of six characters or fewer are masked completely.
 */
export function maskPii(value: string): string {
  const chars = [...value];
  if (chars.length <= 6) return "*".repeat(chars.length);
  return `${chars.slice(0, 2).join("")}${"*".repeat(chars.length - 4)}${chars.slice(-2).join("")}`;
}
