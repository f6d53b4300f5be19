// Token and key rules at startup (docs/security.md, "Tokens"): length, URL-safe characters, all
// different, the service token and the hash key required when sync is enabled, SECRETS_SOURCE=env
// refused then. Every message names the variable and never carries a value.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { ConfigError, loadConfig } from "../../../src/config/env.js";
import { TOKEN_SECRETS, tokenProblems } from "../../../src/config/tokens.js";
import { sandboxHashKey } from "../../../src/local/sandbox-hash-key.js";
import { withSandboxTokens } from "../../../src/local/sandbox-tokens.js";

const GOOD = {
  BITRIX_SYNC_CONTACT_RECEIVER_TOKEN: "contact-0123456789abcdef0123456789abcdef",
  BITRIX_SYNC_CONTACT_RECEIVER_TOKEN_PREVIOUS: "contact-prev-0123456789abcdef0123456789ab",
  BITRIX_SYNC_ALERT_RECEIVER_TOKEN: "alert-0123456789abcdef0123456789abcdef0",
  BITRIX_SYNC_ALERT_RECEIVER_TOKEN_PREVIOUS: "alert-prev-0123456789abcdef0123456789abcd",
  BITRIX_SYNC_SERVICE_TOKEN: "service-0123456789abcdef0123456789abcdef",
  BITRIX_SYNC_HASH_KEY: "hashkey-0123456789abcdef0123456789abcdef",
};

const ENABLED = {
  BITRIX_SYNC_ENABLED: "true",
  BITRIX_SYNC_PORTAL_HOST: "portal.example.invalid",
  BITRIX_SYNC_PORTAL_MEMBER_ID: "member-1",
  BITRIX_SYNC_CONTACT_USER_ID_FIELD: "UF_CRM_1",
  BITRIX_SYNC_CONTACT_REGISTERED_FIELD: "UF_CRM_2",
  BITRIX_SYNC_CONTACT_CITIZENSHIP_FIELD: "UF_CRM_3",
};

/** The problems loadConfig reports, as [variable, text]; [] when it loads. */
function problems(env: Record<string, string>): Array<[string, string]> {
  try {
    loadConfig(env);
    return [];
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    return e.problems.map((p) => [p.variable, p.text]);
  }
}

/** Secrets as files, as production reads them; the env source is refused when enabled. */
function withFiles<T>(secrets: Record<string, string>, fn: (dir: string) => T): T {
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-tokens-"));
  try {
    for (const [k, v] of Object.entries(secrets)) writeFileSync(join(dir, k), `${v}\n`);
    return fn(dir);
  } finally {
    rmSync(dir, { recursive: true });
  }
}

const CRM = { BITRIX_SYNC_CRM_REST_WEBHOOK_URL: "https://portal.example.invalid/rest/1/whsecret0000000000/" };

const envSource = (secrets: Record<string, string>) => problems({ SECRETS_SOURCE: "env", ...secrets });

test("well-formed, different tokens load", (t) => {
  t.deepEqual(envSource(GOOD), []);
  withFiles({ ...GOOD, ...CRM }, (dir) => {
    t.deepEqual(problems({ ...ENABLED, SECRETS_SOURCE: "file", BITRIX_SYNC_SECRETS_DIR: dir }), []);
  });
});

test("each token shorter than 32 characters is refused, by name, without its value", (t) => {
  for (const name of TOKEN_SECRETS) {
    const short = "abcDEF0123456789abcDEF012345678"; // 31
    const p = envSource({ ...GOOD, [name]: short });
    t.deepEqual(
      p.map(([v]) => v),
      [name],
    );
    t.regex(p[0]?.[1] ?? "", new RegExp(`^${name}: must be 32 to 512 characters long`));
    t.false(JSON.stringify(p).includes(short));
  }
  t.deepEqual(envSource({ ...GOOD, BITRIX_SYNC_SERVICE_TOKEN: "x".repeat(32) }), []);
  t.is(envSource({ ...GOOD, BITRIX_SYNC_SERVICE_TOKEN: "x".repeat(513) }).length, 1);
});

test("characters that are not URL-safe are refused", (t) => {
  for (const bad of [
    "with space",
    "plus+sign",
    "slash/",
    "percent%41",
    "amp&ID=1",
    'quote"',
    "ünïcödé",
    "tab\t",
  ]) {
    const value = `${bad}${"0".repeat(40)}`;
    const p = envSource({ ...GOOD, BITRIX_SYNC_CONTACT_RECEIVER_TOKEN: value });
    t.deepEqual(
      p.map(([v]) => v),
      ["BITRIX_SYNC_CONTACT_RECEIVER_TOKEN"],
      bad,
    );
    t.regex(p[0]?.[1] ?? "", /URL-safe characters A-Z a-z 0-9 - \. _ ~/);
    t.false(JSON.stringify(p).includes(value));
  }
  t.deepEqual(envSource({ ...GOOD, BITRIX_SYNC_CONTACT_RECEIVER_TOKEN: `A-z_0.9~${"k".repeat(30)}` }), []);
});

