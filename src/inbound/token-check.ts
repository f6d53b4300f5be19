// Step 5 of a receiver request (docs/receivers.md): the robot's `token` query parameter, compared in
// constant time with the receiver's current and, during a rotation, previous token (./contract.ts,
// checkToken). A named middleware, tested on its own (test/unit/inbound/token-check.test.ts).
import type { Context, MiddlewareHandler } from "hono";
import { checkToken, type Rejected } from "./contract.js";
import type { SecretMatcher } from "./token.js";

/** What a refused request answers (the receiver's reply: logged, counted, no-store). */
export type Refuse<E extends { Variables: { query: string } }> = (
  c: Context<E>,
  status: Rejected["status"],
  reason: Rejected["reason"],
) => Response | Promise<Response>;

/** Lets a request through only with exactly one token that one of `tokens` accepts (else 403). */
export function receiverToken<E extends { Variables: { query: string } }>(
  tokens: SecretMatcher,
  refuse: Refuse<E>,
): MiddlewareHandler<E> {
  return async (c, next) => {
    const refused = checkToken(c.get("query"), tokens);
    if (refused) return await refuse(c, refused.status, refused.reason);
    await next();
  };
}
