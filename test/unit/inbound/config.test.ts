import test from "ava";
import { loadConfig, SANDBOX_MEMBER_ID, SANDBOX_PORTAL_HOST } from "../../../src/config/env.js";
import { receiverConfig } from "../../../src/inbound/config.js";

const base = { SECRETS_SOURCE: "env" } as NodeJS.ProcessEnv;
const C1 = "c1-contact-current-0123456789abcdef0123";
const C0 = "c0-contact-previous-0123456789abcdef012";
const A1 = "a1-alert-current-0123456789abcdef012345";

test("sandbox: the portal identity defaults to the sandbox's, tokens have no default", (t) => {
  const rc = receiverConfig(loadConfig({ ...base }));
  t.is(rc.portalHost, SANDBOX_PORTAL_HOST);
  t.is(rc.memberId, SANDBOX_MEMBER_ID);
  t.deepEqual(rc.tokens, {
    contact: { current: undefined, previous: undefined },
    alert: { current: undefined, previous: undefined },
  });
});

test("configured tokens, previous tokens and portal identity are passed through", (t) => {
  const rc = receiverConfig(
    loadConfig({
      ...base,
      BITRIX_SYNC_CRM_REST_WEBHOOK_URL: "https://portal.example/rest/1/x/",
      BITRIX_SYNC_PORTAL_HOST: "portal.example",
      BITRIX_SYNC_PORTAL_MEMBER_ID: "abc",
      BITRIX_SYNC_CONTACT_RECEIVER_TOKEN: C1,
      BITRIX_SYNC_CONTACT_RECEIVER_TOKEN_PREVIOUS: C0,
      BITRIX_SYNC_ALERT_RECEIVER_TOKEN: A1,
    }),
  );
  t.deepEqual(rc.tokens, {
    contact: { current: C1, previous: C0 },
    alert: { current: A1, previous: undefined },
  });
  t.is(rc.portalHost, "portal.example");
  t.is(rc.memberId, "abc");
  t.is(rc.maxBodyBytes, 8192);
});

test("outside the sandbox a missing member id stays missing (the receivers then answer 503)", (t) => {
  const rc = receiverConfig(
    loadConfig({
      ...base,
      BITRIX_SYNC_CRM_REST_WEBHOOK_URL: "https://portal.example/rest/1/x/",
      BITRIX_SYNC_PORTAL_HOST: "portal.example",
    }),
  );
  t.is(rc.memberId, undefined);
});

test("trusted proxies come from BITRIX_SYNC_TRUSTED_PROXY_CIDRS and default to none", (t) => {
  t.deepEqual(receiverConfig(loadConfig({ ...base })).trustedProxies, []);
  const rc = receiverConfig(
    loadConfig({ ...base, BITRIX_SYNC_TRUSTED_PROXY_CIDRS: "172.30.57.10/32, fd00::/8" }),
  );
  t.deepEqual(
    rc.trustedProxies?.map((c) => c.text),
    ["172.30.57.10/32", "fd00::/8"],
  );
  t.throws(() => loadConfig({ ...base, BITRIX_SYNC_TRUSTED_PROXY_CIDRS: "172.30.57.10" }), {
    message: /BITRIX_SYNC_TRUSTED_PROXY_CIDRS: "172.30.57.10" is not address\/prefix/,
  });
});
