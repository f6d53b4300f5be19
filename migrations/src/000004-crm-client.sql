-- CRM client (§8, §9): the rate limiter every replica shares. A token bucket per portal/credential,
-- in-flight slots that expire on their own when a holder dies, and per-method blocks for the
-- portal's operating-time limit. Functions and grants are in sql/limiter.sql.
set local lock_timeout = '10s';

create table if not exists bitrix_sync.crm_rate_buckets (
  bucket text primary key check (length(bucket) between 1 and 200),
  tokens double precision not null check (tokens >= 0),
  refilled_at timestamptz not null,
  rate_factor double precision not null default 1 check (rate_factor > 0 and rate_factor <= 1),
  rate_changed_at timestamptz not null default now(),
  throttled_until timestamptz,
  rate_limited_count bigint not null default 0 check (rate_limited_count >= 0),
  updated_at timestamptz not null default now()
);
comment on table bitrix_sync.crm_rate_buckets is
  'Token bucket per portal/credential shared by every replica (§8). One row per bucket; acquire_crm_request() locks it.';
comment on column bitrix_sync.crm_rate_buckets.bucket is 'Bucket name: one per portal and webhook credential (the portal host).';
comment on column bitrix_sync.crm_rate_buckets.tokens is 'Tokens left at refilled_at; refilled lazily at the current rate, capped at the burst setting.';
comment on column bitrix_sync.crm_rate_buckets.refilled_at is 'When tokens was last brought up to date.';
comment on column bitrix_sync.crm_rate_buckets.rate_factor is 'Share of limiter.refill_per_sec in force: cut on QUERY_LIMIT_EXCEEDED, climbs back linearly to 1.';
comment on column bitrix_sync.crm_rate_buckets.rate_changed_at is 'When rate_factor was last brought up to date.';
comment on column bitrix_sync.crm_rate_buckets.throttled_until is 'No request before this instant: the cool-down after a limit refusal.';
comment on column bitrix_sync.crm_rate_buckets.rate_limited_count is 'Limit refusals that cut the rate, since the bucket was created.';

create table if not exists bitrix_sync.crm_inflight_slots (
  slot_id uuid primary key default gen_random_uuid(),
  bucket text not null references bitrix_sync.crm_rate_buckets (bucket) on delete cascade,
  holder text not null check (length(holder) between 1 and 200),
  acquired_at timestamptz not null default clock_timestamp(),
  expires_at timestamptz not null,
  constraint crm_inflight_slots_expiry check (expires_at > acquired_at)
);
-- squawk-ignore require-concurrent-index-creation
create index if not exists crm_inflight_slots_bucket_idx on bitrix_sync.crm_inflight_slots (bucket, expires_at);
comment on table bitrix_sync.crm_inflight_slots is
  'HTTP requests to the portal in flight, all replicas together (§8 max in-flight). A slot past expires_at counts as free.';
comment on column bitrix_sync.crm_inflight_slots.holder is 'Replica that holds the slot (host:pid), for diagnosis only.';
comment on column bitrix_sync.crm_inflight_slots.expires_at is 'The slot frees itself here if its holder crashed; longer than the HTTP timeout.';

create table if not exists bitrix_sync.crm_method_blocks (
  bucket text not null check (length(bucket) between 1 and 200),
  method text not null check (method ~ '^[a-z][a-z0-9_.]*$'),
  blocked_until timestamptz,
  operating double precision check (operating >= 0),
  operating_reset_at timestamptz,
  updated_at timestamptz not null default now(),
  primary key (bucket, method)
);
comment on table bitrix_sync.crm_method_blocks is
  'Operating-time limit per REST method (§9): the last time.operating seen and, after OPERATION_TIME_LIMIT, how long the method is blocked.';
comment on column bitrix_sync.crm_method_blocks.method is 'REST method name, e.g. crm.contact.update.';
comment on column bitrix_sync.crm_method_blocks.blocked_until is 'No command of this method is sent before this instant.';
comment on column bitrix_sync.crm_method_blocks.operating is 'Last time.operating (seconds) the portal reported for this method.';
comment on column bitrix_sync.crm_method_blocks.operating_reset_at is 'Last time.operating_reset_at: when the oldest one-minute bucket of the method drops out.';

-- #include sql/limiter.sql
