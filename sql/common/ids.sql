-- Keys in the order rows are made (issue 36, goal 4). The hot tables whose key is a UUID
-- (han_app.sync_queue, workflow_instances, entity_external_mapping, rebind_requests) took
-- gen_random_uuid(): each insert landed on a random leaf of the primary key, and so did every index
-- that carries the key of another table (crm_commands' (workflow_id, id), the mappings'
-- workflow_id). At 10 M users those indexes are 30-470 MB; a random leaf is a page that the
-- insert, and every later lookup of a recent row, must find in a pool of gigabytes. With the
-- time in the key's first 48 bits, the rows a running service makes and reads (the last hours')
-- sit together on the index's few newest leaves, whatever the installation's size.
--
-- The layout is RFC 9562's version 7: 48 bits of Unix time in milliseconds, the version (7), then
-- 74 random bits (gen_random_uuid()'s, with its variant). PostgreSQL 18 has uuidv7(); 15 does not.
-- The keys stay unguessable (no key is a capability here; lease tokens stay fully random) and their
-- order says only what created_at says already.
--
-- No pinned search_path, on purpose: it is the default of those keys, so it runs in every insert,
-- and a SQL function with a SET clause is never inlined (measured: 0.3 µs a key inlined, against
-- 5.7 µs pinned). Every function, operator and type is written schema-qualified instead
-- (test/integration/function-search-path.test.ts checks the body).
create or replace function bitrix_sync.time_ordered_uuid() returns uuid
language sql volatile parallel safe as $$
  select pg_catalog.encode(
           pg_catalog.set_bit(pg_catalog.set_bit(
             pg_catalog.overlay(
               pg_catalog.uuid_send(pg_catalog.gen_random_uuid()),
               pg_catalog.substring(
                 pg_catalog.int8send(
                   pg_catalog.floor(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp())
                                    operator(pg_catalog.*) 1000)::pg_catalog.int8),
                 3),
               1, 6),
             52, 1), 53, 1),
           'hex')::pg_catalog.uuid
$$;
comment on function bitrix_sync.time_ordered_uuid() is
  'A version 7 UUID (RFC 9562): the current Unix time in milliseconds in its first 48 bits, then 74 random bits. The default of the hot tables'' UUID keys, so that rows made together share index leaves. Inlined into its callers: no pinned search_path, every operator and name schema-qualified.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.time_ordered_uuid()', array['EXECUTE'], array[]::text[], array[]::text[],
   'The default of the hot tables'' keys, evaluated as the inserting role (the runtime; admin paths insert as the owner).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
