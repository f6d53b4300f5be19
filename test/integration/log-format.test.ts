// How the service's log reads where it is written (docs/observability.md): `npm start` at a terminal
// prints one readable line per entry (pino-pretty), piped or in a container it prints JSON lines; the
// `version` in every line is package.json's, also when the image runs `node` directly, where npm
// sets no npm_package_version (or a wrapper's npm sets another package's); and the `revision` in
// every line is the commit of the checkout, or what the image's build argument says. The real service, in
// sandbox mode on a database it creates (BITRIX_SYNC_SANDBOX=true: the only configured database
// sandbox mode accepts); the terminal is a pseudo-terminal from `script`.
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import pg from "pg";
import { withDatabase } from "../../src/db/url.js";
import { projectRoot } from "../../src/local/project-root.js";
import { processAlive, readServiceFile } from "../../src/local/service-file.js";
import { gitRevision } from "../../src/version.js";
import { waitFor } from "../helpers/e2e.js";
import { serverUrl } from "../helpers/testdb.js";

const PACKAGE_VERSION = (
  JSON.parse(readFileSync(join(projectRoot, "package.json"), "utf8")) as { version: string }
).version;

/** Drops a database the service created for one test. */
async function dropDatabase(name: string): Promise<void> {
  const admin = new pg.Client({ connectionString: withDatabase(serverUrl(), "postgres") });
  await admin.connect();
  try {
    await admin.query(`drop database if exists ${name} with (force)`);
  } finally {
    await admin.end();
  }
}

interface Run {
  output: () => string;
  stop: () => Promise<void>;
}

/**
 * Starts `command args` (which runs the service) with a data folder of its own, waits until the
 * service has written its service file and logged that it listens, and returns its output so far.
 */
async function startService(
  t: { teardown(fn: () => void | Promise<void>): void; timeout(ms: number): void },
  command: string,
  args: string[],
  extra: Record<string, string> = {},
): Promise<Run> {
  t.timeout(240_000);
  const data = mkdtempSync(join(tmpdir(), "bitrix-sync-logfmt-"));
  chmodSync(data, 0o755);
  // A database that does not exist yet: the service creates, marks and migrates it.
  const dbName = `bs_logfmt_${randomBytes(6).toString("hex")}`;
  const env = {
    PATH: process.env.PATH ?? "",
    HOME: process.env.HOME ?? "/tmp",
    TERM: "xterm",
    SECRETS_SOURCE: "env",
    BITRIX_SYNC_DATABASE_URL: withDatabase(serverUrl(), dbName),
    BITRIX_SYNC_SANDBOX: "true",
    BITRIX_SYNC_DATA_DIR: data,
    PORT: "0",
    HOST: "127.0.0.1",
    LOG_LEVEL: "info",
    ...extra,
  };
  const child: ChildProcess = spawn(command, args, {
    cwd: projectRoot,
    env,
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  let out = "";
  child.stdout?.on("data", (d: Buffer) => {
    out += d.toString("utf8");
  });
  child.stderr?.on("data", (d: Buffer) => {
    out += d.toString("utf8");
  });
  const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()));
  const stop = async () => {
    const f = readServiceFile(data);
    if (f && processAlive(f.pid)) process.kill(f.pid, "SIGTERM");
    await Promise.race([exited, new Promise((r) => setTimeout(r, 40_000))]);
    // `script` or npm left behind: their process group, by its id.
    try {
      if (child.pid) process.kill(-child.pid, "SIGKILL");
    } catch {
      // already gone
    }
    rmSync(data, { recursive: true, force: true });
    await dropDatabase(dbName);
  };
  t.teardown(stop);
  await waitFor(
    async () => readServiceFile(data) !== null && /HTTP listener ready/.test(out),
    // npm start compiles with tsx on first use: on a loaded 2-core machine that alone takes a minute.
    150_000,
    "the service's start",
  );
  return { output: () => out, stop };
}

test("npm start on a terminal prints readable lines, not JSON", async (t) => {
  // script -qfc runs the command on a pseudo-terminal and copies what it prints to our pipe.
  const run = await startService(t, "script", ["-qfec", "npm start --silent", "/dev/null"]);
  await run.stop();
  const lines = run
    .output()
    .split(/\r?\n/)
    // biome-ignore lint/suspicious/noControlCharactersInRegex: colour codes of the terminal
    .map((l) => l.replace(/\u001b\[[0-9;]*m/g, ""))
    .filter((l) => l.trim() !== "");
  const listening = lines.find((l) => l.includes("HTTP listener ready"));
  t.truthy(listening, run.output());
  t.regex(
    listening as string,
    /^\[\d{2}:\d{2}:\d{2}\.\d{3}\] INFO: HTTP listener ready \{.*"event":"http\.listening"/,
  );
  t.false(
    lines.some((l) => l.startsWith('{"level"')),
    "no raw JSON line on a terminal",
  );
  // The readable line carries the same fields, redaction included.
  t.true(listening?.includes(`"version":"${PACKAGE_VERSION}"`));
});

test("npm start piped prints JSON lines, one object each", async (t) => {
  const run = await startService(t, "npm", ["start", "--silent"]);
  await run.stop();
  const lines = run
    .output()
    .split("\n")
    .filter((l) => l.startsWith("{"));
  t.true(lines.length > 3, run.output());
  const parsed = lines.map(
    (l) => JSON.parse(l) as { level: string; msg: string; version: string; revision: string; event: string },
  );
  const listening = parsed.find((p) => p.event === "http.listening");
  t.is(listening?.level, "info");
  t.is(listening?.msg, "HTTP listener ready");
  // Run from this checkout with no BITRIX_SYNC_REVISION: its HEAD, read once at start.
  const head = gitRevision() ?? "unknown";
  t.regex(head, /^([0-9a-f]{40}|unknown)$/);
  for (const p of parsed) {
    t.is(p.version, PACKAGE_VERSION);
    t.is(p.revision, head);
  }
});

test("run by node directly, as the image does, every line's version is package.json's, whatever npm_package_version says, and its revision the image's", async (t) => {
  // A wrapper's npm script (a process manager's package) sets its own package's version; the image
  // carries its commit as BITRIX_SYNC_REVISION (Dockerfile, a build argument).
  const revision = "0123456789abcdef0123456789abcdef01234567";
  const run = await startService(t, process.execPath, ["--import", "tsx", "src/main.ts"], {
    npm_package_version: "0.0.0-another-package",
    BITRIX_SYNC_REVISION: revision,
  });
  await run.stop();
  const parsed = run
    .output()
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as { version: string; revision: string; event: string });
  t.true(parsed.some((p) => p.event === "http.listening"));
  for (const p of parsed) {
    t.is(p.version, PACKAGE_VERSION);
    t.is(p.revision, revision);
  }
});
