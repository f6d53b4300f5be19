// Where the sandbox portal's record IDs start. The portal lives in memory and forgets its Contacts on
// every restart, while the database keeps mappings, snapshots and inbox rows that name them; starting
// above every ID the database refers to keeps a new sandbox Contact from taking an old one's ID (the
// new Contact would then look held by an earlier user, and its mapping could not open).
import type pg from "pg";

export interface FirstIds {
  contact: number;
  item: number;
}

export async function sandboxFirstIds(pool: pg.Pool): Promise<FirstIds> {
  const { rows } = await pool.query<{ contact: string | null; item: string | null }>(
    `select greatest((select max(external_id::bigint) from bitrix_sync.entity_external_mapping),
                     (select max(contact_id::bigint) from bitrix_sync.contact_snapshots),
                     (select max(entity_id::bigint) from bitrix_sync.webhook_inbox where receiver = 'contact')
            )::text as contact,
            greatest((select max(item_id) from bitrix_sync.business_alerts),
                     (select max(entity_id::bigint) from bitrix_sync.webhook_inbox where receiver = 'alert')
            )::text as item`,
  );
  const r = rows[0];
  return { contact: Number(r?.contact ?? 0) + 1, item: Number(r?.item ?? 0) + 1 };
}
