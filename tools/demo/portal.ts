// The sandbox portal as a CRM user sees it: the emulator's REST interface over loopback HTTP, the same
// calls a manager's tools make. The webhook URL is never printed; errors carry the portal's code only.
import { DemoError } from "./wait.js";

export class SandboxPortal {
  readonly #url: string;
  constructor(webhookUrl: string) {
    this.#url = webhookUrl.endsWith("/") ? webhookUrl : `${webhookUrl}/`;
  }

  /** One REST call; QUERY_LIMIT_EXCEEDED (the service shares the portal's limit) waits and retries. */
  async call<T = unknown>(method: string, params: Record<string, unknown>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      let res: Response;
      try {
        res = await fetch(`${this.#url}${method}.json`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(params),
          signal: AbortSignal.timeout(10_000),
        });
      } catch (e) {
        throw new DemoError(`the sandbox portal did not answer ${method} (${(e as Error).name})`, 69);
      }
      const body = (await res.json().catch(() => null)) as { result?: T; error?: string } | null;
      if (body?.error === "QUERY_LIMIT_EXCEEDED" && attempt < 10) {
        await new Promise((r) => setTimeout(r, 600));
        continue;
      }
      if (!res.ok || body === null || body.error !== undefined || body.result === undefined) {
        throw new DemoError(
          `the sandbox portal refused ${method} (HTTP ${res.status}, ${body?.error ?? "no error code"})`,
        );
      }
      return body.result;
    }
  }

  /** A Contact as a manager enters it: name and one work phone. Returns its ID. */
  async addContact(name: string, phone: string): Promise<number> {
    const id = await this.call<number>("crm.contact.add", {
      fields: { NAME: name, PHONE: [{ VALUE: phone, VALUE_TYPE: "WORK" }] },
    });
    return Number(id);
  }

  async updateContact(id: number, fields: Record<string, unknown>): Promise<void> {
    await this.call("crm.contact.update", { id, fields });
  }

  async getContact(id: number): Promise<Record<string, unknown>> {
    return await this.call<Record<string, unknown>>("crm.contact.get", { id });
  }
}
