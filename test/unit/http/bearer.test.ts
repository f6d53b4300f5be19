import test from "ava";
import { Hono } from "hono";
import { bearerAuth } from "../../../src/http/bearer.js";

const TOKEN = "service-token-2c4e6a8b0d1f3e5c7a9b";

function app(token: string | undefined) {
  return new Hono().get("/internal", bearerAuth(token), (c) => c.json({ ok: true }));
}

const get = (a: Hono, authorization?: string) =>
  a.request("/internal", authorization ? { headers: { authorization } } : {});

test("the bearer check lets the service token through, the scheme in any case", async (t) => {
  t.is((await get(app(TOKEN), `Bearer ${TOKEN}`)).status, 200);
  t.is((await get(app(TOKEN), `bearer  ${TOKEN}`)).status, 200);
});

test("the bearer check refuses a missing, wrong or differently carried token with 401, the same body", async (t) => {
  for (const header of [undefined, "Bearer nope", `Basic ${TOKEN}`, TOKEN, `Bearer ${TOKEN}x`, "Bearer "]) {
    const res = await get(app(TOKEN), header);
    t.is(res.status, 401, String(header));
    t.deepEqual(await res.json(), { error: "unauthorized" });
  }
});

test("without a configured token every request is 503 status_not_configured", async (t) => {
  const res = await get(app(undefined), `Bearer ${TOKEN}`);
  t.is(res.status, 503);
  t.deepEqual(await res.json(), { error: "status_not_configured" });
});
