// What the convergence audit decides for one link, as pure functions tested without a database or a
// portal (test/unit/audit/judge.test.ts): is the Contact there, does it carry the App's phone, the
// user id and the registration flag the link implies, and do the App's CRM-master fields equal the
// Contact's? Findings name fields and flags, never values: they are stored and shown to an admin.
import { crmMasterValues } from "../app-data.js";
import type { ContactRecord } from "../crm/contact-fields.js";
import { isValidRuPhone } from "../crm/contact-fields.js";
import type { DriftKind } from "../settings-schema.js";

/** One kind of drift on a link, with safe details (field names, counts, flags). */
export interface LinkFinding {
  kind: Extract<
    DriftKind,
    "contact_missing" | "phone_missing" | "user_id_wrong" | "registered_wrong" | "crm_master_behind"
  >;
  details: Record<string, string | number | boolean | string[]>;
}

/** The App's side of a link: the user's App-master phone and the CRM-master copies it shows. */
export interface AppSide {
  userId: string;
  phone: string | null;
  fullName: string | null;
  email: string | null;
  citizenship: string | null;
}

/** What the audit knows besides the two sides. */
export interface JudgeContext {
  /** The snapshot's CRM timestamp of the Contact (what the App last applied), if any. */
  snapshotCrmUpdatedAt: Date | null;
  /**
   * The display value of the Contact's citizenship element: a string, null when the Contact has
   * none, or undefined when the dictionary does not know the element (not judged then).
   */
  citizenship: string | null | undefined;
  /** Now, and how recently a Contact may have changed before its CRM-master fields are judged. */
  nowMs: number;
  graceMs: number;
}

function norm(v: string | null | undefined): string | null {
  const t = v?.trim();
  return t ? t : null;
}

/**
 * The findings for one active link of an active user. `contact` undefined: the read by ID did not
 * return it (deleted, or merged away).
 */
export function judgeLink(
  app: AppSide,
  contact: ContactRecord | undefined,
  ctx: JudgeContext,
): LinkFinding[] {
  if (!contact) return [{ kind: "contact_missing", details: {} }];
  const out: LinkFinding[] = [];
  // App-master (§3.1): the App's phone must be among the Contact's numbers. An invalid App phone is
  // a business alert of its own (invalid_phone), not drift.
  if (isValidRuPhone(app.phone) && !contact.phones.some((p) => p.value.trim() === app.phone)) {
    out.push({ kind: "phone_missing", details: { contact_phones: contact.phones.length } });
  }
  if (contact.userId !== app.userId) {
    out.push({ kind: "user_id_wrong", details: { field: contact.userId === null ? "empty" : "other" } });
  }
  if (contact.registered !== true) {
    out.push({
      kind: "registered_wrong",
      details: { flag: contact.registered === false ? "inactive" : "unreadable" },
    });
  }
  // CRM-master (§3.1): judged only on a Contact that is this user's (the App rightly ignores
  // another user's Contact) and has not changed within the grace period (a webhook or the next
  // reconciliation may still be bringing it).
  const changedAt = contact.updatedAt ? Date.parse(contact.updatedAt) : Number.NaN;
  const settled = Number.isFinite(changedAt) && ctx.nowMs - changedAt >= ctx.graceMs;
  if (contact.userId === app.userId && settled) {
    const crm = crmMasterValues(contact);
    const fields: string[] = [];
    if (norm(app.fullName) !== crm.name) fields.push("full_name");
    if (norm(app.email) !== norm(crm.email)) fields.push("email");
    if (ctx.citizenship !== undefined && norm(app.citizenship) !== norm(ctx.citizenship))
      fields.push("citizenship");
    if (fields.length > 0) {
      const appliedAt = ctx.snapshotCrmUpdatedAt?.getTime() ?? null;
      out.push({
        kind: "crm_master_behind",
        details: { fields, contact_newer: appliedAt === null || changedAt > appliedAt },
      });
    }
  }
  return out;
}