test("tokens must all be different; a previous token must differ from the current one", (t) => {
  const same = envSource({
    ...GOOD,
    BITRIX_SYNC_ALERT_RECEIVER_TOKEN: GOOD.BITRIX_SYNC_CONTACT_RECEIVER_TOKEN,
  });
  t.deepEqual(
    same.map(([v]) => v),
    ["BITRIX_SYNC_ALERT_RECEIVER_TOKEN"],
  );
  t.regex(same[0]?.[1] ?? "", /BITRIX_SYNC_ALERT_RECEIVER_TOKEN equals BITRIX_SYNC_CONTACT_RECEIVER_TOKEN/);

  const service = envSource({ ...GOOD, BITRIX_SYNC_SERVICE_TOKEN: GOOD.BITRIX_SYNC_ALERT_RECEIVER_TOKEN });
  t.deepEqual(
    service.map(([v]) => v),
    ["BITRIX_SYNC_SERVICE_TOKEN"],
  );

  const key = envSource({ ...GOOD, BITRIX_SYNC_HASH_KEY: GOOD.BITRIX_SYNC_SERVICE_TOKEN });
  t.deepEqual(
    key.map(([v]) => v),
    ["BITRIX_SYNC_HASH_KEY"],
  );

  const rotation = envSource({
    ...GOOD,
    BITRIX_SYNC_CONTACT_RECEIVER_TOKEN_PREVIOUS: GOOD.BITRIX_SYNC_CONTACT_RECEIVER_TOKEN,
  });
  t.deepEqual(
    rotation.map(([v]) => v),
    ["BITRIX_SYNC_CONTACT_RECEIVER_TOKEN_PREVIOUS"],
  );
  t.regex(rotation[0]?.[1] ?? "", /previous token is the one being replaced/);
  for (const p of [...same, ...service, ...key, ...rotation]) {
    for (const v of Object.values(GOOD)) t.false(p[1].includes(v));
  }
});

test("with sync enabled the service token and the hash key are required", (t) => {
  for (const name of ["BITRIX_SYNC_SERVICE_TOKEN", "BITRIX_SYNC_HASH_KEY"] as const) {
    const { [name]: _left, ...rest } = GOOD;
    withFiles({ ...rest, ...CRM }, (dir) => {
      const p = problems({ ...ENABLED, SECRETS_SOURCE: "file", BITRIX_SYNC_SECRETS_DIR: dir });
      t.deepEqual(
        p.map(([v]) => v),
        [name],
      );
      t.regex(p[0]?.[1] ?? "", new RegExp(`secret ${name} is required when BITRIX_SYNC_ENABLED=true`));
    });
  }
  // Disabled, neither is needed (the service only receives and reports).
  const { BITRIX_SYNC_SERVICE_TOKEN: _s, BITRIX_SYNC_HASH_KEY: _k, ...receiversOnly } = GOOD;
  t.deepEqual(envSource(receiversOnly), []);
});

test("SECRETS_SOURCE=env is refused when sync is enabled", (t) => {
  const p = problems({ ...ENABLED, ...GOOD, ...CRM, SECRETS_SOURCE: "env" });
  t.deepEqual(
    p.map(([v]) => v),
    ["SECRETS_SOURCE"],
  );
  t.regex(
    p[0]?.[1] ?? "",
    /SECRETS_SOURCE=env is for local use only and is refused when BITRIX_SYNC_ENABLED=true/,
  );
  t.deepEqual(problems({ ...GOOD, SECRETS_SOURCE: "env", BITRIX_SYNC_ENABLED: "false" }), []);
});

test("what the sandbox generates passes the same rules", (t) => {
  const { config } = withSandboxTokens(loadConfig({ SECRETS_SOURCE: "env" }));
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-sandbox-key-"));
  try {
    const k = sandboxHashKey(dir);
    t.true(k.created && k.kept);
    t.deepEqual(sandboxHashKey(dir), { key: k.key, created: false, kept: true }, "kept across runs");
    t.deepEqual(tokenProblems({ ...config.secrets, BITRIX_SYNC_HASH_KEY: k.key }), []);
  } finally {
    rmSync(dir, { recursive: true });
  }
});
