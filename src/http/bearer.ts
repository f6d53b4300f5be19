// The internal endpoints' bearer check (§14, §16): `Authorization: Bearer <token>` compared in
// constant time with BITRIX_SYNC_SERVICE_TOKEN. A named middleware so every internal route takes the
// same check, tested on its own (test/unit/http/bearer.test.ts).
import type { MiddlewareHandler } from "hono";
import { secretMatcher } from "../inbound/token.js";

/** `Authorization: Bearer <token>`; the scheme is case-insensitive (RFC 7235 §2.1). */
const BEARER = /^bearer +(\S+) *$/i;

/**
 * Lets a request through only with the bearer `token`: none configured answers 503
 * status_not_configured, a missing or wrong one 401 unauthorized (never saying which).
 */
export function bearerAuth(token: string | undefined): MiddlewareHandler {
  const matches = secretMatcher([token]);
  return async (c, next) => {
    if (!token) return c.json({ error: "status_not_configured" }, 503);
    const m = BEARER.exec(c.req.header("authorization") ?? "");
    if (!m?.[1] || !matches(m[1])) return c.json({ error: "unauthorized" }, 401);
    await next();
  };
}
