// Business alerts (§11) raised by the workflows and the CRM->App path. The fingerprint identifies the
// conflict (type + stable IDs) so a repeat counts on the open alert instead of opening another.
// Details are masked before they reach the database (§15).
import type { Db } from "../app-data.js";
import { stableHash } from "../hash.js";

export const ALERT_TYPES = [
  "contact_bound_to_other_user",
  "contact_not_found",
  "duplicate_contacts",
  "invalid_phone",
  "remote_missing",
  "too_many_candidates",
  "unknown_citizenship",
  "user_id_mismatch",
] as const;
export type AlertType = (typeof ALERT_TYPES)[number];

const SEVERITY: Record<AlertType, "low" | "medium" | "high"> = {
  contact_bound_to_other_user: "high",
  contact_not_found: "medium",
  duplicate_contacts: "low",
  invalid_phone: "medium",
  remote_missing: "medium",
  too_many_candidates: "medium",
  unknown_citizenship: "medium",
  user_id_mismatch: "high",
};

export interface AlertInput {
  type: AlertType;
  userId: string | null;
  currentContactId?: number | string | null;
  selectedContactId?: number | string | null;
  candidates?: ReadonlyArray<number | string>;
  /** Safe details only: codes and counts, never values from the App or the CRM. */
  details?: Record<string, string | number | boolean | null>;
  correlationId?: string | null;
}

/** The conflict's identity: type, user and the Contact IDs involved (sorted). */
export function alertFingerprint(a: AlertInput): string {
  const ids = [...(a.candidates ?? []), a.currentContactId ?? null, a.selectedContactId ?? null]
    .filter((x): x is number | string => x !== null && x !== undefined)
    .map(String)
    .sort();
  return stableHash({ type: a.type, user: a.userId, ids });
}

/** Opens the alert or counts another occurrence on the open one; returns its id. */
export async function raiseAlert(db: Db, a: AlertInput): Promise<number> {
  const { rows } = await db.query<{ id: string }>(
    `select id from bitrix_sync.raise_business_alert($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
    [
      a.type,
      SEVERITY[a.type],
      alertFingerprint(a),
      a.userId,
      a.currentContactId === undefined || a.currentContactId === null ? null : String(a.currentContactId),
      a.selectedContactId === undefined || a.selectedContactId === null ? null : String(a.selectedContactId),
      JSON.stringify((a.candidates ?? []).map(String)),
      JSON.stringify(a.details ?? {}),
      a.correlationId ?? null,
    ],
  );
  return Number(rows[0]?.id);
}
