// What the process knows about its own health (§14): the last CRM success (its own, and the
// deployment's as readiness last read it from the database), a rejected credential,
// methods the portal refuses for rights, and the sync loop's heartbeat. Fed by the CRM client
// wrapper, the batch and the loop; read by /health/ready and the status endpoint. Holds codes,
// REST method names and times only.
import type { CommandObservation } from "../crm/batch.js";
import type { FailureCode } from "../crm/classify.js";
import { type CrmClient, type HttpResult, isAnswered } from "../crm/client.js";
import type { CitizenshipDictionaryState, CitizenshipDictionaryStatus } from "../crm/contact-fields.js";
import type { SchemaState } from "../db/schema-window.js";

/** Sub-command failures that mean the webhook's user lacks a right or a scope (§9: permission). */
const PERMISSION_CODES: ReadonlySet<FailureCode> = new Set([
  "credential_rejected",
  "insufficient_scope",
  "permission_denied",
]);

export class HealthState {
  /** This process's last CRM success. */
  lastCrmSuccessAt: number | null = null;
  /**
   * The last success of any replica (sql/limiter/health.sql), as readiness last read it from the
   * database; readiness judges crm_stale by the later of the two.
   */
  deploymentCrmSuccessAt: number | null = null;
  lastCrmFailure: { code: string; at: number } | null = null;
  /** A 401/403 from the portal: the webhook credential or its rights are gone (not-ready). */
  credentialProblem: { code: string; at: number } | null = null;
  /**
   * REST methods a batch answered (HTTP 200) with a sub-command refused for rights: not-ready like
   * a 401/403, until that method succeeds again.
   */
  readonly permissionProblems = new Map<string, { code: string; at: number }>();
  loopBeatAt: number | null = null;
  readonly startedAt = Date.now();
  /**
   * The citizenship dictionary after its last read (§3.3): a missing field or an empty list is
   * degraded (Contacts are created without citizenship, and reads cannot name one).
   */
  citizenship: { state: CitizenshipDictionaryState; items: number; at: number } = {
    state: "unknown",
    items: 0,
    at: Date.now(),
  };

  /**
   * The database's schema as readiness last read it (src/db/schema-window.ts): its newest migration
   * and contract floor; null until the first readiness round.
   */
  schema: SchemaState | null = null;

  noteSchema(s: SchemaState): void {
    this.schema = s;
  }

  noteDeploymentCrmSuccess(at: number): void {
    if (this.deploymentCrmSuccessAt === null || at > this.deploymentCrmSuccessAt)
      this.deploymentCrmSuccessAt = at;
  }

  beat(): void {
    this.loopBeatAt = Date.now();
  }

  noteDictionary(s: CitizenshipDictionaryStatus): void {
    this.citizenship = { state: s.state, items: s.items, at: Date.now() };
  }

  noteCommands(results: readonly CommandObservation[]): void {
    const now = Date.now();
    for (const r of results) {
      if (r.ok) this.permissionProblems.delete(r.method);
      else if (r.code !== null && PERMISSION_CODES.has(r.code))
        this.permissionProblems.set(r.method, { code: r.code, at: now });
    }
  }

  noteCrm(r: HttpResult): void {
    const now = Date.now();
    if (isAnswered(r)) {
      this.lastCrmSuccessAt = now;
      this.credentialProblem = null;
      return;
    }
    const code =
      r.type === "network" ? "network" : r.type === "malformed" ? "malformed_reply" : `http_${r.status}`;
    this.lastCrmFailure = { code, at: now };
    if (r.type === "reply" && (r.status === 401 || r.status === 403))
      this.credentialProblem = { code, at: now };
  }
}

/** The CRM client with every call's outcome recorded in `health`. */
export function observedClient(client: CrmClient, health: HealthState): CrmClient {
  return {
    portalHost: client.portalHost,
    close: () => client.close(),
    async call(method, params, opts) {
      const r = await client.call(method, params, opts);
      health.noteCrm(r);
      return r;
    },
  };
}
