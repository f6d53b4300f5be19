// The Contact robot of the sandbox portal: after a manager's edit it calls the service's receiver
// exactly as Bitrix24's robot does (§10.1): POST with the token and ID in the query and the document
// and portal identity as a form body.
import type { ServiceFile } from "../../src/local/service-file.js";
import { serviceBase } from "./service.js";

export interface RobotIdentity {
  token: string;
  portalHost: string;
  memberId: string;
}

/** Fires the Contact robot for `contactId`; returns the HTTP status of the receiver's answer. */
export async function fireContactRobot(
  f: ServiceFile,
  robot: RobotIdentity,
  contactId: number,
): Promise<number> {
  const body = new URLSearchParams([
    ["document_id[0]", "crm"],
    ["document_id[1]", "CCrmDocumentContact"],
    ["document_id[2]", `CONTACT_${contactId}`],
    ["auth[domain]", robot.portalHost],
    ["auth[client_endpoint]", `https://${robot.portalHost}/rest/`],
    ["auth[server_endpoint]", "https://oauth.bitrix24.tech/rest/"],
    ["auth[member_id]", robot.memberId],
  ]);
  const query = new URLSearchParams([
    ["token", robot.token],
    ["ID", String(contactId)],
  ]);
  const res = await fetch(`${serviceBase(f)}/bitrix/sync/webhook/contact?${query}`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: body.toString(),
    signal: AbortSignal.timeout(10_000),
  });
  await res.arrayBuffer();
  return res.status;
}
