--! Previous: -
--! Hash: sha1:86331a199dd3b973a91ff3c5548f07f00eff4b06
--! Message: baseline

-- Baseline: the App's tables as the stub era left them (§6.1, §6.3, DESIGN.md "Names that are public
-- contract"). They exist in production, owned by the App, so everything here is created only if
-- absent; on a production database this migration changes nothing. docs/migrations.md describes the
-- legacy shapes and what the next migrations do to them.

-- Fail fast instead of queueing behind App traffic on a busy production table.
set local lock_timeout = '10s';

create schema if not exists han_app;
comment on schema han_app is 'Tables owned by the HAN App. bitrix-sync reads identity/profile, writes CRM-master profile fields, and owns sync_queue processing.';

create table if not exists han_app.user_identity (
  id uuid primary key default gen_random_uuid(),
  phone_number varchar(16),
  record_status varchar(16) not null default 'active'
    check (record_status in ('active', 'inactive', 'deleted')),
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);
comment on table han_app.user_identity is 'App user identity (Keycloak-backed). phone_number is App-master (§3.1).';
comment on column han_app.user_identity.phone_number is 'E.164 +7XXXXXXXXXX when valid; bitrix-sync never repairs it (§3.3).';

create table if not exists han_app.client_profile (
  id uuid primary key default gen_random_uuid(),
  user_id uuid not null unique references han_app.user_identity (id),
  full_name text,
  citizenship text,
  email text,
  foreign_phone text,
  record_status varchar(16) not null default 'active'
    check (record_status in ('active', 'inactive', 'deleted')),
  source_updated_at timestamptz,
  bitrix_contact_id varchar(128),
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);
comment on table han_app.client_profile is 'App client profile. full_name, citizenship, email are CRM-master (§3.1): written only by bitrix-sync.';
comment on column han_app.client_profile.source_updated_at is 'CRM source timestamp of the CRM-master fields last applied.';
comment on column han_app.client_profile.bitrix_contact_id is 'Legacy (stub era) Contact link. Copied into bitrix_sync.entity_external_mapping by the expand migration, dropped by the contract migration.';

create index if not exists client_profile_bitrix_contact_id_idx
  on han_app.client_profile (bitrix_contact_id) where bitrix_contact_id is not null;

-- Legacy queue: a global UNIQUE(dedup_key), stub statuses pending|processing|done|failed, and a free
-- text last_error. The expand migration reshapes it to §6.1 without losing rows.
create table if not exists han_app.sync_queue (
  id uuid primary key default gen_random_uuid(),
  task_type varchar(64) not null,
  entity_type varchar(64) not null,
  entity_id uuid not null,
  dedup_key varchar(255) not null unique,
  payload_json jsonb not null default '{}'::jsonb,
  status varchar(16) not null default 'pending',
  attempt_count integer not null default 0,
  next_attempt_at timestamptz not null default now(),
  last_error text,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);
comment on table han_app.sync_queue is 'Business intents of the App for the CRM (§6.1).';

-- Legacy mapping: one row per linked user, no status or history. Moved to bitrix_sync by the expand
-- migration and dropped there (§6.3 steps 1-5).
create table if not exists han_app.entity_external_mapping (
  id uuid primary key default gen_random_uuid(),
  entity_type varchar(64) not null,
  entity_id uuid not null,
  external_system varchar(32) not null,
  external_entity_type varchar(32) not null,
  external_id varchar(128) not null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  unique (external_system, entity_type, entity_id)
);
comment on table han_app.entity_external_mapping is 'Legacy stub-era mapping; superseded by bitrix_sync.entity_external_mapping.';
