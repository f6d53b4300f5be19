// bench:scale's seed: an installation of `users` App users as a running service leaves it, written in
// set-based SQL (generate_series) on the real, logged tables. The tables' keys, unique constraints,
// foreign keys and indexes are dropped for the load and built again afterwards with their exact
// definitions (pg_get_indexdef / pg_get_constraintdef), so the measurement runs on the real indexes,
// built as CREATE INDEX builds them; then VACUUM ANALYZE. Triggers (guards, intents, metrics) are off
// for the load only (session_replication_role = replica): the rows are written in their final states.
//
// User n (1..users) has id md5('u' || n)::uuid, so a script (pgbench) finds it without a lookup:
//   - every user active, with a profile, an active link to Contact n (a portal with as many Contacts
//     as users: a portal of 1 M Contacts at 1 M users), its snapshot, the link's succeeded
//     contact.map_or_create workflow (kept for ever: the link refers to it), and an audit mark within
//     audit.period_days (the audit keeps up);
//   - 10 % of users (n % 10 = 1) changed something within the retention windows: a succeeded
//     contact.update workflow with its two commands (read, update) and its processed intent;
//     10 % (n % 10 = 5) a processed Contact webhook;
//   - about 2 000 users (every users/2000-th, at least every 10th, from n = 1: at least a
//     retention.batch_size of 500 at 10 000 users) have rows just past retention.*_days, which the
//     next retention run deletes: an older contact.update workflow with its two commands and its intent, and an
//     old webhook;
//   - 1 % (n % 100 = 2) a closed earlier link (a rebind).
// The links' commands and intents of long ago are gone, as retention leaves them.
import type pg from "pg";

/** The tables the seed loads; their keys and indexes are rebuilt after the load. */
export const SEEDED_TABLES = [
  "han_app.user_identity",
  "han_app.client_profile",
  "han_app.sync_queue",
  "bitrix_sync.workflow_instances",
  "bitrix_sync.crm_commands",
  "bitrix_sync.entity_external_mapping",
  "bitrix_sync.contact_snapshots",
  "bitrix_sync.audit_marks",
  "bitrix_sync.webhook_inbox",
] as const;

interface Saved {
  fks: Array<{ table: string; name: string; def: string }>;
  keys: Array<{ table: string; name: string; def: string }>;
  indexes: Array<{ name: string; def: string }>;
}

async function dropKeysAndIndexes(c: pg.Client): Promise<Saved> {
  const tables = [...SEEDED_TABLES];
  const fks = (
    await c.query<{ table: string; name: string; def: string }>(
      `select conrelid::regclass::text as table, conname as name, pg_get_constraintdef(oid) as def
         from pg_constraint
        where contype = 'f' and (conrelid = any($1::regclass[]) or confrelid = any($1::regclass[]))`,
      [tables],
    )
  ).rows;
  const keys = (
    await c.query<{ table: string; name: string; def: string }>(
      `select conrelid::regclass::text as table, conname as name, pg_get_constraintdef(oid) as def
         from pg_constraint where contype in ('p', 'u') and conrelid = any($1::regclass[])`,
      [tables],
    )
  ).rows;
  const indexes = (
    await c.query<{ name: string; def: string }>(
      `select i.indexrelid::regclass::text as name, pg_get_indexdef(i.indexrelid) as def
         from pg_index i
        where i.indrelid = any($1::regclass[])
          and not exists (select 1 from pg_constraint k where k.conindid = i.indexrelid and k.contype in ('p', 'u', 'x'))`,
      [tables],
    )
  ).rows;
  for (const f of fks) await c.query(`alter table ${f.table} drop constraint ${f.name}`);
  for (const k of keys) await c.query(`alter table ${k.table} drop constraint ${k.name}`);
  for (const i of indexes) await c.query(`drop index ${i.name}`);
  return { fks, keys, indexes };
}

async function rebuild(c: pg.Client, s: Saved): Promise<void> {
  for (const k of s.keys) await c.query(`alter table ${k.table} add constraint ${k.name} ${k.def}`);
  for (const i of s.indexes) await c.query(i.def);
  for (const f of s.fks) await c.query(`alter table ${f.table} add constraint ${f.name} ${f.def}`);
}

/** Seconds each phase of the seed took. */
export interface SeedTimes {
  load: number;
  indexes: number;
  analyze: number;
}

