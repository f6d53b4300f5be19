// What the robot webhook receivers (§10.1) need from the configuration: the tokens of each receiver
// (the current one and, during a rotation overlap, the previous one), the portal identity a robot
// must present, and the request bounds.
import type { Cidr } from "../config/cidr.js";
import { type Config, SANDBOX_MEMBER_ID, SANDBOX_PORTAL_HOST } from "../config/env.js";
import { DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_QUERY_BYTES, type ReceiverName } from "../config/receivers.js";
import type { InboxWriterOptions } from "./inbox.js";

export interface ReceiverTokens {
  current?: string;
  /** Still accepted while a rotation overlaps; absent outside a rotation. */
  previous?: string;
}

/** Receiver configuration. A receiver without a current token answers 503 and accepts nothing. */
export interface ReceiverConfig {
  tokens: Record<ReceiverName, ReceiverTokens>;
  /** Expected `auth[domain]`; undefined means the receivers answer 503. */
  portalHost?: string;
  /** Expected `auth[member_id]`; undefined means the receivers answer 503. */
  memberId?: string;
  /** Largest accepted body in bytes (413 above). */
  maxBodyBytes: number;
  /** Largest accepted query string in bytes, without the `?` (414 above). */
  maxQueryBytes: number;
  /** Proxies whose X-Real-IP is recorded as the source address (client-address.ts); default none. */
  trustedProxies?: readonly Cidr[];
  /** Grouping and bounds of inbox writes (defaults: 200 events per call, 2 calls in flight, 1 000 waiting, 1.5 s wait). */
  inbox?: InboxWriterOptions;
}

/**
 * Derives the receiver configuration from the validated service configuration. In sandbox mode a
 * missing portal identity falls back to the sandbox's (SANDBOX_PORTAL_HOST, SANDBOX_MEMBER_ID);
 * tokens never have a default.
 */
export function receiverConfig(config: Config): ReceiverConfig {
  const s = config.secrets;
  return {
    tokens: {
      contact: {
        current: s.BITRIX_SYNC_CONTACT_RECEIVER_TOKEN,
        previous: s.BITRIX_SYNC_CONTACT_RECEIVER_TOKEN_PREVIOUS,
      },
      alert: {
        current: s.BITRIX_SYNC_ALERT_RECEIVER_TOKEN,
        previous: s.BITRIX_SYNC_ALERT_RECEIVER_TOKEN_PREVIOUS,
      },
    },
    portalHost: config.env.BITRIX_SYNC_PORTAL_HOST ?? (config.sandbox ? SANDBOX_PORTAL_HOST : undefined),
    memberId: config.env.BITRIX_SYNC_PORTAL_MEMBER_ID ?? (config.sandbox ? SANDBOX_MEMBER_ID : undefined),
    maxBodyBytes: DEFAULT_MAX_BODY_BYTES,
    maxQueryBytes: DEFAULT_MAX_QUERY_BYTES,
    trustedProxies: config.env.BITRIX_SYNC_TRUSTED_PROXY_CIDRS,
  };
}
