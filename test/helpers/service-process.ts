// Runs the real service (src/main.ts) as a child process against a test database and the emulator,
// so tests can SIGKILL or SIGTERM it like an orchestrator would.
import { type ChildProcess, spawn } from "node:child_process";
import { projectRoot } from "../../src/local/project-root.js";
import { testServiceEnv } from "./e2e.js";

export interface ServiceProcess {
  child: ChildProcess;
  output: string[];
  exited: Promise<number | null>;
}

export function serviceEnv(
  databaseUrl: string,
  crm: { url: string; host: string },
  extra: Record<string, string> = {},
  secrets: Record<string, string> = {},
) {
  return {
    PATH: process.env.PATH ?? "",
    HOME: process.env.HOME ?? "/tmp",
    ...testServiceEnv(crm, { BITRIX_SYNC_DATABASE_URL: databaseUrl, ...secrets }),
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
