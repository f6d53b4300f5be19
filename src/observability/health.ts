// What the process knows about its own health (§14): the last CRM success, a rejected credential,
// and the sync loop's heartbeat. Fed by the CRM client wrapper and the loop; read by /health/ready
// and the status endpoint. Holds codes and times only.
import type { CrmClient, HttpResult } from "../crm/client.js";

export class HealthState {
  lastCrmSuccessAt: number | null = null;
  lastCrmFailure: { code: string; at: number } | null = null;
  /** A 401/403 from the portal: the webhook credential or its rights are gone (not-ready). */
  credentialProblem: { code: string; at: number } | null = null;
  loopBeatAt: number | null = null;
  readonly startedAt = Date.now();

  beat(): void {
    this.loopBeatAt = Date.now();
  }

  noteCrm(r: HttpResult): void {
    const now = Date.now();
    if (r.type === "reply" && r.status >= 200 && r.status < 300) {
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
