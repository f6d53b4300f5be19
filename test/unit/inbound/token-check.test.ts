import test from "ava";
import { Hono } from "hono";
import { secretMatcher } from "../../../src/inbound/token.js";
import { receiverToken } from "../../../src/inbound/token-check.js";

type Env = { Variables: { query: string } };
const CURRENT = "tok-contact-current-7c1e9a4b2f6d8e0a3c5b7d9f1e3a5c7b";
const PREVIOUS = "tok-contact-previous-0f2e4d6c8b0a1c3e5f7a9b1d3f5e7c9a";

function app() {
  return new Hono<Env>()
    .use(async (c, next) => {
      c.set("query", new URL(c.req.url).search.slice(1));
      await next();
    })
    .post(
      "/contact",
      receiverToken<Env>(secretMatcher([CURRENT, PREVIOUS]), (c, status, reason) =>
        c.json({ reason }, status),
      ),
      (c) => c.json({ status: "accepted" }),
    );
}

const post = (query: string) => app().request(`/contact?${query}`, { method: "POST" });

test("the receiver token check accepts the current and, during a rotation, the previous token", async (t) => {
  t.is((await post(`token=${CURRENT}`)).status, 200);
  t.is((await post(`a=1&token=${PREVIOUS}`)).status, 200);
});

test("the receiver token check refuses with 403 and says only missing or invalid", async (t) => {
  const cases: Array<[string, string]> = [
    ["", "token_missing"],
    ["token=", "token_missing"],
    ["token=nope", "token_invalid"],
    [`token=${CURRENT}&token=${CURRENT}`, "token_invalid"],
  ];
  for (const [query, reason] of cases) {
    const res = await post(query);
    t.is(res.status, 403, query);
    t.deepEqual(await res.json(), { reason }, query);
  }
});
