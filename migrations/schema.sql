--
-- PostgreSQL database dump
--

\restrict bitrixsyncschemadump

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: bitrix_sync; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA bitrix_sync;

--
-- Name: SCHEMA bitrix_sync; Type: COMMENT; Schema: -; Owner: -
--

COMMENT ON SCHEMA bitrix_sync IS 'Owned by bitrix-sync: mapping, workflows, CRM commands, inbox, alerts, settings and audit.';

--
-- Name: graphile_worker; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA graphile_worker;

--
-- Name: han_app; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA han_app;

--
-- Name: SCHEMA han_app; Type: COMMENT; Schema: -; Owner: -
--

COMMENT ON SCHEMA han_app IS 'Tables owned by the HAN App. bitrix-sync reads identity/profile, writes CRM-master profile fields, and owns sync_queue processing.';

--
-- Name: _retry_deadline(timestamp with time zone); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._retry_deadline(p_first_attempt_at timestamp with time zone) RETURNS timestamp with time zone
    LANGUAGE sql STABLE
    AS $$
  select p_first_attempt_at
         operator(pg_catalog.+) pg_catalog.make_interval(
           secs => (bitrix_sync._active_setting('retry.horizon_sec') operator(pg_catalog.#>>) '{}')::pg_catalog.float8)
         operator(pg_catalog.+) case when p_first_attempt_at operator(pg_catalog.>=) pg_catalog.now()
                                     then '0'::pg_catalog.interval
                                     else bitrix_sync._paused_since(p_first_attempt_at) end
$$;

--
-- Name: FUNCTION _retry_deadline(p_first_attempt_at timestamp with time zone); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._retry_deadline(p_first_attempt_at timestamp with time zone) IS 'The retry horizon of a row whose first attempt was p_first_attempt_at: that instant plus the active retry.horizon_sec plus the time processing was paused since (_paused_since). A retry due after it dead-letters with retry_horizon_exceeded. Inlined into its callers and the deadline_at defaults: no pinned search_path, every operator and name schema-qualified.';

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: crm_commands; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.crm_commands (
    id bigint NOT NULL,
    workflow_id uuid,
    alert_id bigint,
    command_type character varying(48) NOT NULL,
    params jsonb DEFAULT '{}'::jsonb NOT NULL,
    status character varying(16) DEFAULT 'pending'::character varying NOT NULL,
    revision integer DEFAULT 1 NOT NULL,
    attempt_count integer DEFAULT 0 NOT NULL,
    limit_hits integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    deadline_at timestamp with time zone DEFAULT bitrix_sync._retry_deadline(now()) NOT NULL,
    lease_token uuid,
    locked_by character varying(128),
    locked_until timestamp with time zone,
    batch_id uuid,
    correlation_id uuid,
    sent_at timestamp with time zone,
    response jsonb,
    last_error_code character varying(64),
    last_http_status integer,
    last_bitrix_error character varying(64),
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    completed_at timestamp with time zone,
    first_sent_at timestamp with time zone,
    trace_context text,
    reply_deadline_at timestamp with time zone,
    CONSTRAINT crm_commands_attempt_count_check CHECK ((attempt_count >= 0)),
    CONSTRAINT crm_commands_limit_hits_check CHECK ((limit_hits >= 0)),
    CONSTRAINT crm_commands_owner CHECK (((workflow_id IS NOT NULL) OR (alert_id IS NOT NULL)))
)
WITH (autovacuum_vacuum_scale_factor='0.02', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_insert_scale_factor='0.02', autovacuum_vacuum_insert_threshold='1000', autovacuum_analyze_scale_factor='0.01', autovacuum_analyze_threshold='1000', autovacuum_vacuum_cost_delay='1');

--
-- Name: TABLE crm_commands; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.crm_commands IS 'Concrete CRM calls (§6.4, §7.2). One command is one sub-request of a Bitrix24 batch. command_type is a closed catalogue mapped to REST methods in TypeScript: the database holds no method names.';

--
-- Name: COLUMN crm_commands.params; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_commands.params IS 'Safe request parameters: IDs, flags, field choices. Values with PII (phone, email, name) are read from the App at send time, not stored.';

--
-- Name: COLUMN crm_commands.status; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_commands.status IS 'pending | leased | in_flight | succeeded | retry_wait | uncertain | reconcile | dead_letter (§7.2).';

--
-- Name: COLUMN crm_commands.revision; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_commands.revision IS 'Workflow revision this command serves.';

--
-- Name: COLUMN crm_commands.attempt_count; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_commands.attempt_count IS 'Sends so far, rate-limit refusals included; the attempts that count against the retry budget are attempt_count - limit_hits.';

--
-- Name: COLUMN crm_commands.limit_hits; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_commands.limit_hits IS 'Times the portal refused the call for rate (QUERY_LIMIT_EXCEEDED).';

--
-- Name: COLUMN crm_commands.deadline_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_commands.deadline_at IS 'Retry horizon: first send + retry.horizon_sec (§9), as of the last retry decision. retry_command decides from first_sent_at and the active setting.';

--
-- Name: COLUMN crm_commands.batch_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_commands.batch_id IS 'The HTTP batch the command was last sent in.';

--
-- Name: COLUMN crm_commands.sent_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_commands.sent_at IS 'Durable "send started" marker, committed before a write leaves; a write in_flight with sent_at and no result becomes uncertain, never resent blindly.';

--
-- Name: COLUMN crm_commands.response; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_commands.response IS 'Safe projection of the reply (IDs, counts, timestamps); never raw text.';

--
-- Name: COLUMN crm_commands.last_bitrix_error; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_commands.last_bitrix_error IS 'Bitrix24 error code of the last failure (may be empty-string-derived codes such as legacy_not_found).';

--
-- Name: COLUMN crm_commands.first_sent_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_commands.first_sent_at IS 'When the command was first sent: its retry horizon starts here (a command never sent counts from created_at).';

--
-- Name: COLUMN crm_commands.trace_context; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_commands.trace_context IS 'W3C traceparent of the workflow step span that issued the command; each send is traced as its child, whichever process sends it. Null when tracing was off and for alert commands.';

--
-- Name: COLUMN crm_commands.reply_deadline_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_commands.reply_deadline_at IS 'Stamped by send_commands with each send marker: the moment by which the request is out and given up by the sender at the latest (its send window plus its HTTP timeout). An unanswered write''s late-write wait counts from here. Null when the sender did not say.';

--
-- Name: step_context_t; Type: TYPE; Schema: bitrix_sync; Owner: -
--

CREATE TYPE bitrix_sync.step_context_t AS (
	revision integer,
	intent_type text,
	trace_context text,
	unresolved_write boolean,
	last_command bitrix_sync.crm_commands
);

--
-- Name: TYPE step_context_t; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TYPE bitrix_sync.step_context_t IS 'What step_context() returns: the locked workflow''s revision, intent and trace context, whether one of its writes is unresolved, and its last command (all fields null when none).';

--
-- Name: job_spec; Type: TYPE; Schema: graphile_worker; Owner: -
--

CREATE TYPE graphile_worker.job_spec AS (
	identifier text,
	payload json,
	queue_name text,
	run_at timestamp with time zone,
	max_attempts smallint,
	job_key text,
	priority smallint,
	flags text[]
);

--
-- Name: _abandon_workflow_commands(uuid, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._abandon_workflow_commands(p_workflow_id uuid, p_code text) RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_count integer;
  v_more integer;
begin
  perform bitrix_sync._check_code(p_code);
  -- Not sent yet: pending and retry_wait are abandoned; a leased one too, and the pump's send marker
  -- (send_commands, which wants it leased) then skips it. The caller refuses a write in flight.
  update bitrix_sync.crm_commands c
     set status = 'dead_letter', completed_at = now(), last_error_code = p_code,
         lease_token = null, locked_by = null, locked_until = null
   where c.workflow_id = p_workflow_id and c.alert_id is null
     and c.status in ('pending', 'retry_wait', 'leased');
  get diagnostics v_count = row_count;
  -- A write whose outcome is unknown stays recorded as such in the request's outcome; the command
  -- itself is closed through reconcile, the only way out of uncertain (§7.2).
  update bitrix_sync.crm_commands c set status = 'reconcile'
   where c.workflow_id = p_workflow_id and c.alert_id is null and c.status = 'uncertain';
  update bitrix_sync.crm_commands c
     set status = 'dead_letter', completed_at = now(), last_error_code = p_code
   where c.workflow_id = p_workflow_id and c.alert_id is null and c.status = 'reconcile';
  get diagnostics v_more = row_count;
  return v_count + v_more;
end $$;

--
-- Name: FUNCTION _abandon_workflow_commands(p_workflow_id uuid, p_code text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._abandon_workflow_commands(p_workflow_id uuid, p_code text) IS 'Internal (admin cancel): closes the unsent (pending, retry_wait, leased) and the unresolved (uncertain, reconcile) commands of a workflow as dead_letter with the code; no DLQ row. Returns how many.';

--
-- Name: _active_link_count(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._active_link_count() RETURNS bigint
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  -- The entries of the partial index of active links, or counted exactly when there are few.
  select coalesce(bitrix_sync._planner_count('bitrix_sync.entity_external_mapping_active_entity_uq'),
                  (select count(*) from bitrix_sync.entity_external_mapping m where m.status = 'active'))
$$;

--
-- Name: FUNCTION _active_link_count(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._active_link_count() IS 'Internal: how many links are active: counted exactly below 100 000, otherwise the planner''s count of entity_external_mapping_active_entity_uq (_planner_count). Sizes an audit run and fills status_audit.last_links.';

--
-- Name: _active_setting(text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._active_setting(p_key text) RETURNS jsonb
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_value jsonb;
begin
  select coalesce(v.settings_values -> s.key, s.default_value, 'null'::jsonb) into v_value
    from bitrix_sync.settings s
    left join bitrix_sync.settings_versions v on v.status = 'active'
   where s.key = p_key;
  if not found then
    -- A typo here would silently disable whatever rule reads the setting.
    raise exception 'setting % is not in the catalogue', p_key
      using errcode = 'BS004', hint = 'The keys are the rows of bitrix_sync.settings.';
  end if;
  return v_value;
end $$;

--
-- Name: FUNCTION _active_setting(p_key text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._active_setting(p_key text) IS 'One key of the active settings version, the catalogue default filled in (JSON null when unset and nullable). What SQL rules read; an unknown key raises BS004.';

--
-- Name: _alert_add_unsafe(bigint); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._alert_add_unsafe(p_alert_id bigint) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  -- An add whose item may exist, and that no successful lookup has checked since it was sent.
  select exists (
    select 1 from bitrix_sync.crm_commands a
     where a.alert_id = p_alert_id and a.command_type = 'alert.add'
       and (a.status in ('uncertain', 'reconcile')
            or (a.status = 'dead_letter' and a.last_error_code = 'alert_lookup_failed'))
       and a.id > coalesce((select max(l.id) from bitrix_sync.crm_commands l
                             where l.alert_id = p_alert_id and l.command_type = 'alert.list'
                               and l.status = 'succeeded' and l.params ->> 'purpose' = 'find'), 0))
$$;

--
-- Name: FUNCTION _alert_add_unsafe(p_alert_id bigint); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._alert_add_unsafe(p_alert_id bigint) IS 'Internal: an alert.add of this alert may have created an item that no lookup has seen since: a new add must wait for an alert.list lookup.';

--
-- Name: _alert_settings_errors(jsonb); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._alert_settings_errors(p_values jsonb) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_eff jsonb;
  v_errors jsonb := '[]'::jsonb;
  v_stage record;
  v_other record;
  v_fields jsonb;
  v_missing text;
  v_dup record;
  v_entry record;
begin
  if p_values is null or pg_catalog.jsonb_typeof(p_values) <> 'object' then
    return v_errors;
  end if;
  -- The effective alerts.* values: the version's, else the catalogue default.
  select pg_catalog.jsonb_object_agg(s.key, coalesce(p_values -> s.key, s.default_value, 'null'::jsonb))
    into v_eff
    from bitrix_sync.settings s
   where s.key like 'alerts.%';
  -- Terminal stages against every other stage (each pair once; a terminal stage against the open ones).
  for v_stage in
    select t.key, t.ord, v_eff ->> t.key as value
      from (values ('alerts.stage_resolved', 1), ('alerts.stage_closed_without_resolution', 2)) t(key, ord)
  loop
    continue when v_stage.value is null;
    for v_other in
      select o.key, v_eff ->> o.key as value
        from (values ('alerts.stage_new', 0), ('alerts.stage_in_progress', 0), ('alerts.stage_resolved', 1)) o(key, ord)
       where o.ord < v_stage.ord
    loop
      if v_other.value = v_stage.value then
        v_errors := v_errors || pg_catalog.to_jsonb(pg_catalog.format('%s: a terminal stage must differ from %s', v_stage.key, v_other.key));
      end if;
    end loop;
  end loop;
  v_fields := v_eff -> 'alerts.fields';
  if pg_catalog.jsonb_typeof(v_fields) = 'object' then
    for v_entry in select e.key, e.value from pg_catalog.jsonb_each(v_fields) e order by e.key collate "C" loop
      if pg_catalog.jsonb_typeof(v_entry.value) = 'string'
         and (v_entry.value #>> '{}') !~ '^ufCrm[0-9]*_[A-Za-z0-9_]+$' then
        v_errors := v_errors || pg_catalog.to_jsonb(pg_catalog.format(
          'alerts.fields: entry %s must name a smart-process field (ufCrm<type>_<name>)', pg_catalog.left(v_entry.key, 64)));
      end if;
    end loop;
    for v_dup in
      select e.value #>> '{}' as field, pg_catalog.string_agg(e.key, ', ' order by e.key collate "C") as entries
        from pg_catalog.jsonb_each(v_fields) e
       where pg_catalog.jsonb_typeof(e.value) = 'string'
       group by 1 having count(*) > 1 order by min(e.key collate "C")
    loop
      v_errors := v_errors || pg_catalog.to_jsonb(pg_catalog.format(
        'alerts.fields: entries %s name the same field; each needs its own', v_dup.entries));
    end loop;
  end if;
  -- Alerts go to the smart process: what the mirror needs must be there.
  if pg_catalog.jsonb_typeof(v_eff -> 'alerts.entity_type_id') = 'number'
     and (v_eff -> 'alerts.database_only') is distinct from 'true'::jsonb then
    for v_stage in
      select k.key from (values ('alerts.stage_new'), ('alerts.stage_resolved'), ('alerts.stage_closed_without_resolution')) k(key)
       where v_eff ->> k.key is null
    loop
      v_errors := v_errors || pg_catalog.to_jsonb(pg_catalog.format(
        '%s: required while alerts.entity_type_id is set (or set alerts.database_only to keep alerts in the database)', v_stage.key));
    end loop;
    select pg_catalog.string_agg(a.name, ', ' order by a.name collate "C") into v_missing
      from bitrix_sync.settings s
     cross join lateral pg_catalog.jsonb_array_elements_text(s.allowed_values) a(name)
     where s.key = 'alerts.fields'
       and (pg_catalog.jsonb_typeof(v_fields) <> 'object' or not (v_fields ? a.name));
    if v_missing is not null then
      v_errors := v_errors || pg_catalog.to_jsonb(pg_catalog.format(
        'alerts.fields: required while alerts.entity_type_id is set (§11 item fields); missing %s', v_missing));
    end if;
  end if;
  return v_errors;
end $_$;

--
-- Name: FUNCTION _alert_settings_errors(p_values jsonb); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._alert_settings_errors(p_values jsonb) IS 'Validation messages of the alert smart process''s settings across keys (§11): terminal stages distinct from each other and from the open ones, alerts.fields naming smart-process fields, one each, and, while alerts.entity_type_id is set and alerts.database_only is not, the new and terminal stages and every item field present. Part of _settings_errors; empty array when valid.';

--
-- Name: _app_user_eligible(uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._app_user_eligible(p_user_id uuid) RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET row_security TO 'off'
    AS $$
  select coalesce((select u.record_status = 'active' and p.record_status = 'active'
                     from han_app.user_identity u
                     join han_app.client_profile p on p.user_id = u.id
                    where u.id = p_user_id), false)
$$;

--
-- Name: FUNCTION _app_user_eligible(p_user_id uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._app_user_eligible(p_user_id uuid) IS 'Internal (status_drift): true when the App user''s identity and profile are both active. Security definer with row_security off, so that a view''s reader never runs code a policy on the App''s tables calls.';

--
-- Name: _bucket_rate_factor(double precision, double precision, timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._bucket_rate_factor(p_factor double precision, p_recovery_per_sec double precision, p_changed_at timestamp with time zone, p_now timestamp with time zone) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  -- The share of the configured rate in force: p_factor at p_changed_at, climbing back by
  -- p_recovery_per_sec, at most the whole rate.
  select least(1.0, p_factor + p_recovery_per_sec * greatest(0, extract(epoch from p_now - p_changed_at)::double precision))
$$;

--
-- Name: FUNCTION _bucket_rate_factor(p_factor double precision, p_recovery_per_sec double precision, p_changed_at timestamp with time zone, p_now timestamp with time zone); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._bucket_rate_factor(p_factor double precision, p_recovery_per_sec double precision, p_changed_at timestamp with time zone, p_now timestamp with time zone) IS 'Internal: the share of the configured rate a bucket runs at by p_now, after a cut to p_factor at p_changed_at, recovering p_recovery_per_sec per second, at most 1.';

--
-- Name: _bucket_tokens(double precision, double precision, double precision, timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._bucket_tokens(p_tokens double precision, p_rate double precision, p_cap double precision, p_refilled_at timestamp with time zone, p_now timestamp with time zone) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  -- What was left, plus the rate for the time since, never above the cap; a clock that went back
  -- adds nothing.
  select least(p_cap, p_tokens + p_rate * greatest(0, extract(epoch from p_now - p_refilled_at)::double precision))
$$;

--
-- Name: FUNCTION _bucket_tokens(p_tokens double precision, p_rate double precision, p_cap double precision, p_refilled_at timestamp with time zone, p_now timestamp with time zone); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._bucket_tokens(p_tokens double precision, p_rate double precision, p_cap double precision, p_refilled_at timestamp with time zone, p_now timestamp with time zone) IS 'Internal: the tokens of a bucket at p_now: p_tokens left at p_refilled_at, refilled at p_rate per second, at most p_cap.';

--
-- Name: _check_admin_audit(text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._check_admin_audit(p_reason text, p_operator_id text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if p_reason is null or length(btrim(p_reason)) not between 3 and 500
     or p_operator_id is null or length(btrim(p_operator_id)) not between 1 and 128 then
    raise exception 'a reason (3 to 500 characters) and an operator_id (1 to 128) are required for the audit'
      using errcode = 'BS004',
            hint = 'Say why, and who you are: e.g. ''duplicates merged in the CRM'', ''ops:ivanov''.';
  end if;
end $$;

--
-- Name: FUNCTION _check_admin_audit(p_reason text, p_operator_id text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._check_admin_audit(p_reason text, p_operator_id text) IS 'Internal: refuses an admin call without a reason (3 to 500 characters) or an operator id (BS004).';

--
-- Name: audit_state; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.audit_state (
    singleton boolean DEFAULT true NOT NULL,
    last_run_started_at timestamp with time zone,
    last_run_mode character varying(8),
    last_run_status character varying(16),
    lease_token uuid,
    last_success_at timestamp with time zone,
    last_all_success_at timestamp with time zone,
    last_error_code character varying(64),
    last_audited integer,
    last_requests integer,
    last_links integer,
    last_overdue integer,
    registered_after_id bigint DEFAULT 0 NOT NULL,
    registered_cycle_started_at timestamp with time zone,
    registered_cycle_seen integer DEFAULT 0 NOT NULL,
    registered_cycle_total integer,
    registered_cycle_finished_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    users_after_id uuid,
    users_round_started_at timestamp with time zone,
    users_round_ended_at timestamp with time zone,
    CONSTRAINT audit_state_last_audited_check CHECK ((last_audited >= 0)),
    CONSTRAINT audit_state_last_error_code_check CHECK (((last_error_code IS NULL) OR ((last_error_code)::text ~ '^[a-z][a-z0-9_]{0,63}$'::text))),
    CONSTRAINT audit_state_last_links_check CHECK ((last_links >= 0)),
    CONSTRAINT audit_state_last_overdue_check CHECK ((last_overdue >= 0)),
    CONSTRAINT audit_state_last_requests_check CHECK ((last_requests >= 0)),
    CONSTRAINT audit_state_last_run_mode_check CHECK (((last_run_mode)::text = ANY ((ARRAY['sample'::character varying, 'all'::character varying])::text[]))),
    CONSTRAINT audit_state_last_run_status_check CHECK (((last_run_status)::text = ANY ((ARRAY['running'::character varying, 'succeeded'::character varying, 'failed'::character varying])::text[]))),
    CONSTRAINT audit_state_lease CHECK ((((last_run_status)::text = 'running'::text) = (lease_token IS NOT NULL))),
    CONSTRAINT audit_state_registered_after_id_check CHECK ((registered_after_id >= 0)),
    CONSTRAINT audit_state_registered_cycle_seen_check CHECK ((registered_cycle_seen >= 0)),
    CONSTRAINT audit_state_registered_cycle_total_check CHECK ((registered_cycle_total >= 0)),
    CONSTRAINT audit_state_singleton_check CHECK (singleton)
);

--
-- Name: TABLE audit_state; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.audit_state IS 'The convergence audit''s state (one row): the run in progress (lease), the last run''s outcome and counts, and the cursor of its scan of registered Contacts.';

--
-- Name: COLUMN audit_state.singleton; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.singleton IS 'Always true: the table has one row.';

--
-- Name: COLUMN audit_state.last_run_started_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.last_run_started_at IS 'When the last (or current) run was claimed.';

--
-- Name: COLUMN audit_state.last_run_mode; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.last_run_mode IS 'sample (the least recently audited links) or all (every active link, {"all": true}).';

--
-- Name: COLUMN audit_state.last_run_status; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.last_run_status IS 'running, succeeded or failed.';

--
-- Name: COLUMN audit_state.lease_token; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.lease_token IS 'Fences the run in progress: only its holder records findings and finishes it.';

--
-- Name: COLUMN audit_state.last_success_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.last_success_at IS 'When the last run finished successfully (bitrix_sync_audit_last_success_timestamp_seconds).';

--
-- Name: COLUMN audit_state.last_all_success_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.last_all_success_at IS 'When the last full ({"all": true}) run finished successfully.';

--
-- Name: COLUMN audit_state.last_error_code; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.last_error_code IS 'Safe code of the last failed run.';

--
-- Name: COLUMN audit_state.last_audited; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.last_audited IS 'Links the last finished run compared with their Contacts.';

--
-- Name: COLUMN audit_state.last_requests; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.last_requests IS 'HTTP requests the last finished run sent to the portal.';

--
-- Name: COLUMN audit_state.last_links; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.last_links IS 'Active links of active users when the last run finished.';

--
-- Name: COLUMN audit_state.last_overdue; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.last_overdue IS 'Of those, the links not compared within audit.period_days when the last run finished (bitrix_sync_audit_overdue_links).';

--
-- Name: COLUMN audit_state.registered_after_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.registered_after_id IS 'Keyset cursor of the scan of registered Contacts: the scan goes on above this Contact ID (0: a new cycle).';

--
-- Name: COLUMN audit_state.registered_cycle_started_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.registered_cycle_started_at IS 'When the current cycle of the registered scan started.';

--
-- Name: COLUMN audit_state.registered_cycle_seen; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.registered_cycle_seen IS 'Registered Contacts the current cycle has listed so far.';

--
-- Name: COLUMN audit_state.registered_cycle_total; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.registered_cycle_total IS 'Registered Contacts the last complete cycle listed: sizes the pages of each sampled run.';

--
-- Name: COLUMN audit_state.registered_cycle_finished_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.registered_cycle_finished_at IS 'When the last cycle of the registered scan completed.';

--
-- Name: COLUMN audit_state.created_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.created_at IS 'When the audit was installed; stands for the last success until the first run succeeds.';

--
-- Name: COLUMN audit_state.updated_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.updated_at IS 'Last change of the row.';

--
-- Name: COLUMN audit_state.users_after_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.users_after_id IS 'Where the sampled runs'' round over the users stands: the last user id the last window judged; null: the next window starts from the first user.';

--
-- Name: COLUMN audit_state.users_round_started_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.users_round_started_at IS 'When the current round of the sampled runs over the users (the user kinds) started.';

--
-- Name: COLUMN audit_state.users_round_ended_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_state.users_round_ended_at IS 'When the last round over the users ended (its last window reached past the last user); every user was judged between its start and then.';

--
-- Name: _check_audit_lease(uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._check_audit_lease(p_lease_token uuid) RETURNS bitrix_sync.audit_state
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.audit_state;
begin
  select * into v_row from bitrix_sync.audit_state s
   where s.singleton and s.last_run_status = 'running' and s.lease_token = p_lease_token;
  if not found then
    perform bitrix_sync._refuse_stale('convergence audit run', 'audit');
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION _check_audit_lease(p_lease_token uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._check_audit_lease(p_lease_token uuid) IS 'Internal: the audit state when p_lease_token holds the running audit; BS001 otherwise (the run was taken over after audit.lease_sec).';

--
-- Name: _check_bitrix_error(text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._check_bitrix_error(p_error text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
begin
  -- Bitrix24 error codes are identifiers (QUERY_LIMIT_EXCEEDED, ERROR_CORE, expired_token); the
  -- error_description next to them may quote field values, so only the identifier is kept (§9).
  if p_error is not null and p_error !~ '^[A-Za-z][A-Za-z0-9_]{0,63}$' then
    raise exception 'bitrix error must be the Bitrix24 error code (an identifier of at most 64 characters)'
      using errcode = 'BS004',
            hint = 'Pass the reply''s "error" field, e.g. QUERY_LIMIT_EXCEEDED, never error_description or raw text.';
  end if;
end $_$;

--
-- Name: FUNCTION _check_bitrix_error(p_error text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._check_bitrix_error(p_error text) IS 'Refuses anything but a Bitrix24 error code identifier (null allowed), so raw reply text never reaches crm_commands or technical_dead_letters. SQLSTATE BS004.';

--
-- Name: _check_code(text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._check_code(p_code text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
begin
  -- ^[a-z0-9][a-z0-9_.]{0,63}$ without the counted repetition, which PostgreSQL's regular
  -- expressions pay for on every call (about 5 µs against 0.5; issue 36, migration 000048).
  if p_code is null or length(p_code) > 64 or p_code !~ '^[a-z0-9][a-z0-9_.]*$' then
    raise exception 'error code must be a safe snake_case code of at most 64 characters'
      using errcode = 'BS004',
            hint = 'Pass a classifier code such as crm_timeout, never raw error text (§9, §16).';
  end if;
end $_$;

--
-- Name: FUNCTION _check_code(p_code text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._check_code(p_code text) IS 'Refuses anything but a safe snake_case error code, so raw text (which may carry PII or secrets) never reaches a row. SQLSTATE BS004.';

--
-- Name: _check_limiter_name(text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._check_limiter_name(p_what text, p_value text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if p_value is null or length(p_value) not between 1 and 200 then
    raise exception 'limiter % must be a non-empty name of at most 200 characters', p_what
      using errcode = 'BS012', hint = 'Pass the portal host as the bucket and a REST method name as the method.';
  end if;
end $$;

--
-- Name: FUNCTION _check_limiter_name(p_what text, p_value text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._check_limiter_name(p_what text, p_value text) IS 'Refuses an empty or oversized bucket/holder/method name with BS012.';

--
-- Name: _check_queue_tables(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._check_queue_tables() RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_ours integer;
begin
  select count(*)::integer into v_ours
    from pg_catalog.pg_class c, pg_catalog.pg_namespace n
   where n.nspname = 'bitrix_sync'
     and c.oid in (pg_catalog.to_regclass('han_app.sync_queue'), pg_catalog.to_regclass('han_app.sync_queue_journal'))
     and c.relkind = 'r' and c.relowner = n.nspowner;
  if v_ours <> 2 then
    raise exception 'han_app.sync_queue or han_app.sync_queue_journal is no longer the project''s own table'
      using errcode = 'BS097',
            hint = 'Someone dropped it and made another in its place (the owner of schema han_app may): nothing is written to it. select * from bitrix_sync.app_table_hooks() names it; restore the table from the migrations with the DBA (docs/security.md, "The App''s tables").';
  end if;
end $$;

--
-- Name: FUNCTION _check_queue_tables(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._check_queue_tables() IS 'Internal: BS097 unless han_app.sync_queue and han_app.sync_queue_journal are ordinary tables owned by the owner of schema bitrix_sync. Called first by every function that writes them, so that a table the owner of han_app put in their place never runs its code with the project''s rights.';

--
-- Name: time_ordered_uuid(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.time_ordered_uuid() RETURNS uuid
    LANGUAGE sql PARALLEL SAFE
    AS $$
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

--
-- Name: FUNCTION time_ordered_uuid(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.time_ordered_uuid() IS 'A version 7 UUID (RFC 9562): the current Unix time in milliseconds in its first 48 bits, then 74 random bits. The default of the hot tables'' UUID keys, so that rows made together share index leaves. Inlined into its callers: no pinned search_path, every operator and name schema-qualified.';

--
-- Name: rebind_requests; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.rebind_requests (
    id uuid DEFAULT bitrix_sync.time_ordered_uuid() NOT NULL,
    user_id uuid NOT NULL,
    previous_contact_id character varying(128),
    target_contact_id character varying(128) NOT NULL,
    reason text NOT NULL,
    operator_id character varying(128) NOT NULL,
    workflow_id uuid,
    status character varying(16) DEFAULT 'requested'::character varying NOT NULL,
    failure_code character varying(64),
    requested_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    completed_at timestamp with time zone,
    outcome character varying(64),
    cancelled_by character varying(128),
    cancel_reason text,
    requested_db_user character varying(128) DEFAULT SESSION_USER,
    cancelled_db_user character varying(128),
    CONSTRAINT rebind_requests_operator_id_check CHECK ((length(btrim((operator_id)::text)) > 0)),
    CONSTRAINT rebind_requests_reason_check CHECK (((length(btrim(reason)) >= 3) AND (length(btrim(reason)) <= 500))),
    CONSTRAINT rebind_requests_status_check CHECK (((status)::text = ANY ((ARRAY['requested'::character varying, 'in_progress'::character varying, 'succeeded'::character varying, 'failed'::character varying, 'cancelled'::character varying])::text[]))),
    CONSTRAINT rebind_requests_target_contact_id_check CHECK (((target_contact_id)::text ~ '^[1-9][0-9]{0,17}$'::text))
);

--
-- Name: TABLE rebind_requests; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.rebind_requests IS 'Audited requests to move a user''s link to another Contact (§5.4). Created by request_bitrix_contact_rebind(); the mapping changes only when the workflow has updated both Contacts.';

--
-- Name: COLUMN rebind_requests.reason; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.rebind_requests.reason IS 'Operator''s justification (free text written by an admin; not derived from CRM data).';

--
-- Name: COLUMN rebind_requests.operator_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.rebind_requests.operator_id IS 'Who asked (operator identifier, not a DB role).';

--
-- Name: COLUMN rebind_requests.outcome; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.rebind_requests.outcome IS 'What the CRM holds when the request finished: rebound, crm_unchanged, target_write_unconfirmed, target_written, target_written_clear_unconfirmed, target_written_previous_cleared (docs/admin.md).';

--
-- Name: COLUMN rebind_requests.cancelled_by; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.rebind_requests.cancelled_by IS 'Operator who cancelled the request (cancel_rebind_request).';

--
-- Name: COLUMN rebind_requests.cancel_reason; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.rebind_requests.cancel_reason IS 'Why the operator cancelled it (free text written by an admin).';

--
-- Name: COLUMN rebind_requests.requested_db_user; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.rebind_requests.requested_db_user IS 'The database login (session_user) that called request_bitrix_contact_rebind(); operator_id is the name it declared. Null for requests recorded before this column existed.';

--
-- Name: COLUMN rebind_requests.cancelled_db_user; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.rebind_requests.cancelled_db_user IS 'The database login (session_user) that called cancel_rebind_request(); cancelled_by is the name it declared.';

--
-- Name: _close_rebind_request(uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._close_rebind_request(p_workflow_id uuid) RETURNS bitrix_sync.rebind_requests
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_wf bitrix_sync.workflow_instances;
  v_row bitrix_sync.rebind_requests;
begin
  select * into v_wf from bitrix_sync.workflow_instances w where w.id = p_workflow_id for update;
  if not found or v_wf.workflow_type <> 'contact.rebind' then
    raise exception 'workflow % is not a contact.rebind workflow', p_workflow_id
      using errcode = 'BS005', hint = 'Only a rebind''s workflow has a request to close.';
  end if;
  if v_wf.state not in ('succeeded', 'failed', 'cancelled') then
    raise exception 'workflow % is %, not finished: its rebind request stays open', p_workflow_id, v_wf.state
      using errcode = 'BS002', hint = 'A request closes when its workflow reaches succeeded, failed or cancelled.';
  end if;
  -- A cancelled workflow cancels its request; any other end without complete_rebind fails it with
  -- the workflow's code (a refusal, a CRM error, the retry horizon of a command or of a step).
  update bitrix_sync.rebind_requests r
     set status = case when v_wf.state = 'cancelled' then 'cancelled' else 'failed' end,
         failure_code = case v_wf.state when 'cancelled' then null
                                        when 'failed' then coalesce(v_wf.last_error_code, 'rebind_not_completed')
                                        else 'rebind_not_completed' end,
         outcome = bitrix_sync._rebind_crm_outcome(v_wf.id),
         completed_at = now()
   where r.workflow_id = v_wf.id and r.status in ('requested', 'in_progress')
  returning * into v_row;
  return v_row;
end $$;

--
-- Name: FUNCTION _close_rebind_request(p_workflow_id uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._close_rebind_request(p_workflow_id uuid) IS 'Internal (the trigger _300_close_rebind_request): the still open request of a finished contact.rebind workflow, read by id under the row''s lock, becomes failed (failure_code = the workflow''s last_error_code) or cancelled, with the outcome it left in the CRM. BS005 for another kind of workflow, BS002 for one not finished. Returns null when the request was already finished. Granted to nobody.';

--
-- Name: _command_first_attempt(bitrix_sync.crm_commands); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._command_first_attempt(p_row bitrix_sync.crm_commands) RETURNS timestamp with time zone
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  -- A command refused before it was ever sent has only its creation to count from.
  select coalesce(p_row.first_sent_at, p_row.created_at)
$$;

--
-- Name: FUNCTION _command_first_attempt(p_row bitrix_sync.crm_commands); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._command_first_attempt(p_row bitrix_sync.crm_commands) IS 'Internal: where a command''s retry horizon starts: its first send, or its creation if it was never sent.';

--
-- Name: technical_dead_letters; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.technical_dead_letters (
    id bigint NOT NULL,
    source character varying(16) NOT NULL,
    source_id character varying(64) NOT NULL,
    workflow_id uuid,
    command_id bigint,
    operation character varying(64) NOT NULL,
    error_code character varying(64) NOT NULL,
    http_status integer,
    bitrix_error character varying(64),
    attempt_count integer DEFAULT 0 NOT NULL,
    first_attempt_at timestamp with time zone,
    deadline_at timestamp with time zone,
    correlation_id uuid,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    resolved_at timestamp with time zone,
    resolved_by character varying(128),
    resolution character varying(16),
    resolution_reason text,
    requeued_to character varying(80),
    resolved_db_user character varying(128),
    CONSTRAINT technical_dead_letters_error_code_check CHECK (((error_code)::text ~ '^[a-z0-9_.]+$'::text)),
    CONSTRAINT technical_dead_letters_resolution_check CHECK ((((resolution IS NULL) AND (resolved_at IS NULL) AND (resolved_by IS NULL) AND (resolution_reason IS NULL) AND (requeued_to IS NULL)) OR (((resolution)::text = ANY ((ARRAY['acknowledged'::character varying, 'requeued'::character varying])::text[])) AND (resolved_at IS NOT NULL) AND (resolved_by IS NOT NULL) AND ((length(btrim(resolution_reason)) >= 3) AND (length(btrim(resolution_reason)) <= 500)) AND (((resolution)::text = 'requeued'::text) = (requeued_to IS NOT NULL))))),
    CONSTRAINT technical_dead_letters_source_check CHECK (((source)::text = ANY ((ARRAY['sync_queue'::character varying, 'workflow'::character varying, 'crm_command'::character varying, 'webhook'::character varying])::text[])))
);

--
-- Name: TABLE technical_dead_letters; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.technical_dead_letters IS 'Technical failures that exhausted retries or can never succeed (§9). Safe codes and metadata only: no raw replies, no PII, no secrets. Business conflicts go to business_alerts instead.';

--
-- Name: COLUMN technical_dead_letters.operation; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.technical_dead_letters.operation IS 'Task or command type, e.g. contact.add.';

--
-- Name: COLUMN technical_dead_letters.error_code; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.technical_dead_letters.error_code IS 'Safe snake_case code from the classifier.';

--
-- Name: COLUMN technical_dead_letters.resolved_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.technical_dead_letters.resolved_at IS 'When an admin acknowledged or requeued it; null while open.';

--
-- Name: COLUMN technical_dead_letters.resolved_by; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.technical_dead_letters.resolved_by IS 'Operator identifier given to acknowledge_dead_letter() or requeue_dead_letter().';

--
-- Name: COLUMN technical_dead_letters.resolution; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.technical_dead_letters.resolution IS 'acknowledged (looked at, nothing re-sent) | requeued (a new attempt was started).';

--
-- Name: COLUMN technical_dead_letters.resolution_reason; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.technical_dead_letters.resolution_reason IS 'The operator''s reason, written by an admin (3 to 500 characters).';

--
-- Name: COLUMN technical_dead_letters.requeued_to; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.technical_dead_letters.requeued_to IS 'What carries the new attempt: sync_queue:<id>, webhook:<id>, workflow:<id> or alert:<id>.';

--
-- Name: COLUMN technical_dead_letters.resolved_db_user; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.technical_dead_letters.resolved_db_user IS 'The database login (session_user) that acknowledged or requeued the dead letter; resolved_by is the name it declared.';

--
-- Name: _covered_dead_letters(bitrix_sync.technical_dead_letters); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._covered_dead_letters(p_dl bitrix_sync.technical_dead_letters) RETURNS bigint[]
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  -- The open entries one new attempt answers: the workflow's, or the alert's, or just this one.
  select coalesce(array_agg(d.id order by d.id), array[p_dl.id])
    from bitrix_sync.technical_dead_letters d
   where d.resolved_at is null
     and (d.id = p_dl.id
          or (p_dl.workflow_id is not null and d.workflow_id = p_dl.workflow_id)
          or (p_dl.source = 'crm_command' and p_dl.workflow_id is null and d.source = 'crm_command'
              and d.command_id in (select c.id from bitrix_sync.crm_commands c
                                    where c.alert_id = (select x.alert_id from bitrix_sync.crm_commands x
                                                         where x.id = p_dl.command_id))))
$$;

--
-- Name: FUNCTION _covered_dead_letters(p_dl bitrix_sync.technical_dead_letters); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._covered_dead_letters(p_dl bitrix_sync.technical_dead_letters) IS 'Internal: the ids of the open dead letters a requeue of p_dl answers: every open entry of its workflow, or of its alert''s commands, or p_dl alone.';

--
-- Name: _dead_letter(text, text, text, text, integer, timestamp with time zone, uuid, bigint, uuid, integer, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._dead_letter(p_source text, p_source_id text, p_operation text, p_error_code text, p_attempt_count integer, p_first_attempt_at timestamp with time zone, p_workflow_id uuid, p_command_id bigint, p_correlation_id uuid, p_http_status integer, p_bitrix_error text) RETURNS void
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  insert into bitrix_sync.technical_dead_letters
    (source, source_id, workflow_id, command_id, operation, error_code, http_status, bitrix_error,
     attempt_count, first_attempt_at, deadline_at, correlation_id)
  values (p_source, p_source_id, p_workflow_id, p_command_id, p_operation, p_error_code, p_http_status,
          left(p_bitrix_error, 64), p_attempt_count, p_first_attempt_at,
          bitrix_sync._retry_deadline(p_first_attempt_at), p_correlation_id)
$$;

--
-- Name: FUNCTION _dead_letter(p_source text, p_source_id text, p_operation text, p_error_code text, p_attempt_count integer, p_first_attempt_at timestamp with time zone, p_workflow_id uuid, p_command_id bigint, p_correlation_id uuid, p_http_status integer, p_bitrix_error text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._dead_letter(p_source text, p_source_id text, p_operation text, p_error_code text, p_attempt_count integer, p_first_attempt_at timestamp with time zone, p_workflow_id uuid, p_command_id bigint, p_correlation_id uuid, p_http_status integer, p_bitrix_error text) IS 'Internal: writes the technical DLQ row of a row given up (source and its id, operation, safe error code, attempts spent, first attempt; deadline = _retry_deadline(first attempt)). The one writer of technical_dead_letters rows.';

--
-- Name: _dead_letter_command_row(bitrix_sync.crm_commands, text, integer, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._dead_letter_command_row(p_row bitrix_sync.crm_commands, p_error_code text, p_http_status integer, p_bitrix_error text) RETURNS bitrix_sync.crm_commands
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.crm_commands;
  v_first timestamptz := bitrix_sync._command_first_attempt(p_row);
begin
  update bitrix_sync.crm_commands
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code,
         last_http_status = p_http_status, last_bitrix_error = left(p_bitrix_error, 64),
         deadline_at = bitrix_sync._retry_deadline(v_first),
         lease_token = null, locked_by = null, locked_until = null
   where id = p_row.id
  returning * into v_row;
  perform bitrix_sync._dead_letter('crm_command', v_row.id::text, v_row.command_type, p_error_code,
    v_row.attempt_count - v_row.limit_hits, v_first, v_row.workflow_id, v_row.id, v_row.correlation_id,
    p_http_status, p_bitrix_error);
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION _dead_letter_command_row(p_row bitrix_sync.crm_commands, p_error_code text, p_http_status integer, p_bitrix_error text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._dead_letter_command_row(p_row bitrix_sync.crm_commands, p_error_code text, p_http_status integer, p_bitrix_error text) IS 'Internal: moves a held command to dead_letter, writes the technical DLQ row (first attempt and horizon) and wakes its workflow.';

--
-- Name: sync_queue; Type: TABLE; Schema: han_app; Owner: -
--

CREATE TABLE han_app.sync_queue (
    id uuid DEFAULT bitrix_sync.time_ordered_uuid() NOT NULL,
    task_type character varying(64) NOT NULL,
    entity_type character varying(64) NOT NULL,
    entity_id uuid NOT NULL,
    dedup_key character varying(255) NOT NULL,
    payload_json jsonb DEFAULT '{}'::jsonb NOT NULL,
    status character varying(16) DEFAULT 'pending'::character varying NOT NULL,
    attempt_count integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    locked_by character varying(128),
    locked_until timestamp with time zone,
    lease_token uuid,
    last_error_code character varying(64),
    last_error_at timestamp with time zone,
    completed_at timestamp with time zone,
    cancel_reason character varying(255),
    CONSTRAINT sync_queue_attempt_count_check CHECK ((attempt_count >= 0)),
    CONSTRAINT sync_queue_lease_check CHECK ((((status)::text = 'leased'::text) = ((lease_token IS NOT NULL) AND (locked_until IS NOT NULL) AND (locked_by IS NOT NULL)))),
    CONSTRAINT sync_queue_status_check CHECK (((status)::text = ANY ('{pending,leased,processed,retry_wait,dead_letter,cancelled}'::text[]))),
    CONSTRAINT sync_queue_task_type_check CHECK ((((status)::text = ANY ('{processed,dead_letter,cancelled}'::text[])) OR ((task_type)::text = ANY ('{contact.map_or_create,contact.update,contact.deactivate,contact.rebind}'::text[]))))
)
WITH (autovacuum_vacuum_scale_factor='0.02', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_insert_scale_factor='0.02', autovacuum_vacuum_insert_threshold='1000', autovacuum_analyze_scale_factor='0.01', autovacuum_analyze_threshold='1000', autovacuum_vacuum_cost_delay='1');

--
-- Name: TABLE sync_queue; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON TABLE han_app.sync_queue IS 'Business intents of the App for the CRM (§6.1), written by han_app.enqueue_contact_sync() in the App''s own transaction and processed by bitrix-sync under leases. Payloads carry identifiers only, never PII.';

--
-- Name: COLUMN sync_queue.task_type; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue.task_type IS 'contact.map_or_create | contact.update | contact.deactivate | contact.rebind.';

--
-- Name: COLUMN sync_queue.entity_type; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue.entity_type IS 'Always ''user''.';

--
-- Name: COLUMN sync_queue.entity_id; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue.entity_id IS 'han_app.user_identity.id, also for profile events.';

--
-- Name: COLUMN sync_queue.dedup_key; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue.dedup_key IS 'One active (pending|leased|retry_wait) row per key: <task_type>:user:<user id>. Finished rows do not block new intents.';

--
-- Name: COLUMN sync_queue.payload_json; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue.payload_json IS '{schema_version, user_id, reason, source_updated_at}: identifiers and safe versions only (§6.2).';

--
-- Name: COLUMN sync_queue.status; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue.status IS 'pending | leased | processed | retry_wait | dead_letter | cancelled (§6.1).';

--
-- Name: COLUMN sync_queue.attempt_count; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue.attempt_count IS 'Claims so far.';

--
-- Name: COLUMN sync_queue.next_attempt_at; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue.next_attempt_at IS 'Not claimable before this time.';

--
-- Name: COLUMN sync_queue.created_at; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue.created_at IS 'When the intent was first recorded.';

--
-- Name: COLUMN sync_queue.updated_at; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue.updated_at IS 'Last change, including coalescing of a newer intent.';

--
-- Name: COLUMN sync_queue.locked_by; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue.locked_by IS 'Worker id holding the lease.';

--
-- Name: COLUMN sync_queue.locked_until; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue.locked_until IS 'Lease expiry; an expired lease may be reclaimed by anyone.';

--
-- Name: COLUMN sync_queue.lease_token; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue.lease_token IS 'Fencing token, new on every claim; every completion must present it.';

--
-- Name: COLUMN sync_queue.last_error_code; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue.last_error_code IS 'Safe error code of the last failure (never raw text).';

--
-- Name: COLUMN sync_queue.last_error_at; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue.last_error_at IS 'When last_error_code was set.';

--
-- Name: COLUMN sync_queue.completed_at; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue.completed_at IS 'When the row reached processed, dead_letter or cancelled.';

--
-- Name: COLUMN sync_queue.cancel_reason; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue.cancel_reason IS 'Why the row was cancelled, e.g. initial_full_sync_cutover.';

--
-- Name: _dead_letter_sync_task_row(han_app.sync_queue, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._dead_letter_sync_task_row(p_row han_app.sync_queue, p_error_code text) RETURNS han_app.sync_queue
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row han_app.sync_queue;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  update han_app.sync_queue
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code, last_error_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_row.id
  returning * into v_row;
  -- The intent's first attempt is its arrival: it is claimed as soon as it is due.
  perform bitrix_sync._dead_letter('sync_queue', v_row.id::text, v_row.task_type, p_error_code,
    v_row.attempt_count, v_row.created_at, null, null, null, null, null);
  return v_row;
end $$;

--
-- Name: FUNCTION _dead_letter_sync_task_row(p_row han_app.sync_queue, p_error_code text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._dead_letter_sync_task_row(p_row han_app.sync_queue, p_error_code text) IS 'Internal: moves a held intent to dead_letter and writes its technical DLQ row (first attempt = created_at).';

--
-- Name: webhook_inbox; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.webhook_inbox (
    id bigint NOT NULL,
    receiver character varying(16) NOT NULL,
    event_type character varying(32) DEFAULT 'robot'::character varying NOT NULL,
    event_id character varying(128),
    source_ts timestamp with time zone,
    entity_type_id integer NOT NULL,
    entity_id character varying(32) NOT NULL,
    status character varying(16) DEFAULT 'received'::character varying NOT NULL,
    coalesced_into bigint,
    dedup_fingerprint character varying(64),
    source_ip inet,
    attempt_count integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    lease_token uuid,
    locked_by character varying(128),
    locked_until timestamp with time zone,
    outcome character varying(64),
    last_error_code character varying(64),
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    status_at timestamp with time zone DEFAULT now() NOT NULL,
    processed_at timestamp with time zone,
    trace_context text,
    CONSTRAINT webhook_inbox_attempt_count_check CHECK ((attempt_count >= 0)),
    CONSTRAINT webhook_inbox_coalesced CHECK (((((status)::text = 'coalesced'::text) = (coalesced_into IS NOT NULL)) OR ((status)::text = 'processed'::text))),
    CONSTRAINT webhook_inbox_entity_id_check CHECK (((entity_id)::text ~ '^[1-9][0-9]{0,17}$'::text)),
    CONSTRAINT webhook_inbox_entity_type_id_check CHECK ((entity_type_id > 0)),
    CONSTRAINT webhook_inbox_event_type_check CHECK (((event_type)::text ~ '^[a-z][a-z0-9_.]{1,31}$'::text)),
    CONSTRAINT webhook_inbox_lease CHECK ((((status)::text = 'processing'::text) = (lease_token IS NOT NULL)))
)
WITH (autovacuum_vacuum_scale_factor='0.02', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_insert_scale_factor='0.02', autovacuum_vacuum_insert_threshold='1000', autovacuum_analyze_scale_factor='0.01', autovacuum_analyze_threshold='1000', autovacuum_vacuum_cost_delay='1');

--
-- Name: TABLE webhook_inbox; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.webhook_inbox IS 'Durable record of each accepted robot webhook (§10.1, §7.3), written before the 200 reply. Pending events of one entity are coalesced into one CRM read. Holds no query string, token or body.';

--
-- Name: COLUMN webhook_inbox.event_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.webhook_inbox.event_id IS 'Stable event ID when the source provides one (the robot does not); unique when present.';

--
-- Name: COLUMN webhook_inbox.source_ts; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.webhook_inbox.source_ts IS 'Source timestamp when provided; ordering is otherwise decided by the Contact''s updatedTime at read time.';

--
-- Name: COLUMN webhook_inbox.entity_type_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.webhook_inbox.entity_type_id IS '3 for Contacts, the smart-process entityTypeId for alerts.';

--
-- Name: COLUMN webhook_inbox.entity_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.webhook_inbox.entity_id IS 'Contact ID or smart-process item ID from document_id[2].';

--
-- Name: COLUMN webhook_inbox.coalesced_into; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.webhook_inbox.coalesced_into IS 'The event whose single CRM read covered this one.';

--
-- Name: COLUMN webhook_inbox.source_ip; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.webhook_inbox.source_ip IS 'Peer address, audit metadata only (never a metric label).';

--
-- Name: COLUMN webhook_inbox.outcome; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.webhook_inbox.outcome IS 'Safe outcome code: applied, stale, unknown_mapping, user_id_mismatch, contact_not_found, ...';

--
-- Name: COLUMN webhook_inbox.trace_context; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.webhook_inbox.trace_context IS 'W3C traceparent of the receiver''s inbox write span for this event; its processing is traced as its child. Null when tracing was off.';

--
-- Name: _dead_letter_webhook_row(bitrix_sync.webhook_inbox, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._dead_letter_webhook_row(p_row bitrix_sync.webhook_inbox, p_error_code text) RETURNS bitrix_sync.webhook_inbox
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.webhook_inbox;
begin
  update bitrix_sync.webhook_inbox
     set status = 'dead_letter', last_error_code = p_error_code, status_at = now(),
         lease_token = null, locked_by = null, locked_until = null
   where id = p_row.id
  returning * into v_row;
  update bitrix_sync.webhook_inbox
     set status = 'processed', outcome = 'coalesced_into_dead_letter', processed_at = now(), status_at = now()
   where coalesced_into = p_row.id and status = 'coalesced';
  -- An event is first attempted when it arrives: the receiver wakes the processor at once.
  perform bitrix_sync._dead_letter('webhook', v_row.id::text, 'webhook.' || v_row.receiver, p_error_code,
    v_row.attempt_count, v_row.received_at, null, null, null, null, null);
  return v_row;
end $$;

--
-- Name: FUNCTION _dead_letter_webhook_row(p_row bitrix_sync.webhook_inbox, p_error_code text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._dead_letter_webhook_row(p_row bitrix_sync.webhook_inbox, p_error_code text) IS 'Internal: moves a held event to dead_letter with its coalesced events and writes the technical DLQ row (first attempt = received_at).';

--
-- Name: _drift_busy_users(timestamp with time zone, uuid[]); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._drift_busy_users(p_since timestamp with time zone, p_user_ids uuid[] DEFAULT NULL::uuid[]) RETURNS TABLE(user_id uuid)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  -- Users the ordinary paths are working on, or worked on since the audit read their data: an
  -- intent recorded or queued, a workflow unfinished or moved since p_since, a snapshot written
  -- since p_since, a Contact webhook waiting. What the audit read of them may be out of date, and
  -- what is out of step may be on its way back: such users are judged by a later run. Only the
  -- users asked about, each through its own index (the journal, which the fold keeps short, aside):
  -- never a scan of the snapshots or the history.
  select j.user_id from han_app.sync_queue_journal j where j.user_id = any(p_user_ids)
  union
  select q.entity_id from han_app.sync_queue q
   where q.entity_id = any(p_user_ids) and q.status in ('pending', 'leased', 'retry_wait')
  union
  select w.user_id from bitrix_sync.workflow_instances w
   where w.user_id = any(p_user_ids)
     and (w.state not in ('succeeded', 'failed', 'cancelled') or w.finished_at >= p_since)
  union
  select s.user_id from bitrix_sync.contact_snapshots s
   where s.user_id = any(p_user_ids) and s.updated_at >= p_since
  union
  select m.entity_id from bitrix_sync.webhook_inbox i
    join bitrix_sync.entity_external_mapping m on m.external_id = i.entity_id and m.status = 'active'
   where i.status in ('received', 'retry_wait', 'processing') and i.receiver = 'contact'
     and m.entity_id = any(p_user_ids)
$$;

--
-- Name: FUNCTION _drift_busy_users(p_since timestamp with time zone, p_user_ids uuid[]); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._drift_busy_users(p_since timestamp with time zone, p_user_ids uuid[]) IS 'Internal: those of p_user_ids (null: none) with work in progress or done since p_since: an intent in the journal or the queue, a workflow unfinished or changed, a snapshot written, a Contact webhook waiting. The audit leaves their findings as they are this run.';

--
-- Name: _drift_kind_group(text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._drift_kind_group(p_kind text) RETURNS text
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select case
    when p_kind in ('contact_missing', 'phone_missing', 'user_id_wrong', 'registered_wrong', 'crm_master_behind') then 'link'
    when p_kind in ('unmapped_user', 'inactive_user_linked') then 'user'
    when p_kind in ('registered_inactive_user', 'registered_unknown_user') then 'registered'
  end
$$;

--
-- Name: FUNCTION _drift_kind_group(p_kind text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._drift_kind_group(p_kind text) IS 'Internal: which part of an audit run judges a drift kind: link (a link compared with its Contact), user (App users and links, in SQL), registered (the scan of registered Contacts); null for an unknown kind.';

--
-- Name: _drift_repair_intent(text[], boolean); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._drift_repair_intent(p_kinds text[], p_eligible boolean) RETURNS text
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select case
    -- The user is gone or inactive, or their Contact is registered against them: the deactivation
    -- turns the flag off and closes what is still open (§5.3).
    when p_kinds && array['inactive_user_linked', 'registered_inactive_user', 'registered_unknown_user'] then 'contact.deactivate'
    -- The linked Contact is gone: the update's not-found rule breaks the link, keeps the snapshot
    -- and raises contact_not_found for a person (§5.2); for an inactive user, the deactivation's (§5.3).
    when 'contact_missing' = any(p_kinds) then
      case when p_eligible then 'contact.update' else 'contact.deactivate' end
    -- Everything else is put right by map_or_create: it reads the linked Contact, applies its
    -- CRM-master fields, restores an emptied user id and the flag, and writes a missing phone
    -- (or, without a link, searches and links as for a new user, §5.1).
    when cardinality(p_kinds) > 0 then 'contact.map_or_create'
  end
$$;

--
-- Name: FUNCTION _drift_repair_intent(p_kinds text[], p_eligible boolean); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._drift_repair_intent(p_kinds text[], p_eligible boolean) IS 'Internal: the intent repair_drift records for a user with these drift kinds (p_eligible: identity and profile active): contact.deactivate, contact.update (a missing Contact of an active user) or contact.map_or_create.';

--
-- Name: workflow_instances; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.workflow_instances (
    id uuid DEFAULT bitrix_sync.time_ordered_uuid() NOT NULL,
    workflow_type character varying(32) NOT NULL,
    intent_type character varying(32) NOT NULL,
    user_id uuid NOT NULL,
    contact_id character varying(128),
    state character varying(16) DEFAULT 'created'::character varying NOT NULL,
    current_step character varying(64) DEFAULT 'start'::character varying NOT NULL,
    step_data jsonb DEFAULT '{}'::jsonb NOT NULL,
    source_task_id uuid,
    revision integer DEFAULT 1 NOT NULL,
    processed_revision integer DEFAULT 0 NOT NULL,
    content_hash character varying(64),
    attempt_count integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    deadline_at timestamp with time zone DEFAULT bitrix_sync._retry_deadline(now()) NOT NULL,
    lease_token uuid,
    locked_by character varying(128),
    locked_until timestamp with time zone,
    outcome character varying(64),
    last_error_code character varying(64),
    correlation_id uuid DEFAULT gen_random_uuid() NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    trace_context text,
    held_intent_type character varying(32),
    held_source_task_id uuid,
    held_content_hash character varying(64),
    held_at timestamp with time zone,
    requeued_at timestamp with time zone
)
WITH (autovacuum_vacuum_scale_factor='0.02', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_insert_scale_factor='0.02', autovacuum_vacuum_insert_threshold='1000', autovacuum_analyze_scale_factor='0.01', autovacuum_analyze_threshold='1000', autovacuum_vacuum_cost_delay='1');

--
-- Name: TABLE workflow_instances; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.workflow_instances IS 'One durable scenario per user at a time (§7.1). Every step is a persisted transition; at most one active CRM command per workflow.';

--
-- Name: COLUMN workflow_instances.workflow_type; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.workflow_type IS 'The scenario the workflow was started for.';

--
-- Name: COLUMN workflow_instances.intent_type; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.intent_type IS 'Newest intent joined into the workflow; it converges to this after its current step.';

--
-- Name: COLUMN workflow_instances.contact_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.contact_id IS 'Bitrix24 Contact the workflow works on, once known.';

--
-- Name: COLUMN workflow_instances.current_step; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.current_step IS 'Name of the step the workflow is at, e.g. find_by_phone, read_candidates, create_contact.';

--
-- Name: COLUMN workflow_instances.step_data; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.step_data IS 'Safe step state: Contact IDs, counts, flags. Never PII.';

--
-- Name: COLUMN workflow_instances.source_task_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.source_task_id IS 'han_app.sync_queue row that started or last joined the workflow.';

--
-- Name: COLUMN workflow_instances.revision; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.revision IS 'Intent revision: bumped when a newer intent joins the running workflow.';

--
-- Name: COLUMN workflow_instances.processed_revision; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.processed_revision IS 'Revision the last finished pass processed; a result confirms only that revision.';

--
-- Name: COLUMN workflow_instances.content_hash; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.content_hash IS 'Keyed hash of the desired App-master content ("v3:" HMAC-SHA256 over "content", NUL and the JSON; v2 in older rows; null where an unkeyed one was cleared); equal content skips a pass.';

--
-- Name: COLUMN workflow_instances.deadline_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.deadline_at IS 'Retry horizon: created_at + retry.horizon_sec (§9), as of the last retry decision. schedule_workflow_retry decides from created_at and the active setting.';

--
-- Name: COLUMN workflow_instances.lease_token; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.lease_token IS 'Fencing token of the worker stepping the workflow.';

--
-- Name: COLUMN workflow_instances.outcome; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.outcome IS 'Safe outcome code when finished, e.g. created, mapped_existing, restored, deactivated.';

--
-- Name: COLUMN workflow_instances.correlation_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.correlation_id IS 'Propagated to commands, alerts, logs and traces.';

--
-- Name: COLUMN workflow_instances.trace_context; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.trace_context IS 'W3C traceparent of the intake span of the intent the workflow converges to (the one that started it or last joined it); its steps are traced as its children. Null when tracing was off.';

--
-- Name: COLUMN workflow_instances.held_intent_type; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.held_intent_type IS 'Newest App intent that arrived while this contact.rebind ran; it starts as the next workflow when the rebind ends.';

--
-- Name: COLUMN workflow_instances.held_source_task_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.held_source_task_id IS 'han_app.sync_queue row of the held intent.';

--
-- Name: COLUMN workflow_instances.held_content_hash; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.held_content_hash IS 'Content hash of the held intent (as content_hash).';

--
-- Name: COLUMN workflow_instances.held_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.held_at IS 'When the held intent last arrived.';

--
-- Name: COLUMN workflow_instances.requeued_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.workflow_instances.requeued_at IS 'When an admin last requeued the failed workflow (requeue_dead_letter); its retry horizon counts from here instead of created_at.';

--
-- Name: _held_workflow(uuid, uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._held_workflow(p_id uuid, p_lease_token uuid) RETURNS bitrix_sync.workflow_instances
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  select * into v_row from bitrix_sync.workflow_instances
   where id = p_id and state is not distinct from 'running' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('workflow', p_id::text);
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION _held_workflow(p_id uuid, p_lease_token uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._held_workflow(p_id uuid, p_lease_token uuid) IS 'Internal: the running workflow, locked, when the caller presents its current lease token; otherwise BS001.';

--
-- Name: _is_write_command(text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._is_write_command(p_command_type text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select p_command_type in ('contact.add', 'contact.update', 'alert.add', 'alert.update')
$$;

--
-- Name: FUNCTION _is_write_command(p_command_type text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._is_write_command(p_command_type text) IS 'Commands that change the CRM: a lost reply to one of these is uncertain, not retryable.';

--
-- Name: _mask_pii(text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._mask_pii(p_value text) RETURNS text
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  -- §15: at most the first two and the last two readable characters; short values not at all, and
  -- the length is never shown.
  select case
    when p_value is null then null
    when length(pg_catalog.btrim(p_value)) < 8 then '***'
    else left(pg_catalog.btrim(p_value), 2) || '***' || right(pg_catalog.btrim(p_value), 2)
  end
$$;

--
-- Name: FUNCTION _mask_pii(p_value text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._mask_pii(p_value text) IS 'Internal: a personal value as an admin may see it (§15): the first two and last two characters around ***, or *** alone for values shorter than 8 characters; null stays null.';

--
-- Name: _normalise_settings(jsonb); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._normalise_settings(p_values jsonb) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_out jsonb := p_values;
  v_def record;
  v_num numeric;
begin
  if p_values is null or jsonb_typeof(p_values) <> 'object' then
    return p_values;
  end if;
  -- jsonb keeps a number's written scale: 1036.0 stays 1036.0, and a reader's ::integer cast of
  -- it fails. Whole numbers of integer keys are stored the way int4 prints them.
  for v_def in select s.key from bitrix_sync.settings s
                where s.value_type = 'integer' and jsonb_typeof(p_values -> s.key) = 'number' loop
    v_num := (p_values ->> v_def.key)::numeric;
    if v_num = trunc(v_num) and v_num between -2147483648 and 2147483647 then
      v_out := jsonb_set(v_out, array[v_def.key], to_jsonb(v_num::integer));
    end if;
  end loop;
  return v_out;
end $$;

--
-- Name: FUNCTION _normalise_settings(p_values jsonb); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._normalise_settings(p_values jsonb) IS 'Internal: the values with every whole number of an integer key written as int4 prints it (1036.0 and 1.0360e3 -> 1036); anything else unchanged, for _settings_errors to judge.';

--
-- Name: _open_dead_letter(bigint); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._open_dead_letter(p_id bigint) RETURNS bitrix_sync.technical_dead_letters
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.technical_dead_letters;
begin
  select * into v_row from bitrix_sync.technical_dead_letters where id = p_id for update;
  if not found then
    raise exception 'technical dead letter % does not exist', p_id
      using errcode = 'BS040', hint = 'List them with: select * from bitrix_sync.list_dead_letters();';
  end if;
  if v_row.resolved_at is not null then
    raise exception 'technical dead letter % was already % by % at %', p_id, v_row.resolution, v_row.resolved_by,
                    to_char(v_row.resolved_at at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"')
      using errcode = 'BS041',
            hint = case when v_row.resolution = 'requeued'
                        then format('Its new attempt is %s; follow that instead.', v_row.requeued_to)
                        else 'Nothing to do: a resolved dead letter stays resolved.' end;
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION _open_dead_letter(p_id bigint); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._open_dead_letter(p_id bigint) IS 'Internal: the open dead letter, locked; BS040 when there is none with that id, BS041 when it is already resolved.';

--
-- Name: _parked_decisions(text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._parked_decisions(p_reason text) RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  -- Too many candidates (the portal's answer may miss the newest), or a person's link that could not
  -- be made: a person picks the Contact or asks for a new one. Anything else is retried once the
  -- data is fixed (the App's phone, the CRM's citizenship list, the duplicates merged in the CRM).
  select case when p_reason in ('too_many_candidates', 'manual_link_not_found', 'manual_link_bound_to_other_user')
              then array['retry', 'link_contact', 'create_contact']
              else array['retry'] end
$$;

--
-- Name: FUNCTION _parked_decisions(p_reason text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._parked_decisions(p_reason text) IS 'The decisions resume_parked_workflow accepts for a parking reason: retry always; link_contact and create_contact for too_many_candidates and a refused manual link.';

--
-- Name: _paused_since(timestamp with time zone); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._paused_since(p_from timestamp with time zone) RETURNS interval
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_paused interval;
begin
  -- The part of every pause after p_from, an open pause up to now. One row per pause ever: a
  -- handful, read whole.
  select sum(least(coalesce(p.resumed_at, now()), now()) - greatest(p.paused_at, p_from))
    into v_paused
    from bitrix_sync.sync_pauses p
   where coalesce(p.resumed_at, 'infinity'::timestamptz) > p_from
     and p.paused_at < now();
  return coalesce(greatest(v_paused, interval '0'), interval '0');
end $$;

--
-- Name: FUNCTION _paused_since(p_from timestamp with time zone); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._paused_since(p_from timestamp with time zone) IS 'Internal: how long processing was paused since p_from (an open pause counts up to now). _retry_deadline() adds it, so paused time does not count against the retry horizon.';

--
-- Name: _planner_count(regclass); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._planner_count(p_rel regclass) RETURNS bigint
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  -- reltuples as the last VACUUM or ANALYZE left it (autovacuum keeps it within a few per cent).
  select c.reltuples::bigint from pg_catalog.pg_class c where c.oid = p_rel and c.reltuples >= 100000
$$;

--
-- Name: FUNCTION _planner_count(p_rel regclass); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._planner_count(p_rel regclass) IS 'Internal: the planner''s count of a table''s rows or an index''s entries when it is 100 000 or more; null below, or never counted, where the caller counts exactly. Sizes an audit run (_active_link_count, refresh_user_drift).';

--
-- Name: _read_again_after_link(text[], uuid[]); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._read_again_after_link(p_contact_ids text[], p_workflow_ids uuid[]) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
declare
  v_requeue text[];
begin
  -- A robot's call about a Contact that came while its link was being made was (or will be) answered
  -- "not ours" from a read of the mappings taken before the link commits: a manager's edit right
  -- after the create, or the portal's own workflow on create. Likewise a call answered while the
  -- Contact's registration flag was still off, before the service's own write turned it on again
  -- (a user deactivated and back: the link is made when the pass finds the Contact, the flag written
  -- a step later). One more read of the Contact covers it: an event queued now, processed once this
  -- transaction commits (a pending event of the Contact coalesces with it). Matched: the Contact's
  -- events not yet processed (a claim may have read the mappings or the Contact already), and those
  -- processed as unknown_mapping or registration_inactive since the workflow began (before it, the
  -- workflow's own read of the Contact saw the edit) or since the Contact's last link closed,
  -- whichever is earlier: an edit made while the Contact had no link (its user deactivated, say) is
  -- the user's again once linked, and a pass that restarted for a newer intent may end without the
  -- read that applies it (drill:rollback found such edits lost until the reconciliation, once for
  -- each outcome). No lock: a processor that claims after the commit sees the link and the flag;
  -- one that claimed before is matched here.
  -- Scalar subqueries, one probe of the inbox's indexes per Contact and outcome (each outcome has its
  -- partial index): an EXISTS may be planned as a hash of every unprocessed call, which a backlog of
  -- robot calls makes large.
  select array_agg(x.contact_id order by x.n) into v_requeue
    from (select i.contact_id, min(i.n) as n
            from unnest(p_contact_ids, p_workflow_ids) with ordinality as i(contact_id, workflow_id, n)
            cross join lateral (
              select least(
                       (select coalesce(min(w.created_at), now() - interval '1 hour')
                          from bitrix_sync.workflow_instances w where w.id = i.workflow_id),
                       (select max(m.closed_at) from bitrix_sync.entity_external_mapping m
                         where m.external_id = i.contact_id and m.closed_at is not null)) as since
            ) s
           where coalesce((select true from bitrix_sync.webhook_inbox b
                            where b.receiver = 'contact' and b.entity_id = i.contact_id
                              and b.status in ('received', 'retry_wait', 'processing')
                            limit 1), false)
              or coalesce((select true from bitrix_sync.webhook_inbox b
                            where b.outcome = 'unknown_mapping' and b.entity_id = i.contact_id
                              and b.receiver = 'contact' and b.received_at >= s.since
                            limit 1), false)
              or coalesce((select true from bitrix_sync.webhook_inbox b
                            where b.outcome = 'registration_inactive' and b.entity_id = i.contact_id
                              and b.receiver = 'contact' and b.received_at >= s.since
                            limit 1), false)
           group by i.contact_id) x;
  if v_requeue is not null then
    insert into bitrix_sync.webhook_inbox (receiver, event_type, entity_type_id, entity_id)
    select 'contact', 'linked', 3, c from unnest(v_requeue) as c;
    perform pg_notify('bitrix_sync_webhooks', 'contact');
  end if;
end $$;

--
-- Name: FUNCTION _read_again_after_link(p_contact_ids text[], p_workflow_ids uuid[]); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._read_again_after_link(p_contact_ids text[], p_workflow_ids uuid[]) IS 'After p_contact_ids became their users'' (linked, or their registration flag written on; element k by workflow p_workflow_ids[k], null when none): queues one more read (webhook event linked) of each Contact whose robot call is unprocessed, or was answered unknown_mapping or registration_inactive since its workflow began or since the Contact''s last link closed, whichever is earlier. The rule open_mapping(), open_mappings(), complete_command() and complete_commands() share.';

--
-- Name: _rebind_crm_outcome(uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._rebind_crm_outcome(p_workflow_id uuid) RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  -- The rebind's writes: the target write sets this user (set_user self), the clear of the previous
  -- Contact removes it (set_user clear). Only writes that were sent count.
  with w as (
    select coalesce(bool_or(x.set_user = 'self'), false) as target_sent,
           coalesce(bool_or(x.set_user = 'self' and x.ok), false) as target_done,
           coalesce(bool_or(x.set_user = 'clear'), false) as clear_sent,
           coalesce(bool_or(x.set_user = 'clear' and x.ok), false) as clear_done
      from (select c.params ->> 'set_user' as set_user, c.status = 'succeeded' as ok
              from bitrix_sync.crm_commands c
             where c.workflow_id = p_workflow_id and c.alert_id is null
               and c.command_type = 'contact.update' and c.first_sent_at is not null) x
  )
  select case
           when not target_sent then 'crm_unchanged'
           when not target_done then 'target_write_unconfirmed'
           when not clear_sent then 'target_written'
           when not clear_done then 'target_written_clear_unconfirmed'
           else 'target_written_previous_cleared'
         end
    from w
$$;

--
-- Name: FUNCTION _rebind_crm_outcome(p_workflow_id uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._rebind_crm_outcome(p_workflow_id uuid) IS 'Internal: what a contact.rebind workflow that did not complete left in the CRM, from its commands: crm_unchanged (no write sent), target_write_unconfirmed (sent, never confirmed), target_written (the target carries the user, the previous Contact was not cleared), target_written_clear_unconfirmed, target_written_previous_cleared (both written, the link did not move).';

--
-- Name: _rebind_request_of(uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._rebind_request_of(p_workflow_id uuid) RETURNS bitrix_sync.rebind_requests
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.rebind_requests;
begin
  select * into v_row from bitrix_sync.rebind_requests where workflow_id = p_workflow_id for update;
  if not found then
    raise exception 'workflow % has no rebind request', p_workflow_id
      using errcode = 'BS005', hint = 'A contact.rebind workflow is started only by request_bitrix_contact_rebind().';
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION _rebind_request_of(p_workflow_id uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._rebind_request_of(p_workflow_id uuid) IS 'Internal: the rebind request a contact.rebind workflow serves, locked; BS005 when there is none.';

--
-- Name: _record_admin_action(text, uuid, uuid, text, text, text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._record_admin_action(p_action text, p_workflow_id uuid, p_rebind_request_id uuid, p_decision text, p_contact_id text, p_reason text, p_operator_id text) RETURNS bigint
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  insert into bitrix_sync.admin_actions
    (action, workflow_id, rebind_request_id, decision, contact_id, reason, operator_id)
  values (p_action, p_workflow_id, p_rebind_request_id, p_decision, p_contact_id, btrim(p_reason),
          btrim(p_operator_id))
  returning id
$$;

--
-- Name: FUNCTION _record_admin_action(p_action text, p_workflow_id uuid, p_rebind_request_id uuid, p_decision text, p_contact_id text, p_reason text, p_operator_id text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._record_admin_action(p_action text, p_workflow_id uuid, p_rebind_request_id uuid, p_decision text, p_contact_id text, p_reason text, p_operator_id text) IS 'Internal: writes the audit row of an admin action (the database login is recorded by the column default).';

--
-- Name: _refuse_stale(text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._refuse_stale(p_what text, p_id text) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  raise exception '% % is not held under this lease token', p_what, p_id
    using errcode = 'BS001',
          detail = 'The lease expired and another worker reclaimed the row, a newer intent superseded it, or it already moved on.',
          hint = 'Drop this result: the current holder or the next claim will process the row.';
end $$;

--
-- Name: FUNCTION _refuse_stale(p_what text, p_id text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._refuse_stale(p_what text, p_id text) IS 'Raises BS001 for a completion that does not present the current lease token (a stale holder).';

--
-- Name: _repair_drift(text, text, uuid[], text[], boolean, boolean, boolean); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._repair_drift(p_requested_by text, p_reason text, p_user_ids uuid[], p_kinds text[], p_dry_run boolean, p_admin_action boolean, p_only_unrepaired boolean) RETURNS TABLE(user_id uuid, contact_id text, kinds text[], intent text, recorded boolean)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
declare
  v_missing uuid[];
  v_action bigint;
  v_plan jsonb;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  if p_user_ids is not null then
    select array_agg(x) into v_missing
      from unnest(p_user_ids) x
     where not exists (select 1 from bitrix_sync.drift_findings f where f.user_id = x);
    if v_missing is not null then
      raise exception '% of the users named have no open drift finding (first: %)', cardinality(v_missing), v_missing[1]
        using errcode = 'BS061',
              hint = 'Nothing was recorded. Repair only users listed in bitrix_sync.status_drift; a finding disappears when an audit finds the user in step again.';
    end if;
  end if;

  select coalesce(jsonb_agg(jsonb_build_object('user_id', g.user_id, 'contact_id', g.contact_id, 'kinds', g.kinds,
                                             'intent', bitrix_sync._drift_repair_intent(g.kinds, g.eligible))
                   order by g.user_id), '[]'::jsonb)
    into v_plan
    from (select f.user_id, min(f.contact_id::text) as contact_id,
                 array_agg(distinct f.kind::text order by f.kind::text) as kinds,
                 coalesce(bool_and(u.record_status = 'active' and p.record_status = 'active'), false) as eligible
            from bitrix_sync.drift_findings f
            left join han_app.user_identity u on u.id = f.user_id
            left join han_app.client_profile p on p.user_id = f.user_id
           where f.user_id is not null
             and (p_user_ids is null or f.user_id = any(p_user_ids))
             and (p_kinds is null or f.kind = any(p_kinds))
             and (not p_only_unrepaired or f.repair_requested_at is null)
           group by f.user_id) g;

  if not p_dry_run and jsonb_array_length(v_plan) > 0 then
    if p_admin_action then
      v_action := bitrix_sync._record_admin_action('repair_drift', null, null, null, null, p_reason, p_requested_by);
    end if;
    -- The ordinary intake: one journal row per user, as the App's trigger writes them; the fold
    -- coalesces it with whatever the App recorded meanwhile. reason drift_repair gives the intent a
    -- content hash of its own, so it is not skipped as equal to the user's last workflow.
    insert into han_app.sync_queue_journal (task_type, user_id, reason, source_updated_at)
    select r.intent, r.user_id, 'drift_repair', now() from jsonb_to_recordset(v_plan) r(user_id uuid, contact_id text, kinds text[], intent text) order by r.user_id;
    insert into bitrix_sync.drift_repairs (admin_action_id, user_id, contact_id, kinds, intent, requested_by, reason)
    select v_action, r.user_id, r.contact_id, r.kinds, r.intent, btrim(p_requested_by), btrim(p_reason)
      from jsonb_to_recordset(v_plan) r(user_id uuid, contact_id text, kinds text[], intent text) order by r.user_id;
    update bitrix_sync.drift_findings f
       set repair_requested_at = now(), repair_intent = r.intent
      from jsonb_to_recordset(v_plan) r(user_id uuid, contact_id text, kinds text[], intent text)
     where f.user_id = r.user_id and (p_kinds is null or f.kind = any(p_kinds));
    -- Wake a sync loop asleep on the intake watch, as the App's trigger does (sql/intake/app_trigger.sql,
    -- sql/intake/watch.sql): a loop asleep holds SHARE on the watch table, so this try fails exactly
    -- then; otherwise this transaction marks the table until it ends, and a loop about to fall
    -- asleep waits for it and looks at the queue once more. Callers are security definer (the
    -- owner may lock the table).
    begin
      lock table bitrix_sync.lock_intake_watch in row exclusive mode nowait;
    exception when lock_not_available then
      perform pg_notify('bitrix_sync_queue', 'drift_repair');
    end;
  end if;

  return query
  select r.user_id, r.contact_id, r.kinds, r.intent, not p_dry_run
    from jsonb_to_recordset(v_plan) r(user_id uuid, contact_id text, kinds text[], intent text)
  union all
  -- Contacts registered without a readable user id: no user to run a workflow for. A manager
  -- clears the flag in the CRM; listed, never recorded.
  select null::uuid, f.contact_id::text, array[f.kind::text], 'manual'::text, false
    from bitrix_sync.drift_findings f
   where f.user_id is null and p_user_ids is null and (p_kinds is null or f.kind = any(p_kinds))
   order by 1 nulls last, 2;
end $$;

--
-- Name: FUNCTION _repair_drift(p_requested_by text, p_reason text, p_user_ids uuid[], p_kinds text[], p_dry_run boolean, p_admin_action boolean, p_only_unrepaired boolean); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._repair_drift(p_requested_by text, p_reason text, p_user_ids uuid[], p_kinds text[], p_dry_run boolean, p_admin_action boolean, p_only_unrepaired boolean) IS 'Internal: plans (and, unless p_dry_run, records) one intent per drifted user (of p_user_ids, all when null; findings of p_kinds, all when null; p_only_unrepaired: findings no repair has touched): appended to han_app.sync_queue_journal with reason drift_repair, audited in drift_repairs (and admin_actions when p_admin_action), the findings marked. BS061 when a named user has no open finding.';

--
-- Name: _requeue_refusal(bitrix_sync.technical_dead_letters); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._requeue_refusal(p_dl bitrix_sync.technical_dead_letters) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_q han_app.sync_queue;
  v_hook bitrix_sync.webhook_inbox;
  v_wf bitrix_sync.workflow_instances;
  v_cmd bitrix_sync.crm_commands;
  v_alert bitrix_sync.business_alerts;
  v_newer text;
  v_ack constant text := 'If nothing needs to run again, acknowledge it: select * from bitrix_sync.acknowledge_dead_letter(<id>, ''ops:<you>'', ''<why>'');';
begin
  if p_dl.source = 'sync_queue' then
    if p_dl.source_id ~ '^[0-9a-f-]{36}$' then
      select * into v_q from han_app.sync_queue where id = p_dl.source_id::uuid;
    end if;
    if v_q.id is null then
      return jsonb_build_object('code', 'BS042', 'message', 'its intent row no longer exists', 'hint', v_ack);
    elsif v_q.status <> 'dead_letter' then
      return jsonb_build_object('code', 'BS042', 'message', format('its intent row is %s, not dead_letter', v_q.status), 'hint', v_ack);
    elsif v_q.task_type not in ('contact.map_or_create', 'contact.update', 'contact.deactivate', 'contact.rebind') then
      return jsonb_build_object('code', 'BS042', 'message', 'its intent is of a task type the service does not run', 'hint', v_ack);
    elsif exists (select 1 from han_app.sync_queue a
                   where a.dedup_key = v_q.dedup_key and a.status in ('pending', 'leased', 'retry_wait')) then
      return jsonb_build_object('code', 'BS042', 'message', 'a newer intent of the same kind for the same user is queued and carries this one', 'hint', v_ack);
    end if;
    return null;
  end if;

  if p_dl.source = 'webhook' then
    if p_dl.source_id ~ '^[0-9]{1,18}$' then
      select * into v_hook from bitrix_sync.webhook_inbox where id = p_dl.source_id::bigint;
    end if;
    if v_hook.id is null then
      return jsonb_build_object('code', 'BS042', 'message', 'its inbox event no longer exists', 'hint', v_ack);
    elsif v_hook.status <> 'dead_letter' then
      return jsonb_build_object('code', 'BS042', 'message', format('its inbox event is %s, not dead_letter', v_hook.status), 'hint', v_ack);
    end if;
    return null;
  end if;

  if p_dl.workflow_id is not null then
    select * into v_wf from bitrix_sync.workflow_instances where id = p_dl.workflow_id;
    if not found then
      return jsonb_build_object('code', 'BS042', 'message', 'its workflow no longer exists', 'hint', v_ack);
    elsif v_wf.state in ('succeeded', 'cancelled') then
      return jsonb_build_object('code', 'BS042', 'message', format('its workflow finished as %s without it', v_wf.state), 'hint', v_ack);
    elsif v_wf.state <> 'failed' then
      return jsonb_build_object('code', 'BS043',
        'message', format('its workflow is still %s: its own retries, or an admin''s decision on a parked workflow, move it on', v_wf.state),
        'hint', 'Wait until the workflow has failed or finished (bitrix_sync.status_workflows), then requeue or acknowledge.');
    end if;
    select w.state into v_newer from bitrix_sync.workflow_instances w
     where w.user_id = v_wf.user_id and w.created_at > v_wf.created_at and w.id <> v_wf.id
     order by w.created_at desc limit 1;
    if v_newer in ('succeeded', 'failed', 'cancelled') then
      return jsonb_build_object('code', 'BS042',
        'message', 'a newer workflow of the same user has run since; running this older one again could undo it',
        'hint', v_ack);
    elsif v_newer is not null then
      return jsonb_build_object('code', 'BS043', 'message', 'a newer workflow of the same user is running',
        'hint', 'Wait until it finishes; it reads the user''s current data, so it usually makes this dead letter moot. Then acknowledge or requeue.');
    end if;
    if v_wf.workflow_type = 'contact.rebind' and not exists (
         select 1 from bitrix_sync.rebind_requests r
          where r.workflow_id = v_wf.id and r.status in ('requested', 'in_progress')) then
      return jsonb_build_object('code', 'BS042', 'message', 'its rebind request is finished; a rebind is not run again by a requeue',
        'hint', 'Ask again with select bitrix_sync.request_bitrix_contact_rebind(''<user uuid>'', ''<Contact ID>'', ''<why>'', ''ops:<you>''); then acknowledge this dead letter.');
    end if;
    if exists (select 1 from bitrix_sync.crm_commands c
                where c.workflow_id = v_wf.id and c.status in ('uncertain', 'reconcile')) then
      return jsonb_build_object('code', 'BS042', 'message', 'its workflow has a write whose outcome is still unknown',
        'hint', v_ack);
    end if;
    return null;
  end if;

  -- A command of a business alert.
  select * into v_cmd from bitrix_sync.crm_commands where id = p_dl.command_id;
  if not found or v_cmd.alert_id is null then
    return jsonb_build_object('code', 'BS042', 'message', 'its command no longer exists', 'hint', v_ack);
  end if;
  select * into v_alert from bitrix_sync.business_alerts where id = v_cmd.alert_id;
  if v_alert.status = 'remote_missing' then
    return jsonb_build_object('code', 'BS042', 'message', 'the alert''s smart-process item was deleted in the CRM', 'hint', v_ack);
  end if;
  if exists (select 1 from bitrix_sync.crm_commands n
              where n.alert_id = v_alert.id and n.id > v_cmd.id and n.command_type <> 'alert.list'
                and n.status in ('pending', 'leased', 'in_flight', 'retry_wait', 'uncertain', 'reconcile')) then
    return jsonb_build_object('code', 'BS043', 'message', 'a newer command of the same alert is under way',
      'hint', 'Wait for it (bitrix_sync.status_alert_mirror); if it succeeds, acknowledge this dead letter.');
  end if;
  if v_alert.crm_sync_status = 'synced' and exists (
       select 1 from bitrix_sync.crm_commands n
        where n.alert_id = v_alert.id and n.id > v_cmd.id and n.command_type <> 'alert.list' and n.status = 'succeeded') then
    return jsonb_build_object('code', 'BS042', 'message', 'the alert has been mirrored since', 'hint', v_ack);
  end if;
  return null;
end $_$;

--
-- Name: FUNCTION _requeue_refusal(p_dl bitrix_sync.technical_dead_letters); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._requeue_refusal(p_dl bitrix_sync.technical_dead_letters) IS 'Internal: why a dead letter cannot be requeued now, as {code, message, hint} (BS042 nothing to run again, BS043 something else is running), or null when it can.';

--
-- Name: _requeue_target(bitrix_sync.technical_dead_letters); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._requeue_target(p_dl bitrix_sync.technical_dead_letters) RETURNS text
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_q han_app.sync_queue;
  v_hook bitrix_sync.webhook_inbox;
  v_id text;
  v_alert bigint;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  if p_dl.source = 'sync_queue' then
    select * into v_q from han_app.sync_queue where id = p_dl.source_id::uuid for update;
    -- The same intent as a new row: created now, so its horizon and the cutover watermark count from now.
    insert into han_app.sync_queue (task_type, entity_type, entity_id, dedup_key, payload_json)
    values (v_q.task_type, v_q.entity_type, v_q.entity_id, v_q.dedup_key, v_q.payload_json)
    returning id::text into v_id;
    perform pg_notify('bitrix_sync_queue', v_q.task_type);
    return 'sync_queue:' || v_id;
  end if;

  if p_dl.source = 'webhook' then
    select * into v_hook from bitrix_sync.webhook_inbox where id = p_dl.source_id::bigint for update;
    insert into bitrix_sync.webhook_inbox (receiver, event_type, entity_type_id, entity_id)
    values (v_hook.receiver, 'requeue', v_hook.entity_type_id, v_hook.entity_id)
    returning id::text into v_id;
    perform pg_notify('bitrix_sync_webhooks', v_hook.receiver);
    return 'webhook:' || v_id;
  end if;

  if p_dl.workflow_id is not null then
    -- failed -> waiting_retry (requeue): due now, from its first step, with a horizon of its own.
    update bitrix_sync.workflow_instances
       set state = 'waiting_retry', current_step = 'start', step_data = '{}'::jsonb, outcome = null,
           last_error_code = null, finished_at = null, requeued_at = now(), next_attempt_at = now(),
           attempt_count = 0, deadline_at = bitrix_sync._retry_deadline(now()),
           lease_token = null, locked_by = null, locked_until = null
     where id = p_dl.workflow_id and state = 'failed';
    perform pg_notify('bitrix_sync_workflows', '');
    return 'workflow:' || p_dl.workflow_id::text;
  end if;

  select c.alert_id into v_alert from bitrix_sync.crm_commands c where c.id = p_dl.command_id;
  -- The mirror sends the alert's current state again; an add that may have landed is looked up first.
  update bitrix_sync.business_alerts set crm_sync_status = 'pending'
   where id = v_alert and crm_sync_status <> 'pending';
  perform pg_notify('bitrix_sync_workflows', '');
  return 'alert:' || v_alert::text;
end $$;

--
-- Name: FUNCTION _requeue_target(p_dl bitrix_sync.technical_dead_letters); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._requeue_target(p_dl bitrix_sync.technical_dead_letters) IS 'Internal (requeue_dead_letter, after _requeue_refusal said yes): starts the new attempt and returns what carries it (sync_queue:<id>, webhook:<id>, workflow:<id>, alert:<id>).';

--
-- Name: _resolve_conflict_alerts(uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._resolve_conflict_alerts(p_user_id uuid) RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_count integer;
begin
  update bitrix_sync.business_alerts
     set status = 'resolved', closed_at = now(), crm_sync_status = 'pending'
   where user_id = p_user_id and status = 'open'
     and alert_type in ('contact_bound_to_other_user', 'duplicate_contacts', 'user_id_mismatch', 'contact_not_found');
  get diagnostics v_count = row_count;
  return v_count;
end $$;

--
-- Name: FUNCTION _resolve_conflict_alerts(p_user_id uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._resolve_conflict_alerts(p_user_id uuid) IS 'Internal (complete_rebind): open -> resolved for the user''s link conflicts (bound to another user, duplicates, user_id mismatch, Contact not found); the smart-process items are updated again (crm_sync_status pending). Returns how many.';

--
-- Name: _resolve_dead_letters(bigint[], text, text, text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._resolve_dead_letters(p_ids bigint[], p_resolution text, p_operator text, p_reason text, p_target text) RETURNS TABLE(dead_letter_id bigint, source text, operation text, resolution text, requeued_to text, resolved_at timestamp with time zone, resolved_by text)
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  with resolved as (
    update bitrix_sync.technical_dead_letters d
       set resolved_at = now(), resolved_by = btrim(p_operator), resolved_db_user = session_user,
           resolution = p_resolution, resolution_reason = btrim(p_reason), requeued_to = p_target
     where d.id = any(p_ids) and d.resolved_at is null
    returning d.*
  ), audit as (
    -- One audit row per entry, with the admin functions' others (docs/admin.md).
    insert into bitrix_sync.admin_actions (action, workflow_id, dead_letter_id, reason, operator_id)
    select case p_resolution when 'requeued' then 'requeue_dead_letter' else 'acknowledge_dead_letter' end,
           r.workflow_id, r.id, btrim(p_reason), btrim(p_operator)
      from resolved r
  )
  select r.id, r.source::text, r.operation::text, r.resolution::text, r.requeued_to::text, r.resolved_at,
         r.resolved_by::text
    from resolved r
   order by r.id
$$;

--
-- Name: FUNCTION _resolve_dead_letters(p_ids bigint[], p_resolution text, p_operator text, p_reason text, p_target text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._resolve_dead_letters(p_ids bigint[], p_resolution text, p_operator text, p_reason text, p_target text) IS 'Internal: marks open dead letters resolved with the resolution, operator, login (session_user), reason and (requeued) target, and writes an admin_actions row for each; returns them.';

--
-- Name: _retention_cutoff(text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._retention_cutoff(p_key text) RETURNS timestamp with time zone
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select now() - make_interval(days => (bitrix_sync._active_setting(p_key) #>> '{}')::integer)
$$;

--
-- Name: FUNCTION _retention_cutoff(p_key text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._retention_cutoff(p_key text) IS 'Internal: now minus the retention.*_days setting p_key: rows finished before it may be deleted.';

--
-- Name: _retention_sweep_workflows(timestamp with time zone); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._retention_sweep_workflows(p_run_started_at timestamp with time zone) RETURNS TABLE(deleted integer, more boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET lock_timeout TO '200ms'
    AS $$
declare
  v_limit integer := (bitrix_sync._active_setting('retention.batch_size') #>> '{}')::integer;
  v_window integer := 20 * (bitrix_sync._active_setting('retention.batch_size') #>> '{}')::integer;
  v_place bitrix_sync.retention_sweeps;
  v_ids uuid[];
  v_last_at timestamptz;
  v_last_id uuid;
  v_deleted uuid[];
  v_deleted_last_at timestamptz;
  v_deleted_last_id uuid;
  v_count integer;
  v_round_started_at timestamptz;
begin
  -- One sweeper at a time: a second run's call waits at most lock_timeout, then is told 55P03.
  select * into v_place from bitrix_sync.retention_sweeps s where s.table_name = 'workflows' for update;
  if not found then
    insert into bitrix_sync.retention_sweeps (table_name) values ('workflows')
    on conflict (table_name) do nothing;
    select * into v_place from bitrix_sync.retention_sweeps s where s.table_name = 'workflows' for update;
  end if;
  -- A round starts when its first window runs.
  v_round_started_at := case when v_place.after_finished_at is null then now() else v_place.round_started_at end;
  -- The window: finished workflows past retention after the place, oldest first, through
  -- workflow_instances_finished_idx (an incremental sort by id within equal finish times).
  select array_agg(x.id order by x.finished_at, x.id),
         (array_agg(x.finished_at order by x.finished_at desc, x.id desc))[1],
         (array_agg(x.id order by x.finished_at desc, x.id desc))[1]
    into v_ids, v_last_at, v_last_id
    from (select w.id, w.finished_at from bitrix_sync.workflow_instances w
           where w.state in ('succeeded', 'failed', 'cancelled')
             and w.finished_at < (select bitrix_sync._retention_cutoff('retention.workflows_days'))
             and (v_place.after_finished_at is null
                  or (w.finished_at, w.id) > (v_place.after_finished_at, v_place.after_id))
           order by w.finished_at, w.id
           limit v_window) x;
  -- Those of the window nothing keeps, oldest first, at most a batch.
  select array_agg(w.id order by w.finished_at, w.id),
         (array_agg(w.finished_at order by w.finished_at desc, w.id desc))[1],
         (array_agg(w.id order by w.finished_at desc, w.id desc))[1]
    into v_deleted, v_deleted_last_at, v_deleted_last_id
    from (select w.id, w.finished_at from bitrix_sync.workflow_instances w
           where w.id = any(coalesce(v_ids, '{}'))
             and w.state in ('succeeded', 'failed', 'cancelled')
             and not exists (select 1 from bitrix_sync.crm_commands c where c.workflow_id = w.id)
             and exists (select 1 from bitrix_sync.workflow_instances n
                              where n.user_id = w.user_id and n.created_at > w.created_at)
             and not exists (select 1 from bitrix_sync.rebind_requests r where r.workflow_id = w.id)
             and not exists (select 1 from bitrix_sync.entity_external_mapping m where m.workflow_id = w.id)
             and not exists (select 1 from bitrix_sync.technical_dead_letters d
                              where d.resolved_at is null and d.workflow_id = w.id)
           order by w.finished_at, w.id
           limit v_limit
           for update skip locked) w;
  delete from bitrix_sync.workflow_instances w where w.id = any(coalesce(v_deleted, '{}'));
  get diagnostics v_count = row_count;
  if v_count >= v_limit then
    -- A full batch: the window may hold more to delete after the last one deleted.
    update bitrix_sync.retention_sweeps s
       set after_finished_at = v_deleted_last_at, after_id = v_deleted_last_id,
           round_started_at = v_round_started_at, updated_at = now()
     where s.table_name = 'workflows';
    return query select v_count, true;
  elsif coalesce(cardinality(v_ids), 0) >= v_window then
    -- A whole window examined: the sweep goes on after it.
    update bitrix_sync.retention_sweeps s
       set after_finished_at = v_last_at, after_id = v_last_id,
           round_started_at = v_round_started_at, updated_at = now()
     where s.table_name = 'workflows';
    return query select v_count, true;
  else
    -- Past the newest: the next call starts a new round from the oldest. The caller's run goes
    -- round again when this round started before it.
    update bitrix_sync.retention_sweeps s
       set after_finished_at = null, after_id = null, round_started_at = v_round_started_at,
           last_round_ended_at = now(), updated_at = now()
     where s.table_name = 'workflows';
    return query select v_count, coalesce(v_round_started_at < p_run_started_at, false);
  end if;
end $$;

--
-- Name: FUNCTION _retention_sweep_workflows(p_run_started_at timestamp with time zone); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._retention_sweep_workflows(p_run_started_at timestamp with time zone) IS 'Internal: one window of the workflow retention sweep: examines at most 20 x retention.batch_size finished workflows past retention.workflows_days after the place in retention_sweeps, deletes those nothing keeps (at most retention.batch_size, FOR UPDATE SKIP LOCKED), and moves the place on; past the newest it starts a new round. Returns the rows deleted and whether to call again: the round goes on, or it started before p_run_started_at (the caller''s run has not seen every workflow yet; null: never).';

--
-- Name: _settings_errors(jsonb); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._settings_errors(p_values jsonb) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_def bitrix_sync.settings;
  v_val jsonb;
  v_errors jsonb := '[]'::jsonb;
  v_key text;
  v_num numeric;
  v_entry record;
begin
  if p_values is null or jsonb_typeof(p_values) <> 'object' then
    return '["values must be a JSON object"]'::jsonb;
  end if;
  for v_key in select k from jsonb_object_keys(p_values) k where k not in (select s.key from bitrix_sync.settings s) loop
    v_errors := v_errors || to_jsonb(format('%s: unknown setting', v_key));
  end loop;
  for v_def in select * from bitrix_sync.settings order by key loop
    v_val := coalesce(p_values -> v_def.key, v_def.default_value, 'null'::jsonb);
    if jsonb_typeof(v_val) = 'null' then
      if not v_def.nullable then
        v_errors := v_errors || to_jsonb(format('%s: a value is required', v_def.key));
      end if;
      continue;
    end if;
    case v_def.value_type
      when 'integer', 'number' then
        if jsonb_typeof(v_val) <> 'number' then
          v_errors := v_errors || to_jsonb(format('%s: must be a number', v_def.key));
          continue;
        end if;
        v_num := (v_val #>> '{}')::numeric;
        -- 1036.0 and 1.0360e3 are whole numbers: stored as 1036 (_normalise_settings).
        if v_def.value_type = 'integer' and v_num <> trunc(v_num) then
          v_errors := v_errors || to_jsonb(format('%s: must be a whole number', v_def.key));
        end if;
        -- Every number has both bounds (CHECK settings_bounded); an integer's lie within int4.
        if v_num < v_def.min_value then
          v_errors := v_errors || to_jsonb(format('%s: must be at least %s', v_def.key, v_def.min_value));
        end if;
        if v_num > v_def.max_value then
          v_errors := v_errors || to_jsonb(format('%s: must be at most %s', v_def.key, v_def.max_value));
        end if;
      when 'text' then
        if jsonb_typeof(v_val) <> 'string' or length(v_val #>> '{}') = 0 then
          v_errors := v_errors || to_jsonb(format('%s: must be a non-empty string', v_def.key));
        elsif length(v_val #>> '{}') > v_def.max_length then
          v_errors := v_errors || to_jsonb(format('%s: must be at most %s characters', v_def.key, v_def.max_length));
        end if;
      when 'boolean' then
        if jsonb_typeof(v_val) <> 'boolean' then
          v_errors := v_errors || to_jsonb(format('%s: must be true or false', v_def.key));
        end if;
      when 'enum' then
        if not (v_def.allowed_values @> jsonb_build_array(v_val)) then
          v_errors := v_errors || to_jsonb(format('%s: must be one of %s', v_def.key, v_def.allowed_values));
        end if;
      when 'json' then
        if jsonb_typeof(v_val) <> 'object' then
          v_errors := v_errors || to_jsonb(format('%s: must be a JSON object', v_def.key));
          continue;
        end if;
        -- An object of allowed entries, each a non-empty string of at most max_length characters.
        for v_entry in select e.key, e.value from jsonb_each(v_val) e order by e.key loop
          if not (v_def.allowed_values @> jsonb_build_array(v_entry.key)) then
            v_errors := v_errors || to_jsonb(format('%s: unknown entry %s (allowed: %s)', v_def.key,
                                                    left(v_entry.key, 64), v_def.allowed_values));
          elsif jsonb_typeof(v_entry.value) <> 'string' or length(v_entry.value #>> '{}') = 0
                or length(v_entry.value #>> '{}') > v_def.max_length then
            v_errors := v_errors || to_jsonb(format('%s: entry %s must be a non-empty string of at most %s characters',
                                                    v_def.key, v_entry.key, v_def.max_length));
          end if;
        end loop;
    end case;
  end loop;
  -- Cross-field rules.
  if coalesce((p_values ->> 'retry.base_ms')::numeric, 1000) > coalesce((p_values ->> 'retry.max_ms')::numeric, 300000) then
    v_errors := v_errors || to_jsonb('retry.base_ms: must not exceed retry.max_ms'::text);
  end if;
  -- A workflow is deleted only after its commands, so commands cannot be kept longer.
  if coalesce((p_values ->> 'retention.commands_days')::numeric, 30)
     > coalesce((p_values ->> 'retention.workflows_days')::numeric, 90) then
    v_errors := v_errors || to_jsonb('retention.commands_days: must not exceed retention.workflows_days'::text);
  end if;
  v_errors := v_errors || bitrix_sync._alert_settings_errors(p_values);
  -- The automatic repair is switched on or off per kind, nothing else.
  if jsonb_typeof(p_values -> 'audit.auto_repair_kinds') = 'object' and exists (
       select 1 from jsonb_each(p_values -> 'audit.auto_repair_kinds') e
        where e.value not in ('"on"'::jsonb, '"off"'::jsonb)) then
    v_errors := v_errors || to_jsonb('audit.auto_repair_kinds: every entry must be "on" or "off"'::text);
  end if;
  return v_errors;
exception
  when invalid_text_representation or numeric_value_out_of_range then
    return v_errors || to_jsonb('values: a number could not be read'::text);
end $$;

--
-- Name: FUNCTION _settings_errors(p_values jsonb); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._settings_errors(p_values jsonb) IS 'Validation messages for a complete settings object against the catalogue (types, bounds, maximum lengths, allowed values and entries, cross-field rules); empty array when valid.';

--
-- Name: _trace_context(text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._trace_context(p_traceparent text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
  select case
    when pg_catalog.length(p_traceparent) operator(pg_catalog.=) 55
         and p_traceparent operator(pg_catalog.~) '^00-[0-9a-f]+-[0-9a-f]+-[0-9a-f]+$'
         and pg_catalog.substr(p_traceparent, 36, 1) operator(pg_catalog.=) '-'
         and pg_catalog.substr(p_traceparent, 53, 1) operator(pg_catalog.=) '-'
         and pg_catalog.substr(p_traceparent, 4, 32) operator(pg_catalog.<>) pg_catalog.repeat('0', 32)
         and pg_catalog.substr(p_traceparent, 37, 16) operator(pg_catalog.<>) pg_catalog.repeat('0', 16)
    then p_traceparent
  end
$_$;

--
-- Name: FUNCTION _trace_context(p_traceparent text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._trace_context(p_traceparent text) IS 'The argument when it is a valid W3C traceparent (version 00, non-zero trace and span ids), else null: what the functions that store a trace context keep. Inlined into its callers: no pinned search_path, every operator and name schema-qualified.';

--
-- Name: _wake_workflow(uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._wake_workflow(p_workflow_id uuid) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  -- A command reached an outcome the workflow must look at: waiting_crm -> running (crm_replied).
  update bitrix_sync.workflow_instances
     set state = 'running', next_attempt_at = now(), updated_at = now()
   where id = p_workflow_id and state is not distinct from 'waiting_crm';
  if found then
    perform pg_notify('bitrix_sync_workflows', '');
  end if;
end $$;

--
-- Name: FUNCTION _wake_workflow(p_workflow_id uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._wake_workflow(p_workflow_id uuid) IS 'waiting_crm -> running for the workflow owning a command that succeeded, failed for good or became uncertain.';

--
-- Name: _workflow_first_attempt(bitrix_sync.workflow_instances); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._workflow_first_attempt(p_row bitrix_sync.workflow_instances) RETURNS timestamp with time zone
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  -- Intake starts a workflow as soon as it is created; an admin's requeue starts it over.
  select coalesce(p_row.requeued_at, p_row.created_at)
$$;

--
-- Name: FUNCTION _workflow_first_attempt(p_row bitrix_sync.workflow_instances); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._workflow_first_attempt(p_row bitrix_sync.workflow_instances) IS 'Internal: where a workflow''s retry horizon starts: its last requeue by an admin, else its creation.';

--
-- Name: _workflow_holder(bigint, uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._workflow_holder(p_command_id bigint, p_workflow_token uuid) RETURNS bitrix_sync.crm_commands
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.crm_commands;
begin
  select c.* into v_row from bitrix_sync.crm_commands c
    join bitrix_sync.workflow_instances w on w.id = c.workflow_id
   where c.id = p_command_id and w.state is not distinct from 'running' and w.lease_token = p_workflow_token
   for update of c;
  if not found then
    perform bitrix_sync._refuse_stale('workflow of command', p_command_id::text);
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION _workflow_holder(p_command_id bigint, p_workflow_token uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._workflow_holder(p_command_id bigint, p_workflow_token uuid) IS 'Internal: the command, locked, when the caller holds its workflow''s lease; otherwise BS001.';

--
-- Name: _write_app_crm_master(uuid, text, text, text, timestamp with time zone); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync._write_app_crm_master(p_user_id uuid, p_full_name text, p_citizenship text, p_email text, p_source_updated_at timestamp with time zone) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET row_security TO 'off'
    AS $$
  update han_app.client_profile
     set full_name = p_full_name, citizenship = p_citizenship, email = p_email, source_updated_at = p_source_updated_at
   where user_id operator(pg_catalog.=) p_user_id
$$;

--
-- Name: FUNCTION _write_app_crm_master(p_user_id uuid, p_full_name text, p_citizenship text, p_email text, p_source_updated_at timestamp with time zone); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync._write_app_crm_master(p_user_id uuid, p_full_name text, p_citizenship text, p_email text, p_source_updated_at timestamp with time zone) IS 'Internal (apply_crm_master_fields): the CRM-master update of one App profile, run as its owner bitrix_sync_app_writer (security definer, row_security off), which may update full_name, citizenship, email and source_updated_at of han_app.client_profile and nothing in bitrix_sync: code the App''s owner attaches to the table runs with those rights only and cannot SET ROLE back to the service''s.';

--
-- Name: accept_webhook(text, integer, text, inet); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.accept_webhook(p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet DEFAULT NULL::inet) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row record;
begin
  select * into v_row
    from bitrix_sync.accept_webhooks(array[p_receiver], array[p_entity_type_id], array[p_entity_id], array[p_source_ip]);
  case v_row.refusal
    when 'alert_entity_type_unset' then
      raise exception 'the alert receiver cannot accept events: alerts.entity_type_id is not set'
        using errcode = 'BS021',
              hint = 'Set the smart process entityTypeId with propose_settings(''{"alerts.entity_type_id": <id>}'', ...) and activate it.';
    when 'alert_config_invalid' then
      raise exception 'the alert receiver cannot accept events: alerts.entity_type_id is not usable'
        using errcode = 'BS023',
              hint = 'Propose the entityTypeId as a whole number with propose_settings(), then validate and activate it.';
    when 'unknown_receiver' then
      raise exception 'unknown webhook receiver %', p_receiver
        using errcode = 'BS022', hint = 'Receivers are contact and alert.';
    when 'entity_id' then
      raise exception 'the entity ID must be a numeric Bitrix24 ID'
        using errcode = 'BS004', hint = 'Pass the ID from document_id[2], e.g. ''4711''.';
    when 'entity_type' then
      raise exception 'the % receiver does not accept entity type %', p_receiver, p_entity_type_id
        using errcode = 'BS020',
              hint = 'The robot belongs to another document type or smart process; check the robot and alerts.entity_type_id.';
    else
      return v_row.inbox_id;
  end case;
end $$;

--
-- Name: FUNCTION accept_webhook(p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.accept_webhook(p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet) IS 'One event through accept_webhooks(), for an operator with psql re-recording a robot call that was lost (the robot does not retry): returns the inbox id; BS020 wrong entity type, BS004 malformed ID, BS021/BS023 alert receiver not configured or unusable, BS022 unknown receiver; nothing is written then. Security definer: the admin role has no table rights.';

--
-- Name: accept_webhooks(text[], integer[], text[], inet[], text[]); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.accept_webhooks(p_receivers text[], p_entity_type_ids integer[], p_entity_ids text[], p_source_ips inet[], p_trace_contexts text[] DEFAULT NULL::text[]) RETURNS TABLE(ord integer, inbox_id bigint, refusal text)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_n integer := coalesce(cardinality(p_receivers), 0);
  v_alert_type integer;
  v_alert_refusal text;
  v_expected integer;
  v_contact boolean := false;
  v_alert boolean := false;
begin
  if coalesce(cardinality(p_entity_type_ids), 0) <> v_n or coalesce(cardinality(p_entity_ids), 0) <> v_n
     or coalesce(cardinality(p_source_ips), 0) <> v_n or v_n > 1000
     or (p_trace_contexts is not null and cardinality(p_trace_contexts) <> v_n) then
    raise exception 'accept_webhooks needs four (or five) arrays of one length, at most 1000'
      using errcode = 'BS004', hint = 'Pass receiver, entity type, entity ID, source IP and optionally trace context per event, in that order.';
  end if;
  if 'alert' = any(p_receivers) then
    begin
      v_alert_type := bitrix_sync.alert_entity_type_id();
      if v_alert_type is null then
        v_alert_refusal := 'alert_entity_type_unset';
      end if;
    exception when others then
      -- A broken alert setting stops the alert receiver only; Contact events of the call go on.
      v_alert_refusal := 'alert_config_invalid';
    end;
  end if;
  for i in 1 .. v_n loop
    ord := i;
    inbox_id := null;
    refusal := null;
    v_expected := null;
    if p_receivers[i] = 'contact' then
      v_expected := 3;
    elsif p_receivers[i] = 'alert' then
      v_expected := v_alert_type;
      refusal := v_alert_refusal;
    else
      refusal := 'unknown_receiver';
    end if;
    if refusal is null and p_entity_type_ids[i] is distinct from v_expected then
      refusal := 'entity_type';
    end if;
    if refusal is null and (p_entity_ids[i] is null or p_entity_ids[i] !~ '^[1-9][0-9]{0,17}$') then
      refusal := 'entity_id';
    end if;
    if refusal is null then
      insert into bitrix_sync.webhook_inbox (receiver, entity_type_id, entity_id, source_ip, trace_context)
      values (p_receivers[i], p_entity_type_ids[i], p_entity_ids[i], p_source_ips[i],
              bitrix_sync._trace_context(p_trace_contexts[i]))
      returning id into inbox_id;
      if p_receivers[i] = 'contact' then
        v_contact := true;
      else
        v_alert := true;
      end if;
    end if;
    return next;
  end loop;
  -- One wake-up per call and receiver (not per row, see above) for the sync loop's LISTEN.
  if v_contact then
    perform pg_notify('bitrix_sync_webhooks', 'contact');
  end if;
  if v_alert then
    perform pg_notify('bitrix_sync_webhooks', 'alert');
  end if;
end $_$;

--
-- Name: FUNCTION accept_webhooks(p_receivers text[], p_entity_type_ids integer[], p_entity_ids text[], p_source_ips inet[], p_trace_contexts text[]); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.accept_webhooks(p_receivers text[], p_entity_type_ids integer[], p_entity_ids text[], p_source_ips inet[], p_trace_contexts text[]) IS 'Receiver entry point (§10.1): for each event (parallel arrays), checks the receiver, the entity type (3 for contact, alerts.entity_type_id for alert) and the entity ID and inserts an inbox row with the request''s trace context (W3C traceparent, malformed ones ignored); returns per event its 1-based ord and the inbox id, or a refusal (entity_type, entity_id, alert_entity_type_unset, alert_config_invalid, unknown_receiver) and no row. One event''s refusal never fails another''s.';

--
-- Name: acknowledge_dead_letter(bigint, text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.acknowledge_dead_letter(p_id bigint, p_operator text, p_reason text) RETURNS TABLE(dead_letter_id bigint, source text, operation text, resolution text, requeued_to text, resolved_at timestamp with time zone, resolved_by text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_dl bitrix_sync.technical_dead_letters;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator);
  v_dl := bitrix_sync._open_dead_letter(p_id);
  return query select * from bitrix_sync._resolve_dead_letters(array[v_dl.id], 'acknowledged', p_operator, p_reason, null);
end $$;

--
-- Name: FUNCTION acknowledge_dead_letter(p_id bigint, p_operator text, p_reason text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.acknowledge_dead_letter(p_id bigint, p_operator text, p_reason text) IS 'Admin (§9): an open technical dead letter was looked at and nothing is sent again. Writes resolved_at, resolved_by, resolution = acknowledged and the reason; the entry leaves status_dead_letters and the open-DLQ gauge. BS004 missing operator or reason, BS040 no such entry, BS041 already resolved.';

--
-- Name: acquire_crm_request(text, text, double precision, integer, integer, integer, double precision); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.acquire_crm_request(p_bucket text, p_holder text, p_refill_per_sec double precision, p_burst integer, p_max_in_flight integer, p_slot_ttl_ms integer, p_recovery_per_sec double precision) RETURNS TABLE(granted boolean, slot_id uuid, wait_ms integer, tokens double precision, rate double precision, in_flight integer, decided_at timestamp with time zone)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
declare
  v_now timestamptz;
  v_row bitrix_sync.crm_rate_buckets;
  v_factor double precision;
  v_rate double precision;
  v_tokens double precision;
  v_in_flight integer;
  v_next_expiry timestamptz;
  v_slot uuid;
  v_wait integer;
begin
  perform bitrix_sync._check_limiter_name('bucket', p_bucket);
  perform bitrix_sync._check_limiter_name('holder', p_holder);
  if p_refill_per_sec is null or p_refill_per_sec <= 0 or p_burst is null or p_burst < 1
     or p_max_in_flight is null or p_max_in_flight < 1 or p_slot_ttl_ms is null or p_slot_ttl_ms < 1
     or p_recovery_per_sec is null or p_recovery_per_sec < 0 then
    raise exception 'limiter settings out of range: refill %, burst %, max in flight %, slot ttl % ms',
      p_refill_per_sec, p_burst, p_max_in_flight, p_slot_ttl_ms
      using errcode = 'BS010',
            hint = 'Check limiter.refill_per_sec (> 0), limiter.burst (>= 1) and limiter.max_in_flight (>= 1) in bitrix_sync.settings.';
  end if;

  insert into bitrix_sync.crm_rate_buckets as b (bucket, tokens, refilled_at)
  values (p_bucket, p_burst, clock_timestamp())
  on conflict (bucket) do nothing;
  -- One row lock serialises every replica's decision for this bucket; the clock is read after it.
  select * into strict v_row from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket for update;
  v_now := clock_timestamp();

  v_factor := bitrix_sync._bucket_rate_factor(v_row.rate_factor, p_recovery_per_sec, v_row.rate_changed_at, v_now);
  v_rate := p_refill_per_sec * v_factor;
  v_tokens := bitrix_sync._bucket_tokens(v_row.tokens, v_rate, p_burst, v_row.refilled_at, v_now);

  delete from bitrix_sync.crm_inflight_slots s where s.bucket = p_bucket and s.expires_at <= v_now;
  select count(*)::integer, min(s.expires_at) into v_in_flight, v_next_expiry
    from bitrix_sync.crm_inflight_slots s where s.bucket = p_bucket;

  if v_row.throttled_until is not null and v_row.throttled_until > v_now then
    v_wait := ceil(extract(epoch from v_row.throttled_until - v_now) * 1000)::integer;
  elsif v_in_flight >= p_max_in_flight then
    -- Slots are normally released long before they expire: suggest polling soon.
    v_wait := least(100, greatest(1, ceil(extract(epoch from v_next_expiry - v_now) * 1000)))::integer;
  elsif v_tokens < 1 then
    v_wait := greatest(1, ceil((1 - v_tokens) / v_rate * 1000))::integer;
  else
    v_tokens := v_tokens - 1;
    insert into bitrix_sync.crm_inflight_slots as s (bucket, holder, acquired_at, expires_at)
    values (p_bucket, p_holder, v_now, v_now + make_interval(secs => p_slot_ttl_ms / 1000.0))
    returning s.slot_id into v_slot;
    v_in_flight := v_in_flight + 1;
  end if;

  update bitrix_sync.crm_rate_buckets b
     set tokens = greatest(0, v_tokens), refilled_at = v_now, rate_factor = v_factor,
         rate_changed_at = v_now, updated_at = v_now
   where b.bucket = p_bucket;

  return query select v_slot is not null, v_slot, coalesce(v_wait, 0), v_tokens, v_rate, v_in_flight, v_now;
end $$;

--
-- Name: FUNCTION acquire_crm_request(p_bucket text, p_holder text, p_refill_per_sec double precision, p_burst integer, p_max_in_flight integer, p_slot_ttl_ms integer, p_recovery_per_sec double precision); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.acquire_crm_request(p_bucket text, p_holder text, p_refill_per_sec double precision, p_burst integer, p_max_in_flight integer, p_slot_ttl_ms integer, p_recovery_per_sec double precision) IS 'Takes one token and one in-flight slot for an HTTP request to the portal, or says how long to wait (wait_ms). decided_at is the server time of the decision. Shared by every replica (§8).';

--
-- Name: acquire_spare_crm_request(text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.acquire_spare_crm_request(p_bucket text, p_holder text) RETURNS TABLE(granted boolean, slot_id uuid, wait_ms integer)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
declare
  -- Longer than any HTTP request may take (BITRIX_SYNC_HTTP_TIMEOUT_SEC is at most 60).
  SPARE_SLOT_TTL constant interval := interval '120 seconds';
  -- How fast the rate climbs back after a cut (src/crm/limiter.ts DEFAULT_ADAPTIVE.recoveryPerSec).
  SPARE_RECOVERY_PER_SEC constant double precision := 0.05;
  v_refill double precision := (bitrix_sync._active_setting('limiter.refill_per_sec') #>> '{}')::double precision;
  v_burst integer := (bitrix_sync._active_setting('limiter.burst') #>> '{}')::integer;
  v_max_in_flight integer := (bitrix_sync._active_setting('limiter.max_in_flight') #>> '{}')::integer;
  v_share double precision := (bitrix_sync._active_setting('audit.budget_share') #>> '{}')::double precision;
  v_spare_bucket text;
  v_now timestamptz;
  v_main bitrix_sync.crm_rate_buckets;
  v_spare bitrix_sync.crm_rate_buckets;
  v_factor double precision;
  v_rate double precision;
  v_tokens double precision;
  v_reserve double precision;
  v_share_rate double precision;
  v_share_tokens double precision;
  v_in_flight integer;
  v_slot uuid;
begin
  perform bitrix_sync._check_limiter_name('bucket', p_bucket);
  perform bitrix_sync._check_limiter_name('holder', p_holder);
  v_spare_bucket := left(p_bucket, 194) || '#spare';
  -- Spare is what would overflow: the bucket must be full before the audit takes from it.
  v_reserve := v_burst - 1;

  select * into v_main from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket for update skip locked;
  if not found then
    if exists (select 1 from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket) then
      -- A sync request is taking a token right now: the portal is busy, come back later.
      return query select false, null::uuid, 100;
      return;
    end if;
    insert into bitrix_sync.crm_rate_buckets as b (bucket, tokens, refilled_at)
    values (p_bucket, v_burst, clock_timestamp())
    on conflict (bucket) do nothing;
    select * into v_main from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket for update skip locked;
    if not found then
      return query select false, null::uuid, 100;
      return;
    end if;
  end if;
  v_now := clock_timestamp();

  if v_main.throttled_until is not null and v_main.throttled_until > v_now then
    return query select false, null::uuid,
      greatest(100, ceil(extract(epoch from v_main.throttled_until - v_now) * 1000))::integer;
    return;
  end if;
  v_factor := bitrix_sync._bucket_rate_factor(v_main.rate_factor, SPARE_RECOVERY_PER_SEC, v_main.rate_changed_at, v_now);
  if v_factor < 0.999 then
    -- The portal refused recently and the rate has not climbed back: nothing is spare.
    return query select false, null::uuid, 1000;
    return;
  end if;
  v_rate := v_refill * v_factor;
  v_tokens := bitrix_sync._bucket_tokens(v_main.tokens, v_rate, v_burst, v_main.refilled_at, v_now);
  select count(*)::integer into v_in_flight
    from bitrix_sync.crm_inflight_slots s where s.bucket = p_bucket and s.expires_at > v_now;
  if v_in_flight >= v_max_in_flight then
    return query select false, null::uuid, 100;
    return;
  end if;
  if v_tokens < v_reserve + 1 then
    return query select false, null::uuid,
      least(60000, greatest(10, ceil((v_reserve + 1 - v_tokens) / v_rate * 1000)))::integer;
    return;
  end if;

  insert into bitrix_sync.crm_rate_buckets as b (bucket, tokens, refilled_at)
  values (v_spare_bucket, 1, v_now)
  on conflict (bucket) do nothing;
  select * into strict v_spare from bitrix_sync.crm_rate_buckets b where b.bucket = v_spare_bucket for update;
  delete from bitrix_sync.crm_inflight_slots s where s.bucket = v_spare_bucket and s.expires_at <= v_now;
  if exists (select 1 from bitrix_sync.crm_inflight_slots s where s.bucket = v_spare_bucket) then
    return query select false, null::uuid, 100;
    return;
  end if;
  v_share_rate := v_refill * v_share;
  v_share_tokens := bitrix_sync._bucket_tokens(v_spare.tokens, v_share_rate, 1.0, v_spare.refilled_at, v_now);
  if v_share_tokens < 1 then
    return query select false, null::uuid,
      least(600000, greatest(10, ceil((1 - v_share_tokens) / v_share_rate * 1000)))::integer;
    return;
  end if;

  -- The token only: the rate factor and the time it changed stay the sync path's to write.
  update bitrix_sync.crm_rate_buckets b
     set tokens = v_tokens - 1, refilled_at = v_now, updated_at = v_now
   where b.bucket = p_bucket;
  update bitrix_sync.crm_rate_buckets b
     set tokens = v_share_tokens - 1, refilled_at = v_now, updated_at = v_now
   where b.bucket = v_spare_bucket;
  insert into bitrix_sync.crm_inflight_slots as s (bucket, holder, acquired_at, expires_at)
  values (v_spare_bucket, p_holder, v_now, v_now + SPARE_SLOT_TTL)
  returning s.slot_id into v_slot;
  -- Who used the spare budget, and when: one row per day, login and holder.
  insert into bitrix_sync.spare_budget_use as u (day, db_user, holder, bucket, grants, first_at, last_at)
  values (v_now::date, session_user, p_holder, p_bucket, 1, v_now, v_now)
  on conflict (day, db_user, holder, bucket) do update
    set grants = u.grants + 1, last_at = excluded.last_at;
  return query select true, v_slot, 0;
end $$;

--
-- Name: FUNCTION acquire_spare_crm_request(p_bucket text, p_holder text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.acquire_spare_crm_request(p_bucket text, p_holder text) IS 'The convergence audit''s (and diagnose''s) permit for one HTTP request from spare budget only: granted when the shared bucket p_bucket is full (its refill unused), the rate is not cut, no cool-down runs, the sync path has a free in-flight slot and holds no lock on the bucket, and the spare bucket (<bucket>#spare, refilled at audit.budget_share of the rate, room for one request, one request in flight) has a token. The rate, burst, in-flight cap and share are the active settings'', the slot lasts 120 s; the rate factor is never written here. Otherwise granted is false and wait_ms says when to ask again. Each grant is counted in spare_budget_use (day, login, holder). Security definer: the admin role (diagnose) calls it without table rights.';

--
-- Name: acquire_spare_crm_request(text, text, double precision, integer, integer, double precision, integer, double precision); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.acquire_spare_crm_request(p_bucket text, p_holder text, p_refill_per_sec double precision, p_burst integer, p_max_in_flight integer, p_share double precision, p_slot_ttl_ms integer, p_recovery_per_sec double precision) RETURNS TABLE(granted boolean, slot_id uuid, wait_ms integer)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select a.granted, a.slot_id, a.wait_ms from bitrix_sync.acquire_spare_crm_request(p_bucket, p_holder) a
$$;

--
-- Name: FUNCTION acquire_spare_crm_request(p_bucket text, p_holder text, p_refill_per_sec double precision, p_burst integer, p_max_in_flight integer, p_share double precision, p_slot_ttl_ms integer, p_recovery_per_sec double precision); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.acquire_spare_crm_request(p_bucket text, p_holder text, p_refill_per_sec double precision, p_burst integer, p_max_in_flight integer, p_share double precision, p_slot_ttl_ms integer, p_recovery_per_sec double precision) IS 'The previous release''s form of acquire_spare_crm_request(text, text), kept for it: the limiter numbers it passes (rate, burst, in-flight cap, share, slot lifetime, recovery) are ignored; the settings and the server decide.';

--
-- Name: settings_versions; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.settings_versions (
    version integer NOT NULL,
    status character varying(16) DEFAULT 'draft'::character varying NOT NULL,
    settings_values jsonb NOT NULL,
    validation_errors jsonb,
    based_on integer,
    rollback_of integer,
    note text,
    created_by character varying(128) NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    validated_at timestamp with time zone,
    activated_by character varying(128),
    activated_at timestamp with time zone,
    superseded_at timestamp with time zone,
    created_db_user character varying(128) DEFAULT SESSION_USER,
    validated_db_user character varying(128),
    activated_db_user character varying(128),
    CONSTRAINT settings_versions_settings_values_check CHECK ((jsonb_typeof(settings_values) = 'object'::text)),
    CONSTRAINT settings_versions_status_check CHECK (((status)::text = ANY ((ARRAY['draft'::character varying, 'validated'::character varying, 'rejected'::character varying, 'active'::character varying, 'superseded'::character varying])::text[])))
);

--
-- Name: TABLE settings_versions; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.settings_versions IS 'Versions of the hot settings with validation status and audit. Exactly one active version; only a validated version can be activated; rollback activates a copy of an earlier version.';

--
-- Name: COLUMN settings_versions.settings_values; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.settings_versions.settings_values IS 'Complete key -> value object of this version.';

--
-- Name: COLUMN settings_versions.rollback_of; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.settings_versions.rollback_of IS 'For a rollback: the earlier version whose values this one restores.';

--
-- Name: COLUMN settings_versions.created_db_user; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.settings_versions.created_db_user IS 'The database login (session_user) that proposed the version (propose_settings, rollback_settings); created_by is the name it declared. Null for versions recorded before this column existed.';

--
-- Name: COLUMN settings_versions.validated_db_user; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.settings_versions.validated_db_user IS 'The database login (session_user) that validated (or rejected) the version.';

--
-- Name: COLUMN settings_versions.activated_db_user; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.settings_versions.activated_db_user IS 'The database login (session_user) that activated the version; activated_by is the name it declared.';

--
-- Name: activate_settings_version(integer, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.activate_settings_version(p_version integer, p_actor text) RETURNS bitrix_sync.settings_versions
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.settings_versions;
begin
  if p_actor is null or length(btrim(p_actor)) = 0 then
    raise exception 'activation needs an actor for the audit' using errcode = 'BS004', hint = 'Pass who you are.';
  end if;
  select * into v_row from bitrix_sync.settings_versions where version = p_version for update;
  if not found then
    raise exception 'settings version % does not exist', p_version using errcode = 'BS005', hint = 'See bitrix_sync.settings_versions.';
  end if;
  if v_row.status <> 'validated' then
    raise exception 'settings version % is %; only a validated version can be activated', p_version, v_row.status
      using errcode = 'BS008',
            hint = case when v_row.status = 'draft' then 'Run validate_settings_version() first.'
                        when v_row.status = 'rejected' then 'Fix the values listed in validation_errors and propose a new version.'
                        else 'To return to an earlier version use rollback_settings().' end;
  end if;
  -- Revalidate: the catalogue may have changed since validation.
  if jsonb_array_length(bitrix_sync._settings_errors(v_row.settings_values)) > 0 then
    raise exception 'settings version % no longer validates against the catalogue', p_version
      using errcode = 'BS008', hint = 'Propose a new version.';
  end if;
  update bitrix_sync.settings_versions set status = 'superseded', superseded_at = now() where status = 'active';
  update bitrix_sync.settings_versions
     set status = 'active', activated_by = btrim(p_actor), activated_db_user = session_user, activated_at = now()
   where version = p_version
  returning * into v_row;
  perform pg_notify('bitrix_sync_settings', v_row.version::text);
  return v_row;
end $$;

--
-- Name: FUNCTION activate_settings_version(p_version integer, p_actor text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.activate_settings_version(p_version integer, p_actor text) IS 'validated -> active; the previous active version becomes superseded. Records who (the declared actor and the login, session_user) and when, and NOTIFYs bitrix_sync_settings.';

--
-- Name: entity_external_mapping; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.entity_external_mapping (
    id uuid DEFAULT bitrix_sync.time_ordered_uuid() NOT NULL,
    entity_type character varying(64) DEFAULT 'user'::character varying NOT NULL,
    entity_id uuid NOT NULL,
    external_system character varying(32) DEFAULT 'bitrix24'::character varying NOT NULL,
    external_entity_type character varying(32) DEFAULT 'contact'::character varying NOT NULL,
    external_id character varying(128) NOT NULL,
    status character varying(16) DEFAULT 'active'::character varying NOT NULL,
    opened_at timestamp with time zone DEFAULT now() NOT NULL,
    closed_at timestamp with time zone,
    close_reason character varying(64),
    workflow_id uuid,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    held_at timestamp with time zone,
    held_crm_updated_at timestamp with time zone,
    hold_released_at timestamp with time zone,
    hold_released_by character varying(16),
    held_values_hash character varying(64),
    CONSTRAINT entity_external_mapping_active_open CHECK ((((status)::text <> 'active'::text) OR ((closed_at IS NULL) AND (close_reason IS NULL)))),
    CONSTRAINT entity_external_mapping_closed_documented CHECK ((((status)::text = 'active'::text) OR ((closed_at IS NOT NULL) AND (close_reason IS NOT NULL)))),
    CONSTRAINT entity_external_mapping_entity_type_check CHECK (((entity_type)::text = 'user'::text)),
    CONSTRAINT entity_external_mapping_external_entity_type_check CHECK (((external_entity_type)::text = 'contact'::text)),
    CONSTRAINT entity_external_mapping_external_id_check CHECK (((external_id)::text ~ '^[1-9][0-9]{0,17}$'::text)),
    CONSTRAINT entity_external_mapping_external_system_check CHECK (((external_system)::text = 'bitrix24'::text)),
    CONSTRAINT entity_external_mapping_held_values CHECK (((held_values_hash IS NULL) OR ((held_at IS NOT NULL) AND ((held_values_hash)::text ~ '^[A-Za-z0-9_-]{8}:v3:[A-Za-z0-9_-]{43}$'::text)))),
    CONSTRAINT entity_external_mapping_hold CHECK ((((hold_released_at IS NULL) = (hold_released_by IS NULL)) AND ((hold_released_at IS NULL) OR (held_at IS NOT NULL)) AND ((held_crm_updated_at IS NULL) OR (held_at IS NOT NULL)) AND ((hold_released_by IS NULL) OR ((hold_released_by)::text = ANY ('{robot_webhook,admin}'::text[])))))
)
WITH (autovacuum_vacuum_scale_factor='0.05', autovacuum_vacuum_insert_scale_factor='0.05', autovacuum_analyze_scale_factor='0.02');

--
-- Name: TABLE entity_external_mapping; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.entity_external_mapping IS 'The canonical user <-> Bitrix24 Contact link (§4, §6.3). At most one active row per user and per Contact; rows are never deleted (history). Written only through bitrix_sync mapping functions by the runtime role.';

--
-- Name: COLUMN entity_external_mapping.entity_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.entity_external_mapping.entity_id IS 'han_app.user_identity.id.';

--
-- Name: COLUMN entity_external_mapping.external_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.entity_external_mapping.external_id IS 'Bitrix24 Contact ID as text.';

--
-- Name: COLUMN entity_external_mapping.status; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.entity_external_mapping.status IS 'active | closed | broken. closed and broken are final.';

--
-- Name: COLUMN entity_external_mapping.close_reason; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.entity_external_mapping.close_reason IS 'Why the link ended: deactivated, rebound, taken_over, contact_not_found, legacy_duplicate, ...';

--
-- Name: COLUMN entity_external_mapping.workflow_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.entity_external_mapping.workflow_id IS 'Workflow that opened or last closed the row (correlation).';

--
-- Name: COLUMN entity_external_mapping.held_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.entity_external_mapping.held_at IS 'Set when the link was made by phone alone (B1.1, B2.1) while mapping.hold_after_phone_link was on: the Contact''s CRM-master fields are held back from the App until the hold is released. Null: never held.';

--
-- Name: COLUMN entity_external_mapping.held_crm_updated_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.entity_external_mapping.held_crm_updated_at IS 'The Contact''s updatedTime at the first read after the link (the service''s own write of the user id included): a robot webhook releases the hold only when its read shows a newer one.';

--
-- Name: COLUMN entity_external_mapping.hold_released_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.entity_external_mapping.hold_released_at IS 'When the hold ended: the CRM-master fields were applied from then on. Null while held or never held.';

--
-- Name: COLUMN entity_external_mapping.hold_released_by; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.entity_external_mapping.hold_released_by IS 'robot_webhook (a robot webhook reported a CRM change after the link) | admin (confirm_phone_link; who and why in admin_actions).';

--
-- Name: COLUMN entity_external_mapping.held_values_hash; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.entity_external_mapping.held_values_hash IS 'The keyed hash of the Contact''s CRM-master values (name, e-mail, citizenship) at the first read after a held link, with the hash key''s id (src/hash.ts heldValuesHash): a robot webhook releases the hold only when its read gives another one. Null while no read with values was seen.';

--
-- Name: active_mapping_for_contact(text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.active_mapping_for_contact(p_contact_id text) RETURNS bitrix_sync.entity_external_mapping
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select * from bitrix_sync.entity_external_mapping
   where external_system = 'bitrix24' and external_entity_type = 'contact' and external_id = p_contact_id
     and status = 'active'
$$;

--
-- Name: FUNCTION active_mapping_for_contact(p_contact_id text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.active_mapping_for_contact(p_contact_id text) IS 'The Contact''s active user link, or null.';

--
-- Name: active_mapping_for_user(uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.active_mapping_for_user(p_user_id uuid) RETURNS bitrix_sync.entity_external_mapping
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select * from bitrix_sync.entity_external_mapping
   where external_system = 'bitrix24' and entity_type = 'user' and entity_id = p_user_id and status = 'active'
$$;

--
-- Name: FUNCTION active_mapping_for_user(p_user_id uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.active_mapping_for_user(p_user_id uuid) IS 'The user''s active Contact link, or null.';

--
-- Name: active_settings(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.active_settings() RETURNS jsonb
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select jsonb_object_agg(s.key, coalesce(v.settings_values -> s.key, s.default_value, 'null'::jsonb))
           || jsonb_build_object('_version', v.version)
    from bitrix_sync.settings s
    left join bitrix_sync.settings_versions v on v.status = 'active'
   group by v.version
$$;

--
-- Name: FUNCTION active_settings(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.active_settings() IS 'The active version''s values with catalogue defaults filled in, plus _version. What workers read and cache.';

--
-- Name: advance_registered_scan(uuid, bigint, integer, boolean); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.advance_registered_scan(p_lease_token uuid, p_after_id bigint, p_listed integer, p_complete boolean) RETURNS bitrix_sync.audit_state
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.audit_state;
begin
  perform bitrix_sync._check_audit_lease(p_lease_token);
  if p_after_id is null or p_after_id < 0 or p_listed is null or p_listed < 0 or p_complete is null then
    raise exception 'the registered scan moves to a Contact ID (>= 0) with a count of listed Contacts'
      using errcode = 'BS004', hint = 'Pass the highest Contact ID listed, how many were listed, and whether the list ended.';
  end if;
  update bitrix_sync.audit_state s
     set registered_after_id = case when p_complete then 0 else p_after_id end,
         registered_cycle_seen = case when p_complete then 0 else s.registered_cycle_seen + p_listed end,
         registered_cycle_total = case when p_complete then s.registered_cycle_seen + p_listed else s.registered_cycle_total end,
         registered_cycle_finished_at = case when p_complete then now() else s.registered_cycle_finished_at end,
         registered_cycle_started_at = case when p_complete then null else s.registered_cycle_started_at end
   where s.singleton
  returning * into v_row;
  return v_row;
end $$;

--
-- Name: FUNCTION advance_registered_scan(p_lease_token uuid, p_after_id bigint, p_listed integer, p_complete boolean); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.advance_registered_scan(p_lease_token uuid, p_after_id bigint, p_listed integer, p_complete boolean) IS 'Moves the running audit''s scan of registered Contacts on: the next page starts above p_after_id; p_complete (the list ended) starts a new cycle and keeps the cycle''s count, which sizes the pages of later sampled runs.';

--
-- Name: alert_config_problem(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.alert_config_problem() RETURNS text
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_active jsonb;
begin
  begin
    if bitrix_sync.alert_entity_type_id() is null then
      return null; -- alerts are not configured: the alert receiver answers receiver_not_configured
    end if;
  exception when others then
    return 'alert_config_invalid';
  end;
  -- Configured: every alerts.* value must still pass today's catalogue (an older active version
  -- may predate a bound).
  v_active := bitrix_sync.active_settings() - '_version';
  if exists (select 1 from jsonb_array_elements_text(bitrix_sync._settings_errors(v_active)) e
              where e like 'alerts.%') then
    return 'alert_config_invalid';
  end if;
  return null;
end $$;

--
-- Name: FUNCTION alert_config_problem(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.alert_config_problem() IS 'Readiness (§14): alert_config_invalid when alerts.entity_type_id is set but alerts cannot work with the active settings (the entity type is not a usable int4, or an alerts.* value fails today''s catalogue); null otherwise. Names no value.';

--
-- Name: alert_entity_type_id(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.alert_entity_type_id() RETURNS integer
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_value jsonb := bitrix_sync._active_setting('alerts.entity_type_id');
  v_num numeric;
begin
  if jsonb_typeof(v_value) = 'null' then
    return null;
  end if;
  if jsonb_typeof(v_value) = 'number' then
    v_num := (v_value #>> '{}')::numeric;
    -- A version activated before the int4 bound and the normalisation may hold 1036.0 or 3e9.
    if v_num = trunc(v_num) and v_num between 1 and 2147483647 then
      return v_num::integer;
    end if;
  end if;
  raise exception 'alerts.entity_type_id of the active settings is not a usable entityTypeId'
    using errcode = 'BS023',
          hint = 'Propose the smart process''s entityTypeId as a whole number, e.g. propose_settings(''{"alerts.entity_type_id": 1036}'', ...), then validate and activate it.';
end $$;

--
-- Name: FUNCTION alert_entity_type_id(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.alert_entity_type_id() IS 'The alert smart process''s entityTypeId from the active settings as int4, null when unset; BS023 when the active value is not a whole number in 1..2^31-1. What accept_webhooks() and readiness read.';

--
-- Name: alerts_to_look_up(integer); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.alerts_to_look_up(p_limit integer) RETURNS TABLE(alert_id bigint, alert_number bigint, alert_type text, fingerprint text)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select a.id, a.alert_number, a.alert_type::text, a.fingerprint::text
    from bitrix_sync.business_alerts a
   where a.id in (
           -- an unanswered add waiting for its lookup
           select c.alert_id from bitrix_sync.crm_commands c
            where c.command_type = 'alert.add' and c.status = 'reconcile' and c.alert_id is not null
           union
           -- a change to send, no item yet, and an earlier add that may have landed
           select u.id from bitrix_sync.business_alerts u
            where u.crm_sync_status = 'pending' and u.item_id is null and bitrix_sync._alert_add_unsafe(u.id))
     and not exists (select 1 from bitrix_sync.crm_commands l
                      where l.alert_id = a.id and l.command_type = 'alert.list'
                        and l.status in ('pending', 'leased', 'in_flight', 'retry_wait'))
   order by a.id
   limit greatest(p_limit, 1)
$$;

--
-- Name: FUNCTION alerts_to_look_up(p_limit integer); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.alerts_to_look_up(p_limit integer) IS 'Alerts whose item must be looked up before anything else is sent: an alert.add in reconcile, or a pending alert without an item whose earlier add may have landed; none with a lookup already under way.';

--
-- Name: analyze_engine_tables(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.analyze_engine_tables() RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  analyze bitrix_sync.workflow_instances, bitrix_sync.crm_commands, han_app.sync_queue;
end $$;

--
-- Name: FUNCTION analyze_engine_tables(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.analyze_engine_tables() IS 'Admin: ANALYZE of the engine''s busiest tables (workflow_instances, crm_commands, sync_queue) after a large backlog appeared, so the planner sees the live rows (docs/runbook.md, BitrixSyncLagOverSla).';

--
-- Name: app_table_hooks(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.app_table_hooks() RETURNS TABLE(relation text, kind text, name text, detail text)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  with app(relname) as (
    values ('user_identity'::name), ('client_profile'::name)
  ), rel as (
    select a.relname, c.oid, c.relkind, c.relrowsecurity, c.relforcerowsecurity
      from app a
      left join pg_catalog.pg_class c on c.relname = a.relname and c.relnamespace = 'han_app'::pg_catalog.regnamespace
  ), outside(classid, objid) as (
    -- Objects that call a function or operator outside pg_catalog.
    select d.classid, d.objid
      from pg_catalog.pg_depend d
      left join pg_catalog.pg_proc f on d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass and f.oid = d.refobjid
      left join pg_catalog.pg_operator o on d.refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass and o.oid = d.refobjid
     where coalesce(f.pronamespace, o.oprnamespace) <> 'pg_catalog'::pg_catalog.regnamespace
  ), project as (
    -- The project's own tables in han_app and the owner they must have: schema bitrix_sync's.
    select t.relname, c.oid, c.relowner, c.relkind,
           (select n.nspowner from pg_catalog.pg_namespace n where n.nspname = 'bitrix_sync') as owner
      from (values ('sync_queue'::name), ('sync_queue_journal'::name)) t(relname)
      left join pg_catalog.pg_class c on c.relname = t.relname and c.relnamespace = 'han_app'::pg_catalog.regnamespace
  )
  select r.relname::text, 'relation', r.relname::text,
         case when r.oid is null then 'missing' else 'relkind ' || r.relkind::text end
    from rel r where r.relkind is distinct from 'r'
  union all
  select r.relname::text, 'row_security', case when r.relforcerowsecurity then 'forced' else 'enabled' end,
         'ALTER TABLE ... ENABLE ROW LEVEL SECURITY'
    from rel r where r.relrowsecurity or r.relforcerowsecurity
  union all
  select r.relname::text, 'policy', p.polname::text, pg_catalog.pg_get_expr(p.polqual, p.polrelid)
    from rel r join pg_catalog.pg_policy p on p.polrelid = r.oid
  union all
  select r.relname::text, 'trigger', t.tgname::text, t.tgfoid::pg_catalog.regprocedure::text
    from rel r join pg_catalog.pg_trigger t on t.tgrelid = r.oid
   where not t.tgisinternal
     and not (t.tgfoid = 'han_app.enqueue_contact_sync()'::pg_catalog.regprocedure
              and t.tgname in ('_500_enqueue_contact_sync_insert', '_500_enqueue_contact_sync_update'))
  union all
  select r.relname::text, 'rule', w.rulename::text, w.ev_type::text
    from rel r join pg_catalog.pg_rewrite w on w.ev_class = r.oid
  union all
  select r.relname::text, case when a.attgenerated = '' then 'default' else 'generated' end, a.attname::text,
         pg_catalog.pg_get_expr(ad.adbin, ad.adrelid)
    from rel r
    join pg_catalog.pg_attrdef ad on ad.adrelid = r.oid
    join pg_catalog.pg_attribute a on a.attrelid = ad.adrelid and a.attnum = ad.adnum
   where exists (select 1 from outside o where o.classid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass and o.objid = ad.oid)
  union all
  select r.relname::text, 'check', c.conname::text, pg_catalog.pg_get_constraintdef(c.oid)
    from rel r join pg_catalog.pg_constraint c on c.conrelid = r.oid and c.contype = 'c'
   where exists (select 1 from outside o where o.classid = 'pg_catalog.pg_constraint'::pg_catalog.regclass and o.objid = c.oid)
  union all
  select r.relname::text, 'index', ic.relname::text, pg_catalog.pg_get_indexdef(i.indexrelid)
    from rel r
    join pg_catalog.pg_index i on i.indrelid = r.oid
    join pg_catalog.pg_class ic on ic.oid = i.indexrelid
   where exists (select 1 from outside o where o.classid = 'pg_catalog.pg_class'::pg_catalog.regclass and o.objid = i.indexrelid)
  union all
  select r.relname::text, 'column_type', a.attname::text, a.atttypid::pg_catalog.regtype::text
    from rel r
    join pg_catalog.pg_attribute a on a.attrelid = r.oid and a.attnum > 0 and not a.attisdropped
    join pg_catalog.pg_type ty on ty.oid = a.atttypid
   where ty.typnamespace <> 'pg_catalog'::pg_catalog.regnamespace and ty.typtype <> 'e'
  union all
  select r.relname::text, 'child', i.inhrelid::pg_catalog.regclass::text, 'inherits from it'
    from rel r join pg_catalog.pg_inherits i on i.inhparent = r.oid
  union all
  select p.relname::text, 'owner', p.relname::text,
         case when p.oid is null then 'missing'
              else 'owned by ' || p.relowner::pg_catalog.regrole::text || ', relkind ' || p.relkind::text end
    from project p
   where p.oid is null or p.relowner <> p.owner or p.relkind <> 'r'
  order by 1, 2, 3
$$;

--
-- Name: FUNCTION app_table_hooks(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.app_table_hooks() IS 'Code the App''s owner attached to han_app.user_identity and han_app.client_profile besides the project''s own (docs/security.md, "The App''s tables"): triggers, rules, row security and its policies, defaults, generated columns, CHECKs and index expressions calling a function or operator outside pg_catalog, columns of a type outside pg_catalog (enums aside), tables inheriting from them, either table missing or not an ordinary table (relation), and a project table in han_app that the project''s schema owner does not own (owner). One row each: the table (without the schema), the kind, the name and a detail. Preflight and readiness compare it with BITRIX_SYNC_APP_TABLE_HOOKS.';

--
-- Name: contact_snapshots; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.contact_snapshots (
    contact_id character varying(128) NOT NULL,
    user_id uuid NOT NULL,
    name_hash character varying(64),
    email_hash character varying(64),
    phone_hash character varying(64),
    citizenship_enum_id character varying(32),
    citizenship_dictionary_loaded_at timestamp with time zone,
    registered boolean,
    crm_created_at timestamp with time zone,
    crm_updated_at timestamp with time zone,
    last_applied_source character varying(16),
    last_applied_at timestamp with time zone,
    last_webhook_received_at timestamp with time zone,
    last_webhook_source_at timestamp with time zone,
    stale boolean DEFAULT false NOT NULL,
    stale_reason character varying(64),
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT contact_snapshots_contact_id_check CHECK (((contact_id)::text ~ '^[1-9][0-9]{0,17}$'::text)),
    CONSTRAINT contact_snapshots_last_applied_source_check CHECK (((last_applied_source)::text = ANY ((ARRAY['app_create'::character varying, 'webhook'::character varying, 'reconciliation'::character varying])::text[])))
)
WITH (autovacuum_vacuum_scale_factor='0.05', autovacuum_vacuum_insert_scale_factor='0.05', autovacuum_analyze_scale_factor='0.02');

--
-- Name: TABLE contact_snapshots; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.contact_snapshots IS 'What bitrix-sync last saw or wrote of each linked Contact (§6.4): hashes instead of values, the citizenship enum ID, CRM source timestamps and which path applied them. Decides whether an event is newer than what the App holds.';

--
-- Name: COLUMN contact_snapshots.name_hash; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.contact_snapshots.name_hash IS 'Keyed hash of NAME as applied: "v3:" HMAC-SHA256 over "name", NUL and the value; "v2:..." (unlabelled) in rows written before 000029, read as legacy; ''cleared'' where an unkeyed hash was cleared (unknown until the next apply). No value copies.';

--
-- Name: COLUMN contact_snapshots.email_hash; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.contact_snapshots.email_hash IS 'Keyed hash of the e-mail as applied: "v3:" HMAC-SHA256 over "email", NUL and the value; "v2:..." (unlabelled) in rows written before 000029, read as legacy; ''cleared'' where an unkeyed hash was cleared. No value copies.';

--
-- Name: COLUMN contact_snapshots.phone_hash; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.contact_snapshots.phone_hash IS 'Keyed hash of the phone bitrix-sync last wrote into the Contact (the entry the next change overwrites): "v3:" HMAC-SHA256 over "phone", NUL and the value; older forms (v2, plain SHA-256) are re-keyed by the service.';

--
-- Name: COLUMN contact_snapshots.crm_updated_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.contact_snapshots.crm_updated_at IS 'Contact updatedTime last applied; older reads change nothing.';

--
-- Name: COLUMN contact_snapshots.last_applied_source; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.contact_snapshots.last_applied_source IS 'app_create | webhook | reconciliation.';

--
-- Name: COLUMN contact_snapshots.last_webhook_source_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.contact_snapshots.last_webhook_source_at IS 'The CRM time (updatedTime) of the Contact as read for the last robot webhook applied; with last_webhook_received_at, when the robot called.';

--
-- Name: COLUMN contact_snapshots.stale; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.contact_snapshots.stale IS 'The App profile may be behind the CRM (e.g. Contact not found); profile values are kept, not cleared.';

--
-- Name: apply_crm_master_fields(uuid, text, text, text, text, text, text, text, timestamp with time zone, boolean, timestamp with time zone, timestamp with time zone, text, timestamp with time zone); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.apply_crm_master_fields(p_user_id uuid, p_contact_id text, p_full_name text, p_citizenship text, p_email text, p_name_hash text, p_email_hash text, p_citizenship_enum_id text, p_dictionary_loaded_at timestamp with time zone, p_registered boolean, p_crm_created_at timestamp with time zone, p_crm_updated_at timestamp with time zone, p_source text, p_webhook_received_at timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS bitrix_sync.contact_snapshots
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.contact_snapshots;
begin
  if p_source is null or p_source not in ('app_create', 'webhook', 'reconciliation') then
    raise exception 'the source of CRM-master fields is app_create, webhook or reconciliation, not %', p_source
      using errcode = 'BS004', hint = 'Name the path that read the Contact.';
  end if;
  -- An older read than the snapshot changes nothing. The caller checks this first; the check here,
  -- under the snapshot row's lock, also holds when two steps of one transaction (a step group, see
  -- src/db/statement-batcher.ts) read the snapshot before either wrote it.
  select * into v_row from bitrix_sync.contact_snapshots s where s.contact_id = p_contact_id for update;
  if found and p_crm_updated_at < v_row.crm_updated_at then
    return v_row;
  end if;
  -- For the rest of the caller's transaction: the App's trigger records no intent for this write.
  perform set_config('han.sync_suppress', 'true', true);
  -- As the App writer, not as the caller: whatever the App runs on its table gets the writer's rights.
  perform bitrix_sync._write_app_crm_master(p_user_id, p_full_name, p_citizenship, p_email,
                                            coalesce(p_crm_updated_at, now()));
  insert into bitrix_sync.contact_snapshots
    (contact_id, user_id, name_hash, email_hash, citizenship_enum_id, citizenship_dictionary_loaded_at,
     registered, crm_created_at, crm_updated_at, last_applied_source, last_applied_at,
     last_webhook_received_at, last_webhook_source_at, stale, stale_reason)
  values (p_contact_id, p_user_id, p_name_hash, p_email_hash, p_citizenship_enum_id, p_dictionary_loaded_at,
          p_registered, p_crm_created_at, p_crm_updated_at, p_source, now(), p_webhook_received_at,
          case when p_source = 'webhook' then p_crm_updated_at end, false, null)
  on conflict (contact_id) do update
    set user_id = excluded.user_id, name_hash = excluded.name_hash, email_hash = excluded.email_hash,
        citizenship_enum_id = excluded.citizenship_enum_id,
        citizenship_dictionary_loaded_at = coalesce(excluded.citizenship_dictionary_loaded_at,
                                                    bitrix_sync.contact_snapshots.citizenship_dictionary_loaded_at),
        registered = excluded.registered, crm_created_at = excluded.crm_created_at,
        crm_updated_at = excluded.crm_updated_at, last_applied_source = excluded.last_applied_source,
        last_applied_at = now(),
        last_webhook_received_at = coalesce(excluded.last_webhook_received_at,
                                            bitrix_sync.contact_snapshots.last_webhook_received_at),
        -- The CRM time of the state the last processed robot webhook read (§6.4).
        last_webhook_source_at = case when p_source = 'webhook' then p_crm_updated_at
                                      else bitrix_sync.contact_snapshots.last_webhook_source_at end,
        stale = false, stale_reason = null
  returning * into v_row;
  return v_row;
end $$;

--
-- Name: FUNCTION apply_crm_master_fields(p_user_id uuid, p_contact_id text, p_full_name text, p_citizenship text, p_email text, p_name_hash text, p_email_hash text, p_citizenship_enum_id text, p_dictionary_loaded_at timestamp with time zone, p_registered boolean, p_crm_created_at timestamp with time zone, p_crm_updated_at timestamp with time zone, p_source text, p_webhook_received_at timestamp with time zone); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.apply_crm_master_fields(p_user_id uuid, p_contact_id text, p_full_name text, p_citizenship text, p_email text, p_name_hash text, p_email_hash text, p_citizenship_enum_id text, p_dictionary_loaded_at timestamp with time zone, p_registered boolean, p_crm_created_at timestamp with time zone, p_crm_updated_at timestamp with time zone, p_source text, p_webhook_received_at timestamp with time zone) IS 'Writes a Contact''s CRM-master fields (NAME, citizenship display value, picked email; null clears) into the App profile with han.sync_suppress set for the transaction, as the App writer (_write_app_crm_master), and records the snapshot (hashes, enum ID, CRM timestamps, source; for a webhook also when it was received and the CRM time its read found). A read older than the snapshot (p_crm_updated_at before its crm_updated_at) changes nothing and returns the snapshot as it is; the caller checks that first too.';

--
-- Name: apply_privileges(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.apply_privileges() RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_problems text;
  v_row record;
  v_kind text;
begin
  -- A decision naming no object, or an object of the project without a decision for a role, stops
  -- the migration: the grants below would leave it with no rights (or the wrong ones) silently.
  select string_agg(distinct format('%s %s (%s)', d.object_type, d.object_name, d.problem), '; ')
    into v_problems
    from bitrix_sync.role_privilege_drift d
   where d.problem in ('unknown_object', 'undecided');
  if v_problems is not null then
    raise exception 'the privilege catalogue does not match the schema: %', v_problems
      using errcode = 'BS092',
            hint = 'Give each new object its decision in its own sql/ file (insert into bitrix_sync.privilege_decisions: runtime, admin, app; array[]::text[] for nothing) and include that file in the migration; delete the decision of an object the migration drops (sql/README.md).';
  end if;

  revoke all on schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user, bitrix_sync_app_writer;
  revoke all on all tables in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user,
    bitrix_sync_app_writer;
  revoke all on all sequences in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user,
    bitrix_sync_app_writer;
  revoke all on all functions in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user,
    bitrix_sync_app_writer;
  -- In han_app only the project's objects, and PUBLIC only on what the project owns: the App's
  -- schema and its identity and profile tables keep whatever the App grants its other roles and
  -- everyone (role_privilege_drift leaves them out the same way).
  for v_row in
    select distinct rp.object_type, rp.object_name from bitrix_sync.role_privileges rp
     where rp.object_name = 'han_app' or rp.object_name like 'han\_app.%'
  loop
    v_kind := case v_row.object_type when 'view' then 'table' else v_row.object_type end;
    execute format('revoke all on %s %s from bitrix_sync_user, bitrix_sync_admin, han_app_user, bitrix_sync_app_writer',
                   v_kind, v_row.object_name);
    if v_row.object_name not in ('han_app', 'han_app.user_identity', 'han_app.client_profile') then
      execute format('revoke all on %s %s from public', v_kind, v_row.object_name);
    end if;
  end loop;

  for v_row in
    select rp.object_type, rp.object_name, rp.role, spec
      from bitrix_sync.role_privileges rp cross join lateral unnest(rp.privileges) spec
  loop
    v_kind := case v_row.object_type when 'view' then 'table' else v_row.object_type end;
    execute format('grant %s on %s %s to %I', v_row.spec, v_kind, v_row.object_name, v_row.role);
  end loop;

  -- The App's schema and tables belong to the App's owner: the schema owner grants on them only what
  -- that owner granted it WITH GRANT OPTION (deploy/postgres/bootstrap.sql), and a GRANT of anything
  -- else only warns. A privilege of the catalogue still missing there stops the migration.
  select string_agg(format('%s %s%s on %s', d.role, d.privilege, coalesce(' (' || d.column_name || ')', ''),
                           d.object_name), '; ' order by d.object_name, d.role, d.privilege, d.column_name)
    into v_problems
    from bitrix_sync.role_privilege_drift d
   where d.problem = 'missing' and d.object_name in ('han_app', 'han_app.user_identity', 'han_app.client_profile');
  if v_problems is not null then
    raise exception 'the schema owner may not grant what the catalogue gives on the App''s schema and tables: %', v_problems
      using errcode = 'BS096',
            hint = 'Run deploy/postgres/bootstrap.sql again as the DBA with -v app_owner=<the role that owns han_app''s tables>: it grants the schema owner these privileges WITH GRANT OPTION (docs/deployment.md, "The database roles"). Then migrate again.';
  end if;
end $$;

--
-- Name: FUNCTION apply_privileges(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.apply_privileges() IS 'Applies the privilege catalogue (bitrix_sync.role_privileges): BS092 when an object of the project has no decision for a role or a decision names no object; otherwise revokes everything from the four roles and PUBLIC on the project''s objects (in han_app, on those the catalogue names) and grants exactly the catalogue; BS096 when a privilege of the catalogue on the App''s schema or tables is still missing (the schema owner may grant there only what the App''s owner granted it WITH GRANT OPTION). Called by the schema owner at the end of every migration; nobody else may run it.';

--
-- Name: audit_sample(uuid, integer); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.audit_sample(p_lease_token uuid, p_limit integer DEFAULT NULL::integer) RETURNS TABLE(mapping_id uuid, user_id uuid, contact_id text, has_findings boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET row_security TO 'off'
    AS $$
begin
  perform bitrix_sync._check_audit_lease(p_lease_token);
  if p_limit is not null and p_limit < 0 then
    raise exception 'an audit sample cannot have a negative size (%)', p_limit
      using errcode = 'BS004', hint = 'Pass null for every link, or the limit claim_audit_run returned.';
  end if;
  -- Active links of eligible users (the others are judged in SQL: inactive_user_linked). Links
  -- whose user has an open finding of the link kinds come first, so a repair is confirmed by the
  -- next run (a few: the open findings); then the least recently compared (never compared: by when
  -- they were opened), walked from the oldest mark through audit_marks_due_idx and stopped at
  -- p_limit, so a run reads its share of the links, not all of them.
  return query
  with flagged as (
    select m.id, m.entity_id, m.external_id::text as contact_id, k.audited_at
      from (select distinct f.user_id from bitrix_sync.drift_findings f
             where f.user_id is not null and bitrix_sync._drift_kind_group(f.kind) = 'link') f
      join bitrix_sync.entity_external_mapping m on m.entity_id = f.user_id and m.status = 'active'
      join han_app.user_identity u on u.id = m.entity_id and u.record_status = 'active'
      join han_app.client_profile p on p.user_id = m.entity_id and p.record_status = 'active'
      join bitrix_sync.audit_marks k on k.mapping_id = m.id
  ), rest as (
    select m.id, m.entity_id, m.external_id::text as contact_id, k.audited_at
      from bitrix_sync.audit_marks k
      join bitrix_sync.entity_external_mapping m on m.id = k.mapping_id and m.status = 'active'
      join han_app.user_identity u on u.id = m.entity_id and u.record_status = 'active'
      join han_app.client_profile p on p.user_id = m.entity_id and p.record_status = 'active'
     where not exists (select 1 from flagged x where x.id = m.id)
     order by k.audited_at, k.mapping_id
     limit p_limit
  )
  select x.id, x.entity_id, x.contact_id, x.flagged
    from (select f.id, f.entity_id, f.contact_id, true as flagged, f.audited_at from flagged f
          union all
          select r.id, r.entity_id, r.contact_id, false, r.audited_at from rest r) x
   order by x.flagged desc, x.audited_at, x.id
   limit p_limit;
end $$;

--
-- Name: FUNCTION audit_sample(p_lease_token uuid, p_limit integer); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.audit_sample(p_lease_token uuid, p_limit integer) IS 'The links the running audit compares with their Contacts, under its lease: active links of active users, those whose user has an open link finding first, then the least recently compared; p_limit of them (null: all).';

--
-- Name: auto_repair_drift(text[]); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.auto_repair_drift(p_kinds text[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET row_security TO 'off'
    AS $$
declare
  v_count integer;
begin
  if p_kinds is null or cardinality(p_kinds) = 0 then
    return 0;
  end if;
  if exists (select 1 from unnest(p_kinds) k where bitrix_sync._drift_kind_group(k) is null) then
    raise exception 'an automatic repair names a kind that does not exist'
      using errcode = 'BS004', hint = 'Kinds are the entries of audit.auto_repair_kinds.';
  end if;
  select count(*) into v_count
    from bitrix_sync._repair_drift('audit:auto', 'automatic repair after the convergence audit (audit.auto_repair_kinds)',
                                   null, p_kinds, false, false, true) r
   where r.recorded;
  return v_count;
end $$;

--
-- Name: FUNCTION auto_repair_drift(p_kinds text[]); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.auto_repair_drift(p_kinds text[]) IS 'The audit''s automatic repair (setting audit.auto_repair_kinds): repair_drift for findings of p_kinds that no repair has touched yet (a finding a repair did not fix waits for an admin), audited in drift_repairs as audit:auto. Returns how many users it recorded intents for.';

--
-- Name: begin_command_reconcile(bigint, uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.begin_command_reconcile(p_id bigint, p_workflow_token uuid) RETURNS bitrix_sync.crm_commands
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.crm_commands;
begin
  v_row := bitrix_sync._workflow_holder(p_id, p_workflow_token);
  update bitrix_sync.crm_commands set status = 'reconcile' where id = p_id returning * into v_row;
  return v_row;
end $$;

--
-- Name: FUNCTION begin_command_reconcile(p_id bigint, p_workflow_token uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.begin_command_reconcile(p_id bigint, p_workflow_token uuid) IS 'uncertain -> reconcile: the workflow (holding its lease) starts the recovery search for an unanswered write.';

--
-- Name: blocked_crm_methods(text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.blocked_crm_methods(p_bucket text) RETURNS TABLE(method text, blocked_until timestamp with time zone)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select m.method, m.blocked_until
    from bitrix_sync.crm_method_blocks m
   where m.bucket = p_bucket and m.blocked_until > clock_timestamp()
   order by m.method
$$;

--
-- Name: FUNCTION blocked_crm_methods(p_bucket text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.blocked_crm_methods(p_bucket text) IS 'REST methods blocked by OPERATION_TIME_LIMIT right now, with the end of each block. The pump holds their commands back.';

--
-- Name: bring_forward_commands(text[], integer); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.bring_forward_commands(p_codes text[], p_limit integer DEFAULT NULL::integer) RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_n integer;
  v_w integer := 0;
  v_l integer := 0;
begin
  if p_limit is not null and p_limit < 1 then
    raise exception 'bring_forward_commands needs a positive limit or none'
      using errcode = 'BS004', hint = 'Pass 1 for a probe, null for every waiting retry.';
  end if;
  -- Retries that wait only because the portal as a whole failed (the caller's codes): due now. They
  -- are claimed batch by batch through the limiter like any due command, so this is no stampede.
  with picked as (
    select c.id from bitrix_sync.crm_commands c
     where c.status = 'retry_wait' and c.next_attempt_at > now() and c.last_error_code = any(p_codes)
     order by c.next_attempt_at, c.id
     limit p_limit
     for update skip locked
  )
  update bitrix_sync.crm_commands c set next_attempt_at = now()
    from picked where c.id = picked.id;
  get diagnostics v_n = row_count;
  if v_n > 0 then
    perform pg_notify('bitrix_sync_commands', '');
  end if;
  -- When the portal answers again (no limit; a probe is one command): workflows that wait in
  -- waiting_retry for the same reason (a command past its own retries handed back to its workflow
  -- with a portal-wide code) are due now too. Their step reads before it writes, and what it issues
  -- goes through the limiter. A wait for a late write that may still land (awaiting_late_write)
  -- keeps the moment its late execution settles (step_data.late_write_settles_at, written by the
  -- step: src/workflows/step/core.ts) and loses only the backoff beyond it, which the portal's
  -- failures had grown; a wait that does not say when it settles keeps its time.
  if p_limit is null then
    with picked as (
      select w.id from bitrix_sync.workflow_instances w
       where w.state = 'waiting_retry' and w.next_attempt_at > now() and w.last_error_code = any(p_codes)
       for update skip locked
    )
    update bitrix_sync.workflow_instances w set next_attempt_at = now()
      from picked where w.id = picked.id;
    get diagnostics v_w = row_count;
    with picked as (
      select w.id,
             case when (w.step_data ->> 'late_write_settles_at') ~ '^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$'
                  then greatest(now(), (w.step_data ->> 'late_write_settles_at')::timestamptz) end as settles
        from bitrix_sync.workflow_instances w
       where w.state = 'waiting_retry' and w.next_attempt_at > now()
         and w.last_error_code = 'awaiting_late_write'
       for update skip locked
    )
    update bitrix_sync.workflow_instances w set next_attempt_at = picked.settles
      from picked where w.id = picked.id and w.next_attempt_at > picked.settles;
    get diagnostics v_l = row_count;
    if v_w + v_l > 0 then
      perform pg_notify('bitrix_sync_workflows', '');
    end if;
  end if;
  return v_n + v_w + v_l;
end $_$;

--
-- Name: FUNCTION bring_forward_commands(p_codes text[], p_limit integer); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.bring_forward_commands(p_codes text[], p_limit integer) IS 'Makes retry_wait commands whose last error is one of p_codes (failures of the whole portal: server errors, lost connections, limit refusals) due now, the earliest first, at most p_limit (null: all). With no limit, also makes waiting_retry workflows whose last error is one of p_codes due now (a command handed back to its workflow), and cuts the wait of awaiting_late_write workflows to the moment their late write settles (step_data.late_write_settles_at), never below. The pump calls it with one command as a probe while the portal fails, and with no limit when the portal answers again. Returns how many commands and workflows.';

--
-- Name: bring_forward_webhooks(text[]); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.bring_forward_webhooks(p_codes text[]) RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_n integer;
  v_receivers text[];
  v_receiver text;
begin
  if p_codes is null then
    raise exception 'bring_forward_webhooks needs the failure codes to bring forward'
      using errcode = 'BS004', hint = 'Pass the portal-wide failure codes (src/crm/classify.ts, PORTAL_WIDE_CODES).';
  end if;
  -- Retries that wait only because the portal as a whole failed (the caller's codes): due now. The
  -- receivers' loops take them in their usual rounds, one read per Contact or item, through the
  -- limiter, so this is no stampede.
  with picked as (
    select w.id from bitrix_sync.webhook_inbox w
     where w.status = 'retry_wait' and w.next_attempt_at > now() and w.last_error_code = any(p_codes)
     for update skip locked
  ), moved as (
    update bitrix_sync.webhook_inbox w set next_attempt_at = now()
      from picked where w.id = picked.id
    returning w.receiver
  )
  select count(*)::integer, coalesce(array_agg(distinct m.receiver::text), '{}')
    into v_n, v_receivers from moved m;
  foreach v_receiver in array v_receivers loop
    perform pg_notify('bitrix_sync_webhooks', v_receiver);
  end loop;
  return v_n;
end $$;

--
-- Name: FUNCTION bring_forward_webhooks(p_codes text[]); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.bring_forward_webhooks(p_codes text[]) IS 'Inbox events waiting in retry_wait after a failure with one of p_codes (the portal-wide codes) become due now, and their receivers are notified; returns how many were brought forward. Called by the pump when the portal answers again, beside bring_forward_commands().';

--
-- Name: cancel_parked_workflow(uuid, text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.cancel_parked_workflow(p_workflow_id uuid, p_reason text, p_operator_id text) RETURNS TABLE(workflow_id uuid, state text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
declare
  v_wf bitrix_sync.workflow_instances;
  v_request uuid;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator_id);
  select * into v_wf from bitrix_sync.workflow_instances w where w.id = p_workflow_id for update;
  if not found then
    raise exception 'there is no workflow %', p_workflow_id
      using errcode = 'BS005', hint = 'Copy the id from select * from bitrix_sync.parked_workflows.';
  end if;
  if v_wf.workflow_type = 'contact.rebind' then
    select r.id into v_request from bitrix_sync.rebind_requests r where r.workflow_id = p_workflow_id;
    raise exception 'workflow % carries a rebind request', p_workflow_id
      using errcode = 'BS004',
            hint = format('Cancel the request instead, which records what the CRM holds: select * from bitrix_sync.cancel_rebind_request(%L, ''<why>'', ''ops:<you>'');', v_request);
  end if;
  if v_wf.state <> 'waiting_manual' then
    raise exception 'workflow % is %, not parked', p_workflow_id, v_wf.state
      using errcode = 'BS002',
            hint = 'Only a workflow in waiting_manual is cancelled here; a running one finishes on its own. select * from bitrix_sync.parked_workflows lists the parked ones.';
  end if;
  perform bitrix_sync._abandon_workflow_commands(p_workflow_id, 'cancelled_by_admin');
  -- The reason it parked stays in last_error_code; the outcome says a person ended it.
  v_wf := bitrix_sync.fire_workflow_event(p_workflow_id, null, 'cancel',
                                          jsonb_build_object('outcome', 'cancelled_by_admin'));
  perform bitrix_sync._record_admin_action('cancel_workflow', p_workflow_id, null, null, null, p_reason, p_operator_id);
  return query select v_wf.id, v_wf.state::text;
end $$;

--
-- Name: FUNCTION cancel_parked_workflow(p_workflow_id uuid, p_reason text, p_operator_id text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.cancel_parked_workflow(p_workflow_id uuid, p_reason text, p_operator_id text) IS 'Admin (docs/admin.md): waiting_manual -> cancelled (outcome cancelled_by_admin), audited. The user''s next App change starts a new workflow. BS004 missing audit field or a rebind''s workflow (cancel_rebind_request), BS005 unknown workflow, BS002 not parked.';

--
-- Name: cancel_rebind_request(uuid, text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.cancel_rebind_request(p_request_id uuid, p_reason text, p_operator_id text) RETURNS TABLE(request_id uuid, status text, outcome text, workflow_id uuid, workflow_state text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
declare
  v_req bitrix_sync.rebind_requests;
  v_wf bitrix_sync.workflow_instances;
  v_outcome text;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator_id);
  select * into v_req from bitrix_sync.rebind_requests r where r.id = p_request_id for update;
  if not found then
    raise exception 'there is no rebind request %', p_request_id
      using errcode = 'BS005',
            hint = 'The id is what request_bitrix_contact_rebind returned; open ones: select * from bitrix_sync.rebind_request_status where status in (''requested'', ''in_progress'').';
  end if;
  if v_req.status not in ('requested', 'in_progress') then
    raise exception 'rebind request % is already %', p_request_id, v_req.status
      using errcode = 'BS002',
            hint = 'A finished request stays finished; its outcome column says what the CRM holds.';
  end if;
  select * into v_wf from bitrix_sync.workflow_instances w where w.id = v_req.workflow_id for update;
  -- A write on its way to the portal has no known outcome yet: wait for its reply (or for its lease
  -- to expire, which records it as uncertain) so that the outcome recorded below is exact.
  perform 1 from bitrix_sync.crm_commands c
   where c.workflow_id = v_req.workflow_id and c.alert_id is null and c.status = 'in_flight'
     and bitrix_sync._is_write_command(c.command_type)
   for update;
  if found then
    raise exception 'a CRM write of rebind request % is on its way to the portal right now', p_request_id
      using errcode = 'BS007',
            hint = 'Try again in a few seconds: once its reply (or its lease expiry) is recorded, the cancel records exactly what the CRM holds.';
  end if;

  perform bitrix_sync._abandon_workflow_commands(v_req.workflow_id, 'rebind_cancelled');
  v_outcome := bitrix_sync._rebind_crm_outcome(v_req.workflow_id);
  update bitrix_sync.rebind_requests r
     set status = 'cancelled', outcome = v_outcome, cancel_reason = btrim(p_reason),
         cancelled_by = btrim(p_operator_id), cancelled_db_user = session_user, completed_at = now()
   where r.id = p_request_id
  returning * into v_req;
  -- The workflow stops here, whoever holds its lease: a step still running is refused at its next
  -- fenced call (BS001). An App change held during the rebind starts now, on the old link.
  if v_wf.state not in ('succeeded', 'failed', 'cancelled') then
    update bitrix_sync.workflow_instances w
       set state = 'cancelled', outcome = 'rebind_cancelled', lease_token = null, locked_by = null,
           locked_until = null, finished_at = now()
     where w.id = v_wf.id
    returning * into v_wf;
  end if;
  perform bitrix_sync._record_admin_action('cancel_rebind_request', v_wf.id, p_request_id, null, null,
                                           p_reason, p_operator_id);
  if v_outcome <> 'crm_unchanged' then
    raise notice 'the CRM was already changed: %', v_outcome
      using hint = 'docs/admin.md (Rebind, outcomes) says what each outcome leaves in the CRM and what to check there.';
  end if;
  return query select v_req.id, v_req.status::text, v_req.outcome::text, v_wf.id, v_wf.state::text;
end $$;

--
-- Name: FUNCTION cancel_rebind_request(p_request_id uuid, p_reason text, p_operator_id text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.cancel_rebind_request(p_request_id uuid, p_reason text, p_operator_id text) IS 'Admin (docs/admin.md): requested | in_progress -> cancelled with the operator''s reason, audited. Closes the workflow''s unsent and unresolved commands, cancels the workflow (a held App change then starts) and records in outcome what the CRM already holds. BS004 missing audit field, BS005 unknown request, BS002 already finished, BS007 a write is in flight right now.';

--
-- Name: cancel_sync_task(uuid, uuid, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.cancel_sync_task(p_id uuid, p_lease_token uuid, p_reason text) RETURNS han_app.sync_queue
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row han_app.sync_queue;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  perform bitrix_sync._check_code(p_reason);
  update han_app.sync_queue
     set status = 'cancelled', cancel_reason = p_reason, completed_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION cancel_sync_task(p_id uuid, p_lease_token uuid, p_reason text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.cancel_sync_task(p_id uuid, p_lease_token uuid, p_reason text) IS 'leased -> cancelled with a reason code (e.g. user not eligible). Refuses a stale token (BS001).';

--
-- Name: claim_audit_run(boolean, boolean); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.claim_audit_run(p_all boolean DEFAULT false, p_force boolean DEFAULT false) RETURNS TABLE(lease_token uuid, mode text, started_at timestamp with time zone, sample_limit integer, registered_after_id bigint, registered_pages integer, recheck_contact_ids bigint[])
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.audit_state;
  v_interval_sec integer := (bitrix_sync._active_setting('audit.interval_sec') #>> '{}')::integer;
  v_lease interval := make_interval(secs => (bitrix_sync._active_setting('audit.lease_sec') #>> '{}')::integer);
  v_period_sec double precision := (bitrix_sync._active_setting('audit.period_days') #>> '{}')::integer * 86400.0;
  v_enabled boolean := (bitrix_sync._active_setting('audit.enabled') #>> '{}')::boolean;
  v_links bigint;
  v_due bigint;
  v_mode text := case when coalesce(p_all, false) then 'all' else 'sample' end;
begin
  -- The processing gate (§17): nothing is judged before the cutover, nor while processing is
  -- paused (sql/pause.sql): a paused sync would show as drift.
  if not bitrix_sync.cutover_performed() or bitrix_sync.sync_paused() then
    return;
  end if;
  select * into v_row from bitrix_sync.audit_state s where s.singleton for update skip locked;
  if not found then
    return; -- another claimer holds the row this instant
  end if;
  if v_row.last_run_status = 'running' and v_row.last_run_started_at >= now() - v_lease then
    return; -- a run is in progress
  end if;
  if v_mode = 'sample' and not coalesce(p_force, false)
     and (not v_enabled or v_row.last_run_started_at > now() - make_interval(secs => v_interval_sec)) then
    return; -- switched off, or not due yet
  end if;
  update bitrix_sync.audit_state s
     set last_run_started_at = now(), last_run_mode = v_mode, last_run_status = 'running',
         lease_token = pg_catalog.gen_random_uuid(),
         registered_cycle_started_at = coalesce(s.registered_cycle_started_at, now())
   where s.singleton
  returning * into v_row;

  -- Spread over the period: each run takes its share of the links, and every link that would be
  -- overdue before the next run (never compared: its mark holds when it was opened). The share is
  -- sized from _active_link_count() (exact for small installations, the planner's count for large
  -- ones); the overdue ones are counted exactly, from the oldest mark on, through audit_marks_due_idx.
  v_links := bitrix_sync._active_link_count();
  select count(*) into v_due
    from bitrix_sync.audit_marks k
    join bitrix_sync.entity_external_mapping m on m.id = k.mapping_id and m.status = 'active'
   where k.audited_at <= now() - make_interval(secs => v_period_sec - v_interval_sec);
  return query
  select v_row.lease_token, v_mode, v_row.last_run_started_at,
         case when v_mode = 'all' then null
              else greatest(ceil(v_links * v_interval_sec / v_period_sec), v_due)::integer end,
         case when v_mode = 'all' then 0::bigint else v_row.registered_after_id end,
         case when v_mode = 'all' then null
              else greatest(1, ceil((coalesce(v_row.registered_cycle_total, 0) / 50.0 + 1) * v_interval_sec / v_period_sec))::integer end,
         -- Contacts of open registered findings are read again by ID every run, so a repair is
         -- confirmed without waiting for the scan to come round.
         (select array_agg(x.c order by x.c)
            from (select distinct f.contact_id::bigint as c from bitrix_sync.drift_findings f
                   where bitrix_sync._drift_kind_group(f.kind) = 'registered' and f.contact_id is not null
                   order by 1 limit 2500) x);
end $$;

--
-- Name: FUNCTION claim_audit_run(p_all boolean, p_force boolean); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.claim_audit_run(p_all boolean, p_force boolean) IS 'Starts a convergence audit run when none is running (one still marked running after audit.lease_sec is taken over) and, for a sampled run, when audit.enabled and audit.interval_sec has passed (or p_force). p_all: every active link and the whole registered scan. Returns the lease, how many links to sample (their share of audit.period_days plus those about to be overdue; null: all), where the registered scan goes on, how many pages this run reads (null: to the end), and the Contacts of open registered findings to read again. No row when nothing is to run, and none before perform_cutover() or while paused (pause_sync()).';

--
-- Name: claim_commands(text, integer, interval); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.claim_commands(p_worker text, p_limit integer, p_lease interval) RETURNS SETOF bitrix_sync.crm_commands
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row record;
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the batch.size and lease.ttl_sec settings.';
  end if;
  -- The processing gate (§17, sql/cutover.sql): nothing is claimed before the cutover, nor while
  -- processing is paused (sql/pause.sql).
  if not bitrix_sync.cutover_performed() or bitrix_sync.sync_paused() then
    return;
  end if;

  -- A holder that died with a request out: a write may have landed (uncertain), a read is retried.
  for v_row in
    select c.id, c.command_type, c.workflow_id from bitrix_sync.crm_commands c
     where c.status = 'in_flight' and c.locked_until < now()
     for update skip locked
  loop
    if bitrix_sync._is_write_command(v_row.command_type) then
      update bitrix_sync.crm_commands
         set status = 'uncertain', lease_token = null, locked_by = null, locked_until = null,
             last_error_code = 'lease_expired_in_flight'
       where id = v_row.id;
      if v_row.workflow_id is not null then
        perform bitrix_sync._wake_workflow(v_row.workflow_id);
      end if;
    else
      update bitrix_sync.crm_commands
         set status = 'retry_wait', next_attempt_at = now(), lease_token = null, locked_by = null,
             locked_until = null, last_error_code = 'lease_expired_in_flight'
       where id = v_row.id;
    end if;
  end loop;

  -- retry_wait -> pending (due), then claim pending and expired leased rows.
  update bitrix_sync.crm_commands c set status = 'pending'
   where c.id in (select d.id from bitrix_sync.crm_commands d
                   where d.status = 'retry_wait' and d.next_attempt_at <= now()
                   for update skip locked);

  return query
  with due as (
    select c.id, c.next_attempt_at as sort_at from bitrix_sync.crm_commands c
     where c.status = 'pending' and c.next_attempt_at <= now()
     order by c.next_attempt_at, c.id
     limit p_limit
     for update skip locked
  ), expired as (
    select c.id, c.locked_until as sort_at from bitrix_sync.crm_commands c
     where c.status = 'leased' and c.locked_until < now()
     limit p_limit
     for update skip locked
  ), picked as (
    select id from (select * from due union all select * from expired) x order by sort_at limit p_limit
  )
  update bitrix_sync.crm_commands c
     set status = 'leased', lease_token = gen_random_uuid(), locked_by = left(p_worker, 128),
         locked_until = now() + p_lease, updated_at = now()
    from picked
   where c.id = picked.id
  returning c.*;
end $$;

--
-- Name: FUNCTION claim_commands(p_worker text, p_limit integer, p_lease interval); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.claim_commands(p_worker text, p_limit integer, p_lease interval) IS 'Leases up to p_limit due commands (FIFO by next_attempt_at, id; retries do not block new work) with SKIP LOCKED and new tokens. First recovers holders that died: expired in_flight writes -> uncertain, reads -> retry_wait. Returns nothing before perform_cutover() and while paused (pause_sync()).';

--
-- Name: reconciliation_cursors; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.reconciliation_cursors (
    job_type character varying(32) NOT NULL,
    watermark timestamp with time zone,
    overlap interval DEFAULT '00:02:00'::interval NOT NULL,
    last_run_started_at timestamp with time zone,
    last_success_at timestamp with time zone,
    last_run_status character varying(16),
    last_error_code character varying(64),
    last_scanned integer,
    last_updated integer,
    last_recovered integer,
    recovered_baseline numeric,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    lease_token uuid,
    failed_runs integer DEFAULT 0 NOT NULL,
    retry_at timestamp with time zone,
    CONSTRAINT reconciliation_cursors_failed_runs_check CHECK ((failed_runs >= 0)),
    CONSTRAINT reconciliation_cursors_job_type_check CHECK (((job_type)::text = ANY ((ARRAY['contacts'::character varying, 'alerts'::character varying])::text[]))),
    CONSTRAINT reconciliation_cursors_last_run_status_check CHECK (((last_run_status)::text = ANY ((ARRAY['running'::character varying, 'succeeded'::character varying, 'failed'::character varying])::text[]))),
    CONSTRAINT reconciliation_cursors_overlap_check CHECK ((overlap >= '00:00:00'::interval))
);

--
-- Name: TABLE reconciliation_cursors; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.reconciliation_cursors IS 'Incremental reconciliation state (§10.2, §10.3). The watermark moves only after a whole successful run; the overlap re-reads the boundary.';

--
-- Name: COLUMN reconciliation_cursors.last_recovered; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.reconciliation_cursors.last_recovered IS 'Contacts the last run found newer than their snapshot without a processed webhook.';

--
-- Name: COLUMN reconciliation_cursors.recovered_baseline; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.reconciliation_cursors.recovered_baseline IS 'Smoothed usual value of last_recovered, for the spike alert.';

--
-- Name: COLUMN reconciliation_cursors.lease_token; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.reconciliation_cursors.lease_token IS 'Fencing token of the running run (claim_reconciliation_cursor); only its holder can finish or fail the run.';

--
-- Name: COLUMN reconciliation_cursors.failed_runs; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.reconciliation_cursors.failed_runs IS 'Runs that failed since the last successful one (a run given back at shutdown does not count); 0 after a success.';

--
-- Name: COLUMN reconciliation_cursors.retry_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.reconciliation_cursors.retry_at IS 'When a failed run is due again (its backoff); the interval since the last start still applies when it is later.';

--
-- Name: claim_reconciliation_cursor(text, interval, boolean, interval); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.claim_reconciliation_cursor(p_job_type text, p_interval interval, p_force boolean DEFAULT false, p_overlap interval DEFAULT NULL::interval) RETURNS SETOF bitrix_sync.reconciliation_cursors
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.reconciliation_cursors;
  v_lease interval := make_interval(secs => (bitrix_sync._active_setting('reconcile.lease_sec') #>> '{}')::double precision);
begin
  if p_interval is null or p_interval < interval '0' or p_overlap < interval '0' then
    raise exception 'a reconciliation claim needs a non-negative interval (and overlap)'
      using errcode = 'BS004', hint = 'Check reconcile.contacts_interval_sec, alerts.reconcile_interval_sec and reconcile.overlap_sec.';
  end if;
  -- The processing gate (§17, sql/cutover.sql): nothing is claimed before the cutover, nor while
  -- processing is paused (sql/pause.sql).
  if not bitrix_sync.cutover_performed() or bitrix_sync.sync_paused() then
    return;
  end if;
  insert into bitrix_sync.reconciliation_cursors (job_type) values (p_job_type) on conflict do nothing;
  select * into v_row from bitrix_sync.reconciliation_cursors r
   where r.job_type = p_job_type for update skip locked;
  if not found then
    return; -- another claimer holds the row this instant
  end if;
  if v_row.last_run_status = 'running' and v_row.last_run_started_at >= pg_catalog.now() - v_lease then
    return; -- a run is in progress
  end if;
  -- Due: the interval passed since the last start, or, after a failure, its backoff did.
  if not coalesce(p_force, false)
     and v_row.last_run_started_at > pg_catalog.now() - p_interval
     and not coalesce(v_row.last_run_status = 'failed' and v_row.retry_at <= pg_catalog.now(), false) then
    return; -- not due yet
  end if;
  update bitrix_sync.reconciliation_cursors r
     set last_run_started_at = pg_catalog.now(), last_run_status = 'running', lease_token = pg_catalog.gen_random_uuid(),
         overlap = coalesce(p_overlap, r.overlap), retry_at = null
   where r.job_type = p_job_type
  returning * into v_row;
  return next v_row;
end $$;

--
-- Name: FUNCTION claim_reconciliation_cursor(p_job_type text, p_interval interval, p_force boolean, p_overlap interval); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.claim_reconciliation_cursor(p_job_type text, p_interval interval, p_force boolean, p_overlap interval) IS 'Starts a run of job p_job_type when it is due (last start at least p_interval ago, a failed run''s retry_at reached, or p_force) and no live run holds the cursor (a running run older than reconcile.lease_sec is taken over). Returns the cursor with a new lease_token and last_run_started_at = now(), the next watermark, and failed_runs as it stands (the failures before this run); no row when nothing is to be run, and none before perform_cutover() or while paused (pause_sync()).';

--
-- Name: claim_sync_tasks(text, integer, interval); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.claim_sync_tasks(p_worker text, p_limit integer, p_lease interval) RETURNS SETOF han_app.sync_queue
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_watermark timestamptz;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
  end if;
  -- Nothing is processed before the cutover, and after it only intents recorded since the
  -- watermark (§17 step 8), also when an expired lease is reclaimed.
  select c.cutover_watermark into v_watermark from bitrix_sync.cutover c;
  -- Nor while processing is paused (sql/pause.sql): the App's journal keeps the intents.
  if v_watermark is null or bitrix_sync.sync_paused() then
    return;
  end if;
  -- The App's recorded intents first (han_app.sync_queue_journal). A fold running elsewhere is
  -- waited for (it is short), so every intent committed before this call is in the queue when the
  -- claim below looks: the intake watch's "one more look" (watch_intake()) relies on that.
  perform bitrix_sync.fold_intent_journal(10000, true);
  return query
  with due_pending as (
    -- Pending intents and due retries, each read in the claim index's order (status,
    -- next_attempt_at, created_at) and stopped after p_limit rows, then merged: the claim reads
    -- what it takes, not the whole backlog (one sort of every due row per claim made draining a
    -- backlog of n intents cost n * n / p_limit row reads). Not a user one of whose intents another
    -- intake holds (a live lease): a user's intents are taken one intake at a time, so they are
    -- applied in the order recorded and the next one sees the workflow the earlier one started. The
    -- fold's lock above serializes the claims, so the leases committed by the claim before this one
    -- are seen here (found by drill:rollback: two replicas took a user's deactivation and
    -- reactivation at once, and the user ended deactivated).
    select q.id, q.next_attempt_at as sort_at from han_app.sync_queue q
      where q.status = 'pending' and q.next_attempt_at <= now()
        and q.created_at >= v_watermark
        and not exists (select 1 from han_app.sync_queue l
                         where l.entity_type = q.entity_type and l.entity_id = q.entity_id
                           and l.status = 'leased' and l.locked_until > now())
      order by q.next_attempt_at, q.created_at
      limit p_limit
      for update skip locked
  ), due_retry as (
    select q.id, q.next_attempt_at as sort_at from han_app.sync_queue q
      where q.status = 'retry_wait' and q.next_attempt_at <= now()
        and q.created_at >= v_watermark
        and not exists (select 1 from han_app.sync_queue l
                         where l.entity_type = q.entity_type and l.entity_id = q.entity_id
                           and l.status = 'leased' and l.locked_until > now())
      order by q.next_attempt_at, q.created_at
      limit p_limit
      for update skip locked
  ), expired as (
    select q.id, q.locked_until as sort_at from han_app.sync_queue q
     where q.status = 'leased' and q.locked_until < now() and q.created_at >= v_watermark
     order by q.locked_until
     limit p_limit
     for update skip locked
  ), picked as (
    select id, sort_at from (select * from due_pending union all select * from due_retry union all select * from expired) c order by sort_at limit p_limit
  ), leased as (
    update han_app.sync_queue q
       set status = 'leased',
           locked_by = left(p_worker, 128),
           locked_until = now() + p_lease,
           lease_token = gen_random_uuid(),
           attempt_count = q.attempt_count + 1,
           updated_at = now()
      from picked
     where q.id = picked.id
    returning q as r, picked.sort_at
  )
  -- In queue order: the intake starts or joins a user's workflow intent by intent in this order
  -- (take_sync_tasks), so the user's newest intent is applied last (fold_intent_journal places each
  -- row at its newest intent).
  select (l.r).* from leased l order by l.sort_at, (l.r).created_at, (l.r).id;
end $$;

--
-- Name: FUNCTION claim_sync_tasks(p_worker text, p_limit integer, p_lease interval); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.claim_sync_tasks(p_worker text, p_limit integer, p_lease interval) IS 'Folds the App''s journal first (fold_intent_journal()), then claims up to p_limit due intents recorded since the cutover watermark (pending, due retry_wait, or leased with an expired lease) with FOR UPDATE SKIP LOCKED, reading per status no more rows than it takes (the claim index walked in order), returned in queue order (next_attempt_at, or an expired lease''s end), and none of a user another intake holds an intent of (a live lease); each gets a new lease_token. Two claimers never get the same row. Returns nothing before perform_cutover() and while paused (pause_sync()).';

--
-- Name: claim_webhooks(text, integer, interval, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.claim_webhooks(p_worker text, p_limit integer, p_lease interval, p_receiver text DEFAULT NULL::text) RETURNS SETOF bitrix_sync.webhook_inbox
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_cand record;
  v_row bitrix_sync.webhook_inbox;
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
  end if;
  -- The processing gate (§17, sql/cutover.sql): nothing is claimed before the cutover, nor while
  -- processing is paused (sql/pause.sql).
  if not bitrix_sync.cutover_performed() or bitrix_sync.sync_paused() then
    return;
  end if;
  -- The oldest due events, locked (SKIP LOCKED: another claimer's are left to it); of each entity
  -- among them the oldest event, the oldest p_limit entities first; taken in entity order. Two
  -- claimers can pick events of one entity; the second then waits at the unique index for the
  -- first to commit, and skips the entity. In entity order those waits never form a cycle (no
  -- deadlock), with no per-entity lock. (An advisory lock per entity did that before migration
  -- 000028; any role may take advisory locks, so one could hold back an entity's events for ever.)
  for v_cand in
    with window_ as (
      select w.id, w.receiver, w.entity_id, w.status from bitrix_sync.webhook_inbox w
       where (p_receiver is null or w.receiver = p_receiver)
         and ((w.status in ('received', 'retry_wait') and w.next_attempt_at <= now())
              or (w.status = 'processing' and w.locked_until < now()))
       order by w.id
       limit p_limit * 4
       for update skip locked
    ), firsts as (
      select distinct on (x.receiver, x.entity_id) x.id, x.receiver, x.entity_id, x.status
        from window_ x order by x.receiver, x.entity_id, x.id
    ), chosen as (
      select f.id, f.receiver, f.entity_id, f.status from firsts f order by f.id limit p_limit
    )
    select c.id, c.receiver, c.entity_id, c.status from chosen c order by c.receiver, c.entity_id
  loop
    begin
      update bitrix_sync.webhook_inbox
         set status = 'processing', lease_token = gen_random_uuid(), locked_by = left(p_worker, 128),
             locked_until = now() + p_lease, attempt_count = attempt_count + 1, status_at = now()
       where id = v_cand.id and status = v_cand.status
      returning * into v_row;
    exception when unique_violation then
      -- Another event of this entity is being processed: leave this one for later.
      continue;
    end;
    continue when not found;
    -- The other pending events of the entity are covered by this one read.
    update bitrix_sync.webhook_inbox o
       set status = 'coalesced', coalesced_into = v_row.id, status_at = now()
     where o.receiver = v_row.receiver and o.entity_id = v_row.entity_id and o.status = 'received'
       and o.id <> v_row.id
       and o.id in (select x.id from bitrix_sync.webhook_inbox x
                     where x.receiver = v_row.receiver and x.entity_id = v_row.entity_id and x.status = 'received'
                     for update skip locked);
    return next v_row;
  end loop;
end $$;

--
-- Name: FUNCTION claim_webhooks(p_worker text, p_limit integer, p_lease interval, p_receiver text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.claim_webhooks(p_worker text, p_limit integer, p_lease interval, p_receiver text) IS 'Leases due inbox events, at most one per entity (enforced by a partial unique index; the entities whose oldest due event is oldest first, among the 4 x p_limit oldest due events not locked by another claimer), and coalesces the entity''s other received events into the claimed one. Takes entities in (receiver, entity_id) order, so two claimers that picked one entity never deadlock (the second waits for the first and skips it). Returns nothing before perform_cutover() and while paused (pause_sync()): the receivers keep recording, the events wait.';

--
-- Name: claim_workflows(text, integer, interval); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.claim_workflows(p_worker text, p_limit integer, p_lease interval) RETURNS SETOF bitrix_sync.workflow_instances
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
  end if;
  -- The processing gate (§17, sql/cutover.sql): nothing is claimed before the cutover, nor while
  -- processing is paused (sql/pause.sql).
  if not bitrix_sync.cutover_performed() or bitrix_sync.sync_paused() then
    return;
  end if;
  return query
  with picked as (
    select w.id from bitrix_sync.workflow_instances w
     where w.state in ('created', 'running', 'waiting_retry')
       and w.next_attempt_at <= now()
       and (w.lease_token is null or w.locked_until < now())
     order by w.next_attempt_at, w.created_at
     limit p_limit
     for update skip locked
  )
  update bitrix_sync.workflow_instances w
     set state = 'running',
         lease_token = gen_random_uuid(),
         locked_by = left(p_worker, 128),
         locked_until = now() + p_lease,
         attempt_count = w.attempt_count + 1,
         updated_at = now()
    from picked
   where w.id = picked.id
  returning w.*;
end $$;

--
-- Name: FUNCTION claim_workflows(p_worker text, p_limit integer, p_lease interval); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.claim_workflows(p_worker text, p_limit integer, p_lease interval) IS 'Leases runnable workflows (created, running, due waiting_retry; expired leases reclaimed) with SKIP LOCKED and a new token; created -> running (start), waiting_retry -> running (retry_due). Returns nothing before perform_cutover() and while paused (pause_sync()).';

--
-- Name: clear_unkeyed_hashes(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.clear_unkeyed_hashes() RETURNS TABLE(column_name text, cleared bigint)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_unkeyed constant text := '^[0-9a-f]{64}$';
  v_n bigint;
begin
  -- An intent's content hash is only compared for equality with the next intent's: without it that
  -- intent runs one pass more, which reads the Contact and writes nothing.
  update bitrix_sync.workflow_instances w set content_hash = null where w.content_hash ~ v_unkeyed;
  get diagnostics v_n = row_count;
  return query select 'workflow_instances.content_hash'::text, v_n;
  update bitrix_sync.workflow_instances w set held_content_hash = null where w.held_content_hash ~ v_unkeyed;
  get diagnostics v_n = row_count;
  return query select 'workflow_instances.held_content_hash'::text, v_n;
  -- Recomputed by the next apply (webhook, reconciliation, a workflow's final read).
  update bitrix_sync.contact_snapshots s set name_hash = 'cleared' where s.name_hash ~ v_unkeyed;
  get diagnostics v_n = row_count;
  return query select 'contact_snapshots.name_hash'::text, v_n;
  update bitrix_sync.contact_snapshots s set email_hash = 'cleared' where s.email_hash ~ v_unkeyed;
  get diagnostics v_n = row_count;
  return query select 'contact_snapshots.email_hash'::text, v_n;
  -- Results are history once their workflow has finished (or for alert commands, at once). The
  -- commands of a workflow still running keep theirs: its next step may plan a phone update from
  -- them; retention deletes them after the workflow.
  update bitrix_sync.crm_commands c
     set response = regexp_replace(c.response::text, '"[0-9a-f]{64}"', '"cleared"', 'g')::jsonb
   where c.status in ('succeeded', 'dead_letter') and c.response is not null
     and c.response::text ~ '"[0-9a-f]{64}"'
     and not exists (select 1 from bitrix_sync.workflow_instances w
                      where w.id = c.workflow_id and w.state not in ('succeeded', 'failed', 'cancelled'));
  get diagnostics v_n = row_count;
  return query select 'crm_commands.response'::text, v_n;
end $_$;

--
-- Name: FUNCTION clear_unkeyed_hashes(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.clear_unkeyed_hashes() IS 'Clears the unkeyed (plain SHA-256) hashes the database holds where the next read recomputes them: intents'' content hashes (null), snapshots'' name and e-mail hashes (''cleared''), hashes in finished commands'' results that no running workflow reads. Snapshots'' phone hashes are re-keyed by the service (rekey_contact_phones). Run once by migration 000029; re-runnable. Returns the rows changed per column.';

--
-- Name: close_mapping(uuid, text, uuid, boolean); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.close_mapping(p_mapping_id uuid, p_reason text, p_workflow_id uuid, p_broken boolean DEFAULT false) RETURNS bitrix_sync.entity_external_mapping
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.entity_external_mapping;
begin
  perform bitrix_sync._check_code(p_reason);
  update bitrix_sync.entity_external_mapping
     set status = case when p_broken then 'broken' else 'closed' end,
         closed_at = now(), close_reason = p_reason, workflow_id = coalesce(p_workflow_id, workflow_id)
   where id = p_mapping_id and status = 'active'
  returning * into v_row;
  if not found then
    raise exception 'mapping % is not active', p_mapping_id
      using errcode = 'BS002', hint = 'closed and broken mappings are final; look up the current active row.';
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION close_mapping(p_mapping_id uuid, p_reason text, p_workflow_id uuid, p_broken boolean); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.close_mapping(p_mapping_id uuid, p_reason text, p_workflow_id uuid, p_broken boolean) IS 'active -> closed (or broken with p_broken) with a reason code and the workflow as correlation. The row stays as history.';

--
-- Name: complete_command(bigint, uuid, jsonb); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.complete_command(p_id bigint, p_lease_token uuid, p_response jsonb) RETURNS bitrix_sync.crm_commands
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.crm_commands;
begin
  update bitrix_sync.crm_commands
     set status = 'succeeded', response = p_response, completed_at = now(), last_error_code = null,
         lease_token = null, locked_by = null, locked_until = null, updated_at = now()
   where id = p_id and status is not distinct from 'in_flight' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  -- A write that turned a Contact's registration flag on again: one more read of the Contact if a
  -- robot call about it was answered while the flag was off (sql/workflows/read_again.sql).
  if v_row.params ->> 'registered' = 'true' and v_row.params ->> 'contact_id' is not null then
    perform bitrix_sync._read_again_after_link(array[v_row.params ->> 'contact_id'], array[v_row.workflow_id]);
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION complete_command(p_id bigint, p_lease_token uuid, p_response jsonb); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.complete_command(p_id bigint, p_lease_token uuid, p_response jsonb) IS 'in_flight -> succeeded with a safe response projection, and wakes the workflow. A write that turned a Contact''s registration flag on queues one more read of it when a robot call was answered while the flag was off (_read_again_after_link). Refuses stale tokens (BS001).';

--
-- Name: complete_commands(bigint[], uuid[], jsonb[]); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.complete_commands(p_ids bigint[], p_lease_tokens uuid[], p_responses jsonb[]) RETURNS SETOF bigint
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_done bigint[];
  v_contacts text[];
  v_workflows uuid[];
begin
  if coalesce(cardinality(p_ids), 0) <> coalesce(cardinality(p_lease_tokens), 0)
     or coalesce(cardinality(p_ids), 0) <> coalesce(cardinality(p_responses), 0) then
    raise exception 'complete_commands needs one lease token and one response per command id'
      using errcode = 'BS004', hint = 'Pass three arrays of the same length, in the same order.';
  end if;
  -- One statement for the whole batch: the commands still held under their tokens succeed, and the
  -- workflows waiting for them wake (waiting_crm -> running, crm_replied) as complete_command does.
  with done as (
    update bitrix_sync.crm_commands c
       set status = 'succeeded', response = t.response, completed_at = now(), last_error_code = null,
           lease_token = null, locked_by = null, locked_until = null, updated_at = now()
      from unnest(p_ids, p_lease_tokens, p_responses) as t(id, token, response)
     where c.id = t.id and c.status is not distinct from 'in_flight' and c.lease_token = t.token
    returning c.id, c.workflow_id, c.params
  ), woken as (
    update bitrix_sync.workflow_instances w
       set state = 'running', next_attempt_at = now(), updated_at = now()
     where w.id in (select d.workflow_id from done d where d.workflow_id is not null)
       and w.state is not distinct from 'waiting_crm'
    returning w.id
  )
  select array_agg(d.id), array_agg(f.contact_id) filter (where f.contact_id is not null),
         array_agg(d.workflow_id) filter (where f.contact_id is not null)
    into v_done, v_contacts, v_workflows
    from done d
    -- The Contact of a write that turned its registration flag on; null for any other command.
    cross join lateral (select case when d.params ->> 'registered' = 'true' then d.params ->> 'contact_id' end
                          as contact_id) f;
  if v_done is null then
    return;
  end if;
  perform pg_notify('bitrix_sync_workflows', '');
  -- Writes that turned a Contact's registration flag on again: one more read of each Contact a robot
  -- call was answered about while the flag was off (sql/workflows/read_again.sql).
  if v_contacts is not null then
    perform bitrix_sync._read_again_after_link(v_contacts, v_workflows);
  end if;
  return query select unnest(v_done);
end $$;

--
-- Name: FUNCTION complete_commands(p_ids bigint[], p_lease_tokens uuid[], p_responses jsonb[]); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.complete_commands(p_ids bigint[], p_lease_tokens uuid[], p_responses jsonb[]) IS 'in_flight -> succeeded for many commands in one call, each with its safe response projection, waking their workflows (waiting_crm -> running). A write that turned a Contact''s registration flag on queues one more read of it when a robot call was answered while the flag was off (_read_again_after_link). Returns the ids completed; a command whose token is stale is left alone (its new holder settles it), where complete_command would refuse it with BS001.';

--
-- Name: complete_rebind(uuid, uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.complete_rebind(p_workflow_id uuid, p_lease_token uuid) RETURNS bitrix_sync.rebind_requests
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_wf bitrix_sync.workflow_instances;
  v_row bitrix_sync.rebind_requests;
  v_current bitrix_sync.entity_external_mapping;
begin
  v_wf := bitrix_sync._held_workflow(p_workflow_id, p_lease_token);
  v_row := bitrix_sync._rebind_request_of(p_workflow_id);
  if v_row.status <> 'in_progress' then
    raise exception 'rebind request % is %, not in_progress', v_row.id, v_row.status
      using errcode = 'BS002', hint = 'start_rebind_request() first; a finished request stays finished.';
  end if;
  -- Both Contacts are updated: the link moves, the request ends and the conflicts that led to it are
  -- resolved in one transaction (§5.4, §11).
  select * into v_current from bitrix_sync.entity_external_mapping m
   where m.entity_type = 'user' and m.entity_id = v_wf.user_id and m.status = 'active'
   for update;
  if found then
    perform bitrix_sync.close_mapping(v_current.id, 'rebound', p_workflow_id);
  end if;
  perform bitrix_sync.open_mapping(v_wf.user_id, v_row.target_contact_id, p_workflow_id);
  update bitrix_sync.rebind_requests set status = 'succeeded', outcome = 'rebound', completed_at = now()
   where id = v_row.id
  returning * into v_row;
  -- Step 6: the alerts are resolved only here, after the link moved, in the same transaction.
  perform bitrix_sync._resolve_conflict_alerts(v_wf.user_id);
  return v_row;
end $$;

--
-- Name: FUNCTION complete_rebind(p_workflow_id uuid, p_lease_token uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.complete_rebind(p_workflow_id uuid, p_lease_token uuid) IS 'in_progress -> succeeded (outcome rebound) for the request of a contact.rebind workflow, in one call: closes the user''s active mapping (rebound), opens the link to the target Contact, and then resolves the user''s open conflict alerts. Fenced by the workflow''s lease token (BS001); BS006 if the target is linked meanwhile. Security definer, as start_rebind_request.';

--
-- Name: complete_sync_task(uuid, uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.complete_sync_task(p_id uuid, p_lease_token uuid) RETURNS han_app.sync_queue
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row han_app.sync_queue;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  update han_app.sync_queue
     set status = 'processed', completed_at = now(), locked_by = null, locked_until = null,
         lease_token = null, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION complete_sync_task(p_id uuid, p_lease_token uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.complete_sync_task(p_id uuid, p_lease_token uuid) IS 'leased -> processed under the current lease token; a stale holder is refused (BS001).';

--
-- Name: complete_webhook(bigint, uuid, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.complete_webhook(p_id bigint, p_lease_token uuid, p_outcome text) RETURNS bitrix_sync.webhook_inbox
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.webhook_inbox;
begin
  perform bitrix_sync._check_code(p_outcome);
  update bitrix_sync.webhook_inbox
     set status = 'processed', outcome = p_outcome, processed_at = now(), status_at = now(),
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status = 'processing' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('webhook', p_id::text);
  end if;
  update bitrix_sync.webhook_inbox
     set status = 'processed', outcome = 'coalesced', processed_at = now(), status_at = now()
   where coalesced_into = p_id and status = 'coalesced';
  return v_row;
end $$;

--
-- Name: FUNCTION complete_webhook(p_id bigint, p_lease_token uuid, p_outcome text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.complete_webhook(p_id bigint, p_lease_token uuid, p_outcome text) IS 'processing -> processed with a safe outcome code; the events coalesced into it are processed too. Refuses stale tokens (BS001).';

--
-- Name: confirm_phone_link(uuid, text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.confirm_phone_link(p_user_id uuid, p_reason text, p_operator_id text) RETURNS TABLE(mapping_id uuid, inbox_id bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.entity_external_mapping;
  v_inbox bigint;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator_id);
  select * into v_row from bitrix_sync.entity_external_mapping m
   where m.entity_type = 'user' and m.entity_id = p_user_id and m.status = 'active'
   for update;
  if not found then
    raise exception 'this user has no active link to a Contact'
      using errcode = 'BS005',
            hint = 'Check the user id; only an active link can be held. Held links: select * from bitrix_sync.held_phone_links;';
  end if;
  if v_row.held_at is null or v_row.hold_released_at is not null then
    raise exception 'this user''s link is not held: its CRM-master fields are applied already'
      using errcode = 'BS002',
            hint = 'Nothing to confirm. Held links: select * from bitrix_sync.held_phone_links;';
  end if;
  update bitrix_sync.entity_external_mapping m
     set hold_released_at = now(), hold_released_by = 'admin'
   where m.id = v_row.id;
  perform bitrix_sync._record_admin_action('confirm_phone_link', v_row.workflow_id, null, null, v_row.external_id,
                                           p_reason, p_operator_id);
  -- The fields follow through the webhooks lane: a read of the Contact, applied as a robot call's.
  select a.inbox_id into v_inbox
    from bitrix_sync.accept_webhooks(array['contact'], array[3], array[v_row.external_id::text], array[null::inet]) a;
  return query select v_row.id, v_inbox;
end $$;

--
-- Name: FUNCTION confirm_phone_link(p_user_id uuid, p_reason text, p_operator_id text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.confirm_phone_link(p_user_id uuid, p_reason text, p_operator_id text) IS 'Admin (docs/admin.md "Held phone links"): releases the hold of a user''s link made by phone alone (hold_released_by admin), audited in admin_actions with the operator''s reason and the login, and queues a read of the Contact (an inbox row) that applies its CRM-master fields to the App. BS004 missing reason or operator, BS005 no active link, BS002 the link is not held.';

--
-- Name: crm_contract_forms(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.crm_contract_forms() RETURNS jsonb
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select jsonb_build_object(
    'registered_write', bitrix_sync._active_setting('contract.registered_write'),
    'registered_filter', bitrix_sync._active_setting('contract.registered_filter'),
    'date_filter', bitrix_sync._active_setting('contract.date_filter'),
    'opened_filter', bitrix_sync._active_setting('reconcile.opened_filter'))
$$;

--
-- Name: FUNCTION crm_contract_forms(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.crm_contract_forms() IS 'The contract forms the active settings use (contract.registered_write, contract.registered_filter, contract.date_filter, reconcile.opened_filter), as one JSON object: what a probe records and readiness compares.';

--
-- Name: crm_contract_problem(text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.crm_contract_problem(p_portal_host text) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select case when (bitrix_sync.crm_contract_status(p_portal_host) ->> 'confirmed')::boolean then null
              else 'crm_contract_unconfirmed' end
$$;

--
-- Name: FUNCTION crm_contract_problem(p_portal_host text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.crm_contract_problem(p_portal_host text) IS 'Readiness (§14): crm_contract_unconfirmed until a write probe has passed against this portal with the forms the active settings use (degraded, not failing); null after.';

--
-- Name: crm_contract_status(text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.crm_contract_status(p_portal_host text) RETURNS jsonb
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  with forms as (select bitrix_sync.crm_contract_forms() as f)
  select jsonb_build_object(
    'confirmed', m.passed_at is not null,
    'confirmed_at', m.passed_at,
    'last_pass_at', l.passed_at,
    'forms', forms.f)
    from forms
    left join lateral (select p.passed_at from bitrix_sync.crm_contract_probes p
                        where p.portal_host = lower(p_portal_host) and p.forms = forms.f
                        order by p.passed_at desc limit 1) m on true
    left join lateral (select p.passed_at from bitrix_sync.crm_contract_probes p
                        where p.portal_host = lower(p_portal_host)
                        order by p.passed_at desc limit 1) l on true
$$;

--
-- Name: FUNCTION crm_contract_status(p_portal_host text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.crm_contract_status(p_portal_host text) IS 'Whether a write probe has passed against this portal with the forms the active settings use (confirmed, confirmed_at), the last pass against it with any forms (last_pass_at), and the forms in use. For the status document and an operator.';

--
-- Name: crm_last_answered_at(text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.crm_last_answered_at(p_bucket text) RETURNS timestamp with time zone
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select b.last_answered_at from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket
$$;

--
-- Name: FUNCTION crm_last_answered_at(p_bucket text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.crm_last_answered_at(p_bucket text) IS 'When the portal (bucket p_bucket, its host) last answered a request of any replica with HTTP 2xx; null before the first, or when no request went yet. Readiness and the status document read it.';

--
-- Name: crm_limiter_state(text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.crm_limiter_state(p_bucket text) RETURNS TABLE(tokens double precision, rate_factor double precision, in_flight integer, throttled_until timestamp with time zone, rate_limited_count bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select b.tokens, b.rate_factor,
         (select count(*)::integer from bitrix_sync.crm_inflight_slots s
           where s.bucket = b.bucket and s.expires_at > clock_timestamp()),
         case when b.throttled_until > clock_timestamp() then b.throttled_until end,
         b.rate_limited_count
    from bitrix_sync.crm_rate_buckets b
   where b.bucket = p_bucket
$$;

--
-- Name: FUNCTION crm_limiter_state(p_bucket text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.crm_limiter_state(p_bucket text) IS 'Limiter state for /internal/sync/v1/status (§14): tokens as last stored, rate factor, live in-flight slots, cool-down end. Security definer so the admin role can read it without table grants.';

--
-- Name: crontab_runs(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.crontab_runs() RETURNS TABLE(identifier text, last_execution timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select k.identifier::text, k.last_execution
    from graphile_worker._private_known_crontabs k
   order by k.identifier;
$$;

--
-- Name: FUNCTION crontab_runs(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.crontab_runs() IS 'Admin (docs/runbook.md, BitrixSyncReconciliationLagging): when each crontab entry of the service last fired (graphile-worker''s known crontabs); a stale one means no process runs the worker''s cron.';

--
-- Name: cutover_performed(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.cutover_performed() RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select exists (select 1 from bitrix_sync.cutover)
$$;

--
-- Name: FUNCTION cutover_performed(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.cutover_performed() IS 'The processing gate (§17): true once perform_cutover() has run. The claim functions return nothing while it is false; readiness reports cutover_not_performed.';

--
-- Name: dead_letter_command(bigint, uuid, text, integer, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.dead_letter_command(p_id bigint, p_lease_token uuid, p_error_code text, p_http_status integer DEFAULT NULL::integer, p_bitrix_error text DEFAULT NULL::text) RETURNS bitrix_sync.crm_commands
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  perform bitrix_sync._check_bitrix_error(p_bitrix_error);
  select * into v_row from bitrix_sync.crm_commands
   where id = p_id and (status in ('leased', 'in_flight')) is true and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  return bitrix_sync._dead_letter_command_row(v_row, p_error_code, p_http_status, p_bitrix_error);
end $$;

--
-- Name: FUNCTION dead_letter_command(p_id bigint, p_lease_token uuid, p_error_code text, p_http_status integer, p_bitrix_error text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.dead_letter_command(p_id bigint, p_lease_token uuid, p_error_code text, p_http_status integer, p_bitrix_error text) IS 'leased|in_flight -> dead_letter with a technical DLQ row (permanent failure). Refuses stale tokens (BS001).';

--
-- Name: dead_letter_sync_task(uuid, uuid, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.dead_letter_sync_task(p_id uuid, p_lease_token uuid, p_error_code text) RETURNS han_app.sync_queue
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row han_app.sync_queue;
begin
  perform bitrix_sync._check_code(p_error_code);
  select * into v_row from han_app.sync_queue
   where id = p_id and status = 'leased' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return bitrix_sync._dead_letter_sync_task_row(v_row, p_error_code);
end $$;

--
-- Name: FUNCTION dead_letter_sync_task(p_id uuid, p_lease_token uuid, p_error_code text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.dead_letter_sync_task(p_id uuid, p_lease_token uuid, p_error_code text) IS 'leased -> dead_letter and a technical_dead_letters row with the safe code. Refuses a stale token (BS001).';

--
-- Name: dead_letter_webhook(bigint, uuid, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.dead_letter_webhook(p_id bigint, p_lease_token uuid, p_error_code text) RETURNS bitrix_sync.webhook_inbox
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.webhook_inbox;
begin
  perform bitrix_sync._check_code(p_error_code);
  select * into v_row from bitrix_sync.webhook_inbox
   where id = p_id and status = 'processing' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('webhook', p_id::text);
  end if;
  return bitrix_sync._dead_letter_webhook_row(v_row, p_error_code);
end $$;

--
-- Name: FUNCTION dead_letter_webhook(p_id bigint, p_lease_token uuid, p_error_code text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.dead_letter_webhook(p_id bigint, p_lease_token uuid, p_error_code text) IS 'processing -> dead_letter with a technical DLQ row. Reconciliation still repairs the Contact later. Refuses stale tokens (BS001).';

--
-- Name: delete_retention_batch(text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.delete_retention_batch(p_table text) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET lock_timeout TO '200ms'
    AS $$
declare
  v_limit integer := (bitrix_sync._active_setting('retention.batch_size') #>> '{}')::integer;
  v_ids bigint[];
  v_uuids uuid[];
  v_count integer;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  case p_table
    when 'webhooks' then
      -- Processed events (coalesced ones are processed with the event that covered them), and
      -- dead-lettered ones no open dead letter refers to any more. An event others were coalesced
      -- into goes after them (the foreign key), so a batch never grows past its size: a flood of
      -- one Contact is thousands of events coalesced into a few.
      select array_agg(w.id) into v_ids
        from (select w.id from bitrix_sync.webhook_inbox w
               where w.status = 'processed'
                 and w.processed_at < (select bitrix_sync._retention_cutoff('retention.webhooks_days'))
                 and not exists (select 1 from bitrix_sync.webhook_inbox c where c.coalesced_into = w.id)
               order by w.processed_at
               limit v_limit
               for update skip locked) w;
      if coalesce(cardinality(v_ids), 0) < v_limit then
        select coalesce(v_ids, '{}') || coalesce(array_agg(w.id), '{}') into v_ids
          from (select w.id from bitrix_sync.webhook_inbox w
                 where w.status = 'dead_letter'
                   and w.status_at < (select bitrix_sync._retention_cutoff('retention.webhooks_days'))
                   and not exists (select 1 from bitrix_sync.webhook_inbox c where c.coalesced_into = w.id)
                   and not exists (select 1 from bitrix_sync.technical_dead_letters d
                                    where d.resolved_at is null and d.source = 'webhook' and d.source_id = w.id::text)
                 order by w.id
                 limit v_limit - coalesce(cardinality(v_ids), 0)
                 for update skip locked) w;
      end if;
      delete from bitrix_sync.webhook_inbox w where w.id = any(v_ids);
    when 'commands' then
      select array_agg(c.id) into v_ids
        from (select c.id from bitrix_sync.crm_commands c
                left join bitrix_sync.workflow_instances w on w.id = c.workflow_id
                left join bitrix_sync.business_alerts a on a.id = c.alert_id
               where c.completed_at < (select bitrix_sync._retention_cutoff('retention.commands_days'))
                 and c.status in ('succeeded', 'dead_letter')
                 and (c.workflow_id is null or w.state in ('succeeded', 'failed', 'cancelled'))
                 and (c.alert_id is null or a.item_id is not null)
                 and not exists (select 1 from bitrix_sync.technical_dead_letters d
                                  where d.resolved_at is null
                                    and (d.command_id = c.id or d.workflow_id = c.workflow_id))
               order by c.completed_at
               limit v_limit
               for update of c skip locked) c;
      delete from bitrix_sync.crm_commands c where c.id = any(v_ids);
    when 'workflows' then
      -- One window of the sweep (_retention_sweep_workflows): the rows it deletes, nothing else.
      select s.deleted into v_count from bitrix_sync._retention_sweep_workflows(null) s;
      return v_count;
    when 'queue' then
      -- Oldest first through sync_queue_finished_idx (migration 000033), whose predicate this one
      -- repeats: without it the batch read the whole queue's history to find its rows.
      select array_agg(q.id) into v_uuids
        from (select q.id from han_app.sync_queue q
               where q.status in ('processed', 'cancelled', 'dead_letter')
                 and q.completed_at < (select bitrix_sync._retention_cutoff('retention.queue_days'))
                 and not exists (select 1 from bitrix_sync.technical_dead_letters d
                                  where d.resolved_at is null and d.source = 'sync_queue' and d.source_id = q.id::text)
                 and q.id not in (select w.source_task_id from bitrix_sync.workflow_instances w
                                   where w.state not in ('succeeded', 'failed', 'cancelled')
                                     and w.source_task_id is not null)
               order by q.completed_at
               limit v_limit
               for update skip locked) q;
      delete from han_app.sync_queue q where q.id = any(v_uuids);
    else
      raise exception 'retention knows the tables webhooks, commands, workflows and queue, not %', p_table
        using errcode = 'BS004', hint = 'Example: select bitrix_sync.delete_retention_batch(''webhooks'');';
  end case;
  get diagnostics v_count = row_count;
  return v_count;
end $$;

--
-- Name: FUNCTION delete_retention_batch(p_table text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.delete_retention_batch(p_table text) IS 'Deletes one batch (at most retention.batch_size rows) of finished rows of one table past its retention.*_days: webhooks (processed; dead-lettered with no open dead letter; an event others were coalesced into after them), commands (succeeded or dead-lettered, of finished workflows or of alerts with an item, with no open dead letter), workflows (finished, commands gone, not the user''s newest, not referred to by a mapping, a rebind request or an open dead letter; one window of the sweep that remembers its place, so 0 may leave deletable workflows further on: retention_step() says whether the sweep went round) or queue (processed, cancelled or dead-lettered intents no open dead letter or unfinished workflow refers to). Rows are picked FOR UPDATE SKIP LOCKED under lock_timeout 200ms. Returns rows deleted; call again until it returns 0.';

--
-- Name: diagnose_app_values(uuid, jsonb); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.diagnose_app_values(p_user_id uuid, p_crm jsonb) RETURNS TABLE(field text, masked text, compared integer, same boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET row_security TO 'off'
    AS $$
declare
  v_fields constant text[] := array['phone', 'full_name', 'email', 'citizenship'];
  v_recent integer;
  v_given integer;
begin
  if p_crm is null or jsonb_typeof(p_crm) <> 'object'
     or exists (select 1 from jsonb_each(p_crm) e
                 where e.key <> all (v_fields) or jsonb_typeof(e.value) <> 'array'
                    or jsonb_array_length(e.value) > 20
                    or exists (select 1 from jsonb_array_elements(e.value) x
                                where jsonb_typeof(x) <> 'string' or length(x #>> '{}') > 1000)) then
    raise exception 'the live Contact''s values are an object of phone, full_name, email and citizenship, each an array of at most 20 strings of at most 1000 characters'
      using errcode = 'BS004', hint = 'npm run diagnose passes what it read from the Contact, e.g. {"phone": ["+79991234567"], "full_name": ["Ivan"]}; a field left out is not compared.';
  end if;
  if not exists (select 1 from han_app.user_identity u where u.id = p_user_id) then
    raise exception 'user % is not an App user', p_user_id
      using errcode = 'BS060', hint = 'Check the id (han_app.user_identity.id); explain_user() shows what bitrix-sync knows of ids the App no longer has.';
  end if;
  -- Each call answers "equal or not" for the values given: guessing a value takes a call per guess.
  -- Audited, and at most 60 calls an hour per login.
  select count(*)::integer into v_recent
    from bitrix_sync.admin_actions a
   where a.action = 'diagnose_app_values' and a.db_user = session_user and a.performed_at > now() - interval '1 hour';
  if v_recent >= 60 then
    raise exception 'this login compared App values 60 times in the last hour: the limit'
      using errcode = 'BS062', hint = 'Wait, or ask another admin; every comparison is audited in bitrix_sync.admin_actions (action diagnose_app_values).';
  end if;
  select coalesce(sum(jsonb_array_length(e.value)), 0)::integer into v_given from jsonb_each(p_crm) e;
  perform bitrix_sync._record_admin_action('diagnose_app_values', null, null, null, null,
    format('npm run diagnose: the App''s values of user %s compared with %s value(s) of the live Contact', p_user_id, v_given),
    session_user);
  -- Normalised as the audit compares them: trimmed; empty is none. Both none is the same.
  return query
  select v.field, bitrix_sync._mask_pii(v.value),
         case when p_crm ? v.field then jsonb_array_length(p_crm -> v.field) end,
         case when not (p_crm ? v.field) then null
              when nullif(btrim(v.value), '') is null then
                not exists (select 1 from jsonb_array_elements_text(p_crm -> v.field) x where nullif(btrim(x), '') is not null)
              else exists (select 1 from jsonb_array_elements_text(p_crm -> v.field) x where btrim(x) = btrim(v.value)) end
    from han_app.user_identity u
    left join han_app.client_profile p on p.user_id = u.id
   cross join lateral (values (1, 'phone', u.phone_number::text), (2, 'full_name', p.full_name), (3, 'email', p.email),
                              (4, 'citizenship', p.citizenship)) v(n, field, value)
   where u.id = p_user_id
   order by v.n;
end $$;

--
-- Name: FUNCTION diagnose_app_values(p_user_id uuid, p_crm jsonb); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.diagnose_app_values(p_user_id uuid, p_crm jsonb) IS 'Admin (npm run diagnose): the App''s phone, name, e-mail and citizenship of one user, masked, each compared in the database with the values the live Contact holds for that field (p_crm: {"phone": [...], "full_name": [...], "email": [...], "citizenship": [...]}, at most 20 strings each; compared: how many were given, same: the App''s value is one of them, both empty counts as the same, null when the field was not given). No digest leaves the database. Audited in admin_actions (the login, the user id, how many values), at most 60 calls an hour per login (BS062). BS004 for values of the wrong shape, BS060 for a user the App does not have.';

--
-- Name: drift_metrics(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.drift_metrics() RETURNS TABLE(family text, labels jsonb, value double precision)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select 'bitrix_sync_drift_users', jsonb_build_object('kind', k.kind),
         (select count(*) from bitrix_sync.drift_findings f where f.kind = k.kind)::float8
    from unnest(array['contact_missing', 'crm_master_behind', 'inactive_user_linked', 'phone_missing',
                      'registered_inactive_user', 'registered_unknown_user', 'registered_wrong', 'unmapped_user',
                      'user_id_wrong']) k(kind)
  union all
  select m.family, '{}'::jsonb, m.value
    from bitrix_sync.audit_state s
   cross join lateral (values
     -- Until the first success: when the audit was installed, so a stopped audit is noticed.
     ('bitrix_sync_audit_last_success_timestamp_seconds', extract(epoch from coalesce(s.last_success_at, s.created_at))::float8),
     ('bitrix_sync_audit_running', case when s.last_run_status = 'running' then 1 else 0 end::float8),
     ('bitrix_sync_audit_enabled',
      case when (bitrix_sync._active_setting('audit.enabled') #>> '{}')::boolean and bitrix_sync.cutover_performed()
                and not bitrix_sync.sync_paused()
           then 1 else 0 end::float8),
     ('bitrix_sync_audit_interval_seconds', (bitrix_sync._active_setting('audit.interval_sec') #>> '{}')::float8),
     ('bitrix_sync_audit_links', coalesce(s.last_links, 0)::float8),
     ('bitrix_sync_audit_overdue_links', coalesce(s.last_overdue, 0)::float8),
     ('bitrix_sync_audit_progress_ratio',
      case when coalesce(s.last_links, 0) = 0 then 1 else 1 - s.last_overdue::float8 / s.last_links end)
   ) m(family, value)
   where s.singleton
$$;

--
-- Name: FUNCTION drift_metrics(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.drift_metrics() IS 'The convergence audit''s samples for GET /metrics (part of metrics_snapshot): open findings by kind (every kind, 0 included), the last success (the install time before the first), whether a run is running, whether the audit is enabled (setting, cutover, not paused), its interval, and from the last run the active links, those overdue and the share in time.';

--
-- Name: due_commands(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.due_commands() RETURNS TABLE(due integer, adds integer, oldest_ms double precision)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  -- What claim_commands() would take now: due pending and retry_wait rows, and the leases of holders
  -- that died (it recovers those: uncertain writes, retried reads). Nothing before the cutover, as
  -- claim_commands(): the pump takes no limiter permit for a claim of nothing.
  select count(*)::integer,
         (count(*) filter (where c.command_type = 'contact.add'))::integer,
         (extract(epoch from now() - min(greatest(c.created_at, c.next_attempt_at))) * 1000)::double precision
    from bitrix_sync.crm_commands c
   where ((c.status in ('pending', 'retry_wait') and c.next_attempt_at <= now())
          or (c.status in ('leased', 'in_flight') and c.locked_until < now()))
     and bitrix_sync.cutover_performed() and not bitrix_sync.sync_paused()
$$;

--
-- Name: FUNCTION due_commands(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.due_commands() IS 'The pump''s backlog: commands claim_commands() would take now (due, and expired leases it recovers), how many of them are creates, and how long the oldest has waited (ms; null when none). Nothing before perform_cutover() and while paused.';

--
-- Name: explain_user(uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.explain_user(p_user_id uuid) RETURNS TABLE(at timestamp with time zone, source text, event text, detail jsonb)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET row_security TO 'off'
    AS $$
declare
  v_contacts text[];
  v_workflows uuid[];
begin
  if p_user_id is null then
    raise exception 'explain_user needs a user id'
      using errcode = 'BS004', hint = 'Pass the App user''s UUID (han_app.user_identity.id), e.g. from bitrix_sync.status_drift.';
  end if;
  select array_agg(distinct c) into v_contacts
    from (select m.external_id::text as c from bitrix_sync.entity_external_mapping m where m.entity_id = p_user_id
          union select s.contact_id from bitrix_sync.contact_snapshots s where s.user_id = p_user_id
          union select f.contact_id from bitrix_sync.drift_findings f where f.user_id = p_user_id and f.contact_id is not null) x;
  select array_agg(w.id) into v_workflows from bitrix_sync.workflow_instances w where w.user_id = p_user_id;
  if not exists (select 1 from han_app.user_identity u where u.id = p_user_id)
     and v_contacts is null and v_workflows is null
     and not exists (select 1 from han_app.sync_queue q where q.entity_id = p_user_id)
     and not exists (select 1 from han_app.sync_queue_journal j where j.user_id = p_user_id)
     and not exists (select 1 from bitrix_sync.business_alerts a where a.user_id = p_user_id)
     and not exists (select 1 from bitrix_sync.drift_repairs r where r.user_id = p_user_id) then
    raise exception 'user % is known neither to the App nor to bitrix-sync', p_user_id
      using errcode = 'BS060',
            hint = 'Check the id: it is han_app.user_identity.id (status_drift, parked_workflows and rebind_request_status show it).';
  end if;
  v_contacts := coalesce(v_contacts, '{}');
  v_workflows := coalesce(v_workflows, '{}');

  return query
  select e.at, e.source, e.event, e.detail from (
    -- The App's own rows: statuses, times, and personal values masked (§15).
    select u.created_at as at, 'app'::text as source, 'identity_created'::text as event,
           jsonb_build_object('status', u.record_status, 'phone', bitrix_sync._mask_pii(u.phone_number)) as detail, 1 as ord
      from han_app.user_identity u where u.id = p_user_id
    union all
    select u.updated_at, 'app', 'identity_now',
           jsonb_build_object('status', u.record_status, 'phone', bitrix_sync._mask_pii(u.phone_number)), 2
      from han_app.user_identity u where u.id = p_user_id and u.updated_at > u.created_at
    union all
    select p.created_at, 'app', 'profile_created', jsonb_build_object('status', p.record_status), 1
      from han_app.client_profile p where p.user_id = p_user_id
    union all
    select greatest(p.updated_at, p.created_at), 'app', 'profile_now',
           jsonb_build_object('status', p.record_status, 'full_name', bitrix_sync._mask_pii(p.full_name),
                              'email', bitrix_sync._mask_pii(p.email), 'citizenship', bitrix_sync._mask_pii(p.citizenship),
                              'source_updated_at', p.source_updated_at), 2
      from han_app.client_profile p where p.user_id = p_user_id
    union all
    -- Intents: recorded (not folded yet), and queued.
    select j.recorded_at, 'intent', j.task_type,
           jsonb_build_object('status', 'recorded', 'reason', j.reason), 3
      from han_app.sync_queue_journal j where j.user_id = p_user_id
    union all
    select q.created_at, 'intent', q.task_type::text,
           jsonb_build_object('id', q.id, 'status', q.status, 'reason', q.payload_json ->> 'reason',
                              'attempts', q.attempt_count, 'completed_at', q.completed_at,
                              'cancel_reason', q.cancel_reason, 'last_error_code', q.last_error_code), 3
      from han_app.sync_queue q where q.entity_type = 'user' and q.entity_id = p_user_id
    union all
    -- Workflows and their steps.
    select w.created_at, 'workflow', 'started',
           jsonb_build_object('id', w.id, 'type', w.workflow_type, 'intent', w.intent_type, 'correlation_id', w.correlation_id), 4
      from bitrix_sync.workflow_instances w where w.user_id = p_user_id
    union all
    select coalesce(w.finished_at, w.updated_at), 'workflow',
           case when w.state in ('succeeded', 'failed', 'cancelled') then 'finished' else 'now' end,
           jsonb_build_object('id', w.id, 'type', w.workflow_type, 'state', w.state, 'step', w.current_step,
                              'outcome', w.outcome, 'last_error_code', w.last_error_code, 'revision', w.revision,
                              'step_data', w.step_data, 'next_attempt_at', w.next_attempt_at), 6
      from bitrix_sync.workflow_instances w where w.user_id = p_user_id
    union all
    -- Commands and their outcomes (parameters and results are safe projections: IDs, flags, hashes).
    select c.created_at, 'command', c.command_type::text,
           jsonb_build_object('id', c.id, 'workflow_id', c.workflow_id, 'params', c.params), 5
      from bitrix_sync.crm_commands c where c.workflow_id = any(v_workflows)
    union all
    select coalesce(c.completed_at, c.updated_at), 'command', 'outcome',
           jsonb_build_object('id', c.id, 'type', c.command_type, 'status', c.status, 'attempts', c.attempt_count,
                              'sent_at', c.sent_at, 'last_error_code', c.last_error_code,
                              'http_status', c.last_http_status, 'bitrix_error', c.last_bitrix_error,
                              'response', c.response), 5
      from bitrix_sync.crm_commands c where c.workflow_id = any(v_workflows) and c.status <> 'pending'
    union all
    -- Webhooks about the user's Contacts.
    select i.received_at, 'webhook', i.receiver::text,
           jsonb_build_object('id', i.id, 'contact_id', i.entity_id, 'status', i.status, 'outcome', i.outcome,
                              'processed_at', i.processed_at, 'coalesced_into', i.coalesced_into,
                              'last_error_code', i.last_error_code), 7
      from bitrix_sync.webhook_inbox i where i.receiver = 'contact' and i.entity_id = any(v_contacts)
    union all
    -- Business alerts (details are masked when raised).
    select a.first_occurred_at, 'alert', a.alert_type::text,
           jsonb_build_object('alert_number', a.alert_number, 'severity', a.severity, 'status', a.status,
                              'occurrences', a.occurrence_count, 'last_occurred_at', a.last_occurred_at,
                              'current_contact_id', a.current_contact_id, 'selected_contact_id', a.selected_contact_id,
                              'candidate_contact_ids', a.candidate_contact_ids, 'details', a.details,
                              'item_id', a.item_id, 'stage_id', a.stage_id, 'mirror', a.crm_sync_status), 8
      from bitrix_sync.business_alerts a where a.user_id = p_user_id
    union all
    select a.closed_at, 'alert', 'closed', jsonb_build_object('alert_number', a.alert_number, 'status', a.status), 8
      from bitrix_sync.business_alerts a where a.user_id = p_user_id and a.closed_at is not null
    union all
    -- Technical dead letters of the user's work.
    select d.created_at, 'dead_letter', d.operation::text,
           jsonb_build_object('id', d.id, 'source', d.source, 'error_code', d.error_code, 'http_status', d.http_status,
                              'bitrix_error', d.bitrix_error, 'resolved_at', d.resolved_at, 'resolution', d.resolution), 9
      from bitrix_sync.technical_dead_letters d where d.workflow_id = any(v_workflows)
    union all
    -- The links, as history.
    select m.opened_at, 'mapping', 'opened',
           jsonb_build_object('id', m.id, 'contact_id', m.external_id, 'workflow_id', m.workflow_id), 10
      from bitrix_sync.entity_external_mapping m where m.entity_id = p_user_id
    union all
    select m.closed_at, 'mapping', 'closed',
           jsonb_build_object('id', m.id, 'contact_id', m.external_id, 'status', m.status, 'reason', m.close_reason,
                              'workflow_id', m.workflow_id), 10
      from bitrix_sync.entity_external_mapping m where m.entity_id = p_user_id and m.closed_at is not null
    union all
    -- What bitrix-sync last saw or wrote of each Contact: hashes (their start), no values.
    select coalesce(s.last_applied_at, s.updated_at), 'snapshot', 'state',
           jsonb_build_object('contact_id', s.contact_id, 'registered', s.registered, 'crm_updated_at', s.crm_updated_at,
                              'last_applied_source', s.last_applied_source,
                              'last_webhook_received_at', s.last_webhook_received_at,
                              'last_webhook_source_at', s.last_webhook_source_at, 'stale', s.stale,
                              'stale_reason', s.stale_reason, 'citizenship_enum_id', s.citizenship_enum_id,
                              'name_hash', left(s.name_hash, 12), 'email_hash', left(s.email_hash, 12),
                              'phone_hash', left(s.phone_hash, 12)), 11
      from bitrix_sync.contact_snapshots s where s.contact_id = any(v_contacts)
    union all
    -- Rebinds, admin decisions on the user's workflows, drift and its repairs.
    select r.requested_at, 'rebind', r.status::text,
           jsonb_build_object('id', r.id, 'previous_contact_id', r.previous_contact_id,
                              'target_contact_id', r.target_contact_id, 'workflow_id', r.workflow_id,
                              'completed_at', r.completed_at), 12
      from bitrix_sync.rebind_requests r where r.user_id = p_user_id
    union all
    select a.performed_at, 'admin', a.action::text,
           jsonb_build_object('id', a.id, 'workflow_id', a.workflow_id, 'decision', a.decision,
                              'operator_id', a.operator_id, 'db_user', a.db_user), 13
      from bitrix_sync.admin_actions a where a.workflow_id = any(v_workflows)
    union all
    select f.detected_at, 'drift', f.kind::text,
           jsonb_build_object('contact_id', f.contact_id, 'details', f.details, 'last_seen_at', f.last_seen_at,
                              'repair_requested_at', f.repair_requested_at, 'repair_intent', f.repair_intent), 14
      from bitrix_sync.drift_findings f where f.user_id = p_user_id
    union all
    select r.requested_at, 'repair', r.intent::text,
           jsonb_build_object('id', r.id, 'kinds', r.kinds, 'contact_id', r.contact_id,
                              'requested_by', r.requested_by, 'db_user', r.db_user), 15
      from bitrix_sync.drift_repairs r where r.user_id = p_user_id
  ) e
  order by e.at nulls last, e.ord;
end $$;

--
-- Name: FUNCTION explain_user(p_user_id uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.explain_user(p_user_id uuid) IS 'Admin: one user''s story in time order (source, event, safe detail): the App''s identity and profile (statuses; phone, name, e-mail and citizenship masked), intents recorded and queued, workflows with their steps and outcomes, CRM commands and their results (IDs, flags, hashes), Contact webhooks, business alerts, dead letters, the link history, snapshots (hash prefixes), rebinds, admin decisions, drift findings and repairs. BS060 for an id nobody knows.';

--
-- Name: extend_sync_task_lease(uuid, uuid, interval); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.extend_sync_task_lease(p_id uuid, p_lease_token uuid, p_lease interval) RETURNS han_app.sync_queue
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row han_app.sync_queue;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  update han_app.sync_queue set locked_until = now() + p_lease, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION extend_sync_task_lease(p_id uuid, p_lease_token uuid, p_lease interval); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.extend_sync_task_lease(p_id uuid, p_lease_token uuid, p_lease interval) IS 'Extends a held lease. Refuses a stale token (BS001).';

--
-- Name: extend_workflow_lease(uuid, uuid, interval); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.extend_workflow_lease(p_id uuid, p_lease_token uuid, p_lease interval) RETURNS bitrix_sync.workflow_instances
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  update bitrix_sync.workflow_instances set locked_until = now() + p_lease
   where id = p_id and state is not distinct from 'running' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('workflow', p_id::text);
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION extend_workflow_lease(p_id uuid, p_lease_token uuid, p_lease interval); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.extend_workflow_lease(p_id uuid, p_lease_token uuid, p_lease interval) IS 'Extends the lease of a running workflow. Refuses a stale token (BS001).';

--
-- Name: fail_alert_lookup(bigint); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.fail_alert_lookup(p_alert_id bigint) RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_add bitrix_sync.crm_commands;
  v_count integer := 0;
begin
  perform 1 from bitrix_sync.business_alerts where id = p_alert_id for update;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  for v_add in
    select * from bitrix_sync.crm_commands
     where alert_id = p_alert_id and command_type = 'alert.add' and status = 'reconcile'
     for update
  loop
    perform bitrix_sync._dead_letter_command_row(v_add, 'alert_lookup_failed', null, null);
    v_count := v_count + 1;
  end loop;
  -- Until someone looks, nothing may be sent for this alert: an add could make a second item.
  update bitrix_sync.business_alerts set crm_sync_status = 'failed'
   where id = p_alert_id and crm_sync_status <> 'failed';
  return v_count;
end $$;

--
-- Name: FUNCTION fail_alert_lookup(p_alert_id bigint); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.fail_alert_lookup(p_alert_id bigint) IS 'The lookup of an alert''s item failed for good: the alert.adds waiting in reconcile go to dead_letter (alert_lookup_failed) with a technical DLQ row, and the alert is marked failed (visible in status_alert_mirror) until an admin requeues it, which looks the item up again before anything is added. Returns how many adds.';

--
-- Name: fail_audit_run(uuid, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.fail_audit_run(p_lease_token uuid, p_error_code text) RETURNS bitrix_sync.audit_state
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.audit_state;
begin
  perform bitrix_sync._check_code(p_error_code);
  perform bitrix_sync._check_audit_lease(p_lease_token);
  update bitrix_sync.audit_state s
     set last_run_status = 'failed', lease_token = null, last_error_code = p_error_code
   where s.singleton
  returning * into v_row;
  return v_row;
end $$;

--
-- Name: FUNCTION fail_audit_run(p_lease_token uuid, p_error_code text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.fail_audit_run(p_lease_token uuid, p_error_code text) IS 'running -> failed with a safe code. What the run recorded before it failed stays; the next run goes on. Refuses a run whose lease was taken over (BS001).';

--
-- Name: fail_reconciliation_run(text, uuid, text, interval); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.fail_reconciliation_run(p_job_type text, p_lease_token uuid, p_error_code text, p_retry_after interval DEFAULT NULL::interval) RETURNS bitrix_sync.reconciliation_cursors
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.reconciliation_cursors;
begin
  perform bitrix_sync._check_code(p_error_code);
  if p_retry_after < interval '0' then
    raise exception 'a reconciliation retry delay cannot be negative'
      using errcode = 'BS004', hint = 'Pass the backoff delay (src/crm/backoff.ts), or null to wait for the interval.';
  end if;
  update bitrix_sync.reconciliation_cursors r
     set last_run_status = 'failed', last_error_code = p_error_code, lease_token = null,
         -- A run given back at shutdown did not fail: the next replica starts it at once.
         failed_runs = r.failed_runs + case when p_error_code = 'shutdown' then 0 else 1 end,
         retry_at = case when p_error_code = 'shutdown' then pg_catalog.now()
                         else pg_catalog.now() + p_retry_after end
   where r.job_type = p_job_type and r.last_run_status = 'running' and r.lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('reconciliation run', p_job_type);
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION fail_reconciliation_run(p_job_type text, p_lease_token uuid, p_error_code text, p_retry_after interval); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.fail_reconciliation_run(p_job_type text, p_lease_token uuid, p_error_code text, p_retry_after interval) IS 'running -> failed with a safe code; the watermark stays, so the next run reads the same window again. The run is due again after p_retry_after (the caller''s backoff; null: after the interval, as before) and failed_runs grows by one (not for shutdown, which is due at once). Refuses a run whose lease was taken over (BS001).';

--
-- Name: finish_audit_run(uuid, integer, integer); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.finish_audit_run(p_lease_token uuid, p_audited integer, p_requests integer) RETURNS bitrix_sync.audit_state
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET row_security TO 'off'
    AS $$
declare
  v_row bitrix_sync.audit_state;
  v_period interval := make_interval(days => (bitrix_sync._active_setting('audit.period_days') #>> '{}')::integer);
  v_links integer;
  v_overdue integer;
begin
  v_row := bitrix_sync._check_audit_lease(p_lease_token);
  if p_audited is null or p_audited < 0 or p_requests is null or p_requests < 0 then
    raise exception 'an audit run finishes with the number of links compared and of requests sent'
      using errcode = 'BS004', hint = 'Both are counts (>= 0).';
  end if;
  -- The active links (sized as claim_audit_run sizes a run), and those of eligible users not
  -- compared within the period, counted from the oldest mark on through audit_marks_due_idx.
  v_links := bitrix_sync._active_link_count();
  select count(*) into v_overdue
    from bitrix_sync.audit_marks k
    join bitrix_sync.entity_external_mapping m on m.id = k.mapping_id and m.status = 'active'
    join han_app.user_identity u on u.id = m.entity_id and u.record_status = 'active'
    join han_app.client_profile p on p.user_id = m.entity_id and p.record_status = 'active'
   where k.audited_at < now() - v_period;
  update bitrix_sync.audit_state s
     set last_run_status = 'succeeded', lease_token = null, last_success_at = now(),
         last_all_success_at = case when s.last_run_mode = 'all' then now() else s.last_all_success_at end,
         last_error_code = null, last_audited = p_audited, last_requests = p_requests,
         last_links = v_links, last_overdue = v_overdue
   where s.singleton
  returning * into v_row;
  return v_row;
end $$;

--
-- Name: FUNCTION finish_audit_run(p_lease_token uuid, p_audited integer, p_requests integer); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.finish_audit_run(p_lease_token uuid, p_audited integer, p_requests integer) IS 'running -> succeeded: records the counts, the active links (_active_link_count()) and how many active links of eligible users are overdue (not compared within audit.period_days). Refuses a run whose lease was taken over (BS001).';

--
-- Name: business_alerts; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.business_alerts (
    id bigint NOT NULL,
    alert_number bigint NOT NULL,
    alert_type character varying(64) NOT NULL,
    severity character varying(16) DEFAULT 'medium'::character varying NOT NULL,
    fingerprint character varying(64) NOT NULL,
    user_id uuid,
    current_contact_id character varying(128),
    selected_contact_id character varying(128),
    candidate_contact_ids jsonb DEFAULT '[]'::jsonb NOT NULL,
    details jsonb DEFAULT '{}'::jsonb NOT NULL,
    status character varying(16) DEFAULT 'open'::character varying NOT NULL,
    item_id bigint,
    stage_id character varying(64),
    crm_sync_status character varying(16) DEFAULT 'pending'::character varying NOT NULL,
    occurrence_count integer DEFAULT 1 NOT NULL,
    first_occurred_at timestamp with time zone DEFAULT now() NOT NULL,
    last_occurred_at timestamp with time zone DEFAULT now() NOT NULL,
    previous_alert_id bigint,
    correlation_id uuid,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    closed_at timestamp with time zone,
    CONSTRAINT business_alerts_alert_type_check CHECK (((alert_type)::text ~ '^[a-z][a-z0-9_]{2,63}$'::text)),
    CONSTRAINT business_alerts_candidate_contact_ids_check CHECK ((jsonb_typeof(candidate_contact_ids) = 'array'::text)),
    CONSTRAINT business_alerts_closed CHECK ((((status)::text = 'open'::text) = (closed_at IS NULL))),
    CONSTRAINT business_alerts_crm_sync_status_check CHECK (((crm_sync_status)::text = ANY ((ARRAY['pending'::character varying, 'synced'::character varying, 'failed'::character varying])::text[]))),
    CONSTRAINT business_alerts_fingerprint_check CHECK (((fingerprint)::text ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT business_alerts_occurrence_count_check CHECK ((occurrence_count >= 1)),
    CONSTRAINT business_alerts_severity_check CHECK (((severity)::text = ANY ((ARRAY['low'::character varying, 'medium'::character varying, 'high'::character varying, 'critical'::character varying])::text[]))),
    CONSTRAINT business_alerts_status_check CHECK (((status)::text = ANY ((ARRAY['open'::character varying, 'resolved'::character varying, 'closed'::character varying, 'remote_missing'::character varying])::text[])))
);

--
-- Name: TABLE business_alerts; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.business_alerts IS 'Business conflicts (§11), mirrored into the Bitrix24 smart process. One open alert per (alert_type, fingerprint); a repeat bumps occurrence_count; after a terminal stage a new case opens a new alert linked to the previous one.';

--
-- Name: COLUMN business_alerts.alert_number; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.business_alerts.alert_number IS 'Internal sequence number shown in the smart-process item.';

--
-- Name: COLUMN business_alerts.fingerprint; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.business_alerts.fingerprint IS 'SHA-256 hex of the conflict identity (type + stable ids); not a label, not shown.';

--
-- Name: COLUMN business_alerts.details; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.business_alerts.details IS 'Safe details only: codes and counts (§15); never values read from the App or the CRM.';

--
-- Name: COLUMN business_alerts.status; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.business_alerts.status IS 'open | resolved | closed | remote_missing (item deleted in the CRM).';

--
-- Name: COLUMN business_alerts.item_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.business_alerts.item_id IS 'Bitrix24 smart-process item ID once created.';

--
-- Name: COLUMN business_alerts.stage_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.business_alerts.stage_id IS 'Last known smart-process stage.';

--
-- Name: COLUMN business_alerts.crm_sync_status; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.business_alerts.crm_sync_status IS 'Whether the smart-process item reflects this row: pending (needs add/update), synced, failed.';

--
-- Name: COLUMN business_alerts.previous_alert_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.business_alerts.previous_alert_id IS 'The earlier alert of the same (type, fingerprint) closed before this one opened.';

--
-- Name: finish_business_alert(bigint, text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.finish_business_alert(p_alert_id bigint, p_status text, p_stage_id text DEFAULT NULL::text) RETURNS bitrix_sync.business_alerts
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.business_alerts;
begin
  if p_status not in ('resolved', 'closed', 'remote_missing') then
    raise exception 'an alert finishes as resolved, closed or remote_missing, not %', p_status
      using errcode = 'BS004', hint = 'See §11 and §10.3.';
  end if;
  update bitrix_sync.business_alerts
     set status = p_status, stage_id = coalesce(p_stage_id, stage_id), closed_at = now()
   where id = p_alert_id and status = 'open'
  returning * into v_row;
  if not found then
    raise exception 'business alert % is not open', p_alert_id
      using errcode = 'BS002', hint = 'A finished alert stays finished; a new case opens a new alert.';
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION finish_business_alert(p_alert_id bigint, p_status text, p_stage_id text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.finish_business_alert(p_alert_id bigint, p_status text, p_stage_id text) IS 'open -> resolved | closed (terminal stage seen) | remote_missing (item deleted in the CRM).';

--
-- Name: finish_reconciliation_run(text, uuid, integer, integer, integer); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.finish_reconciliation_run(p_job_type text, p_lease_token uuid, p_scanned integer, p_updated integer, p_recovered integer DEFAULT NULL::integer) RETURNS bitrix_sync.reconciliation_cursors
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.reconciliation_cursors;
begin
  update bitrix_sync.reconciliation_cursors r
     set watermark = r.last_run_started_at, last_success_at = pg_catalog.now(), last_run_status = 'succeeded',
         last_error_code = null, last_scanned = p_scanned, last_updated = p_updated,
         last_recovered = coalesce(p_recovered, r.last_recovered),
         -- Smoothed usual value of recovered Contacts, for the spike alert of §10.2.
         recovered_baseline = case when p_recovered is null then r.recovered_baseline
                                   else coalesce(r.recovered_baseline * 0.8 + p_recovered * 0.2, p_recovered) end,
         lease_token = null, failed_runs = 0, retry_at = null
   where r.job_type = p_job_type and r.last_run_status = 'running' and r.lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('reconciliation run', p_job_type);
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION finish_reconciliation_run(p_job_type text, p_lease_token uuid, p_scanned integer, p_updated integer, p_recovered integer); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.finish_reconciliation_run(p_job_type text, p_lease_token uuid, p_scanned integer, p_updated integer, p_recovered integer) IS 'running -> succeeded: the watermark moves to the run''s start, the counts are recorded (p_recovered also feeds the spike baseline), failed_runs goes back to 0. Refuses a run whose lease was taken over (BS001).';

--
-- Name: fire_workflow_event(uuid, uuid, text, jsonb); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.fire_workflow_event(p_id uuid, p_lease_token uuid, p_event text, p_changes jsonb DEFAULT '{}'::jsonb) RETURNS bitrix_sync.workflow_instances
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.workflow_instances;
  v_to text;
  v_bad text;
begin
  select * into v_row from bitrix_sync.workflow_instances where id = p_id for update;
  if not found then
    raise exception 'workflow % does not exist', p_id
      using errcode = 'BS005', hint = 'Check the workflow id.';
  end if;
  if v_row.lease_token is distinct from p_lease_token then
    perform bitrix_sync._refuse_stale('workflow', p_id::text);
  end if;
  select e.to_state into v_to from bitrix_sync.state_edges e
   where e.machine = 'workflow' and e.from_state = v_row.state and e.event = p_event;
  if v_to is null then
    raise exception 'workflow event % is not allowed in state %', p_event, v_row.state
      using errcode = 'BS002', hint = 'docs/state-machines.md lists the events of each state.';
  end if;
  select string_agg(k, ', ') into v_bad from jsonb_object_keys(coalesce(p_changes, '{}'::jsonb)) k
   where k not in ('current_step', 'step_data', 'contact_id', 'outcome', 'last_error_code', 'next_attempt_at',
                   'processed_revision');
  if v_bad is not null then
    raise exception 'workflow event cannot change %', v_bad
      using errcode = 'BS004', hint = 'Allowed: current_step, step_data, contact_id, outcome, last_error_code, next_attempt_at, processed_revision.';
  end if;
  if p_changes ? 'last_error_code' and p_changes ->> 'last_error_code' is not null then
    perform bitrix_sync._check_code(p_changes ->> 'last_error_code');
  end if;
  if p_changes ? 'outcome' and p_changes ->> 'outcome' is not null then
    perform bitrix_sync._check_code(p_changes ->> 'outcome');
  end if;

  update bitrix_sync.workflow_instances w
     set state = v_to,
         current_step = coalesce(p_changes ->> 'current_step', w.current_step),
         step_data = case when p_changes ? 'step_data' then p_changes -> 'step_data' else w.step_data end,
         contact_id = case when p_changes ? 'contact_id' then p_changes ->> 'contact_id' else w.contact_id end,
         outcome = case when p_changes ? 'outcome' then p_changes ->> 'outcome' else w.outcome end,
         last_error_code = case when p_changes ? 'last_error_code' then p_changes ->> 'last_error_code' else w.last_error_code end,
         next_attempt_at = coalesce((p_changes ->> 'next_attempt_at')::timestamptz,
                                    case when v_to = 'running' then w.next_attempt_at else now() end),
         processed_revision = coalesce((p_changes ->> 'processed_revision')::integer, w.processed_revision),
         -- The lease belongs to a worker stepping a running workflow; any other state releases it.
         lease_token = case when v_to = 'running' then w.lease_token end,
         locked_by = case when v_to = 'running' then w.locked_by end,
         locked_until = case when v_to = 'running' then w.locked_until end,
         finished_at = case when v_to in ('succeeded', 'failed', 'cancelled') then now() end,
         updated_at = now()
   where w.id = p_id
  returning * into v_row;
  if v_to in ('waiting_retry', 'running') then
    perform pg_notify('bitrix_sync_workflows', '');
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION fire_workflow_event(p_id uuid, p_lease_token uuid, p_event text, p_changes jsonb); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.fire_workflow_event(p_id uuid, p_lease_token uuid, p_event text, p_changes jsonb) IS 'Moves a workflow along the edge named p_event from its current state (bitrix_sync.state_edges), applying the allowed changes. The caller must present the current lease token (null when none is held); stale holders get BS001, illegal events BS002.';

--
-- Name: fire_workflow_events(uuid[], uuid[], text[], jsonb[]); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.fire_workflow_events(p_ids uuid[], p_lease_tokens uuid[], p_events text[], p_changes jsonb[]) RETURNS TABLE(ord integer, workflow bitrix_sync.workflow_instances)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
declare
  v_n integer := coalesce(cardinality(p_ids), 0);
  v_to text[] := array[]::text[];
  v_bad text;
  v_notify boolean := false;
  r record;
begin
  if coalesce(cardinality(p_lease_tokens), 0) <> v_n or coalesce(cardinality(p_events), 0) <> v_n
     or coalesce(cardinality(p_changes), 0) <> v_n then
    raise exception 'fire_workflow_events needs one lease token, event and change set per workflow'
      using errcode = 'BS004', hint = 'Pass four arrays of the same length, in the same order.';
  end if;
  if v_n = 0 then
    return;
  end if;
  -- The rows are held from here to the caller's commit, taken in one order (by id).
  perform 1 from bitrix_sync.workflow_instances w where w.id = any (p_ids) order by w.id for update;
  -- Each element is checked as fire_workflow_event() checks its call, in the caller's order: the
  -- first refusal is the one the same calls made one after the other would raise.
  for r in
    select i.n, i.id, i.token, i.event, coalesce(i.changes, '{}'::jsonb) as changes, w.id is not null as found,
           w.state, w.lease_token, e.to_state,
           exists (select 1 from unnest(p_ids) with ordinality j(id, n) where j.id = i.id and j.n < i.n) as repeated
      from unnest(p_ids, p_lease_tokens, p_events, p_changes) with ordinality as i(id, token, event, changes, n)
      left join bitrix_sync.workflow_instances w on w.id = i.id and w.id = any (p_ids)
      left join bitrix_sync.state_edges e
        on e.machine = 'workflow' and e.from_state = w.state and e.event = i.event
     order by i.n
  loop
    if not r.found then
      raise exception 'workflow % does not exist', r.id
        using errcode = 'BS005', hint = 'Check the workflow id.';
    end if;
    if r.repeated then
      raise exception 'workflow % is named twice in one call', r.id
        using errcode = 'BS004', hint = 'Pass each workflow once: its second event would start from the state its first one left.';
    end if;
    if r.lease_token is distinct from r.token then
      perform bitrix_sync._refuse_stale('workflow', r.id::text);
    end if;
    if r.to_state is null then
      raise exception 'workflow event % is not allowed in state %', r.event, r.state
        using errcode = 'BS002', hint = 'docs/state-machines.md lists the events of each state.';
    end if;
    select string_agg(k, ', ') into v_bad from jsonb_object_keys(r.changes) k
     where k not in ('current_step', 'step_data', 'contact_id', 'outcome', 'last_error_code', 'next_attempt_at',
                     'processed_revision');
    if v_bad is not null then
      raise exception 'workflow event cannot change %', v_bad
        using errcode = 'BS004', hint = 'Allowed: current_step, step_data, contact_id, outcome, last_error_code, next_attempt_at, processed_revision.';
    end if;
    if r.changes ->> 'last_error_code' is not null then
      perform bitrix_sync._check_code(r.changes ->> 'last_error_code');
    end if;
    if r.changes ->> 'outcome' is not null then
      perform bitrix_sync._check_code(r.changes ->> 'outcome');
    end if;
    v_to := v_to || r.to_state;
    v_notify := v_notify or r.to_state in ('waiting_retry', 'running');
  end loop;

  -- One UPDATE for the group, each row with its own event's changes, as fire_workflow_event()
  -- writes them (element k's values are found by the row's place in the arrays).
  return query
  with moved as (
    update bitrix_sync.workflow_instances w
       set state = v_to[array_position(p_ids, w.id)],
           current_step = coalesce(p_changes[array_position(p_ids, w.id)] ->> 'current_step', w.current_step),
           step_data = case when p_changes[array_position(p_ids, w.id)] ? 'step_data'
                            then p_changes[array_position(p_ids, w.id)] -> 'step_data' else w.step_data end,
           contact_id = case when p_changes[array_position(p_ids, w.id)] ? 'contact_id'
                             then p_changes[array_position(p_ids, w.id)] ->> 'contact_id' else w.contact_id end,
           outcome = case when p_changes[array_position(p_ids, w.id)] ? 'outcome'
                          then p_changes[array_position(p_ids, w.id)] ->> 'outcome' else w.outcome end,
           last_error_code = case when p_changes[array_position(p_ids, w.id)] ? 'last_error_code'
                                  then p_changes[array_position(p_ids, w.id)] ->> 'last_error_code'
                                  else w.last_error_code end,
           next_attempt_at = coalesce((p_changes[array_position(p_ids, w.id)] ->> 'next_attempt_at')::timestamptz,
                                      case when v_to[array_position(p_ids, w.id)] = 'running' then w.next_attempt_at
                                           else now() end),
           processed_revision = coalesce((p_changes[array_position(p_ids, w.id)] ->> 'processed_revision')::integer,
                                         w.processed_revision),
           -- The lease belongs to a worker stepping a running workflow; any other state releases it.
           lease_token = case when v_to[array_position(p_ids, w.id)] = 'running' then w.lease_token end,
           locked_by = case when v_to[array_position(p_ids, w.id)] = 'running' then w.locked_by end,
           locked_until = case when v_to[array_position(p_ids, w.id)] = 'running' then w.locked_until end,
           finished_at = case when v_to[array_position(p_ids, w.id)] in ('succeeded', 'failed', 'cancelled')
                              then now() end,
           updated_at = now()
     where w.id = any (p_ids)
    returning w
  )
  select i.n::integer, m.w
    from moved m join unnest(p_ids) with ordinality as i(id, n) on i.id = (m.w).id
   order by i.n;
  if v_notify then
    perform pg_notify('bitrix_sync_workflows', '');
  end if;
end $$;

--
-- Name: FUNCTION fire_workflow_events(p_ids uuid[], p_lease_tokens uuid[], p_events text[], p_changes jsonb[]); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.fire_workflow_events(p_ids uuid[], p_lease_tokens uuid[], p_events text[], p_changes jsonb[]) IS 'fire_workflow_event() for a group of workflows in one call: element k of each array is the k-th call''s argument (null changes: none). Each workflow moves along the edge its event names, under its lease token, with the allowed changes; returns (ord, workflow) in the caller''s order. All or nothing, with the refusal the same calls made one after the other would raise first: BS005 unknown workflow, BS001 stale lease, BS002 illegal event, BS004 a change not allowed or a workflow named twice. The step lane''s grouped transition.';

--
-- Name: fold_intent_journal(integer, boolean); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.fold_intent_journal(p_limit integer DEFAULT 10000, p_wait boolean DEFAULT false) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_taken integer;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  if p_limit is null or p_limit < 1 or p_limit > 100000 then
    raise exception 'a fold takes 1..100000 journal rows, not %', coalesce(p_limit::text, 'null')
      using errcode = 'BS004', hint = 'Call fold_intent_journal() without arguments, or with a limit in that range.';
  end if;
  if p_wait then
    lock table bitrix_sync.lock_intake_fold in share update exclusive mode;
  else
    begin
      lock table bitrix_sync.lock_intake_fold in share update exclusive mode nowait;
    exception when lock_not_available then
      -- Another transaction is folding right now; its rows become visible when it commits.
      return 0;
    end;
  end if;

  with taken as (
    -- The journal has no index: the rows are taken as the heap holds them, by their addresses.
    delete from han_app.sync_queue_journal j
     where j.ctid = any (array(select s.ctid from han_app.sync_queue_journal s limit p_limit))
    returning j.task_type, j.user_id, j.reason, j.source_updated_at, j.recorded_at
  ), latest as (
    -- One intent per (task, user): the newest says why and where it stands in the queue; the oldest
    -- says since when.
    select distinct on (t.task_type, t.user_id)
           t.task_type, t.user_id, t.reason, t.source_updated_at,
           min(t.recorded_at) over (partition by t.task_type, t.user_id) as first_recorded_at,
           max(t.recorded_at) over (partition by t.task_type, t.user_id) as last_recorded_at
      from taken t
     order by t.task_type, t.user_id, t.recorded_at desc
  ), folded as (
    -- In user order, the order the step groups and intake batches lock in.
    insert into han_app.sync_queue as q (task_type, entity_type, entity_id, dedup_key, payload_json, status,
                                         next_attempt_at, created_at, updated_at)
    select l.task_type, 'user', l.user_id, l.task_type || ':user:' || l.user_id::text,
           jsonb_build_object(
             'schema_version', 1,
             'user_id', l.user_id,
             'reason', l.reason,
             'source_updated_at', to_char(l.source_updated_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
           'pending', l.last_recorded_at, l.first_recorded_at, now()
      from latest l
     order by l.user_id, l.task_type
    -- A newer intent coalesces into the user's active one of the same task. If a worker holds it,
    -- the row goes back to pending, which fences the holder: its completion is refused and the row
    -- is processed again with the newest state. A retry_wait row becomes due now. A pending row is
    -- due already and no worker holds it: it keeps the reason of the intent that made it pending
    -- (workers read the App's rows, not the payload; a drift repair stays one).
    -- Every row's place in the queue (next_attempt_at, which claims order by and hand the intake
    -- in) is its newest intent's: a user's intents of different tasks are taken in the order the App
    -- recorded them last. A user deactivated and reactivated while nothing was claimed (a pause, a
    -- backlog) ends with the reactivation, not with the deactivation its older row stood behind
    -- (found by drill:rollback).
    on conflict (dedup_key) where status in ('pending', 'leased', 'retry_wait')
    do update set payload_json = case when q.status = 'pending' then q.payload_json else excluded.payload_json end,
                  status = 'pending',
                  next_attempt_at = greatest(least(q.next_attempt_at, now()), excluded.next_attempt_at),
                  locked_by = null,
                  locked_until = null,
                  lease_token = null,
                  updated_at = now()
             where q.status <> 'pending' or q.next_attempt_at < excluded.next_attempt_at
    returning 1
  )
  select count(*) into v_taken from taken;
  return v_taken;
end $$;

--
-- Name: FUNCTION fold_intent_journal(p_limit integer, p_wait boolean); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.fold_intent_journal(p_limit integer, p_wait boolean) IS 'Moves up to p_limit intents from han_app.sync_queue_journal into han_app.sync_queue in one statement: one row per (task, user) with the newest reason, created at the oldest intent''s time and placed in the queue (next_attempt_at) at the newest one''s, coalesced into the active intent of the same task (a leased one goes back to pending: its holder is fenced; a retry_wait one becomes due; a pending one keeps its reason and moves to the newest intent''s place). One folder at a time (SHARE UPDATE EXCLUSIVE on bitrix_sync.lock_intake_fold, which no other role can take): without p_wait it returns 0 at once while another transaction folds. Returns the number of journal rows taken. claim_sync_tasks() and perform_cutover() call it first; an admin may call it to see recorded intents in the queue now.';

--
-- Name: held_link_read(uuid, timestamp with time zone, boolean); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.held_link_read(p_mapping_id uuid, p_crm_updated_at timestamp with time zone, p_robot_webhook boolean) RETURNS text
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.entity_external_mapping;
begin
  select * into v_row from bitrix_sync.entity_external_mapping m where m.id = p_mapping_id for update;
  if not found or v_row.status <> 'active' or v_row.held_at is null or v_row.hold_released_at is not null then
    return 'not_held';
  end if;
  if v_row.held_crm_updated_at is null then
    update bitrix_sync.entity_external_mapping m
       set held_crm_updated_at = coalesce(p_crm_updated_at, now())
     where m.id = p_mapping_id;
  end if;
  return 'held';
end $$;

--
-- Name: FUNCTION held_link_read(p_mapping_id uuid, p_crm_updated_at timestamp with time zone, p_robot_webhook boolean); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.held_link_read(p_mapping_id uuid, p_crm_updated_at timestamp with time zone, p_robot_webhook boolean) IS 'The previous release''s form of held_link_read, kept for it: not_held, or held (the first read after the link records the Contact''s updatedTime). It never releases a hold: only the form with the values'' hash can tell a change made in the CRM from the service''s own write; an admin still confirms (confirm_phone_link).';

--
-- Name: held_link_read(uuid, timestamp with time zone, boolean, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.held_link_read(p_mapping_id uuid, p_crm_updated_at timestamp with time zone, p_robot_webhook boolean, p_values_hash text) RETURNS text
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_row bitrix_sync.entity_external_mapping;
begin
  select * into v_row from bitrix_sync.entity_external_mapping m where m.id = p_mapping_id for update;
  if not found or v_row.status <> 'active' or v_row.held_at is null or v_row.hold_released_at is not null then
    return 'not_held';
  end if;
  if p_values_hash is null or p_values_hash !~ '^[A-Za-z0-9_-]{8}:v3:[A-Za-z0-9_-]{43}$' then
    raise exception 'a held link''s read needs the keyed hash of the Contact''s CRM-master values'
      using errcode = 'BS004', hint = 'Pass src/hash.ts heldValuesHash(): the hash key''s id, a colon and the v3 hash.';
  end if;
  if v_row.held_crm_updated_at is null or v_row.held_values_hash is null
     or split_part(v_row.held_values_hash, ':', 1) <> split_part(p_values_hash, ':', 1) then
    -- The first read after the link (or the first since the values were recorded, or since the hash
    -- key changed, when two hashes say nothing about each other): what a change is measured against.
    update bitrix_sync.entity_external_mapping m
       set held_crm_updated_at = coalesce(m.held_crm_updated_at, p_crm_updated_at, now()),
           held_values_hash = p_values_hash
     where m.id = p_mapping_id;
    return 'held';
  end if;
  if p_robot_webhook and p_crm_updated_at > v_row.held_crm_updated_at
     and p_values_hash <> v_row.held_values_hash then
    update bitrix_sync.entity_external_mapping m
       set hold_released_at = now(), hold_released_by = 'robot_webhook'
     where m.id = p_mapping_id;
    return 'released';
  end if;
  return 'held';
end $_$;

--
-- Name: FUNCTION held_link_read(p_mapping_id uuid, p_crm_updated_at timestamp with time zone, p_robot_webhook boolean, p_values_hash text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.held_link_read(p_mapping_id uuid, p_crm_updated_at timestamp with time zone, p_robot_webhook boolean, p_values_hash text) IS 'A read of a linked Contact meets its mapping''s hold: not_held (apply as usual); held (apply nothing; the first read after the link records the Contact''s updatedTime and the keyed hash of its CRM-master values, p_values_hash); released (p_robot_webhook, a newer updatedTime and CRM-master values that differ from the recorded ones: a change made in the CRM, since the service never writes those fields into a Contact it linked; the hold ends, apply now). A hash under another key replaces the recorded one and releases nothing. BS004 for a hash of the wrong form.';

--
-- Name: hold_phone_link(uuid, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.hold_phone_link(p_user_id uuid, p_contact_id text) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_held boolean;
begin
  if not coalesce((bitrix_sync._active_setting('mapping.hold_after_phone_link') #>> '{}')::boolean, false) then
    return false;
  end if;
  update bitrix_sync.entity_external_mapping m
     set held_at = now()
   where m.entity_id = p_user_id and m.external_id = p_contact_id and m.status = 'active' and m.held_at is null
  returning true into v_held;
  return coalesce(v_held, false);
end $$;

--
-- Name: FUNCTION hold_phone_link(p_user_id uuid, p_contact_id text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.hold_phone_link(p_user_id uuid, p_contact_id text) IS 'Called right after a link made by phone alone (B1.1, B2.1) is opened: records the hold (held_at) on the user''s active mapping of that Contact when mapping.hold_after_phone_link is on. Returns whether the link is held now.';

--
-- Name: issue_alert_command(bigint, text, jsonb); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.issue_alert_command(p_alert_id bigint, p_command_type text, p_params jsonb) RETURNS bitrix_sync.crm_commands
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_cmd bitrix_sync.crm_commands;
begin
  if p_command_type not like 'alert.%' then
    raise exception 'alert commands must be alert.* types, got %', p_command_type
      using errcode = 'BS004', hint = 'Contact commands belong to a workflow: use issue_command().';
  end if;
  insert into bitrix_sync.crm_commands (alert_id, command_type, params)
  values (p_alert_id, p_command_type, coalesce(p_params, '{}'::jsonb))
  returning * into v_cmd;
  perform pg_notify('bitrix_sync_commands', '');
  return v_cmd;
end $$;

--
-- Name: FUNCTION issue_alert_command(p_alert_id bigint, p_command_type text, p_params jsonb); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.issue_alert_command(p_alert_id bigint, p_command_type text, p_params jsonb) IS 'Queues a smart-process command for a business alert; independent of workflow steps (§7.1).';

--
-- Name: issue_alert_lookup(bigint, jsonb); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.issue_alert_lookup(p_alert_id bigint, p_params jsonb) RETURNS bitrix_sync.crm_commands
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if p_params is null or p_params ->> 'purpose' is distinct from 'find' or jsonb_typeof(p_params -> 'match') <> 'object' then
    raise exception 'an alert lookup needs params {entityTypeId, purpose: "find", match: {field, value}}'
      using errcode = 'BS004', hint = 'Build it with lookupMatch() of src/alerts/recover.ts.';
  end if;
  -- One lookup at a time per alert: the alert row is the lock.
  perform 1 from bitrix_sync.business_alerts where id = p_alert_id for update;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  if exists (select 1 from bitrix_sync.crm_commands l
              where l.alert_id = p_alert_id and l.command_type = 'alert.list'
                and l.status in ('pending', 'leased', 'in_flight', 'retry_wait')) then
    return null;
  end if;
  return bitrix_sync.issue_alert_command(p_alert_id, 'alert.list', p_params);
end $$;

--
-- Name: FUNCTION issue_alert_lookup(p_alert_id bigint, p_params jsonb); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.issue_alert_lookup(p_alert_id bigint, p_params jsonb) IS 'Queues an alert.list that looks for the alert''s item by its alert_number or fingerprint field, or its title (params.purpose = find). Returns null when a lookup of that alert is already under way.';

--
-- Name: issue_command(uuid, uuid, text, jsonb, text, text, jsonb); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.issue_command(p_workflow_id uuid, p_lease_token uuid, p_command_type text, p_params jsonb, p_step text, p_trace_context text DEFAULT NULL::text, p_step_data jsonb DEFAULT NULL::jsonb) RETURNS bitrix_sync.crm_commands
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_wf bitrix_sync.workflow_instances;
  v_cmd bitrix_sync.crm_commands;
begin
  if p_step_data is not null and jsonb_typeof(p_step_data) <> 'object' then
    raise exception 'step data must be a JSON object'
      using errcode = 'BS004', hint = 'Pass the workflow''s safe step state (IDs, flags, counts), e.g. ''{"pass": 1}''.';
  end if;
  -- running -> waiting_crm (event await_crm; the guard trigger checks the edge) under the caller's
  -- lease, with the step and its state in the same row version: one write of the workflow per step.
  update bitrix_sync.workflow_instances w
     set state = 'waiting_crm', current_step = coalesce(p_step, w.current_step),
         step_data = coalesce(p_step_data, w.step_data), next_attempt_at = now(),
         lease_token = null, locked_by = null, locked_until = null, updated_at = now()
   where w.id = p_workflow_id and w.state is not distinct from 'running' and w.lease_token = p_lease_token
  returning * into v_wf;
  if not found then
    perform bitrix_sync._refuse_stale('workflow', p_workflow_id::text);
  end if;
  insert into bitrix_sync.crm_commands (workflow_id, command_type, params, revision, correlation_id, trace_context)
  values (p_workflow_id, p_command_type, coalesce(p_params, '{}'::jsonb), v_wf.revision, v_wf.correlation_id,
          bitrix_sync._trace_context(p_trace_context))
  returning * into v_cmd;
  perform pg_notify('bitrix_sync_commands', '');
  return v_cmd;
end $$;

--
-- Name: FUNCTION issue_command(p_workflow_id uuid, p_lease_token uuid, p_command_type text, p_params jsonb, p_step text, p_trace_context text, p_step_data jsonb); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.issue_command(p_workflow_id uuid, p_lease_token uuid, p_command_type text, p_params jsonb, p_step text, p_trace_context text, p_step_data jsonb) IS 'One persisted step: inserts the workflow''s next command and moves the workflow running -> waiting_crm (await_crm) at step p_step, storing p_step_data (the step state, a JSON object) in the same write when given. The unique index allows one active command per workflow. p_trace_context is the issuing step''s W3C traceparent (malformed ones are ignored): every send of the command is traced under it. Refuses a stale lease or a workflow not running (BS001).';

--
-- Name: issue_commands(uuid[], uuid[], text[], jsonb[], text[], text[], jsonb[]); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.issue_commands(p_workflow_ids uuid[], p_lease_tokens uuid[], p_command_types text[], p_params jsonb[], p_steps text[], p_trace_contexts text[], p_step_data jsonb[]) RETURNS TABLE(ord integer, command bitrix_sync.crm_commands)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
declare
  v_n integer := coalesce(cardinality(p_workflow_ids), 0);
  v_moved uuid[];
  v_revisions integer[];
  v_correlations uuid[];
  v_stale uuid;
begin
  if coalesce(cardinality(p_lease_tokens), 0) <> v_n or coalesce(cardinality(p_command_types), 0) <> v_n
     or coalesce(cardinality(p_params), 0) <> v_n or coalesce(cardinality(p_steps), 0) <> v_n
     or coalesce(cardinality(p_trace_contexts), 0) <> v_n or coalesce(cardinality(p_step_data), 0) <> v_n then
    raise exception 'issue_commands needs one value of each argument per workflow'
      using errcode = 'BS004', hint = 'Pass seven arrays of the same length, in the same order (null where issue_command() takes its default).';
  end if;
  if v_n = 0 then
    return;
  end if;
  if exists (select 1 from unnest(p_step_data) d where d is not null and jsonb_typeof(d) <> 'object') then
    raise exception 'step data must be a JSON object'
      using errcode = 'BS004', hint = 'Pass the workflow''s safe step state (IDs, flags, counts), e.g. ''{"pass": 1}''.';
  end if;
  -- running -> waiting_crm (await_crm; the guard trigger checks each edge) under each caller's lease,
  -- with the step and its state in the same row version, as issue_command() writes it. The rows are
  -- found by their keys alone (id = any), each caller's values by the workflow's place in the arrays
  -- (a join with unnest() was planned as a scan of the table once per element).
  with moved as (
    update bitrix_sync.workflow_instances w
       set state = 'waiting_crm',
           current_step = coalesce(p_steps[array_position(p_workflow_ids, w.id)], w.current_step),
           step_data = coalesce(p_step_data[array_position(p_workflow_ids, w.id)], w.step_data),
           next_attempt_at = now(), lease_token = null, locked_by = null, locked_until = null,
           updated_at = now()
     where w.id = any (p_workflow_ids) and w.state is not distinct from 'running'
       and w.lease_token = p_lease_tokens[array_position(p_workflow_ids, w.id)]
    returning w.id, w.revision, w.correlation_id
  )
  select array_agg(m.id), array_agg(m.revision), array_agg(m.correlation_id)
    into v_moved, v_revisions, v_correlations
    from moved m;
  if coalesce(cardinality(v_moved), 0) < v_n then
    -- The first workflow (in the caller's order) not held under its token, not running, or named a
    -- second time (its second issue finds it waiting_crm, as a second issue_command() would): nothing
    -- of the group is kept (the refusal rolls the statement back), as for issue_command().
    select i.id into v_stale
      from unnest(p_workflow_ids) with ordinality i(id, n)
     where i.id is null or not (i.id = any (coalesce(v_moved, '{}'::uuid[])))
        or exists (select 1 from unnest(p_workflow_ids) with ordinality j(id, n) where j.id = i.id and j.n < i.n)
     order by i.n limit 1;
    perform bitrix_sync._refuse_stale('workflow', coalesce(v_stale::text, 'null'));
  end if;
  -- The commands, in the caller's order (their ids rise with it).
  return query
  with ins as (
    insert into bitrix_sync.crm_commands as c
      (workflow_id, command_type, params, revision, correlation_id, trace_context)
    select i.id, i.command_type, coalesce(i.params, '{}'::jsonb), m.revision, m.correlation_id,
           bitrix_sync._trace_context(i.trace_context)
      from unnest(p_workflow_ids, p_command_types, p_params, p_trace_contexts) with ordinality
             as i(id, command_type, params, trace_context, n)
      join unnest(v_moved, v_revisions, v_correlations) as m(id, revision, correlation_id) on m.id = i.id
     order by i.n
    returning c.workflow_id, c
  )
  select i.n::integer, ins.c
    from ins join unnest(p_workflow_ids) with ordinality as i(id, n) on i.id = ins.workflow_id
   order by i.n;
  perform pg_notify('bitrix_sync_commands', '');
end $$;

--
-- Name: FUNCTION issue_commands(p_workflow_ids uuid[], p_lease_tokens uuid[], p_command_types text[], p_params jsonb[], p_steps text[], p_trace_contexts text[], p_step_data jsonb[]); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.issue_commands(p_workflow_ids uuid[], p_lease_tokens uuid[], p_command_types text[], p_params jsonb[], p_steps text[], p_trace_contexts text[], p_step_data jsonb[]) IS 'issue_command() for a group of workflows in one call: element k of each array is the k-th call''s argument (null where issue_command() takes its default). Each workflow moves running -> waiting_crm (await_crm) under its lease token, with its step and step data, and gets its command; returns (ord, command) in the caller''s order. All or nothing: a stale lease, a workflow not running or named twice refuses the whole call (BS001, naming the first such workflow), as the same issue_command() calls in one transaction would. The step lane''s grouped issue.';

--
-- Name: keep_phone_link_hold(uuid, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.keep_phone_link_hold(p_user_id uuid, p_contact_id text) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_held boolean;
begin
  -- The Contact carries this user's id only because an earlier link of the same pair, made by phone
  -- alone, wrote it; that link closed (a deactivation, say) while still held. The user id is no more
  -- proof than the phone was: the new link keeps the hold, whatever the setting says now.
  if not exists (
       select 1 from bitrix_sync.entity_external_mapping p
        where p.id = (select l.id from bitrix_sync.entity_external_mapping l
                       where l.entity_id = p_user_id and l.external_id = p_contact_id and l.status <> 'active'
                       order by l.opened_at desc limit 1)
          and p.held_at is not null and p.hold_released_at is null) then
    return false;
  end if;
  update bitrix_sync.entity_external_mapping m
     set held_at = now()
   where m.entity_id = p_user_id and m.external_id = p_contact_id and m.status = 'active' and m.held_at is null
  returning true into v_held;
  return coalesce(v_held, false);
end $$;

--
-- Name: FUNCTION keep_phone_link_hold(p_user_id uuid, p_contact_id text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.keep_phone_link_hold(p_user_id uuid, p_contact_id text) IS 'Called right after a link found through the user id the Contact carries (§4 restore, the previous link''s Contact): when the latest earlier link of the same user and Contact was held and never released, the new link is held too (the user id was written on the strength of the phone alone). Returns whether the link is held now.';

--
-- Name: list_dead_letters(boolean, integer); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.list_dead_letters(p_include_resolved boolean DEFAULT false, p_limit integer DEFAULT 100) RETURNS TABLE(id bigint, source text, operation text, error_code text, http_status integer, bitrix_error text, attempt_count integer, first_attempt_at timestamp with time zone, deadline_at timestamp with time zone, created_at timestamp with time zone, age_sec bigint, source_id text, workflow_id uuid, command_id bigint, workflow_type text, workflow_state text, requeue text, resolution text, resolved_at timestamp with time zone, resolved_by text, requeued_to text, resolved_db_user text)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if p_limit is null or p_limit not between 1 and 10000 then
    raise exception 'the limit must be between 1 and 10000, got %', p_limit
      using errcode = 'BS004', hint = 'Example: select * from bitrix_sync.list_dead_letters(false, 500);';
  end if;
  return query
  select d.id, d.source::text, d.operation::text, d.error_code::text, d.http_status, d.bitrix_error::text,
         d.attempt_count, d.first_attempt_at, d.deadline_at, d.created_at,
         extract(epoch from now() - d.created_at)::bigint, d.source_id::text, d.workflow_id, d.command_id,
         w.workflow_type::text, w.state::text,
         case when d.resolved_at is not null then null
              when r.why is null then 'ready'
              else (r.why ->> 'code') || ': ' || (r.why ->> 'message') end,
         d.resolution::text, d.resolved_at, d.resolved_by::text, d.requeued_to::text, d.resolved_db_user::text
    from bitrix_sync.technical_dead_letters d
    left join bitrix_sync.workflow_instances w on w.id = d.workflow_id
    left join lateral (select bitrix_sync._requeue_refusal(d) as why) r on d.resolved_at is null
   where d.id in (select x.id from bitrix_sync.technical_dead_letters x
                   where p_include_resolved or x.resolved_at is null
                   order by x.id desc
                   limit p_limit)
   order by d.id;
end $$;

--
-- Name: FUNCTION list_dead_letters(p_include_resolved boolean, p_limit integer); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.list_dead_letters(p_include_resolved boolean, p_limit integer) IS 'Admin (§9): the newest p_limit technical dead letters, open ones only unless p_include_resolved, oldest first, with safe columns (codes, counts, times, internal ids, who resolved it: the declared operator and the login; the reasons are in admin_actions), the state of their workflow, and `requeue`: ready, or the SQLSTATE and sentence a requeue would refuse with now.';

--
-- Name: mark_alert_mirror_failed(bigint); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.mark_alert_mirror_failed(p_alert_id bigint) RETURNS bitrix_sync.business_alerts
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.business_alerts;
begin
  -- Only a mirror in progress can fail. A pending alert has a newer change still to send, whose
  -- command supersedes the one that failed, so it stays pending.
  update bitrix_sync.business_alerts set crm_sync_status = 'failed'
   where id = p_alert_id and crm_sync_status = 'synced'
  returning * into v_row;
  if found then
    return v_row;
  end if;
  select * into v_row from bitrix_sync.business_alerts where id = p_alert_id;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION mark_alert_mirror_failed(p_alert_id bigint); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.mark_alert_mirror_failed(p_alert_id bigint) IS 'crm_sync_status synced -> failed when the alert''s command failed for good (visible in status). A pending alert keeps its newer change queued; a failed one stays failed.';

--
-- Name: mark_alert_mirrored(bigint); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.mark_alert_mirrored(p_alert_id bigint) RETURNS bitrix_sync.business_alerts
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.business_alerts;
begin
  update bitrix_sync.business_alerts set crm_sync_status = 'synced'
   where id = p_alert_id and crm_sync_status = 'pending'
  returning * into v_row;
  if found then
    return v_row;
  end if;
  select * into v_row from bitrix_sync.business_alerts where id = p_alert_id;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  raise exception 'business alert % is %, not pending: nothing to mirror', p_alert_id, v_row.crm_sync_status
    using errcode = 'BS002', hint = 'Only an alert whose change is pending is handed to the CRM; issue its command first.';
end $$;

--
-- Name: FUNCTION mark_alert_mirrored(p_alert_id bigint); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.mark_alert_mirrored(p_alert_id bigint) IS 'crm_sync_status pending -> synced once the alert''s add/update command is issued. A newer occurrence sets it back to pending. Refuses an alert that is not pending (BS002).';

--
-- Name: mark_command_uncertain(bigint, uuid, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.mark_command_uncertain(p_id bigint, p_lease_token uuid, p_error_code text) RETURNS bitrix_sync.crm_commands
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.crm_commands
     set status = 'uncertain', last_error_code = p_error_code,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status is not distinct from 'in_flight' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION mark_command_uncertain(p_id bigint, p_lease_token uuid, p_error_code text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.mark_command_uncertain(p_id bigint, p_lease_token uuid, p_error_code text) IS 'in_flight -> uncertain: the request left and no reply came. The workflow decides (decide/unanswered-write.ts): a create is searched for, a non-idempotent write read again, an idempotent one resent, never before a late execution could have landed and the backoff passed. Refuses stale tokens (BS001).';

--
-- Name: mark_contact_snapshot_stale(text, uuid, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.mark_contact_snapshot_stale(p_contact_id text, p_user_id uuid, p_reason text) RETURNS bitrix_sync.contact_snapshots
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.contact_snapshots;
begin
  perform bitrix_sync._check_code(p_reason);
  insert into bitrix_sync.contact_snapshots (contact_id, user_id, stale, stale_reason)
  values (p_contact_id, p_user_id, true, p_reason)
  on conflict (contact_id) do update set stale = true, stale_reason = excluded.stale_reason
  returning * into v_row;
  return v_row;
end $$;

--
-- Name: FUNCTION mark_contact_snapshot_stale(p_contact_id text, p_user_id uuid, p_reason text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.mark_contact_snapshot_stale(p_contact_id text, p_user_id uuid, p_reason text) IS 'Marks the App''s copy of a Contact as possibly behind the CRM (e.g. contact_not_found) without clearing any App value.';

--
-- Name: metrics_snapshot(text, boolean); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.metrics_snapshot(p_bucket text DEFAULT NULL::text, p_check_mappings boolean DEFAULT false) RETURNS TABLE(family text, labels jsonb, value double precision)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET row_security TO 'off'
    AS $$
declare
  v_burst double precision := (bitrix_sync._active_setting('limiter.burst') #>> '{}')::double precision;
  v_refill double precision := (bitrix_sync._active_setting('limiter.refill_per_sec') #>> '{}')::double precision;
  v_cutover timestamptz := (select c.cutover_watermark from bitrix_sync.cutover c);
begin
  -- Fold what the triggers appended since the last scrape. One scrape folds at a time; another
  -- scrape meanwhile reads the totals plus the rows not folded yet, which gives the same sums. The
  -- lock is SHARE UPDATE EXCLUSIVE on a table only the owner may lock (as the intake's fold,
  -- sql/enqueue.sql): an advisory lock, which any role may take, let one stop every fold.
  begin
    lock table bitrix_sync.lock_metrics_fold in share update exclusive mode nowait;
    with moved as (
      delete from bitrix_sync.metric_events e returning e.machine, e.kind, e.from_state, e.to_state
    )
    insert into bitrix_sync.metric_event_totals as t (machine, kind, from_state, to_state, count)
    select m.machine, m.kind, m.from_state, m.to_state, count(*) from moved m group by 1, 2, 3, 4
    on conflict (machine, kind, from_state, to_state) do update set count = t.count + excluded.count;
  exception when lock_not_available then
    null; -- another scrape is folding
  end;

  return query
  -- Live states only: each filter reaches the status view's scan (its grouping column), so no
  -- finished row is read.
  with queue as (
    select q.status, q.count, q.oldest_age_sec from bitrix_sync.status_queue q
     where q.status in ('pending', 'leased', 'retry_wait')
  ), queue_all as (
    -- Every live status always present (0 when empty), so "older than" alerts have a series.
    select s.status, coalesce(q.count, 0) as count, coalesce(q.oldest_age_sec, 0) as oldest_age_sec
      from unnest(array['pending', 'leased', 'retry_wait']) s(status) left join queue q on q.status = s.status
  ), workflows as (
    select w.workflow_type, w.state, w.count, w.oldest_age_sec from bitrix_sync.status_workflows w
     where w.state in ('created', 'running', 'waiting_crm', 'waiting_retry', 'waiting_manual')
  ), commands as (
    select c.command_type, c.status, c.count, c.oldest_age_sec from bitrix_sync.status_commands c
     where c.status in ('pending', 'leased', 'in_flight', 'retry_wait', 'uncertain', 'reconcile')
  ), inbox as (
    select h.receiver, h.status, h.count, h.oldest_age_sec from bitrix_sync.status_webhooks h
     where h.status in ('received', 'coalesced', 'processing', 'retry_wait')
  ), dead as (
    select d.source, d.operation, d.error_code, d.count, d.oldest_age_sec from bitrix_sync.status_dead_letters d
  ), alerts as (
    select a.alert_type, a.severity, a.open_count, a.sla_overdue from bitrix_sync.status_alerts a
  ), mirror as (
    -- Alerts whose smart-process item is behind; both statuses always present (0 when none). The
    -- age counts from the last change, or from the alert's creation while it has no item at all:
    -- an alert that keeps recurring but never reaches the smart process still ages.
    select s.status, coalesce(m.count, 0) as count,
           coalesce(extract(epoch from now() - m.oldest_at), 0)::bigint as oldest_age_sec
      from unnest(array['pending', 'failed']) s(status)
      left join (select a.crm_sync_status as status, count(*) as count,
                        min(case when a.item_id is null then a.created_at else a.updated_at end) as oldest_at
                   from bitrix_sync.business_alerts a
                  where a.crm_sync_status <> 'synced'
                  group by a.crm_sync_status) m on m.status = s.status
  ), cursors as (
    -- The alert job runs only while alerts.entity_type_id is set: a cursor left from an earlier
    -- configuration does not trail.
    select r.job_type, r.watermark, r.failed_runs from bitrix_sync.reconciliation_cursors r
     where r.job_type <> 'alerts' or bitrix_sync._active_setting('alerts.entity_type_id') <> 'null'::jsonb
  ), events as (
    -- The folded totals plus whatever a concurrent scrape has not folded yet.
    select e.machine, e.kind, e.from_state, e.to_state, sum(e.n) as n
      from (select t.machine, t.kind, t.from_state, t.to_state, t.count as n from bitrix_sync.metric_event_totals t
            union all
            select p.machine, p.kind, p.from_state, p.to_state, 1 from bitrix_sync.metric_events p) e
     group by e.machine, e.kind, e.from_state, e.to_state
  )
  select 'bitrix_sync_queue_depth', jsonb_build_object('status', q.status), q.count::float8 from queue_all q
  union all
  select 'bitrix_sync_queue_oldest_age_seconds', jsonb_build_object('status', q.status), q.oldest_age_sec::float8
    from queue_all q
  union all
  select 'bitrix_sync_workflows_active', jsonb_build_object('workflow_type', w.workflow_type, 'state', w.state),
         w.count::float8 from workflows w
  union all
  select 'bitrix_sync_workflows_oldest_age_seconds',
         jsonb_build_object('workflow_type', w.workflow_type, 'state', w.state), w.oldest_age_sec::float8 from workflows w
  union all
  select 'bitrix_sync_crm_commands', jsonb_build_object('command_type', c.command_type, 'status', c.status),
         c.count::float8 from commands c
  union all
  select 'bitrix_sync_crm_commands_oldest_age_seconds',
         jsonb_build_object('command_type', c.command_type, 'status', c.status), c.oldest_age_sec::float8 from commands c
  union all
  select 'bitrix_sync_webhook_inbox', jsonb_build_object('receiver', h.receiver, 'status', h.status), h.count::float8
    from inbox h
  union all
  select 'bitrix_sync_webhook_inbox_oldest_age_seconds', jsonb_build_object('receiver', h.receiver, 'status', h.status),
         h.oldest_age_sec::float8 from inbox h
  union all
  select 'bitrix_sync_dead_letters_open',
         jsonb_build_object('source', d.source, 'operation', d.operation, 'code', d.error_code), d.count::float8 from dead d
  union all
  select 'bitrix_sync_dead_letters_oldest_age_seconds', jsonb_build_object('source', d.source),
         max(d.oldest_age_sec)::float8 from dead d group by d.source
  union all
  select 'bitrix_sync_business_alerts_open', jsonb_build_object('alert_type', a.alert_type, 'severity', a.severity),
         a.open_count::float8 from alerts a
  union all
  select 'bitrix_sync_business_alerts_sla_overdue', jsonb_build_object('alert_type', a.alert_type, 'severity', a.severity),
         a.sla_overdue::float8 from alerts a
  union all
  select 'bitrix_sync_business_alerts_unmirrored', jsonb_build_object('mirror_status', m.status), m.count::float8
    from mirror m
  union all
  -- A pass over the active mappings: the service asks for it at most once a minute.
  select 'bitrix_sync_mapping_invariant_violations', '{}'::jsonb, count(*)::float8
    from bitrix_sync.entity_external_mapping m
    join han_app.user_identity u on u.id = m.entity_id
   where p_check_mappings and m.status = 'active' and u.record_status <> 'active'
  having p_check_mappings
  union all
  -- Links made by phone alone whose CRM-master fields are held back (always present, 0 when none).
  select 'bitrix_sync_phone_links_held', '{}'::jsonb, h.count::float8 from bitrix_sync.status_held_links h
  union all
  select 'bitrix_sync_phone_links_held_oldest_age_seconds', '{}'::jsonb, h.oldest_age_sec::float8
    from bitrix_sync.status_held_links h
  union all
  -- From the cutover while no run has succeeded yet: a job that never succeeds still trails.
  select 'bitrix_sync_reconciliation_cursor_lag_seconds', jsonb_build_object('job_type', r.job_type),
         greatest(0, extract(epoch from now() - coalesce(r.watermark, v_cutover)))::float8
    from cursors r
   where coalesce(r.watermark, v_cutover) is not null
  union all
  select l.family, '{}'::jsonb, l.value
    from bitrix_sync.crm_rate_buckets b
   cross join lateral (values
     -- Refilled to now at the stored rate factor, as the next acquire_crm_request() would see it.
     ('bitrix_sync_limiter_tokens',
      least(v_burst, b.tokens + v_refill * b.rate_factor * greatest(0, extract(epoch from clock_timestamp() - b.refilled_at)))),
     ('bitrix_sync_limiter_rate_factor', b.rate_factor),
     ('bitrix_sync_limiter_throttled_seconds',
      greatest(0, coalesce(extract(epoch from b.throttled_until - clock_timestamp()), 0))::float8),
     ('bitrix_sync_limiter_in_flight',
      (select count(*) from bitrix_sync.crm_inflight_slots s
        where s.bucket = b.bucket and s.expires_at > clock_timestamp())::float8),
     ('bitrix_sync_limiter_blocked_methods',
      (select count(*) from bitrix_sync.crm_method_blocks m
        where m.bucket = b.bucket and m.blocked_until > clock_timestamp())::float8)
   ) l(family, value)
   where b.bucket = p_bucket
  union all
  select 'bitrix_sync_workflow_transitions_total',
         jsonb_build_object('workflow_type', e.kind, 'from', e.from_state, 'to', e.to_state), e.n::float8
    from events e where e.machine = 'workflow'
  union all
  select 'bitrix_sync_command_transitions_total',
         jsonb_build_object('command_type', e.kind, 'from', e.from_state, 'to', e.to_state), e.n::float8
    from events e where e.machine = 'command'
  union all
  -- Present from the start for every receiver and source (0 before the first event), so increase()
  -- sees the first one.
  select 'bitrix_sync_webhook_coalesced_total', jsonb_build_object('receiver', k.kind),
         coalesce((select sum(e.n) from events e where e.machine = 'webhook' and e.kind = k.kind), 0)::float8
    from unnest(array['contact', 'alert']) k(kind)
  union all
  select 'bitrix_sync_dead_letters_total', jsonb_build_object('source', k.kind),
         coalesce((select sum(e.n) from events e where e.machine = 'dead_letter' and e.kind = k.kind), 0)::float8
    from unnest(array['sync_queue', 'workflow', 'crm_command', 'webhook']) k(kind)
  -- Silent failures (docs/runbook.md): a run that keeps failing, the interval each lag is measured
  -- against, alerts that do not reach the smart process, items deleted in the CRM.
  union all
  select 'bitrix_sync_reconciliation_failed_runs', jsonb_build_object('job_type', r.job_type), r.failed_runs::float8
    from cursors r
  union all
  select 'bitrix_sync_reconciliation_interval_seconds', jsonb_build_object('job_type', i.job_type),
         (bitrix_sync._active_setting(i.key) #>> '{}')::float8
    from (values ('contacts', 'reconcile.contacts_interval_sec'), ('alerts', 'alerts.reconcile_interval_sec')) i(job_type, key)
  union all
  select 'bitrix_sync_business_alerts_unmirrored_oldest_age_seconds', jsonb_build_object('mirror_status', m.status),
         m.oldest_age_sec::float8 from mirror m
  union all
  select 'bitrix_sync_business_alerts_mirror_enabled', '{}'::jsonb,
         case when bitrix_sync._active_setting('alerts.database_only') = 'true'::jsonb then 0 else 1 end::float8
  union all
  -- Present from the start (0 before the first), so increase() sees the first one.
  select 'bitrix_sync_business_alerts_remote_missing_total', '{}'::jsonb,
         coalesce((select sum(e.n) from events e where e.machine = 'alert' and e.to_state = 'remote_missing'), 0)::float8
  union all
  -- The convergence audit (sql/convergence_audit.sql): drift by kind, its last success and progress.
  select d.family, d.labels, d.value from bitrix_sync.drift_metrics() d
  union all
  -- The last recovered-without-webhook spike (sql/reconciliation/spikes.sql).
  select r.family, r.labels, r.value from bitrix_sync.reconciliation_spike_metrics() r;
end $$;

--
-- Name: FUNCTION metrics_snapshot(p_bucket text, p_check_mappings boolean); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.metrics_snapshot(p_bucket text, p_check_mappings boolean) IS 'Every database-derived Prometheus sample for GET /metrics in one call: queue, workflow, command and inbox depths and oldest ages (live states), open dead letters, business alerts and their mirror (behind, its age, whether it is on, items deleted in the CRM), the convergence audit (drift by kind, last success, progress), links held after a phone-only link, reconciliation cursor lag, failed runs and intervals, the last recovered-without-webhook spike, the limiter bucket p_bucket, and the transition counters (folded from metric_events first). p_check_mappings adds the mapping invariant count (a pass over the active mappings). Rows: (family, labels, value); labels are low-cardinality only.';

--
-- Name: note_crm_answered(text, double precision, double precision); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.note_crm_answered(p_bucket text, p_increase double precision, p_recovery_per_sec double precision) RETURNS double precision
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz;
  v_row bitrix_sync.crm_rate_buckets;
  v_factor double precision;
begin
  perform bitrix_sync._check_limiter_name('bucket', p_bucket);
  if p_increase is null or p_increase < 1 or p_recovery_per_sec is null or p_recovery_per_sec < 0 then
    raise exception 'rate increase out of range: increase %, recovery % per second', p_increase, p_recovery_per_sec
      using errcode = 'BS010', hint = 'The increase is at least 1; the recovery is not negative.';
  end if;
  select * into v_row from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket for update;
  if not found then
    return 1.0;
  end if;
  v_now := clock_timestamp();
  v_factor := bitrix_sync._bucket_rate_factor(v_row.rate_factor, p_recovery_per_sec, v_row.rate_changed_at, v_now);
  -- A refusal inside its cool-down is fresher news than this reply: the cut stands.
  if v_factor >= 1.0 or (v_row.throttled_until is not null and v_row.throttled_until > v_now) then
    return v_factor;
  end if;
  v_factor := least(1.0, v_factor * p_increase);
  update bitrix_sync.crm_rate_buckets b
     set rate_factor = v_factor, rate_changed_at = v_now, updated_at = v_now
   where b.bucket = p_bucket;
  return v_factor;
end $$;

--
-- Name: FUNCTION note_crm_answered(p_bucket text, p_increase double precision, p_recovery_per_sec double precision); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.note_crm_answered(p_bucket text, p_increase double precision, p_recovery_per_sec double precision) IS 'The portal answered a request sent while the rate was cut: the limit has passed, so the rate factor is multiplied by p_increase (up to 1) instead of only climbing back linearly. Nothing changes inside a refusal''s cool-down. Returns the new rate factor.';

--
-- Name: note_crm_operating(text, text[], double precision[], timestamp with time zone[]); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.note_crm_operating(p_bucket text, p_methods text[], p_operating double precision[], p_reset_at timestamp with time zone[]) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := clock_timestamp();
begin
  perform bitrix_sync._check_limiter_name('bucket', p_bucket);
  if coalesce(cardinality(p_methods), 0) <> coalesce(cardinality(p_operating), 0)
     or coalesce(cardinality(p_methods), 0) <> coalesce(cardinality(p_reset_at), 0) then
    raise exception 'operating samples must have one method, one operating time and one reset time each'
      using errcode = 'BS011', hint = 'Pass three arrays of the same length.';
  end if;
  for i in 1 .. coalesce(cardinality(p_methods), 0) loop
    perform bitrix_sync._check_limiter_name('method', p_methods[i]);
    insert into bitrix_sync.crm_method_blocks as m (bucket, method, operating, operating_reset_at, updated_at)
    values (p_bucket, p_methods[i], greatest(0, p_operating[i]), p_reset_at[i], v_now)
    on conflict (bucket, method) do update
      set operating = excluded.operating,
          operating_reset_at = coalesce(excluded.operating_reset_at, m.operating_reset_at),
          updated_at = excluded.updated_at;
  end loop;
end $$;

--
-- Name: FUNCTION note_crm_operating(p_bucket text, p_methods text[], p_operating double precision[], p_reset_at timestamp with time zone[]); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.note_crm_operating(p_bucket text, p_methods text[], p_operating double precision[], p_reset_at timestamp with time zone[]) IS 'Records time.operating and time.operating_reset_at per REST method from replies, so a later OPERATION_TIME_LIMIT knows when the method frees.';

--
-- Name: note_method_blocked(text, text, timestamp with time zone); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.note_method_blocked(p_bucket text, p_method text, p_until timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS timestamp with time zone
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := clock_timestamp();
  v_reset timestamptz;
  v_old timestamptz;
  v_until timestamptz;
begin
  perform bitrix_sync._check_limiter_name('bucket', p_bucket);
  perform bitrix_sync._check_limiter_name('method', p_method);
  select m.operating_reset_at, m.blocked_until into v_reset, v_old
    from bitrix_sync.crm_method_blocks m where m.bucket = p_bucket and m.method = p_method for update;
  -- The refusal carries no timing: use the caller's estimate, the last reset time a reply of this
  -- method reported, or a minute, whichever is latest (reference §2).
  v_until := greatest(coalesce(p_until, v_now + interval '1 minute'),
                      case when v_reset > v_now then v_reset end,
                      case when v_old > v_now then v_old end);
  insert into bitrix_sync.crm_method_blocks as m (bucket, method, blocked_until, updated_at)
  values (p_bucket, p_method, v_until, v_now)
  on conflict (bucket, method) do update set blocked_until = excluded.blocked_until, updated_at = excluded.updated_at;
  return v_until;
end $$;

--
-- Name: FUNCTION note_method_blocked(p_bucket text, p_method text, p_until timestamp with time zone); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.note_method_blocked(p_bucket text, p_method text, p_until timestamp with time zone) IS 'OPERATION_TIME_LIMIT: blocks one REST method (only that one) until the later of p_until and its last operating_reset_at. Returns the end of the block.';

--
-- Name: note_rate_limited(text, double precision, double precision, integer, double precision); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.note_rate_limited(p_bucket text, p_decrease double precision, p_min_factor double precision, p_cooldown_ms integer, p_recovery_per_sec double precision) RETURNS double precision
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz;
  v_row bitrix_sync.crm_rate_buckets;
  v_factor double precision;
begin
  perform bitrix_sync._check_limiter_name('bucket', p_bucket);
  if p_decrease is null or p_decrease <= 0 or p_decrease > 1 or p_min_factor is null or p_min_factor <= 0
     or p_min_factor > 1 or p_cooldown_ms is null or p_cooldown_ms < 0 or p_recovery_per_sec is null
     or p_recovery_per_sec < 0 then
    raise exception 'rate cut parameters out of range: decrease %, min factor %, cool-down % ms',
      p_decrease, p_min_factor, p_cooldown_ms
      using errcode = 'BS010', hint = 'decrease and min factor are in (0, 1]; the cool-down is not negative.';
  end if;
  insert into bitrix_sync.crm_rate_buckets as b (bucket, tokens, refilled_at)
  values (p_bucket, 0, clock_timestamp())
  on conflict (bucket) do nothing;
  select * into strict v_row from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket for update;
  v_now := clock_timestamp();
  v_factor := bitrix_sync._bucket_rate_factor(v_row.rate_factor, p_recovery_per_sec, v_row.rate_changed_at, v_now);
  -- Both in-flight requests often come back refused together: cut once per cool-down window.
  if v_row.throttled_until is not null and v_row.throttled_until > v_now then
    return v_row.rate_factor;
  end if;
  v_factor := greatest(p_min_factor, v_factor * p_decrease);
  update bitrix_sync.crm_rate_buckets b
     set rate_factor = v_factor, rate_changed_at = v_now, tokens = 0, refilled_at = v_now,
         throttled_until = v_now + make_interval(secs => p_cooldown_ms / 1000.0),
         rate_limited_count = b.rate_limited_count + 1, updated_at = v_now
   where b.bucket = p_bucket;
  return v_factor;
end $$;

--
-- Name: FUNCTION note_rate_limited(p_bucket text, p_decrease double precision, p_min_factor double precision, p_cooldown_ms integer, p_recovery_per_sec double precision); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.note_rate_limited(p_bucket text, p_decrease double precision, p_min_factor double precision, p_cooldown_ms integer, p_recovery_per_sec double precision) IS 'QUERY_LIMIT_EXCEEDED: empties the bucket, pauses it for the cool-down and multiplies the rate by p_decrease; acquire_crm_request() lets it climb back linearly. Returns the new rate factor.';

--
-- Name: open_mapping(uuid, text, uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.open_mapping(p_user_id uuid, p_contact_id text, p_workflow_id uuid) RETURNS bitrix_sync.entity_external_mapping
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.entity_external_mapping;
begin
  insert into bitrix_sync.entity_external_mapping (entity_id, external_id, workflow_id)
  values (p_user_id, p_contact_id, p_workflow_id)
  returning * into v_row;
  -- One more read of the Contact if a robot's call about it may have been missed (the rule is there).
  perform bitrix_sync._read_again_after_link(array[p_contact_id], array[p_workflow_id]);
  return v_row;
exception
  when unique_violation then
    raise exception 'cannot link user to Contact %: the user or the Contact already has an active link', p_contact_id
      using errcode = 'BS006',
            hint = 'Close the existing active mapping first (close_mapping), or use request_bitrix_contact_rebind().';
end $$;

--
-- Name: FUNCTION open_mapping(p_user_id uuid, p_contact_id text, p_workflow_id uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.open_mapping(p_user_id uuid, p_contact_id text, p_workflow_id uuid) IS 'Creates the active link of a user to a Contact. Refuses a second active link for either side (BS006). Queues one more read of the Contact (webhook event linked) when a robot call about it is unprocessed or was answered unknown_mapping or registration_inactive since the workflow began or since the Contact''s last link closed, so an edit made while the link was being made, or while the Contact had none, is not lost.';

--
-- Name: open_mappings(uuid[], text[], uuid[]); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.open_mappings(p_user_ids uuid[], p_contact_ids text[], p_workflow_ids uuid[]) RETURNS TABLE(ord integer, mapping bitrix_sync.entity_external_mapping)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_n integer := coalesce(cardinality(p_user_ids), 0);
begin
  if coalesce(cardinality(p_contact_ids), 0) <> v_n or coalesce(cardinality(p_workflow_ids), 0) <> v_n then
    raise exception 'open_mappings needs one Contact and one workflow per user'
      using errcode = 'BS004', hint = 'Pass three arrays of the same length, in the same order.';
  end if;
  if v_n = 0 then
    return;
  end if;
  -- The links, in the caller's order. A second active link for a user or a Contact (in the table or
  -- within the group) refuses the whole call, as the same open_mapping() calls would refuse one.
  return query
  with ins as (
    insert into bitrix_sync.entity_external_mapping as m (entity_id, external_id, workflow_id)
    select i.user_id, i.contact_id, i.workflow_id
      from unnest(p_user_ids, p_contact_ids, p_workflow_ids) with ordinality as i(user_id, contact_id, workflow_id, n)
     order by i.n
    returning m.entity_id, m
  )
  select i.n::integer, ins.m
    from ins join unnest(p_user_ids) with ordinality as i(user_id, n) on i.user_id = ins.entity_id
   order by i.n;
  -- One more read of each Contact a robot's call about may have been missed, as open_mapping() queues it.
  perform bitrix_sync._read_again_after_link(p_contact_ids, p_workflow_ids);
exception
  when unique_violation then
    raise exception 'cannot link a user to a Contact: the user or the Contact already has an active link'
      using errcode = 'BS006',
            hint = 'Close the existing active mapping first (close_mapping), or use request_bitrix_contact_rebind().';
end $$;

--
-- Name: FUNCTION open_mappings(p_user_ids uuid[], p_contact_ids text[], p_workflow_ids uuid[]); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.open_mappings(p_user_ids uuid[], p_contact_ids text[], p_workflow_ids uuid[]) IS 'open_mapping() for a group of links in one call: element k of each array is the k-th call''s argument. Creates each active link of a user to a Contact and returns (ord, mapping) in the caller''s order; queues one more read of each Contact whose robot call may have been missed, by open_mapping()''s rule (_read_again_after_link). All or nothing: a second active link for a user or a Contact, in the table or within the group, refuses the whole call (BS006). The step lane''s grouped link.';

--
-- Name: crm_inflight_slots; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.crm_inflight_slots (
    slot_id uuid DEFAULT gen_random_uuid() NOT NULL,
    bucket text NOT NULL,
    holder text NOT NULL,
    acquired_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    CONSTRAINT crm_inflight_slots_expiry CHECK ((expires_at > acquired_at)),
    CONSTRAINT crm_inflight_slots_holder_check CHECK (((length(holder) >= 1) AND (length(holder) <= 200)))
);

--
-- Name: TABLE crm_inflight_slots; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.crm_inflight_slots IS 'HTTP requests to the portal in flight, all replicas together (§8 max in-flight). A slot past expires_at counts as free.';

--
-- Name: COLUMN crm_inflight_slots.holder; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_inflight_slots.holder IS 'Replica that holds the slot (host:pid), for diagnosis only.';

--
-- Name: COLUMN crm_inflight_slots.expires_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_inflight_slots.expires_at IS 'The slot frees itself here if its holder crashed; longer than the HTTP timeout.';

--
-- Name: sync_pauses; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.sync_pauses (
    id bigint NOT NULL,
    paused_at timestamp with time zone DEFAULT now() NOT NULL,
    paused_by character varying(128) NOT NULL,
    paused_db_user character varying(128) DEFAULT SESSION_USER,
    pause_reason text NOT NULL,
    resumed_at timestamp with time zone,
    resumed_by character varying(128),
    resumed_db_user character varying(128),
    resume_reason text,
    CONSTRAINT sync_pauses_pause_reason_check CHECK (((length(btrim(pause_reason)) >= 3) AND (length(btrim(pause_reason)) <= 500))),
    CONSTRAINT sync_pauses_paused_by_check CHECK ((length(btrim((paused_by)::text)) > 0)),
    CONSTRAINT sync_pauses_resume_reason_check CHECK (((resume_reason IS NULL) OR ((length(btrim(resume_reason)) >= 3) AND (length(btrim(resume_reason)) <= 500)))),
    CONSTRAINT sync_pauses_resumed CHECK ((((resumed_at IS NULL) = (resumed_by IS NULL)) AND ((resumed_at IS NULL) = (resume_reason IS NULL)) AND ((resumed_at IS NULL) OR (resumed_at >= paused_at)))),
    CONSTRAINT sync_pauses_resumed_by_check CHECK (((resumed_by IS NULL) OR (length(btrim((resumed_by)::text)) > 0)))
);

--
-- Name: TABLE sync_pauses; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.sync_pauses IS 'Pauses of processing (§17 rollback), one row each: while a row is open (resumed_at null) no claim function returns work, and the retry horizon does not count the time. Written by pause_sync() and resume_sync(); never deleted.';

--
-- Name: COLUMN sync_pauses.id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.sync_pauses.id IS 'The pause; resume_sync() names it to confirm which pause it ends.';

--
-- Name: COLUMN sync_pauses.paused_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.sync_pauses.paused_at IS 'When processing was paused.';

--
-- Name: COLUMN sync_pauses.paused_by; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.sync_pauses.paused_by IS 'Who paused, as the operator declared it (e.g. ops:ivanov).';

--
-- Name: COLUMN sync_pauses.paused_db_user; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.sync_pauses.paused_db_user IS 'The database login that paused (session_user).';

--
-- Name: COLUMN sync_pauses.pause_reason; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.sync_pauses.pause_reason IS 'Why, in the operator''s words (no personal data).';

--
-- Name: COLUMN sync_pauses.resumed_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.sync_pauses.resumed_at IS 'When processing resumed; null while the pause holds.';

--
-- Name: COLUMN sync_pauses.resumed_by; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.sync_pauses.resumed_by IS 'Who resumed, as the operator declared it.';

--
-- Name: COLUMN sync_pauses.resumed_db_user; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.sync_pauses.resumed_db_user IS 'The database login that resumed (session_user).';

--
-- Name: COLUMN sync_pauses.resume_reason; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.sync_pauses.resume_reason IS 'Why processing may go on, in the operator''s words.';

--
-- Name: status_pause; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.status_pause AS
 SELECT p.id AS pause_id,
    p.paused_at,
    (p.paused_by)::text AS paused_by,
    (p.paused_db_user)::text AS paused_db_user,
    p.pause_reason,
    (EXTRACT(epoch FROM (now() - p.paused_at)))::bigint AS paused_for_sec,
    h.intents_leased,
    h.workflows_running,
    h.commands_in_hand,
    h.webhooks_processing,
    h.requests_out,
    (((((h.intents_leased + h.workflows_running) + h.commands_in_hand) + h.webhooks_processing) + h.requests_out) = 0) AS drained
   FROM (bitrix_sync.sync_pauses p
     CROSS JOIN LATERAL ( SELECT ( SELECT count(*) AS count
                   FROM han_app.sync_queue q
                  WHERE (((q.status)::text = 'leased'::text) AND (q.locked_until > now()))) AS intents_leased,
            ( SELECT count(*) AS count
                   FROM bitrix_sync.workflow_instances w
                  WHERE (((w.state)::text = ANY ((ARRAY['created'::character varying, 'running'::character varying, 'waiting_retry'::character varying])::text[])) AND ((w.state)::text = 'running'::text) AND (w.locked_until > now()))) AS workflows_running,
            ( SELECT count(*) AS count
                   FROM bitrix_sync.crm_commands c
                  WHERE (((c.status)::text = ANY ((ARRAY['leased'::character varying, 'in_flight'::character varying])::text[])) AND (c.locked_until > now()))) AS commands_in_hand,
            ( SELECT count(*) AS count
                   FROM bitrix_sync.webhook_inbox w
                  WHERE (((w.status)::text = ANY ((ARRAY['received'::character varying, 'retry_wait'::character varying, 'processing'::character varying])::text[])) AND ((w.status)::text = 'processing'::text) AND (w.locked_until > now()))) AS webhooks_processing,
            ( SELECT count(*) AS count
                   FROM bitrix_sync.crm_inflight_slots s
                  WHERE (s.expires_at > now())) AS requests_out
         OFFSET 0) h)
  WHERE (p.resumed_at IS NULL);

--
-- Name: VIEW status_pause; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.status_pause IS 'The open pause (no row when processing runs): since when, by whom (declared and login), why, for how long, and the work claimed before it that is still finishing: leased intents, running workflows, commands leased or in flight, webhooks processing, HTTP requests out. drained once all are 0. Read by /internal/sync/v1/status.';

--
-- Name: pause_sync(text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.pause_sync(p_operator text, p_reason text) RETURNS SETOF bitrix_sync.status_pause
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_open bitrix_sync.sync_pauses;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator);
  -- One pause or resume at a time; the claims' reads (ACCESS SHARE) are not held up.
  lock table bitrix_sync.sync_pauses in share row exclusive mode;
  select * into v_open from bitrix_sync.sync_pauses p where p.resumed_at is null;
  if found then
    raise exception 'processing is already paused (pause %, since %)', v_open.id, v_open.paused_at
      using errcode = 'BS070',
            hint = 'See select * from bitrix_sync.status_pause; to go on, look at select * from bitrix_sync.resume_preview(); then resume_sync(''ops:<you>'', <pause_id>, ''<why>'').';
  end if;
  insert into bitrix_sync.sync_pauses (paused_by, pause_reason) values (btrim(p_operator), btrim(p_reason));
  perform bitrix_sync._record_admin_action('pause_sync', null, null, null, null, p_reason, p_operator);
  return query select * from bitrix_sync.status_pause;
end $$;

--
-- Name: FUNCTION pause_sync(p_operator text, p_reason text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.pause_sync(p_operator text, p_reason text) IS 'Admin (§17): opens a pause. From its commit no claim function returns work (every replica stops taking work within one poll interval, without a restart); work already claimed finishes (status_pause.drained says when); receivers and the App''s journal keep recording; paused time does not count against the retry horizon. Audited (admin_actions). Returns the pause. BS004 missing operator or reason, BS070 already paused.';

--
-- Name: perform_cutover(text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.perform_cutover(p_actor text) RETURNS TABLE(cutover_watermark timestamp with time zone, cancelled_count integer, already_done boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.cutover;
  v_count integer;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  if p_actor is null or length(btrim(p_actor)) = 0 then
    raise exception 'cutover needs an actor for the audit' using errcode = 'BS004', hint = 'Pass who you are.';
  end if;
  -- Serialize concurrent callers; the first one wins, the others see its result. The fold's lock
  -- (its fold below takes it anyway), which no other role can take (sql/enqueue.sql).
  lock table bitrix_sync.lock_intake_fold in share update exclusive mode;
  select * into v_row from bitrix_sync.cutover;
  if found then
    return query select v_row.cutover_watermark, v_row.cancelled_count, true;
    return;
  end if;
  -- Every intent the App has recorded so far into the queue first, so that the cancellation sees it.
  while bitrix_sync.fold_intent_journal(100000, true) = 100000 loop
  end loop;
  with cancelled as (
    update han_app.sync_queue q
       set status = 'cancelled', cancel_reason = 'initial_full_sync_cutover', completed_at = now(), updated_at = now(),
           locked_by = null, locked_until = null, lease_token = null
     -- leased: held by a worker of a release without the gate; its completion is refused (BS001).
     where q.status in ('pending', 'retry_wait', 'leased')
       and q.task_type like 'contact.%'
       and q.created_at < now()
    returning 1
  )
  select count(*) into v_count from cancelled;
  insert into bitrix_sync.cutover (cutover_watermark, cancelled_count, performed_by)
  values (now(), v_count, btrim(p_actor))
  returning * into v_row;
  return query select v_row.cutover_watermark, v_row.cancelled_count, false;
end $$;

--
-- Name: FUNCTION perform_cutover(p_actor text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.perform_cutover(p_actor text) IS 'Admin entry point (§17 steps 3-4): records cutover_watermark (now), cancels earlier pending/retry_wait/leased contact intents with cancel_reason initial_full_sync_cutover, and opens the processing gate. Idempotent: a second call returns the first result and changes nothing.';

--
-- Name: propose_settings(jsonb, text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.propose_settings(p_changes jsonb, p_actor text, p_note text DEFAULT NULL::text) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_base bitrix_sync.settings_versions;
  v_version integer;
begin
  if p_actor is null or length(btrim(p_actor)) = 0 then
    raise exception 'settings changes need an actor for the audit'
      using errcode = 'BS004', hint = 'Pass who you are, e.g. ''ops:ivanov''.';
  end if;
  if p_changes is null or jsonb_typeof(p_changes) <> 'object' then
    raise exception 'settings changes must be a JSON object of key -> value'
      using errcode = 'BS008', hint = 'Example: ''{"batch.size": 25}''::jsonb';
  end if;
  select * into v_base from bitrix_sync.settings_versions where status = 'active';
  insert into bitrix_sync.settings_versions (settings_values, based_on, note, created_by)
  values (bitrix_sync._normalise_settings(coalesce(v_base.settings_values, '{}'::jsonb) || p_changes), v_base.version,
          p_note, btrim(p_actor))
  returning version into v_version;
  return v_version;
end $$;

--
-- Name: FUNCTION propose_settings(p_changes jsonb, p_actor text, p_note text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.propose_settings(p_changes jsonb, p_actor text, p_note text) IS 'Creates a draft version: the active values with p_changes applied, whole numbers of integer keys normalised (1036.0 -> 1036); created_by is the declared actor, created_db_user the login (session_user). Validate, then activate it.';

--
-- Name: raise_business_alert(text, text, text, uuid, text, text, jsonb, jsonb, uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.raise_business_alert(p_alert_type text, p_severity text, p_fingerprint text, p_user_id uuid, p_current_contact_id text DEFAULT NULL::text, p_selected_contact_id text DEFAULT NULL::text, p_candidate_contact_ids jsonb DEFAULT '[]'::jsonb, p_details jsonb DEFAULT '{}'::jsonb, p_correlation_id uuid DEFAULT NULL::uuid) RETURNS bitrix_sync.business_alerts
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.business_alerts;
  v_previous bigint;
begin
  perform bitrix_sync._check_code(p_alert_type);
  update bitrix_sync.business_alerts a
     set occurrence_count = a.occurrence_count + 1, last_occurred_at = now(),
         current_contact_id = coalesce(p_current_contact_id, a.current_contact_id),
         selected_contact_id = coalesce(p_selected_contact_id, a.selected_contact_id),
         candidate_contact_ids = coalesce(p_candidate_contact_ids, a.candidate_contact_ids),
         details = coalesce(p_details, a.details),
         correlation_id = coalesce(p_correlation_id, a.correlation_id),
         crm_sync_status = 'pending'
   where a.alert_type = p_alert_type and a.fingerprint = p_fingerprint and a.status = 'open'
  returning * into v_row;
  if found then
    return v_row;
  end if;
  select max(a.id) into v_previous from bitrix_sync.business_alerts a
   where a.alert_type = p_alert_type and a.fingerprint = p_fingerprint;
  insert into bitrix_sync.business_alerts
    (alert_type, severity, fingerprint, user_id, current_contact_id, selected_contact_id,
     candidate_contact_ids, details, previous_alert_id, correlation_id)
  values (p_alert_type, p_severity, p_fingerprint, p_user_id, p_current_contact_id, p_selected_contact_id,
          coalesce(p_candidate_contact_ids, '[]'::jsonb), coalesce(p_details, '{}'::jsonb), v_previous, p_correlation_id)
  returning * into v_row;
  return v_row;
exception
  when unique_violation then
    -- A concurrent raise opened it first: count this occurrence on that row.
    update bitrix_sync.business_alerts a
       set occurrence_count = a.occurrence_count + 1, last_occurred_at = now(), crm_sync_status = 'pending'
     where a.alert_type = p_alert_type and a.fingerprint = p_fingerprint and a.status = 'open'
    returning * into v_row;
    return v_row;
end $$;

--
-- Name: FUNCTION raise_business_alert(p_alert_type text, p_severity text, p_fingerprint text, p_user_id uuid, p_current_contact_id text, p_selected_contact_id text, p_candidate_contact_ids jsonb, p_details jsonb, p_correlation_id uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.raise_business_alert(p_alert_type text, p_severity text, p_fingerprint text, p_user_id uuid, p_current_contact_id text, p_selected_contact_id text, p_candidate_contact_ids jsonb, p_details jsonb, p_correlation_id uuid) IS 'Opens a business alert or, if one is open for (type, fingerprint), counts another occurrence on it. A new case after a closed one links previous_alert_id. details must already be masked.';

--
-- Name: reconciliation_spike_metrics(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.reconciliation_spike_metrics() RETURNS TABLE(family text, labels jsonb, value double precision)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  -- Always present (0 before the first spike), so a rule on it needs no earlier sample.
  select 'bitrix_sync_reconciliation_recovered_spike_timestamp_seconds'::text, '{}'::jsonb,
         coalesce(extract(epoch from max(s.recorded_at)), 0)::double precision
    from bitrix_sync.reconciliation_spikes s where s.job_type = 'contacts';
$$;

--
-- Name: FUNCTION reconciliation_spike_metrics(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.reconciliation_spike_metrics() IS 'The spike sample of metrics_snapshot: when the last Contact reconciliation run with a recovered-without-webhook spike recorded it (Unix time, 0 before the first).';

--
-- Name: record_alert_item(bigint, bigint, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.record_alert_item(p_alert_id bigint, p_item_id bigint, p_stage_id text) RETURNS bitrix_sync.business_alerts
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.business_alerts;
begin
  update bitrix_sync.business_alerts
     set item_id = coalesce(p_item_id, item_id), stage_id = coalesce(p_stage_id, stage_id)
   where id = p_alert_id
  returning * into v_row;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION record_alert_item(p_alert_id bigint, p_item_id bigint, p_stage_id text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.record_alert_item(p_alert_id bigint, p_item_id bigint, p_stage_id text) IS 'Records the smart-process item and stage after a successful add/update/get. crm_sync_status is left alone: a newer occurrence may already have set it back to pending.';

--
-- Name: record_audit_findings(uuid, timestamp with time zone, jsonb); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.record_audit_findings(p_lease_token uuid, p_read_at timestamp with time zone, p_results jsonb) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_busy uuid[];
  v_ok uuid[];
  v_users uuid[];
begin
  perform bitrix_sync._check_audit_lease(p_lease_token);
  if p_read_at is null or jsonb_typeof(p_results) is distinct from 'array' then
    raise exception 'audit results need the time of the read and a JSON array'
      using errcode = 'BS004', hint = 'Pass [{"mapping_id", "user_id", "contact_id", "findings": [{"kind", "details"}]}].';
  end if;
  if exists (select 1 from jsonb_array_elements(p_results) r cross join jsonb_array_elements(coalesce(r -> 'findings', '[]')) f
              where bitrix_sync._drift_kind_group(f ->> 'kind') is distinct from 'link'
                 or jsonb_typeof(coalesce(f -> 'details', '{}')) <> 'object') then
    raise exception 'an audit result names a kind that is not judged on a link, or details that are not an object'
      using errcode = 'BS004', hint = 'Link kinds: contact_missing, phone_missing, user_id_wrong, registered_wrong, crm_master_behind.';
  end if;
  select array_agg(distinct (r ->> 'user_id')::uuid) into v_users from jsonb_array_elements(p_results) r;
  select array_agg(b.user_id) into v_busy from bitrix_sync._drift_busy_users(p_read_at, v_users) b;
  -- Judged: the link is still the active link it was when the Contact was read, and nothing has
  -- worked on the user since. The others keep their findings and are compared again soon.
  select array_agg(r.user_id) into v_ok
    from (select (x ->> 'mapping_id')::uuid as mapping_id, (x ->> 'user_id')::uuid as user_id,
                 x ->> 'contact_id' as contact_id
            from jsonb_array_elements(p_results) x) r
    join bitrix_sync.entity_external_mapping m
      on m.id = r.mapping_id and m.status = 'active' and m.entity_id = r.user_id and m.external_id = r.contact_id
   where not (r.user_id = any(coalesce(v_busy, '{}')));
  if v_ok is null then
    return 0;
  end if;

  insert into bitrix_sync.audit_marks as k (mapping_id, user_id, audited_at)
  select (x ->> 'mapping_id')::uuid, (x ->> 'user_id')::uuid, p_read_at
    from jsonb_array_elements(p_results) x
   where (x ->> 'user_id')::uuid = any(v_ok)
  on conflict (mapping_id) do update set audited_at = greatest(k.audited_at, excluded.audited_at);

  -- In step again: the user's link findings this result does not name.
  delete from bitrix_sync.drift_findings d
   where d.user_id = any(v_ok) and bitrix_sync._drift_kind_group(d.kind) = 'link'
     and not exists (select 1 from jsonb_array_elements(p_results) x
                       cross join jsonb_array_elements(coalesce(x -> 'findings', '[]')) f
                      where (x ->> 'user_id')::uuid = d.user_id and f ->> 'kind' = d.kind);

  insert into bitrix_sync.drift_findings as d (kind, user_id, contact_id, details, detected_at, last_seen_at)
  select f ->> 'kind', (x ->> 'user_id')::uuid, x ->> 'contact_id', coalesce(f -> 'details', '{}'), p_read_at, p_read_at
    from jsonb_array_elements(p_results) x
   cross join jsonb_array_elements(coalesce(x -> 'findings', '[]')) f
   where (x ->> 'user_id')::uuid = any(v_ok)
     -- A Contact that carries another user's id is a conflict a business alert already puts before
     -- a person (user_id_mismatch): not silent, and not repairable without a rebind.
     and not (f ->> 'kind' = 'user_id_wrong' and f -> 'details' ->> 'field' = 'other'
              and exists (select 1 from bitrix_sync.business_alerts a
                           where a.user_id = (x ->> 'user_id')::uuid and a.alert_type = 'user_id_mismatch'
                             and a.status = 'open'))
  on conflict (kind, (coalesce(user_id::text, 'contact:' || contact_id)))
  do update set contact_id = excluded.contact_id, details = excluded.details, last_seen_at = excluded.last_seen_at;

  delete from bitrix_sync.drift_findings d
   where d.kind = 'user_id_wrong' and d.user_id = any(v_ok) and d.details ->> 'field' = 'other'
     and exists (select 1 from bitrix_sync.business_alerts a
                  where a.user_id = d.user_id and a.alert_type = 'user_id_mismatch' and a.status = 'open');
  return cardinality(v_ok);
end $$;

--
-- Name: FUNCTION record_audit_findings(p_lease_token uuid, p_read_at timestamp with time zone, p_results jsonb); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.record_audit_findings(p_lease_token uuid, p_read_at timestamp with time zone, p_results jsonb) IS 'Records what the running audit found for links it compared with their Contacts (p_results: [{mapping_id, user_id, contact_id, findings: [{kind, details}]}], link kinds only; p_read_at: when the Contacts were read). A link no longer active as it was, or whose user had work in progress or done since the read, is left for a later run. For the others: the link''s audit mark, the findings named (one per user and kind; a user id of another user with an open user_id_mismatch alert is left to that alert), and the user''s other link findings deleted (in step again). Returns how many links were judged.';

--
-- Name: record_contact_created(text, uuid, text, text, text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.record_contact_created(p_contact_id text, p_user_id uuid, p_name_hash text, p_email_hash text, p_phone_hash text, p_citizenship_enum_id text) RETURNS bitrix_sync.contact_snapshots
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.contact_snapshots;
begin
  insert into bitrix_sync.contact_snapshots
    (contact_id, user_id, name_hash, email_hash, phone_hash, citizenship_enum_id, registered,
     last_applied_source, last_applied_at, stale, stale_reason)
  values (p_contact_id, p_user_id, p_name_hash, p_email_hash, p_phone_hash, p_citizenship_enum_id, true,
          'app_create', now(), false, null)
  on conflict (contact_id) do update
    set user_id = excluded.user_id, name_hash = excluded.name_hash, email_hash = excluded.email_hash,
        phone_hash = excluded.phone_hash, citizenship_enum_id = excluded.citizenship_enum_id,
        registered = true, last_applied_source = 'app_create', last_applied_at = now(), stale = false,
        stale_reason = null
  returning * into v_row;
  return v_row;
end $$;

--
-- Name: FUNCTION record_contact_created(p_contact_id text, p_user_id uuid, p_name_hash text, p_email_hash text, p_phone_hash text, p_citizenship_enum_id text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.record_contact_created(p_contact_id text, p_user_id uuid, p_name_hash text, p_email_hash text, p_phone_hash text, p_citizenship_enum_id text) IS 'Snapshot of what bitrix-sync wrote into a Contact it created (§5.1 step 9, source app_create): hashes only.';

--
-- Name: record_contact_phone(text, uuid, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.record_contact_phone(p_contact_id text, p_user_id uuid, p_phone_hash text) RETURNS bitrix_sync.contact_snapshots
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.contact_snapshots;
begin
  insert into bitrix_sync.contact_snapshots (contact_id, user_id, phone_hash)
  values (p_contact_id, p_user_id, p_phone_hash)
  on conflict (contact_id) do update set phone_hash = excluded.phone_hash, user_id = excluded.user_id
  returning * into v_row;
  return v_row;
end $$;

--
-- Name: FUNCTION record_contact_phone(p_contact_id text, p_user_id uuid, p_phone_hash text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.record_contact_phone(p_contact_id text, p_user_id uuid, p_phone_hash text) IS 'Notes the hash of the phone bitrix-sync last wrote into a Contact, so the next change overwrites that entry instead of adding one.';

--
-- Name: record_crm_contract_probe(text, jsonb, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.record_crm_contract_probe(p_portal_host text, p_forms jsonb, p_run_id text) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_id bigint;
  v_keys text[];
begin
  if p_portal_host is null or p_portal_host !~ '^[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?$' then
    raise exception 'a contract probe needs the portal host it ran against'
      using errcode = 'BS004', hint = 'Pass BITRIX_SYNC_PORTAL_HOST, e.g. ''example.bitrix24.ru'' (host, optionally :port).';
  end if;
  if p_run_id is null or p_run_id !~ '^[0-9a-f]{8,32}$' then
    raise exception 'a contract probe needs its run id'
      using errcode = 'BS004', hint = 'Pass the run id preflight printed: 8 to 32 lowercase hexadecimal characters.';
  end if;
  select array_agg(k order by k) into v_keys from jsonb_object_keys(
    case when jsonb_typeof(p_forms) = 'object' then p_forms else '{}'::jsonb end) k;
  if v_keys is distinct from array['date_filter', 'opened_filter', 'registered_filter', 'registered_write']
     or exists (select 1 from jsonb_each(p_forms) e where jsonb_typeof(e.value) <> 'string'
                                                       or length(e.value #>> '{}') not between 1 and 16) then
    raise exception 'the forms of a contract probe must be the four the settings name'
      using errcode = 'BS004',
            hint = 'Pass {"registered_write", "registered_filter", "date_filter", "opened_filter"} as strings, as bitrix_sync.crm_contract_forms() returns them.';
  end if;
  insert into bitrix_sync.crm_contract_probes (portal_host, forms, run_id)
  values (lower(p_portal_host), p_forms, p_run_id)
  returning id into v_id;
  return v_id;
end $_$;

--
-- Name: FUNCTION record_crm_contract_probe(p_portal_host text, p_forms jsonb, p_run_id text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.record_crm_contract_probe(p_portal_host text, p_forms jsonb, p_run_id text) IS 'Records a passed write probe (npm run preflight -- --write): the portal host, the forms it proved and its run id; the time and the login are the row''s. BS004 when an argument is malformed.';

--
-- Name: reconciliation_spikes; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.reconciliation_spikes (
    id bigint NOT NULL,
    job_type character varying(32) NOT NULL,
    run_started_at timestamp with time zone NOT NULL,
    recorded_at timestamp with time zone DEFAULT now() NOT NULL,
    recovered integer NOT NULL,
    mapped integer NOT NULL,
    baseline double precision,
    CONSTRAINT reconciliation_spikes_baseline_check CHECK ((baseline >= (0)::double precision)),
    CONSTRAINT reconciliation_spikes_check CHECK ((mapped >= recovered)),
    CONSTRAINT reconciliation_spikes_recovered_check CHECK ((recovered > 0))
);

--
-- Name: TABLE reconciliation_spikes; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.reconciliation_spikes IS 'Reconciliation runs whose Contacts recovered without a webhook were a spike (§10.2; the decision is isRecoveredSpike in src/inbound/reconcile.ts), recorded by the run under its lease; the last 1 000.';

--
-- Name: COLUMN reconciliation_spikes.id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.reconciliation_spikes.id IS 'Identity, in recording order.';

--
-- Name: COLUMN reconciliation_spikes.job_type; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.reconciliation_spikes.job_type IS 'The reconciliation job (contacts).';

--
-- Name: COLUMN reconciliation_spikes.run_started_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.reconciliation_spikes.run_started_at IS 'When the run started (its claim).';

--
-- Name: COLUMN reconciliation_spikes.recorded_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.reconciliation_spikes.recorded_at IS 'When the run found the spike: what bitrix_sync_reconciliation_recovered_spike_timestamp_seconds exports.';

--
-- Name: COLUMN reconciliation_spikes.recovered; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.reconciliation_spikes.recovered IS 'Contacts the run recovered without a webhook.';

--
-- Name: COLUMN reconciliation_spikes.mapped; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.reconciliation_spikes.mapped IS 'Changed linked Contacts the run read.';

--
-- Name: COLUMN reconciliation_spikes.baseline; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.reconciliation_spikes.baseline IS 'The smoothed usual recovered count it was compared with (reconciliation_cursors.recovered_baseline before the run); null before the first successful run.';

--
-- Name: record_recovered_spike(text, uuid, integer, integer, double precision); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.record_recovered_spike(p_job_type text, p_lease_token uuid, p_recovered integer, p_mapped integer, p_baseline double precision) RETURNS bitrix_sync.reconciliation_spikes
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_started timestamptz;
  v_row bitrix_sync.reconciliation_spikes;
begin
  if p_recovered is null or p_recovered < 1 or p_mapped is null or p_mapped < p_recovered
     or p_baseline < 0 or p_baseline = 'NaN'::double precision then
    raise exception 'a spike has recovered >= 1 Contacts of mapped >= recovered, and a baseline >= 0 or null'
      using errcode = 'BS004', hint = 'Pass the run''s counts as src/inbound/reconcile.ts reports them.';
  end if;
  -- Only the run that holds the cursor records its spike (a run whose lease was taken over is stale).
  select r.last_run_started_at into v_started from bitrix_sync.reconciliation_cursors r
   where r.job_type = p_job_type and r.last_run_status = 'running' and r.lease_token = p_lease_token;
  if not found then
    perform bitrix_sync._refuse_stale('reconciliation run', p_job_type);
  end if;
  insert into bitrix_sync.reconciliation_spikes (job_type, run_started_at, recovered, mapped, baseline)
  values (p_job_type, v_started, p_recovered, p_mapped, p_baseline)
  returning * into v_row;
  delete from bitrix_sync.reconciliation_spikes s
   where s.id in (select k.id from bitrix_sync.reconciliation_spikes k order by k.id desc offset 1000);
  return v_row;
end $$;

--
-- Name: FUNCTION record_recovered_spike(p_job_type text, p_lease_token uuid, p_recovered integer, p_mapped integer, p_baseline double precision); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.record_recovered_spike(p_job_type text, p_lease_token uuid, p_recovered integer, p_mapped integer, p_baseline double precision) IS 'Records that the running reconciliation run of p_job_type (fenced by its lease token, BS001 otherwise) recovered a spike of Contacts without a webhook: how many, of how many changed linked Contacts, against which baseline. Keeps the last 1 000.';

--
-- Name: record_refused_sources(inet[], text[], integer[], timestamp with time zone[], timestamp with time zone[]); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.record_refused_sources(p_sources inet[], p_receivers text[], p_counts integer[], p_first_seen timestamp with time zone[], p_last_seen timestamp with time zone[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_n integer := coalesce(cardinality(p_sources), 0);
  v_rows integer;
begin
  if coalesce(cardinality(p_receivers), 0) <> v_n or coalesce(cardinality(p_counts), 0) <> v_n
     or coalesce(cardinality(p_first_seen), 0) <> v_n or coalesce(cardinality(p_last_seen), 0) <> v_n then
    raise exception 'the refused sources come as five arrays of one length'
      using errcode = 'BS004', hint = 'Pass one address, receiver, count, first and last time per entry (src/inbound/edge.ts).';
  end if;
  if v_n > 10000 then
    raise exception 'at most 10 000 refused sources a call, not %', v_n
      using errcode = 'BS004', hint = 'Record them in smaller groups.';
  end if;
  if exists (select 1 from unnest(p_sources, p_receivers, p_counts, p_first_seen, p_last_seen) u(s, r, c, f, l)
              where s is null or masklen(s) <> case family(s) when 4 then 32 else 128 end
                 or r is null or r not in ('contact', 'alert', 'none')
                 or c is null or c < 1 or f is null or l is null or f > l) then
    raise exception 'a refused source is not one address, receiver contact, alert or none, a positive count and first <= last'
      using errcode = 'BS004', hint = 'A bug in the caller: it passes what nginx reported, checked.';
  end if;
  insert into bitrix_sync.refused_sources as e (source_ip, receiver, refusals, first_seen_at, last_seen_at)
  select u.s, u.r, sum(u.c), min(u.f), max(u.l)
    from unnest(p_sources, p_receivers, p_counts, p_first_seen, p_last_seen) u(s, r, c, f, l)
   group by u.s, u.r
  on conflict (source_ip, receiver) do update
    set refusals = e.refusals + excluded.refusals,
        first_seen_at = least(e.first_seen_at, excluded.first_seen_at),
        last_seen_at = greatest(e.last_seen_at, excluded.last_seen_at);
  get diagnostics v_rows = row_count;
  -- Bounded retention (§10.1).
  delete from bitrix_sync.refused_sources e where e.last_seen_at < pg_catalog.now() - interval '30 days';
  delete from bitrix_sync.refused_sources e
   where (e.source_ip, e.receiver) in (select k.source_ip, k.receiver from bitrix_sync.refused_sources k
                                         order by k.last_seen_at desc, k.source_ip, k.receiver offset 10000);
  return v_rows;
end $$;

--
-- Name: FUNCTION record_refused_sources(p_sources inet[], p_receivers text[], p_counts integer[], p_first_seen timestamp with time zone[], p_last_seen timestamp with time zone[]); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.record_refused_sources(p_sources inet[], p_receivers text[], p_counts integer[], p_first_seen timestamp with time zone[], p_last_seen timestamp with time zone[]) IS 'Adds what the service gathered of the proxy''s source_ip refusals (per address and receiver: count, first and last seen) to refused_sources, then trims the journal to 30 days and 10 000 rows. Returns the rows written. Addresses only: no query, body, header or token reaches it.';

--
-- Name: record_registered_contacts(uuid, timestamp with time zone, bigint, bigint, bigint[], jsonb); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.record_registered_contacts(p_lease_token uuid, p_read_at timestamp with time zone, p_from_id bigint, p_to_id bigint, p_checked_ids bigint[], p_rows jsonb) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET row_security TO 'off'
    AS $_$
declare
  v_busy uuid[];
  v_count integer;
  v_kinds text[];
  v_users uuid[];
  v_contacts text[];
begin
  perform bitrix_sync._check_audit_lease(p_lease_token);
  if p_read_at is null or jsonb_typeof(p_rows) is distinct from 'array' or (p_from_id is null) <> (p_to_id is null)
     or p_from_id > p_to_id then
    raise exception 'registered Contacts need the time of the read, a JSON array and a Contact ID range (or none)'
      using errcode = 'BS004', hint = 'Pass [{"contact_id", "user_id"}] of the Contacts listed with the registration flag set, the range (from, to] they were listed in, and/or the IDs read one by one.';
  end if;
  select array_agg(t.kind), array_agg(t.user_id), array_agg(t.contact_id) into v_kinds, v_users, v_contacts
    from (
  select distinct on (j.kind, coalesce(j.user_id::text, 'contact:' || j.contact_id)) j.kind, j.user_id, j.contact_id
    from (
      select case when u.id is null then 'registered_unknown_user' else 'registered_inactive_user' end as kind,
             r.user_id, r.contact_id, u.id as app_user, u.record_status, p.record_status as profile_status
        from (select (x ->> 'contact_id')::bigint::text as contact_id,
                     case when x ->> 'user_id' ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                          then (x ->> 'user_id')::uuid end as user_id
                from jsonb_array_elements(p_rows) x) r
        left join han_app.user_identity u on u.id = r.user_id
        left join han_app.client_profile p on p.user_id = u.id
       -- A linked Contact is judged with its link (registered_wrong, inactive_user_linked).
       where not exists (select 1 from bitrix_sync.entity_external_mapping m
                          where m.status = 'active' and m.external_id = r.contact_id)
    ) j
   -- Registered for an active user without a link: unmapped_user says it (map_or_create finds it).
   where not (j.app_user is not null and j.record_status = 'active' and j.profile_status is not distinct from 'active')
   order by j.kind, coalesce(j.user_id::text, 'contact:' || j.contact_id), j.contact_id::bigint
    ) t;

  -- Users with work in progress (or done since the read) are left as they are: neither flagged nor
  -- cleared. Asked of those flagged and those with a registered finding this read may clear.
  select array_agg(b.user_id) into v_busy
    from bitrix_sync._drift_busy_users(
           p_read_at,
           array_remove(v_users, null) || array(select d.user_id from bitrix_sync.drift_findings d
                                                where bitrix_sync._drift_kind_group(d.kind) = 'registered'
                                                  and d.user_id is not null)) b;
  v_busy := coalesce(v_busy, '{}');

  -- In step again: registered findings of the Contacts this read covered and did not flag.
  delete from bitrix_sync.drift_findings d
   where bitrix_sync._drift_kind_group(d.kind) = 'registered'
     and ((p_from_id is not null and d.contact_id::bigint > p_from_id and d.contact_id::bigint <= p_to_id)
          or d.contact_id::bigint = any(coalesce(p_checked_ids, '{}')))
     and not (d.user_id is not null and d.user_id = any(v_busy))
     and not exists (select 1 from unnest(v_kinds, v_users, v_contacts) x(kind, user_id, contact_id)
                      where x.kind = d.kind and coalesce(x.user_id::text, 'contact:' || x.contact_id)
                                              = coalesce(d.user_id::text, 'contact:' || d.contact_id));
  insert into bitrix_sync.drift_findings as d (kind, user_id, contact_id, detected_at, last_seen_at)
  select x.kind, x.user_id, x.contact_id, p_read_at, p_read_at
    from unnest(v_kinds, v_users, v_contacts) x(kind, user_id, contact_id)
   where not (x.user_id is not null and x.user_id = any(v_busy))
  on conflict (kind, (coalesce(user_id::text, 'contact:' || contact_id)))
  do update set contact_id = excluded.contact_id, last_seen_at = excluded.last_seen_at;
  get diagnostics v_count = row_count;
  return v_count;
end $_$;

--
-- Name: FUNCTION record_registered_contacts(p_lease_token uuid, p_read_at timestamp with time zone, p_from_id bigint, p_to_id bigint, p_checked_ids bigint[], p_rows jsonb); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.record_registered_contacts(p_lease_token uuid, p_read_at timestamp with time zone, p_from_id bigint, p_to_id bigint, p_checked_ids bigint[], p_rows jsonb) IS 'Records what the running audit found among Contacts with the registration flag set (p_rows: [{contact_id, user_id as the Contact carries it}]): unlinked Contacts registered for a user who is not active (registered_inactive_user) or whom the App does not know, or no readable user id (registered_unknown_user). Registered findings of Contacts in (p_from_id, p_to_id] (a page of the scan) or in p_checked_ids (read by ID) that the rows do not flag are deleted. Users with work in progress keep their findings. Returns how many findings the rows flag.';

--
-- Name: record_webhook(text, integer, text, inet, text, timestamp with time zone); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.record_webhook(p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet DEFAULT NULL::inet, p_event_id text DEFAULT NULL::text, p_source_ts timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS bigint
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_id bigint;
begin
  insert into bitrix_sync.webhook_inbox (receiver, entity_type_id, entity_id, source_ip, event_id, source_ts)
  values (p_receiver, p_entity_type_id, p_entity_id, p_source_ip, p_event_id, p_source_ts)
  on conflict (receiver, event_id) where event_id is not null do nothing
  returning id into v_id;
  perform pg_notify('bitrix_sync_webhooks', p_receiver);
  return v_id;
end $$;

--
-- Name: FUNCTION record_webhook(p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet, p_event_id text, p_source_ts timestamp with time zone); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.record_webhook(p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet, p_event_id text, p_source_ts timestamp with time zone) IS 'Durable insert of an accepted webhook (status received). With a stable event_id a duplicate is dropped and null is returned.';

--
-- Name: recover_alert_command(bigint, interval); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.recover_alert_command(p_id bigint, p_delay interval) RETURNS bitrix_sync.crm_commands
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.crm_commands;
  v_deadline timestamptz;
begin
  -- No lease: an uncertain command has none. The row lock and the status test fence two lanes
  -- that pick the same command; the second gets null and moves on.
  select * into v_row from bitrix_sync.crm_commands
   where id = p_id and alert_id is not null and status = 'uncertain'
   for update skip locked;
  if not found then
    return null;
  end if;
  update bitrix_sync.crm_commands set status = 'reconcile' where id = p_id returning * into v_row;
  if v_row.command_type = 'alert.add' then
    -- Waits for issue_alert_lookup() / resolve_alert_lookup().
    perform pg_notify('bitrix_sync_workflows', '');
    return v_row;
  end if;
  -- alert.update (and any read): sending the same values again cannot duplicate anything.
  v_deadline := bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_row));
  if now() + greatest(p_delay, interval '0') > v_deadline then
    v_row := bitrix_sync._dead_letter_command_row(v_row, 'retry_horizon_exceeded', null, null);
    perform bitrix_sync.mark_alert_mirror_failed(v_row.alert_id);
    return v_row;
  end if;
  update bitrix_sync.crm_commands
     set status = 'retry_wait', next_attempt_at = now() + greatest(p_delay, interval '0'), deadline_at = v_deadline
   where id = p_id
  returning * into v_row;
  perform pg_notify('bitrix_sync_commands', '');
  return v_row;
end $$;

--
-- Name: FUNCTION recover_alert_command(p_id bigint, p_delay interval); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.recover_alert_command(p_id bigint, p_delay interval) IS 'An unanswered alert command: uncertain -> reconcile. An alert.add then waits for a lookup of its item; an alert.update goes on to retry_wait after p_delay, or to dead_letter (retry_horizon_exceeded, technical DLQ row, alert failed) past its horizon. Returns null when the command is not uncertain any more (another lane took it).';

--
-- Name: refresh_user_drift(uuid, timestamp with time zone); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.refresh_user_drift(p_lease_token uuid, p_read_at timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET row_security TO 'off'
    SET jit TO 'off'
    AS $$
declare
  v_state bitrix_sync.audit_state;
  v_busy uuid[];
  v_count integer;
  v_kinds text[];
  v_users uuid[];
  v_contacts text[];
  v_after uuid;
  v_upto uuid;
  v_window bigint;
begin
  v_state := bitrix_sync._check_audit_lease(p_lease_token);
  -- The users this run judges: a full run every one; a sampled run a window of them in id order,
  -- (v_after, v_upto], from where the last sampled run stopped (audit_state.users_after_id). The
  -- window is audit.users_per_run users, or twice the users' share of audit.period_days when that
  -- is more, so a round of windows ends within half the period. v_upto null: the window reaches
  -- past the last user, and the next run starts a new round from the first.
  if v_state.last_run_mode = 'sample' then
    v_after := v_state.users_after_id;
    v_window := greatest(
      (bitrix_sync._active_setting('audit.users_per_run') #>> '{}')::bigint,
      ceil(2.0 * coalesce(bitrix_sync._planner_count('han_app.user_identity'),
                          (select count(*) from han_app.user_identity))
           * (bitrix_sync._active_setting('audit.interval_sec') #>> '{}')::integer
           / ((bitrix_sync._active_setting('audit.period_days') #>> '{}')::integer * 86400.0))::bigint);
    if v_after is null then
      select u.id into v_upto from han_app.user_identity u order by u.id offset v_window - 1 limit 1;
    else
      select u.id into v_upto from han_app.user_identity u where u.id > v_after order by u.id offset v_window - 1 limit 1;
    end if;
    -- A window that ends on the last user ends the round (the next run would judge nobody). The
    -- next user is looked up in key order (an EXISTS was planned as a Seq Scan that, at the end of
    -- a round, reads every user).
    if v_upto is not null then
      perform 1 from (select u.id from han_app.user_identity u where u.id > v_upto order by u.id limit 1) n;
      if not found then
        v_upto := null;
      end if;
    end if;
  end if;

  -- Link findings of a link that is no longer active (broken by a not-found rule, closed,
  -- relinked) have nothing left to compare (the findings are few: every run looks at all).
  delete from bitrix_sync.drift_findings d
   where bitrix_sync._drift_kind_group(d.kind) = 'link'
     and not exists (select 1 from bitrix_sync.entity_external_mapping m
                      where m.status = 'active' and m.entity_id = d.user_id and m.external_id = d.contact_id);

  -- One pass over the window's users (user_identity's primary key), each with its profile's status
  -- and whether it has an active link (an index-only probe of entity_external_mapping_active_entity_uq:
  -- external_system and entity_type are constants, by CHECK); the Contact of a link is read only
  -- for a finding. Then the active links in the window whose user the App no longer has. Each range
  -- predicate is written (v_after is null or ... > v_after) and (v_upto is null or ... <= v_upto):
  -- the plans are custom (the values known), an index range scan of the window.
  select array_agg(t.kind), array_agg(t.user_id), array_agg(t.contact_id) into v_kinds, v_users, v_contacts
    from (
  select case when x.linked then 'inactive_user_linked' else 'unmapped_user' end::text as kind,
         x.id as user_id,
         case when x.linked then
           (select m.external_id::text from bitrix_sync.entity_external_mapping m
             where m.external_system = 'bitrix24' and m.entity_type = 'user' and m.entity_id = x.id
               and m.status = 'active')
         end as contact_id
    from (
      -- The profile by its key, one probe per user (a join was planned as a hash of every profile).
      select u.id, u.created_at,
             u.record_status is not distinct from 'active'
               and (select p.record_status from han_app.client_profile p where p.user_id = u.id)
                   is not distinct from 'active' as active,
             exists (select 1 from bitrix_sync.entity_external_mapping m
                      where m.external_system = 'bitrix24' and m.entity_type = 'user' and m.entity_id = u.id
                        and m.status = 'active') as linked
        from han_app.user_identity u
       where (v_after is null or u.id > v_after) and (v_upto is null or u.id <= v_upto)
    ) x
   where
     -- An active link of a user who is no longer active: contact.deactivate should have closed it
     -- and turned the flag off.
     (x.linked and not x.active)
     -- An active App user without an active link and nothing on the way: no open business alert
     -- (a person has it; work in progress is taken out below). Users from before the cutover who
     -- never had an intent stay out (§17: no backfill).
     or (not x.linked and x.active
         and not exists (select 1 from bitrix_sync.business_alerts a where a.user_id = x.id and a.status = 'open')
         and (x.created_at >= (select c.cutover_watermark from bitrix_sync.cutover c)
              or exists (select 1 from bitrix_sync.entity_external_mapping m where m.entity_id = x.id)
              or exists (select 1 from bitrix_sync.workflow_instances w where w.user_id = x.id)))
  union all
  -- An active link of a user the App no longer has.
  select 'inactive_user_linked', m.entity_id, m.external_id::text
    from bitrix_sync.entity_external_mapping m
   where m.external_system = 'bitrix24' and m.entity_type = 'user' and m.status = 'active'
     and (v_after is null or m.entity_id > v_after) and (v_upto is null or m.entity_id <= v_upto)
     and not exists (select 1 from han_app.user_identity u where u.id = m.entity_id)
    ) t;

  -- Users with work in progress (or done since the read) are left as they are this run: neither
  -- found nor cleared. Asked of the few users concerned (those found, and those with a finding of
  -- the user kinds in the window), never of every user.
  select array_agg(b.user_id) into v_busy
    from bitrix_sync._drift_busy_users(
           p_read_at,
           coalesce(v_users, '{}') || coalesce((
             select array_agg(d.user_id) from bitrix_sync.drift_findings d
              where bitrix_sync._drift_kind_group(d.kind) = 'user' and d.user_id is not null
                and (v_after is null or d.user_id > v_after) and (v_upto is null or d.user_id <= v_upto)), '{}')) b;
  v_busy := coalesce(v_busy, '{}');

  -- Findings of the user kinds within the window that this run did not find again are cleared;
  -- those outside it wait for their window.
  delete from bitrix_sync.drift_findings d
   where bitrix_sync._drift_kind_group(d.kind) = 'user'
     and (v_after is null or d.user_id > v_after) and (v_upto is null or d.user_id <= v_upto)
     and not (d.user_id = any(v_busy))
     and not exists (select 1 from unnest(v_kinds, v_users) x(kind, user_id)
                      where x.kind = d.kind and x.user_id = d.user_id);
  insert into bitrix_sync.drift_findings as d (kind, user_id, contact_id, detected_at, last_seen_at)
  select x.kind, x.user_id, x.contact_id, p_read_at, p_read_at
    from unnest(v_kinds, v_users, v_contacts) x(kind, user_id, contact_id)
   where not (x.user_id = any(v_busy))
  on conflict (kind, (coalesce(user_id::text, 'contact:' || contact_id)))
  do update set contact_id = excluded.contact_id, last_seen_at = excluded.last_seen_at;
  get diagnostics v_count = row_count;

  if v_state.last_run_mode = 'sample' then
    update bitrix_sync.audit_state s
       set users_after_id = v_upto,
           users_round_started_at = case when v_after is null then p_read_at else s.users_round_started_at end,
           users_round_ended_at = case when v_upto is null then p_read_at else s.users_round_ended_at end
     where s.singleton;
  end if;
  return v_count;
end $$;

--
-- Name: FUNCTION refresh_user_drift(p_lease_token uuid, p_read_at timestamp with time zone); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.refresh_user_drift(p_lease_token uuid, p_read_at timestamp with time zone) IS 'Judges the user kinds of the running audit, in SQL, without the CRM: unmapped_user (active user without an active link, no work in progress, no open business alert; users from before the cutover who never had an intent are left out, §17) and inactive_user_linked (an active link of a user who is not active). A full run judges every user; a sampled run the next window of users in id order (audit.users_per_run, or twice the users'' share of audit.period_days when more), from where the last one stopped (audit_state.users_after_id), so its cost follows the window, not the installation. Also drops link findings of links that are no longer active. Users with work in progress keep their findings. Returns how many findings of the window it holds now.';

--
-- Name: reject_command(bigint, uuid, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.reject_command(p_id bigint, p_lease_token uuid, p_error_code text) RETURNS bitrix_sync.crm_commands
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.crm_commands
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and (status in ('leased', 'in_flight')) is true and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION reject_command(p_id bigint, p_lease_token uuid, p_error_code text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.reject_command(p_id bigint, p_lease_token uuid, p_error_code text) IS 'leased|in_flight -> dead_letter for a business failure (invalid phone, unknown citizenship): no technical DLQ row; the workflow wakes, parks in waiting_manual and raises a business alert (§9). Refuses stale tokens (BS001).';

--
-- Name: rekey_contact_phones(text[], text[], text[]); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.rekey_contact_phones(p_contact_ids text[], p_old_hashes text[], p_new_hashes text[]) RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_n integer := coalesce(cardinality(p_contact_ids), 0);
  v_changed integer;
begin
  if coalesce(cardinality(p_old_hashes), 0) <> v_n or coalesce(cardinality(p_new_hashes), 0) <> v_n or v_n > 10000 then
    raise exception 'rekey_contact_phones needs three arrays of one length, at most 10000'
      using errcode = 'BS004', hint = 'Pass Contact ID, the hash read and its replacement per snapshot.';
  end if;
  if exists (select 1 from unnest(p_old_hashes, p_new_hashes) i(old_hash, new_hash)
              where i.old_hash is null or i.old_hash !~ '^([0-9a-f]{64}|v2:[A-Za-z0-9_-]{43})$'
                 or (i.new_hash is not null and i.new_hash !~ '^v3:[A-Za-z0-9_-]{43}$')
                 or (i.new_hash is null and i.old_hash !~ '^[0-9a-f]{64}$')) then
    raise exception 'rekey_contact_phones replaces a legacy phone hash by a v3 one, or clears an unkeyed one'
      using errcode = 'BS004', hint = 'Old: 64 hex characters or v2:...; new: v3:..., or null for an unkeyed old one.';
  end if;
  -- Compare and set: a snapshot changed since it was read keeps its new value. A user with a running
  -- workflow is left for that workflow's read of the Contact (it may hold an older read's hashes).
  with input as (
    select * from unnest(p_contact_ids, p_old_hashes, p_new_hashes) i(contact_id, old_hash, new_hash)
  ), changed as (
    update bitrix_sync.contact_snapshots s
       set phone_hash = i.new_hash
      from input i
     where s.contact_id = i.contact_id and s.phone_hash = i.old_hash
       and not exists (select 1 from bitrix_sync.workflow_instances w
                        where w.user_id = s.user_id and w.state not in ('succeeded', 'failed', 'cancelled'))
    returning 1
  )
  select count(*)::integer into v_changed from changed;
  return v_changed;
end $_$;

--
-- Name: FUNCTION rekey_contact_phones(p_contact_ids text[], p_old_hashes text[], p_new_hashes text[]); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.rekey_contact_phones(p_contact_ids text[], p_old_hashes text[], p_new_hashes text[]) IS 'The service re-keys snapshots'' phone hashes in a legacy form (v2, or unkeyed plain SHA-256) where the App''s phone is the number they stand for (new v3 hash), or clears an unkeyed one that matches no phone at hand (null: the next phone change appends). Compare and set per snapshot; users with a running workflow are skipped. BS004 for arrays of different lengths or hashes of the wrong form. Returns how many changed.';

--
-- Name: release_command(bigint, uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.release_command(p_id bigint, p_lease_token uuid) RETURNS bitrix_sync.crm_commands
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.crm_commands;
begin
  update bitrix_sync.crm_commands
     set status = 'pending', lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status is not distinct from 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION release_command(p_id bigint, p_lease_token uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.release_command(p_id bigint, p_lease_token uuid) IS 'leased -> pending without sending (no limiter token, method blocked, shutdown). Refuses stale tokens (BS001).';

--
-- Name: release_crm_request(uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.release_crm_request(p_slot_id uuid) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  delete from bitrix_sync.crm_inflight_slots s where s.slot_id = p_slot_id;
  return found;
end $$;

--
-- Name: FUNCTION release_crm_request(p_slot_id uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.release_crm_request(p_slot_id uuid) IS 'Frees an in-flight slot when its request has a reply or failed. false when the slot had already expired.';

--
-- Name: release_crm_request(uuid, text, boolean); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.release_crm_request(p_slot_id uuid, p_bucket text, p_answered boolean) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_released boolean;
  v_now timestamptz := clock_timestamp();
begin
  delete from bitrix_sync.crm_inflight_slots s where s.slot_id = p_slot_id;
  v_released := found;
  if coalesce(p_answered, false) then
    perform bitrix_sync._check_limiter_name('bucket', p_bucket);
    -- A row written within the last second is left alone, and then not even locked; nor is a row
    -- another session holds (an acquire under way): a release never waits for the bucket, and the
    -- next answer stamps it.
    update bitrix_sync.crm_rate_buckets b
       set last_answered_at = v_now
     where b.bucket = (select k.bucket from bitrix_sync.crm_rate_buckets k
                        where k.bucket = p_bucket
                          and (k.last_answered_at is null or k.last_answered_at < v_now - interval '1 second')
                        for update skip locked);
  end if;
  return v_released;
end $$;

--
-- Name: FUNCTION release_crm_request(p_slot_id uuid, p_bucket text, p_answered boolean); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.release_crm_request(p_slot_id uuid, p_bucket text, p_answered boolean) IS 'Frees an in-flight slot when its request has a reply or failed, as release_crm_request(uuid); p_answered true (the portal answered HTTP 2xx) also records the time on the bucket p_bucket (last_answered_at, at most once a second), where every replica''s readiness reads it. false when the slot had already expired.';

--
-- Name: release_spare_crm_request(uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.release_spare_crm_request(p_slot_id uuid) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  delete from bitrix_sync.crm_inflight_slots s where s.slot_id = p_slot_id and s.bucket like '%#spare';
  return found;
end $$;

--
-- Name: FUNCTION release_spare_crm_request(p_slot_id uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.release_spare_crm_request(p_slot_id uuid) IS 'Frees the spare in-flight slot of acquire_spare_crm_request() when its request has a reply or failed (only spare slots). false when the slot had already expired.';

--
-- Name: release_sync_task(uuid, uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.release_sync_task(p_id uuid, p_lease_token uuid) RETURNS han_app.sync_queue
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row han_app.sync_queue;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  update han_app.sync_queue
     set status = 'pending', locked_by = null, locked_until = null, lease_token = null,
         attempt_count = greatest(attempt_count - 1, 0), updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;

--
-- Name: FUNCTION release_sync_task(p_id uuid, p_lease_token uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.release_sync_task(p_id uuid, p_lease_token uuid) IS 'leased -> pending without spending an attempt (shutdown, paused sync). Refuses a stale token (BS001).';

--
-- Name: repair_drift(text, text, uuid[], boolean); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.repair_drift(p_requested_by text, p_reason text, p_user_ids uuid[] DEFAULT NULL::uuid[], p_dry_run boolean DEFAULT false) RETURNS TABLE(user_id uuid, contact_id text, kinds text[], intent text, recorded boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET row_security TO 'off'
    AS $$
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_requested_by);
  if p_user_ids is not null and cardinality(p_user_ids) = 0 then
    raise exception 'an empty list of users names nobody to repair'
      using errcode = 'BS004', hint = 'Pass null to repair every drifted user, or the user ids from bitrix_sync.status_drift.';
  end if;
  return query
  select r.user_id, r.contact_id, r.kinds, r.intent, r.recorded
    from bitrix_sync._repair_drift(p_requested_by, p_reason, p_user_ids, null, coalesce(p_dry_run, false), true, false) r;
end $$;

--
-- Name: FUNCTION repair_drift(p_requested_by text, p_reason text, p_user_ids uuid[], p_dry_run boolean); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.repair_drift(p_requested_by text, p_reason text, p_user_ids uuid[], p_dry_run boolean) IS 'Admin: for each drifted user of bitrix_sync.status_drift (p_user_ids, or all when null) records the intent that brings the user back through the ordinary workflows (§5): contact.map_or_create for App-master and CRM-master drift and a missing link, contact.update for a deleted Contact (§5.2 not-found rule), contact.deactivate for an inactive or unknown user''s link or registration (§5.3). Audited (drift_repairs with the operator, the reason and session_user; one admin_actions row). Returns one row per user acted on (recorded true), or with p_dry_run the same rows without recording anything; Contacts registered without a readable user id are listed as manual. BS004 without a reason or operator, BS061 for a user without an open finding.';

--
-- Name: request_bitrix_contact_rebind(uuid, text, text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.request_bitrix_contact_rebind(user_id uuid, target_b24_id text, reason text, operator_id text) RETURNS uuid
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET row_security TO 'off'
    AS $_$
declare
  v_current bitrix_sync.entity_external_mapping;
  v_open bitrix_sync.rebind_requests;
  v_busy bitrix_sync.workflow_instances;
  v_request_id uuid;
  v_workflow_id uuid;
  v_user_id constant uuid := request_bitrix_contact_rebind.user_id;
  v_target constant text := btrim(request_bitrix_contact_rebind.target_b24_id);
begin
  -- Messages name no user or Contact (the server log keeps them): the caller knows which it asked for.
  if v_user_id is null or v_target is null or v_target !~ '^[1-9][0-9]{0,17}$' then
    raise exception 'target_b24_id must be a Bitrix24 Contact ID (digits only) and user_id is required'
      using errcode = 'BS004', hint = 'Example: select bitrix_sync.request_bitrix_contact_rebind(''<user uuid>'', ''12345'', ''duplicate merged by CRM team'', ''ops:ivanov'');';
  end if;
  if reason is null or length(btrim(reason)) < 3 or length(btrim(reason)) > 500
     or operator_id is null or length(btrim(operator_id)) = 0 then
    raise exception 'a reason (3 to 500 characters) and an operator_id are required for the audit'
      using errcode = 'BS004', hint = 'Say why the link is wrong and who you are.';
  end if;
  if not exists (select 1 from han_app.user_identity u where u.id = v_user_id and u.record_status = 'active') then
    raise exception 'this user does not exist or is not active'
      using errcode = 'BS005', hint = 'Only active users are linked to Contacts; check the user id.';
  end if;

  -- 1. lock the user's current active mapping (there may be none).
  select * into v_current from bitrix_sync.entity_external_mapping m
   where m.entity_type = 'user' and m.entity_id = v_user_id and m.status = 'active'
   for update;
  if found and v_current.external_id = v_target then
    raise exception 'this user is already linked to this Contact'
      using errcode = 'BS006', hint = 'Nothing to do.';
  end if;
  -- 2. the target must not be actively linked to another user.
  perform 1 from bitrix_sync.entity_external_mapping m
   where m.external_entity_type = 'contact' and m.external_id = v_target and m.status = 'active'
   for update;
  if found then
    raise exception 'the target Contact is actively linked to another user'
      using errcode = 'BS006',
            hint = 'Resolve that user''s link first (deactivate or rebind it); a Contact cannot serve two active users.';
  end if;
  select * into v_open from bitrix_sync.rebind_requests r
   where r.user_id = v_user_id and r.status in ('requested', 'in_progress');
  if found then
    raise exception 'a rebind of this user is already open (request %)', v_open.id
      using errcode = 'BS007',
            hint = format('Watch it with select * from bitrix_sync.rebind_request_status where request_id = %L; '
                          'or cancel it with select * from bitrix_sync.cancel_rebind_request(%L, ''<why>'', ''ops:<you>''); '
                          'then ask again.', v_open.id, v_open.id);
  end if;
  -- Two open requests for one target would race for the same Contact; the second would fail late,
  -- after both Contacts were read and written.
  if exists (select 1 from bitrix_sync.rebind_requests r
              where r.target_contact_id = v_target and r.status in ('requested', 'in_progress')) then
    raise exception 'Contact % is already the target of an open rebind request', v_target
      using errcode = 'BS009',
            hint = 'Wait until that request has finished (bitrix_sync.rebind_requests), then ask again; a Contact serves one user.';
  end if;
  select * into v_busy from bitrix_sync.workflow_instances w
   where w.user_id = v_user_id and w.state not in ('succeeded', 'failed', 'cancelled');
  if found and v_busy.state = 'waiting_manual' then
    raise exception 'this user has a workflow parked for a person (workflow %, reason %)', v_busy.id, v_busy.last_error_code
      using errcode = 'BS007',
            hint = format('Decide it first: select * from bitrix_sync.resume_parked_workflow(%L, ''retry'', ''<why>'', ''ops:<you>''); '
                          'or cancel it with select * from bitrix_sync.cancel_parked_workflow(%L, ''<why>'', ''ops:<you>''); '
                          'then ask again (docs/admin.md, Parked workflows).', v_busy.id, v_busy.id);
  elsif found then
    raise exception 'this user has a % workflow in progress (workflow %, state %)', v_busy.workflow_type, v_busy.id, v_busy.state
      using errcode = 'BS007',
            hint = 'It finishes on its own, usually within seconds (a CRM outage can make it wait); ask again then. A user has one workflow at a time.';
  end if;

  -- 3. the request and its workflow; the mapping is untouched (4).
  insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, contact_id, step_data)
  values ('contact.rebind', 'contact.rebind', v_user_id, v_target,
          jsonb_build_object('previous_contact_id', v_current.external_id, 'target_contact_id', v_target))
  returning id into v_workflow_id;
  begin
    insert into bitrix_sync.rebind_requests (user_id, previous_contact_id, target_contact_id, reason, operator_id, workflow_id)
    values (v_user_id, v_current.external_id, v_target, btrim(reason), btrim(operator_id), v_workflow_id)
    returning id into v_request_id;
  exception when unique_violation then
    -- A concurrent request for the same target (or user) committed between the checks and here.
    raise exception 'Contact % or user % already has an open rebind request', v_target, v_user_id
      using errcode = 'BS009',
            hint = 'Wait until that request has finished (bitrix_sync.rebind_requests), then ask again; a Contact serves one user.';
  end;
  perform pg_notify('bitrix_sync_workflows', '');
  return v_request_id;
end $_$;

--
-- Name: FUNCTION request_bitrix_contact_rebind(user_id uuid, target_b24_id text, reason text, operator_id text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.request_bitrix_contact_rebind(user_id uuid, target_b24_id text, reason text, operator_id text) IS 'Admin entry point (§5.4): validates the request, locks the current mapping, refuses a target linked to another active user or already the target of an open request (BS009), and refuses while the user has an open request or a workflow (a parked one is named with how to clear it); records an audited rebind_requests row and starts a contact.rebind workflow. Does not change the mapping. Returns the request id.';

--
-- Name: request_convergence_audit(text, text, boolean); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.request_convergence_audit(p_requested_by text, p_reason text, p_all boolean DEFAULT true) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_job_id bigint;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_requested_by);
  perform bitrix_sync._record_admin_action(
    case when coalesce(p_all, true) then 'request_full_audit' else 'request_audit' end,
    null, null, null, null, p_reason, p_requested_by);
  select (graphile_worker.add_job(
            'audit_convergence',
            json_build_object('all', coalesce(p_all, true), 'force', true),
            job_key := case when coalesce(p_all, true) then 'audit_convergence_all' else 'audit_convergence_now' end,
            max_attempts := 25)).id
    into v_job_id;
  return v_job_id;
end $$;

--
-- Name: FUNCTION request_convergence_audit(p_requested_by text, p_reason text, p_all boolean); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.request_convergence_audit(p_requested_by text, p_reason text, p_all boolean) IS 'Admin: queues a convergence audit run now (graphile-worker job audit_convergence): with p_all (the default) every active link and the whole scan of registered Contacts, e.g. after a restore from backup or an incident; otherwise a sampled run. Audited in admin_actions. Returns the job id. The run itself happens in the service within seconds (graphile-worker retries it while another run holds the audit).';

--
-- Name: request_reconciliation(text, text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.request_reconciliation(p_job_type text, p_requested_by text, p_reason text) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_job_id bigint;
begin
  if p_job_type is null or p_job_type not in ('contacts', 'alerts') then
    raise exception 'unknown reconciliation %', coalesce(p_job_type, 'null')
      using errcode = 'BS004', hint = 'Name ''contacts'' (§10.2) or ''alerts'' (§10.3).';
  end if;
  perform bitrix_sync._check_admin_audit(p_reason, p_requested_by);
  perform bitrix_sync._record_admin_action(
    'request_reconciliation_' || p_job_type, null, null, null, null, p_reason, p_requested_by);
  -- Forced: the claim takes the run now, however recently the last one started.
  select (graphile_worker.add_job(
            'reconcile_' || p_job_type, json_build_object('force', true),
            job_key := 'reconcile_' || p_job_type || '_now', max_attempts := 1)).id
    into v_job_id;
  return v_job_id;
end $$;

--
-- Name: FUNCTION request_reconciliation(p_job_type text, p_requested_by text, p_reason text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.request_reconciliation(p_job_type text, p_requested_by text, p_reason text) IS 'Admin: queues a reconciliation run now (graphile-worker job reconcile_contacts or reconcile_alerts, forced), e.g. after a portal outage or a lost robot (docs/runbook.md). Audited in admin_actions. Returns the job id. BS004 for an unknown job type or a missing reason or operator.';

--
-- Name: requeue_dead_letter(bigint, text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.requeue_dead_letter(p_id bigint, p_operator text, p_reason text) RETURNS TABLE(dead_letter_id bigint, source text, operation text, resolution text, requeued_to text, resolved_at timestamp with time zone, resolved_by text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_dl bitrix_sync.technical_dead_letters;
  v_refusal jsonb;
  v_target text;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator);
  v_dl := bitrix_sync._open_dead_letter(p_id);
  -- Lock what the new attempt starts from, so the checks below hold until commit.
  if v_dl.workflow_id is not null then
    perform 1 from bitrix_sync.workflow_instances w where w.id = v_dl.workflow_id for update;
  elsif v_dl.source = 'crm_command' then
    perform 1 from bitrix_sync.business_alerts a
     where a.id = (select c.alert_id from bitrix_sync.crm_commands c where c.id = v_dl.command_id)
       for update;
  end if;
  v_refusal := bitrix_sync._requeue_refusal(v_dl);
  if v_refusal ->> 'code' = 'BS042' then
    raise exception 'technical dead letter % cannot be requeued: %', p_id, v_refusal ->> 'message'
      using errcode = 'BS042', hint = replace(v_refusal ->> 'hint', '<id>', p_id::text);
  elsif v_refusal is not null then
    raise exception 'technical dead letter % cannot be requeued yet: %', p_id, v_refusal ->> 'message'
      using errcode = 'BS043', hint = replace(v_refusal ->> 'hint', '<id>', p_id::text);
  end if;
  begin
    v_target := bitrix_sync._requeue_target(v_dl);
  exception when unique_violation then
    -- A new intent or workflow of the user arrived between the check and the insert.
    raise exception 'technical dead letter % cannot be requeued: the user has new work under way', p_id
      using errcode = 'BS043', hint = 'Wait until it finishes (bitrix_sync.status_workflows), then look again with list_dead_letters().';
  end;
  return query select * from bitrix_sync._resolve_dead_letters(
    bitrix_sync._covered_dead_letters(v_dl), 'requeued', p_operator, p_reason, v_target);
end $$;

--
-- Name: FUNCTION requeue_dead_letter(p_id bigint, p_operator text, p_reason text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.requeue_dead_letter(p_id bigint, p_operator text, p_reason text) IS 'Admin (§9): starts a new, fenced attempt of what an open technical dead letter gave up on, through the normal state machine (a new intent or inbox row, the failed workflow from its first step, or the alert''s mirror), with a retry horizon counted from now; marks it (and the open entries the same attempt answers) resolved as requeued with operator and reason. BS004 missing operator or reason, BS040 no such entry, BS041 already resolved, BS042 nothing to run again, BS043 something else of the same user or alert is running.';

--
-- Name: resolve_alert_lookup(bigint, jsonb); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.resolve_alert_lookup(p_alert_id bigint, p_items jsonb) RETURNS text
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_item bigint;
  v_stage text;
  v_add bitrix_sync.crm_commands;
  v_deadline timestamptz;
begin
  if p_items is null or jsonb_typeof(p_items) <> 'array' then
    raise exception 'lookup items must be a JSON array of {id, stage_id}'
      using errcode = 'BS004', hint = 'Pass what the alert.list returned, e.g. ''[{"id": 7, "stage_id": "DT1040_7:NEW"}]''.';
  end if;
  perform 1 from bitrix_sync.business_alerts where id = p_alert_id for update;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  -- A fingerprint repeats across an alert and the ones that follow it after a terminal stage; an
  -- item another alert already owns is not this alert's.
  select (i ->> 'id')::bigint, i ->> 'stage_id' into v_item, v_stage
    from jsonb_array_elements(p_items) i
   where not exists (select 1 from bitrix_sync.business_alerts b
                      where b.item_id = (i ->> 'id')::bigint and b.id <> p_alert_id)
   order by (i ->> 'id')::bigint
   limit 1;
  if v_item is not null then
    perform bitrix_sync.record_alert_item(p_alert_id, v_item, v_stage);
  end if;
  for v_add in
    select * from bitrix_sync.crm_commands
     where alert_id = p_alert_id and command_type = 'alert.add' and status = 'reconcile'
     order by id
     for update
  loop
    if v_item is not null then
      update bitrix_sync.crm_commands
         set status = 'succeeded', completed_at = now(), last_error_code = null,
             response = jsonb_build_object('item_id', v_item, 'stage_id', v_stage, 'recovered', true)
       where id = v_add.id;
    else
      -- The lookup proved the add did not land: the same add goes out again, within its horizon.
      v_deadline := bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_add));
      if now() > v_deadline then
        perform bitrix_sync._dead_letter_command_row(v_add, 'retry_horizon_exceeded', null, null);
        perform bitrix_sync.mark_alert_mirror_failed(p_alert_id);
      else
        update bitrix_sync.crm_commands
           set status = 'retry_wait', next_attempt_at = now(), last_error_code = 'reconciled_not_applied',
               deadline_at = v_deadline
         where id = v_add.id;
        perform pg_notify('bitrix_sync_commands', '');
      end if;
    end if;
  end loop;
  return case when v_item is null then 'not_found' else 'found' end;
end $$;

--
-- Name: FUNCTION resolve_alert_lookup(p_alert_id bigint, p_items jsonb); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.resolve_alert_lookup(p_alert_id bigint, p_items jsonb) IS 'The outcome of an alert''s item lookup (called in the lookup''s completion transaction): an item that no other alert owns is recorded on the alert and the alert.add waiting in reconcile succeeds with it; no such item: the waiting add goes back to retry_wait and is sent again (dead_letter past its horizon). Returns found or not_found.';

--
-- Name: resolve_command_reconcile(bigint, uuid, text, jsonb, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.resolve_command_reconcile(p_id bigint, p_workflow_token uuid, p_outcome text, p_response jsonb DEFAULT NULL::jsonb, p_error_code text DEFAULT NULL::text) RETURNS bitrix_sync.crm_commands
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.crm_commands;
begin
  v_row := bitrix_sync._workflow_holder(p_id, p_workflow_token);
  if v_row.status <> 'reconcile' then
    raise exception 'command % is %, not reconcile', p_id, v_row.status
      using errcode = 'BS002', hint = 'Call begin_command_reconcile() first.';
  end if;
  case p_outcome
    when 'succeeded' then
      update bitrix_sync.crm_commands
         set status = 'succeeded', response = p_response, completed_at = now(), last_error_code = null
       where id = p_id returning * into v_row;
    when 'retry' then
      -- The search proved the write did not land: sending it again cannot duplicate anything.
      perform bitrix_sync._check_code(coalesce(p_error_code, 'reconciled_not_applied'));
      if now() > bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_row)) then
        -- Past the horizon (§9) a write that keeps getting no reply is not sent again: without
        -- this, a portal that never answers would keep the workflow waiting for ever.
        update bitrix_sync.crm_commands
           set status = 'dead_letter', completed_at = now(), last_error_code = 'retry_horizon_exceeded'
         where id = p_id returning * into v_row;
        perform bitrix_sync._dead_letter('crm_command', v_row.id::text, v_row.command_type,
          'retry_horizon_exceeded', v_row.attempt_count - v_row.limit_hits,
          bitrix_sync._command_first_attempt(v_row), v_row.workflow_id, v_row.id, v_row.correlation_id,
          null, null);
        return v_row;
      end if;
      update bitrix_sync.crm_commands
         set status = 'retry_wait', next_attempt_at = now(),
             last_error_code = coalesce(p_error_code, 'reconciled_not_applied')
       where id = p_id returning * into v_row;
    when 'superseded' then
      -- The workflow decides from a fresh read instead (a rebind's clear of the previous Contact):
      -- not a technical failure, so no DLQ row.
      perform bitrix_sync._check_code(p_error_code);
      update bitrix_sync.crm_commands set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code
       where id = p_id returning * into v_row;
    when 'dead_letter' then
      perform bitrix_sync._check_code(p_error_code);
      update bitrix_sync.crm_commands set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code
       where id = p_id returning * into v_row;
      perform bitrix_sync._dead_letter('crm_command', v_row.id::text, v_row.command_type, p_error_code,
        v_row.attempt_count - v_row.limit_hits, bitrix_sync._command_first_attempt(v_row),
        v_row.workflow_id, v_row.id, v_row.correlation_id, null, null);
    else
      raise exception 'reconcile outcome must be succeeded, retry, superseded or dead_letter, got %', p_outcome
        using errcode = 'BS004', hint = 'See §7.2: reconcile -> succeeded | retry_wait | dead_letter.';
  end case;
  return v_row;
end $$;

--
-- Name: FUNCTION resolve_command_reconcile(p_id bigint, p_workflow_token uuid, p_outcome text, p_response jsonb, p_error_code text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.resolve_command_reconcile(p_id bigint, p_workflow_token uuid, p_outcome text, p_response jsonb, p_error_code text) IS 'reconcile -> succeeded (the search found the write applied), retry_wait (proved not applied; dead_letter with retry_horizon_exceeded and a DLQ row instead once the command is past its horizon, so the caller must look at the returned status) or dead_letter (superseded: dead_letter without a DLQ row, the workflow reads again and decides). Fenced by the workflow lease.';

--
-- Name: resume_parked_workflow(uuid, text, text, text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.resume_parked_workflow(p_workflow_id uuid, p_decision text, p_reason text, p_operator_id text, p_contact_id text DEFAULT NULL::text) RETURNS TABLE(workflow_id uuid, state text, decision text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
#variable_conflict use_column
declare
  v_wf bitrix_sync.workflow_instances;
  v_allowed text[];
  v_contact text := nullif(btrim(p_contact_id), '');
  v_manual jsonb;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator_id);
  if p_decision is null or p_decision not in ('retry', 'link_contact', 'create_contact') then
    raise exception 'the decision must be retry, link_contact or create_contact'
      using errcode = 'BS004',
            hint = 'select decisions from bitrix_sync.parked_workflows where workflow_id = ''<id>'' lists the ones this workflow accepts.';
  end if;
  if p_decision = 'link_contact' and (v_contact is null or v_contact !~ '^[1-9][0-9]{0,17}$') then
    raise exception 'link_contact needs the Contact ID to link (digits only)'
      using errcode = 'BS004',
            hint = 'Pass it last: resume_parked_workflow(''<workflow id>'', ''link_contact'', ''<why>'', ''ops:<you>'', ''12345'').';
  end if;
  if p_decision <> 'link_contact' and v_contact is not null then
    raise exception 'only link_contact takes a Contact ID'
      using errcode = 'BS004', hint = 'Leave p_contact_id out for retry and create_contact.';
  end if;

  select * into v_wf from bitrix_sync.workflow_instances w where w.id = p_workflow_id for update;
  if not found then
    raise exception 'there is no workflow %', p_workflow_id
      using errcode = 'BS005', hint = 'Copy the id from select * from bitrix_sync.parked_workflows.';
  end if;
  if v_wf.state <> 'waiting_manual' then
    raise exception 'workflow % is %, not parked', p_workflow_id, v_wf.state
      using errcode = 'BS002',
            hint = 'Only a workflow in waiting_manual waits for a decision; it may have been resumed by a newer App change already. select * from bitrix_sync.parked_workflows lists the parked ones.';
  end if;
  v_allowed := bitrix_sync._parked_decisions(v_wf.last_error_code);
  if not (p_decision = any (v_allowed)) then
    raise exception 'decision % does not apply to a workflow parked for %', p_decision, v_wf.last_error_code
      using errcode = 'BS004',
            hint = format('For %s use %s. Fix the data first (docs/admin.md, Parked workflows), then retry.',
                          v_wf.last_error_code, array_to_string(v_allowed, ' or '));
  end if;
  if p_decision = 'link_contact' and exists (
       select 1 from bitrix_sync.entity_external_mapping m
        where m.external_entity_type = 'contact' and m.external_id = v_contact and m.status = 'active'
          and m.entity_id <> v_wf.user_id) then
    raise exception 'that Contact is actively linked to another user'
      using errcode = 'BS006',
            hint = 'Pick another Contact, or create_contact; a Contact serves one active user. Resolve the other user''s link first if this Contact is really this user''s.';
  end if;

  -- A new pass of the workflow's intent, from its first step, with the person's decision in its step
  -- data (src/workflows/step/map-or-create.ts reads step_data.manual).
  v_manual := case p_decision when 'retry' then null
                              else jsonb_strip_nulls(jsonb_build_object('decision', p_decision, 'contact_id', v_contact)) end;
  v_wf := bitrix_sync.fire_workflow_event(
            p_workflow_id, null, 'manual_resume',
            jsonb_build_object(
              'current_step', 'start',
              'next_attempt_at', now(),
              'step_data', jsonb_strip_nulls(jsonb_build_object('pass', v_wf.revision, 'as', v_wf.intent_type,
                                                                'manual', v_manual))));
  perform bitrix_sync._record_admin_action('resume_workflow', p_workflow_id, null, p_decision, v_contact,
                                           p_reason, p_operator_id);
  return query select v_wf.id, v_wf.state::text, p_decision;
end $_$;

--
-- Name: FUNCTION resume_parked_workflow(p_workflow_id uuid, p_decision text, p_reason text, p_operator_id text, p_contact_id text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.resume_parked_workflow(p_workflow_id uuid, p_decision text, p_reason text, p_operator_id text, p_contact_id text) IS 'Admin (docs/admin.md): waiting_manual -> running (manual_resume) for a new pass of the workflow, with a decision: retry (the data was fixed), link_contact (with p_contact_id: link this Contact) or create_contact (too_many_candidates and refused manual links). Audited. BS004 for a missing audit field or a decision that does not apply, BS005 unknown workflow, BS002 not parked, BS006 the Contact is linked to another active user.';

--
-- Name: resume_preview(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.resume_preview() RETURNS TABLE(section text, item text, count bigint, oldest_age_sec bigint, note text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  with pause as (
    select * from bitrix_sync.status_pause
  ), unsure as (
    select c.command_type::text as command_type, c.status::text as status, c.count, c.oldest_age_sec
      from bitrix_sync.status_commands c
     where c.status in ('uncertain', 'reconcile')
  ), rows_ as (
    select 1 as ord, 'pause'::text as section,
           coalesce('pause ' || p.pause_id, 'not paused') as item,
           count(p.pause_id) as count, max(p.paused_for_sec) as oldest_age_sec,
           coalesce(max('by ' || p.paused_by || ': ' || p.pause_reason
                        || '. Paused time does not count against retry.horizon_sec. To resume: resume_sync(''ops:<you>'', '
                        || p.pause_id || ', ''<why>'')'),
                    'Processing runs; nothing to resume.') as note,
           0 as sub
      from (select 1) one left join pause p on true
     group by p.pause_id
    union all
    -- Writes sent with no answer: they may have landed. Their workflows look before they write
    -- again (a create is searched for, a non-idempotent change read again), but a portal that was
    -- down or changed by hand is worth a look first.
    select 2, 'uncertain_commands', u.command_type || ' ' || u.status, u.count, u.oldest_age_sec,
           case when row_number() over (order by u.command_type, u.status) = 1 then
             'Look at these first: writes sent without an answer, which may have landed. On resume their workflows search or read the Contact before writing again (docs/runbook.md, "Resuming after a pause").'
           end, row_number() over (order by u.command_type, u.status)
      from unsure u
    union all
    select 2, 'uncertain_commands', 'none', 0, null, 'No write is waiting for an answer.', 0
     where not exists (select 1 from unsure)
    union all
    select 3, 'in_hand', 'claimed before the pause, still finishing',
           coalesce(max(p.intents_leased + p.workflows_running + p.commands_in_hand + p.webhooks_processing
                        + p.requests_out), 0), null,
           case when coalesce(bool_and(p.drained), true) then 'Drained.' else 'Not drained yet: wait for status_pause.drained.' end,
           0
      from pause p
    union all
    select 4, 'workflows', w.state::text, sum(w.count)::bigint, max(w.oldest_age_sec), null, 0
      from bitrix_sync.status_workflows w
     group by w.state
    union all
    select 5, 'commands', c.status::text, sum(c.count)::bigint, max(c.oldest_age_sec), null, 0
      from bitrix_sync.status_commands c
     where c.status not in ('uncertain', 'reconcile', 'dead_letter')
     group by c.status
    union all
    select 6, 'queue', q.status::text, q.count, q.oldest_age_sec,
           case when q.status = 'pending' then 'oldest_age_sec: the oldest intent waiting' end, 0
      from bitrix_sync.status_queue q
     where q.status <> 'dead_letter'
    union all
    select 7, 'webhooks', w.receiver::text || ' ' || w.status::text, w.count, w.oldest_age_sec, null, 0
      from bitrix_sync.status_webhooks w
    union all
    select 8, 'dead_letters', 'open', coalesce(sum(d.count), 0)::bigint, max(d.oldest_age_sec),
           'Open technical dead letters (list_dead_letters()); a pause adds none.', 0
      from bitrix_sync.status_dead_letters d
  )
  select r.section, r.item, r.count, r.oldest_age_sec, r.note from rows_ r order by r.ord, r.sub, r.item
$$;

--
-- Name: FUNCTION resume_preview(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.resume_preview() IS 'Admin, read-only (§17): what resuming releases, in the order to look at it: the pause, the writes sent without an answer (uncertain, reconcile) first, the work still finishing, open workflows by state, the command backlog, the queue with its oldest intent, the webhook inbox, open dead letters. resume_sync() returns the same rows.';

--
-- Name: resume_sync(text, bigint, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.resume_sync(p_operator text, p_confirm_pause_id bigint, p_reason text) RETURNS TABLE(section text, item text, count bigint, oldest_age_sec bigint, note text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_open bitrix_sync.sync_pauses;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator);
  lock table bitrix_sync.sync_pauses in share row exclusive mode;
  select * into v_open from bitrix_sync.sync_pauses p where p.resumed_at is null;
  if not found then
    raise exception 'processing is not paused'
      using errcode = 'BS071',
            hint = 'Nothing to resume: select * from bitrix_sync.sync_pauses order by id desc limit 1; shows the last pause.';
  end if;
  if p_confirm_pause_id is distinct from v_open.id then
    raise exception 'pause % is not the open pause (the open one is %, since %)', p_confirm_pause_id, v_open.id, v_open.paused_at
      using errcode = 'BS072',
            hint = 'Look at select * from bitrix_sync.resume_preview(); first, then confirm the open pause''s id.';
  end if;
  -- What waits, as it stands before anything moves.
  return query select * from bitrix_sync.resume_preview();
  update bitrix_sync.sync_pauses p
     set resumed_at = now(), resumed_by = btrim(p_operator), resumed_db_user = session_user,
         resume_reason = btrim(p_reason)
   where p.id = v_open.id;
  perform bitrix_sync._record_admin_action('resume_sync', null, null, null, null, p_reason, p_operator);
  -- The lanes wake at the commit instead of at their next poll. The backlog goes out at the pace of
  -- the shared limiter (limiter.*), as any backlog does: no burst.
  perform pg_notify('bitrix_sync_queue', '');
  perform pg_notify('bitrix_sync_workflows', '');
  perform pg_notify('bitrix_sync_commands', '');
  perform pg_notify('bitrix_sync_webhooks', '');
end $$;

--
-- Name: FUNCTION resume_sync(p_operator text, p_confirm_pause_id bigint, p_reason text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.resume_sync(p_operator text, p_confirm_pause_id bigint, p_reason text) IS 'Admin (§17): ends the open pause, confirmed by its id (from status_pause or resume_preview()). Returns resume_preview() as it stood, then from the commit the claim functions return work again and the lanes are woken; the backlog goes out under the shared limiter. Audited (admin_actions). BS004 missing operator or reason, BS071 not paused, BS072 the id is not the open pause''s.';

--
-- Name: retention_preview(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.retention_preview() RETURNS TABLE(table_name text, deletable bigint, oldest_finished_at timestamp with time zone, kept_days integer)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select 'webhooks', count(*), min(coalesce(w.processed_at, w.status_at)),
         (bitrix_sync._active_setting('retention.webhooks_days') #>> '{}')::integer
    from bitrix_sync.webhook_inbox w
   where (w.status = 'processed' and w.processed_at < (select bitrix_sync._retention_cutoff('retention.webhooks_days')))
      or (w.status = 'dead_letter' and w.status_at < (select bitrix_sync._retention_cutoff('retention.webhooks_days'))
          and not exists (select 1 from bitrix_sync.technical_dead_letters d
                           where d.resolved_at is null and d.source = 'webhook' and d.source_id = w.id::text))
  union all
  select 'commands', count(*), min(c.completed_at),
         (bitrix_sync._active_setting('retention.commands_days') #>> '{}')::integer
    from bitrix_sync.crm_commands c
    left join bitrix_sync.workflow_instances w on w.id = c.workflow_id
    left join bitrix_sync.business_alerts a on a.id = c.alert_id
   where c.completed_at < (select bitrix_sync._retention_cutoff('retention.commands_days'))
     and c.status in ('succeeded', 'dead_letter')
     and (c.workflow_id is null or w.state in ('succeeded', 'failed', 'cancelled'))
     and (c.alert_id is null or a.item_id is not null)
     and not exists (select 1 from bitrix_sync.technical_dead_letters d
                      where d.resolved_at is null and (d.command_id = c.id or d.workflow_id = c.workflow_id))
  union all
  -- Workflows whose commands go in the same run count too: they are deleted right after them.
  select 'workflows', count(*), min(w.finished_at),
         (bitrix_sync._active_setting('retention.workflows_days') #>> '{}')::integer
    from bitrix_sync.workflow_instances w
   where w.state in ('succeeded', 'failed', 'cancelled')
     and w.finished_at < (select bitrix_sync._retention_cutoff('retention.workflows_days'))
     and not exists (select 1 from bitrix_sync.crm_commands c
                      where c.workflow_id = w.id
                        and (c.completed_at is null
                             or c.completed_at >= (select bitrix_sync._retention_cutoff('retention.commands_days'))
                             or exists (select 1 from bitrix_sync.technical_dead_letters d
                                         where d.resolved_at is null and d.command_id = c.id)))
     and exists (select 1 from bitrix_sync.workflow_instances n
                      where n.user_id = w.user_id and n.created_at > w.created_at)
     and not exists (select 1 from bitrix_sync.rebind_requests r where r.workflow_id = w.id)
     and not exists (select 1 from bitrix_sync.entity_external_mapping m where m.workflow_id = w.id)
     and not exists (select 1 from bitrix_sync.technical_dead_letters d
                      where d.resolved_at is null and d.workflow_id = w.id)
  union all
  select 'queue', count(*), min(q.completed_at),
         (bitrix_sync._active_setting('retention.queue_days') #>> '{}')::integer
    from han_app.sync_queue q
   where q.status in ('processed', 'cancelled', 'dead_letter')
     and q.completed_at < (select bitrix_sync._retention_cutoff('retention.queue_days'))
     and not exists (select 1 from bitrix_sync.technical_dead_letters d
                      where d.resolved_at is null and d.source = 'sync_queue' and d.source_id = q.id::text)
     and q.id not in (select w.source_task_id from bitrix_sync.workflow_instances w
                       where w.state not in ('succeeded', 'failed', 'cancelled') and w.source_task_id is not null)
$$;

--
-- Name: FUNCTION retention_preview(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.retention_preview() IS 'Admin: what the next retention run would delete, per table (webhooks, commands, workflows, queue): how many rows, the oldest finish time among them and the retention.*_days in force. Reads only; counts the history, so run it by hand, not from a scrape.';

--
-- Name: retention_step(text, timestamp with time zone); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.retention_step(p_table text, p_run_started_at timestamp with time zone) RETURNS TABLE(deleted integer, more boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_count integer;
begin
  if p_table = 'workflows' then
    return query select s.deleted, s.more from bitrix_sync._retention_sweep_workflows(p_run_started_at) s;
    return;
  end if;
  v_count := bitrix_sync.delete_retention_batch(p_table);
  return query select v_count, v_count > 0;
end $$;

--
-- Name: FUNCTION retention_step(p_table text, p_run_started_at timestamp with time zone); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.retention_step(p_table text, p_run_started_at timestamp with time zone) IS 'One retention step of one table (webhooks, commands, workflows, queue): the rows deleted and whether to call again. webhooks, commands and queue: one delete_retention_batch(), again while it deletes; workflows: one window of the sweep, again until a round that started at or after p_run_started_at (when the caller''s run began; pass the same value on every call of a run) has gone past the newest finished workflow. What the retention task calls; BS004 for another table.';

--
-- Name: retry_command(bigint, uuid, text, interval, boolean, integer, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.retry_command(p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval, p_spends_attempt boolean DEFAULT true, p_http_status integer DEFAULT NULL::integer, p_bitrix_error text DEFAULT NULL::text) RETURNS bitrix_sync.crm_commands
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.crm_commands;
  v_deadline timestamptz;
begin
  perform bitrix_sync._check_code(p_error_code);
  perform bitrix_sync._check_bitrix_error(p_bitrix_error);
  select * into v_row from bitrix_sync.crm_commands
   where id = p_id and (status in ('leased', 'in_flight')) is true and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  -- The horizon from the first attempt (§9): past it the command goes to the technical DLQ.
  v_deadline := bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_row));
  if now() + greatest(p_delay, interval '0') > v_deadline then
    return bitrix_sync._dead_letter_command_row(v_row, 'retry_horizon_exceeded', p_http_status, p_bitrix_error);
  end if;
  -- A command whose target may have changed meanwhile (the clear of a rebind's previous Contact,
  -- §5.4 step 4) is never resent as it is: it ends here, without a DLQ row, and its workflow waits
  -- (schedule_workflow_retry, the workflow's horizon) and reads the Contact again before a new one.
  if v_row.workflow_id is not null and (v_row.params ->> 'reread_before_retry') = 'true' then
    update bitrix_sync.crm_commands c
       set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code,
           last_http_status = p_http_status, last_bitrix_error = left(p_bitrix_error, 64),
           deadline_at = v_deadline,
           response = jsonb_build_object('retry_by_workflow', true,
                                         'retry_at', now() + greatest(p_delay, interval '0')),
           limit_hits = c.limit_hits + case when p_spends_attempt then 0 else 1 end,
           lease_token = null, locked_by = null, locked_until = null
     where c.id = p_id
    returning * into v_row;
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
    return v_row;
  end if;
  update bitrix_sync.crm_commands c
     set status = 'retry_wait', next_attempt_at = now() + greatest(p_delay, interval '0'),
         last_error_code = p_error_code, last_http_status = p_http_status,
         last_bitrix_error = left(p_bitrix_error, 64), deadline_at = v_deadline,
         -- QUERY_LIMIT_EXCEEDED is refused before execution: it is not an attempt (§9).
         limit_hits = c.limit_hits + case when p_spends_attempt then 0 else 1 end,
         lease_token = null, locked_by = null, locked_until = null
   where c.id = p_id
  returning * into v_row;
  return v_row;
end $$;

--
-- Name: FUNCTION retry_command(p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval, p_spends_attempt boolean, p_http_status integer, p_bitrix_error text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.retry_command(p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval, p_spends_attempt boolean, p_http_status integer, p_bitrix_error text) IS 'leased|in_flight -> retry_wait after p_delay. p_spends_attempt = false for rate-limit refusals (counted in limit_hits). When the retry would fall past the horizon (first send + retry.horizon_sec) -> dead_letter with retry_horizon_exceeded and a technical DLQ row instead. A workflow command with params.reread_before_retry is handed back instead: dead_letter with the error code, no DLQ row, response {retry_by_workflow, retry_at}, and its workflow wakes. The returned row says which. Refuses stale tokens (BS001).';

--
-- Name: retry_sync_task(uuid, uuid, text, interval); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.retry_sync_task(p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval) RETURNS han_app.sync_queue
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row han_app.sync_queue;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  perform bitrix_sync._check_code(p_error_code);
  select * into v_row from han_app.sync_queue
   where id = p_id and status = 'leased' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  if now() + greatest(p_delay, interval '0') > bitrix_sync._retry_deadline(v_row.created_at) then
    return bitrix_sync._dead_letter_sync_task_row(v_row, 'retry_horizon_exceeded');
  end if;
  update han_app.sync_queue
     set status = 'retry_wait', next_attempt_at = now() + greatest(p_delay, interval '0'),
         last_error_code = p_error_code, last_error_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_id
  returning * into v_row;
  return v_row;
end $$;

--
-- Name: FUNCTION retry_sync_task(p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.retry_sync_task(p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval) IS 'leased -> retry_wait after p_delay with a safe error code; when the retry would fall past the horizon (created_at + retry.horizon_sec) -> dead_letter with retry_horizon_exceeded and a technical DLQ row instead. The returned status says which. Refuses a stale token (BS001).';

--
-- Name: retry_webhook(bigint, uuid, text, interval); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.retry_webhook(p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval) RETURNS bitrix_sync.webhook_inbox
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.webhook_inbox;
begin
  perform bitrix_sync._check_code(p_error_code);
  select * into v_row from bitrix_sync.webhook_inbox
   where id = p_id and status = 'processing' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('webhook', p_id::text);
  end if;
  if now() + greatest(p_delay, interval '0') > bitrix_sync._retry_deadline(v_row.received_at) then
    return bitrix_sync._dead_letter_webhook_row(v_row, 'retry_horizon_exceeded');
  end if;
  update bitrix_sync.webhook_inbox
     set status = 'retry_wait', next_attempt_at = now() + greatest(p_delay, interval '0'),
         last_error_code = p_error_code, status_at = now(),
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id
  returning * into v_row;
  return v_row;
end $$;

--
-- Name: FUNCTION retry_webhook(p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.retry_webhook(p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval) IS 'processing -> retry_wait; coalesced events stay attached and finish with it. When the retry would fall past the horizon (received_at + retry.horizon_sec) -> dead_letter with retry_horizon_exceeded and a technical DLQ row instead; the returned status says which. Refuses stale tokens (BS001).';

--
-- Name: rollback_settings(integer, text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.rollback_settings(p_to_version integer, p_actor text, p_note text DEFAULT NULL::text) RETURNS bitrix_sync.settings_versions
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_old bitrix_sync.settings_versions;
  v_version integer;
  v_errors jsonb;
begin
  select * into v_old from bitrix_sync.settings_versions where version = p_to_version;
  if not found or v_old.status not in ('superseded', 'active') then
    raise exception 'settings version % was never active; rollback returns to a version that was', p_to_version
      using errcode = 'BS008', hint = 'Pick a superseded version from bitrix_sync.settings_versions.';
  end if;
  insert into bitrix_sync.settings_versions (settings_values, based_on, rollback_of, note, created_by)
  values (v_old.settings_values,
          (select version from bitrix_sync.settings_versions where status = 'active'),
          p_to_version, coalesce(p_note, format('rollback to version %s', p_to_version)), coalesce(btrim(p_actor), ''))
  returning version into v_version;
  v_errors := bitrix_sync.validate_settings_version(v_version);
  if jsonb_array_length(v_errors) > 0 then
    raise exception 'version % does not validate against today''s catalogue: %', p_to_version, v_errors
      using errcode = 'BS008', hint = 'Propose corrected values instead of a rollback.';
  end if;
  return bitrix_sync.activate_settings_version(v_version, p_actor);
end $$;

--
-- Name: FUNCTION rollback_settings(p_to_version integer, p_actor text, p_note text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.rollback_settings(p_to_version integer, p_actor text, p_note text) IS 'Activates a new version carrying the values of an earlier active version (rollback_of records which); history stays linear.';

--
-- Name: save_workflow_step(uuid, uuid, jsonb, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.save_workflow_step(p_id uuid, p_lease_token uuid, p_step_data jsonb, p_current_step text DEFAULT NULL::text) RETURNS bitrix_sync.workflow_instances
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_row bitrix_sync.workflow_instances;
begin
  if p_step_data is null or jsonb_typeof(p_step_data) <> 'object' then
    raise exception 'step data must be a JSON object'
      using errcode = 'BS004', hint = 'Pass the workflow''s safe step state (IDs, flags, counts), e.g. ''{"pass": 1}''.';
  end if;
  if p_current_step is not null and p_current_step !~ '^[a-z][a-z0-9_]{0,63}$' then
    raise exception 'a step name is a snake_case identifier of at most 64 characters'
      using errcode = 'BS004', hint = 'Pass the planner''s step name, e.g. find_by_phone.';
  end if;
  v_row := bitrix_sync._held_workflow(p_id, p_lease_token);
  update bitrix_sync.workflow_instances
     set step_data = p_step_data, current_step = coalesce(p_current_step, current_step)
   where id = p_id
  returning * into v_row;
  return v_row;
end $_$;

--
-- Name: FUNCTION save_workflow_step(p_id uuid, p_lease_token uuid, p_step_data jsonb, p_current_step text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.save_workflow_step(p_id uuid, p_lease_token uuid, p_step_data jsonb, p_current_step text) IS 'Persists the step state (and, when given, the step name) of a running workflow without a state change. Fenced by the workflow''s lease token (BS001).';

--
-- Name: schedule_workflow_retry(uuid, uuid, text, interval); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.schedule_workflow_retry(p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval) RETURNS bitrix_sync.workflow_instances
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.workflow_instances;
  v_deadline timestamptz;
begin
  perform bitrix_sync._check_code(p_error_code);
  v_row := bitrix_sync._held_workflow(p_id, p_lease_token);
  v_deadline := bitrix_sync._retry_deadline(bitrix_sync._workflow_first_attempt(v_row));
  if now() + greatest(p_delay, interval '0') > v_deadline then
    v_row := bitrix_sync.fire_workflow_event(p_id, p_lease_token, 'fail',
               jsonb_build_object('last_error_code', 'retry_horizon_exceeded', 'outcome', 'failed'));
    perform bitrix_sync._dead_letter('workflow', v_row.id::text, v_row.workflow_type, 'retry_horizon_exceeded',
      v_row.attempt_count, bitrix_sync._workflow_first_attempt(v_row), v_row.id, null, v_row.correlation_id,
      null, null);
  else
    v_row := bitrix_sync.fire_workflow_event(p_id, p_lease_token, 'schedule_retry',
               jsonb_build_object('last_error_code', p_error_code,
                                  'next_attempt_at', now() + greatest(p_delay, interval '0')));
  end if;
  update bitrix_sync.workflow_instances set deadline_at = v_deadline where id = p_id returning * into v_row;
  return v_row;
end $$;

--
-- Name: FUNCTION schedule_workflow_retry(p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.schedule_workflow_retry(p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval) IS 'A step failed: running -> waiting_retry (schedule_retry) due after p_delay; when that falls past the horizon (created_at, or the last requeue, + retry.horizon_sec) -> failed with retry_horizon_exceeded and a technical DLQ row instead. The returned state says which. Fenced by the lease token (BS001).';

--
-- Name: send_commands(bigint[], uuid[], uuid, interval); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.send_commands(p_ids bigint[], p_lease_tokens uuid[], p_batch_id uuid, p_reply_within interval DEFAULT NULL::interval) RETURNS SETOF bigint
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  -- A first send's retry horizon starts now: one reading of the setting for the whole batch, where
  -- the column's formula read it once per row. A resend keeps the horizon of its first send.
  v_first_deadline timestamptz := bitrix_sync._retry_deadline(now());
begin
  if coalesce(array_length(p_ids, 1), 0) <> coalesce(array_length(p_lease_tokens, 1), 0) then
    raise exception 'send_commands needs one lease token per command id'
      using errcode = 'BS004', hint = 'Pass the ids and tokens returned by claim_commands(), in the same order.';
  end if;
  if p_reply_within is not null and p_reply_within <= interval '0' then
    raise exception 'send_commands needs a positive reply deadline or none'
      using errcode = 'BS004', hint = 'Pass the send window plus the HTTP timeout (BITRIX_SYNC_HTTP_TIMEOUT_SEC), or null.';
  end if;
  return query
  update bitrix_sync.crm_commands c
     set status = 'in_flight', sent_at = now(), batch_id = p_batch_id, attempt_count = c.attempt_count + 1,
         first_sent_at = coalesce(c.first_sent_at, now()),
         deadline_at = case when c.first_sent_at is null then v_first_deadline
                            else bitrix_sync._retry_deadline(c.first_sent_at) end,
         reply_deadline_at = now() + p_reply_within, updated_at = now()
    from unnest(p_ids, p_lease_tokens) as t(id, token)
   where c.id = t.id and c.status is not distinct from 'leased' and c.lease_token = t.token
  returning c.id;
end $$;

--
-- Name: FUNCTION send_commands(p_ids bigint[], p_lease_tokens uuid[], p_batch_id uuid, p_reply_within interval); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.send_commands(p_ids bigint[], p_lease_tokens uuid[], p_batch_id uuid, p_reply_within interval) IS 'leased -> in_flight for the commands still held under their tokens; returns the ids marked. Commit this before the HTTP batch leaves: it is the durable send-started marker. The first send stamps first_sent_at, where the retry horizon starts. p_reply_within (the sender''s send window plus its HTTP timeout) stamps reply_deadline_at, the moment by which the request is out and given up at the latest (null: unknown).';

--
-- Name: start_or_join_workflow(uuid, text, uuid, text, text); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.start_or_join_workflow(p_user_id uuid, p_intent_type text, p_source_task_id uuid, p_content_hash text, p_trace_context text DEFAULT NULL::text) RETURNS TABLE(workflow_id uuid, action text, previous_trace_context text)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.workflow_instances;
  v_trace text := bitrix_sync._trace_context(p_trace_context);
begin
  for v_try in 1..3 loop
    select * into v_row from bitrix_sync.workflow_instances w
     where w.user_id = p_user_id and w.state not in ('succeeded', 'failed', 'cancelled')
     for update;
    if found then
      -- A rebind is never joined: converging to the App's intent would drop it (issue 11). The
      -- intent is held on its row, the newest one winning as in a join, and starts as the next
      -- workflow when the rebind ends (tg_workflow_instances__start_held_intent), so the App change
      -- is carried out against the mapping the rebind left.
      if v_row.workflow_type = 'contact.rebind' then
        if v_row.held_intent_type is not distinct from p_intent_type
           and v_row.held_content_hash is not distinct from p_content_hash then
          return query select v_row.id, 'unchanged'::text, v_row.trace_context;
          return;
        end if;
        update bitrix_sync.workflow_instances w
           set held_intent_type = p_intent_type, held_source_task_id = p_source_task_id,
               held_content_hash = p_content_hash, held_at = now()
         where w.id = v_row.id;
        return query select v_row.id, 'held'::text, v_row.trace_context;
        return;
      end if;
      -- Same intent with the same desired content: nothing new to converge to.
      if v_row.intent_type = p_intent_type and v_row.content_hash is not distinct from p_content_hash then
        return query select v_row.id, 'unchanged'::text, v_row.trace_context;
        return;
      end if;
      update bitrix_sync.workflow_instances w
         set revision = w.revision + 1, intent_type = p_intent_type, source_task_id = p_source_task_id,
             content_hash = p_content_hash,
             -- The workflow now converges to this intent: its remaining steps belong to its trace.
             trace_context = coalesce(v_trace, w.trace_context),
             -- A workflow parked in waiting_manual may now be fixable by the newer intent
             -- (manual_resume); a waiting_retry one is due at once.
             state = case when w.state = 'waiting_manual' then 'running' else w.state end,
             next_attempt_at = least(w.next_attempt_at, now())
       where w.id = v_row.id;
      return query select v_row.id, 'joined'::text, v_row.trace_context;
      return;
    end if;
    -- The user's last workflow already converged to exactly this content: a semantically equal intent.
    if p_content_hash is not null and exists (
         select 1 from bitrix_sync.workflow_instances w
          where w.id = (select l.id from bitrix_sync.workflow_instances l
                         where l.user_id = p_user_id order by l.created_at desc limit 1)
            and w.state = 'succeeded' and w.intent_type = p_intent_type
            and w.content_hash = p_content_hash) then
      return query select null::uuid, 'unchanged'::text, null::text;
      return;
    end if;
    begin
      insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, source_task_id, content_hash,
                                                  trace_context)
      values (p_intent_type, p_intent_type, p_user_id, p_source_task_id, p_content_hash, v_trace)
      returning * into v_row;
    exception when unique_violation then
      -- Two intents of one user claimed at once: the other call started the workflow first and has
      -- committed by now (the index waited for it), so look again and join it.
      if v_try = 3 then
        raise;
      end if;
      continue;
    end;
    perform pg_notify('bitrix_sync_workflows', '');
    return query select v_row.id, 'started'::text, null::text;
    return;
  end loop;
end $$;

--
-- Name: FUNCTION start_or_join_workflow(p_user_id uuid, p_intent_type text, p_source_task_id uuid, p_content_hash text, p_trace_context text); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.start_or_join_workflow(p_user_id uuid, p_intent_type text, p_source_task_id uuid, p_content_hash text, p_trace_context text) IS 'Starts a workflow for the user, or joins the active one: a different intent or content bumps its revision (the workflow converges to it after its current step) and the workflow takes the intent''s trace context (W3C traceparent; malformed ones are ignored). Equal intent and content hash, on the active workflow or on the user''s last succeeded one, changes nothing (action unchanged). An active contact.rebind is not joined: the intent is held on it (action held) and starts when the rebind ends. previous_trace_context is the joined, held or unchanged workflow''s context before the call, for a span link.';

--
-- Name: start_rebind_request(uuid, uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.start_rebind_request(p_workflow_id uuid, p_lease_token uuid) RETURNS bitrix_sync.rebind_requests
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.rebind_requests;
begin
  perform bitrix_sync._held_workflow(p_workflow_id, p_lease_token);
  v_row := bitrix_sync._rebind_request_of(p_workflow_id);
  if v_row.status = 'in_progress' then
    -- The workflow began this pass again (a Contact vanished mid-way): already started.
    return v_row;
  end if;
  if v_row.status <> 'requested' then
    raise exception 'rebind request % is %, it cannot start', v_row.id, v_row.status
      using errcode = 'BS002', hint = 'A finished request stays finished; ask again with request_bitrix_contact_rebind().';
  end if;
  update bitrix_sync.rebind_requests set status = 'in_progress' where id = v_row.id returning * into v_row;
  return v_row;
end $$;

--
-- Name: FUNCTION start_rebind_request(p_workflow_id uuid, p_lease_token uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.start_rebind_request(p_workflow_id uuid, p_lease_token uuid) IS 'requested -> in_progress when the contact.rebind workflow starts reading the Contacts (a request already in progress is returned as it is). Fenced by the workflow''s lease token (BS001). Security definer: the runtime role only reads rebind requests.';

--
-- Name: step_context(uuid); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.step_context(p_id uuid) RETURNS bitrix_sync.step_context_t
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_out bitrix_sync.step_context_t;
  v_last bitrix_sync.crm_commands;
begin
  -- The workflow's row is held from here to the step's commit: a join (start_or_join_workflow) that
  -- comes now waits for the step. Its revision, intent and trace context are read under that lock.
  select w.revision, w.intent_type, w.trace_context
    into v_out.revision, v_out.intent_type, v_out.trace_context
    from bitrix_sync.workflow_instances w where w.id = p_id for update;
  -- A statement of its own, so a snapshot taken after the lock was granted: whatever the holder it
  -- waited for committed is seen. The last command is the most recently changed one (after a
  -- recovery search, the re-sent create is newer than the search).
  select c.* into v_last from bitrix_sync.crm_commands c
   where c.workflow_id = p_id and c.alert_id is null
   order by c.updated_at desc, c.id desc limit 1;
  v_out.last_command := v_last;
  v_out.unresolved_write := exists (select 1 from bitrix_sync.crm_commands u
                                     where u.workflow_id = p_id and u.status in ('uncertain', 'reconcile'));
  return v_out;
end $$;

--
-- Name: FUNCTION step_context(p_id uuid); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.step_context(p_id uuid) IS 'What a workflow step starts from, in one call inside the step''s transaction: locks the workflow row (FOR UPDATE) and returns its revision, intent and trace context, then, read after the lock, its last command (null fields when none) and whether one of its writes is unresolved (uncertain or reconcile). One row; revision is null when the workflow does not exist.';

--
-- Name: sync_paused(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.sync_paused() RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select exists (select 1 from bitrix_sync.sync_pauses p where p.resumed_at is null)
$$;

--
-- Name: FUNCTION sync_paused(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.sync_paused() IS 'The pause gate (§17): true while a pause is open (pause_sync() until resume_sync()). Every claim function returns nothing while it is true, as before the cutover; readiness reports paused.';

--
-- Name: take_sync_tasks(uuid[], uuid[], uuid[], text[], text[], text[]); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.take_sync_tasks(p_ids uuid[], p_lease_tokens uuid[], p_user_ids uuid[], p_intent_types text[], p_content_hashes text[], p_trace_contexts text[]) RETURNS TABLE(task_id uuid, workflow_id uuid, action text, previous_trace_context text)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET enable_seqscan TO 'off'
    AS $$
declare
  v_n integer := coalesce(cardinality(p_ids), 0);
  v_workflow uuid[];
  v_action text[];
  v_previous text[];
  v_set integer[];
  v_same integer[];
  v_run integer[] := '{}'::integer[];
  v_single integer[];
  v_started integer[];
  v_started_ids uuid[];
  v_i integer;
  v_j integer;
  v_out record;
  v_done integer;
begin
  if coalesce(cardinality(p_lease_tokens), 0) <> v_n or coalesce(cardinality(p_user_ids), 0) <> v_n
     or coalesce(cardinality(p_intent_types), 0) <> v_n or coalesce(cardinality(p_content_hashes), 0) <> v_n
     or coalesce(cardinality(p_trace_contexts), 0) <> v_n or v_n > 1000 then
    raise exception 'take_sync_tasks needs six arrays of one length, at most 1000'
      using errcode = 'BS004',
            hint = 'Pass intent ID, lease token, user ID, intent type, content hash and trace context per claimed intent, in claim order.';
  end if;
  if v_n = 0 then
    return;
  end if;
  v_workflow := array_fill(null::uuid, array[v_n]);
  v_action := array_fill(null::text, array[v_n]);
  v_previous := array_fill(null::text, array[v_n]);

  -- The set path's intents: those whose user the batch names once and who has no active workflow.
  -- One equal to the user's last workflow, succeeded (same intent, same non-null content hash), is
  -- unchanged, as start_or_join_workflow() says, and takes no lock.
  with batch as (
    select min(u.ord)::integer as ord
      from unnest(p_user_ids) with ordinality as u(user_id, ord)
     group by u.user_id
    having count(*) = 1
  )
  select coalesce(array_agg(b.ord order by b.ord), '{}'),
         coalesce(array_agg(b.ord order by b.ord) filter (
           where p_content_hashes[b.ord] is not null and l.state = 'succeeded'
             and l.intent_type = p_intent_types[b.ord] and l.content_hash = p_content_hashes[b.ord]), '{}')
    into v_set, v_same
    from batch b
    left join lateral (
      select w.state, w.intent_type, w.content_hash from bitrix_sync.workflow_instances w
       where w.user_id = p_user_ids[b.ord] order by w.created_at desc limit 1
    ) l on true
    -- A probe of the one-active-per-user index per user, as a LATERAL with LIMIT so that it can only
    -- be one. Written as NOT EXISTS, the planner may join it unparameterised: every user then read
    -- the whole index of active workflows (bench:scale at 10 M users with 2 048 of them active:
    -- 102 658 buffers and 42 ms a batch of 50, against 151 buffers and 1.3 ms so), and a backlog of
    -- active workflows made every intake slower.
    left join lateral (
      select true as active from bitrix_sync.workflow_instances a
       where a.user_id = p_user_ids[b.ord] and a.state not in ('succeeded', 'failed', 'cancelled')
       limit 1
    ) a on true
   where a.active is null;
  foreach v_i in array v_same loop
    v_action[v_i] := 'unchanged';
  end loop;

  -- In claim order, which is by user (the caller sorts the batch): each run of set-path intents is
  -- started by one INSERT, then the next intent goes through start_or_join_workflow(). The users'
  -- workflows are so locked in the batch's order, as one call per intent locked them, and two
  -- intakes whose batches share users never wait on each other in a cycle. A user whose workflow
  -- another intake inserted meanwhile conflicts with the one-active-per-user index (the INSERT waits
  -- for that transaction, as start_or_join_workflow()'s does) and is left to the single call, which
  -- joins it.
  for v_i in 1 .. v_n + 1 loop
    continue when v_i <= v_n and v_action[v_i] is not null;
    if v_i <= v_n and v_i = any (v_set) then
      v_run := v_run || v_i;
      continue;
    end if;
    v_single := '{}'::integer[];
    if cardinality(v_run) > 0 then
      with started as (
        insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, source_task_id,
                                                    content_hash, trace_context)
        select p_intent_types[r.ord], p_intent_types[r.ord], p_user_ids[r.ord], p_ids[r.ord],
               p_content_hashes[r.ord], bitrix_sync._trace_context(p_trace_contexts[r.ord])
          from unnest(v_run) as r(ord)
         order by r.ord
        on conflict do nothing
        returning id, user_id
      )
      select coalesce(array_agg(r.ord order by r.ord), '{}'), coalesce(array_agg(s.id order by r.ord), '{}')
        into v_started, v_started_ids
        from unnest(v_run) as r(ord) join started s on s.user_id = p_user_ids[r.ord];
      for v_k in 1 .. coalesce(cardinality(v_started), 0) loop
        v_workflow[v_started[v_k]] := v_started_ids[v_k];
        v_action[v_started[v_k]] := 'started';
      end loop;
      if cardinality(v_started) > 0 then
        perform pg_notify('bitrix_sync_workflows', '');
      end if;
      -- Those another intake started meanwhile go through the single call, in their place.
      v_single := array(select r.ord from unnest(v_run) as r(ord) where v_action[r.ord] is null order by r.ord);
      v_run := '{}'::integer[];
    end if;
    if v_i <= v_n then
      v_single := v_single || v_i;
    end if;
    foreach v_j in array v_single loop
      select * into v_out
        from bitrix_sync.start_or_join_workflow(p_user_ids[v_j], p_intent_types[v_j], p_ids[v_j],
                                                p_content_hashes[v_j], p_trace_contexts[v_j]);
      v_workflow[v_j] := v_out.workflow_id;
      v_action[v_j] := v_out.action;
      v_previous[v_j] := v_out.previous_trace_context;
    end loop;
  end loop;

  -- Then every intent leased -> processed in one statement, as complete_sync_task() does one (its
  -- check of the App's tables once for the batch): the rows returned are sent only when the call
  -- commits, and an intent no longer held under its token (a newer intent took it back, or its
  -- lease was reclaimed) refuses the whole call (BS001).
  perform bitrix_sync._check_queue_tables();
  update han_app.sync_queue q
     set status = 'processed', completed_at = now(), locked_by = null, locked_until = null,
         lease_token = null, updated_at = now()
    from unnest(p_ids, p_lease_tokens) as t(id, token)
   where q.id = t.id and q.status = 'leased' and q.lease_token = t.token;
  get diagnostics v_done = row_count;
  if v_done <> v_n then
    -- Name the first intent not completed here (a duplicate in the arrays: the first one).
    perform bitrix_sync._refuse_stale('sync task', coalesce(
      (select u.id from unnest(p_ids) with ordinality as u(id, ord)
        where not exists (select 1 from han_app.sync_queue q where q.id = u.id and q.status = 'processed'
                                                               and q.completed_at = now())
        order by u.ord limit 1),
      p_ids[1])::text);
  end if;
  return query
    select p_ids[o.ord], v_workflow[o.ord], v_action[o.ord], v_previous[o.ord]
      from generate_series(1, v_n) as o(ord) order by o.ord;
end $$;

--
-- Name: FUNCTION take_sync_tasks(p_ids uuid[], p_lease_tokens uuid[], p_user_ids uuid[], p_intent_types text[], p_content_hashes text[], p_trace_contexts text[]); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.take_sync_tasks(p_ids uuid[], p_lease_tokens uuid[], p_user_ids uuid[], p_intent_types text[], p_content_hashes text[], p_trace_contexts text[]) IS 'Intake of a claimed batch in one call, with the outcome of start_or_join_workflow() for each intent in the order given and then complete_sync_task() for all, as the caller would one intent per transaction. An intent whose user the batch names once and who has no active workflow is found unchanged against the user''s last succeeded workflow, or started by one INSERT per run of such intents in the order given; the others, and any whose user another intake started meanwhile, go through start_or_join_workflow() in their place, so workflows are locked in the order given. One row per intent (its workflow, the action, the previous trace context), in the order given. A stale lease refuses the whole call (BS001); arrays of different lengths or over 1000 elements BS004.';

--
-- Name: tg__forbid_delete(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.tg__forbid_delete() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  raise exception 'rows of %.% are history and are never deleted', tg_table_schema, tg_table_name
    using errcode = 'BS003',
          hint = 'Close or supersede the row through its bitrix_sync function instead.';
end $$;

--
-- Name: FUNCTION tg__forbid_delete(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.tg__forbid_delete() IS 'BEFORE DELETE guard for history tables (mapping, settings versions, rebind requests, the cutover). SQLSTATE BS003.';

--
-- Name: tg__guard_transition(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.tg__guard_transition() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
-- TG_ARGV[0]: machine name in state_edges; TG_ARGV[1]: the state column.
declare
  v_from text;
  v_to text;
begin
  -- The status column by name (issue 14): turning both whole rows into JSON on every transition cost
  -- more than the rest of the guard. Another column name takes the generic way.
  if tg_argv[1] = 'status' then
    v_from := old.status;
    v_to := new.status;
  else
    v_from := to_jsonb(old) ->> tg_argv[1];
    v_to := to_jsonb(new) ->> tg_argv[1];
  end if;
  if v_from is distinct from v_to
     and not exists (select 1 from bitrix_sync.state_edges e
                      where e.machine = tg_argv[0] and e.from_state = v_from and e.to_state = v_to) then
    raise exception 'illegal % transition % -> %', tg_argv[0], v_from, v_to
      using errcode = 'BS002',
            detail = format('table %I.%I', tg_table_schema, tg_table_name),
            hint = 'Move rows only through the bitrix_sync function for the event; docs/state-machines.md lists the legal edges.';
  end if;
  return new;
end $$;

--
-- Name: FUNCTION tg__guard_transition(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.tg__guard_transition() IS 'BEFORE UPDATE guard: refuses a change of the state column (TG_ARGV[1], read directly when it is status) that is not an edge of machine TG_ARGV[0] in bitrix_sync.state_edges. SQLSTATE BS002.';

--
-- Name: tg__refuse_check(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.tg__refuse_check() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
-- TG_ARGV[0]: the check's name; TG_ARGV[1]: what it requires, in words. The WHEN clause decides.
begin
  raise exception 'new row for relation "%" violates check constraint "%"', tg_table_name, tg_argv[0]
    using errcode = 'check_violation', constraint = tg_argv[0], schema = tg_table_schema, table = tg_table_name,
          detail = tg_argv[1],
          hint = 'Write rows through their bitrix_sync function. The check is the trigger _980_check_* on the table (sql/guards/checks.sql).';
end $$;

--
-- Name: FUNCTION tg__refuse_check(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.tg__refuse_check() IS 'BEFORE INSERT OR UPDATE OF <columns> guard, fired by its WHEN clause when a row breaks the check named TG_ARGV[0] (a CHECK kept as a trigger so that UPDATEs of other columns do not read it). SQLSTATE 23514 with that constraint name; the row''s values are not in the message.';

--
-- Name: tg__refuse_immutable_change(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.tg__refuse_immutable_change() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
-- TG_ARGV: the columns that never change.
declare
  v_old jsonb := to_jsonb(old);
  v_new jsonb := to_jsonb(new);
  v_changed text;
begin
  select string_agg(c, ', ' order by c) into v_changed
    from unnest(tg_argv) c
   where v_old -> c is distinct from v_new -> c;
  if v_changed is not null then
    raise exception '%.% never changes %', tg_table_schema, tg_table_name, v_changed
      using errcode = 'BS031',
            hint = 'These columns identify the row or record its audit. Open a new row instead: a new mapping (close_mapping, open_mapping), a new rebind request, a new settings version.';
  end if;
  return new;
end $$;

--
-- Name: FUNCTION tg__refuse_immutable_change(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.tg__refuse_immutable_change() IS 'BEFORE UPDATE guard: refuses a change of any column named in TG_ARGV (identity and audit columns). SQLSTATE BS031.';

--
-- Name: tg__refuse_insert_state(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.tg__refuse_insert_state() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
-- TG_ARGV[0]: the initial state in words. The trigger's WHEN clause decides; this only reports.
begin
  raise exception 'a new row of %.% must start %', tg_table_schema, tg_table_name, tg_argv[0]
    using errcode = 'BS030',
          hint = 'Create rows through their bitrix_sync function; they move on only along bitrix_sync.state_edges (docs/state-machines.md).';
end $$;

--
-- Name: FUNCTION tg__refuse_insert_state(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.tg__refuse_insert_state() IS 'BEFORE INSERT guard, fired by its WHEN clause when a row is inserted in a state other than its machine''s initial one (or already leased or finished). SQLSTATE BS030.';

--
-- Name: tg__set_updated_at(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.tg__set_updated_at() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  new.updated_at := now();
  return new;
end $$;

--
-- Name: FUNCTION tg__set_updated_at(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.tg__set_updated_at() IS 'BEFORE UPDATE trigger: stamps updated_at with the transaction time. Its triggers fire only when the statement left updated_at as it was.';

--
-- Name: tg_business_alerts__count_remote_missing(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.tg_business_alerts__count_remote_missing() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  values ('alert', new.alert_type, old.status, new.status);
  return null;
end $$;

--
-- Name: FUNCTION tg_business_alerts__count_remote_missing(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.tg_business_alerts__count_remote_missing() IS 'AFTER UPDATE OF status trigger: appends one alert whose smart-process item was found deleted (open -> remote_missing, §10.3) to metric_events for bitrix_sync_business_alerts_remote_missing_total.';

--
-- Name: tg_crm_commands__count_transition(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.tg_crm_commands__count_transition() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  select 'command', n.command_type, o.status, n.status
    from bitrix_sync_new_rows n join bitrix_sync_old_rows o on o.id = n.id
   where o.status is distinct from n.status;
  return null;
end $$;

--
-- Name: FUNCTION tg_crm_commands__count_transition(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.tg_crm_commands__count_transition() IS 'AFTER UPDATE statement trigger (transition tables bitrix_sync_old_rows, bitrix_sync_new_rows): appends one row per command transition of the statement (type, from, to) to metric_events for bitrix_sync_command_transitions_total, in one insert.';

--
-- Name: tg_entity_external_mapping__audit_mark(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.tg_entity_external_mapping__audit_mark() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if tg_op = 'INSERT' then
    if new.status = 'active' then
      insert into bitrix_sync.audit_marks (mapping_id, user_id, audited_at)
      values (new.id, new.entity_id, new.opened_at)
      on conflict (mapping_id) do nothing;
    end if;
  elsif new.status is distinct from 'active' then
    delete from bitrix_sync.audit_marks k where k.mapping_id = new.id;
  end if;
  return null;
end $$;

--
-- Name: FUNCTION tg_entity_external_mapping__audit_mark(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.tg_entity_external_mapping__audit_mark() IS 'Trigger (after insert, after update of status on entity_external_mapping): a link opened active gets its audit mark (audited_at = opened_at: never compared); a link that is no longer active loses it. Security definer: nobody else writes audit_marks.';

--
-- Name: tg_settings_versions__freeze(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.tg_settings_versions__freeze() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_old jsonb := to_jsonb(old);
  v_new jsonb := to_jsonb(new);
  v_allowed text[];
  v_changed text;
begin
  -- What each step of the settings machine may write; everything else is history once written.
  v_allowed := case
    when old.status = 'draft' and new.status = 'draft' then array['settings_values', 'note']
    when old.status = 'draft' then array['status', 'settings_values', 'validation_errors', 'validated_at',
                                         'validated_db_user']
    when old.status = 'validated' and new.status = 'active' then array['status', 'activated_by', 'activated_at',
                                                                       'activated_db_user']
    when old.status = 'active' and new.status = 'superseded' then array['status', 'superseded_at']
    -- Any other status change is judged by the guard trigger _100_guard_status.
    else array['status']
  end;
  select string_agg(k, ', ' order by k) into v_changed
    from jsonb_object_keys(v_new) k
   where k <> all (v_allowed) and v_old -> k is distinct from v_new -> k;
  if v_changed is not null then
    raise exception 'settings version % is %: % can no longer change', old.version, old.status, v_changed
      using errcode = 'BS031',
            hint = 'A version''s values and audit are history once it leaves draft. Propose a new version with propose_settings().';
  end if;
  return new;
end $$;

--
-- Name: FUNCTION tg_settings_versions__freeze(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.tg_settings_versions__freeze() IS 'BEFORE UPDATE guard on settings_versions: values and note change only while a version is a draft; validation, activation and supersession each write only their own audit columns (the declared actor and the login); created_by, created_db_user, based_on, rollback_of never change. SQLSTATE BS031.';

--
-- Name: tg_technical_dead_letters__count(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.tg_technical_dead_letters__count() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  values ('dead_letter', new.source, '', 'dead_letter');
  return null;
end $$;

--
-- Name: FUNCTION tg_technical_dead_letters__count(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.tg_technical_dead_letters__count() IS 'AFTER INSERT trigger: appends one new technical dead letter (by source) to metric_events for bitrix_sync_dead_letters_total.';

--
-- Name: tg_webhook_inbox__count_coalesced(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.tg_webhook_inbox__count_coalesced() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  values ('webhook', new.receiver, old.status, new.status);
  return null;
end $$;

--
-- Name: FUNCTION tg_webhook_inbox__count_coalesced(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.tg_webhook_inbox__count_coalesced() IS 'AFTER UPDATE OF status trigger: appends one event coalesced into another (claim_webhooks) to metric_events for bitrix_sync_webhook_coalesced_total.';

--
-- Name: tg_workflow_instances__close_rebind_request(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.tg_workflow_instances__close_rebind_request() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  perform bitrix_sync._close_rebind_request(new.id);
  return null;
end $$;

--
-- Name: FUNCTION tg_workflow_instances__close_rebind_request(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.tg_workflow_instances__close_rebind_request() IS 'AFTER UPDATE OF state trigger (security definer): a contact.rebind workflow that reaches a final state closes its open request, so no failing path can leave it in_progress (which would refuse every later rebind of the user).';

--
-- Name: tg_workflow_instances__count_transition(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.tg_workflow_instances__count_transition() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  values ('workflow', new.workflow_type, old.state, new.state);
  return null;
end $$;

--
-- Name: FUNCTION tg_workflow_instances__count_transition(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.tg_workflow_instances__count_transition() IS 'AFTER UPDATE OF state trigger: appends one workflow transition (type, from, to) to metric_events for bitrix_sync_workflow_transitions_total. Security definer: whoever moves the workflow, nobody needs rights on the table.';

--
-- Name: tg_workflow_instances__guard_state(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.tg_workflow_instances__guard_state() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  -- tg__guard_transition for the one machine whose column is "state" (TG_ARGV as there), reading it
  -- directly.
  if old.state is distinct from new.state
     and not exists (select 1 from bitrix_sync.state_edges e
                      where e.machine = tg_argv[0] and e.from_state = old.state and e.to_state = new.state) then
    raise exception 'illegal % transition % -> %', tg_argv[0], old.state, new.state
      using errcode = 'BS002',
            detail = format('table %I.%I', tg_table_schema, tg_table_name),
            hint = 'Move rows only through the bitrix_sync function for the event; docs/state-machines.md lists the legal edges.';
  end if;
  return new;
end $$;

--
-- Name: FUNCTION tg_workflow_instances__guard_state(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.tg_workflow_instances__guard_state() IS 'BEFORE UPDATE OF state guard of workflow_instances: refuses a change of state that is not an edge of machine TG_ARGV[0] (workflow) in bitrix_sync.state_edges. SQLSTATE BS002.';

--
-- Name: tg_workflow_instances__start_held_intent(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.tg_workflow_instances__start_held_intent() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  -- The rebind's row has just left the active states, so the one-active-per-user index admits the
  -- next workflow. A concurrent intake waiting on the row lock finds this one and joins it.
  insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, source_task_id, content_hash)
  values (new.held_intent_type, new.held_intent_type, new.user_id, new.held_source_task_id, new.held_content_hash);
  perform pg_notify('bitrix_sync_workflows', '');
  return null;
end $$;

--
-- Name: FUNCTION tg_workflow_instances__start_held_intent(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.tg_workflow_instances__start_held_intent() IS 'AFTER UPDATE OF state trigger: when a workflow holding an App intent (a contact.rebind) finishes, however it finishes, the held intent starts as the user''s next workflow.';

--
-- Name: validate_settings_version(integer); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.validate_settings_version(p_version integer) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_row bitrix_sync.settings_versions;
  v_values jsonb;
  v_errors jsonb;
begin
  select * into v_row from bitrix_sync.settings_versions where version = p_version for update;
  if not found then
    raise exception 'settings version % does not exist', p_version using errcode = 'BS005', hint = 'See bitrix_sync.settings_versions.';
  end if;
  if v_row.status <> 'draft' then
    raise exception 'settings version % is %, only drafts are validated', p_version, v_row.status
      using errcode = 'BS002', hint = 'Propose a new version with propose_settings().';
  end if;
  -- A draft written without propose_settings() is normalised here, in its last change as a draft.
  v_values := bitrix_sync._normalise_settings(v_row.settings_values);
  v_errors := bitrix_sync._settings_errors(v_values);
  update bitrix_sync.settings_versions
     set settings_values = v_values,
         status = case when jsonb_array_length(v_errors) = 0 then 'validated' else 'rejected' end,
         validation_errors = case when jsonb_array_length(v_errors) = 0 then null else v_errors end,
         validated_at = now(), validated_db_user = session_user
   where version = p_version;
  return v_errors;
end $$;

--
-- Name: FUNCTION validate_settings_version(p_version integer); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.validate_settings_version(p_version integer) IS 'draft -> validated, or -> rejected with the reasons (returned and stored); the values are normalised in the same change, and the login (session_user) is recorded in validated_db_user. A rejected version can never be activated.';

--
-- Name: watch_intake(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.watch_intake() RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  begin
    -- One sleeper per database is enough: NOTIFY wakes every listener. SHARE UPDATE EXCLUSIVE
    -- conflicts with another loop's and not with the App's ROW EXCLUSIVE.
    lock table bitrix_sync.lock_intake_watch in share update exclusive mode nowait;
    -- SHARE waits for the App transactions that recorded an intent without a NOTIFY (they hold ROW
    -- EXCLUSIVE) to end, so the caller's next look at the queue sees their intents. From here until
    -- the caller's transaction ends, every intent NOTIFYs. Tried without queueing, every 5 ms for
    -- up to 1 s: a request waiting in the lock's queue would make the App's NOWAIT fail, so a role
    -- holding ROW EXCLUSIVE on the table could make App commits NOTIFY for as long as it waits.
    for i in 1 .. 200 loop
      begin
        lock table bitrix_sync.lock_intake_watch in share mode nowait;
        return true;
      exception when lock_not_available then
        perform pg_sleep(0.005);
      end;
    end loop;
    -- A long App transaction: give up watching this time; the fallback poll covers it. Raised to
    -- the block around, which gives the sleeper's lock back too.
    raise exception using errcode = 'lock_not_available';
  exception when lock_not_available then
    return false;
  end;
end $$;

--
-- Name: FUNCTION watch_intake(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.watch_intake() IS 'Called by a sync loop whose intake found nothing, before it sleeps, inside a transaction of its own on a connection of its own (a LISTEN connection gets no notification inside a transaction): takes the intake watch (SHARE on bitrix_sync.lock_intake_watch) once the App transactions that recorded intents without a NOTIFY have ended; from then on han_app.enqueue_contact_sync() NOTIFYs, until the caller ends its transaction when it wakes. The caller must look at the queue once more before sleeping. Returns false (nothing held) when another loop watches or the watch stays taken for over 1 s (a long App transaction); the fallback poll covers that. Takes no transaction ID and keeps no snapshot.';

--
-- Name: worker_jobs(); Type: FUNCTION; Schema: bitrix_sync; Owner: -
--

CREATE FUNCTION bitrix_sync.worker_jobs() RETURNS TABLE(id bigint, task_identifier text, run_at timestamp with time zone, attempts smallint, max_attempts smallint, failed boolean, locked_by text, locked_at timestamp with time zone, key text)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  -- graphile-worker's public view; its payloads and error texts stay out.
  return query
  select j.id, j.task_identifier::text, j.run_at, j.attempts, j.max_attempts, j.last_error is not null,
         j.locked_by::text, j.locked_at, j.key::text
    from graphile_worker.jobs j
   where j.task_identifier in ('sync_loop', 'reconcile_contacts', 'reconcile_alerts', 'retention', 'audit_convergence')
   order by j.run_at;
end $$;

--
-- Name: FUNCTION worker_jobs(); Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON FUNCTION bitrix_sync.worker_jobs() IS 'Admin: the service''s graphile-worker jobs (sync_loop, reconciliations, retention, audit_convergence) with when they run, attempts, whether the last one failed, and who holds them; no payload, no error text.';

--
-- Name: _private_jobs; Type: TABLE; Schema: graphile_worker; Owner: -
--

CREATE TABLE graphile_worker._private_jobs (
    id bigint NOT NULL,
    job_queue_id integer,
    task_id integer NOT NULL,
    payload json DEFAULT '{}'::json NOT NULL,
    priority smallint DEFAULT 0 NOT NULL,
    run_at timestamp with time zone DEFAULT now() NOT NULL,
    attempts smallint DEFAULT 0 NOT NULL,
    max_attempts smallint DEFAULT 25 NOT NULL,
    last_error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    key text,
    locked_at timestamp with time zone,
    locked_by text,
    revision integer DEFAULT 0 NOT NULL,
    flags jsonb,
    is_available boolean GENERATED ALWAYS AS (((locked_at IS NULL) AND (attempts < max_attempts))) STORED NOT NULL,
    CONSTRAINT jobs_key_check CHECK (((length(key) > 0) AND (length(key) <= 512))),
    CONSTRAINT jobs_max_attempts_check CHECK ((max_attempts >= 1))
);

--
-- Name: add_job(text, json, text, timestamp with time zone, integer, text, integer, text[], text); Type: FUNCTION; Schema: graphile_worker; Owner: -
--

CREATE FUNCTION graphile_worker.add_job(identifier text, payload json DEFAULT NULL::json, queue_name text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT NULL::integer, job_key text DEFAULT NULL::text, priority integer DEFAULT NULL::integer, flags text[] DEFAULT NULL::text[], job_key_mode text DEFAULT 'replace'::text) RETURNS graphile_worker._private_jobs
    LANGUAGE plpgsql
    AS $$
declare
  v_job "graphile_worker"._private_jobs;
begin
  if (job_key is null or job_key_mode is null or job_key_mode in ('replace', 'preserve_run_at')) then
    select * into v_job
    from "graphile_worker".add_jobs(
      ARRAY[(
        identifier,
        payload,
        queue_name,
        run_at,
        max_attempts::smallint,
        job_key,
        priority::smallint,
        flags
      )::"graphile_worker".job_spec],
      (job_key_mode = 'preserve_run_at')
    )
    limit 1;
    return v_job;
  elsif job_key_mode = 'unsafe_dedupe' then
    -- Ensure all the tasks exist
    insert into "graphile_worker"._private_tasks as tasks (identifier)
    values (add_job.identifier)
    on conflict do nothing;
    -- Ensure all the queues exist
    if add_job.queue_name is not null then
      insert into "graphile_worker"._private_job_queues as job_queues (queue_name)
      values (add_job.queue_name)
      on conflict do nothing;
    end if;
    -- Insert job, but if one already exists then do nothing, even if the
    -- existing job has already started (and thus represents an out-of-date
    -- world state). This is dangerous because it means that whatever state
    -- change triggered this add_job may not be acted upon (since it happened
    -- after the existing job started executing, but no further job is being
    -- scheduled), but it is useful in very rare circumstances for
    -- de-duplication. If in doubt, DO NOT USE THIS.
    insert into "graphile_worker"._private_jobs as jobs (
      job_queue_id,
      task_id,
      payload,
      run_at,
      max_attempts,
      key,
      priority,
      flags
    )
      select
        job_queues.id,
        tasks.id,
        coalesce(add_job.payload, '{}'::json),
        coalesce(add_job.run_at, now()),
        coalesce(add_job.max_attempts::smallint, 25::smallint),
        add_job.job_key,
        coalesce(add_job.priority::smallint, 0::smallint),
        (
          select jsonb_object_agg(flag, true)
          from unnest(add_job.flags) as item(flag)
        )
      from "graphile_worker"._private_tasks as tasks
      left join "graphile_worker"._private_job_queues as job_queues
      on job_queues.queue_name = add_job.queue_name
      where tasks.identifier = add_job.identifier
    on conflict (key)
      -- Bump the updated_at so that there's something to return
      do update set
        revision = jobs.revision + 1,
        updated_at = now()
      returning *
      into v_job;
    if v_job.revision = 0 then
      perform pg_notify('jobs:insert', '{"r":' || random()::text || ',"count":1}');
    end if;
    return v_job;
  else
    raise exception 'Invalid job_key_mode value, expected ''replace'', ''preserve_run_at'' or ''unsafe_dedupe''.' using errcode = 'GWBKM';
  end if;
end;
$$;

--
-- Name: add_jobs(graphile_worker.job_spec[], boolean); Type: FUNCTION; Schema: graphile_worker; Owner: -
--

CREATE FUNCTION graphile_worker.add_jobs(specs graphile_worker.job_spec[], job_key_preserve_run_at boolean DEFAULT false) RETURNS SETOF graphile_worker._private_jobs
    LANGUAGE plpgsql
    AS $$
begin
  -- Ensure all the tasks exist
  insert into "graphile_worker"._private_tasks as tasks (identifier)
  select distinct spec.identifier
  from unnest(specs) spec
  on conflict do nothing;
  -- Ensure all the queues exist
  insert into "graphile_worker"._private_job_queues as job_queues (queue_name)
  select distinct spec.queue_name
  from unnest(specs) spec
  where spec.queue_name is not null
  on conflict do nothing;
  -- Ensure any locked jobs have their key cleared - in the case of locked
  -- existing job create a new job instead as it must have already started
  -- executing (i.e. it's world state is out of date, and the fact add_job
  -- has been called again implies there's new information that needs to be
  -- acted upon).
  update "graphile_worker"._private_jobs as jobs
  set
    key = null,
    attempts = jobs.max_attempts,
    updated_at = now()
  from unnest(specs) spec
  where spec.job_key is not null
  and jobs.key = spec.job_key
  and is_available is not true;

  -- WARNING: this count is not 100% accurate; 'on conflict' clause will cause it to be an overestimate
  perform pg_notify('jobs:insert', '{"r":' || random()::text || ',"count":' || array_length(specs, 1)::text || '}');

  -- TODO: is there a risk that a conflict could occur depending on the
  -- isolation level?
  return query insert into "graphile_worker"._private_jobs as jobs (
    job_queue_id,
    task_id,
    payload,
    run_at,
    max_attempts,
    key,
    priority,
    flags
  )
    select
      job_queues.id,
      tasks.id,
      coalesce(spec.payload, '{}'::json),
      coalesce(spec.run_at, now()),
      coalesce(spec.max_attempts, 25),
      spec.job_key,
      coalesce(spec.priority, 0),
      (
        select jsonb_object_agg(flag, true)
        from unnest(spec.flags) as item(flag)
      )
    from unnest(specs) spec
    inner join "graphile_worker"._private_tasks as tasks
    on tasks.identifier = spec.identifier
    left join "graphile_worker"._private_job_queues as job_queues
    on job_queues.queue_name = spec.queue_name
  on conflict (key) do update set
    job_queue_id = excluded.job_queue_id,
    task_id = excluded.task_id,
    payload =
      case
      when json_typeof(jobs.payload) = 'array' and json_typeof(excluded.payload) = 'array' then
        (jobs.payload::jsonb || excluded.payload::jsonb)::json
      else
        excluded.payload
      end,
    max_attempts = excluded.max_attempts,
    run_at = (case
      when job_key_preserve_run_at is true and jobs.attempts = 0 then jobs.run_at
      else excluded.run_at
    end),
    priority = excluded.priority,
    revision = jobs.revision + 1,
    flags = excluded.flags,
    -- always reset error/retry state
    attempts = 0,
    last_error = null,
    updated_at = now()
  where jobs.locked_at is null
  returning *;
end;
$$;

--
-- Name: complete_jobs(bigint[]); Type: FUNCTION; Schema: graphile_worker; Owner: -
--

CREATE FUNCTION graphile_worker.complete_jobs(job_ids bigint[]) RETURNS SETOF graphile_worker._private_jobs
    LANGUAGE sql
    AS $$
  delete from "graphile_worker"._private_jobs as jobs
    where id = any(job_ids)
    and (
      locked_at is null
    or
      locked_at < now() - interval '4 hours'
    )
    returning *;
$$;

--
-- Name: force_unlock_workers(text[]); Type: FUNCTION; Schema: graphile_worker; Owner: -
--

CREATE FUNCTION graphile_worker.force_unlock_workers(worker_ids text[]) RETURNS void
    LANGUAGE sql
    AS $$
update "graphile_worker"._private_jobs as jobs
set locked_at = null, locked_by = null
where locked_by = any(worker_ids);
update "graphile_worker"._private_job_queues as job_queues
set locked_at = null, locked_by = null
where locked_by = any(worker_ids);
$$;

--
-- Name: permanently_fail_jobs(bigint[], text); Type: FUNCTION; Schema: graphile_worker; Owner: -
--

CREATE FUNCTION graphile_worker.permanently_fail_jobs(job_ids bigint[], error_message text DEFAULT NULL::text) RETURNS SETOF graphile_worker._private_jobs
    LANGUAGE sql
    AS $$
  update "graphile_worker"._private_jobs as jobs
    set
      last_error = coalesce(error_message, 'Manually marked as failed'),
      attempts = max_attempts,
      updated_at = now()
    where id = any(job_ids)
    and (
      locked_at is null
    or
      locked_at < NOW() - interval '4 hours'
    )
    returning *;
$$;

--
-- Name: remove_job(text); Type: FUNCTION; Schema: graphile_worker; Owner: -
--

CREATE FUNCTION graphile_worker.remove_job(job_key text) RETURNS graphile_worker._private_jobs
    LANGUAGE plpgsql STRICT
    AS $$
declare
  v_job "graphile_worker"._private_jobs;
begin
  -- Delete job if not locked
  delete from "graphile_worker"._private_jobs as jobs
    where key = job_key
    and (
      locked_at is null
    or
      locked_at < NOW() - interval '4 hours'
    )
  returning * into v_job;
  if not (v_job is null) then
    perform pg_notify('jobs:insert', '{"r":' || random()::text || ',"count":-1}');
    return v_job;
  end if;
  -- Otherwise prevent job from retrying, and clear the key
  update "graphile_worker"._private_jobs as jobs
  set
    key = null,
    attempts = jobs.max_attempts,
    updated_at = now()
  where key = job_key
  returning * into v_job;
  return v_job;
end;
$$;

--
-- Name: reschedule_jobs(bigint[], timestamp with time zone, integer, integer, integer); Type: FUNCTION; Schema: graphile_worker; Owner: -
--

CREATE FUNCTION graphile_worker.reschedule_jobs(job_ids bigint[], run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, priority integer DEFAULT NULL::integer, attempts integer DEFAULT NULL::integer, max_attempts integer DEFAULT NULL::integer) RETURNS SETOF graphile_worker._private_jobs
    LANGUAGE sql
    AS $$
  update "graphile_worker"._private_jobs as jobs
    set
      run_at = coalesce(reschedule_jobs.run_at, jobs.run_at),
      priority = coalesce(reschedule_jobs.priority::smallint, jobs.priority),
      attempts = coalesce(reschedule_jobs.attempts::smallint, jobs.attempts),
      max_attempts = coalesce(reschedule_jobs.max_attempts::smallint, jobs.max_attempts),
      updated_at = now()
    where id = any(job_ids)
    and (
      locked_at is null
    or
      locked_at < NOW() - interval '4 hours'
    )
    returning *;
$$;

--
-- Name: enqueue_contact_sync(); Type: FUNCTION; Schema: han_app; Owner: -
--

CREATE FUNCTION han_app.enqueue_contact_sync() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_user_id uuid;
  v_task text;
  v_reason text;
  v_subject text := case tg_table_name when 'user_identity' then 'identity' else 'profile' end;
begin
  -- bitrix-sync writes CRM-master fields with han.sync_suppress = 'true' for its transaction: no
  -- echo. Any session can set the setting, so it is honoured only for the service's own sessions:
  -- the role the session acts as (SET ROLE, else its login) is bitrix_sync_user or a member of it
  -- (a superuser is a member of every role). An App session that sets it, for its transaction or
  -- left on a pooled connection, records its intents as ever. current_user would not do: this
  -- function is security definer.
  if current_setting('han.sync_suppress', true) = 'true'
     and pg_has_role(case current_setting('role') when 'none' then session_user
                                                  else current_setting('role')::name end,
                     'bitrix_sync_user', 'MEMBER') then
    return null;
  end if;

  if tg_op = 'INSERT' then
    if new.record_status <> 'active' then
      return null;
    end if;
    v_task := 'contact.map_or_create';
    v_reason := v_subject || '_created';
  elsif old.record_status = 'active' and new.record_status <> 'active' then
    v_task := 'contact.deactivate';
    v_reason := v_subject || '_deactivated';
  elsif old.record_status <> 'active' and new.record_status = 'active' then
    v_task := 'contact.map_or_create';
    v_reason := v_subject || '_reactivated';
  elsif tg_argv[0] = 'phone' and new.record_status = 'active' then
    -- Only _500_enqueue_contact_sync_update on user_identity passes 'phone'; its WHEN clause fires
    -- for a phone_number or record_status that changed (IS DISTINCT FROM), and the status did not
    -- enter or leave active, so the phone changed.
    v_task := 'contact.update';
    v_reason := 'identity_phone_changed';
  else
    -- CRM-master fields, foreign_phone, timestamps, no-op updates: nothing.
    return null;
  end if;

  -- entity_id is always user_identity.id, also for profile rows.
  if tg_table_name = 'user_identity' then
    v_user_id := new.id;
  else
    v_user_id := (to_jsonb(new) ->> 'user_id')::uuid;
  end if;

  -- The journal must still be the project's own: the owner of schema han_app could have put a table
  -- with triggers of its own in its place, which this function (security definer) would write with
  -- the schema owner's rights. Checked here rather than by _check_queue_tables(): this is the App's
  -- write path, and one catalogue read costs about 5 µs where a call of that function (its own
  -- search_path to set) costs several times more. current_user is this function's owner.
  perform 1 from pg_catalog.pg_class c
   where c.oid = pg_catalog.to_regclass('han_app.sync_queue_journal') and c.relkind = 'r'
     and pg_catalog.pg_has_role(c.relowner, 'USAGE');
  if not found then
    raise exception 'han_app.sync_queue_journal is no longer the project''s own table'
      using errcode = 'BS097',
            hint = 'Someone dropped it and made another in its place (the owner of schema han_app may): no intent is written to it. select * from bitrix_sync.app_table_hooks() names it (docs/security.md, "The App''s tables").';
  end if;
  -- The intent goes into the journal: one row appended to a table without indexes, constraints to
  -- re-parse or triggers. bitrix_sync.fold_intent_journal() coalesces it into han_app.sync_queue
  -- (one active row per task and user; a newer intent takes a leased row back to pending, which
  -- fences its holder) before every claim, so a worker never looks at the queue without it.
  insert into han_app.sync_queue_journal (task_type, user_id, reason, source_updated_at)
  values (v_task, v_user_id, v_reason, new.updated_at);

  -- Wake-up only; workers also poll (§8). The payload names no user. A sync loop asleep on the
  -- queue holds the intake watch (SHARE on bitrix_sync.lock_intake_watch), so this try fails exactly
  -- then. Otherwise this transaction now holds ROW EXCLUSIVE on it until it ends, and a loop about to
  -- fall asleep waits for it, then looks at the queue once more (bitrix_sync.watch_intake()). A
  -- second intent of the same transaction finds the lock held already.
  begin
    lock table bitrix_sync.lock_intake_watch in row exclusive mode nowait;
  exception when lock_not_available then
    perform pg_notify('bitrix_sync_queue', v_task);
  end;
  return null;
end $$;

--
-- Name: FUNCTION enqueue_contact_sync(); Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON FUNCTION han_app.enqueue_contact_sync() IS 'AFTER INSERT/UPDATE trigger on user_identity and client_profile (§6.2): active insert or return to active -> contact.map_or_create; leaving active -> contact.deactivate; phone change of an active identity (TG_ARGV[0] = ''phone'', decided by the trigger''s WHEN) -> contact.update. Skips when han.sync_suppress = ''true'' in a session acting as bitrix_sync_user or a member of it (SET ROLE, else the login role; superusers included); the App''s sessions cannot skip. Appends the intent to han_app.sync_queue_journal; fold_intent_journal() coalesces it per (task, user) into sync_queue before every claim. NOTIFYs bitrix_sync_queue only while a sync loop sleeps on the intake watch (bitrix_sync.watch_intake()).';

--
-- Name: admin_actions; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.admin_actions (
    id bigint NOT NULL,
    action character varying(64) NOT NULL,
    workflow_id uuid,
    rebind_request_id uuid,
    decision character varying(32),
    contact_id character varying(128),
    reason text NOT NULL,
    operator_id character varying(128) NOT NULL,
    db_user character varying(128) DEFAULT SESSION_USER NOT NULL,
    performed_at timestamp with time zone DEFAULT now() NOT NULL,
    dead_letter_id bigint,
    CONSTRAINT admin_actions_action_check CHECK (((action)::text ~ '^[a-z][a-z0-9_]{2,63}$'::text)),
    CONSTRAINT admin_actions_contact_id_check CHECK (((contact_id IS NULL) OR ((contact_id)::text ~ '^[1-9][0-9]{0,17}$'::text))),
    CONSTRAINT admin_actions_decision_check CHECK (((decision IS NULL) OR ((decision)::text ~ '^[a-z][a-z0-9_]{1,31}$'::text))),
    CONSTRAINT admin_actions_operator_id_check CHECK ((length(btrim((operator_id)::text)) > 0)),
    CONSTRAINT admin_actions_reason_check CHECK (((length(btrim(reason)) >= 3) AND (length(btrim(reason)) <= 500)))
);

--
-- Name: TABLE admin_actions; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.admin_actions IS 'Audit of the admin functions (resume and cancel of parked workflows, cancel of rebind requests): the action, what it applied to, the operator''s id and reason, the database login. Never deleted.';

--
-- Name: COLUMN admin_actions.action; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.admin_actions.action IS 'resume_workflow, cancel_workflow, cancel_rebind_request, acknowledge_dead_letter, requeue_dead_letter, ...';

--
-- Name: COLUMN admin_actions.decision; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.admin_actions.decision IS 'The resume decision: retry, link_contact, create_contact.';

--
-- Name: COLUMN admin_actions.contact_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.admin_actions.contact_id IS 'The Contact a link_contact decision named.';

--
-- Name: COLUMN admin_actions.operator_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.admin_actions.operator_id IS 'Who acted (operator identifier, as given).';

--
-- Name: COLUMN admin_actions.db_user; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.admin_actions.db_user IS 'The database login (session_user) that ran the function.';

--
-- Name: COLUMN admin_actions.dead_letter_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.admin_actions.dead_letter_id IS 'The technical dead letter an acknowledge_dead_letter or requeue_dead_letter resolved.';

--
-- Name: admin_actions_id_seq; Type: SEQUENCE; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.admin_actions ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME bitrix_sync.admin_actions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: audit_marks; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.audit_marks (
    mapping_id uuid NOT NULL,
    user_id uuid NOT NULL,
    audited_at timestamp with time zone NOT NULL
)
WITH (autovacuum_vacuum_scale_factor='0.05', autovacuum_vacuum_insert_scale_factor='0.05', autovacuum_analyze_scale_factor='0.02');

--
-- Name: TABLE audit_marks; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.audit_marks IS 'One row per active link (entity_external_mapping.id): when the convergence audit last compared it with its Contact, or when it was opened while never compared. Added and dropped with the link by a trigger on entity_external_mapping; moved on by record_audit_findings.';

--
-- Name: COLUMN audit_marks.mapping_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_marks.mapping_id IS 'The link (entity_external_mapping.id); no foreign key, mappings are history and marks are not.';

--
-- Name: COLUMN audit_marks.user_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_marks.user_id IS 'The link''s App user.';

--
-- Name: COLUMN audit_marks.audited_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.audit_marks.audited_at IS 'When the run that last compared the link read the Contact; the link''s opened_at while it was never compared.';

--
-- Name: business_alert_number_seq; Type: SEQUENCE; Schema: bitrix_sync; Owner: -
--

CREATE SEQUENCE bitrix_sync.business_alert_number_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: business_alert_number_seq; Type: SEQUENCE OWNED BY; Schema: bitrix_sync; Owner: -
--

ALTER SEQUENCE bitrix_sync.business_alert_number_seq OWNED BY bitrix_sync.business_alerts.alert_number;

--
-- Name: business_alerts_id_seq; Type: SEQUENCE; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.business_alerts ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME bitrix_sync.business_alerts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: crm_commands_id_seq; Type: SEQUENCE; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.crm_commands ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME bitrix_sync.crm_commands_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: crm_contract_probes; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.crm_contract_probes (
    id bigint NOT NULL,
    portal_host text NOT NULL,
    forms jsonb NOT NULL,
    run_id text NOT NULL,
    passed_at timestamp with time zone DEFAULT now() NOT NULL,
    recorded_db_user text DEFAULT SESSION_USER NOT NULL,
    CONSTRAINT crm_contract_probes_forms_object CHECK ((jsonb_typeof(forms) = 'object'::text)),
    CONSTRAINT crm_contract_probes_host_form CHECK ((portal_host ~ '^[a-z0-9.-]{1,253}(:[0-9]{1,5})?$'::text)),
    CONSTRAINT crm_contract_probes_run_id_form CHECK ((run_id ~ '^[0-9a-f]{8,32}$'::text))
);

--
-- Name: TABLE crm_contract_probes; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.crm_contract_probes IS 'Write probes (npm run preflight -- --write) that passed: against which portal, with which contract forms, when and by which login. Readiness is not degraded by crm_contract_unconfirmed once a row covers the configured portal and the active forms.';

--
-- Name: COLUMN crm_contract_probes.portal_host; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_contract_probes.portal_host IS 'BITRIX_SYNC_PORTAL_HOST of the run, lower case.';

--
-- Name: COLUMN crm_contract_probes.forms; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_contract_probes.forms IS 'The forms the probe proved: registered_write, registered_filter, date_filter, opened_filter (bitrix_sync.crm_contract_forms()).';

--
-- Name: COLUMN crm_contract_probes.run_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_contract_probes.run_id IS 'The run id preflight printed; the probe''s throw-away Contacts carried it in their name.';

--
-- Name: COLUMN crm_contract_probes.passed_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_contract_probes.passed_at IS 'When the probe was recorded, after every step passed.';

--
-- Name: COLUMN crm_contract_probes.recorded_db_user; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_contract_probes.recorded_db_user IS 'The login that recorded it (session_user).';

--
-- Name: crm_contract_probes_id_seq; Type: SEQUENCE; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.crm_contract_probes ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME bitrix_sync.crm_contract_probes_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: crm_method_blocks; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.crm_method_blocks (
    bucket text NOT NULL,
    method text NOT NULL,
    blocked_until timestamp with time zone,
    operating double precision,
    operating_reset_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT crm_method_blocks_bucket_check CHECK (((length(bucket) >= 1) AND (length(bucket) <= 200))),
    CONSTRAINT crm_method_blocks_method_check CHECK ((method ~ '^[a-z][a-z0-9_.]*$'::text)),
    CONSTRAINT crm_method_blocks_operating_check CHECK ((operating >= (0)::double precision))
);

--
-- Name: TABLE crm_method_blocks; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.crm_method_blocks IS 'Operating-time limit per REST method (§9): the last time.operating seen and, after OPERATION_TIME_LIMIT, how long the method is blocked.';

--
-- Name: COLUMN crm_method_blocks.method; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_method_blocks.method IS 'REST method name, e.g. crm.contact.update.';

--
-- Name: COLUMN crm_method_blocks.blocked_until; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_method_blocks.blocked_until IS 'No command of this method is sent before this instant.';

--
-- Name: COLUMN crm_method_blocks.operating; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_method_blocks.operating IS 'Last time.operating (seconds) the portal reported for this method.';

--
-- Name: COLUMN crm_method_blocks.operating_reset_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_method_blocks.operating_reset_at IS 'Last time.operating_reset_at: when the oldest one-minute bucket of the method drops out.';

--
-- Name: crm_rate_buckets; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.crm_rate_buckets (
    bucket text NOT NULL,
    tokens double precision NOT NULL,
    refilled_at timestamp with time zone NOT NULL,
    rate_factor double precision DEFAULT 1 NOT NULL,
    rate_changed_at timestamp with time zone DEFAULT now() NOT NULL,
    throttled_until timestamp with time zone,
    rate_limited_count bigint DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    last_answered_at timestamp with time zone,
    CONSTRAINT crm_rate_buckets_bucket_check CHECK (((length(bucket) >= 1) AND (length(bucket) <= 200))),
    CONSTRAINT crm_rate_buckets_rate_factor_check CHECK (((rate_factor > (0)::double precision) AND (rate_factor <= (1)::double precision))),
    CONSTRAINT crm_rate_buckets_rate_limited_count_check CHECK ((rate_limited_count >= 0)),
    CONSTRAINT crm_rate_buckets_tokens_check CHECK ((tokens >= (0)::double precision))
);

--
-- Name: TABLE crm_rate_buckets; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.crm_rate_buckets IS 'Token bucket per portal/credential shared by every replica (§8). One row per bucket; acquire_crm_request() locks it.';

--
-- Name: COLUMN crm_rate_buckets.bucket; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_rate_buckets.bucket IS 'Bucket name: one per portal and webhook credential (the portal host).';

--
-- Name: COLUMN crm_rate_buckets.tokens; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_rate_buckets.tokens IS 'Tokens left at refilled_at; refilled lazily at the current rate, capped at the burst setting.';

--
-- Name: COLUMN crm_rate_buckets.refilled_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_rate_buckets.refilled_at IS 'When tokens was last brought up to date.';

--
-- Name: COLUMN crm_rate_buckets.rate_factor; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_rate_buckets.rate_factor IS 'Share of limiter.refill_per_sec in force: cut on QUERY_LIMIT_EXCEEDED, climbs back linearly to 1.';

--
-- Name: COLUMN crm_rate_buckets.rate_changed_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_rate_buckets.rate_changed_at IS 'When rate_factor was last brought up to date.';

--
-- Name: COLUMN crm_rate_buckets.throttled_until; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_rate_buckets.throttled_until IS 'No request before this instant: the cool-down after a limit refusal.';

--
-- Name: COLUMN crm_rate_buckets.rate_limited_count; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_rate_buckets.rate_limited_count IS 'Limit refusals that cut the rate, since the bucket was created.';

--
-- Name: COLUMN crm_rate_buckets.last_answered_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.crm_rate_buckets.last_answered_at IS 'When the portal last answered a request of any replica with HTTP 2xx (to the second: written at most once a second, by release_crm_request(uuid, true)). Readiness''s crm_stale judges the deployment by it.';

--
-- Name: cutover; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.cutover (
    singleton boolean DEFAULT true NOT NULL,
    cutover_watermark timestamp with time zone NOT NULL,
    cancelled_count integer NOT NULL,
    performed_by character varying(128) NOT NULL,
    performed_at timestamp with time zone DEFAULT now() NOT NULL,
    performed_db_user character varying(128) DEFAULT SESSION_USER,
    CONSTRAINT cutover_singleton_check CHECK (singleton)
);

--
-- Name: TABLE cutover; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.cutover IS 'The one-time switch from the stub to full sync (§17): the watermark and what was cancelled. At most one row.';

--
-- Name: COLUMN cutover.performed_db_user; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.cutover.performed_db_user IS 'The database login (session_user) that ran perform_cutover(); performed_by is the name it declared. Null for a cutover recorded before this column existed.';

--
-- Name: deleted_alert_items; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.deleted_alert_items AS
 SELECT a.id,
    a.alert_number,
    a.alert_type,
    a.severity,
    a.item_id,
    a.closed_at
   FROM bitrix_sync.business_alerts a
  WHERE ((a.status)::text = 'remote_missing'::text);

--
-- Name: VIEW deleted_alert_items; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.deleted_alert_items IS 'Admin (docs/runbook.md, BitrixSyncAlertItemsDeleted): open business alerts whose smart-process item was found deleted in the CRM (remote_missing, §10.3); no user or Contact IDs.';

--
-- Name: drift_findings; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.drift_findings (
    id bigint NOT NULL,
    kind character varying(32) NOT NULL,
    user_id uuid,
    contact_id character varying(128),
    details jsonb DEFAULT '{}'::jsonb NOT NULL,
    detected_at timestamp with time zone DEFAULT now() NOT NULL,
    last_seen_at timestamp with time zone DEFAULT now() NOT NULL,
    repair_requested_at timestamp with time zone,
    repair_intent character varying(32),
    CONSTRAINT drift_findings_contact_id_check CHECK (((contact_id IS NULL) OR ((contact_id)::text ~ '^[1-9][0-9]{0,17}$'::text))),
    CONSTRAINT drift_findings_details_check CHECK ((jsonb_typeof(details) = 'object'::text)),
    CONSTRAINT drift_findings_kind_check CHECK (((kind)::text = ANY ('{contact_missing,phone_missing,user_id_wrong,registered_wrong,crm_master_behind,unmapped_user,inactive_user_linked,registered_inactive_user,registered_unknown_user}'::text[]))),
    CONSTRAINT drift_findings_repair_intent_check CHECK (((repair_intent IS NULL) OR ((repair_intent)::text = ANY ('{contact.map_or_create,contact.update,contact.deactivate}'::text[])))),
    CONSTRAINT drift_findings_subject CHECK (((user_id IS NOT NULL) OR (contact_id IS NOT NULL)))
);

--
-- Name: TABLE drift_findings; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.drift_findings IS 'Silent drift the convergence audit found between the App, the snapshots and the CRM: one row per user and kind (status_drift shows it). A later audit that finds the pair in step deletes it.';

--
-- Name: COLUMN drift_findings.kind; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.drift_findings.kind IS 'contact_missing, phone_missing, user_id_wrong, registered_wrong, crm_master_behind, unmapped_user, inactive_user_linked, registered_inactive_user, registered_unknown_user (docs/workflows.md).';

--
-- Name: COLUMN drift_findings.user_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.drift_findings.user_id IS 'The App user (for registered_unknown_user: the UUID the Contact carries); null when the Contact carries no readable user id.';

--
-- Name: COLUMN drift_findings.contact_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.drift_findings.contact_id IS 'The Contact involved, when there is one.';

--
-- Name: COLUMN drift_findings.details; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.drift_findings.details IS 'Safe details: field names, counts and flags, never a value of the App or the CRM.';

--
-- Name: COLUMN drift_findings.detected_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.drift_findings.detected_at IS 'When an audit first found it.';

--
-- Name: COLUMN drift_findings.last_seen_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.drift_findings.last_seen_at IS 'When an audit last found it.';

--
-- Name: COLUMN drift_findings.repair_requested_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.drift_findings.repair_requested_at IS 'When repair_drift (or the automatic repair) recorded the intent meant to bring it back.';

--
-- Name: COLUMN drift_findings.repair_intent; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.drift_findings.repair_intent IS 'The intent that repair recorded.';

--
-- Name: drift_findings_id_seq; Type: SEQUENCE; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.drift_findings ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME bitrix_sync.drift_findings_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: drift_repairs; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.drift_repairs (
    id bigint NOT NULL,
    admin_action_id bigint,
    user_id uuid NOT NULL,
    contact_id character varying(128),
    kinds text[] NOT NULL,
    intent character varying(32) NOT NULL,
    requested_by character varying(128) NOT NULL,
    reason text NOT NULL,
    db_user character varying(128) DEFAULT SESSION_USER NOT NULL,
    requested_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT drift_repairs_contact_id_check CHECK (((contact_id IS NULL) OR ((contact_id)::text ~ '^[1-9][0-9]{0,17}$'::text))),
    CONSTRAINT drift_repairs_intent_check CHECK (((intent)::text = ANY ('{contact.map_or_create,contact.update,contact.deactivate}'::text[]))),
    CONSTRAINT drift_repairs_kinds_check CHECK ((cardinality(kinds) > 0)),
    CONSTRAINT drift_repairs_reason_check CHECK (((length(btrim(reason)) >= 3) AND (length(btrim(reason)) <= 500))),
    CONSTRAINT drift_repairs_requested_by_check CHECK ((length(btrim((requested_by)::text)) > 0))
);

--
-- Name: TABLE drift_repairs; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.drift_repairs IS 'Audit of drift repairs: for each user a repair acted on, the kinds found, the intent recorded, who asked (and the database login) and why. Never deleted.';

--
-- Name: COLUMN drift_repairs.admin_action_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.drift_repairs.admin_action_id IS 'The admin_actions row of the repair_drift call; null for the automatic repair (audit.auto_repair_kinds).';

--
-- Name: COLUMN drift_repairs.user_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.drift_repairs.user_id IS 'The user whose intent was recorded.';

--
-- Name: COLUMN drift_repairs.contact_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.drift_repairs.contact_id IS 'The Contact of the findings, when there was one.';

--
-- Name: COLUMN drift_repairs.kinds; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.drift_repairs.kinds IS 'The drift kinds the user had when the repair was recorded.';

--
-- Name: COLUMN drift_repairs.intent; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.drift_repairs.intent IS 'The intent recorded in han_app.sync_queue_journal (reason drift_repair).';

--
-- Name: COLUMN drift_repairs.requested_by; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.drift_repairs.requested_by IS 'Who asked (operator id as given; audit:auto for the automatic repair).';

--
-- Name: COLUMN drift_repairs.reason; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.drift_repairs.reason IS 'Why, as given.';

--
-- Name: COLUMN drift_repairs.db_user; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.drift_repairs.db_user IS 'The database login (session_user) that ran the repair.';

--
-- Name: COLUMN drift_repairs.requested_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.drift_repairs.requested_at IS 'When the intent was recorded.';

--
-- Name: drift_repairs_id_seq; Type: SEQUENCE; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.drift_repairs ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME bitrix_sync.drift_repairs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: held_phone_links; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.held_phone_links AS
 SELECT m.id AS mapping_id,
    m.workflow_id,
    m.held_at,
    (EXTRACT(epoch FROM (now() - m.held_at)))::bigint AS age_sec,
    (m.held_crm_updated_at IS NOT NULL) AS read_seen
   FROM bitrix_sync.entity_external_mapping m
  WHERE (((m.status)::text = 'active'::text) AND (m.held_at IS NOT NULL) AND (m.hold_released_at IS NULL));

--
-- Name: VIEW held_phone_links; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.held_phone_links IS 'Held links as an admin looks at them (docs/admin.md): the mapping and the workflow that made it, since when, and whether the Contact has been read since the link (read_seen). No user or Contact IDs; confirm_phone_link takes the user id.';

--
-- Name: inbox_waiting; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.inbox_waiting AS
 SELECT i.id,
    i.receiver,
    i.status,
    i.attempt_count,
    i.last_error_code,
    i.next_attempt_at,
    i.received_at
   FROM bitrix_sync.webhook_inbox i
  WHERE ((i.status)::text = ANY ('{received,retry_wait,processing}'::text[]));

--
-- Name: VIEW inbox_waiting; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.inbox_waiting IS 'Admin (docs/runbook.md, BitrixSyncWebhookInboxStuck): robot webhooks not processed yet, by receiver and status, with their error code and next attempt; no entity IDs, source addresses or bodies.';

--
-- Name: lock_intake_fold; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.lock_intake_fold (
);

--
-- Name: TABLE lock_intake_fold; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.lock_intake_fold IS 'One intake fold at a time, a lock only: fold_intent_journal() and perform_cutover() take SHARE UPDATE EXCLUSIVE on it. No rows; no role but the owner may lock it.';

--
-- Name: lock_intake_watch; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.lock_intake_watch (
);

--
-- Name: TABLE lock_intake_watch; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.lock_intake_watch IS 'The intake watch, a lock only: a sleeping sync loop holds SHARE on it (watch_intake(), in a transaction it ends when it wakes); han_app.enqueue_contact_sync() tries ROW EXCLUSIVE NOWAIT for each App transaction that records an intent and NOTIFYs when that fails. No rows; no role but the owner may lock it.';

--
-- Name: lock_metrics_fold; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.lock_metrics_fold (
);

--
-- Name: TABLE lock_metrics_fold; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.lock_metrics_fold IS 'One metrics fold at a time, a lock only: metrics_snapshot() tries SHARE UPDATE EXCLUSIVE NOWAIT on it. No rows; no role but the owner may lock it.';

--
-- Name: metric_event_totals; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.metric_event_totals (
    machine character varying(16) NOT NULL,
    kind character varying(64) NOT NULL,
    from_state character varying(32) NOT NULL,
    to_state character varying(32) NOT NULL,
    count bigint NOT NULL,
    CONSTRAINT metric_event_totals_count_check CHECK ((count >= 0)),
    CONSTRAINT metric_event_totals_machine_check CHECK (((machine)::text = ANY ((ARRAY['workflow'::character varying, 'command'::character varying, 'webhook'::character varying, 'dead_letter'::character varying, 'alert'::character varying])::text[])))
);

--
-- Name: TABLE metric_event_totals; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.metric_event_totals IS 'Running totals of the counted events since the table was created, folded from metric_events by metrics_snapshot(): the values of the bitrix_sync_*_total counters every replica exports.';

--
-- Name: metric_events; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.metric_events (
    machine character varying(16) NOT NULL,
    kind character varying(64) NOT NULL,
    from_state character varying(32) NOT NULL,
    to_state character varying(32) NOT NULL
);

--
-- Name: TABLE metric_events; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.metric_events IS 'Counted events not yet folded into metric_event_totals: one row per workflow or command transition, coalesced webhook or new dead letter, appended by the _900 triggers. Types, states and sources only.';

--
-- Name: COLUMN metric_events.kind; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.metric_events.kind IS 'workflow_type, command_type, receiver or dead-letter source: a label value of low cardinality.';

--
-- Name: parked_workflows; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.parked_workflows AS
 SELECT w.id AS workflow_id,
    w.workflow_type,
    w.last_error_code AS reason,
    w.updated_at AS parked_at,
    (EXTRACT(epoch FROM (now() - w.updated_at)))::bigint AS parked_for_sec,
    a.alert_number,
    a.alert_type,
    bitrix_sync._parked_decisions((w.last_error_code)::text) AS decisions
   FROM (bitrix_sync.workflow_instances w
     LEFT JOIN LATERAL ( SELECT b.alert_number,
            b.alert_type
           FROM bitrix_sync.business_alerts b
          WHERE ((b.correlation_id = w.correlation_id) AND ((b.status)::text = 'open'::text))
          ORDER BY b.id DESC
         LIMIT 1) a ON (true))
  WHERE ((w.state)::text = 'waiting_manual'::text);

--
-- Name: VIEW parked_workflows; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.parked_workflows IS 'Workflows parked in waiting_manual for a person: the reason code, since when, the open business alert raised with it (alert_number as shown in the smart-process item) and the decisions resume_parked_workflow accepts. No user or Contact IDs: the alert item in the CRM has the details.';

--
-- Name: privilege_decisions; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.privilege_decisions (
    object_type text NOT NULL,
    object_name text NOT NULL,
    runtime text[] NOT NULL,
    admin text[] NOT NULL,
    app text[] NOT NULL,
    note text NOT NULL,
    app_writer text[] DEFAULT '{}'::text[] NOT NULL,
    CONSTRAINT privilege_decisions_note_check CHECK ((length(btrim(note)) > 0)),
    CONSTRAINT privilege_decisions_object_name_check CHECK ((object_name <> ''::text)),
    CONSTRAINT privilege_decisions_object_type_check CHECK ((object_type = ANY (ARRAY['schema'::text, 'table'::text, 'view'::text, 'sequence'::text, 'function'::text])))
);

--
-- Name: TABLE privilege_decisions; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.privilege_decisions IS 'The privilege catalogue (§13), one row per object of the project: what each of the three roles may do on it, and why. Written by the upsert in the object''s own sql/ file; read through bitrix_sync.role_privileges; applied by bitrix_sync.apply_privileges().';

--
-- Name: COLUMN privilege_decisions.object_type; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.privilege_decisions.object_type IS 'schema | table | view | sequence | function.';

--
-- Name: COLUMN privilege_decisions.object_name; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.privilege_decisions.object_name IS 'Schema-qualified name; a function by its signature as regprocedure prints it (types, no parameter names).';

--
-- Name: COLUMN privilege_decisions.runtime; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.privilege_decisions.runtime IS 'What bitrix_sync_user may do, as GRANT takes it (''EXECUTE'', ''SELECT'', ''UPDATE (status, locked_by)''); empty: explicitly nothing.';

--
-- Name: COLUMN privilege_decisions.admin; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.privilege_decisions.admin IS 'What bitrix_sync_admin may do, the same way.';

--
-- Name: COLUMN privilege_decisions.app; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.privilege_decisions.app IS 'What han_app_user may do, the same way.';

--
-- Name: COLUMN privilege_decisions.note; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.privilege_decisions.note IS 'Why: docs/security.md prints it beside the grants.';

--
-- Name: COLUMN privilege_decisions.app_writer; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.privilege_decisions.app_writer IS 'What bitrix_sync_app_writer may do, the same way; empty for everything but the App''s schema and client_profile.';

--
-- Name: rebind_request_status; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.rebind_request_status AS
 SELECT r.id AS request_id,
    r.status,
    r.failure_code,
    r.outcome,
    r.operator_id,
    r.requested_at,
    r.completed_at,
    r.cancelled_by,
    w.id AS workflow_id,
    w.state AS workflow_state,
    w.current_step,
    w.last_error_code AS workflow_error_code,
    w.held_intent_type,
    (EXTRACT(epoch FROM (COALESCE(r.completed_at, now()) - r.requested_at)))::bigint AS age_sec,
    r.requested_db_user,
    r.cancelled_db_user
   FROM (bitrix_sync.rebind_requests r
     LEFT JOIN bitrix_sync.workflow_instances w ON ((w.id = r.workflow_id)));

--
-- Name: VIEW rebind_request_status; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.rebind_request_status IS 'Rebind requests as an admin watches them: status, failure code, what the CRM holds (outcome), who asked and who cancelled (the declared operator and the database login, session_user), and where the workflow is (state, step, error code, an App change held until it ends). No user or Contact IDs and no reason text.';

--
-- Name: reconciliation_spikes_id_seq; Type: SEQUENCE; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.reconciliation_spikes ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME bitrix_sync.reconciliation_spikes_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: refused_sources; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.refused_sources (
    source_ip inet NOT NULL,
    receiver character varying(16) NOT NULL,
    refusals bigint NOT NULL,
    first_seen_at timestamp with time zone NOT NULL,
    last_seen_at timestamp with time zone NOT NULL,
    CONSTRAINT refused_sources_receiver_check CHECK (((receiver)::text = ANY ((ARRAY['contact'::character varying, 'alert'::character varying, 'none'::character varying])::text[]))),
    CONSTRAINT refused_sources_refusals_check CHECK ((refusals > 0)),
    CONSTRAINT refused_sources_seen_order CHECK ((first_seen_at <= last_seen_at)),
    CONSTRAINT refused_sources_source_ip_check CHECK ((masklen(source_ip) =
CASE family(source_ip)
    WHEN 4 THEN 32
    ELSE 128
END))
);

--
-- Name: TABLE refused_sources; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.refused_sources IS 'Source addresses the public proxy refused for not being in BITRIX_WEBHOOK_ALLOWED_CIDRS (§10.1): per address and receiver route, how many refusals and when first and last. No query, body, header or token. Kept 30 days after the last refusal, at most 10 000 rows (record_refused_sources). For diagnosis and a reviewed allow-list change only; never read to admit anyone.';

--
-- Name: COLUMN refused_sources.source_ip; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.refused_sources.source_ip IS 'The TCP peer nginx refused (its $remote_addr), one address.';

--
-- Name: COLUMN refused_sources.receiver; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.refused_sources.receiver IS 'contact or alert (the robot routes), none for any other path.';

--
-- Name: COLUMN refused_sources.refusals; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.refused_sources.refusals IS 'Refusals of this address on this route since first_seen_at.';

--
-- Name: COLUMN refused_sources.first_seen_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.refused_sources.first_seen_at IS 'The first refusal (as the service received it from nginx).';

--
-- Name: COLUMN refused_sources.last_seen_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.refused_sources.last_seen_at IS 'The last refusal.';

--
-- Name: retention_sweeps; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.retention_sweeps (
    table_name text NOT NULL,
    after_finished_at timestamp with time zone,
    after_id uuid,
    round_started_at timestamp with time zone DEFAULT now() NOT NULL,
    last_round_ended_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT retention_sweeps_check CHECK (((after_finished_at IS NULL) = (after_id IS NULL))),
    CONSTRAINT retention_sweeps_table_name_check CHECK ((table_name = 'workflows'::text))
);

--
-- Name: TABLE retention_sweeps; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.retention_sweeps IS 'Where a retention sweep stands (one row per swept table; workflows only): the next window starts after (after_finished_at, after_id), from the oldest when null. Written by _retention_sweep_workflows() only.';

--
-- Name: COLUMN retention_sweeps.table_name; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.retention_sweeps.table_name IS 'The table swept: workflows.';

--
-- Name: COLUMN retention_sweeps.after_finished_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.retention_sweeps.after_finished_at IS 'finished_at of the last workflow the sweep examined or deleted this round; null: the round starts from the oldest.';

--
-- Name: COLUMN retention_sweeps.after_id; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.retention_sweeps.after_id IS 'id of that workflow (ties of finished_at are ordered by id).';

--
-- Name: COLUMN retention_sweeps.round_started_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.retention_sweeps.round_started_at IS 'When the current round started.';

--
-- Name: COLUMN retention_sweeps.last_round_ended_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.retention_sweeps.last_round_ended_at IS 'When the last round went past the newest finished workflow past retention; null before the first.';

--
-- Name: COLUMN retention_sweeps.updated_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.retention_sweeps.updated_at IS 'When a window last moved the place.';

--
-- Name: retrying_workflows; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.retrying_workflows AS
 SELECT w.id,
    w.workflow_type,
    w.current_step,
    w.attempt_count,
    w.last_error_code,
    w.next_attempt_at,
    w.created_at,
    c.command_type AS last_command_type,
    c.status AS last_command_status,
    c.last_error_code AS last_command_error,
    c.last_http_status,
    c.last_bitrix_error
   FROM (bitrix_sync.workflow_instances w
     LEFT JOIN LATERAL ( SELECT c_1.command_type,
            c_1.status,
            c_1.last_error_code,
            c_1.last_http_status,
            c_1.last_bitrix_error
           FROM bitrix_sync.crm_commands c_1
          WHERE (c_1.workflow_id = w.id)
          ORDER BY c_1.id DESC
         LIMIT 1) c ON (true))
  WHERE ((w.state)::text = 'waiting_retry'::text);

--
-- Name: VIEW retrying_workflows; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.retrying_workflows IS 'Admin (docs/runbook.md, BitrixSyncWorkflowsRetryingLong): workflows waiting for a retry, with their step, last error and their last command''s outcome; safe codes only.';

--
-- Name: role_privileges; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.role_privileges AS
 SELECT d.object_type,
    d.object_name,
    r.role,
    r.privileges,
    d.note
   FROM (bitrix_sync.privilege_decisions d
     CROSS JOIN LATERAL ( VALUES ('bitrix_sync_user'::text,d.runtime), ('bitrix_sync_admin'::text,d.admin), ('han_app_user'::text,d.app), ('bitrix_sync_app_writer'::text,d.app_writer)) r(role, privileges));

--
-- Name: VIEW role_privileges; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.role_privileges IS 'The privilege catalogue (§13): one row per object and role with the privileges GRANT gives (empty array: explicitly nothing) and why, from bitrix_sync.privilege_decisions. bitrix_sync.apply_privileges() applies exactly this; docs/security.md is rendered from it.';

--
-- Name: role_privilege_drift; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.role_privilege_drift AS
 WITH RECURSIVE objects AS (
         SELECT 'schema'::text AS object_type,
            (n.nspname)::text AS object_name,
            n.nspowner AS owner,
            n.nspacl AS acl,
            NULL::oid AS relid,
            'n'::"char" AS acl_kind
           FROM pg_namespace n
          WHERE (n.nspname = ANY (ARRAY['bitrix_sync'::name, 'han_app'::name]))
        UNION ALL
         SELECT
                CASE c.relkind
                    WHEN 'S'::"char" THEN 'sequence'::text
                    WHEN 'v'::"char" THEN 'view'::text
                    WHEN 'm'::"char" THEN 'view'::text
                    ELSE 'table'::text
                END AS "case",
            format('%I.%I'::text, n.nspname, c.relname) AS format,
            c.relowner,
            c.relacl,
            c.oid,
                CASE c.relkind
                    WHEN 'S'::"char" THEN 's'::"char"
                    ELSE 'r'::"char"
                END AS "case"
           FROM (pg_class c
             JOIN pg_namespace n ON ((n.oid = c.relnamespace)))
          WHERE ((n.nspname = ANY (ARRAY['bitrix_sync'::name, 'han_app'::name])) AND (c.relkind = ANY (ARRAY['r'::"char", 'p'::"char", 'v'::"char", 'm'::"char", 'f'::"char", 'S'::"char"])) AND (NOT (EXISTS ( SELECT 1
                   FROM pg_depend d
                  WHERE ((d.classid = ('pg_class'::regclass)::oid) AND (d.objid = c.oid) AND (d.deptype = 'e'::"char"))))))
        UNION ALL
         SELECT 'function'::text,
            ((p.oid)::regprocedure)::text AS oid,
            p.proowner,
            p.proacl,
            NULL::oid,
            'f'::"char" AS "char"
           FROM (pg_proc p
             JOIN pg_namespace n ON ((n.oid = p.pronamespace)))
          WHERE ((n.nspname = ANY (ARRAY['bitrix_sync'::name, 'han_app'::name])) AND (NOT (EXISTS ( SELECT 1
                   FROM pg_depend d
                  WHERE ((d.classid = ('pg_proc'::regclass)::oid) AND (d.objid = p.oid) AND (d.deptype = 'e'::"char"))))))
        ), catalogue AS (
         SELECT rp.object_type,
            rp.object_name,
            rp.role,
            rp.privileges
           FROM bitrix_sync.role_privileges rp
        ), project_objects AS (
         SELECT o.object_type,
            o.object_name,
            o.owner,
            o.acl,
            o.relid,
            o.acl_kind
           FROM objects o
          WHERE ((o.object_name = 'bitrix_sync'::text) OR (o.object_name ~~ 'bitrix\_sync.%'::text) OR (EXISTS ( SELECT 1
                   FROM catalogue c
                  WHERE ((c.object_type = o.object_type) AND (c.object_name = o.object_name)))))
        ), roles(role) AS (
         VALUES ('bitrix_sync_user'::text), ('bitrix_sync_admin'::text), ('han_app_user'::text), ('bitrix_sync_app_writer'::text)
        ), actual AS (
         SELECT o.object_type,
            o.object_name,
            COALESCE(r.rolname, 'PUBLIC'::name) AS role,
            a.privilege_type AS privilege,
            NULL::text AS column_name
           FROM ((project_objects o
             CROSS JOIN LATERAL aclexplode(COALESCE(o.acl, acldefault(o.acl_kind, o.owner))) a(grantor, grantee, privilege_type, is_grantable))
             LEFT JOIN pg_roles r ON ((r.oid = a.grantee)))
          WHERE ((a.grantee = (0)::oid) OR (r.rolname IN ( SELECT roles.role
                   FROM roles)) OR ((a.grantee <> o.owner) AND (o.object_name <> ALL (ARRAY['han_app'::text, 'han_app.user_identity'::text, 'han_app.client_profile'::text]))))
        UNION ALL
         SELECT o.object_type,
            o.object_name,
            COALESCE(r.rolname, 'PUBLIC'::name) AS "coalesce",
            a.privilege_type,
            (att.attname)::text AS attname
           FROM (((project_objects o
             JOIN pg_attribute att ON (((att.attrelid = o.relid) AND (att.attnum > 0) AND (NOT att.attisdropped) AND (att.attacl IS NOT NULL))))
             CROSS JOIN LATERAL aclexplode(att.attacl) a(grantor, grantee, privilege_type, is_grantable))
             LEFT JOIN pg_roles r ON ((r.oid = a.grantee)))
          WHERE ((a.grantee = (0)::oid) OR (r.rolname IN ( SELECT roles.role
                   FROM roles)) OR ((a.grantee <> o.owner) AND (o.object_name <> ALL (ARRAY['han_app'::text, 'han_app.user_identity'::text, 'han_app.client_profile'::text]))))
        ), project_role_oids AS (
         SELECT r.oid,
            (r.rolname)::text AS rolname
           FROM pg_roles r
          WHERE (r.rolname IN ( SELECT roles.role
                   FROM roles))
        ), schema_owner AS (
         SELECT n.nspowner AS oid
           FROM pg_namespace n
          WHERE (n.nspname = 'bitrix_sync'::name)
        ), held(holder, project_role) AS (
         SELECT m.member,
            m.roleid
           FROM pg_auth_members m
          WHERE (m.roleid IN ( SELECT project_role_oids.oid
                   FROM project_role_oids))
        UNION
         SELECT m.member,
            h.project_role
           FROM (held h
             JOIN pg_auth_members m ON ((m.roleid = h.holder)))
        ), membership_drift AS (
         SELECT (g.rolname)::text AS granted,
            (mr.rolname)::text AS member,
                CASE
                    WHEN m.admin_option THEN 'MEMBER WITH ADMIN OPTION'::text
                    ELSE 'MEMBER'::text
                END AS privilege,
            'extra_membership'::text AS problem
           FROM ((pg_auth_members m
             JOIN pg_roles g ON ((g.oid = m.roleid)))
             JOIN pg_roles mr ON ((mr.oid = m.member)))
          WHERE ((NOT (m.member IN ( SELECT schema_owner.oid
                   FROM schema_owner))) AND ((m.member IN ( SELECT project_role_oids.oid
                   FROM project_role_oids)) OR (m.admin_option AND (m.roleid IN ( SELECT project_role_oids.oid
                   FROM project_role_oids)))))
        UNION ALL
         SELECT p.rolname,
            (hr.rolname)::text AS rolname,
            'MEMBER'::text,
            'conflicting_membership'::text
           FROM ((held h
             JOIN project_role_oids p ON ((p.oid = h.project_role)))
             JOIN pg_roles hr ON ((hr.oid = h.holder)))
          WHERE ((NOT (h.holder IN ( SELECT project_role_oids.oid
                   FROM project_role_oids))) AND (NOT (h.holder IN ( SELECT schema_owner.oid
                   FROM schema_owner))) AND (( SELECT count(DISTINCT h2.project_role) AS count
                   FROM held h2
                  WHERE (h2.holder = h.holder)) > 1))
        ), expected AS (
         SELECT c.object_type,
            c.object_name,
            c.role,
            m.m[1] AS privilege,
            btrim(col.col) AS column_name
           FROM (((catalogue c
             CROSS JOIN LATERAL unnest(c.privileges) spec(spec))
             CROSS JOIN LATERAL regexp_match(spec.spec, '^([A-Z]+)\s*(?:\((.*)\))?$'::text) m(m))
             CROSS JOIN LATERAL unnest(COALESCE(string_to_array(m.m[2], ','::text), ARRAY[NULL::text])) col(col))
        )
 SELECT e.object_type,
    e.object_name,
    e.role,
    e.privilege,
    e.column_name,
    'missing'::text AS problem
   FROM expected e
  WHERE ((EXISTS ( SELECT 1
           FROM project_objects o
          WHERE ((o.object_type = e.object_type) AND (o.object_name = e.object_name)))) AND (NOT (EXISTS ( SELECT 1
           FROM actual a
          WHERE (((a.object_type = e.object_type) AND (a.object_name = e.object_name) AND (a.role = e.role) AND (a.privilege = e.privilege)) AND (NOT (a.column_name IS DISTINCT FROM e.column_name)))))))
UNION ALL
 SELECT a.object_type,
    a.object_name,
    a.role,
    a.privilege,
    a.column_name,
    'extra'::text AS problem
   FROM actual a
  WHERE ((NOT (EXISTS ( SELECT 1
           FROM expected e
          WHERE (((a.object_type = e.object_type) AND (a.object_name = e.object_name) AND (a.role = e.role) AND (a.privilege = e.privilege)) AND (NOT (a.column_name IS DISTINCT FROM e.column_name)))))) AND (NOT ((a.role = 'PUBLIC'::name) AND (a.object_name = ANY (ARRAY['han_app'::text, 'han_app.user_identity'::text, 'han_app.client_profile'::text])))))
UNION ALL
 SELECT o.object_type,
    o.object_name,
    r.role,
    NULL::text AS privilege,
    NULL::text AS column_name,
    'undecided'::text AS problem
   FROM (project_objects o
     CROSS JOIN roles r)
  WHERE (NOT (EXISTS ( SELECT 1
           FROM catalogue c
          WHERE ((c.object_type = o.object_type) AND (c.object_name = o.object_name) AND (c.role = r.role)))))
UNION ALL
 SELECT DISTINCT c.object_type,
    c.object_name,
    NULL::text AS role,
    NULL::text AS privilege,
    NULL::text AS column_name,
    'unknown_object'::text AS problem
   FROM catalogue c
  WHERE (NOT (EXISTS ( SELECT 1
           FROM objects o
          WHERE ((o.object_type = c.object_type) AND (o.object_name = c.object_name)))))
UNION ALL
 SELECT DISTINCT 'role'::text AS object_type,
    d.granted AS object_name,
    d.member AS role,
    d.privilege,
    NULL::text AS column_name,
    d.problem
   FROM membership_drift d;

--
-- Name: VIEW role_privilege_drift; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.role_privilege_drift IS 'Differences between the database''s ACLs and bitrix_sync.role_privileges: missing and extra privileges of the four roles and PUBLIC (column privileges by column), extra privileges of any other role on the project''s objects (the owner aside; the App''s schema, identity and profile tables are the App''s), objects of the project without a decision for a role (undecided), catalogue rows naming no object (unknown_object), and role memberships outside the catalogue''s rule (object_type role, object_name the role held, role the member): a project role that is a member of a role (bitrix_sync_app_writer included) or held WITH ADMIN OPTION (extra_membership), a role outside the project holding more than one project role, directly or through groups (conflicting_membership). Empty when they agree.';

--
-- Name: schema_contract_steps; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.schema_contract_steps (
    migration text NOT NULL,
    oldest_release_schema text NOT NULL,
    what text NOT NULL,
    recorded_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schema_contract_steps_floor_not_after CHECK ((oldest_release_schema <= migration)),
    CONSTRAINT schema_contract_steps_migration_check CHECK ((migration ~ '^[0-9]{6}$'::text)),
    CONSTRAINT schema_contract_steps_oldest_release_schema_check CHECK ((oldest_release_schema ~ '^[0-9]{6}$'::text)),
    CONSTRAINT schema_contract_steps_what_check CHECK (((length(btrim(what)) >= 3) AND (length(btrim(what)) <= 500)))
);

--
-- Name: TABLE schema_contract_steps; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.schema_contract_steps IS 'Contract steps (§17): one row per migration that dropped or narrowed what earlier releases use, written by that migration. The highest oldest_release_schema is the contract floor: a release whose newest migration is below it cannot run on this schema. Never updated or deleted.';

--
-- Name: COLUMN schema_contract_steps.migration; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.schema_contract_steps.migration IS 'The contract migration''s number (000045).';

--
-- Name: COLUMN schema_contract_steps.oldest_release_schema; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.schema_contract_steps.oldest_release_schema IS 'The oldest release schema (a release''s newest migration number) that still runs on what this migration leaves: the first release that no longer used what it drops.';

--
-- Name: COLUMN schema_contract_steps.what; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.schema_contract_steps.what IS 'What the migration dropped or narrowed, in a sentence (no personal data).';

--
-- Name: COLUMN schema_contract_steps.recorded_at; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.schema_contract_steps.recorded_at IS 'When the migration was applied.';

--
-- Name: settings; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.settings (
    key character varying(64) NOT NULL,
    value_type character varying(16) NOT NULL,
    default_value jsonb,
    min_value numeric,
    max_value numeric,
    allowed_values jsonb,
    nullable boolean DEFAULT false NOT NULL,
    description text NOT NULL,
    max_length integer,
    CONSTRAINT settings_allowed_values_check CHECK (((allowed_values IS NULL) OR (jsonb_typeof(allowed_values) = 'array'::text))),
    CONSTRAINT settings_bounded CHECK (
CASE value_type
    WHEN 'integer'::text THEN ((min_value IS NOT NULL) AND (max_value IS NOT NULL) AND (min_value <= max_value) AND (min_value = trunc(min_value)) AND (max_value = trunc(max_value)) AND (min_value >= ('-2147483648'::integer)::numeric) AND (max_value <= (2147483647)::numeric))
    WHEN 'number'::text THEN ((min_value IS NOT NULL) AND (max_value IS NOT NULL) AND (min_value <= max_value))
    WHEN 'text'::text THEN (max_length IS NOT NULL)
    WHEN 'enum'::text THEN (allowed_values IS NOT NULL)
    WHEN 'json'::text THEN ((allowed_values IS NOT NULL) AND (max_length IS NOT NULL))
    ELSE true
END),
    CONSTRAINT settings_key_check CHECK (((key)::text ~ '^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$'::text)),
    CONSTRAINT settings_max_length_check CHECK (((max_length IS NULL) OR ((max_length >= 1) AND (max_length <= 10000)))),
    CONSTRAINT settings_value_type_check CHECK (((value_type)::text = ANY ((ARRAY['integer'::character varying, 'number'::character varying, 'text'::character varying, 'boolean'::character varying, 'enum'::character varying, 'json'::character varying])::text[])))
);

--
-- Name: TABLE settings; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.settings IS 'Catalogue of hot settings (§12.3): type, bounds and default of each key. Values live in settings_versions; secrets, DSNs, field names, portal identity, CIDRs and cutover mode are never here.';

--
-- Name: COLUMN settings.default_value; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.settings.default_value IS 'Used when a version does not set the key; null with nullable = true means "not configured".';

--
-- Name: COLUMN settings.max_length; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.settings.max_length IS 'text: the longest value allowed; json: the longest value of each entry (its keys are allowed_values).';

--
-- Name: settings_versions_version_seq; Type: SEQUENCE; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.settings_versions ALTER COLUMN version ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME bitrix_sync.settings_versions_version_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: spare_budget_use; Type: TABLE; Schema: bitrix_sync; Owner: -
--

CREATE TABLE bitrix_sync.spare_budget_use (
    day date NOT NULL,
    db_user character varying(128) NOT NULL,
    holder character varying(200) NOT NULL,
    bucket character varying(200) NOT NULL,
    grants bigint NOT NULL,
    first_at timestamp with time zone NOT NULL,
    last_at timestamp with time zone NOT NULL,
    CONSTRAINT spare_budget_use_check CHECK ((last_at >= first_at)),
    CONSTRAINT spare_budget_use_grants_check CHECK ((grants > 0))
);

--
-- Name: TABLE spare_budget_use; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TABLE bitrix_sync.spare_budget_use IS 'Who took the spare budget of the CRM limiter, and when: one row per day, database login (session_user), holder (the caller''s own label) and bucket, with the number of slots granted and the first and last grant. Written by acquire_spare_crm_request (security definer); one row a day per process and login, kept.';

--
-- Name: COLUMN spare_budget_use.db_user; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.spare_budget_use.db_user IS 'The database login that called acquire_spare_crm_request.';

--
-- Name: COLUMN spare_budget_use.holder; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON COLUMN bitrix_sync.spare_budget_use.holder IS 'The holder the caller named (e.g. host:pid:audit, diagnose:host:pid).';

--
-- Name: state_edges; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.state_edges AS
 SELECT e.machine,
    e.from_state,
    e.to_state,
    e.event
   FROM ( VALUES ('sync_queue'::text,'pending'::text,'leased'::text,'claim'::text), ('sync_queue'::text,'retry_wait'::text,'leased'::text,'claim'::text), ('sync_queue'::text,'leased'::text,'processed'::text,'complete'::text), ('sync_queue'::text,'leased'::text,'retry_wait'::text,'retry'::text), ('sync_queue'::text,'leased'::text,'dead_letter'::text,'dead_letter'::text), ('sync_queue'::text,'leased'::text,'cancelled'::text,'cancel'::text), ('sync_queue'::text,'leased'::text,'pending'::text,'release'::text), ('sync_queue'::text,'retry_wait'::text,'pending'::text,'newer_intent'::text), ('sync_queue'::text,'pending'::text,'cancelled'::text,'cancel'::text), ('sync_queue'::text,'retry_wait'::text,'cancelled'::text,'cancel'::text), ('workflow'::text,'created'::text,'running'::text,'start'::text), ('workflow'::text,'created'::text,'cancelled'::text,'cancel'::text), ('workflow'::text,'running'::text,'waiting_crm'::text,'await_crm'::text), ('workflow'::text,'running'::text,'waiting_retry'::text,'schedule_retry'::text), ('workflow'::text,'running'::text,'waiting_manual'::text,'need_manual'::text), ('workflow'::text,'running'::text,'succeeded'::text,'succeed'::text), ('workflow'::text,'running'::text,'failed'::text,'fail'::text), ('workflow'::text,'running'::text,'cancelled'::text,'cancel'::text), ('workflow'::text,'waiting_crm'::text,'running'::text,'crm_replied'::text), ('workflow'::text,'waiting_crm'::text,'failed'::text,'fail'::text), ('workflow'::text,'waiting_crm'::text,'cancelled'::text,'cancel'::text), ('workflow'::text,'waiting_retry'::text,'running'::text,'retry_due'::text), ('workflow'::text,'waiting_retry'::text,'failed'::text,'fail'::text), ('workflow'::text,'waiting_retry'::text,'cancelled'::text,'cancel'::text), ('workflow'::text,'waiting_manual'::text,'running'::text,'manual_resume'::text), ('workflow'::text,'waiting_manual'::text,'failed'::text,'fail'::text), ('workflow'::text,'waiting_manual'::text,'cancelled'::text,'cancel'::text), ('workflow'::text,'failed'::text,'waiting_retry'::text,'requeue'::text), ('command'::text,'pending'::text,'leased'::text,'claim'::text), ('command'::text,'pending'::text,'dead_letter'::text,'abandon'::text), ('command'::text,'leased'::text,'in_flight'::text,'send'::text), ('command'::text,'leased'::text,'pending'::text,'release'::text), ('command'::text,'leased'::text,'retry_wait'::text,'retry'::text), ('command'::text,'leased'::text,'dead_letter'::text,'dead_letter'::text), ('command'::text,'in_flight'::text,'succeeded'::text,'complete'::text), ('command'::text,'in_flight'::text,'retry_wait'::text,'retry'::text), ('command'::text,'in_flight'::text,'uncertain'::text,'no_reply'::text), ('command'::text,'in_flight'::text,'dead_letter'::text,'dead_letter'::text), ('command'::text,'retry_wait'::text,'pending'::text,'due'::text), ('command'::text,'retry_wait'::text,'dead_letter'::text,'abandon'::text), ('command'::text,'uncertain'::text,'reconcile'::text,'reconcile'::text), ('command'::text,'reconcile'::text,'succeeded'::text,'complete'::text), ('command'::text,'reconcile'::text,'retry_wait'::text,'retry'::text), ('command'::text,'reconcile'::text,'dead_letter'::text,'dead_letter'::text), ('webhook'::text,'received'::text,'coalesced'::text,'coalesce'::text), ('webhook'::text,'received'::text,'processing'::text,'claim'::text), ('webhook'::text,'retry_wait'::text,'processing'::text,'claim'::text), ('webhook'::text,'processing'::text,'processed'::text,'complete'::text), ('webhook'::text,'processing'::text,'retry_wait'::text,'retry'::text), ('webhook'::text,'processing'::text,'dead_letter'::text,'dead_letter'::text), ('webhook'::text,'coalesced'::text,'processed'::text,'covered'::text), ('mapping'::text,'active'::text,'closed'::text,'close'::text), ('mapping'::text,'active'::text,'broken'::text,'mark_broken'::text), ('alert'::text,'open'::text,'resolved'::text,'resolve'::text), ('alert'::text,'open'::text,'closed'::text,'close'::text), ('alert'::text,'open'::text,'remote_missing'::text,'remote_missing'::text), ('rebind'::text,'requested'::text,'in_progress'::text,'start'::text), ('rebind'::text,'requested'::text,'cancelled'::text,'cancel'::text), ('rebind'::text,'requested'::text,'failed'::text,'fail'::text), ('rebind'::text,'in_progress'::text,'succeeded'::text,'succeed'::text), ('rebind'::text,'in_progress'::text,'failed'::text,'fail'::text), ('rebind'::text,'in_progress'::text,'cancelled'::text,'cancel'::text), ('settings'::text,'draft'::text,'validated'::text,'validate'::text), ('settings'::text,'draft'::text,'rejected'::text,'validate'::text), ('settings'::text,'validated'::text,'active'::text,'activate'::text), ('settings'::text,'active'::text,'superseded'::text,'supersede'::text)) e(machine, from_state, to_state, event);

--
-- Name: VIEW state_edges; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.state_edges IS 'Every legal state transition of every machine, named by its event. The guard triggers and docs/state-machines.md follow this list.';

--
-- Name: status_alert_mirror; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.status_alert_mirror AS
 SELECT a.crm_sync_status AS mirror_status,
    count(*) AS count,
    (EXTRACT(epoch FROM (now() - min(a.updated_at))))::bigint AS oldest_age_sec
   FROM bitrix_sync.business_alerts a
  WHERE ((a.crm_sync_status)::text <> 'synced'::text)
  GROUP BY a.crm_sync_status;

--
-- Name: VIEW status_alert_mirror; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.status_alert_mirror IS 'Business alerts whose smart-process item is behind: pending (a change not yet sent, e.g. alerts.entity_type_id unset or an unanswered add being looked up) and failed (could not be mirrored; see technical_dead_letters).';

--
-- Name: status_alerts; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.status_alerts AS
 SELECT a.alert_type,
    a.severity,
    count(*) AS open_count,
    count(*) FILTER (WHERE (a.first_occurred_at < (now() - make_interval(hours => ( SELECT ((bitrix_sync._active_setting('alerts.sla_hours'::text) #>> '{}'::text[]))::integer AS int4))))) AS sla_overdue
   FROM bitrix_sync.business_alerts a
  WHERE ((a.status)::text = 'open'::text)
  GROUP BY a.alert_type, a.severity;

--
-- Name: VIEW status_alerts; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.status_alerts IS 'Open business alerts by type and severity, with how many are past the SLA.';

--
-- Name: status_audit; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.status_audit AS
 SELECT s.last_run_mode AS mode,
    s.last_run_status AS status,
    s.last_run_started_at,
    s.last_success_at,
    s.last_all_success_at,
    s.last_error_code,
    s.last_audited,
    s.last_requests,
    s.last_links,
    s.last_overdue,
    s.registered_after_id,
    s.registered_cycle_seen,
    s.registered_cycle_total,
    s.registered_cycle_finished_at,
    ( SELECT count(*) AS count
           FROM bitrix_sync.drift_findings) AS open_findings,
    s.users_round_started_at,
    s.users_round_ended_at
   FROM bitrix_sync.audit_state s;

--
-- Name: VIEW status_audit; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.status_audit IS 'The convergence audit at a glance: the last run (mode, status, when, counts, error code), the last success and full run, links overdue, where the scan of registered Contacts is, how many findings are open, and when the sampled runs'' round over the users (the user kinds) started and when the last one ended.';

--
-- Name: status_commands; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.status_commands AS
 SELECT c.command_type,
    c.status,
    count(*) AS count,
    (EXTRACT(epoch FROM (now() - min(c.created_at))))::bigint AS oldest_age_sec
   FROM bitrix_sync.crm_commands c
  WHERE ((c.status)::text <> 'succeeded'::text)
  GROUP BY c.command_type, c.status;

--
-- Name: VIEW status_commands; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.status_commands IS 'Unfinished and dead-lettered CRM commands by type and status.';

--
-- Name: status_dead_letters; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.status_dead_letters AS
 SELECT d.source,
    d.operation,
    d.error_code,
    count(*) AS count,
    (EXTRACT(epoch FROM (now() - min(d.created_at))))::bigint AS oldest_age_sec
   FROM bitrix_sync.technical_dead_letters d
  WHERE (d.resolved_at IS NULL)
  GROUP BY d.source, d.operation, d.error_code;

--
-- Name: VIEW status_dead_letters; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.status_dead_letters IS 'Open technical dead letters by source, operation and safe code.';

--
-- Name: status_drift; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.status_drift AS
 SELECT f.user_id,
    f.contact_id,
    f.kind,
    f.detected_at,
    f.last_seen_at,
    f.details,
    f.repair_requested_at,
    f.repair_intent,
        CASE
            WHEN (f.user_id IS NULL) THEN 'manual'::text
            ELSE bitrix_sync._drift_repair_intent(ARRAY[(f.kind)::text], bitrix_sync._app_user_eligible(f.user_id))
        END AS repair
   FROM bitrix_sync.drift_findings f;

--
-- Name: VIEW status_drift; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.status_drift IS 'Silent drift the convergence audit found, one row per user (or Contact without a user id) and kind: since when, last seen, safe details, whether a repair was recorded, and the intent repair_drift would record for this kind (manual: a person clears it in the CRM). Rows disappear when an audit finds them in step.';

--
-- Name: status_held_links; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.status_held_links AS
 SELECT count(*) AS count,
    (COALESCE(EXTRACT(epoch FROM (now() - min(m.held_at))), (0)::numeric))::bigint AS oldest_age_sec
   FROM bitrix_sync.entity_external_mapping m
  WHERE (((m.status)::text = 'active'::text) AND (m.held_at IS NOT NULL) AND (m.hold_released_at IS NULL));

--
-- Name: VIEW status_held_links; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.status_held_links IS 'Status (§14): active links made by phone alone whose CRM-master fields are held back (mapping.hold_after_phone_link), with the oldest hold''s age. Counts only.';

--
-- Name: sync_queue_journal; Type: TABLE; Schema: han_app; Owner: -
--

CREATE TABLE han_app.sync_queue_journal (
    task_type text NOT NULL,
    user_id uuid NOT NULL,
    reason text NOT NULL,
    source_updated_at timestamp with time zone,
    recorded_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
)
WITH (autovacuum_vacuum_threshold='1000', autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_insert_threshold='100000');

--
-- Name: TABLE sync_queue_journal; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON TABLE han_app.sync_queue_journal IS 'Intents recorded by han_app.enqueue_contact_sync() in the App''s transaction and not yet folded into han_app.sync_queue by bitrix_sync.fold_intent_journal() (before every claim). No key or index on purpose: it is appended by the App''s writes and taken whole.';

--
-- Name: COLUMN sync_queue_journal.task_type; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue_journal.task_type IS 'contact.map_or_create, contact.update or contact.deactivate, as the trigger decided.';

--
-- Name: COLUMN sync_queue_journal.user_id; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue_journal.user_id IS 'user_identity.id of the user the intent is about.';

--
-- Name: COLUMN sync_queue_journal.reason; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue_journal.reason IS 'Why the trigger recorded it (identity_phone_changed, profile_created, ...): the queue payload''s reason.';

--
-- Name: COLUMN sync_queue_journal.source_updated_at; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue_journal.source_updated_at IS 'updated_at of the App row that fired the trigger.';

--
-- Name: COLUMN sync_queue_journal.recorded_at; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.sync_queue_journal.recorded_at IS 'When the trigger ran (clock time, after the App row''s lock): the queue row''s created_at and first due time.';

--
-- Name: status_queue; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.status_queue AS
 SELECT g.status,
    (sum(g.count))::bigint AS count,
    (EXTRACT(epoch FROM (now() - min(g.oldest_at))))::bigint AS oldest_age_sec
   FROM ( SELECT q.status,
            count(*) AS count,
            min(q.created_at) AS oldest_at
           FROM han_app.sync_queue q
          WHERE ((q.status)::text = ANY ((ARRAY['pending'::character varying, 'leased'::character varying, 'retry_wait'::character varying, 'dead_letter'::character varying])::text[]))
          GROUP BY q.status
        UNION ALL
         SELECT 'pending'::character varying(16) AS "varchar",
            count(*) AS count,
            min(j.recorded_at) AS min
           FROM han_app.sync_queue_journal j
         HAVING (count(*) > 0)) g
  GROUP BY g.status;

--
-- Name: VIEW status_queue; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.status_queue IS 'han_app.sync_queue depth and oldest age by live status (pending, leased, retry_wait) and dead_letter, with the intents still in han_app.sync_queue_journal counted as pending; processed and cancelled rows are history, not depth.';

--
-- Name: status_reconciliation; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.status_reconciliation AS
 SELECT r.job_type,
    r.watermark,
    r.overlap,
    r.last_run_started_at,
    r.last_success_at,
    r.last_run_status,
    r.last_error_code,
    r.last_scanned,
    r.last_updated,
    r.last_recovered,
    r.recovered_baseline,
    r.failed_runs,
    r.retry_at
   FROM bitrix_sync.reconciliation_cursors r;

--
-- Name: VIEW status_reconciliation; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.status_reconciliation IS 'The reconciliation runs'' cursors (§10.2, §10.3) as an admin reads them: watermark, last run and its counts, last success, runs failed in a row and when a failed one runs again; no lease.';

--
-- Name: status_recovered_spikes; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.status_recovered_spikes AS
 SELECT s.job_type,
    s.run_started_at,
    s.recorded_at,
    s.recovered,
    s.mapped,
    s.baseline
   FROM bitrix_sync.reconciliation_spikes s
  ORDER BY s.id DESC;

--
-- Name: VIEW status_recovered_spikes; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.status_recovered_spikes IS 'Reconciliation runs that recovered a spike of Contacts without a webhook (§10.2), newest first: when the run started, when it found the spike, how many it recovered of how many changed linked Contacts, and the usual value it was compared with (docs/runbook.md, BitrixSyncWebhooksPossiblyLost).';

--
-- Name: status_refused_sources; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.status_refused_sources AS
 SELECT e.source_ip,
    e.receiver,
    e.refusals,
    e.first_seen_at,
    e.last_seen_at,
    (e.first_seen_at > (now() - '1 day'::interval)) AS new
   FROM bitrix_sync.refused_sources e
  WHERE (e.last_seen_at >= (now() - '30 days'::interval))
  ORDER BY e.first_seen_at DESC, e.source_ip, e.receiver;

--
-- Name: VIEW status_refused_sources; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.status_refused_sources IS 'The journal of source addresses the public proxy refused (reason source_ip), newest first, for the runbook (docs/runbook.md, BitrixSyncWebhookSourcesRefused): per address and receiver route (contact, alert, none: any other path), how many refusals, first and last seen, and whether it is new (first seen within a day). Never a query, body or token.';

--
-- Name: status_schema; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.status_schema AS
 SELECT split_part(m.filename, '.'::text, 1) AS newest_migration,
    m.date AS migrated_at,
    ( SELECT count(*) AS count
           FROM graphile_migrate.migrations) AS migrations_applied,
    s.oldest_release_schema AS contract_floor,
    s.migration AS contract_step,
    s.what AS contract_what
   FROM (( SELECT g.filename,
            g.date
           FROM graphile_migrate.migrations g
          ORDER BY g.filename DESC
         LIMIT 1) m
     LEFT JOIN LATERAL ( SELECT c.migration,
            c.oldest_release_schema,
            c.what
           FROM bitrix_sync.schema_contract_steps c
          ORDER BY c.oldest_release_schema DESC, c.migration DESC
         LIMIT 1) s ON (true));

--
-- Name: VIEW status_schema; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.status_schema IS 'The schema this database holds (one row): its newest applied migration (graphile-migrate records the number), when it was applied, how many are applied, and the contract floor: the oldest release schema (a release''s newest migration) that may still run here, with the contract step that set it (null: no migration has contracted, every release from its own schema on runs). Read by readiness, the status document, the schema metric and preflight.';

--
-- Name: status_webhooks; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.status_webhooks AS
 SELECT w.receiver,
    w.status,
    count(*) AS count,
    (EXTRACT(epoch FROM (now() - min(w.received_at))))::bigint AS oldest_age_sec
   FROM bitrix_sync.webhook_inbox w
  WHERE ((w.status)::text <> 'processed'::text)
  GROUP BY w.receiver, w.status;

--
-- Name: VIEW status_webhooks; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.status_webhooks IS 'Unprocessed webhook inbox rows by receiver and status (webhook lag).';

--
-- Name: status_workflows; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.status_workflows AS
 SELECT w.workflow_type,
    w.state,
    count(*) AS count,
    (EXTRACT(epoch FROM (now() - min(w.created_at))))::bigint AS oldest_age_sec
   FROM bitrix_sync.workflow_instances w
  WHERE ((w.state)::text <> ALL ((ARRAY['succeeded'::character varying, 'failed'::character varying, 'cancelled'::character varying])::text[]))
  GROUP BY w.workflow_type, w.state;

--
-- Name: VIEW status_workflows; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.status_workflows IS 'Active workflows by type and state, with the oldest age.';

--
-- Name: stuck_commands; Type: VIEW; Schema: bitrix_sync; Owner: -
--

CREATE VIEW bitrix_sync.stuck_commands AS
 SELECT c.id,
    c.command_type,
    c.status,
    c.attempt_count,
    c.last_error_code,
    c.last_http_status,
    c.last_bitrix_error,
    c.created_at,
    c.updated_at,
    c.workflow_id,
    w.state AS workflow_state,
    w.current_step,
    w.last_error_code AS workflow_error,
    c.alert_id
   FROM (bitrix_sync.crm_commands c
     LEFT JOIN bitrix_sync.workflow_instances w ON ((w.id = c.workflow_id)))
  WHERE ((c.status)::text = ANY ('{uncertain,reconcile,retry_wait,in_flight}'::text[]));

--
-- Name: VIEW stuck_commands; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON VIEW bitrix_sync.stuck_commands IS 'Admin (docs/runbook.md, BitrixSyncCommandsUncertain): CRM commands that are uncertain, being reconciled, waiting for a retry or in flight, with their workflow''s state and step; safe codes only.';

--
-- Name: sync_pauses_id_seq; Type: SEQUENCE; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.sync_pauses ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME bitrix_sync.sync_pauses_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: technical_dead_letters_id_seq; Type: SEQUENCE; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.technical_dead_letters ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME bitrix_sync.technical_dead_letters_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: webhook_inbox_id_seq; Type: SEQUENCE; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.webhook_inbox ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME bitrix_sync.webhook_inbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: _private_job_queues; Type: TABLE; Schema: graphile_worker; Owner: -
--

CREATE TABLE graphile_worker._private_job_queues (
    id integer NOT NULL,
    queue_name text NOT NULL,
    locked_at timestamp with time zone,
    locked_by text,
    is_available boolean GENERATED ALWAYS AS ((locked_at IS NULL)) STORED NOT NULL,
    CONSTRAINT job_queues_queue_name_check CHECK ((length(queue_name) <= 128))
);

--
-- Name: _private_known_crontabs; Type: TABLE; Schema: graphile_worker; Owner: -
--

CREATE TABLE graphile_worker._private_known_crontabs (
    identifier text NOT NULL,
    known_since timestamp with time zone NOT NULL,
    last_execution timestamp with time zone
);

--
-- Name: _private_tasks; Type: TABLE; Schema: graphile_worker; Owner: -
--

CREATE TABLE graphile_worker._private_tasks (
    id integer NOT NULL,
    identifier text NOT NULL,
    CONSTRAINT tasks_identifier_check CHECK ((length(identifier) <= 128))
);

--
-- Name: job_queues_id_seq; Type: SEQUENCE; Schema: graphile_worker; Owner: -
--

ALTER TABLE graphile_worker._private_job_queues ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME graphile_worker.job_queues_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: jobs; Type: VIEW; Schema: graphile_worker; Owner: -
--

CREATE VIEW graphile_worker.jobs AS
 SELECT jobs.id,
    job_queues.queue_name,
    tasks.identifier AS task_identifier,
    jobs.priority,
    jobs.run_at,
    jobs.attempts,
    jobs.max_attempts,
    jobs.last_error,
    jobs.created_at,
    jobs.updated_at,
    jobs.key,
    jobs.locked_at,
    jobs.locked_by,
    jobs.revision,
    jobs.flags
   FROM ((graphile_worker._private_jobs jobs
     JOIN graphile_worker._private_tasks tasks ON ((tasks.id = jobs.task_id)))
     LEFT JOIN graphile_worker._private_job_queues job_queues ON ((job_queues.id = jobs.job_queue_id)));

--
-- Name: jobs_id_seq1; Type: SEQUENCE; Schema: graphile_worker; Owner: -
--

ALTER TABLE graphile_worker._private_jobs ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME graphile_worker.jobs_id_seq1
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: migrations; Type: TABLE; Schema: graphile_worker; Owner: -
--

CREATE TABLE graphile_worker.migrations (
    id integer NOT NULL,
    ts timestamp with time zone DEFAULT now() NOT NULL,
    breaking boolean DEFAULT false NOT NULL
);

--
-- Name: tasks_id_seq; Type: SEQUENCE; Schema: graphile_worker; Owner: -
--

ALTER TABLE graphile_worker._private_tasks ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME graphile_worker.tasks_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: client_profile; Type: TABLE; Schema: han_app; Owner: -
--

CREATE TABLE han_app.client_profile (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    user_id uuid NOT NULL,
    full_name text,
    citizenship text,
    email text,
    foreign_phone text,
    record_status character varying(16) DEFAULT 'active'::character varying NOT NULL,
    source_updated_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT client_profile_record_status_check CHECK (((record_status)::text = ANY ((ARRAY['active'::character varying, 'inactive'::character varying, 'deleted'::character varying])::text[])))
);

--
-- Name: TABLE client_profile; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON TABLE han_app.client_profile IS 'App client profile. full_name, citizenship, email are CRM-master (§3.1): written only by bitrix-sync.';

--
-- Name: COLUMN client_profile.source_updated_at; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.client_profile.source_updated_at IS 'CRM source timestamp of the CRM-master fields last applied.';

--
-- Name: user_identity; Type: TABLE; Schema: han_app; Owner: -
--

CREATE TABLE han_app.user_identity (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    phone_number character varying(16),
    record_status character varying(16) DEFAULT 'active'::character varying NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT user_identity_record_status_check CHECK (((record_status)::text = ANY ((ARRAY['active'::character varying, 'inactive'::character varying, 'deleted'::character varying])::text[])))
);

--
-- Name: TABLE user_identity; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON TABLE han_app.user_identity IS 'App user identity (Keycloak-backed). phone_number is App-master (§3.1).';

--
-- Name: COLUMN user_identity.phone_number; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON COLUMN han_app.user_identity.phone_number IS 'E.164 +7XXXXXXXXXX when valid; bitrix-sync never repairs it (§3.3).';

--
-- Name: business_alerts alert_number; Type: DEFAULT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.business_alerts ALTER COLUMN alert_number SET DEFAULT nextval('bitrix_sync.business_alert_number_seq'::regclass);

--
-- Name: admin_actions admin_actions_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.admin_actions
    ADD CONSTRAINT admin_actions_pkey PRIMARY KEY (id);

--
-- Name: audit_marks audit_marks_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.audit_marks
    ADD CONSTRAINT audit_marks_pkey PRIMARY KEY (mapping_id);

--
-- Name: audit_state audit_state_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.audit_state
    ADD CONSTRAINT audit_state_pkey PRIMARY KEY (singleton);

--
-- Name: business_alerts business_alerts_alert_number_key; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.business_alerts
    ADD CONSTRAINT business_alerts_alert_number_key UNIQUE (alert_number);

--
-- Name: business_alerts business_alerts_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.business_alerts
    ADD CONSTRAINT business_alerts_pkey PRIMARY KEY (id);

--
-- Name: contact_snapshots contact_snapshots_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.contact_snapshots
    ADD CONSTRAINT contact_snapshots_pkey PRIMARY KEY (contact_id);

--
-- Name: crm_commands crm_commands_command_type_check; Type: CHECK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.crm_commands
    ADD CONSTRAINT crm_commands_command_type_check CHECK (((command_type)::text = ANY ('{contact.find_by_phone,contact.find_by_user_id,contact.read,contact.add,contact.update,contact.list_changed,citizenship.list,alert.add,alert.update,alert.get,alert.list}'::text[]))) NOT VALID;

--
-- Name: crm_commands crm_commands_completed; Type: CHECK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.crm_commands
    ADD CONSTRAINT crm_commands_completed CHECK ((((status)::text = ANY ('{succeeded,dead_letter}'::text[])) = (completed_at IS NOT NULL))) NOT VALID;

--
-- Name: crm_commands crm_commands_lease; Type: CHECK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.crm_commands
    ADD CONSTRAINT crm_commands_lease CHECK ((((status)::text = ANY ('{leased,in_flight}'::text[])) = ((lease_token IS NOT NULL) AND (locked_until IS NOT NULL)))) NOT VALID;

--
-- Name: crm_commands crm_commands_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.crm_commands
    ADD CONSTRAINT crm_commands_pkey PRIMARY KEY (id);

--
-- Name: crm_commands crm_commands_status_check; Type: CHECK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.crm_commands
    ADD CONSTRAINT crm_commands_status_check CHECK (((status)::text = ANY ('{pending,leased,in_flight,succeeded,retry_wait,uncertain,reconcile,dead_letter}'::text[]))) NOT VALID;

--
-- Name: crm_commands crm_commands_trace_context_chk; Type: CHECK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.crm_commands
    ADD CONSTRAINT crm_commands_trace_context_chk CHECK ((trace_context ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'::text)) NOT VALID;

--
-- Name: crm_contract_probes crm_contract_probes_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.crm_contract_probes
    ADD CONSTRAINT crm_contract_probes_pkey PRIMARY KEY (id);

--
-- Name: crm_inflight_slots crm_inflight_slots_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.crm_inflight_slots
    ADD CONSTRAINT crm_inflight_slots_pkey PRIMARY KEY (slot_id);

--
-- Name: crm_method_blocks crm_method_blocks_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.crm_method_blocks
    ADD CONSTRAINT crm_method_blocks_pkey PRIMARY KEY (bucket, method);

--
-- Name: crm_rate_buckets crm_rate_buckets_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.crm_rate_buckets
    ADD CONSTRAINT crm_rate_buckets_pkey PRIMARY KEY (bucket);

--
-- Name: cutover cutover_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.cutover
    ADD CONSTRAINT cutover_pkey PRIMARY KEY (singleton);

--
-- Name: drift_findings drift_findings_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.drift_findings
    ADD CONSTRAINT drift_findings_pkey PRIMARY KEY (id);

--
-- Name: drift_repairs drift_repairs_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.drift_repairs
    ADD CONSTRAINT drift_repairs_pkey PRIMARY KEY (id);

--
-- Name: entity_external_mapping entity_external_mapping_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.entity_external_mapping
    ADD CONSTRAINT entity_external_mapping_pkey PRIMARY KEY (id);

--
-- Name: entity_external_mapping entity_external_mapping_status_check; Type: CHECK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.entity_external_mapping
    ADD CONSTRAINT entity_external_mapping_status_check CHECK (((status)::text = ANY ('{active,closed,broken}'::text[]))) NOT VALID;

--
-- Name: metric_event_totals metric_event_totals_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.metric_event_totals
    ADD CONSTRAINT metric_event_totals_pkey PRIMARY KEY (machine, kind, from_state, to_state);

--
-- Name: privilege_decisions privilege_decisions_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.privilege_decisions
    ADD CONSTRAINT privilege_decisions_pkey PRIMARY KEY (object_type, object_name);

--
-- Name: rebind_requests rebind_requests_cancel_audit; Type: CHECK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.rebind_requests
    ADD CONSTRAINT rebind_requests_cancel_audit CHECK ((((status)::text = 'cancelled'::text) OR ((cancel_reason IS NULL) AND (cancelled_by IS NULL)))) NOT VALID;

--
-- Name: rebind_requests rebind_requests_outcome_code; Type: CHECK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.rebind_requests
    ADD CONSTRAINT rebind_requests_outcome_code CHECK (((outcome IS NULL) OR ((outcome)::text ~ '^[a-z][a-z0-9_]{2,63}$'::text))) NOT VALID;

--
-- Name: rebind_requests rebind_requests_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.rebind_requests
    ADD CONSTRAINT rebind_requests_pkey PRIMARY KEY (id);

--
-- Name: reconciliation_cursors reconciliation_cursors_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.reconciliation_cursors
    ADD CONSTRAINT reconciliation_cursors_pkey PRIMARY KEY (job_type);

--
-- Name: reconciliation_spikes reconciliation_spikes_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.reconciliation_spikes
    ADD CONSTRAINT reconciliation_spikes_pkey PRIMARY KEY (id);

--
-- Name: refused_sources refused_sources_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.refused_sources
    ADD CONSTRAINT refused_sources_pkey PRIMARY KEY (source_ip, receiver);

--
-- Name: retention_sweeps retention_sweeps_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.retention_sweeps
    ADD CONSTRAINT retention_sweeps_pkey PRIMARY KEY (table_name);

--
-- Name: schema_contract_steps schema_contract_steps_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.schema_contract_steps
    ADD CONSTRAINT schema_contract_steps_pkey PRIMARY KEY (migration);

--
-- Name: settings settings_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.settings
    ADD CONSTRAINT settings_pkey PRIMARY KEY (key);

--
-- Name: settings_versions settings_versions_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.settings_versions
    ADD CONSTRAINT settings_versions_pkey PRIMARY KEY (version);

--
-- Name: spare_budget_use spare_budget_use_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.spare_budget_use
    ADD CONSTRAINT spare_budget_use_pkey PRIMARY KEY (day, db_user, holder, bucket);

--
-- Name: sync_pauses sync_pauses_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.sync_pauses
    ADD CONSTRAINT sync_pauses_pkey PRIMARY KEY (id);

--
-- Name: technical_dead_letters technical_dead_letters_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.technical_dead_letters
    ADD CONSTRAINT technical_dead_letters_pkey PRIMARY KEY (id);

--
-- Name: webhook_inbox webhook_inbox_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.webhook_inbox
    ADD CONSTRAINT webhook_inbox_pkey PRIMARY KEY (id);

--
-- Name: webhook_inbox webhook_inbox_receiver_check; Type: CHECK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.webhook_inbox
    ADD CONSTRAINT webhook_inbox_receiver_check CHECK (((receiver)::text = ANY ('{contact,alert}'::text[]))) NOT VALID;

--
-- Name: webhook_inbox webhook_inbox_status_check; Type: CHECK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.webhook_inbox
    ADD CONSTRAINT webhook_inbox_status_check CHECK (((status)::text = ANY ('{received,coalesced,processing,processed,retry_wait,dead_letter}'::text[]))) NOT VALID;

--
-- Name: webhook_inbox webhook_inbox_trace_context_chk; Type: CHECK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE bitrix_sync.webhook_inbox
    ADD CONSTRAINT webhook_inbox_trace_context_chk CHECK ((trace_context ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'::text)) NOT VALID;

--
-- Name: workflow_instances workflow_instances_pkey; Type: CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.workflow_instances
    ADD CONSTRAINT workflow_instances_pkey PRIMARY KEY (id);

--
-- Name: _private_job_queues job_queues_pkey1; Type: CONSTRAINT; Schema: graphile_worker; Owner: -
--

ALTER TABLE ONLY graphile_worker._private_job_queues
    ADD CONSTRAINT job_queues_pkey1 PRIMARY KEY (id);

--
-- Name: _private_job_queues job_queues_queue_name_key; Type: CONSTRAINT; Schema: graphile_worker; Owner: -
--

ALTER TABLE ONLY graphile_worker._private_job_queues
    ADD CONSTRAINT job_queues_queue_name_key UNIQUE (queue_name);

--
-- Name: _private_jobs jobs_key_key1; Type: CONSTRAINT; Schema: graphile_worker; Owner: -
--

ALTER TABLE ONLY graphile_worker._private_jobs
    ADD CONSTRAINT jobs_key_key1 UNIQUE (key);

--
-- Name: _private_jobs jobs_pkey1; Type: CONSTRAINT; Schema: graphile_worker; Owner: -
--

ALTER TABLE ONLY graphile_worker._private_jobs
    ADD CONSTRAINT jobs_pkey1 PRIMARY KEY (id);

--
-- Name: _private_known_crontabs known_crontabs_pkey; Type: CONSTRAINT; Schema: graphile_worker; Owner: -
--

ALTER TABLE ONLY graphile_worker._private_known_crontabs
    ADD CONSTRAINT known_crontabs_pkey PRIMARY KEY (identifier);

--
-- Name: migrations migrations_pkey; Type: CONSTRAINT; Schema: graphile_worker; Owner: -
--

ALTER TABLE ONLY graphile_worker.migrations
    ADD CONSTRAINT migrations_pkey PRIMARY KEY (id);

--
-- Name: _private_tasks tasks_identifier_key; Type: CONSTRAINT; Schema: graphile_worker; Owner: -
--

ALTER TABLE ONLY graphile_worker._private_tasks
    ADD CONSTRAINT tasks_identifier_key UNIQUE (identifier);

--
-- Name: _private_tasks tasks_pkey; Type: CONSTRAINT; Schema: graphile_worker; Owner: -
--

ALTER TABLE ONLY graphile_worker._private_tasks
    ADD CONSTRAINT tasks_pkey PRIMARY KEY (id);

--
-- Name: client_profile client_profile_pkey; Type: CONSTRAINT; Schema: han_app; Owner: -
--

ALTER TABLE ONLY han_app.client_profile
    ADD CONSTRAINT client_profile_pkey PRIMARY KEY (id);

--
-- Name: client_profile client_profile_user_id_key; Type: CONSTRAINT; Schema: han_app; Owner: -
--

ALTER TABLE ONLY han_app.client_profile
    ADD CONSTRAINT client_profile_user_id_key UNIQUE (user_id);

--
-- Name: sync_queue sync_queue_pkey; Type: CONSTRAINT; Schema: han_app; Owner: -
--

ALTER TABLE ONLY han_app.sync_queue
    ADD CONSTRAINT sync_queue_pkey PRIMARY KEY (id);

--
-- Name: user_identity user_identity_pkey; Type: CONSTRAINT; Schema: han_app; Owner: -
--

ALTER TABLE ONLY han_app.user_identity
    ADD CONSTRAINT user_identity_pkey PRIMARY KEY (id);

--
-- Name: admin_actions_workflow_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX admin_actions_workflow_idx ON bitrix_sync.admin_actions USING btree (workflow_id, performed_at);

--
-- Name: audit_marks_due_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX audit_marks_due_idx ON bitrix_sync.audit_marks USING btree (audited_at, mapping_id);

--
-- Name: INDEX audit_marks_due_idx; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.audit_marks_due_idx IS 'The convergence audit''s order: least recently compared first (audit_sample), and the overdue ones (claim_audit_run, finish_audit_run).';

--
-- Name: business_alerts_item_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX business_alerts_item_idx ON bitrix_sync.business_alerts USING btree (item_id) WHERE (item_id IS NOT NULL);

--
-- Name: business_alerts_open_uq; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE UNIQUE INDEX business_alerts_open_uq ON bitrix_sync.business_alerts USING btree (alert_type, fingerprint) WHERE ((status)::text = 'open'::text);

--
-- Name: business_alerts_unmirrored_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX business_alerts_unmirrored_idx ON bitrix_sync.business_alerts USING btree (id) WHERE ((crm_sync_status)::text <> 'synced'::text);

--
-- Name: INDEX business_alerts_unmirrored_idx; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.business_alerts_unmirrored_idx IS 'Alerts whose smart-process item is behind (mirroring, status_alert_mirror); alerts are never deleted.';

--
-- Name: contact_snapshots_user_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX contact_snapshots_user_idx ON bitrix_sync.contact_snapshots USING btree (user_id);

--
-- Name: crm_commands_alert_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX crm_commands_alert_idx ON bitrix_sync.crm_commands USING btree (alert_id, id) WHERE (alert_id IS NOT NULL);

--
-- Name: INDEX crm_commands_alert_idx; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.crm_commands_alert_idx IS 'The commands of one business alert (mirroring, lookups, requeue).';

--
-- Name: crm_commands_claim_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX crm_commands_claim_idx ON bitrix_sync.crm_commands USING btree (next_attempt_at, id) WHERE ((status)::text = ANY ((ARRAY['pending'::character varying, 'retry_wait'::character varying])::text[]));

--
-- Name: crm_commands_completed_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX crm_commands_completed_idx ON bitrix_sync.crm_commands USING btree (completed_at) WHERE (completed_at IS NOT NULL);

--
-- Name: INDEX crm_commands_completed_idx; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.crm_commands_completed_idx IS 'Retention: finished commands by age.';

--
-- Name: crm_commands_lease_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX crm_commands_lease_idx ON bitrix_sync.crm_commands USING btree (locked_until) WHERE ((status)::text = ANY ((ARRAY['leased'::character varying, 'in_flight'::character varying])::text[]));

--
-- Name: crm_commands_live_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX crm_commands_live_idx ON bitrix_sync.crm_commands USING btree (command_type, status) WHERE ((status)::text <> 'succeeded'::text);

--
-- Name: INDEX crm_commands_live_idx; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.crm_commands_live_idx IS 'status_commands and the pump read unfinished and dead-lettered commands only.';

--
-- Name: crm_commands_one_active_per_workflow_uq; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE UNIQUE INDEX crm_commands_one_active_per_workflow_uq ON bitrix_sync.crm_commands USING btree (workflow_id) WHERE ((alert_id IS NULL) AND ((status)::text = ANY ((ARRAY['pending'::character varying, 'leased'::character varying, 'in_flight'::character varying, 'retry_wait'::character varying])::text[])));

--
-- Name: crm_commands_workflow_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX crm_commands_workflow_idx ON bitrix_sync.crm_commands USING btree (workflow_id, id);

--
-- Name: crm_inflight_slots_bucket_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX crm_inflight_slots_bucket_idx ON bitrix_sync.crm_inflight_slots USING btree (bucket, expires_at);

--
-- Name: drift_findings_subject_uq; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE UNIQUE INDEX drift_findings_subject_uq ON bitrix_sync.drift_findings USING btree (kind, COALESCE((user_id)::text, ('contact:'::text || (contact_id)::text)));

--
-- Name: INDEX drift_findings_subject_uq; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.drift_findings_subject_uq IS 'One finding per user (or Contact without a user) and kind.';

--
-- Name: drift_findings_user_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX drift_findings_user_idx ON bitrix_sync.drift_findings USING btree (user_id);

--
-- Name: INDEX drift_findings_user_idx; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.drift_findings_user_idx IS 'The findings of one user (explain_user, repair_drift, the audit''s clearing).';

--
-- Name: drift_repairs_user_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX drift_repairs_user_idx ON bitrix_sync.drift_repairs USING btree (user_id, requested_at);

--
-- Name: INDEX drift_repairs_user_idx; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.drift_repairs_user_idx IS 'The repairs of one user, in time order (explain_user).';

--
-- Name: entity_external_mapping_active_entity_uq; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE UNIQUE INDEX entity_external_mapping_active_entity_uq ON bitrix_sync.entity_external_mapping USING btree (external_system, entity_type, entity_id) WHERE ((status)::text = 'active'::text);

--
-- Name: entity_external_mapping_active_external_uq; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE UNIQUE INDEX entity_external_mapping_active_external_uq ON bitrix_sync.entity_external_mapping USING btree (external_system, external_entity_type, external_id) WHERE ((status)::text = 'active'::text);

--
-- Name: entity_external_mapping_entity_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX entity_external_mapping_entity_idx ON bitrix_sync.entity_external_mapping USING btree (entity_id, opened_at DESC);

--
-- Name: entity_external_mapping_external_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX entity_external_mapping_external_idx ON bitrix_sync.entity_external_mapping USING btree (external_id);

--
-- Name: entity_external_mapping_held_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX entity_external_mapping_held_idx ON bitrix_sync.entity_external_mapping USING btree (held_at) WHERE (((status)::text = 'active'::text) AND (held_at IS NOT NULL) AND (hold_released_at IS NULL));

--
-- Name: entity_external_mapping_workflow_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX entity_external_mapping_workflow_idx ON bitrix_sync.entity_external_mapping USING btree (workflow_id) WHERE (workflow_id IS NOT NULL);

--
-- Name: INDEX entity_external_mapping_workflow_idx; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.entity_external_mapping_workflow_idx IS 'Retention keeps the workflows that opened or closed a mapping (its audit).';

--
-- Name: rebind_requests_one_open_per_target_uq; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE UNIQUE INDEX rebind_requests_one_open_per_target_uq ON bitrix_sync.rebind_requests USING btree (target_contact_id) WHERE ((status)::text = ANY ((ARRAY['requested'::character varying, 'in_progress'::character varying])::text[]));

--
-- Name: INDEX rebind_requests_one_open_per_target_uq; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.rebind_requests_one_open_per_target_uq IS 'A Contact is the target of at most one open rebind request (request_bitrix_contact_rebind raises BS009).';

--
-- Name: rebind_requests_one_open_per_user_uq; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE UNIQUE INDEX rebind_requests_one_open_per_user_uq ON bitrix_sync.rebind_requests USING btree (user_id) WHERE ((status)::text = ANY ((ARRAY['requested'::character varying, 'in_progress'::character varying])::text[]));

--
-- Name: rebind_requests_workflow_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX rebind_requests_workflow_idx ON bitrix_sync.rebind_requests USING btree (workflow_id) WHERE (workflow_id IS NOT NULL);

--
-- Name: INDEX rebind_requests_workflow_idx; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.rebind_requests_workflow_idx IS 'Retention keeps the workflows of rebind requests (their audit, and the foreign key).';

--
-- Name: refused_sources_last_seen_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX refused_sources_last_seen_idx ON bitrix_sync.refused_sources USING btree (last_seen_at);

--
-- Name: settings_versions_one_active_uq; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE UNIQUE INDEX settings_versions_one_active_uq ON bitrix_sync.settings_versions USING btree ((true)) WHERE ((status)::text = 'active'::text);

--
-- Name: sync_pauses_one_open_uq; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE UNIQUE INDEX sync_pauses_one_open_uq ON bitrix_sync.sync_pauses USING btree ((true)) WHERE (resumed_at IS NULL);

--
-- Name: INDEX sync_pauses_one_open_uq; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.sync_pauses_one_open_uq IS 'At most one open pause; also the index the claim gate (sync_paused()) reads.';

--
-- Name: technical_dead_letters_open_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX technical_dead_letters_open_idx ON bitrix_sync.technical_dead_letters USING btree (created_at) WHERE (resolved_at IS NULL);

--
-- Name: webhook_inbox_claim_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX webhook_inbox_claim_idx ON bitrix_sync.webhook_inbox USING btree (next_attempt_at, id) WHERE ((status)::text = ANY ((ARRAY['received'::character varying, 'retry_wait'::character varying])::text[]));

--
-- Name: webhook_inbox_coalesced_into_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX webhook_inbox_coalesced_into_idx ON bitrix_sync.webhook_inbox USING btree (coalesced_into) WHERE (coalesced_into IS NOT NULL);

--
-- Name: INDEX webhook_inbox_coalesced_into_idx; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.webhook_inbox_coalesced_into_idx IS 'The events coalesced into one (complete_webhook, and the foreign key check when retention deletes).';

--
-- Name: webhook_inbox_event_uq; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE UNIQUE INDEX webhook_inbox_event_uq ON bitrix_sync.webhook_inbox USING btree (receiver, event_id) WHERE (event_id IS NOT NULL);

--
-- Name: webhook_inbox_live_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX webhook_inbox_live_idx ON bitrix_sync.webhook_inbox USING btree (receiver, status) WHERE ((status)::text <> 'processed'::text);

--
-- Name: INDEX webhook_inbox_live_idx; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.webhook_inbox_live_idx IS 'status_webhooks reads unprocessed rows only.';

--
-- Name: webhook_inbox_one_processing_per_entity_uq; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE UNIQUE INDEX webhook_inbox_one_processing_per_entity_uq ON bitrix_sync.webhook_inbox USING btree (receiver, entity_id) WHERE ((status)::text = 'processing'::text);

--
-- Name: INDEX webhook_inbox_one_processing_per_entity_uq; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.webhook_inbox_one_processing_per_entity_uq IS 'At most one event of an entity is being processed at any time, whichever worker holds it.';

--
-- Name: webhook_inbox_pending_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX webhook_inbox_pending_idx ON bitrix_sync.webhook_inbox USING btree (receiver, entity_id, id) WHERE ((status)::text = ANY ((ARRAY['received'::character varying, 'retry_wait'::character varying, 'processing'::character varying])::text[]));

--
-- Name: webhook_inbox_processed_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX webhook_inbox_processed_idx ON bitrix_sync.webhook_inbox USING btree (processed_at) WHERE ((status)::text = 'processed'::text);

--
-- Name: INDEX webhook_inbox_processed_idx; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.webhook_inbox_processed_idx IS 'Retention: processed events by age.';

--
-- Name: webhook_inbox_registration_inactive_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX webhook_inbox_registration_inactive_idx ON bitrix_sync.webhook_inbox USING btree (entity_id, received_at) WHERE ((outcome)::text = 'registration_inactive'::text);

--
-- Name: INDEX webhook_inbox_registration_inactive_idx; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.webhook_inbox_registration_inactive_idx IS '_read_again_after_link: the Contact''s robot calls answered registration_inactive before the service turned its flag on again.';

--
-- Name: webhook_inbox_unknown_mapping_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX webhook_inbox_unknown_mapping_idx ON bitrix_sync.webhook_inbox USING btree (entity_id, received_at) WHERE ((outcome)::text = 'unknown_mapping'::text);

--
-- Name: INDEX webhook_inbox_unknown_mapping_idx; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.webhook_inbox_unknown_mapping_idx IS 'open_mapping: the Contact''s robot calls answered unknown_mapping while its link was being made.';

--
-- Name: workflow_instances_finished_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX workflow_instances_finished_idx ON bitrix_sync.workflow_instances USING btree (finished_at) WHERE ((state)::text = ANY ((ARRAY['succeeded'::character varying, 'failed'::character varying, 'cancelled'::character varying])::text[]));

--
-- Name: INDEX workflow_instances_finished_idx; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON INDEX bitrix_sync.workflow_instances_finished_idx IS 'Retention: finished workflows by age.';

--
-- Name: workflow_instances_one_active_per_user_uq; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE UNIQUE INDEX workflow_instances_one_active_per_user_uq ON bitrix_sync.workflow_instances USING btree (user_id) WHERE ((state)::text <> ALL ((ARRAY['succeeded'::character varying, 'failed'::character varying, 'cancelled'::character varying])::text[]));

--
-- Name: workflow_instances_runnable_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX workflow_instances_runnable_idx ON bitrix_sync.workflow_instances USING btree (next_attempt_at) WHERE ((state)::text = ANY ((ARRAY['created'::character varying, 'running'::character varying, 'waiting_retry'::character varying])::text[]));

--
-- Name: workflow_instances_user_idx; Type: INDEX; Schema: bitrix_sync; Owner: -
--

CREATE INDEX workflow_instances_user_idx ON bitrix_sync.workflow_instances USING btree (user_id, created_at DESC);

--
-- Name: jobs_main_index; Type: INDEX; Schema: graphile_worker; Owner: -
--

CREATE INDEX jobs_main_index ON graphile_worker._private_jobs USING btree (priority, run_at) INCLUDE (id, task_id, job_queue_id) WHERE (is_available = true);

--
-- Name: jobs_no_queue_index; Type: INDEX; Schema: graphile_worker; Owner: -
--

CREATE INDEX jobs_no_queue_index ON graphile_worker._private_jobs USING btree (priority, run_at) INCLUDE (id, task_id) WHERE ((is_available = true) AND (job_queue_id IS NULL));

--
-- Name: sync_queue_claim_live_idx; Type: INDEX; Schema: han_app; Owner: -
--

CREATE INDEX sync_queue_claim_live_idx ON han_app.sync_queue USING btree (status, next_attempt_at, created_at) WHERE ((status)::text = ANY ((ARRAY['pending'::character varying, 'leased'::character varying, 'retry_wait'::character varying, 'dead_letter'::character varying])::text[]));

--
-- Name: INDEX sync_queue_claim_live_idx; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON INDEX han_app.sync_queue_claim_live_idx IS 'Claim order (§6.1 columns status, next_attempt_at, created_at) over live intents only; finished rows are not indexed (issue 14).';

--
-- Name: sync_queue_dedup_active_uq; Type: INDEX; Schema: han_app; Owner: -
--

CREATE UNIQUE INDEX sync_queue_dedup_active_uq ON han_app.sync_queue USING btree (dedup_key) WHERE ((status)::text = ANY ((ARRAY['pending'::character varying, 'leased'::character varying, 'retry_wait'::character varying])::text[]));

--
-- Name: sync_queue_entity_idx; Type: INDEX; Schema: han_app; Owner: -
--

CREATE INDEX sync_queue_entity_idx ON han_app.sync_queue USING btree (entity_type, entity_id, created_at DESC);

--
-- Name: sync_queue_finished_idx; Type: INDEX; Schema: han_app; Owner: -
--

CREATE INDEX sync_queue_finished_idx ON han_app.sync_queue USING btree (completed_at) WHERE ((status)::text = ANY ((ARRAY['processed'::character varying, 'cancelled'::character varying, 'dead_letter'::character varying])::text[]));

--
-- Name: INDEX sync_queue_finished_idx; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON INDEX han_app.sync_queue_finished_idx IS 'Finished intents (processed, cancelled, dead_letter) by completion time: retention deletes the oldest first (bitrix_sync.delete_retention_batch(''queue'')).';

--
-- Name: sync_queue_lease_idx; Type: INDEX; Schema: han_app; Owner: -
--

CREATE INDEX sync_queue_lease_idx ON han_app.sync_queue USING btree (locked_until) WHERE ((status)::text = 'leased'::text);

--
-- Name: workflow_instances _100_guard_state; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _100_guard_state BEFORE UPDATE OF state ON bitrix_sync.workflow_instances FOR EACH ROW WHEN ((((old.state)::text IS DISTINCT FROM (new.state)::text) AND (((((old.state)::text || '>'::text) || (new.state)::text) = ANY ('{created>cancelled,created>running,failed>waiting_retry,running>cancelled,running>failed,running>succeeded,running>waiting_crm,running>waiting_manual,running>waiting_retry,waiting_crm>cancelled,waiting_crm>failed,waiting_crm>running,waiting_manual>cancelled,waiting_manual>failed,waiting_manual>running,waiting_retry>cancelled,waiting_retry>failed,waiting_retry>running}'::text[])) IS NOT TRUE))) EXECUTE FUNCTION bitrix_sync.tg_workflow_instances__guard_state('workflow', 'state');

--
-- Name: TRIGGER _100_guard_state ON workflow_instances; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _100_guard_state ON bitrix_sync.workflow_instances IS 'Refuses illegal workflow state changes (§7.1). The legal edges are compiled into WHEN: the function runs only for a change not on them.';

--
-- Name: business_alerts _100_guard_status; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _100_guard_status BEFORE UPDATE OF status ON bitrix_sync.business_alerts FOR EACH ROW WHEN ((((old.status)::text IS DISTINCT FROM (new.status)::text) AND (((((old.status)::text || '>'::text) || (new.status)::text) = ANY ('{open>closed,open>remote_missing,open>resolved}'::text[])) IS NOT TRUE))) EXECUTE FUNCTION bitrix_sync.tg__guard_transition('alert', 'status');

--
-- Name: TRIGGER _100_guard_status ON business_alerts; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _100_guard_status ON bitrix_sync.business_alerts IS 'Only open alerts change status. The legal edges are compiled into WHEN: the function runs only for a change not on them.';

--
-- Name: crm_commands _100_guard_status; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _100_guard_status BEFORE UPDATE OF status ON bitrix_sync.crm_commands FOR EACH ROW WHEN ((((old.status)::text IS DISTINCT FROM (new.status)::text) AND (((((old.status)::text || '>'::text) || (new.status)::text) = ANY ('{in_flight>dead_letter,in_flight>retry_wait,in_flight>succeeded,in_flight>uncertain,leased>dead_letter,leased>in_flight,leased>pending,leased>retry_wait,pending>dead_letter,pending>leased,reconcile>dead_letter,reconcile>retry_wait,reconcile>succeeded,retry_wait>dead_letter,retry_wait>pending,uncertain>reconcile}'::text[])) IS NOT TRUE))) EXECUTE FUNCTION bitrix_sync.tg__guard_transition('command', 'status');

--
-- Name: TRIGGER _100_guard_status ON crm_commands; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _100_guard_status ON bitrix_sync.crm_commands IS 'Refuses illegal command status changes (§7.2). The legal edges are compiled into WHEN: the function runs only for a change not on them.';

--
-- Name: entity_external_mapping _100_guard_status; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _100_guard_status BEFORE UPDATE OF status ON bitrix_sync.entity_external_mapping FOR EACH ROW WHEN ((((old.status)::text IS DISTINCT FROM (new.status)::text) AND (((((old.status)::text || '>'::text) || (new.status)::text) = ANY ('{active>broken,active>closed}'::text[])) IS NOT TRUE))) EXECUTE FUNCTION bitrix_sync.tg__guard_transition('mapping', 'status');

--
-- Name: TRIGGER _100_guard_status ON entity_external_mapping; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _100_guard_status ON bitrix_sync.entity_external_mapping IS 'closed and broken mappings are final. The legal edges are compiled into WHEN: the function runs only for a change not on them.';

--
-- Name: rebind_requests _100_guard_status; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _100_guard_status BEFORE UPDATE OF status ON bitrix_sync.rebind_requests FOR EACH ROW WHEN ((((old.status)::text IS DISTINCT FROM (new.status)::text) AND (((((old.status)::text || '>'::text) || (new.status)::text) = ANY ('{in_progress>cancelled,in_progress>failed,in_progress>succeeded,requested>cancelled,requested>failed,requested>in_progress}'::text[])) IS NOT TRUE))) EXECUTE FUNCTION bitrix_sync.tg__guard_transition('rebind', 'status');

--
-- Name: TRIGGER _100_guard_status ON rebind_requests; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _100_guard_status ON bitrix_sync.rebind_requests IS 'Refuses illegal rebind request status changes (§5.4). The legal edges are compiled into WHEN: the function runs only for a change not on them.';

--
-- Name: settings_versions _100_guard_status; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _100_guard_status BEFORE UPDATE OF status ON bitrix_sync.settings_versions FOR EACH ROW WHEN ((((old.status)::text IS DISTINCT FROM (new.status)::text) AND (((((old.status)::text || '>'::text) || (new.status)::text) = ANY ('{active>superseded,draft>rejected,draft>validated,validated>active}'::text[])) IS NOT TRUE))) EXECUTE FUNCTION bitrix_sync.tg__guard_transition('settings', 'status');

--
-- Name: TRIGGER _100_guard_status ON settings_versions; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _100_guard_status ON bitrix_sync.settings_versions IS 'Only validated versions become active (§12.3). The legal edges are compiled into WHEN: the function runs only for a change not on them.';

--
-- Name: webhook_inbox _100_guard_status; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _100_guard_status BEFORE UPDATE OF status ON bitrix_sync.webhook_inbox FOR EACH ROW WHEN ((((old.status)::text IS DISTINCT FROM (new.status)::text) AND (((((old.status)::text || '>'::text) || (new.status)::text) = ANY ('{coalesced>processed,processing>dead_letter,processing>processed,processing>retry_wait,received>coalesced,received>processing,retry_wait>processing}'::text[])) IS NOT TRUE))) EXECUTE FUNCTION bitrix_sync.tg__guard_transition('webhook', 'status');

--
-- Name: TRIGGER _100_guard_status ON webhook_inbox; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _100_guard_status ON bitrix_sync.webhook_inbox IS 'Refuses illegal webhook status changes (§7.3). The legal edges are compiled into WHEN: the function runs only for a change not on them.';

--
-- Name: business_alerts _110_initial_state; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _110_initial_state BEFORE INSERT ON bitrix_sync.business_alerts FOR EACH ROW WHEN ((((new.status)::text <> 'open'::text) OR ((new.crm_sync_status)::text <> 'pending'::text) OR (new.closed_at IS NOT NULL))) EXECUTE FUNCTION bitrix_sync.tg__refuse_insert_state('open, with its CRM mirror pending');

--
-- Name: TRIGGER _110_initial_state ON business_alerts; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _110_initial_state ON bitrix_sync.business_alerts IS 'Alerts open, and are mirrored into the CRM afterwards (§11).';

--
-- Name: crm_commands _110_initial_state; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _110_initial_state BEFORE INSERT ON bitrix_sync.crm_commands FOR EACH ROW WHEN ((((new.status)::text <> 'pending'::text) OR (new.lease_token IS NOT NULL) OR (new.sent_at IS NOT NULL) OR (new.completed_at IS NOT NULL))) EXECUTE FUNCTION bitrix_sync.tg__refuse_insert_state('pending, never sent, without a lease');

--
-- Name: TRIGGER _110_initial_state ON crm_commands; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _110_initial_state ON bitrix_sync.crm_commands IS 'Commands are issued pending (§7.2).';

--
-- Name: entity_external_mapping _110_initial_state; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _110_initial_state BEFORE INSERT ON bitrix_sync.entity_external_mapping FOR EACH ROW WHEN (((new.status)::text <> 'active'::text)) EXECUTE FUNCTION bitrix_sync.tg__refuse_insert_state('active');

--
-- Name: TRIGGER _110_initial_state ON entity_external_mapping; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _110_initial_state ON bitrix_sync.entity_external_mapping IS 'A link is opened active; it is closed or broken only by close_mapping (§6.3).';

--
-- Name: rebind_requests _110_initial_state; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _110_initial_state BEFORE INSERT ON bitrix_sync.rebind_requests FOR EACH ROW WHEN ((((new.status)::text <> 'requested'::text) OR (new.completed_at IS NOT NULL) OR (new.failure_code IS NOT NULL))) EXECUTE FUNCTION bitrix_sync.tg__refuse_insert_state('requested');

--
-- Name: TRIGGER _110_initial_state ON rebind_requests; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _110_initial_state ON bitrix_sync.rebind_requests IS 'Rebind requests start requested (§5.4).';

--
-- Name: settings_versions _110_initial_state; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _110_initial_state BEFORE INSERT ON bitrix_sync.settings_versions FOR EACH ROW WHEN ((((new.status)::text <> 'draft'::text) OR (new.validation_errors IS NOT NULL) OR (new.validated_at IS NOT NULL) OR (new.activated_by IS NOT NULL) OR (new.activated_at IS NOT NULL) OR (new.superseded_at IS NOT NULL) OR (new.validated_db_user IS NOT NULL) OR (new.activated_db_user IS NOT NULL))) EXECUTE FUNCTION bitrix_sync.tg__refuse_insert_state('draft, neither validated nor activated');

--
-- Name: TRIGGER _110_initial_state ON settings_versions; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _110_initial_state ON bitrix_sync.settings_versions IS 'A settings version starts as a draft and is validated before it can be activated (§12.3).';

--
-- Name: webhook_inbox _110_initial_state; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _110_initial_state BEFORE INSERT ON bitrix_sync.webhook_inbox FOR EACH ROW WHEN ((((new.status)::text <> 'received'::text) OR (new.lease_token IS NOT NULL) OR (new.coalesced_into IS NOT NULL) OR (new.processed_at IS NOT NULL))) EXECUTE FUNCTION bitrix_sync.tg__refuse_insert_state('received, without a lease');

--
-- Name: TRIGGER _110_initial_state ON webhook_inbox; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _110_initial_state ON bitrix_sync.webhook_inbox IS 'Webhooks are recorded received (§7.3).';

--
-- Name: workflow_instances _110_initial_state; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _110_initial_state BEFORE INSERT ON bitrix_sync.workflow_instances FOR EACH ROW WHEN ((((new.state)::text <> 'created'::text) OR (new.lease_token IS NOT NULL) OR (new.finished_at IS NOT NULL))) EXECUTE FUNCTION bitrix_sync.tg__refuse_insert_state('created, without a lease');

--
-- Name: TRIGGER _110_initial_state ON workflow_instances; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _110_initial_state ON bitrix_sync.workflow_instances IS 'Workflows start created (§7.1).';

--
-- Name: cutover _120_immutable; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _120_immutable BEFORE UPDATE ON bitrix_sync.cutover FOR EACH ROW EXECUTE FUNCTION bitrix_sync.tg__refuse_immutable_change('singleton', 'cutover_watermark', 'cancelled_count', 'performed_by', 'performed_at', 'performed_db_user');

--
-- Name: TRIGGER _120_immutable ON cutover; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _120_immutable ON bitrix_sync.cutover IS 'The cutover happens once (§17): moving the watermark would silently stop or replay App intake.';

--
-- Name: entity_external_mapping _120_immutable; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _120_immutable BEFORE UPDATE ON bitrix_sync.entity_external_mapping FOR EACH ROW EXECUTE FUNCTION bitrix_sync.tg__refuse_immutable_change('id', 'entity_type', 'entity_id', 'external_system', 'external_entity_type', 'external_id', 'opened_at', 'created_at');

--
-- Name: TRIGGER _120_immutable ON entity_external_mapping; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _120_immutable ON bitrix_sync.entity_external_mapping IS 'A link never changes its user or Contact: a new mapping is opened instead (§4).';

--
-- Name: rebind_requests _120_immutable; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _120_immutable BEFORE UPDATE ON bitrix_sync.rebind_requests FOR EACH ROW EXECUTE FUNCTION bitrix_sync.tg__refuse_immutable_change('id', 'user_id', 'previous_contact_id', 'target_contact_id', 'reason', 'operator_id', 'workflow_id', 'requested_at', 'requested_db_user');

--
-- Name: TRIGGER _120_immutable ON rebind_requests; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _120_immutable ON bitrix_sync.rebind_requests IS 'The request, its reason, its operator and the login that asked are audit (§5.4): only its progress changes.';

--
-- Name: schema_contract_steps _120_immutable; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _120_immutable BEFORE UPDATE ON bitrix_sync.schema_contract_steps FOR EACH ROW EXECUTE FUNCTION bitrix_sync.tg__refuse_immutable_change('migration', 'oldest_release_schema', 'what', 'recorded_at');

--
-- Name: TRIGGER _120_immutable ON schema_contract_steps; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _120_immutable ON bitrix_sync.schema_contract_steps IS 'A contract step is history: the migration, its floor and what it contracted never change.';

--
-- Name: settings_versions _120_immutable; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _120_immutable BEFORE UPDATE ON bitrix_sync.settings_versions FOR EACH ROW EXECUTE FUNCTION bitrix_sync.tg_settings_versions__freeze();

--
-- Name: TRIGGER _120_immutable ON settings_versions; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _120_immutable ON bitrix_sync.settings_versions IS 'Values and audit are history once a version leaves draft (§12.3).';

--
-- Name: sync_pauses _120_immutable; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _120_immutable BEFORE UPDATE ON bitrix_sync.sync_pauses FOR EACH ROW EXECUTE FUNCTION bitrix_sync.tg__refuse_immutable_change('id', 'paused_at', 'paused_by', 'paused_db_user', 'pause_reason');

--
-- Name: TRIGGER _120_immutable ON sync_pauses; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _120_immutable ON bitrix_sync.sync_pauses IS 'Who paused, when and why never change: the paused interval is what the retry horizon leaves out.';

--
-- Name: sync_pauses _121_resumed_once; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _121_resumed_once BEFORE UPDATE ON bitrix_sync.sync_pauses FOR EACH ROW WHEN ((old.resumed_at IS NOT NULL)) EXECUTE FUNCTION bitrix_sync.tg__refuse_immutable_change('resumed_at', 'resumed_by', 'resumed_db_user', 'resume_reason');

--
-- Name: TRIGGER _121_resumed_once ON sync_pauses; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _121_resumed_once ON bitrix_sync.sync_pauses IS 'A pause ends once: who resumed, when and why never change afterwards.';

--
-- Name: admin_actions _200_forbid_delete; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _200_forbid_delete BEFORE DELETE ON bitrix_sync.admin_actions FOR EACH ROW EXECUTE FUNCTION bitrix_sync.tg__forbid_delete();

--
-- Name: TRIGGER _200_forbid_delete ON admin_actions; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _200_forbid_delete ON bitrix_sync.admin_actions IS 'The admin audit is never deleted.';

--
-- Name: cutover _200_forbid_delete; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _200_forbid_delete BEFORE DELETE ON bitrix_sync.cutover FOR EACH ROW EXECUTE FUNCTION bitrix_sync.tg__forbid_delete();

--
-- Name: TRIGGER _200_forbid_delete ON cutover; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _200_forbid_delete ON bitrix_sync.cutover IS 'The cutover record is kept: deleting it would close the processing gate.';

--
-- Name: drift_repairs _200_forbid_delete; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _200_forbid_delete BEFORE DELETE ON bitrix_sync.drift_repairs FOR EACH ROW EXECUTE FUNCTION bitrix_sync.tg__forbid_delete();

--
-- Name: TRIGGER _200_forbid_delete ON drift_repairs; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _200_forbid_delete ON bitrix_sync.drift_repairs IS 'The audit of drift repairs is never deleted.';

--
-- Name: entity_external_mapping _200_forbid_delete; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _200_forbid_delete BEFORE DELETE ON bitrix_sync.entity_external_mapping FOR EACH ROW EXECUTE FUNCTION bitrix_sync.tg__forbid_delete();

--
-- Name: TRIGGER _200_forbid_delete ON entity_external_mapping; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _200_forbid_delete ON bitrix_sync.entity_external_mapping IS 'Mapping history is never deleted (§4).';

--
-- Name: rebind_requests _200_forbid_delete; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _200_forbid_delete BEFORE DELETE ON bitrix_sync.rebind_requests FOR EACH ROW EXECUTE FUNCTION bitrix_sync.tg__forbid_delete();

--
-- Name: TRIGGER _200_forbid_delete ON rebind_requests; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _200_forbid_delete ON bitrix_sync.rebind_requests IS 'Rebind audit is never deleted.';

--
-- Name: schema_contract_steps _200_forbid_delete; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _200_forbid_delete BEFORE DELETE ON bitrix_sync.schema_contract_steps FOR EACH ROW EXECUTE FUNCTION bitrix_sync.tg__forbid_delete();

--
-- Name: TRIGGER _200_forbid_delete ON schema_contract_steps; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _200_forbid_delete ON bitrix_sync.schema_contract_steps IS 'Contract steps are kept: deleting one would let a release the step excludes start on a schema it cannot use.';

--
-- Name: settings_versions _200_forbid_delete; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _200_forbid_delete BEFORE DELETE ON bitrix_sync.settings_versions FOR EACH ROW EXECUTE FUNCTION bitrix_sync.tg__forbid_delete();

--
-- Name: TRIGGER _200_forbid_delete ON settings_versions; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _200_forbid_delete ON bitrix_sync.settings_versions IS 'Settings audit is never deleted.';

--
-- Name: sync_pauses _200_forbid_delete; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _200_forbid_delete BEFORE DELETE ON bitrix_sync.sync_pauses FOR EACH ROW EXECUTE FUNCTION bitrix_sync.tg__forbid_delete();

--
-- Name: TRIGGER _200_forbid_delete ON sync_pauses; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _200_forbid_delete ON bitrix_sync.sync_pauses IS 'Pauses are kept: deleting one would give its rows back the paused time against their retry horizon.';

--
-- Name: workflow_instances _300_close_rebind_request; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _300_close_rebind_request AFTER UPDATE OF state ON bitrix_sync.workflow_instances FOR EACH ROW WHEN ((((new.workflow_type)::text = 'contact.rebind'::text) AND ((new.state)::text = ANY ('{succeeded,failed,cancelled}'::text[])) AND ((old.state)::text <> ALL ('{succeeded,failed,cancelled}'::text[])))) EXECUTE FUNCTION bitrix_sync.tg_workflow_instances__close_rebind_request();

--
-- Name: TRIGGER _300_close_rebind_request ON workflow_instances; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _300_close_rebind_request ON bitrix_sync.workflow_instances IS 'Closes the rebind request of a contact.rebind workflow that finished without complete_rebind (§5.4, issue 11).';

--
-- Name: workflow_instances _400_start_held_intent; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _400_start_held_intent AFTER UPDATE OF state ON bitrix_sync.workflow_instances FOR EACH ROW WHEN (((new.held_intent_type IS NOT NULL) AND ((new.state)::text = ANY ('{succeeded,failed,cancelled}'::text[])) AND ((old.state)::text <> ALL ('{succeeded,failed,cancelled}'::text[])))) EXECUTE FUNCTION bitrix_sync.tg_workflow_instances__start_held_intent();

--
-- Name: TRIGGER _400_start_held_intent ON workflow_instances; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _400_start_held_intent ON bitrix_sync.workflow_instances IS 'Starts the App intent held during a rebind once the rebind has finished (after _300_close_rebind_request).';

--
-- Name: webhook_inbox _900_count_coalesced; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _900_count_coalesced AFTER UPDATE OF status ON bitrix_sync.webhook_inbox FOR EACH ROW WHEN ((((new.status)::text = 'coalesced'::text) AND ((old.status)::text IS DISTINCT FROM (new.status)::text))) EXECUTE FUNCTION bitrix_sync.tg_webhook_inbox__count_coalesced();

--
-- Name: TRIGGER _900_count_coalesced ON webhook_inbox; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _900_count_coalesced ON bitrix_sync.webhook_inbox IS 'Counts webhook events covered by another event''s read (received -> coalesced) for /metrics.';

--
-- Name: technical_dead_letters _900_count_dead_letter; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _900_count_dead_letter AFTER INSERT ON bitrix_sync.technical_dead_letters FOR EACH ROW EXECUTE FUNCTION bitrix_sync.tg_technical_dead_letters__count();

--
-- Name: TRIGGER _900_count_dead_letter ON technical_dead_letters; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _900_count_dead_letter ON bitrix_sync.technical_dead_letters IS 'Counts each new technical dead letter for /metrics (bitrix_sync.metric_events).';

--
-- Name: business_alerts _900_count_remote_missing; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _900_count_remote_missing AFTER UPDATE OF status ON bitrix_sync.business_alerts FOR EACH ROW WHEN ((((new.status)::text = 'remote_missing'::text) AND ((old.status)::text IS DISTINCT FROM (new.status)::text))) EXECUTE FUNCTION bitrix_sync.tg_business_alerts__count_remote_missing();

--
-- Name: TRIGGER _900_count_remote_missing ON business_alerts; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _900_count_remote_missing ON bitrix_sync.business_alerts IS 'Counts each alert whose smart-process item was deleted in the CRM (remote_missing) for /metrics (bitrix_sync.metric_events).';

--
-- Name: crm_commands _900_count_transition; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _900_count_transition AFTER UPDATE ON bitrix_sync.crm_commands REFERENCING OLD TABLE AS bitrix_sync_old_rows NEW TABLE AS bitrix_sync_new_rows FOR EACH STATEMENT EXECUTE FUNCTION bitrix_sync.tg_crm_commands__count_transition();

--
-- Name: TRIGGER _900_count_transition ON crm_commands; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _900_count_transition ON bitrix_sync.crm_commands IS 'Counts the committed command transitions of each UPDATE statement for /metrics (bitrix_sync.metric_events).';

--
-- Name: workflow_instances _900_count_transition; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _900_count_transition AFTER UPDATE OF state ON bitrix_sync.workflow_instances FOR EACH ROW WHEN (((old.state)::text IS DISTINCT FROM (new.state)::text)) EXECUTE FUNCTION bitrix_sync.tg_workflow_instances__count_transition();

--
-- Name: TRIGGER _900_count_transition ON workflow_instances; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _900_count_transition ON bitrix_sync.workflow_instances IS 'Counts each committed workflow transition for /metrics (bitrix_sync.metric_events).';

--
-- Name: audit_state _900_set_updated_at; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _900_set_updated_at BEFORE UPDATE ON bitrix_sync.audit_state FOR EACH ROW EXECUTE FUNCTION bitrix_sync.tg__set_updated_at();

--
-- Name: TRIGGER _900_set_updated_at ON audit_state; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _900_set_updated_at ON bitrix_sync.audit_state IS 'Stamps updated_at on every change.';

--
-- Name: business_alerts _900_set_updated_at; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _900_set_updated_at BEFORE UPDATE ON bitrix_sync.business_alerts FOR EACH ROW WHEN ((NOT (new.updated_at IS DISTINCT FROM old.updated_at))) EXECUTE FUNCTION bitrix_sync.tg__set_updated_at();

--
-- Name: TRIGGER _900_set_updated_at ON business_alerts; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _900_set_updated_at ON bitrix_sync.business_alerts IS 'Stamps updated_at on every change whose statement did not set it (WHEN: it kept its old value).';

--
-- Name: contact_snapshots _900_set_updated_at; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _900_set_updated_at BEFORE UPDATE ON bitrix_sync.contact_snapshots FOR EACH ROW WHEN ((NOT (new.updated_at IS DISTINCT FROM old.updated_at))) EXECUTE FUNCTION bitrix_sync.tg__set_updated_at();

--
-- Name: TRIGGER _900_set_updated_at ON contact_snapshots; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _900_set_updated_at ON bitrix_sync.contact_snapshots IS 'Stamps updated_at on every change whose statement did not set it (WHEN: it kept its old value).';

--
-- Name: crm_commands _900_set_updated_at; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _900_set_updated_at BEFORE UPDATE ON bitrix_sync.crm_commands FOR EACH ROW WHEN ((NOT (new.updated_at IS DISTINCT FROM old.updated_at))) EXECUTE FUNCTION bitrix_sync.tg__set_updated_at();

--
-- Name: TRIGGER _900_set_updated_at ON crm_commands; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _900_set_updated_at ON bitrix_sync.crm_commands IS 'Stamps updated_at on every change whose statement did not set it (WHEN: it kept its old value).';

--
-- Name: entity_external_mapping _900_set_updated_at; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _900_set_updated_at BEFORE UPDATE ON bitrix_sync.entity_external_mapping FOR EACH ROW WHEN ((NOT (new.updated_at IS DISTINCT FROM old.updated_at))) EXECUTE FUNCTION bitrix_sync.tg__set_updated_at();

--
-- Name: TRIGGER _900_set_updated_at ON entity_external_mapping; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _900_set_updated_at ON bitrix_sync.entity_external_mapping IS 'Stamps updated_at on every change whose statement did not set it (WHEN: it kept its old value).';

--
-- Name: rebind_requests _900_set_updated_at; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _900_set_updated_at BEFORE UPDATE ON bitrix_sync.rebind_requests FOR EACH ROW WHEN ((NOT (new.updated_at IS DISTINCT FROM old.updated_at))) EXECUTE FUNCTION bitrix_sync.tg__set_updated_at();

--
-- Name: TRIGGER _900_set_updated_at ON rebind_requests; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _900_set_updated_at ON bitrix_sync.rebind_requests IS 'Stamps updated_at on every change whose statement did not set it (WHEN: it kept its old value).';

--
-- Name: reconciliation_cursors _900_set_updated_at; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _900_set_updated_at BEFORE UPDATE ON bitrix_sync.reconciliation_cursors FOR EACH ROW WHEN ((NOT (new.updated_at IS DISTINCT FROM old.updated_at))) EXECUTE FUNCTION bitrix_sync.tg__set_updated_at();

--
-- Name: TRIGGER _900_set_updated_at ON reconciliation_cursors; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _900_set_updated_at ON bitrix_sync.reconciliation_cursors IS 'Stamps updated_at on every change whose statement did not set it (WHEN: it kept its old value).';

--
-- Name: workflow_instances _900_set_updated_at; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _900_set_updated_at BEFORE UPDATE ON bitrix_sync.workflow_instances FOR EACH ROW WHEN ((NOT (new.updated_at IS DISTINCT FROM old.updated_at))) EXECUTE FUNCTION bitrix_sync.tg__set_updated_at();

--
-- Name: TRIGGER _900_set_updated_at ON workflow_instances; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _900_set_updated_at ON bitrix_sync.workflow_instances IS 'Stamps updated_at on every change whose statement did not set it (WHEN: it kept its old value).';

--
-- Name: entity_external_mapping _950_audit_mark; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _950_audit_mark AFTER INSERT OR UPDATE OF status ON bitrix_sync.entity_external_mapping FOR EACH ROW EXECUTE FUNCTION bitrix_sync.tg_entity_external_mapping__audit_mark();

--
-- Name: TRIGGER _950_audit_mark ON entity_external_mapping; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _950_audit_mark ON bitrix_sync.entity_external_mapping IS 'Keeps one audit mark per active link (bitrix_sync.audit_marks).';

--
-- Name: workflow_instances _980_check_attempt_count; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _980_check_attempt_count BEFORE INSERT OR UPDATE OF attempt_count ON bitrix_sync.workflow_instances FOR EACH ROW WHEN ((NOT (new.attempt_count >= 0))) EXECUTE FUNCTION bitrix_sync.tg__refuse_check('workflow_instances_attempt_count_check', 'attempt_count is 0 or more.');

ALTER TABLE bitrix_sync.workflow_instances ENABLE ALWAYS TRIGGER _980_check_attempt_count;

--
-- Name: TRIGGER _980_check_attempt_count ON workflow_instances; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _980_check_attempt_count ON bitrix_sync.workflow_instances IS 'Check workflow_instances_attempt_count_check: attempts are counted up from 0.';

--
-- Name: workflow_instances _980_check_finished; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _980_check_finished BEFORE INSERT OR UPDATE OF state, finished_at ON bitrix_sync.workflow_instances FOR EACH ROW WHEN ((NOT (((new.state)::text = ANY ('{succeeded,failed,cancelled}'::text[])) = (new.finished_at IS NOT NULL)))) EXECUTE FUNCTION bitrix_sync.tg__refuse_check('workflow_instances_finished', 'finished_at is set exactly when the state is succeeded, failed or cancelled.');

ALTER TABLE bitrix_sync.workflow_instances ENABLE ALWAYS TRIGGER _980_check_finished;

--
-- Name: TRIGGER _980_check_finished ON workflow_instances; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _980_check_finished ON bitrix_sync.workflow_instances IS 'Check workflow_instances_finished: a workflow has finished_at exactly in a final state (retention sweeps by it).';

--
-- Name: workflow_instances _980_check_held_intent; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _980_check_held_intent BEFORE INSERT OR UPDATE OF held_intent_type ON bitrix_sync.workflow_instances FOR EACH ROW WHEN ((NOT ((new.held_intent_type IS NULL) OR ((new.held_intent_type)::text = ANY ('{contact.map_or_create,contact.update,contact.deactivate}'::text[]))))) EXECUTE FUNCTION bitrix_sync.tg__refuse_check('workflow_instances_held_intent', 'held_intent_type is empty, contact.map_or_create, contact.update or contact.deactivate (a rebind is never held).');

ALTER TABLE bitrix_sync.workflow_instances ENABLE ALWAYS TRIGGER _980_check_held_intent;

--
-- Name: TRIGGER _980_check_held_intent ON workflow_instances; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _980_check_held_intent ON bitrix_sync.workflow_instances IS 'Check workflow_instances_held_intent: the intent held behind a running workflow is one an intent can carry (§6.1).';

--
-- Name: workflow_instances _980_check_intent_type; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _980_check_intent_type BEFORE INSERT OR UPDATE OF intent_type ON bitrix_sync.workflow_instances FOR EACH ROW WHEN ((NOT ((new.intent_type)::text = ANY ('{contact.map_or_create,contact.update,contact.deactivate,contact.rebind}'::text[])))) EXECUTE FUNCTION bitrix_sync.tg__refuse_check('workflow_instances_intent_type_check', 'intent_type is contact.map_or_create, contact.update, contact.deactivate or contact.rebind.');

ALTER TABLE bitrix_sync.workflow_instances ENABLE ALWAYS TRIGGER _980_check_intent_type;

--
-- Name: TRIGGER _980_check_intent_type ON workflow_instances; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _980_check_intent_type ON bitrix_sync.workflow_instances IS 'Check workflow_instances_intent_type_check: the intent a workflow serves is one of the four kinds (§6.1).';

--
-- Name: workflow_instances _980_check_lease; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _980_check_lease BEFORE INSERT OR UPDATE OF lease_token, locked_until ON bitrix_sync.workflow_instances FOR EACH ROW WHEN ((NOT ((new.lease_token IS NULL) = (new.locked_until IS NULL)))) EXECUTE FUNCTION bitrix_sync.tg__refuse_check('workflow_instances_lease', 'lease_token and locked_until are set together or cleared together.');

ALTER TABLE bitrix_sync.workflow_instances ENABLE ALWAYS TRIGGER _980_check_lease;

--
-- Name: TRIGGER _980_check_lease ON workflow_instances; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _980_check_lease ON bitrix_sync.workflow_instances IS 'Check workflow_instances_lease: a lease has a token and an expiry, or neither (§7.1).';

--
-- Name: workflow_instances _980_check_processed_revision; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _980_check_processed_revision BEFORE INSERT OR UPDATE OF processed_revision ON bitrix_sync.workflow_instances FOR EACH ROW WHEN ((NOT (new.processed_revision >= 0))) EXECUTE FUNCTION bitrix_sync.tg__refuse_check('workflow_instances_processed_revision_check', 'processed_revision is 0 or more.');

ALTER TABLE bitrix_sync.workflow_instances ENABLE ALWAYS TRIGGER _980_check_processed_revision;

--
-- Name: TRIGGER _980_check_processed_revision ON workflow_instances; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _980_check_processed_revision ON bitrix_sync.workflow_instances IS 'Check workflow_instances_processed_revision_check: the revision a pass has served, 0 before the first.';

--
-- Name: workflow_instances _980_check_revision; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _980_check_revision BEFORE INSERT OR UPDATE OF revision ON bitrix_sync.workflow_instances FOR EACH ROW WHEN ((NOT (new.revision >= 1))) EXECUTE FUNCTION bitrix_sync.tg__refuse_check('workflow_instances_revision_check', 'revision is 1 or more.');

ALTER TABLE bitrix_sync.workflow_instances ENABLE ALWAYS TRIGGER _980_check_revision;

--
-- Name: TRIGGER _980_check_revision ON workflow_instances; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _980_check_revision ON bitrix_sync.workflow_instances IS 'Check workflow_instances_revision_check: a workflow starts at revision 1 and a joined intent raises it (§6.2).';

--
-- Name: workflow_instances _980_check_state; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _980_check_state BEFORE INSERT OR UPDATE OF state ON bitrix_sync.workflow_instances FOR EACH ROW WHEN ((NOT ((new.state)::text = ANY ('{created,running,waiting_crm,waiting_retry,waiting_manual,succeeded,failed,cancelled}'::text[])))) EXECUTE FUNCTION bitrix_sync.tg__refuse_check('workflow_instances_state_check', 'state is one of the workflow machine''s eight states (docs/state-machines.md).');

ALTER TABLE bitrix_sync.workflow_instances ENABLE ALWAYS TRIGGER _980_check_state;

--
-- Name: TRIGGER _980_check_state ON workflow_instances; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _980_check_state ON bitrix_sync.workflow_instances IS 'Check workflow_instances_state_check: the machine''s eight states (§7.1).';

--
-- Name: workflow_instances _980_check_trace_context; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _980_check_trace_context BEFORE INSERT OR UPDATE OF trace_context ON bitrix_sync.workflow_instances FOR EACH ROW WHEN ((NOT (new.trace_context ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'::text))) EXECUTE FUNCTION bitrix_sync.tg__refuse_check('workflow_instances_trace_context_chk', 'trace_context is empty or a W3C traceparent of version 00.');

ALTER TABLE bitrix_sync.workflow_instances ENABLE ALWAYS TRIGGER _980_check_trace_context;

--
-- Name: TRIGGER _980_check_trace_context ON workflow_instances; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _980_check_trace_context ON bitrix_sync.workflow_instances IS 'Check workflow_instances_trace_context_chk: only a well-formed traceparent is stored and handed on (§16).';

--
-- Name: workflow_instances _980_check_workflow_type; Type: TRIGGER; Schema: bitrix_sync; Owner: -
--

CREATE TRIGGER _980_check_workflow_type BEFORE INSERT OR UPDATE OF workflow_type ON bitrix_sync.workflow_instances FOR EACH ROW WHEN ((NOT ((new.workflow_type)::text = ANY ('{contact.map_or_create,contact.update,contact.deactivate,contact.rebind}'::text[])))) EXECUTE FUNCTION bitrix_sync.tg__refuse_check('workflow_instances_workflow_type_check', 'workflow_type is contact.map_or_create, contact.update, contact.deactivate or contact.rebind.');

ALTER TABLE bitrix_sync.workflow_instances ENABLE ALWAYS TRIGGER _980_check_workflow_type;

--
-- Name: TRIGGER _980_check_workflow_type ON workflow_instances; Type: COMMENT; Schema: bitrix_sync; Owner: -
--

COMMENT ON TRIGGER _980_check_workflow_type ON bitrix_sync.workflow_instances IS 'Check workflow_instances_workflow_type_check: the four workflow kinds (§7.1).';

--
-- Name: sync_queue _100_guard_status; Type: TRIGGER; Schema: han_app; Owner: -
--

CREATE TRIGGER _100_guard_status BEFORE UPDATE OF status ON han_app.sync_queue FOR EACH ROW WHEN ((((old.status)::text IS DISTINCT FROM (new.status)::text) AND (((((old.status)::text || '>'::text) || (new.status)::text) = ANY ('{leased>cancelled,leased>dead_letter,leased>pending,leased>processed,leased>retry_wait,pending>cancelled,pending>leased,retry_wait>cancelled,retry_wait>leased,retry_wait>pending}'::text[])) IS NOT TRUE))) EXECUTE FUNCTION bitrix_sync.tg__guard_transition('sync_queue', 'status');

--
-- Name: TRIGGER _100_guard_status ON sync_queue; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON TRIGGER _100_guard_status ON han_app.sync_queue IS 'Refuses illegal queue status changes (bitrix_sync.state_edges). The legal edges are compiled into WHEN: the function runs only for a change not on them.';

--
-- Name: sync_queue _110_initial_state; Type: TRIGGER; Schema: han_app; Owner: -
--

CREATE TRIGGER _110_initial_state BEFORE INSERT ON han_app.sync_queue FOR EACH ROW WHEN ((((new.status)::text <> 'pending'::text) OR (new.lease_token IS NOT NULL) OR (new.completed_at IS NOT NULL))) EXECUTE FUNCTION bitrix_sync.tg__refuse_insert_state('pending, without a lease');

--
-- Name: TRIGGER _110_initial_state ON sync_queue; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON TRIGGER _110_initial_state ON han_app.sync_queue IS 'Intents are recorded pending (§6.1).';

--
-- Name: client_profile _500_enqueue_contact_sync_insert; Type: TRIGGER; Schema: han_app; Owner: -
--

CREATE TRIGGER _500_enqueue_contact_sync_insert AFTER INSERT ON han_app.client_profile FOR EACH ROW WHEN (((new.record_status)::text = 'active'::text)) EXECUTE FUNCTION han_app.enqueue_contact_sync();

--
-- Name: TRIGGER _500_enqueue_contact_sync_insert ON client_profile; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON TRIGGER _500_enqueue_contact_sync_insert ON han_app.client_profile IS 'Records contact.map_or_create for an active profile (§6.2).';

--
-- Name: user_identity _500_enqueue_contact_sync_insert; Type: TRIGGER; Schema: han_app; Owner: -
--

CREATE TRIGGER _500_enqueue_contact_sync_insert AFTER INSERT ON han_app.user_identity FOR EACH ROW WHEN (((new.record_status)::text = 'active'::text)) EXECUTE FUNCTION han_app.enqueue_contact_sync();

--
-- Name: TRIGGER _500_enqueue_contact_sync_insert ON user_identity; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON TRIGGER _500_enqueue_contact_sync_insert ON han_app.user_identity IS 'Records contact.map_or_create for an active identity (§6.2).';

--
-- Name: client_profile _500_enqueue_contact_sync_update; Type: TRIGGER; Schema: han_app; Owner: -
--

CREATE TRIGGER _500_enqueue_contact_sync_update AFTER UPDATE OF record_status ON han_app.client_profile FOR EACH ROW WHEN (((old.record_status)::text IS DISTINCT FROM (new.record_status)::text)) EXECUTE FUNCTION han_app.enqueue_contact_sync();

--
-- Name: TRIGGER _500_enqueue_contact_sync_update ON client_profile; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON TRIGGER _500_enqueue_contact_sync_update ON han_app.client_profile IS 'Records contact.deactivate / contact.map_or_create when the profile leaves or returns to active (§6.2).';

--
-- Name: user_identity _500_enqueue_contact_sync_update; Type: TRIGGER; Schema: han_app; Owner: -
--

CREATE TRIGGER _500_enqueue_contact_sync_update AFTER UPDATE OF phone_number, record_status ON han_app.user_identity FOR EACH ROW WHEN ((((old.phone_number)::text IS DISTINCT FROM (new.phone_number)::text) OR ((old.record_status)::text IS DISTINCT FROM (new.record_status)::text))) EXECUTE FUNCTION han_app.enqueue_contact_sync('phone');

--
-- Name: TRIGGER _500_enqueue_contact_sync_update ON user_identity; Type: COMMENT; Schema: han_app; Owner: -
--

COMMENT ON TRIGGER _500_enqueue_contact_sync_update ON han_app.user_identity IS 'Records contact.update (phone change of an active identity), contact.deactivate (leaving active) or contact.map_or_create (back to active) (§6.2).';

--
-- Name: admin_actions admin_actions_rebind_request_id_fkey; Type: FK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.admin_actions
    ADD CONSTRAINT admin_actions_rebind_request_id_fkey FOREIGN KEY (rebind_request_id) REFERENCES bitrix_sync.rebind_requests(id);

--
-- Name: business_alerts business_alerts_previous_alert_id_fkey; Type: FK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.business_alerts
    ADD CONSTRAINT business_alerts_previous_alert_id_fkey FOREIGN KEY (previous_alert_id) REFERENCES bitrix_sync.business_alerts(id);

--
-- Name: crm_commands crm_commands_alert_id_fkey; Type: FK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.crm_commands
    ADD CONSTRAINT crm_commands_alert_id_fkey FOREIGN KEY (alert_id) REFERENCES bitrix_sync.business_alerts(id);

--
-- Name: crm_commands crm_commands_workflow_id_fkey; Type: FK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.crm_commands
    ADD CONSTRAINT crm_commands_workflow_id_fkey FOREIGN KEY (workflow_id) REFERENCES bitrix_sync.workflow_instances(id);

--
-- Name: crm_inflight_slots crm_inflight_slots_bucket_fkey; Type: FK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.crm_inflight_slots
    ADD CONSTRAINT crm_inflight_slots_bucket_fkey FOREIGN KEY (bucket) REFERENCES bitrix_sync.crm_rate_buckets(bucket) ON DELETE CASCADE;

--
-- Name: rebind_requests rebind_requests_workflow_id_fkey; Type: FK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.rebind_requests
    ADD CONSTRAINT rebind_requests_workflow_id_fkey FOREIGN KEY (workflow_id) REFERENCES bitrix_sync.workflow_instances(id);

--
-- Name: settings_versions settings_versions_based_on_fkey; Type: FK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.settings_versions
    ADD CONSTRAINT settings_versions_based_on_fkey FOREIGN KEY (based_on) REFERENCES bitrix_sync.settings_versions(version);

--
-- Name: settings_versions settings_versions_rollback_of_fkey; Type: FK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.settings_versions
    ADD CONSTRAINT settings_versions_rollback_of_fkey FOREIGN KEY (rollback_of) REFERENCES bitrix_sync.settings_versions(version);

--
-- Name: webhook_inbox webhook_inbox_coalesced_into_fkey; Type: FK CONSTRAINT; Schema: bitrix_sync; Owner: -
--

ALTER TABLE ONLY bitrix_sync.webhook_inbox
    ADD CONSTRAINT webhook_inbox_coalesced_into_fkey FOREIGN KEY (coalesced_into) REFERENCES bitrix_sync.webhook_inbox(id);

--
-- Name: client_profile client_profile_user_id_fkey; Type: FK CONSTRAINT; Schema: han_app; Owner: -
--

ALTER TABLE ONLY han_app.client_profile
    ADD CONSTRAINT client_profile_user_id_fkey FOREIGN KEY (user_id) REFERENCES han_app.user_identity(id);

--
-- Name: _private_job_queues bitrix_sync_user_all; Type: POLICY; Schema: graphile_worker; Owner: -
--

CREATE POLICY bitrix_sync_user_all ON graphile_worker._private_job_queues TO bitrix_sync_user USING (true) WITH CHECK (true);

--
-- Name: _private_jobs bitrix_sync_user_all; Type: POLICY; Schema: graphile_worker; Owner: -
--

CREATE POLICY bitrix_sync_user_all ON graphile_worker._private_jobs TO bitrix_sync_user USING (true) WITH CHECK (true);

--
-- Name: _private_known_crontabs bitrix_sync_user_all; Type: POLICY; Schema: graphile_worker; Owner: -
--

CREATE POLICY bitrix_sync_user_all ON graphile_worker._private_known_crontabs TO bitrix_sync_user USING (true) WITH CHECK (true);

--
-- Name: _private_tasks bitrix_sync_user_all; Type: POLICY; Schema: graphile_worker; Owner: -
--

CREATE POLICY bitrix_sync_user_all ON graphile_worker._private_tasks TO bitrix_sync_user USING (true) WITH CHECK (true);

--
-- Name: SCHEMA bitrix_sync; Type: ACL; Schema: -; Owner: -
--

GRANT USAGE ON SCHEMA bitrix_sync TO bitrix_sync_user;
GRANT USAGE ON SCHEMA bitrix_sync TO bitrix_sync_admin;

--
-- Name: SCHEMA graphile_worker; Type: ACL; Schema: -; Owner: -
--

GRANT USAGE ON SCHEMA graphile_worker TO bitrix_sync_user;

--
-- Name: SCHEMA han_app; Type: ACL; Schema: -; Owner: -
--

GRANT USAGE ON SCHEMA han_app TO bitrix_sync_user;
GRANT USAGE ON SCHEMA han_app TO han_app_user;
GRANT USAGE ON SCHEMA han_app TO bitrix_sync_app_writer;

--
-- Name: FUNCTION _retry_deadline(p_first_attempt_at timestamp with time zone); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._retry_deadline(p_first_attempt_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._retry_deadline(p_first_attempt_at timestamp with time zone) TO bitrix_sync_user;

--
-- Name: TABLE crm_commands; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.workflow_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(workflow_id) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.alert_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(alert_id) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.command_type; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(command_type) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.params; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(params) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.status; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(status) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.revision; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(revision) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.attempt_count; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(attempt_count) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.limit_hits; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(limit_hits) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.next_attempt_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(next_attempt_at) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.deadline_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(deadline_at) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.lease_token; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(lease_token) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.locked_by; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(locked_by) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.locked_until; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(locked_until) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.batch_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(batch_id) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.correlation_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(correlation_id) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.sent_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(sent_at) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.response; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(response) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.last_error_code; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(last_error_code) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.last_http_status; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(last_http_status) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.last_bitrix_error; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(last_bitrix_error) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.updated_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(updated_at) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.completed_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(completed_at) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.first_sent_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(first_sent_at) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.trace_context; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(trace_context) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: COLUMN crm_commands.reply_deadline_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(reply_deadline_at) ON TABLE bitrix_sync.crm_commands TO bitrix_sync_user;

--
-- Name: FUNCTION _abandon_workflow_commands(p_workflow_id uuid, p_code text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._abandon_workflow_commands(p_workflow_id uuid, p_code text) FROM PUBLIC;

--
-- Name: FUNCTION _active_link_count(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._active_link_count() FROM PUBLIC;

--
-- Name: FUNCTION _active_setting(p_key text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._active_setting(p_key text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._active_setting(p_key text) TO bitrix_sync_user;
GRANT ALL ON FUNCTION bitrix_sync._active_setting(p_key text) TO bitrix_sync_admin;

--
-- Name: FUNCTION _alert_add_unsafe(p_alert_id bigint); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._alert_add_unsafe(p_alert_id bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._alert_add_unsafe(p_alert_id bigint) TO bitrix_sync_user;

--
-- Name: FUNCTION _alert_settings_errors(p_values jsonb); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._alert_settings_errors(p_values jsonb) FROM PUBLIC;

--
-- Name: FUNCTION _app_user_eligible(p_user_id uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._app_user_eligible(p_user_id uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._app_user_eligible(p_user_id uuid) TO bitrix_sync_admin;

--
-- Name: FUNCTION _bucket_rate_factor(p_factor double precision, p_recovery_per_sec double precision, p_changed_at timestamp with time zone, p_now timestamp with time zone); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._bucket_rate_factor(p_factor double precision, p_recovery_per_sec double precision, p_changed_at timestamp with time zone, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._bucket_rate_factor(p_factor double precision, p_recovery_per_sec double precision, p_changed_at timestamp with time zone, p_now timestamp with time zone) TO bitrix_sync_user;

--
-- Name: FUNCTION _bucket_tokens(p_tokens double precision, p_rate double precision, p_cap double precision, p_refilled_at timestamp with time zone, p_now timestamp with time zone); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._bucket_tokens(p_tokens double precision, p_rate double precision, p_cap double precision, p_refilled_at timestamp with time zone, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._bucket_tokens(p_tokens double precision, p_rate double precision, p_cap double precision, p_refilled_at timestamp with time zone, p_now timestamp with time zone) TO bitrix_sync_user;

--
-- Name: FUNCTION _check_admin_audit(p_reason text, p_operator_id text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._check_admin_audit(p_reason text, p_operator_id text) FROM PUBLIC;

--
-- Name: FUNCTION _check_audit_lease(p_lease_token uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._check_audit_lease(p_lease_token uuid) FROM PUBLIC;

--
-- Name: FUNCTION _check_bitrix_error(p_error text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._check_bitrix_error(p_error text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._check_bitrix_error(p_error text) TO bitrix_sync_user;

--
-- Name: FUNCTION _check_code(p_code text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._check_code(p_code text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._check_code(p_code text) TO bitrix_sync_user;

--
-- Name: FUNCTION _check_limiter_name(p_what text, p_value text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._check_limiter_name(p_what text, p_value text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._check_limiter_name(p_what text, p_value text) TO bitrix_sync_user;

--
-- Name: FUNCTION _check_queue_tables(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._check_queue_tables() FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._check_queue_tables() TO bitrix_sync_user;

--
-- Name: FUNCTION time_ordered_uuid(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.time_ordered_uuid() FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.time_ordered_uuid() TO bitrix_sync_user;

--
-- Name: TABLE rebind_requests; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.rebind_requests TO bitrix_sync_user;
GRANT SELECT ON TABLE bitrix_sync.rebind_requests TO bitrix_sync_admin;

--
-- Name: FUNCTION _close_rebind_request(p_workflow_id uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._close_rebind_request(p_workflow_id uuid) FROM PUBLIC;

--
-- Name: FUNCTION _command_first_attempt(p_row bitrix_sync.crm_commands); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._command_first_attempt(p_row bitrix_sync.crm_commands) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._command_first_attempt(p_row bitrix_sync.crm_commands) TO bitrix_sync_user;

--
-- Name: COLUMN technical_dead_letters.source; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(source) ON TABLE bitrix_sync.technical_dead_letters TO bitrix_sync_user;

--
-- Name: COLUMN technical_dead_letters.source_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(source_id) ON TABLE bitrix_sync.technical_dead_letters TO bitrix_sync_user;

--
-- Name: COLUMN technical_dead_letters.workflow_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(workflow_id) ON TABLE bitrix_sync.technical_dead_letters TO bitrix_sync_user;

--
-- Name: COLUMN technical_dead_letters.command_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(command_id) ON TABLE bitrix_sync.technical_dead_letters TO bitrix_sync_user;

--
-- Name: COLUMN technical_dead_letters.operation; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(operation) ON TABLE bitrix_sync.technical_dead_letters TO bitrix_sync_user;

--
-- Name: COLUMN technical_dead_letters.error_code; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(error_code) ON TABLE bitrix_sync.technical_dead_letters TO bitrix_sync_user;

--
-- Name: COLUMN technical_dead_letters.http_status; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(http_status) ON TABLE bitrix_sync.technical_dead_letters TO bitrix_sync_user;

--
-- Name: COLUMN technical_dead_letters.bitrix_error; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(bitrix_error) ON TABLE bitrix_sync.technical_dead_letters TO bitrix_sync_user;

--
-- Name: COLUMN technical_dead_letters.attempt_count; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(attempt_count) ON TABLE bitrix_sync.technical_dead_letters TO bitrix_sync_user;

--
-- Name: COLUMN technical_dead_letters.first_attempt_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(first_attempt_at) ON TABLE bitrix_sync.technical_dead_letters TO bitrix_sync_user;

--
-- Name: COLUMN technical_dead_letters.deadline_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(deadline_at) ON TABLE bitrix_sync.technical_dead_letters TO bitrix_sync_user;

--
-- Name: COLUMN technical_dead_letters.correlation_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(correlation_id) ON TABLE bitrix_sync.technical_dead_letters TO bitrix_sync_user;

--
-- Name: FUNCTION _covered_dead_letters(p_dl bitrix_sync.technical_dead_letters); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._covered_dead_letters(p_dl bitrix_sync.technical_dead_letters) FROM PUBLIC;

--
-- Name: FUNCTION _dead_letter(p_source text, p_source_id text, p_operation text, p_error_code text, p_attempt_count integer, p_first_attempt_at timestamp with time zone, p_workflow_id uuid, p_command_id bigint, p_correlation_id uuid, p_http_status integer, p_bitrix_error text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._dead_letter(p_source text, p_source_id text, p_operation text, p_error_code text, p_attempt_count integer, p_first_attempt_at timestamp with time zone, p_workflow_id uuid, p_command_id bigint, p_correlation_id uuid, p_http_status integer, p_bitrix_error text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._dead_letter(p_source text, p_source_id text, p_operation text, p_error_code text, p_attempt_count integer, p_first_attempt_at timestamp with time zone, p_workflow_id uuid, p_command_id bigint, p_correlation_id uuid, p_http_status integer, p_bitrix_error text) TO bitrix_sync_user;

--
-- Name: FUNCTION _dead_letter_command_row(p_row bitrix_sync.crm_commands, p_error_code text, p_http_status integer, p_bitrix_error text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._dead_letter_command_row(p_row bitrix_sync.crm_commands, p_error_code text, p_http_status integer, p_bitrix_error text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._dead_letter_command_row(p_row bitrix_sync.crm_commands, p_error_code text, p_http_status integer, p_bitrix_error text) TO bitrix_sync_user;

--
-- Name: TABLE sync_queue; Type: ACL; Schema: han_app; Owner: -
--

GRANT SELECT ON TABLE han_app.sync_queue TO bitrix_sync_user;
GRANT SELECT ON TABLE han_app.sync_queue TO han_app_user;

--
-- Name: COLUMN sync_queue.status; Type: ACL; Schema: han_app; Owner: -
--

GRANT UPDATE(status) ON TABLE han_app.sync_queue TO bitrix_sync_user;

--
-- Name: COLUMN sync_queue.attempt_count; Type: ACL; Schema: han_app; Owner: -
--

GRANT UPDATE(attempt_count) ON TABLE han_app.sync_queue TO bitrix_sync_user;

--
-- Name: COLUMN sync_queue.next_attempt_at; Type: ACL; Schema: han_app; Owner: -
--

GRANT UPDATE(next_attempt_at) ON TABLE han_app.sync_queue TO bitrix_sync_user;

--
-- Name: COLUMN sync_queue.updated_at; Type: ACL; Schema: han_app; Owner: -
--

GRANT UPDATE(updated_at) ON TABLE han_app.sync_queue TO bitrix_sync_user;

--
-- Name: COLUMN sync_queue.locked_by; Type: ACL; Schema: han_app; Owner: -
--

GRANT UPDATE(locked_by) ON TABLE han_app.sync_queue TO bitrix_sync_user;

--
-- Name: COLUMN sync_queue.locked_until; Type: ACL; Schema: han_app; Owner: -
--

GRANT UPDATE(locked_until) ON TABLE han_app.sync_queue TO bitrix_sync_user;

--
-- Name: COLUMN sync_queue.lease_token; Type: ACL; Schema: han_app; Owner: -
--

GRANT UPDATE(lease_token) ON TABLE han_app.sync_queue TO bitrix_sync_user;

--
-- Name: COLUMN sync_queue.last_error_code; Type: ACL; Schema: han_app; Owner: -
--

GRANT UPDATE(last_error_code) ON TABLE han_app.sync_queue TO bitrix_sync_user;

--
-- Name: COLUMN sync_queue.last_error_at; Type: ACL; Schema: han_app; Owner: -
--

GRANT UPDATE(last_error_at) ON TABLE han_app.sync_queue TO bitrix_sync_user;

--
-- Name: COLUMN sync_queue.completed_at; Type: ACL; Schema: han_app; Owner: -
--

GRANT UPDATE(completed_at) ON TABLE han_app.sync_queue TO bitrix_sync_user;

--
-- Name: COLUMN sync_queue.cancel_reason; Type: ACL; Schema: han_app; Owner: -
--

GRANT UPDATE(cancel_reason) ON TABLE han_app.sync_queue TO bitrix_sync_user;

--
-- Name: FUNCTION _dead_letter_sync_task_row(p_row han_app.sync_queue, p_error_code text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._dead_letter_sync_task_row(p_row han_app.sync_queue, p_error_code text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._dead_letter_sync_task_row(p_row han_app.sync_queue, p_error_code text) TO bitrix_sync_user;

--
-- Name: TABLE webhook_inbox; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.webhook_inbox TO bitrix_sync_user;

--
-- Name: COLUMN webhook_inbox.receiver; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(receiver) ON TABLE bitrix_sync.webhook_inbox TO bitrix_sync_user;

--
-- Name: COLUMN webhook_inbox.event_type; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(event_type) ON TABLE bitrix_sync.webhook_inbox TO bitrix_sync_user;

--
-- Name: COLUMN webhook_inbox.entity_type_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(entity_type_id) ON TABLE bitrix_sync.webhook_inbox TO bitrix_sync_user;

--
-- Name: COLUMN webhook_inbox.entity_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(entity_id) ON TABLE bitrix_sync.webhook_inbox TO bitrix_sync_user;

--
-- Name: COLUMN webhook_inbox.status; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(status) ON TABLE bitrix_sync.webhook_inbox TO bitrix_sync_user;

--
-- Name: COLUMN webhook_inbox.coalesced_into; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(coalesced_into) ON TABLE bitrix_sync.webhook_inbox TO bitrix_sync_user;

--
-- Name: COLUMN webhook_inbox.source_ip; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(source_ip) ON TABLE bitrix_sync.webhook_inbox TO bitrix_sync_user;

--
-- Name: COLUMN webhook_inbox.attempt_count; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(attempt_count) ON TABLE bitrix_sync.webhook_inbox TO bitrix_sync_user;

--
-- Name: COLUMN webhook_inbox.next_attempt_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(next_attempt_at) ON TABLE bitrix_sync.webhook_inbox TO bitrix_sync_user;

--
-- Name: COLUMN webhook_inbox.lease_token; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(lease_token) ON TABLE bitrix_sync.webhook_inbox TO bitrix_sync_user;

--
-- Name: COLUMN webhook_inbox.locked_by; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(locked_by) ON TABLE bitrix_sync.webhook_inbox TO bitrix_sync_user;

--
-- Name: COLUMN webhook_inbox.locked_until; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(locked_until) ON TABLE bitrix_sync.webhook_inbox TO bitrix_sync_user;

--
-- Name: COLUMN webhook_inbox.outcome; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(outcome) ON TABLE bitrix_sync.webhook_inbox TO bitrix_sync_user;

--
-- Name: COLUMN webhook_inbox.last_error_code; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(last_error_code) ON TABLE bitrix_sync.webhook_inbox TO bitrix_sync_user;

--
-- Name: COLUMN webhook_inbox.status_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(status_at) ON TABLE bitrix_sync.webhook_inbox TO bitrix_sync_user;

--
-- Name: COLUMN webhook_inbox.processed_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(processed_at) ON TABLE bitrix_sync.webhook_inbox TO bitrix_sync_user;

--
-- Name: COLUMN webhook_inbox.trace_context; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(trace_context) ON TABLE bitrix_sync.webhook_inbox TO bitrix_sync_user;

--
-- Name: FUNCTION _dead_letter_webhook_row(p_row bitrix_sync.webhook_inbox, p_error_code text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._dead_letter_webhook_row(p_row bitrix_sync.webhook_inbox, p_error_code text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._dead_letter_webhook_row(p_row bitrix_sync.webhook_inbox, p_error_code text) TO bitrix_sync_user;

--
-- Name: FUNCTION _drift_busy_users(p_since timestamp with time zone, p_user_ids uuid[]); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._drift_busy_users(p_since timestamp with time zone, p_user_ids uuid[]) FROM PUBLIC;

--
-- Name: FUNCTION _drift_kind_group(p_kind text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._drift_kind_group(p_kind text) FROM PUBLIC;

--
-- Name: FUNCTION _drift_repair_intent(p_kinds text[], p_eligible boolean); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._drift_repair_intent(p_kinds text[], p_eligible boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._drift_repair_intent(p_kinds text[], p_eligible boolean) TO bitrix_sync_admin;

--
-- Name: TABLE workflow_instances; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.workflow_type; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(workflow_type) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.intent_type; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(intent_type),UPDATE(intent_type) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.user_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(user_id) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.contact_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(contact_id) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.state; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(state) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.current_step; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(current_step) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.step_data; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(step_data) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.source_task_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(source_task_id),UPDATE(source_task_id) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.revision; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(revision) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.processed_revision; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(processed_revision) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.content_hash; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(content_hash),UPDATE(content_hash) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.attempt_count; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(attempt_count) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.next_attempt_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(next_attempt_at) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.deadline_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(deadline_at) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.lease_token; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(lease_token) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.locked_by; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(locked_by) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.locked_until; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(locked_until) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.outcome; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(outcome) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.last_error_code; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(last_error_code) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.updated_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(updated_at) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.finished_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(finished_at) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.trace_context; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(trace_context),UPDATE(trace_context) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.held_intent_type; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(held_intent_type) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.held_source_task_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(held_source_task_id) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.held_content_hash; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(held_content_hash) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: COLUMN workflow_instances.held_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(held_at) ON TABLE bitrix_sync.workflow_instances TO bitrix_sync_user;

--
-- Name: FUNCTION _held_workflow(p_id uuid, p_lease_token uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._held_workflow(p_id uuid, p_lease_token uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._held_workflow(p_id uuid, p_lease_token uuid) TO bitrix_sync_user;

--
-- Name: FUNCTION _is_write_command(p_command_type text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._is_write_command(p_command_type text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._is_write_command(p_command_type text) TO bitrix_sync_user;

--
-- Name: FUNCTION _mask_pii(p_value text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._mask_pii(p_value text) FROM PUBLIC;

--
-- Name: FUNCTION _normalise_settings(p_values jsonb); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._normalise_settings(p_values jsonb) FROM PUBLIC;

--
-- Name: FUNCTION _open_dead_letter(p_id bigint); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._open_dead_letter(p_id bigint) FROM PUBLIC;

--
-- Name: FUNCTION _parked_decisions(p_reason text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._parked_decisions(p_reason text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._parked_decisions(p_reason text) TO bitrix_sync_admin;

--
-- Name: FUNCTION _paused_since(p_from timestamp with time zone); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._paused_since(p_from timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._paused_since(p_from timestamp with time zone) TO bitrix_sync_user;

--
-- Name: FUNCTION _planner_count(p_rel regclass); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._planner_count(p_rel regclass) FROM PUBLIC;

--
-- Name: FUNCTION _read_again_after_link(p_contact_ids text[], p_workflow_ids uuid[]); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._read_again_after_link(p_contact_ids text[], p_workflow_ids uuid[]) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._read_again_after_link(p_contact_ids text[], p_workflow_ids uuid[]) TO bitrix_sync_user;

--
-- Name: FUNCTION _rebind_crm_outcome(p_workflow_id uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._rebind_crm_outcome(p_workflow_id uuid) FROM PUBLIC;

--
-- Name: FUNCTION _rebind_request_of(p_workflow_id uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._rebind_request_of(p_workflow_id uuid) FROM PUBLIC;

--
-- Name: FUNCTION _record_admin_action(p_action text, p_workflow_id uuid, p_rebind_request_id uuid, p_decision text, p_contact_id text, p_reason text, p_operator_id text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._record_admin_action(p_action text, p_workflow_id uuid, p_rebind_request_id uuid, p_decision text, p_contact_id text, p_reason text, p_operator_id text) FROM PUBLIC;

--
-- Name: FUNCTION _refuse_stale(p_what text, p_id text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._refuse_stale(p_what text, p_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._refuse_stale(p_what text, p_id text) TO bitrix_sync_user;

--
-- Name: FUNCTION _repair_drift(p_requested_by text, p_reason text, p_user_ids uuid[], p_kinds text[], p_dry_run boolean, p_admin_action boolean, p_only_unrepaired boolean); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._repair_drift(p_requested_by text, p_reason text, p_user_ids uuid[], p_kinds text[], p_dry_run boolean, p_admin_action boolean, p_only_unrepaired boolean) FROM PUBLIC;

--
-- Name: FUNCTION _requeue_refusal(p_dl bitrix_sync.technical_dead_letters); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._requeue_refusal(p_dl bitrix_sync.technical_dead_letters) FROM PUBLIC;

--
-- Name: FUNCTION _requeue_target(p_dl bitrix_sync.technical_dead_letters); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._requeue_target(p_dl bitrix_sync.technical_dead_letters) FROM PUBLIC;

--
-- Name: FUNCTION _resolve_conflict_alerts(p_user_id uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._resolve_conflict_alerts(p_user_id uuid) FROM PUBLIC;

--
-- Name: FUNCTION _resolve_dead_letters(p_ids bigint[], p_resolution text, p_operator text, p_reason text, p_target text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._resolve_dead_letters(p_ids bigint[], p_resolution text, p_operator text, p_reason text, p_target text) FROM PUBLIC;

--
-- Name: FUNCTION _retention_cutoff(p_key text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._retention_cutoff(p_key text) FROM PUBLIC;

--
-- Name: FUNCTION _retention_sweep_workflows(p_run_started_at timestamp with time zone); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._retention_sweep_workflows(p_run_started_at timestamp with time zone) FROM PUBLIC;

--
-- Name: FUNCTION _settings_errors(p_values jsonb); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._settings_errors(p_values jsonb) FROM PUBLIC;

--
-- Name: FUNCTION _trace_context(p_traceparent text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._trace_context(p_traceparent text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._trace_context(p_traceparent text) TO bitrix_sync_user;

--
-- Name: FUNCTION _wake_workflow(p_workflow_id uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._wake_workflow(p_workflow_id uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._wake_workflow(p_workflow_id uuid) TO bitrix_sync_user;

--
-- Name: FUNCTION _workflow_first_attempt(p_row bitrix_sync.workflow_instances); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._workflow_first_attempt(p_row bitrix_sync.workflow_instances) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._workflow_first_attempt(p_row bitrix_sync.workflow_instances) TO bitrix_sync_user;

--
-- Name: FUNCTION _workflow_holder(p_command_id bigint, p_workflow_token uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._workflow_holder(p_command_id bigint, p_workflow_token uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._workflow_holder(p_command_id bigint, p_workflow_token uuid) TO bitrix_sync_user;

--
-- Name: FUNCTION _write_app_crm_master(p_user_id uuid, p_full_name text, p_citizenship text, p_email text, p_source_updated_at timestamp with time zone); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync._write_app_crm_master(p_user_id uuid, p_full_name text, p_citizenship text, p_email text, p_source_updated_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync._write_app_crm_master(p_user_id uuid, p_full_name text, p_citizenship text, p_email text, p_source_updated_at timestamp with time zone) TO bitrix_sync_user;

--
-- Name: FUNCTION accept_webhook(p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.accept_webhook(p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.accept_webhook(p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet) TO bitrix_sync_admin;

--
-- Name: FUNCTION accept_webhooks(p_receivers text[], p_entity_type_ids integer[], p_entity_ids text[], p_source_ips inet[], p_trace_contexts text[]); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.accept_webhooks(p_receivers text[], p_entity_type_ids integer[], p_entity_ids text[], p_source_ips inet[], p_trace_contexts text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.accept_webhooks(p_receivers text[], p_entity_type_ids integer[], p_entity_ids text[], p_source_ips inet[], p_trace_contexts text[]) TO bitrix_sync_user;

--
-- Name: FUNCTION acknowledge_dead_letter(p_id bigint, p_operator text, p_reason text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.acknowledge_dead_letter(p_id bigint, p_operator text, p_reason text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.acknowledge_dead_letter(p_id bigint, p_operator text, p_reason text) TO bitrix_sync_admin;

--
-- Name: FUNCTION acquire_crm_request(p_bucket text, p_holder text, p_refill_per_sec double precision, p_burst integer, p_max_in_flight integer, p_slot_ttl_ms integer, p_recovery_per_sec double precision); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.acquire_crm_request(p_bucket text, p_holder text, p_refill_per_sec double precision, p_burst integer, p_max_in_flight integer, p_slot_ttl_ms integer, p_recovery_per_sec double precision) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.acquire_crm_request(p_bucket text, p_holder text, p_refill_per_sec double precision, p_burst integer, p_max_in_flight integer, p_slot_ttl_ms integer, p_recovery_per_sec double precision) TO bitrix_sync_user;

--
-- Name: FUNCTION acquire_spare_crm_request(p_bucket text, p_holder text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.acquire_spare_crm_request(p_bucket text, p_holder text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.acquire_spare_crm_request(p_bucket text, p_holder text) TO bitrix_sync_user;
GRANT ALL ON FUNCTION bitrix_sync.acquire_spare_crm_request(p_bucket text, p_holder text) TO bitrix_sync_admin;

--
-- Name: FUNCTION acquire_spare_crm_request(p_bucket text, p_holder text, p_refill_per_sec double precision, p_burst integer, p_max_in_flight integer, p_share double precision, p_slot_ttl_ms integer, p_recovery_per_sec double precision); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.acquire_spare_crm_request(p_bucket text, p_holder text, p_refill_per_sec double precision, p_burst integer, p_max_in_flight integer, p_share double precision, p_slot_ttl_ms integer, p_recovery_per_sec double precision) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.acquire_spare_crm_request(p_bucket text, p_holder text, p_refill_per_sec double precision, p_burst integer, p_max_in_flight integer, p_share double precision, p_slot_ttl_ms integer, p_recovery_per_sec double precision) TO bitrix_sync_user;
GRANT ALL ON FUNCTION bitrix_sync.acquire_spare_crm_request(p_bucket text, p_holder text, p_refill_per_sec double precision, p_burst integer, p_max_in_flight integer, p_share double precision, p_slot_ttl_ms integer, p_recovery_per_sec double precision) TO bitrix_sync_admin;

--
-- Name: TABLE settings_versions; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.settings_versions TO bitrix_sync_user;
GRANT SELECT ON TABLE bitrix_sync.settings_versions TO bitrix_sync_admin;

--
-- Name: FUNCTION activate_settings_version(p_version integer, p_actor text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.activate_settings_version(p_version integer, p_actor text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.activate_settings_version(p_version integer, p_actor text) TO bitrix_sync_admin;

--
-- Name: TABLE entity_external_mapping; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.entity_external_mapping TO bitrix_sync_user;

--
-- Name: COLUMN entity_external_mapping.entity_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(entity_id) ON TABLE bitrix_sync.entity_external_mapping TO bitrix_sync_user;

--
-- Name: COLUMN entity_external_mapping.external_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(external_id) ON TABLE bitrix_sync.entity_external_mapping TO bitrix_sync_user;

--
-- Name: COLUMN entity_external_mapping.status; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(status) ON TABLE bitrix_sync.entity_external_mapping TO bitrix_sync_user;

--
-- Name: COLUMN entity_external_mapping.closed_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(closed_at) ON TABLE bitrix_sync.entity_external_mapping TO bitrix_sync_user;

--
-- Name: COLUMN entity_external_mapping.close_reason; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(close_reason) ON TABLE bitrix_sync.entity_external_mapping TO bitrix_sync_user;

--
-- Name: COLUMN entity_external_mapping.workflow_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(workflow_id),UPDATE(workflow_id) ON TABLE bitrix_sync.entity_external_mapping TO bitrix_sync_user;

--
-- Name: COLUMN entity_external_mapping.held_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(held_at) ON TABLE bitrix_sync.entity_external_mapping TO bitrix_sync_user;

--
-- Name: COLUMN entity_external_mapping.held_crm_updated_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(held_crm_updated_at) ON TABLE bitrix_sync.entity_external_mapping TO bitrix_sync_user;

--
-- Name: COLUMN entity_external_mapping.hold_released_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(hold_released_at) ON TABLE bitrix_sync.entity_external_mapping TO bitrix_sync_user;

--
-- Name: COLUMN entity_external_mapping.hold_released_by; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(hold_released_by) ON TABLE bitrix_sync.entity_external_mapping TO bitrix_sync_user;

--
-- Name: COLUMN entity_external_mapping.held_values_hash; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(held_values_hash) ON TABLE bitrix_sync.entity_external_mapping TO bitrix_sync_user;

--
-- Name: FUNCTION active_mapping_for_contact(p_contact_id text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.active_mapping_for_contact(p_contact_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.active_mapping_for_contact(p_contact_id text) TO bitrix_sync_user;

--
-- Name: FUNCTION active_mapping_for_user(p_user_id uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.active_mapping_for_user(p_user_id uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.active_mapping_for_user(p_user_id uuid) TO bitrix_sync_user;

--
-- Name: FUNCTION active_settings(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.active_settings() FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.active_settings() TO bitrix_sync_user;
GRANT ALL ON FUNCTION bitrix_sync.active_settings() TO bitrix_sync_admin;

--
-- Name: FUNCTION advance_registered_scan(p_lease_token uuid, p_after_id bigint, p_listed integer, p_complete boolean); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.advance_registered_scan(p_lease_token uuid, p_after_id bigint, p_listed integer, p_complete boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.advance_registered_scan(p_lease_token uuid, p_after_id bigint, p_listed integer, p_complete boolean) TO bitrix_sync_user;

--
-- Name: FUNCTION alert_config_problem(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.alert_config_problem() FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.alert_config_problem() TO bitrix_sync_user;

--
-- Name: FUNCTION alert_entity_type_id(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.alert_entity_type_id() FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.alert_entity_type_id() TO bitrix_sync_user;

--
-- Name: FUNCTION alerts_to_look_up(p_limit integer); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.alerts_to_look_up(p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.alerts_to_look_up(p_limit integer) TO bitrix_sync_user;

--
-- Name: FUNCTION analyze_engine_tables(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.analyze_engine_tables() FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.analyze_engine_tables() TO bitrix_sync_admin;

--
-- Name: FUNCTION app_table_hooks(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.app_table_hooks() FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.app_table_hooks() TO bitrix_sync_user;
GRANT ALL ON FUNCTION bitrix_sync.app_table_hooks() TO bitrix_sync_admin;

--
-- Name: TABLE contact_snapshots; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.contact_snapshots TO bitrix_sync_user;

--
-- Name: COLUMN contact_snapshots.contact_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(contact_id) ON TABLE bitrix_sync.contact_snapshots TO bitrix_sync_user;

--
-- Name: COLUMN contact_snapshots.user_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(user_id),UPDATE(user_id) ON TABLE bitrix_sync.contact_snapshots TO bitrix_sync_user;

--
-- Name: COLUMN contact_snapshots.name_hash; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(name_hash),UPDATE(name_hash) ON TABLE bitrix_sync.contact_snapshots TO bitrix_sync_user;

--
-- Name: COLUMN contact_snapshots.email_hash; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(email_hash),UPDATE(email_hash) ON TABLE bitrix_sync.contact_snapshots TO bitrix_sync_user;

--
-- Name: COLUMN contact_snapshots.phone_hash; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(phone_hash),UPDATE(phone_hash) ON TABLE bitrix_sync.contact_snapshots TO bitrix_sync_user;

--
-- Name: COLUMN contact_snapshots.citizenship_enum_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(citizenship_enum_id),UPDATE(citizenship_enum_id) ON TABLE bitrix_sync.contact_snapshots TO bitrix_sync_user;

--
-- Name: COLUMN contact_snapshots.citizenship_dictionary_loaded_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(citizenship_dictionary_loaded_at),UPDATE(citizenship_dictionary_loaded_at) ON TABLE bitrix_sync.contact_snapshots TO bitrix_sync_user;

--
-- Name: COLUMN contact_snapshots.registered; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(registered),UPDATE(registered) ON TABLE bitrix_sync.contact_snapshots TO bitrix_sync_user;

--
-- Name: COLUMN contact_snapshots.crm_created_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(crm_created_at),UPDATE(crm_created_at) ON TABLE bitrix_sync.contact_snapshots TO bitrix_sync_user;

--
-- Name: COLUMN contact_snapshots.crm_updated_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(crm_updated_at),UPDATE(crm_updated_at) ON TABLE bitrix_sync.contact_snapshots TO bitrix_sync_user;

--
-- Name: COLUMN contact_snapshots.last_applied_source; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(last_applied_source),UPDATE(last_applied_source) ON TABLE bitrix_sync.contact_snapshots TO bitrix_sync_user;

--
-- Name: COLUMN contact_snapshots.last_applied_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(last_applied_at),UPDATE(last_applied_at) ON TABLE bitrix_sync.contact_snapshots TO bitrix_sync_user;

--
-- Name: COLUMN contact_snapshots.last_webhook_received_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(last_webhook_received_at),UPDATE(last_webhook_received_at) ON TABLE bitrix_sync.contact_snapshots TO bitrix_sync_user;

--
-- Name: COLUMN contact_snapshots.last_webhook_source_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(last_webhook_source_at),UPDATE(last_webhook_source_at) ON TABLE bitrix_sync.contact_snapshots TO bitrix_sync_user;

--
-- Name: COLUMN contact_snapshots.stale; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(stale),UPDATE(stale) ON TABLE bitrix_sync.contact_snapshots TO bitrix_sync_user;

--
-- Name: COLUMN contact_snapshots.stale_reason; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(stale_reason),UPDATE(stale_reason) ON TABLE bitrix_sync.contact_snapshots TO bitrix_sync_user;

--
-- Name: FUNCTION apply_crm_master_fields(p_user_id uuid, p_contact_id text, p_full_name text, p_citizenship text, p_email text, p_name_hash text, p_email_hash text, p_citizenship_enum_id text, p_dictionary_loaded_at timestamp with time zone, p_registered boolean, p_crm_created_at timestamp with time zone, p_crm_updated_at timestamp with time zone, p_source text, p_webhook_received_at timestamp with time zone); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.apply_crm_master_fields(p_user_id uuid, p_contact_id text, p_full_name text, p_citizenship text, p_email text, p_name_hash text, p_email_hash text, p_citizenship_enum_id text, p_dictionary_loaded_at timestamp with time zone, p_registered boolean, p_crm_created_at timestamp with time zone, p_crm_updated_at timestamp with time zone, p_source text, p_webhook_received_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.apply_crm_master_fields(p_user_id uuid, p_contact_id text, p_full_name text, p_citizenship text, p_email text, p_name_hash text, p_email_hash text, p_citizenship_enum_id text, p_dictionary_loaded_at timestamp with time zone, p_registered boolean, p_crm_created_at timestamp with time zone, p_crm_updated_at timestamp with time zone, p_source text, p_webhook_received_at timestamp with time zone) TO bitrix_sync_user;

--
-- Name: FUNCTION apply_privileges(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.apply_privileges() FROM PUBLIC;

--
-- Name: FUNCTION audit_sample(p_lease_token uuid, p_limit integer); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.audit_sample(p_lease_token uuid, p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.audit_sample(p_lease_token uuid, p_limit integer) TO bitrix_sync_user;

--
-- Name: FUNCTION auto_repair_drift(p_kinds text[]); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.auto_repair_drift(p_kinds text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.auto_repair_drift(p_kinds text[]) TO bitrix_sync_user;

--
-- Name: FUNCTION begin_command_reconcile(p_id bigint, p_workflow_token uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.begin_command_reconcile(p_id bigint, p_workflow_token uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.begin_command_reconcile(p_id bigint, p_workflow_token uuid) TO bitrix_sync_user;

--
-- Name: FUNCTION blocked_crm_methods(p_bucket text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.blocked_crm_methods(p_bucket text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.blocked_crm_methods(p_bucket text) TO bitrix_sync_user;

--
-- Name: FUNCTION bring_forward_commands(p_codes text[], p_limit integer); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.bring_forward_commands(p_codes text[], p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.bring_forward_commands(p_codes text[], p_limit integer) TO bitrix_sync_user;

--
-- Name: FUNCTION bring_forward_webhooks(p_codes text[]); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.bring_forward_webhooks(p_codes text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.bring_forward_webhooks(p_codes text[]) TO bitrix_sync_user;

--
-- Name: FUNCTION cancel_parked_workflow(p_workflow_id uuid, p_reason text, p_operator_id text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.cancel_parked_workflow(p_workflow_id uuid, p_reason text, p_operator_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.cancel_parked_workflow(p_workflow_id uuid, p_reason text, p_operator_id text) TO bitrix_sync_admin;

--
-- Name: FUNCTION cancel_rebind_request(p_request_id uuid, p_reason text, p_operator_id text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.cancel_rebind_request(p_request_id uuid, p_reason text, p_operator_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.cancel_rebind_request(p_request_id uuid, p_reason text, p_operator_id text) TO bitrix_sync_admin;

--
-- Name: FUNCTION cancel_sync_task(p_id uuid, p_lease_token uuid, p_reason text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.cancel_sync_task(p_id uuid, p_lease_token uuid, p_reason text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.cancel_sync_task(p_id uuid, p_lease_token uuid, p_reason text) TO bitrix_sync_user;

--
-- Name: FUNCTION claim_audit_run(p_all boolean, p_force boolean); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.claim_audit_run(p_all boolean, p_force boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.claim_audit_run(p_all boolean, p_force boolean) TO bitrix_sync_user;

--
-- Name: FUNCTION claim_commands(p_worker text, p_limit integer, p_lease interval); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.claim_commands(p_worker text, p_limit integer, p_lease interval) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.claim_commands(p_worker text, p_limit integer, p_lease interval) TO bitrix_sync_user;

--
-- Name: TABLE reconciliation_cursors; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.reconciliation_cursors TO bitrix_sync_user;

--
-- Name: COLUMN reconciliation_cursors.job_type; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(job_type) ON TABLE bitrix_sync.reconciliation_cursors TO bitrix_sync_user;

--
-- Name: COLUMN reconciliation_cursors.watermark; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(watermark) ON TABLE bitrix_sync.reconciliation_cursors TO bitrix_sync_user;

--
-- Name: COLUMN reconciliation_cursors.overlap; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(overlap) ON TABLE bitrix_sync.reconciliation_cursors TO bitrix_sync_user;

--
-- Name: COLUMN reconciliation_cursors.last_run_started_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(last_run_started_at) ON TABLE bitrix_sync.reconciliation_cursors TO bitrix_sync_user;

--
-- Name: COLUMN reconciliation_cursors.last_success_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(last_success_at) ON TABLE bitrix_sync.reconciliation_cursors TO bitrix_sync_user;

--
-- Name: COLUMN reconciliation_cursors.last_run_status; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(last_run_status) ON TABLE bitrix_sync.reconciliation_cursors TO bitrix_sync_user;

--
-- Name: COLUMN reconciliation_cursors.last_error_code; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(last_error_code) ON TABLE bitrix_sync.reconciliation_cursors TO bitrix_sync_user;

--
-- Name: COLUMN reconciliation_cursors.last_scanned; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(last_scanned) ON TABLE bitrix_sync.reconciliation_cursors TO bitrix_sync_user;

--
-- Name: COLUMN reconciliation_cursors.last_updated; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(last_updated) ON TABLE bitrix_sync.reconciliation_cursors TO bitrix_sync_user;

--
-- Name: COLUMN reconciliation_cursors.last_recovered; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(last_recovered) ON TABLE bitrix_sync.reconciliation_cursors TO bitrix_sync_user;

--
-- Name: COLUMN reconciliation_cursors.recovered_baseline; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(recovered_baseline) ON TABLE bitrix_sync.reconciliation_cursors TO bitrix_sync_user;

--
-- Name: COLUMN reconciliation_cursors.lease_token; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(lease_token) ON TABLE bitrix_sync.reconciliation_cursors TO bitrix_sync_user;

--
-- Name: COLUMN reconciliation_cursors.failed_runs; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(failed_runs) ON TABLE bitrix_sync.reconciliation_cursors TO bitrix_sync_user;

--
-- Name: COLUMN reconciliation_cursors.retry_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(retry_at) ON TABLE bitrix_sync.reconciliation_cursors TO bitrix_sync_user;

--
-- Name: FUNCTION claim_reconciliation_cursor(p_job_type text, p_interval interval, p_force boolean, p_overlap interval); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.claim_reconciliation_cursor(p_job_type text, p_interval interval, p_force boolean, p_overlap interval) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.claim_reconciliation_cursor(p_job_type text, p_interval interval, p_force boolean, p_overlap interval) TO bitrix_sync_user;

--
-- Name: FUNCTION claim_sync_tasks(p_worker text, p_limit integer, p_lease interval); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.claim_sync_tasks(p_worker text, p_limit integer, p_lease interval) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.claim_sync_tasks(p_worker text, p_limit integer, p_lease interval) TO bitrix_sync_user;

--
-- Name: FUNCTION claim_webhooks(p_worker text, p_limit integer, p_lease interval, p_receiver text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.claim_webhooks(p_worker text, p_limit integer, p_lease interval, p_receiver text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.claim_webhooks(p_worker text, p_limit integer, p_lease interval, p_receiver text) TO bitrix_sync_user;

--
-- Name: FUNCTION claim_workflows(p_worker text, p_limit integer, p_lease interval); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.claim_workflows(p_worker text, p_limit integer, p_lease interval) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.claim_workflows(p_worker text, p_limit integer, p_lease interval) TO bitrix_sync_user;

--
-- Name: FUNCTION clear_unkeyed_hashes(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.clear_unkeyed_hashes() FROM PUBLIC;

--
-- Name: FUNCTION close_mapping(p_mapping_id uuid, p_reason text, p_workflow_id uuid, p_broken boolean); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.close_mapping(p_mapping_id uuid, p_reason text, p_workflow_id uuid, p_broken boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.close_mapping(p_mapping_id uuid, p_reason text, p_workflow_id uuid, p_broken boolean) TO bitrix_sync_user;

--
-- Name: FUNCTION complete_command(p_id bigint, p_lease_token uuid, p_response jsonb); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.complete_command(p_id bigint, p_lease_token uuid, p_response jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.complete_command(p_id bigint, p_lease_token uuid, p_response jsonb) TO bitrix_sync_user;

--
-- Name: FUNCTION complete_commands(p_ids bigint[], p_lease_tokens uuid[], p_responses jsonb[]); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.complete_commands(p_ids bigint[], p_lease_tokens uuid[], p_responses jsonb[]) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.complete_commands(p_ids bigint[], p_lease_tokens uuid[], p_responses jsonb[]) TO bitrix_sync_user;

--
-- Name: FUNCTION complete_rebind(p_workflow_id uuid, p_lease_token uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.complete_rebind(p_workflow_id uuid, p_lease_token uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.complete_rebind(p_workflow_id uuid, p_lease_token uuid) TO bitrix_sync_user;

--
-- Name: FUNCTION complete_sync_task(p_id uuid, p_lease_token uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.complete_sync_task(p_id uuid, p_lease_token uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.complete_sync_task(p_id uuid, p_lease_token uuid) TO bitrix_sync_user;

--
-- Name: FUNCTION complete_webhook(p_id bigint, p_lease_token uuid, p_outcome text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.complete_webhook(p_id bigint, p_lease_token uuid, p_outcome text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.complete_webhook(p_id bigint, p_lease_token uuid, p_outcome text) TO bitrix_sync_user;

--
-- Name: FUNCTION confirm_phone_link(p_user_id uuid, p_reason text, p_operator_id text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.confirm_phone_link(p_user_id uuid, p_reason text, p_operator_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.confirm_phone_link(p_user_id uuid, p_reason text, p_operator_id text) TO bitrix_sync_admin;

--
-- Name: FUNCTION crm_contract_forms(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.crm_contract_forms() FROM PUBLIC;

--
-- Name: FUNCTION crm_contract_problem(p_portal_host text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.crm_contract_problem(p_portal_host text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.crm_contract_problem(p_portal_host text) TO bitrix_sync_user;

--
-- Name: FUNCTION crm_contract_status(p_portal_host text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.crm_contract_status(p_portal_host text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.crm_contract_status(p_portal_host text) TO bitrix_sync_user;
GRANT ALL ON FUNCTION bitrix_sync.crm_contract_status(p_portal_host text) TO bitrix_sync_admin;

--
-- Name: FUNCTION crm_last_answered_at(p_bucket text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.crm_last_answered_at(p_bucket text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.crm_last_answered_at(p_bucket text) TO bitrix_sync_user;

--
-- Name: FUNCTION crm_limiter_state(p_bucket text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.crm_limiter_state(p_bucket text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.crm_limiter_state(p_bucket text) TO bitrix_sync_user;
GRANT ALL ON FUNCTION bitrix_sync.crm_limiter_state(p_bucket text) TO bitrix_sync_admin;

--
-- Name: FUNCTION crontab_runs(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.crontab_runs() FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.crontab_runs() TO bitrix_sync_admin;

--
-- Name: FUNCTION cutover_performed(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.cutover_performed() FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.cutover_performed() TO bitrix_sync_user;
GRANT ALL ON FUNCTION bitrix_sync.cutover_performed() TO bitrix_sync_admin;

--
-- Name: FUNCTION dead_letter_command(p_id bigint, p_lease_token uuid, p_error_code text, p_http_status integer, p_bitrix_error text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.dead_letter_command(p_id bigint, p_lease_token uuid, p_error_code text, p_http_status integer, p_bitrix_error text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.dead_letter_command(p_id bigint, p_lease_token uuid, p_error_code text, p_http_status integer, p_bitrix_error text) TO bitrix_sync_user;

--
-- Name: FUNCTION dead_letter_sync_task(p_id uuid, p_lease_token uuid, p_error_code text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.dead_letter_sync_task(p_id uuid, p_lease_token uuid, p_error_code text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.dead_letter_sync_task(p_id uuid, p_lease_token uuid, p_error_code text) TO bitrix_sync_user;

--
-- Name: FUNCTION dead_letter_webhook(p_id bigint, p_lease_token uuid, p_error_code text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.dead_letter_webhook(p_id bigint, p_lease_token uuid, p_error_code text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.dead_letter_webhook(p_id bigint, p_lease_token uuid, p_error_code text) TO bitrix_sync_user;

--
-- Name: FUNCTION delete_retention_batch(p_table text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.delete_retention_batch(p_table text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.delete_retention_batch(p_table text) TO bitrix_sync_user;
GRANT ALL ON FUNCTION bitrix_sync.delete_retention_batch(p_table text) TO bitrix_sync_admin;

--
-- Name: FUNCTION diagnose_app_values(p_user_id uuid, p_crm jsonb); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.diagnose_app_values(p_user_id uuid, p_crm jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.diagnose_app_values(p_user_id uuid, p_crm jsonb) TO bitrix_sync_admin;

--
-- Name: FUNCTION drift_metrics(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.drift_metrics() FROM PUBLIC;

--
-- Name: FUNCTION due_commands(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.due_commands() FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.due_commands() TO bitrix_sync_user;

--
-- Name: FUNCTION explain_user(p_user_id uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.explain_user(p_user_id uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.explain_user(p_user_id uuid) TO bitrix_sync_admin;

--
-- Name: FUNCTION extend_sync_task_lease(p_id uuid, p_lease_token uuid, p_lease interval); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.extend_sync_task_lease(p_id uuid, p_lease_token uuid, p_lease interval) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.extend_sync_task_lease(p_id uuid, p_lease_token uuid, p_lease interval) TO bitrix_sync_user;

--
-- Name: FUNCTION extend_workflow_lease(p_id uuid, p_lease_token uuid, p_lease interval); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.extend_workflow_lease(p_id uuid, p_lease_token uuid, p_lease interval) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.extend_workflow_lease(p_id uuid, p_lease_token uuid, p_lease interval) TO bitrix_sync_user;

--
-- Name: FUNCTION fail_alert_lookup(p_alert_id bigint); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.fail_alert_lookup(p_alert_id bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.fail_alert_lookup(p_alert_id bigint) TO bitrix_sync_user;

--
-- Name: FUNCTION fail_audit_run(p_lease_token uuid, p_error_code text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.fail_audit_run(p_lease_token uuid, p_error_code text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.fail_audit_run(p_lease_token uuid, p_error_code text) TO bitrix_sync_user;

--
-- Name: FUNCTION fail_reconciliation_run(p_job_type text, p_lease_token uuid, p_error_code text, p_retry_after interval); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.fail_reconciliation_run(p_job_type text, p_lease_token uuid, p_error_code text, p_retry_after interval) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.fail_reconciliation_run(p_job_type text, p_lease_token uuid, p_error_code text, p_retry_after interval) TO bitrix_sync_user;

--
-- Name: FUNCTION finish_audit_run(p_lease_token uuid, p_audited integer, p_requests integer); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.finish_audit_run(p_lease_token uuid, p_audited integer, p_requests integer) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.finish_audit_run(p_lease_token uuid, p_audited integer, p_requests integer) TO bitrix_sync_user;

--
-- Name: TABLE business_alerts; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.business_alerts TO bitrix_sync_user;

--
-- Name: COLUMN business_alerts.alert_type; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(alert_type) ON TABLE bitrix_sync.business_alerts TO bitrix_sync_user;

--
-- Name: COLUMN business_alerts.severity; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(severity) ON TABLE bitrix_sync.business_alerts TO bitrix_sync_user;

--
-- Name: COLUMN business_alerts.fingerprint; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(fingerprint) ON TABLE bitrix_sync.business_alerts TO bitrix_sync_user;

--
-- Name: COLUMN business_alerts.user_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(user_id) ON TABLE bitrix_sync.business_alerts TO bitrix_sync_user;

--
-- Name: COLUMN business_alerts.current_contact_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(current_contact_id),UPDATE(current_contact_id) ON TABLE bitrix_sync.business_alerts TO bitrix_sync_user;

--
-- Name: COLUMN business_alerts.selected_contact_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(selected_contact_id),UPDATE(selected_contact_id) ON TABLE bitrix_sync.business_alerts TO bitrix_sync_user;

--
-- Name: COLUMN business_alerts.candidate_contact_ids; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(candidate_contact_ids),UPDATE(candidate_contact_ids) ON TABLE bitrix_sync.business_alerts TO bitrix_sync_user;

--
-- Name: COLUMN business_alerts.details; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(details),UPDATE(details) ON TABLE bitrix_sync.business_alerts TO bitrix_sync_user;

--
-- Name: COLUMN business_alerts.status; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(status) ON TABLE bitrix_sync.business_alerts TO bitrix_sync_user;

--
-- Name: COLUMN business_alerts.item_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(item_id) ON TABLE bitrix_sync.business_alerts TO bitrix_sync_user;

--
-- Name: COLUMN business_alerts.stage_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(stage_id) ON TABLE bitrix_sync.business_alerts TO bitrix_sync_user;

--
-- Name: COLUMN business_alerts.crm_sync_status; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(crm_sync_status) ON TABLE bitrix_sync.business_alerts TO bitrix_sync_user;

--
-- Name: COLUMN business_alerts.occurrence_count; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(occurrence_count) ON TABLE bitrix_sync.business_alerts TO bitrix_sync_user;

--
-- Name: COLUMN business_alerts.last_occurred_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(last_occurred_at) ON TABLE bitrix_sync.business_alerts TO bitrix_sync_user;

--
-- Name: COLUMN business_alerts.previous_alert_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(previous_alert_id) ON TABLE bitrix_sync.business_alerts TO bitrix_sync_user;

--
-- Name: COLUMN business_alerts.correlation_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT INSERT(correlation_id),UPDATE(correlation_id) ON TABLE bitrix_sync.business_alerts TO bitrix_sync_user;

--
-- Name: COLUMN business_alerts.closed_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT UPDATE(closed_at) ON TABLE bitrix_sync.business_alerts TO bitrix_sync_user;

--
-- Name: FUNCTION finish_business_alert(p_alert_id bigint, p_status text, p_stage_id text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.finish_business_alert(p_alert_id bigint, p_status text, p_stage_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.finish_business_alert(p_alert_id bigint, p_status text, p_stage_id text) TO bitrix_sync_user;

--
-- Name: FUNCTION finish_reconciliation_run(p_job_type text, p_lease_token uuid, p_scanned integer, p_updated integer, p_recovered integer); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.finish_reconciliation_run(p_job_type text, p_lease_token uuid, p_scanned integer, p_updated integer, p_recovered integer) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.finish_reconciliation_run(p_job_type text, p_lease_token uuid, p_scanned integer, p_updated integer, p_recovered integer) TO bitrix_sync_user;

--
-- Name: FUNCTION fire_workflow_event(p_id uuid, p_lease_token uuid, p_event text, p_changes jsonb); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.fire_workflow_event(p_id uuid, p_lease_token uuid, p_event text, p_changes jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.fire_workflow_event(p_id uuid, p_lease_token uuid, p_event text, p_changes jsonb) TO bitrix_sync_user;

--
-- Name: FUNCTION fire_workflow_events(p_ids uuid[], p_lease_tokens uuid[], p_events text[], p_changes jsonb[]); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.fire_workflow_events(p_ids uuid[], p_lease_tokens uuid[], p_events text[], p_changes jsonb[]) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.fire_workflow_events(p_ids uuid[], p_lease_tokens uuid[], p_events text[], p_changes jsonb[]) TO bitrix_sync_user;

--
-- Name: FUNCTION fold_intent_journal(p_limit integer, p_wait boolean); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.fold_intent_journal(p_limit integer, p_wait boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.fold_intent_journal(p_limit integer, p_wait boolean) TO bitrix_sync_user;
GRANT ALL ON FUNCTION bitrix_sync.fold_intent_journal(p_limit integer, p_wait boolean) TO bitrix_sync_admin;

--
-- Name: FUNCTION held_link_read(p_mapping_id uuid, p_crm_updated_at timestamp with time zone, p_robot_webhook boolean); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.held_link_read(p_mapping_id uuid, p_crm_updated_at timestamp with time zone, p_robot_webhook boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.held_link_read(p_mapping_id uuid, p_crm_updated_at timestamp with time zone, p_robot_webhook boolean) TO bitrix_sync_user;

--
-- Name: FUNCTION held_link_read(p_mapping_id uuid, p_crm_updated_at timestamp with time zone, p_robot_webhook boolean, p_values_hash text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.held_link_read(p_mapping_id uuid, p_crm_updated_at timestamp with time zone, p_robot_webhook boolean, p_values_hash text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.held_link_read(p_mapping_id uuid, p_crm_updated_at timestamp with time zone, p_robot_webhook boolean, p_values_hash text) TO bitrix_sync_user;

--
-- Name: FUNCTION hold_phone_link(p_user_id uuid, p_contact_id text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.hold_phone_link(p_user_id uuid, p_contact_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.hold_phone_link(p_user_id uuid, p_contact_id text) TO bitrix_sync_user;

--
-- Name: FUNCTION issue_alert_command(p_alert_id bigint, p_command_type text, p_params jsonb); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.issue_alert_command(p_alert_id bigint, p_command_type text, p_params jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.issue_alert_command(p_alert_id bigint, p_command_type text, p_params jsonb) TO bitrix_sync_user;

--
-- Name: FUNCTION issue_alert_lookup(p_alert_id bigint, p_params jsonb); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.issue_alert_lookup(p_alert_id bigint, p_params jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.issue_alert_lookup(p_alert_id bigint, p_params jsonb) TO bitrix_sync_user;

--
-- Name: FUNCTION issue_command(p_workflow_id uuid, p_lease_token uuid, p_command_type text, p_params jsonb, p_step text, p_trace_context text, p_step_data jsonb); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.issue_command(p_workflow_id uuid, p_lease_token uuid, p_command_type text, p_params jsonb, p_step text, p_trace_context text, p_step_data jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.issue_command(p_workflow_id uuid, p_lease_token uuid, p_command_type text, p_params jsonb, p_step text, p_trace_context text, p_step_data jsonb) TO bitrix_sync_user;

--
-- Name: FUNCTION issue_commands(p_workflow_ids uuid[], p_lease_tokens uuid[], p_command_types text[], p_params jsonb[], p_steps text[], p_trace_contexts text[], p_step_data jsonb[]); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.issue_commands(p_workflow_ids uuid[], p_lease_tokens uuid[], p_command_types text[], p_params jsonb[], p_steps text[], p_trace_contexts text[], p_step_data jsonb[]) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.issue_commands(p_workflow_ids uuid[], p_lease_tokens uuid[], p_command_types text[], p_params jsonb[], p_steps text[], p_trace_contexts text[], p_step_data jsonb[]) TO bitrix_sync_user;

--
-- Name: FUNCTION keep_phone_link_hold(p_user_id uuid, p_contact_id text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.keep_phone_link_hold(p_user_id uuid, p_contact_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.keep_phone_link_hold(p_user_id uuid, p_contact_id text) TO bitrix_sync_user;

--
-- Name: FUNCTION list_dead_letters(p_include_resolved boolean, p_limit integer); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.list_dead_letters(p_include_resolved boolean, p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.list_dead_letters(p_include_resolved boolean, p_limit integer) TO bitrix_sync_admin;

--
-- Name: FUNCTION mark_alert_mirror_failed(p_alert_id bigint); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.mark_alert_mirror_failed(p_alert_id bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.mark_alert_mirror_failed(p_alert_id bigint) TO bitrix_sync_user;

--
-- Name: FUNCTION mark_alert_mirrored(p_alert_id bigint); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.mark_alert_mirrored(p_alert_id bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.mark_alert_mirrored(p_alert_id bigint) TO bitrix_sync_user;

--
-- Name: FUNCTION mark_command_uncertain(p_id bigint, p_lease_token uuid, p_error_code text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.mark_command_uncertain(p_id bigint, p_lease_token uuid, p_error_code text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.mark_command_uncertain(p_id bigint, p_lease_token uuid, p_error_code text) TO bitrix_sync_user;

--
-- Name: FUNCTION mark_contact_snapshot_stale(p_contact_id text, p_user_id uuid, p_reason text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.mark_contact_snapshot_stale(p_contact_id text, p_user_id uuid, p_reason text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.mark_contact_snapshot_stale(p_contact_id text, p_user_id uuid, p_reason text) TO bitrix_sync_user;

--
-- Name: FUNCTION metrics_snapshot(p_bucket text, p_check_mappings boolean); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.metrics_snapshot(p_bucket text, p_check_mappings boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.metrics_snapshot(p_bucket text, p_check_mappings boolean) TO bitrix_sync_user;
GRANT ALL ON FUNCTION bitrix_sync.metrics_snapshot(p_bucket text, p_check_mappings boolean) TO bitrix_sync_admin;

--
-- Name: FUNCTION note_crm_answered(p_bucket text, p_increase double precision, p_recovery_per_sec double precision); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.note_crm_answered(p_bucket text, p_increase double precision, p_recovery_per_sec double precision) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.note_crm_answered(p_bucket text, p_increase double precision, p_recovery_per_sec double precision) TO bitrix_sync_user;

--
-- Name: FUNCTION note_crm_operating(p_bucket text, p_methods text[], p_operating double precision[], p_reset_at timestamp with time zone[]); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.note_crm_operating(p_bucket text, p_methods text[], p_operating double precision[], p_reset_at timestamp with time zone[]) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.note_crm_operating(p_bucket text, p_methods text[], p_operating double precision[], p_reset_at timestamp with time zone[]) TO bitrix_sync_user;

--
-- Name: FUNCTION note_method_blocked(p_bucket text, p_method text, p_until timestamp with time zone); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.note_method_blocked(p_bucket text, p_method text, p_until timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.note_method_blocked(p_bucket text, p_method text, p_until timestamp with time zone) TO bitrix_sync_user;

--
-- Name: FUNCTION note_rate_limited(p_bucket text, p_decrease double precision, p_min_factor double precision, p_cooldown_ms integer, p_recovery_per_sec double precision); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.note_rate_limited(p_bucket text, p_decrease double precision, p_min_factor double precision, p_cooldown_ms integer, p_recovery_per_sec double precision) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.note_rate_limited(p_bucket text, p_decrease double precision, p_min_factor double precision, p_cooldown_ms integer, p_recovery_per_sec double precision) TO bitrix_sync_user;

--
-- Name: FUNCTION open_mapping(p_user_id uuid, p_contact_id text, p_workflow_id uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.open_mapping(p_user_id uuid, p_contact_id text, p_workflow_id uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.open_mapping(p_user_id uuid, p_contact_id text, p_workflow_id uuid) TO bitrix_sync_user;

--
-- Name: FUNCTION open_mappings(p_user_ids uuid[], p_contact_ids text[], p_workflow_ids uuid[]); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.open_mappings(p_user_ids uuid[], p_contact_ids text[], p_workflow_ids uuid[]) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.open_mappings(p_user_ids uuid[], p_contact_ids text[], p_workflow_ids uuid[]) TO bitrix_sync_user;

--
-- Name: TABLE crm_inflight_slots; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT,INSERT,DELETE ON TABLE bitrix_sync.crm_inflight_slots TO bitrix_sync_user;

--
-- Name: TABLE sync_pauses; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.sync_pauses TO bitrix_sync_user;
GRANT SELECT ON TABLE bitrix_sync.sync_pauses TO bitrix_sync_admin;

--
-- Name: TABLE status_pause; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.status_pause TO bitrix_sync_user;
GRANT SELECT ON TABLE bitrix_sync.status_pause TO bitrix_sync_admin;

--
-- Name: FUNCTION pause_sync(p_operator text, p_reason text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.pause_sync(p_operator text, p_reason text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.pause_sync(p_operator text, p_reason text) TO bitrix_sync_admin;

--
-- Name: FUNCTION perform_cutover(p_actor text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.perform_cutover(p_actor text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.perform_cutover(p_actor text) TO bitrix_sync_admin;

--
-- Name: FUNCTION propose_settings(p_changes jsonb, p_actor text, p_note text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.propose_settings(p_changes jsonb, p_actor text, p_note text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.propose_settings(p_changes jsonb, p_actor text, p_note text) TO bitrix_sync_admin;

--
-- Name: FUNCTION raise_business_alert(p_alert_type text, p_severity text, p_fingerprint text, p_user_id uuid, p_current_contact_id text, p_selected_contact_id text, p_candidate_contact_ids jsonb, p_details jsonb, p_correlation_id uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.raise_business_alert(p_alert_type text, p_severity text, p_fingerprint text, p_user_id uuid, p_current_contact_id text, p_selected_contact_id text, p_candidate_contact_ids jsonb, p_details jsonb, p_correlation_id uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.raise_business_alert(p_alert_type text, p_severity text, p_fingerprint text, p_user_id uuid, p_current_contact_id text, p_selected_contact_id text, p_candidate_contact_ids jsonb, p_details jsonb, p_correlation_id uuid) TO bitrix_sync_user;

--
-- Name: FUNCTION reconciliation_spike_metrics(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.reconciliation_spike_metrics() FROM PUBLIC;

--
-- Name: FUNCTION record_alert_item(p_alert_id bigint, p_item_id bigint, p_stage_id text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.record_alert_item(p_alert_id bigint, p_item_id bigint, p_stage_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.record_alert_item(p_alert_id bigint, p_item_id bigint, p_stage_id text) TO bitrix_sync_user;

--
-- Name: FUNCTION record_audit_findings(p_lease_token uuid, p_read_at timestamp with time zone, p_results jsonb); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.record_audit_findings(p_lease_token uuid, p_read_at timestamp with time zone, p_results jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.record_audit_findings(p_lease_token uuid, p_read_at timestamp with time zone, p_results jsonb) TO bitrix_sync_user;

--
-- Name: FUNCTION record_contact_created(p_contact_id text, p_user_id uuid, p_name_hash text, p_email_hash text, p_phone_hash text, p_citizenship_enum_id text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.record_contact_created(p_contact_id text, p_user_id uuid, p_name_hash text, p_email_hash text, p_phone_hash text, p_citizenship_enum_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.record_contact_created(p_contact_id text, p_user_id uuid, p_name_hash text, p_email_hash text, p_phone_hash text, p_citizenship_enum_id text) TO bitrix_sync_user;

--
-- Name: FUNCTION record_contact_phone(p_contact_id text, p_user_id uuid, p_phone_hash text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.record_contact_phone(p_contact_id text, p_user_id uuid, p_phone_hash text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.record_contact_phone(p_contact_id text, p_user_id uuid, p_phone_hash text) TO bitrix_sync_user;

--
-- Name: FUNCTION record_crm_contract_probe(p_portal_host text, p_forms jsonb, p_run_id text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.record_crm_contract_probe(p_portal_host text, p_forms jsonb, p_run_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.record_crm_contract_probe(p_portal_host text, p_forms jsonb, p_run_id text) TO bitrix_sync_user;

--
-- Name: FUNCTION record_recovered_spike(p_job_type text, p_lease_token uuid, p_recovered integer, p_mapped integer, p_baseline double precision); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.record_recovered_spike(p_job_type text, p_lease_token uuid, p_recovered integer, p_mapped integer, p_baseline double precision) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.record_recovered_spike(p_job_type text, p_lease_token uuid, p_recovered integer, p_mapped integer, p_baseline double precision) TO bitrix_sync_user;

--
-- Name: FUNCTION record_refused_sources(p_sources inet[], p_receivers text[], p_counts integer[], p_first_seen timestamp with time zone[], p_last_seen timestamp with time zone[]); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.record_refused_sources(p_sources inet[], p_receivers text[], p_counts integer[], p_first_seen timestamp with time zone[], p_last_seen timestamp with time zone[]) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.record_refused_sources(p_sources inet[], p_receivers text[], p_counts integer[], p_first_seen timestamp with time zone[], p_last_seen timestamp with time zone[]) TO bitrix_sync_user;

--
-- Name: FUNCTION record_registered_contacts(p_lease_token uuid, p_read_at timestamp with time zone, p_from_id bigint, p_to_id bigint, p_checked_ids bigint[], p_rows jsonb); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.record_registered_contacts(p_lease_token uuid, p_read_at timestamp with time zone, p_from_id bigint, p_to_id bigint, p_checked_ids bigint[], p_rows jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.record_registered_contacts(p_lease_token uuid, p_read_at timestamp with time zone, p_from_id bigint, p_to_id bigint, p_checked_ids bigint[], p_rows jsonb) TO bitrix_sync_user;

--
-- Name: FUNCTION record_webhook(p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet, p_event_id text, p_source_ts timestamp with time zone); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.record_webhook(p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet, p_event_id text, p_source_ts timestamp with time zone) FROM PUBLIC;

--
-- Name: FUNCTION recover_alert_command(p_id bigint, p_delay interval); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.recover_alert_command(p_id bigint, p_delay interval) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.recover_alert_command(p_id bigint, p_delay interval) TO bitrix_sync_user;

--
-- Name: FUNCTION refresh_user_drift(p_lease_token uuid, p_read_at timestamp with time zone); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.refresh_user_drift(p_lease_token uuid, p_read_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.refresh_user_drift(p_lease_token uuid, p_read_at timestamp with time zone) TO bitrix_sync_user;

--
-- Name: FUNCTION reject_command(p_id bigint, p_lease_token uuid, p_error_code text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.reject_command(p_id bigint, p_lease_token uuid, p_error_code text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.reject_command(p_id bigint, p_lease_token uuid, p_error_code text) TO bitrix_sync_user;

--
-- Name: FUNCTION rekey_contact_phones(p_contact_ids text[], p_old_hashes text[], p_new_hashes text[]); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.rekey_contact_phones(p_contact_ids text[], p_old_hashes text[], p_new_hashes text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.rekey_contact_phones(p_contact_ids text[], p_old_hashes text[], p_new_hashes text[]) TO bitrix_sync_user;

--
-- Name: FUNCTION release_command(p_id bigint, p_lease_token uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.release_command(p_id bigint, p_lease_token uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.release_command(p_id bigint, p_lease_token uuid) TO bitrix_sync_user;

--
-- Name: FUNCTION release_crm_request(p_slot_id uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.release_crm_request(p_slot_id uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.release_crm_request(p_slot_id uuid) TO bitrix_sync_user;

--
-- Name: FUNCTION release_crm_request(p_slot_id uuid, p_bucket text, p_answered boolean); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.release_crm_request(p_slot_id uuid, p_bucket text, p_answered boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.release_crm_request(p_slot_id uuid, p_bucket text, p_answered boolean) TO bitrix_sync_user;

--
-- Name: FUNCTION release_spare_crm_request(p_slot_id uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.release_spare_crm_request(p_slot_id uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.release_spare_crm_request(p_slot_id uuid) TO bitrix_sync_user;
GRANT ALL ON FUNCTION bitrix_sync.release_spare_crm_request(p_slot_id uuid) TO bitrix_sync_admin;

--
-- Name: FUNCTION release_sync_task(p_id uuid, p_lease_token uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.release_sync_task(p_id uuid, p_lease_token uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.release_sync_task(p_id uuid, p_lease_token uuid) TO bitrix_sync_user;

--
-- Name: FUNCTION repair_drift(p_requested_by text, p_reason text, p_user_ids uuid[], p_dry_run boolean); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.repair_drift(p_requested_by text, p_reason text, p_user_ids uuid[], p_dry_run boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.repair_drift(p_requested_by text, p_reason text, p_user_ids uuid[], p_dry_run boolean) TO bitrix_sync_admin;

--
-- Name: FUNCTION request_bitrix_contact_rebind(user_id uuid, target_b24_id text, reason text, operator_id text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.request_bitrix_contact_rebind(user_id uuid, target_b24_id text, reason text, operator_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.request_bitrix_contact_rebind(user_id uuid, target_b24_id text, reason text, operator_id text) TO bitrix_sync_admin;

--
-- Name: FUNCTION request_convergence_audit(p_requested_by text, p_reason text, p_all boolean); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.request_convergence_audit(p_requested_by text, p_reason text, p_all boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.request_convergence_audit(p_requested_by text, p_reason text, p_all boolean) TO bitrix_sync_admin;

--
-- Name: FUNCTION request_reconciliation(p_job_type text, p_requested_by text, p_reason text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.request_reconciliation(p_job_type text, p_requested_by text, p_reason text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.request_reconciliation(p_job_type text, p_requested_by text, p_reason text) TO bitrix_sync_admin;

--
-- Name: FUNCTION requeue_dead_letter(p_id bigint, p_operator text, p_reason text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.requeue_dead_letter(p_id bigint, p_operator text, p_reason text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.requeue_dead_letter(p_id bigint, p_operator text, p_reason text) TO bitrix_sync_admin;

--
-- Name: FUNCTION resolve_alert_lookup(p_alert_id bigint, p_items jsonb); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.resolve_alert_lookup(p_alert_id bigint, p_items jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.resolve_alert_lookup(p_alert_id bigint, p_items jsonb) TO bitrix_sync_user;

--
-- Name: FUNCTION resolve_command_reconcile(p_id bigint, p_workflow_token uuid, p_outcome text, p_response jsonb, p_error_code text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.resolve_command_reconcile(p_id bigint, p_workflow_token uuid, p_outcome text, p_response jsonb, p_error_code text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.resolve_command_reconcile(p_id bigint, p_workflow_token uuid, p_outcome text, p_response jsonb, p_error_code text) TO bitrix_sync_user;

--
-- Name: FUNCTION resume_parked_workflow(p_workflow_id uuid, p_decision text, p_reason text, p_operator_id text, p_contact_id text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.resume_parked_workflow(p_workflow_id uuid, p_decision text, p_reason text, p_operator_id text, p_contact_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.resume_parked_workflow(p_workflow_id uuid, p_decision text, p_reason text, p_operator_id text, p_contact_id text) TO bitrix_sync_admin;

--
-- Name: FUNCTION resume_preview(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.resume_preview() FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.resume_preview() TO bitrix_sync_admin;

--
-- Name: FUNCTION resume_sync(p_operator text, p_confirm_pause_id bigint, p_reason text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.resume_sync(p_operator text, p_confirm_pause_id bigint, p_reason text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.resume_sync(p_operator text, p_confirm_pause_id bigint, p_reason text) TO bitrix_sync_admin;

--
-- Name: FUNCTION retention_preview(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.retention_preview() FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.retention_preview() TO bitrix_sync_admin;

--
-- Name: FUNCTION retention_step(p_table text, p_run_started_at timestamp with time zone); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.retention_step(p_table text, p_run_started_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.retention_step(p_table text, p_run_started_at timestamp with time zone) TO bitrix_sync_user;
GRANT ALL ON FUNCTION bitrix_sync.retention_step(p_table text, p_run_started_at timestamp with time zone) TO bitrix_sync_admin;

--
-- Name: FUNCTION retry_command(p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval, p_spends_attempt boolean, p_http_status integer, p_bitrix_error text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.retry_command(p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval, p_spends_attempt boolean, p_http_status integer, p_bitrix_error text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.retry_command(p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval, p_spends_attempt boolean, p_http_status integer, p_bitrix_error text) TO bitrix_sync_user;

--
-- Name: FUNCTION retry_sync_task(p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.retry_sync_task(p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.retry_sync_task(p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval) TO bitrix_sync_user;

--
-- Name: FUNCTION retry_webhook(p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.retry_webhook(p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.retry_webhook(p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval) TO bitrix_sync_user;

--
-- Name: FUNCTION rollback_settings(p_to_version integer, p_actor text, p_note text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.rollback_settings(p_to_version integer, p_actor text, p_note text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.rollback_settings(p_to_version integer, p_actor text, p_note text) TO bitrix_sync_admin;

--
-- Name: FUNCTION save_workflow_step(p_id uuid, p_lease_token uuid, p_step_data jsonb, p_current_step text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.save_workflow_step(p_id uuid, p_lease_token uuid, p_step_data jsonb, p_current_step text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.save_workflow_step(p_id uuid, p_lease_token uuid, p_step_data jsonb, p_current_step text) TO bitrix_sync_user;

--
-- Name: FUNCTION schedule_workflow_retry(p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.schedule_workflow_retry(p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.schedule_workflow_retry(p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval) TO bitrix_sync_user;

--
-- Name: FUNCTION send_commands(p_ids bigint[], p_lease_tokens uuid[], p_batch_id uuid, p_reply_within interval); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.send_commands(p_ids bigint[], p_lease_tokens uuid[], p_batch_id uuid, p_reply_within interval) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.send_commands(p_ids bigint[], p_lease_tokens uuid[], p_batch_id uuid, p_reply_within interval) TO bitrix_sync_user;

--
-- Name: FUNCTION start_or_join_workflow(p_user_id uuid, p_intent_type text, p_source_task_id uuid, p_content_hash text, p_trace_context text); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.start_or_join_workflow(p_user_id uuid, p_intent_type text, p_source_task_id uuid, p_content_hash text, p_trace_context text) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.start_or_join_workflow(p_user_id uuid, p_intent_type text, p_source_task_id uuid, p_content_hash text, p_trace_context text) TO bitrix_sync_user;

--
-- Name: FUNCTION start_rebind_request(p_workflow_id uuid, p_lease_token uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.start_rebind_request(p_workflow_id uuid, p_lease_token uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.start_rebind_request(p_workflow_id uuid, p_lease_token uuid) TO bitrix_sync_user;

--
-- Name: FUNCTION step_context(p_id uuid); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.step_context(p_id uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.step_context(p_id uuid) TO bitrix_sync_user;

--
-- Name: FUNCTION sync_paused(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.sync_paused() FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.sync_paused() TO bitrix_sync_user;
GRANT ALL ON FUNCTION bitrix_sync.sync_paused() TO bitrix_sync_admin;

--
-- Name: FUNCTION take_sync_tasks(p_ids uuid[], p_lease_tokens uuid[], p_user_ids uuid[], p_intent_types text[], p_content_hashes text[], p_trace_contexts text[]); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.take_sync_tasks(p_ids uuid[], p_lease_tokens uuid[], p_user_ids uuid[], p_intent_types text[], p_content_hashes text[], p_trace_contexts text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.take_sync_tasks(p_ids uuid[], p_lease_tokens uuid[], p_user_ids uuid[], p_intent_types text[], p_content_hashes text[], p_trace_contexts text[]) TO bitrix_sync_user;

--
-- Name: FUNCTION tg__forbid_delete(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.tg__forbid_delete() FROM PUBLIC;

--
-- Name: FUNCTION tg__guard_transition(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.tg__guard_transition() FROM PUBLIC;

--
-- Name: FUNCTION tg__refuse_check(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.tg__refuse_check() FROM PUBLIC;

--
-- Name: FUNCTION tg__refuse_immutable_change(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.tg__refuse_immutable_change() FROM PUBLIC;

--
-- Name: FUNCTION tg__refuse_insert_state(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.tg__refuse_insert_state() FROM PUBLIC;

--
-- Name: FUNCTION tg__set_updated_at(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.tg__set_updated_at() FROM PUBLIC;

--
-- Name: FUNCTION tg_business_alerts__count_remote_missing(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.tg_business_alerts__count_remote_missing() FROM PUBLIC;

--
-- Name: FUNCTION tg_crm_commands__count_transition(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.tg_crm_commands__count_transition() FROM PUBLIC;

--
-- Name: FUNCTION tg_entity_external_mapping__audit_mark(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.tg_entity_external_mapping__audit_mark() FROM PUBLIC;

--
-- Name: FUNCTION tg_settings_versions__freeze(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.tg_settings_versions__freeze() FROM PUBLIC;

--
-- Name: FUNCTION tg_technical_dead_letters__count(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.tg_technical_dead_letters__count() FROM PUBLIC;

--
-- Name: FUNCTION tg_webhook_inbox__count_coalesced(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.tg_webhook_inbox__count_coalesced() FROM PUBLIC;

--
-- Name: FUNCTION tg_workflow_instances__close_rebind_request(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.tg_workflow_instances__close_rebind_request() FROM PUBLIC;

--
-- Name: FUNCTION tg_workflow_instances__count_transition(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.tg_workflow_instances__count_transition() FROM PUBLIC;

--
-- Name: FUNCTION tg_workflow_instances__guard_state(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.tg_workflow_instances__guard_state() FROM PUBLIC;

--
-- Name: FUNCTION tg_workflow_instances__start_held_intent(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.tg_workflow_instances__start_held_intent() FROM PUBLIC;

--
-- Name: FUNCTION validate_settings_version(p_version integer); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.validate_settings_version(p_version integer) FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.validate_settings_version(p_version integer) TO bitrix_sync_admin;

--
-- Name: FUNCTION watch_intake(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.watch_intake() FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.watch_intake() TO bitrix_sync_user;

--
-- Name: FUNCTION worker_jobs(); Type: ACL; Schema: bitrix_sync; Owner: -
--

REVOKE ALL ON FUNCTION bitrix_sync.worker_jobs() FROM PUBLIC;
GRANT ALL ON FUNCTION bitrix_sync.worker_jobs() TO bitrix_sync_admin;

--
-- Name: TABLE _private_jobs; Type: ACL; Schema: graphile_worker; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE graphile_worker._private_jobs TO bitrix_sync_user;

--
-- Name: FUNCTION add_job(identifier text, payload json, queue_name text, run_at timestamp with time zone, max_attempts integer, job_key text, priority integer, flags text[], job_key_mode text); Type: ACL; Schema: graphile_worker; Owner: -
--

GRANT ALL ON FUNCTION graphile_worker.add_job(identifier text, payload json, queue_name text, run_at timestamp with time zone, max_attempts integer, job_key text, priority integer, flags text[], job_key_mode text) TO bitrix_sync_user;

--
-- Name: FUNCTION add_jobs(specs graphile_worker.job_spec[], job_key_preserve_run_at boolean); Type: ACL; Schema: graphile_worker; Owner: -
--

GRANT ALL ON FUNCTION graphile_worker.add_jobs(specs graphile_worker.job_spec[], job_key_preserve_run_at boolean) TO bitrix_sync_user;

--
-- Name: FUNCTION complete_jobs(job_ids bigint[]); Type: ACL; Schema: graphile_worker; Owner: -
--

GRANT ALL ON FUNCTION graphile_worker.complete_jobs(job_ids bigint[]) TO bitrix_sync_user;

--
-- Name: FUNCTION force_unlock_workers(worker_ids text[]); Type: ACL; Schema: graphile_worker; Owner: -
--

GRANT ALL ON FUNCTION graphile_worker.force_unlock_workers(worker_ids text[]) TO bitrix_sync_user;

--
-- Name: FUNCTION permanently_fail_jobs(job_ids bigint[], error_message text); Type: ACL; Schema: graphile_worker; Owner: -
--

GRANT ALL ON FUNCTION graphile_worker.permanently_fail_jobs(job_ids bigint[], error_message text) TO bitrix_sync_user;

--
-- Name: FUNCTION remove_job(job_key text); Type: ACL; Schema: graphile_worker; Owner: -
--

GRANT ALL ON FUNCTION graphile_worker.remove_job(job_key text) TO bitrix_sync_user;

--
-- Name: FUNCTION reschedule_jobs(job_ids bigint[], run_at timestamp with time zone, priority integer, attempts integer, max_attempts integer); Type: ACL; Schema: graphile_worker; Owner: -
--

GRANT ALL ON FUNCTION graphile_worker.reschedule_jobs(job_ids bigint[], run_at timestamp with time zone, priority integer, attempts integer, max_attempts integer) TO bitrix_sync_user;

--
-- Name: FUNCTION enqueue_contact_sync(); Type: ACL; Schema: han_app; Owner: -
--

REVOKE ALL ON FUNCTION han_app.enqueue_contact_sync() FROM PUBLIC;

--
-- Name: COLUMN admin_actions.id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT(id) ON TABLE bitrix_sync.admin_actions TO bitrix_sync_admin;

--
-- Name: COLUMN admin_actions.action; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT(action) ON TABLE bitrix_sync.admin_actions TO bitrix_sync_admin;

--
-- Name: COLUMN admin_actions.workflow_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT(workflow_id) ON TABLE bitrix_sync.admin_actions TO bitrix_sync_admin;

--
-- Name: COLUMN admin_actions.rebind_request_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT(rebind_request_id) ON TABLE bitrix_sync.admin_actions TO bitrix_sync_admin;

--
-- Name: COLUMN admin_actions.decision; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT(decision) ON TABLE bitrix_sync.admin_actions TO bitrix_sync_admin;

--
-- Name: COLUMN admin_actions.reason; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT(reason) ON TABLE bitrix_sync.admin_actions TO bitrix_sync_admin;

--
-- Name: COLUMN admin_actions.operator_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT(operator_id) ON TABLE bitrix_sync.admin_actions TO bitrix_sync_admin;

--
-- Name: COLUMN admin_actions.db_user; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT(db_user) ON TABLE bitrix_sync.admin_actions TO bitrix_sync_admin;

--
-- Name: COLUMN admin_actions.performed_at; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT(performed_at) ON TABLE bitrix_sync.admin_actions TO bitrix_sync_admin;

--
-- Name: COLUMN admin_actions.dead_letter_id; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT(dead_letter_id) ON TABLE bitrix_sync.admin_actions TO bitrix_sync_admin;

--
-- Name: SEQUENCE business_alert_number_seq; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT USAGE ON SEQUENCE bitrix_sync.business_alert_number_seq TO bitrix_sync_user;

--
-- Name: TABLE crm_contract_probes; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.crm_contract_probes TO bitrix_sync_admin;

--
-- Name: TABLE crm_method_blocks; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT,INSERT,UPDATE ON TABLE bitrix_sync.crm_method_blocks TO bitrix_sync_user;

--
-- Name: TABLE crm_rate_buckets; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT,INSERT,UPDATE ON TABLE bitrix_sync.crm_rate_buckets TO bitrix_sync_user;

--
-- Name: TABLE cutover; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.cutover TO bitrix_sync_user;
GRANT SELECT ON TABLE bitrix_sync.cutover TO bitrix_sync_admin;

--
-- Name: TABLE deleted_alert_items; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.deleted_alert_items TO bitrix_sync_admin;

--
-- Name: TABLE drift_repairs; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.drift_repairs TO bitrix_sync_admin;

--
-- Name: TABLE held_phone_links; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.held_phone_links TO bitrix_sync_admin;

--
-- Name: TABLE inbox_waiting; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.inbox_waiting TO bitrix_sync_admin;

--
-- Name: TABLE parked_workflows; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.parked_workflows TO bitrix_sync_admin;

--
-- Name: TABLE rebind_request_status; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.rebind_request_status TO bitrix_sync_admin;

--
-- Name: TABLE retrying_workflows; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.retrying_workflows TO bitrix_sync_admin;

--
-- Name: TABLE role_privileges; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.role_privileges TO bitrix_sync_admin;

--
-- Name: TABLE role_privilege_drift; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.role_privilege_drift TO bitrix_sync_admin;

--
-- Name: TABLE schema_contract_steps; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.schema_contract_steps TO bitrix_sync_admin;

--
-- Name: TABLE settings; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.settings TO bitrix_sync_user;
GRANT SELECT ON TABLE bitrix_sync.settings TO bitrix_sync_admin;

--
-- Name: TABLE spare_budget_use; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.spare_budget_use TO bitrix_sync_admin;

--
-- Name: TABLE state_edges; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.state_edges TO bitrix_sync_user;
GRANT SELECT ON TABLE bitrix_sync.state_edges TO bitrix_sync_admin;

--
-- Name: TABLE status_alert_mirror; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.status_alert_mirror TO bitrix_sync_user;
GRANT SELECT ON TABLE bitrix_sync.status_alert_mirror TO bitrix_sync_admin;

--
-- Name: TABLE status_alerts; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.status_alerts TO bitrix_sync_user;
GRANT SELECT ON TABLE bitrix_sync.status_alerts TO bitrix_sync_admin;

--
-- Name: TABLE status_audit; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.status_audit TO bitrix_sync_admin;

--
-- Name: TABLE status_commands; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.status_commands TO bitrix_sync_user;
GRANT SELECT ON TABLE bitrix_sync.status_commands TO bitrix_sync_admin;

--
-- Name: TABLE status_dead_letters; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.status_dead_letters TO bitrix_sync_user;
GRANT SELECT ON TABLE bitrix_sync.status_dead_letters TO bitrix_sync_admin;

--
-- Name: TABLE status_drift; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.status_drift TO bitrix_sync_admin;

--
-- Name: TABLE status_held_links; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.status_held_links TO bitrix_sync_user;
GRANT SELECT ON TABLE bitrix_sync.status_held_links TO bitrix_sync_admin;

--
-- Name: TABLE sync_queue_journal; Type: ACL; Schema: han_app; Owner: -
--

GRANT SELECT ON TABLE han_app.sync_queue_journal TO bitrix_sync_user;
GRANT SELECT ON TABLE han_app.sync_queue_journal TO han_app_user;

--
-- Name: TABLE status_queue; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.status_queue TO bitrix_sync_user;
GRANT SELECT ON TABLE bitrix_sync.status_queue TO bitrix_sync_admin;

--
-- Name: TABLE status_reconciliation; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.status_reconciliation TO bitrix_sync_admin;

--
-- Name: TABLE status_recovered_spikes; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.status_recovered_spikes TO bitrix_sync_admin;

--
-- Name: TABLE status_refused_sources; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.status_refused_sources TO bitrix_sync_admin;

--
-- Name: TABLE status_schema; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.status_schema TO bitrix_sync_user;
GRANT SELECT ON TABLE bitrix_sync.status_schema TO bitrix_sync_admin;

--
-- Name: TABLE status_webhooks; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.status_webhooks TO bitrix_sync_user;
GRANT SELECT ON TABLE bitrix_sync.status_webhooks TO bitrix_sync_admin;

--
-- Name: TABLE status_workflows; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.status_workflows TO bitrix_sync_user;
GRANT SELECT ON TABLE bitrix_sync.status_workflows TO bitrix_sync_admin;

--
-- Name: TABLE stuck_commands; Type: ACL; Schema: bitrix_sync; Owner: -
--

GRANT SELECT ON TABLE bitrix_sync.stuck_commands TO bitrix_sync_admin;

--
-- Name: TABLE _private_job_queues; Type: ACL; Schema: graphile_worker; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE graphile_worker._private_job_queues TO bitrix_sync_user;

--
-- Name: TABLE _private_known_crontabs; Type: ACL; Schema: graphile_worker; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE graphile_worker._private_known_crontabs TO bitrix_sync_user;

--
-- Name: TABLE _private_tasks; Type: ACL; Schema: graphile_worker; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE graphile_worker._private_tasks TO bitrix_sync_user;

--
-- Name: SEQUENCE job_queues_id_seq; Type: ACL; Schema: graphile_worker; Owner: -
--

GRANT SELECT,USAGE ON SEQUENCE graphile_worker.job_queues_id_seq TO bitrix_sync_user;

--
-- Name: TABLE jobs; Type: ACL; Schema: graphile_worker; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE graphile_worker.jobs TO bitrix_sync_user;

--
-- Name: SEQUENCE jobs_id_seq1; Type: ACL; Schema: graphile_worker; Owner: -
--

GRANT SELECT,USAGE ON SEQUENCE graphile_worker.jobs_id_seq1 TO bitrix_sync_user;

--
-- Name: TABLE migrations; Type: ACL; Schema: graphile_worker; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE graphile_worker.migrations TO bitrix_sync_user;

--
-- Name: SEQUENCE tasks_id_seq; Type: ACL; Schema: graphile_worker; Owner: -
--

GRANT SELECT,USAGE ON SEQUENCE graphile_worker.tasks_id_seq TO bitrix_sync_user;

--
-- Name: TABLE client_profile; Type: ACL; Schema: han_app; Owner: -
--

GRANT SELECT,INSERT,UPDATE ON TABLE han_app.client_profile TO han_app_user;

--
-- Name: COLUMN client_profile.id; Type: ACL; Schema: han_app; Owner: -
--

GRANT SELECT(id) ON TABLE han_app.client_profile TO bitrix_sync_user;

--
-- Name: COLUMN client_profile.user_id; Type: ACL; Schema: han_app; Owner: -
--

GRANT SELECT(user_id) ON TABLE han_app.client_profile TO bitrix_sync_user;
GRANT SELECT(user_id) ON TABLE han_app.client_profile TO bitrix_sync_app_writer;

--
-- Name: COLUMN client_profile.full_name; Type: ACL; Schema: han_app; Owner: -
--

GRANT SELECT(full_name),UPDATE(full_name) ON TABLE han_app.client_profile TO bitrix_sync_user;
GRANT UPDATE(full_name) ON TABLE han_app.client_profile TO bitrix_sync_app_writer;

--
-- Name: COLUMN client_profile.citizenship; Type: ACL; Schema: han_app; Owner: -
--

GRANT SELECT(citizenship),UPDATE(citizenship) ON TABLE han_app.client_profile TO bitrix_sync_user;
GRANT UPDATE(citizenship) ON TABLE han_app.client_profile TO bitrix_sync_app_writer;

--
-- Name: COLUMN client_profile.email; Type: ACL; Schema: han_app; Owner: -
--

GRANT SELECT(email),UPDATE(email) ON TABLE han_app.client_profile TO bitrix_sync_user;
GRANT UPDATE(email) ON TABLE han_app.client_profile TO bitrix_sync_app_writer;

--
-- Name: COLUMN client_profile.record_status; Type: ACL; Schema: han_app; Owner: -
--

GRANT SELECT(record_status) ON TABLE han_app.client_profile TO bitrix_sync_user;

--
-- Name: COLUMN client_profile.source_updated_at; Type: ACL; Schema: han_app; Owner: -
--

GRANT SELECT(source_updated_at),UPDATE(source_updated_at) ON TABLE han_app.client_profile TO bitrix_sync_user;
GRANT UPDATE(source_updated_at) ON TABLE han_app.client_profile TO bitrix_sync_app_writer;

--
-- Name: COLUMN client_profile.created_at; Type: ACL; Schema: han_app; Owner: -
--

GRANT SELECT(created_at) ON TABLE han_app.client_profile TO bitrix_sync_user;

--
-- Name: COLUMN client_profile.updated_at; Type: ACL; Schema: han_app; Owner: -
--

GRANT SELECT(updated_at) ON TABLE han_app.client_profile TO bitrix_sync_user;

--
-- Name: TABLE user_identity; Type: ACL; Schema: han_app; Owner: -
--

GRANT SELECT,INSERT,UPDATE ON TABLE han_app.user_identity TO han_app_user;

--
-- Name: COLUMN user_identity.id; Type: ACL; Schema: han_app; Owner: -
--

GRANT SELECT(id) ON TABLE han_app.user_identity TO bitrix_sync_user;

--
-- Name: COLUMN user_identity.phone_number; Type: ACL; Schema: han_app; Owner: -
--

GRANT SELECT(phone_number) ON TABLE han_app.user_identity TO bitrix_sync_user;

--
-- Name: COLUMN user_identity.record_status; Type: ACL; Schema: han_app; Owner: -
--

GRANT SELECT(record_status) ON TABLE han_app.user_identity TO bitrix_sync_user;

--
-- Name: COLUMN user_identity.created_at; Type: ACL; Schema: han_app; Owner: -
--

GRANT SELECT(created_at) ON TABLE han_app.user_identity TO bitrix_sync_user;

--
-- Name: COLUMN user_identity.updated_at; Type: ACL; Schema: han_app; Owner: -
--

GRANT SELECT(updated_at) ON TABLE han_app.user_identity TO bitrix_sync_user;

--
-- PostgreSQL database dump complete
--

\unrestrict bitrixsyncschemadump