/** Seeds `users` users into the migrated, cut-over database `c` is connected to (as superuser). */
export async function seedInstallation(c: pg.Client, users: number): Promise<SeedTimes> {
  await c.query("set maintenance_work_mem = '1GB'");
  await c.query("set synchronous_commit = off");
  await c.query("set session_replication_role = replica");
  const saved = await dropKeysAndIndexes(c);
  const t0 = performance.now();
  // The user's sign-up time, spread over 700..100 days ago: every link is older than
  // retention.workflows_days (90), as on a portal in use for years.
  const born = (n: string) => `(now() - interval '700 days' + (${n})::float8 / $1 * interval '600 days')`;
  const steps: string[] = [
    `insert into han_app.user_identity (id, phone_number, record_status, created_at, updated_at)
     select md5('u' || n)::uuid, '+79' || lpad(n::text, 9, '0'), 'active', ${born("n")}, ${born("n")}
       from generate_series(1, $1::int) n`,
    `insert into han_app.client_profile (id, user_id, full_name, email, record_status, source_updated_at, created_at, updated_at)
     select md5('p' || n)::uuid, md5('u' || n)::uuid, 'User ' || n, 'user' || n || '@example.org', 'active',
            ${born("n")}, ${born("n")}, ${born("n")}
       from generate_series(1, $1::int) n`,
    // The link's workflow, finished a minute after sign-up.
    `insert into bitrix_sync.workflow_instances
       (id, workflow_type, intent_type, user_id, contact_id, state, current_step, revision, processed_revision,
        content_hash, outcome, next_attempt_at, deadline_at, created_at, updated_at, finished_at)
     select md5('w' || n)::uuid, 'contact.map_or_create', 'contact.map_or_create', md5('u' || n)::uuid, n::text,
            'succeeded', 'created', 1, 1, md5('h' || n), 'created', ${born("n")}, ${born("n")} + interval '1 day',
            ${born("n")}, ${born("n")} + interval '1 minute', ${born("n")} + interval '1 minute'
       from generate_series(1, $1::int) n`,
    `insert into bitrix_sync.entity_external_mapping (id, entity_id, external_id, workflow_id, opened_at, created_at, updated_at)
     select md5('m' || n)::uuid, md5('u' || n)::uuid, n::text, md5('w' || n)::uuid,
            ${born("n")} + interval '1 minute', ${born("n")} + interval '1 minute', ${born("n")} + interval '1 minute'
       from generate_series(1, $1::int) n`,
    // A rebind: the earlier link, closed (1 %). Its Contact ID is beyond the active ones.
    `insert into bitrix_sync.entity_external_mapping
       (id, entity_id, external_id, status, workflow_id, opened_at, closed_at, close_reason, created_at, updated_at)
     select md5('mc' || n)::uuid, md5('u' || n)::uuid, ($1::bigint + n)::text, 'closed', md5('w' || n)::uuid,
            ${born("n")}, ${born("n")} + interval '1 minute', 'rebind', ${born("n")}, ${born("n")} + interval '1 minute'
       from generate_series(2, $1::int, 100) n`,
    `insert into bitrix_sync.contact_snapshots
       (contact_id, user_id, name_hash, email_hash, phone_hash, registered, crm_created_at, crm_updated_at,
        last_applied_source, last_applied_at, created_at, updated_at)
     select n::text, md5('u' || n)::uuid, 'v3:' || md5('n' || n) || 'abcdefghijk', 'v3:' || md5('e' || n) || 'abcdefghijk',
            'v3:' || md5('f' || n) || 'abcdefghijk', true, ${born("n")}, ${born("n")} + interval '1 minute',
            'app_create', ${born("n")} + interval '1 minute', ${born("n")}, ${born("n")} + interval '1 minute'
       from generate_series(1, $1::int) n`,
    // Every link compared within the audit's period (7 days).
    `insert into bitrix_sync.audit_marks (mapping_id, user_id, audited_at)
     select md5('m' || n)::uuid, md5('u' || n)::uuid, now() - (n % 10007)::float8 / 10007 * interval '7 days'
       from generate_series(1, $1::int) n`,
    // Within retention: a contact.update of 10 % of users, finished in the last 30 days, with its
    // commands and its processed intent.
    `insert into bitrix_sync.workflow_instances
       (id, workflow_type, intent_type, user_id, contact_id, state, current_step, revision, processed_revision,
        content_hash, outcome, source_task_id, next_attempt_at, deadline_at, created_at, updated_at, finished_at)
     select md5('r' || n)::uuid, 'contact.update', 'contact.update', md5('u' || n)::uuid, n::text, 'succeeded', 'updated',
            1, 1, md5('hr' || n), 'updated', md5('q' || n)::uuid, t, t + interval '1 day', t, t + interval '2 seconds',
            t + interval '2 seconds'
       from (select n, now() - (n % 9973)::float8 / 9973 * interval '29 days' as t
               from generate_series(1, $1::int, 10) n) s`,
    `insert into bitrix_sync.crm_commands
       (workflow_id, command_type, params, status, attempt_count, next_attempt_at, deadline_at, sent_at, first_sent_at,
        completed_at, response, created_at, updated_at)
     select md5('r' || n)::uuid, v.ct, '{}', 'succeeded', 1, t, t + interval '1 day', t, t, t + interval '1 second', '{}', t,
            t + interval '1 second'
       from (select n, now() - (n % 9973)::float8 / 9973 * interval '29 days' as t
               from generate_series(1, $1::int, 10) n) s
      cross join (values ('contact.read'), ('contact.update')) v(ct)`,
    `insert into han_app.sync_queue
       (id, task_type, entity_type, entity_id, dedup_key, payload_json, status, attempt_count, next_attempt_at,
        completed_at, created_at, updated_at)
     select md5('q' || n)::uuid, 'contact.update', 'user', md5('u' || n)::uuid, 'contact.update:user:' || md5('u' || n)::uuid,
            jsonb_build_object('schema_version', 1, 'user_id', md5('u' || n)::uuid, 'reason', 'identity_phone_changed'),
            'processed', 1, t, t + interval '1 second', t, t + interval '1 second'
       from (select n, now() - (n % 9973)::float8 / 9973 * interval '29 days' as t
               from generate_series(1, $1::int, 10) n) s`,
    // Webhooks within retention (7 days), 10 % of users.
    `insert into bitrix_sync.webhook_inbox
       (receiver, event_id, source_ts, entity_type_id, entity_id, status, attempt_count, next_attempt_at, outcome,
        received_at, status_at, processed_at)
     select 'contact', 'e' || n, t, 3, n::text, 'processed', 1, t, 'applied', t, t + interval '1 second', t + interval '1 second'
       from (select n, now() - (n % 9973)::float8 / 9973 * interval '6 days' as t
               from generate_series(5, $1::int, 10) n) s`,
    // Just past retention (1 %): an older contact.update with its commands and intent, an old webhook.
    `insert into bitrix_sync.workflow_instances
       (id, workflow_type, intent_type, user_id, contact_id, state, current_step, revision, processed_revision,
        content_hash, outcome, source_task_id, next_attempt_at, deadline_at, created_at, updated_at, finished_at)
     select md5('o' || n)::uuid, 'contact.update', 'contact.update', md5('u' || n)::uuid, n::text, 'succeeded', 'updated',
            1, 1, md5('ho' || n), 'updated', md5('qo' || n)::uuid, t, t + interval '1 day', t, t + interval '2 seconds',
            t + interval '2 seconds'
       from (select n, now() - interval '95 days' + (n % 997)::float8 / 997 * interval '4 days' as t
               from generate_series(1, $1::int, greatest(10, $1::int / 20000 * 10)) n) s`,
    `insert into bitrix_sync.crm_commands
       (workflow_id, command_type, params, status, attempt_count, next_attempt_at, deadline_at, sent_at, first_sent_at,
        completed_at, response, created_at, updated_at)
     select md5('o' || n)::uuid, v.ct, '{}', 'succeeded', 1, t, t + interval '1 day', t, t, t + interval '1 second', '{}', t,
            t + interval '1 second'
       from (select n, now() - interval '95 days' + (n % 997)::float8 / 997 * interval '4 days' as t
               from generate_series(1, $1::int, greatest(10, $1::int / 20000 * 10)) n) s
      cross join (values ('contact.read'), ('contact.update')) v(ct)`,
    `insert into han_app.sync_queue
       (id, task_type, entity_type, entity_id, dedup_key, payload_json, status, attempt_count, next_attempt_at,
        completed_at, created_at, updated_at)
     select md5('qo' || n)::uuid, 'contact.update', 'user', md5('u' || n)::uuid, 'contact.update:user:' || md5('u' || n)::uuid,
            jsonb_build_object('schema_version', 1, 'user_id', md5('u' || n)::uuid, 'reason', 'identity_phone_changed'),
            'processed', 1, t, t + interval '1 second', t, t + interval '1 second'
       from (select n, now() - interval '35 days' + (n % 997)::float8 / 997 * interval '4 days' as t
               from generate_series(1, $1::int, greatest(10, $1::int / 20000 * 10)) n) s`,
    `insert into bitrix_sync.webhook_inbox
       (receiver, event_id, source_ts, entity_type_id, entity_id, status, attempt_count, next_attempt_at, outcome,
        received_at, status_at, processed_at)
     select 'contact', 'eo' || n, t, 3, n::text, 'processed', 1, t, 'applied', t, t + interval '1 second', t + interval '1 second'
       from (select n, now() - interval '10 days' + (n % 997)::float8 / 997 * interval '2 days' as t
               from generate_series(1, $1::int, greatest(10, $1::int / 20000 * 10)) n) s`,
  ];
  for (const sql of steps) await c.query(sql, [users]);
  const t1 = performance.now();
  await rebuild(c, saved);
  const t2 = performance.now();
  await c.query("reset session_replication_role");
  await c.query(`vacuum analyze ${SEEDED_TABLES.join(", ")}`);
  const t3 = performance.now();
  return { load: (t1 - t0) / 1000, indexes: (t2 - t1) / 1000, analyze: (t3 - t2) / 1000 };
}
