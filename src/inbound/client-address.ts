// Which address a webhook came from (§10.1: webhook_inbox.source_ip). Behind the public nginx the TCP
// peer is nginx itself, so nginx passes the robot's address in X-Real-IP. That header is believed
// only when the TCP peer is a configured trusted proxy (BITRIX_SYNC_TRUSTED_PROXY_CIDRS, none by
// default): from anyone else it is a claim the client made about itself and is ignored.
import { isIP } from "node:net";

/** The header the trusted proxy overwrites with its own TCP peer (deploy/nginx: `$remote_addr`). */
export const FORWARDED_ADDRESS_HEADER = "x-real-ip";

/**
 * The client's address: the forwarded one when `peer` is trusted and the header holds exactly one
 * IP address, else `peer` itself. IPv4-mapped IPv6 addresses are unwrapped.
 */
export function clientAddress(
  peer: string | null,
  forwarded: string | undefined,
  trusted: (address: string) => boolean,
): string | null {
  if (peer === null || forwarded === undefined || !trusted(peer)) return peer;
  const raw = forwarded.trim();
  const addr = raw.startsWith("::ffff:") && isIP(raw.slice(7)) === 4 ? raw.slice(7) : raw;
  return isIP(addr) === 0 ? peer : addr;
}
