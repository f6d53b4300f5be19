// Row shapes of the bitrix_sync tables as the engine reads them.

export type WorkflowType =
  | "contact.map_or_create"
  | "contact.update"
  | "contact.deactivate"
  | "contact.rebind";

export interface WorkflowRow {
  id: string;
  workflow_type: WorkflowType;
  intent_type: WorkflowType;
  user_id: string;
  contact_id: string | null;
  state: string;
  current_step: string;
  step_data: StepData;
  revision: number;
  processed_revision: number;
  attempt_count: number;
  deadline_at: Date;
  lease_token: string | null;
  correlation_id: string;
  /** W3C traceparent of the intent's intake span (docs/observability.md); null when tracing was off. */
  trace_context: string | null;
  created_at: Date;
}

/** Safe per-workflow state: IDs, flags, counts. Never PII. */
export interface StepData {
  /** Revision the current pass works towards. */
  pass?: number;
  /** The intent the current pass executes (a contact.update without mapping runs as map_or_create). */
  as?: WorkflowType;
  /** The create command whose outcome is being recovered (§7.2 uncertain -> reconcile). */
  recovering?: string;
  /** Branch taken by map_or_create (B0, B1.1, ...), for the outcome and audit. */
  branch?: string;
  /** Contact chosen or created in this pass. */
  contact?: number;
  /** The inactive user whose link is taken over. */
  previous_user?: string | null;
  /**
   * While waiting for an unanswered write (awaiting_late_write): when its late execution can no
   * longer land (ISO 8601). The portal-wide recovery brings the wait forward to it, never below.
   */
  late_write_settles_at?: string;
  [k: string]: unknown;
}

export interface CommandRow {
  id: string;
  workflow_id: string | null;
  alert_id: string | null;
  command_type: string;
  params: Record<string, unknown>;
  status: string;
  revision: number;
  attempt_count: number;
  limit_hits: number;
  deadline_at: Date;
  lease_token: string | null;
  response: Record<string, unknown> | null;
  last_error_code: string | null;
  correlation_id: string | null;
  /** W3C traceparent of the step span that issued the command; null when tracing was off. */
  trace_context: string | null;
  /** The send marker (send_commands); null before the first send. */
  sent_at: Date | null;
  /**
   * Stamped with the send marker: the request is out and given up by the sender by then at the
   * latest (its send window plus its HTTP timeout); null when the sender did not say.
   */
  reply_deadline_at?: Date | null;
  created_at: Date;
  updated_at: Date;
}
