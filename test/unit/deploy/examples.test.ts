// .env.example and deploy/config.example.json against the service's own configuration code: every
// variable the schema knows is in the example and nothing else is, the placeholders pass the same
// validation the service and the nginx renderer apply, and no stub-era name survives (§12.2, §17).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseEnv } from "node:util";
import test from "ava";
import { EnvSchema, loadConfig } from "../../../src/config/env.js";
import { NginxEnvSchema, renderNginxFromEnv } from "../../../src/config/nginx.js";
import { OPTIONAL_SECRET_NAMES, SECRET_NAMES } from "../../../src/config/secrets.js";
import { parseWebhookUrl } from "../../../src/crm/client.js";
import { receiverConfig } from "../../../src/inbound/config.js";
import { projectRoot } from "../../../src/local/project-root.js";

const envExample = parseEnv(readFileSync(join(projectRoot, ".env.example"), "utf8")) as Record<
  string,
  string
>;
const configExample = JSON.parse(
  readFileSync(join(projectRoot, "deploy", "config.example.json"), "utf8"),
) as {
  secrets: Record<string, string>;
  migration: Record<string, string>;
};
const schemaKeys = [...Object.keys(EnvSchema.shape), ...Object.keys(NginxEnvSchema.shape)].sort();
const secretKeys = [...SECRET_NAMES, ...OPTIONAL_SECRET_NAMES].sort();

/** The example's secrets as files in a fresh directory (an empty value: no file). */
function secretsDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-secrets-"));
  for (const [name, value] of Object.entries(configExample.secrets)) {
    if (value !== "") writeFileSync(join(dir, name), `${value}\n`, { mode: 0o400 });
  }
  return dir;
}

test(".env.example names exactly the variables of the service's and the renderer's schemas", (t) => {
  const keys = Object.keys(envExample).sort();
  t.deepEqual(
    schemaKeys.filter((k) => !keys.includes(k)),
    [],
    "in the schema, missing from .env.example",
  );
  t.deepEqual(
    keys.filter((k) => !schemaKeys.includes(k)),
    [],
    "in .env.example, unknown to the schema",
  );
});

test("no stub-era variable and no secret in .env.example", (t) => {
  for (const k of Object.keys(envExample)) {
    t.false(
      /^BITRIX_SYNC_CRM_BASE_URL$|^CONTACT_.*_INTERVAL_SEC$|^BITRIX_SYNC_CRM_MAX_CONCURRENCY$/.test(k),
      k,
    );
    t.false((secretKeys as string[]).includes(k), `${k} is a secret: it belongs in a file`);
  }
});

test("config.example.json lists every secret, each a placeholder", (t) => {
  t.deepEqual(Object.keys(configExample.secrets).sort(), secretKeys);
  t.deepEqual(Object.keys(configExample.migration), ["MIGRATION_DATABASE_URL"]);
  for (const [k, v] of Object.entries({ ...configExample.secrets, ...configExample.migration })) {
    t.true(v === "" || v.includes("change-me"), `${k} must be an obvious placeholder`);
  }
});

test("the examples load through the service's configuration, also with sync enabled", (t) => {
  const dir = secretsDir();
  try {
    for (const enabled of ["false", "true"]) {
      const config = loadConfig({
        ...envExample,
        BITRIX_SYNC_ENABLED: enabled,
        BITRIX_SYNC_SECRETS_DIR: dir,
      });
      t.false(config.sandbox);
      t.is(config.processing, enabled === "true");
      t.is(config.env.BITRIX_WEBHOOK_ALLOWED_CIDRS.length, 2);
      t.is(config.env.BITRIX_SYNC_MIGRATE_ON_START, false);
      const rc = receiverConfig(config);
      t.truthy(rc.tokens.contact.current);
      t.is(rc.tokens.contact.previous, undefined);
      t.notThrows(() =>
        parseWebhookUrl(
          config.secrets.BITRIX_SYNC_CRM_REST_WEBHOOK_URL as string,
          config.env.BITRIX_SYNC_PORTAL_HOST as string,
        ),
      );
    }
  } finally {
    rmSync(dir, { recursive: true });
  }
});

test("deploy/nginx/bitrix-sync-public.example.conf is what render:nginx makes of .env.example", (t) => {
  const dir = secretsDir();
  try {
    const r = renderNginxFromEnv({ ...envExample, BITRIX_SYNC_SECRETS_DIR: dir });
    t.is(r.receiversEnabledBy, "BITRIX_SYNC_CONTACT_RECEIVER_TOKEN is configured");
    const committed = readFileSync(
      join(projectRoot, "deploy", "nginx", "bitrix-sync-public.example.conf"),
      "utf8",
    );
    t.is(
      committed,
      r.text,
      "run: npm run render:nginx -- --env-file .env.example --out deploy/nginx/bitrix-sync-public.example.conf",
    );
  } finally {
    rmSync(dir, { recursive: true });
  }
});

test("docs/configuration.md documents every variable and secret", (t) => {
  const doc = readFileSync(join(projectRoot, "docs", "configuration.md"), "utf8");
  for (const k of [...schemaKeys, ...secretKeys, "MIGRATION_DATABASE_URL", "MIGRATION_DATABASE_URL_FILE"]) {
    t.true(doc.includes(k), k);
  }
});
