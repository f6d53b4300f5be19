// Sandbox mode: no webhook configured starts the emulator on loopback and announces it; a
// configured webhook is only validated against the portal host.
import test from "ava";
import { loadConfig } from "../../../src/config/env.js";
import { executeBatch } from "../../../src/crm/batch.js";
import { createCrmClient } from "../../../src/crm/client.js";
import { CrmConfigError } from "../../../src/crm/redact.js";
import { startCrmEndpoint } from "../../../src/startup/crm-endpoint.js";
import { createMemoryLimiter } from "../../helpers/memory-limiter.js";

function capture() {
  const lines: Array<{ obj: object; msg?: string | undefined }> = [];
  const push = (obj: object, msg?: string) => {
    lines.push({ obj, msg });
  };
  return { lines, log: { info: push, warn: push } };
}

test("no webhook configured: the emulator serves on loopback, is announced, and answers the client", async (t) => {
  const config = loadConfig({ SECRETS_SOURCE: "env" });
  t.true(config.sandbox);
  const { lines, log } = capture();
  const ep = await startCrmEndpoint({ config, log });
  try {
    t.true(ep.sandbox);
    t.regex(ep.portalHost, /^127\.0\.0\.1:\d+$/);
    t.true(lines.some((l) => (l.obj as { event?: string }).event === "sandbox.emulator"));
    t.false(JSON.stringify(lines).includes(ep.webhookUrl.split("/")[5] ?? "??"), "the secret is not logged");
    const client = createCrmClient({ webhookUrl: ep.webhookUrl, portalHost: ep.portalHost, timeoutMs: 2000 });
    const [o] = await executeBatch(
      {
        client,
        limiter: createMemoryLimiter({ settings: { refillPerSec: 2, burst: 5, maxInFlight: 2 } }),
        catalogue: { fields: config.fields },
      },
      [{ type: "citizenship.list", params: {} }],
    );
    await client.close();
    t.like(o, { ok: true, result: { items: [{ id: "45" }] } });
  } finally {
    await ep.close();
  }
});

test("sandbox mode is refused when sync is enabled", (t) => {
  t.throws(() => loadConfig({ SECRETS_SOURCE: "env", BITRIX_SYNC_ENABLED: "true" }), {
    message: /sandbox mode is refused/,
  });
});

test("a configured webhook is validated against the portal host, without echoing it", async (t) => {
  const secret = "Zz9SecretWebhookValue";
  const config = loadConfig({
    SECRETS_SOURCE: "env",
    BITRIX_SYNC_CRM_REST_WEBHOOK_URL: `https://other.bitrix24.ru/rest/1/${secret}/`,
    BITRIX_SYNC_PORTAL_HOST: "han.bitrix24.ru",
  });
  t.false(config.sandbox);
  const { log } = capture();
  const e = await t.throwsAsync(() => startCrmEndpoint({ config, log }), { instanceOf: CrmConfigError });
  t.false(e?.message.includes(secret));
  const ok = loadConfig({
    SECRETS_SOURCE: "env",
    BITRIX_SYNC_CRM_REST_WEBHOOK_URL: `https://han.bitrix24.ru/rest/1/${secret}/`,
    BITRIX_SYNC_PORTAL_HOST: "han.bitrix24.ru",
  });
  const ep = await startCrmEndpoint({ config: ok, log });
  t.false(ep.sandbox);
  t.is(ep.emulator, null);
  await ep.close();
});
