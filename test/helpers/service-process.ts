// Runs the real service (src/main.ts) as a child process against a test database and the emulator,
// so tests can SIGKILL or SIGTERM it like an orchestrator would.
import { type ChildProcess, spawn } from "node:child_process";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { projectRoot } from "../../src/db/migrate.js";
import { TEST_ALERT_TOKEN, TEST_CONTACT_TOKEN, TEST_MEMBER_ID } from "./e2e.js";

export interface ServiceProcess {
  child: ChildProcess;
  output: string[];
  exited: Promise<number | null>;
}

export function serviceEnv(
  databaseUrl: string,
  crm: { url: string; host: string },
  extra: Record<string, string> = {},
) {
  return {
    PATH: process.env.PATH ?? "",
    HOME: process.env.HOME ?? "/tmp",
    SECRETS_SOURCE: "env",
    BITRIX_SYNC_ENABLED: "true",
    BITRIX_SYNC_DATABASE_URL: databaseUrl,
    BITRIX_SYNC_CRM_REST_WEBHOOK_URL: crm.url,
    BITRIX_SYNC_PORTAL_HOST: crm.host,
    BITRIX_SYNC_PORTAL_MEMBER_ID: TEST_MEMBER_ID,
    BITRIX_SYNC_CONTACT_RECEIVER_TOKEN: TEST_CONTACT_TOKEN,
    BITRIX_SYNC_ALERT_RECEIVER_TOKEN: TEST_ALERT_TOKEN,
    BITRIX_SYNC_CONTACT_USER_ID_FIELD: SANDBOX_FIELDS.userId,
    BITRIX_SYNC_CONTACT_REGISTERED_FIELD: SANDBOX_FIELDS.registered,
    BITRIX_SYNC_CONTACT_CITIZENSHIP_FIELD: SANDBOX_FIELDS.citizenship,
    BITRIX_SYNC_HTTP_TIMEOUT_SEC: "2",
    BITRIX_SYNC_MIGRATE_ON_START: "false",
    PORT: "0",
    HOST: "127.0.0.1",
    LOG_LEVEL: "info",
    ...extra,
  };
}

export function startService(env: Record<string, string>): ServiceProcess {
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
    cwd: projectRoot,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const output: string[] = [];
  child.stdout?.on("data", (d: Buffer) => output.push(d.toString("utf8")));
  child.stderr?.on("data", (d: Buffer) => output.push(d.toString("utf8")));
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  return { child, output, exited };
}
