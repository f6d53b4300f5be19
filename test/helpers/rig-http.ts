// The e2e rig's service over loopback HTTP: the real app (health, receivers, status, /metrics)
// with the rig's runtime as its status source, as src/main.ts wires it.
import type { AddressInfo } from "node:net";
import { type ServerType, serve } from "@hono/node-server";
import { createApp } from "../../src/http/app.js";
import { receiverConfig } from "../../src/inbound/config.js";
import { type Rig, TEST_CONTACT_TOKEN, TEST_MEMBER_ID } from "./e2e.js";

export interface RigHttp {
  /** http://127.0.0.1:<port> */
  url: string;
  /** host:port, a scrape target. */
  target: string;
  /** POSTs the Contact robot's form for Contact `contactId`; returns the HTTP status. */
  contactRobot(contactId: number, token?: string): Promise<number>;
  close(): Promise<void>;
}

export async function serveRig(rig: Rig): Promise<RigHttp> {
  const r = rig.runtime;
  const app = createApp({
    pool: r.pool,
    log: r.log,
    receiver: receiverConfig(r.config),
    status: { config: r.config, health: r.health, limiter: r.crm.limiter, settings: r.settings },
  });
  const server: ServerType = await new Promise((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, () => resolve(s));
  });
  const port = (server.address() as AddressInfo).port;
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    target: `127.0.0.1:${port}`,
    async contactRobot(contactId, token = TEST_CONTACT_TOKEN) {
      const body = new URLSearchParams([
        ["document_id[0]", "crm"],
        ["document_id[1]", "CCrmDocumentContact"],
        ["document_id[2]", `CONTACT_${contactId}`],
        ["auth[domain]", rig.emulator.host],
        ["auth[member_id]", TEST_MEMBER_ID],
      ]);
      const res = await fetch(`${url}/bitrix/sync/webhook/contact?token=${token}&ID=${contactId}`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: body.toString(),
      });
      await res.arrayBuffer();
      return res.status;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
