// Sandbox mode fails closed (src/config/env.ts): a deployment whose CRM webhook secret file went
// missing must stop with the startup error naming that secret, never fall back to the emulator on
// the deployment's database. Sandbox mode needs no configured database (the embedded one) or an
// explicit BITRIX_SYNC_SANDBOX=true (then a database the sandbox created: checked at start).
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { ConfigError, loadConfig } from "../../../src/config/env.js";
import { classifyStartupError, EXIT, LINE_PREFIX } from "../../../src/startup/errors.js";

const DB = "postgres://svc:pw-5kQ2@db.internal:5432/app";
const WEBHOOK = "https://portal.bitrix24.test/rest/1/whsecret7k2m9q4x/";

function refusal(env: NodeJS.ProcessEnv) {
  const e = (() => {
    try {
      loadConfig(env);
    } catch (e) {
      return e;
    }
    return null;
  })();
  if (!(e instanceof ConfigError)) throw new Error("the configuration was accepted");
  const startup = classifyStartupError(e);
  if (!startup) throw new Error("not a startup error");
  return { problems: e.problems, startup };
}

test("nothing configured: sandbox mode on the embedded database, as `npm start` always did", (t) => {
  const c = loadConfig({ SECRETS_SOURCE: "env" });
  t.true(c.sandbox);
  t.true(c.processing);
});

test("a database configured without the webhook secret file refuses to start and names the secret", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-sandbox-mode-"));
  try {
    writeFileSync(join(dir, "BITRIX_SYNC_DATABASE_URL"), `${DB}\n`);
    const { problems, startup } = refusal({ SECRETS_SOURCE: "file", BITRIX_SYNC_SECRETS_DIR: dir });
    t.deepEqual(
      problems.map((p) => [p.variable, p.kind]),
      [["BITRIX_SYNC_CRM_REST_WEBHOOK_URL", "secret_missing"]],
    );
    t.is(startup.exitCode, EXIT.secretMissing);
    t.is(startup.lines.length, 1);
    const line = `${LINE_PREFIX} ${startup.lines[0]}`;
    t.regex(
      line,
      new RegExp(
        `^bitrix-sync: cannot start: secret BITRIX_SYNC_CRM_REST_WEBHOOK_URL is missing \\(the file ${dir}/BITRIX_SYNC_CRM_REST_WEBHOOK_URL\\) while BITRIX_SYNC_DATABASE_URL names a database: sandbox mode runs only on the embedded database`,
      ),
    );
    t.false(line.includes("pw-5kQ2"));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the same with the secrets in the environment, and with BITRIX_SYNC_ENABLED=false", (t) => {
  for (const extra of [{}, { BITRIX_SYNC_ENABLED: "false" }]) {
    const { startup } = refusal({ SECRETS_SOURCE: "env", BITRIX_SYNC_DATABASE_URL: DB, ...extra });
    t.is(startup.exitCode, EXIT.secretMissing);
    t.regex(startup.lines[0] ?? "", /BITRIX_SYNC_CRM_REST_WEBHOOK_URL is missing \(the environment variable/);
  }
});

test("BITRIX_SYNC_SANDBOX=true allows a configured database (checked at start for the sandbox's mark)", (t) => {
  const c = loadConfig({ SECRETS_SOURCE: "env", BITRIX_SYNC_DATABASE_URL: DB, BITRIX_SYNC_SANDBOX: "true" });
  t.true(c.sandbox);
});

test("BITRIX_SYNC_SANDBOX=false never runs sandbox mode, even on the embedded database", (t) => {
  const { startup } = refusal({ SECRETS_SOURCE: "env", BITRIX_SYNC_SANDBOX: "false" });
  t.is(startup.exitCode, EXIT.secretMissing);
  t.regex(
    startup.lines[0] ?? "",
    /BITRIX_SYNC_CRM_REST_WEBHOOK_URL is missing .* and BITRIX_SYNC_SANDBOX=false/,
  );
});

test("BITRIX_SYNC_SANDBOX=true with a webhook configured is a contradiction", (t) => {
  const { startup } = refusal({
    SECRETS_SOURCE: "env",
    BITRIX_SYNC_SANDBOX: "true",
    BITRIX_SYNC_CRM_REST_WEBHOOK_URL: WEBHOOK,
    BITRIX_SYNC_PORTAL_HOST: "portal.bitrix24.test",
  });
  t.is(startup.exitCode, EXIT.config);
  t.regex(
    startup.lines[0] ?? "",
    /BITRIX_SYNC_SANDBOX=true but BITRIX_SYNC_CRM_REST_WEBHOOK_URL is configured/,
  );
  t.false((startup.lines[0] ?? "").includes("whsecret"));
});

test("a webhook configured is not sandbox mode, with or without BITRIX_SYNC_SANDBOX=false", (t) => {
  for (const extra of [{}, { BITRIX_SYNC_SANDBOX: "false" }]) {
    const c = loadConfig({
      SECRETS_SOURCE: "env",
      BITRIX_SYNC_DATABASE_URL: DB,
      BITRIX_SYNC_CRM_REST_WEBHOOK_URL: WEBHOOK,
      BITRIX_SYNC_PORTAL_HOST: "portal.bitrix24.test",
      ...extra,
    });
    t.false(c.sandbox);
  }
});
