// Applying a Contact read by ID to the App (§5.5 steps 5–7), shared by the Contact webhooks and the
// incremental reconciliation. The CRM source timestamp decides: a late or out-of-order event changes
// nothing.
import type pg from "pg";
import { raiseAlert } from "../alerts/raise.js";
import { type ApplySource, applyCrmMaster, crmMasterValues, markSnapshotStale } from "../app-data.js";
import type { ServiceContext } from "../context.js";
import type { ContactRecord } from "../crm/contact-fields.js";
import { heldValuesHash } from "../hash.js";

/** What happened to one Contact read by ID. Low-cardinality: used as outcome codes and labels. */
export type ContactOutcome =
  | "applied"
  /** The link was made by phone alone and is held (sql/mapping/held.sql): nothing applied. */
  | "held"
  | "stale"
  | "unknown_mapping"
  | "user_id_mismatch"
  | "registration_inactive"
  | "contact_not_found"
  | "unknown_citizenship";

export interface MappedContact {
  contactId: number;
  userId: string;
  mappingId: string;
  /** A link made by phone alone whose CRM-master fields are held back (sql/mapping/held.sql). */
  held: boolean;
}

/** Active mappings of these Contact IDs. */
export async function activeMappings(
  db: pg.Pool | pg.PoolClient,
  contactIds: number[],
): Promise<Map<number, MappedContact>> {
  const { rows } = await db.query<{ id: string; entity_id: string; external_id: string; held: boolean }>(
    `select id, entity_id, external_id, held_at is not null and hold_released_at is null as held
       from bitrix_sync.entity_external_mapping where status = 'active' and external_id = any($1)`,
    [contactIds.map(String)],
  );
  return new Map(
    rows.map((r) => [
      Number(r.external_id),
      { contactId: Number(r.external_id), userId: r.entity_id, mappingId: r.id, held: r.held },
    ]),
  );
}

/**
 * Applies one Contact (or its absence) to the App in `c`: the checks of §5.5 steps 5–7. Returns the
 * outcome and whether the App changed with a CRM timestamp newer than the snapshot had.
 */
export async function applyContact(
  c: pg.PoolClient,
  deps: Pick<ServiceContext, "dictionary" | "log">,
  m: MappedContact,
  contact: ContactRecord | undefined,
  source: Exclude<ApplySource, "app_create">,
  webhookReceivedAt: Date | null = null,
): Promise<ContactOutcome> {
  if (!contact) {
    // Mapping broken, App data kept but marked stale, alert (§5.5).
    await c.query("select bitrix_sync.close_mapping($1, 'contact_not_found', null, true)", [m.mappingId]);
    await markSnapshotStale(c, String(m.contactId), m.userId, "contact_not_found");
    await raiseAlert(c, { type: "contact_not_found", userId: m.userId, currentContactId: m.contactId });
    return "contact_not_found";
  }
  if (contact.userId !== m.userId) {
    await raiseAlert(c, { type: "user_id_mismatch", userId: m.userId, currentContactId: m.contactId });
    return "user_id_mismatch";
  }
  if (contact.registered === false) return "registration_inactive";
  if (m.held) {
    // Only a robot webhook that reads CRM-master values other than those the first read after the
    // link saw releases the hold: a change made in the CRM, since the service never writes these
    // fields into a Contact it linked. Reconciliation applies nothing meanwhile (sql/mapping/held.sql).
    const { rows } = await c.query<{ hold: string }>(
      "select bitrix_sync.held_link_read($1, $2, $3, $4) as hold",
      [
        m.mappingId,
        contact.updatedAt ? new Date(contact.updatedAt) : null,
        source === "webhook",
        heldValuesHash({ ...crmMasterValues(contact), citizenshipEnumId: contact.citizenshipEnumId }),
      ],
    );
    const hold = rows[0]?.hold;
    if (hold === "held") return "held";
    if (hold === "released") {
      deps.log.info(
        { event: "link.hold_released", mappingId: m.mappingId, by: "robot_webhook" },
        "a robot webhook read CRM-master values changed in the CRM after a link made by phone alone: its fields apply now",
      );
    }
  }
  const r = await applyCrmMaster(c, m.userId, contact, source, deps.dictionary, { webhookReceivedAt });
  if (r.applied) return "applied";
  if (r.stale) return "stale";
  await raiseAlert(c, {
    type: "unknown_citizenship",
    userId: m.userId,
    currentContactId: m.contactId,
    details: { enum_id: r.enumId },
  });
  return "unknown_citizenship";
}
