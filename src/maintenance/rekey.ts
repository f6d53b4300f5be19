// Re-keying the snapshots' phone hashes that are still in a legacy form (src/hash.ts, sql/hashes.sql):
// the unkeyed plain SHA-256 of the time before BITRIX_SYNC_HASH_KEY, and the keyed but unlabelled v2.
// The value a snapshot's phone hash stands for is, almost always, the App's phone of the user (the
// number bitrix-sync last wrote): where it is, the hash is rewritten as v3 of that phone. An unkeyed
// one that matches no phone at hand is cleared (the user's next phone change then appends instead of
// overwriting, which a manager can tidy); a v2 one is keyed and stays until the update steps read the
// Contact's numbers. Snapshots of users with a running workflow are left to that workflow's read.
// One small batch after another, until none is left or the signal says stop.
import type pg from "pg";
import { isUnkeyedHash, matchesPiiHash, piiHash } from "../hash.js";
import type { Logger } from "../observability/logger.js";

/** Snapshots read per batch. */
const BATCH = 500;

export interface RekeyReport {
  /** Legacy phone hashes rewritten as v3. */
  rekeyed: number;
  /** Unkeyed phone hashes that matched no phone at hand, cleared. */
  cleared: number;
  /** Left as they are: v2 hashes of another number, and users with a running workflow. */
  left: number;
}

export async function rekeyLegacyHashes(
  pool: pg.Pool,
  log: Logger,
  opts: { signal?: AbortSignal } = {},
): Promise<RekeyReport> {
  const report: RekeyReport = { rekeyed: 0, cleared: 0, left: 0 };
  let after = "";
  for (;;) {
    if (opts.signal?.aborted) break;
    // Every form but v3 (and but 'cleared', which name and e-mail hashes only use), by Contact ID.
    const { rows } = await pool.query<{ contact_id: string; phone_hash: string; phone: string | null }>(
      `select s.contact_id, s.phone_hash, u.phone_number as phone
         from bitrix_sync.contact_snapshots s
         left join han_app.user_identity u on u.id = s.user_id
        where s.phone_hash is not null and s.phone_hash !~ '^v3:' and s.contact_id > $1
        order by s.contact_id limit $2`,
      [after, BATCH],
    );
    if (rows.length === 0) break;
    after = rows[rows.length - 1]?.contact_id ?? after;
    const rekey: Array<[string, string, string]> = [];
    const clear: Array<[string, string]> = [];
    for (const r of rows) {
      if (r.phone !== null && matchesPiiHash(r.phone_hash, "phone", r.phone)) {
        rekey.push([r.contact_id, r.phone_hash, piiHash("phone", r.phone) as string]);
      } else if (isUnkeyedHash(r.phone_hash)) {
        clear.push([r.contact_id, r.phone_hash]);
      } else {
        report.left++;
      }
    }
    const rekeyed = await replace(pool, rekey);
    const cleared = await replace(
      pool,
      clear.map(([id, old]) => [id, old, null]),
    );
    report.rekeyed += rekeyed;
    report.cleared += cleared;
    report.left += rekey.length + clear.length - rekeyed - cleared;
    if (rows.length < BATCH) break;
  }
  if (report.rekeyed + report.cleared + report.left > 0) {
    log.info({ event: "rekey.run", ...report }, "legacy phone hashes re-keyed");
  }
  return report;
}

/** Compare-and-set of snapshots' phone hashes (sql/hashes.sql); returns how many changed. */
async function replace(pool: pg.Pool, rows: Array<[string, string, string | null]>): Promise<number> {
  if (rows.length === 0) return 0;
  const { rows: out } = await pool.query<{ n: number }>(
    "select bitrix_sync.rekey_contact_phones($1::text[], $2::text[], $3::text[]) as n",
    [rows.map((r) => r[0]), rows.map((r) => r[1]), rows.map((r) => r[2])],
  );
  return out[0]?.n ?? 0;
}
