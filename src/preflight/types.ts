// One preflight check's outcome (docs/deployment.md, "Preflight"). A check never carries a secret, a
// webhook URL or personal data: details name variables, files, fields and counts only.

/**
 * ok: as it must be. warn: worth a look, does not stop a deployment. fail: wrong, fix it before
 * enabling. unknown: could not be checked (something unreachable, not installed, or a check it
 * depends on did not pass).
 */
export type CheckStatus = "ok" | "warn" | "fail" | "unknown";

export type CheckGroup = "config" | "database" | "portal" | "probe" | "proxy";

export interface CheckResult {
  /** Stable name, `group.what` (e.g. `portal.contact_fields`). */
  id: string;
  group: CheckGroup;
  status: CheckStatus;
  /** What was found. */
  detail: string;
  /** What to do about it; present unless the status is ok. */
  hint?: string;
}

export function check(id: string, status: CheckStatus, detail: string, hint?: string): CheckResult {
  const group = id.slice(0, id.indexOf(".")) as CheckGroup;
  return { id, group, status, detail, ...(hint !== undefined ? { hint } : {}) };
}

/** A check that did not run because `why` (a check it depends on, or what is missing). */
export function notChecked(id: string, why: string, hint?: string): CheckResult {
  return check(id, "unknown", `not checked: ${why}`, hint);
}

/**
 * Exit code of `npm run preflight`: 2 when anything could not be checked (a pass cannot be
 * claimed; the lines say why), else 1 when anything failed, else 0. Warnings do not count.
 */
export function exitCode(results: readonly CheckResult[]): 0 | 1 | 2 {
  if (results.some((r) => r.status === "unknown")) return 2;
  if (results.some((r) => r.status === "fail")) return 1;
  return 0;
}
