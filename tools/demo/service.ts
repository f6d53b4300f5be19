// Finds the running sandbox service through its service file, or starts one in the background
// (detached, its log in the local data folder) and waits until it is ready. A service the demo starts
// keeps running afterwards, so `npm run psql` can explore what the demo did; `npm run stop` stops it.
import { spawn } from "node:child_process";
import { closeSync, mkdirSync, openSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { projectRoot } from "../../src/local/project-root.js";
import { readServiceFile, runningService, type ServiceFile } from "../../src/local/service-file.js";
import { LINE_PREFIX } from "../../src/startup/errors.js";
import { DemoError, within } from "./wait.js";

/** Base URL of the service's HTTP listener. */
export function serviceBase(f: ServiceFile): string {
  const h = f.http.host.includes(":") ? `[${f.http.host}]` : f.http.host;
  return `http://${h}:${f.http.port}`;
}

async function answers(f: ServiceFile, path: string): Promise<number | null> {
  try {
    const res = await fetch(`${serviceBase(f)}${path}`, { signal: AbortSignal.timeout(2_000) });
    await res.arrayBuffer();
    return res.status;
  } catch {
    return null;
  }
}

export interface FoundService {
  file: ServiceFile;
  /** True when the demo started it (it is left running). */
  started: boolean;
  logFile: string | null;
}

/** The last startup error line the service wrote to its log after `from` bytes, if any. */
function startupLine(logFile: string, from: number): string | null {
  const text = readFileSync(logFile, "utf8").slice(from);
  const lines = text.split("\n").filter((l) => l.startsWith(LINE_PREFIX));
  return lines.at(-1) ?? null;
}

export async function ensureService(dataDir: string, timeoutMs: number): Promise<FoundService> {
  const running = runningService(dataDir);
  if (running && (await answers(running, "/health/live")) === 200) {
    return { file: running, started: false, logFile: null };
  }
  // On a fresh clone nothing has created the data folder yet: the log goes in it from the start.
  mkdirSync(dataDir, { recursive: true });
  const logFile = join(dataDir, "service.log");
  const fd = openSync(logFile, "a");
  const from = statSync(logFile).size;
  // Detached: its own process group, so the demo's exit (or a Ctrl-C in this terminal) leaves it be.
  const child = spawn(process.execPath, ["--import", "tsx", join(projectRoot, "src", "main.ts")], {
    cwd: projectRoot,
    env: process.env,
    detached: true,
    stdio: ["ignore", fd, fd],
  });
  closeSync(fd);
  child.unref();
  let exitCode: number | null = null;
  child.on("exit", (code, signal) => {
    exitCode = code ?? (signal ? 128 : 1);
  });
  const pid = child.pid;
  const file = await within(
    timeoutMs,
    "the sandbox service's start",
    async () => {
      if (exitCode !== null) {
        const line = startupLine(logFile, from);
        throw new DemoError(
          `the service did not start (exit code ${exitCode})${line ? `: ${line}` : `; see ${logFile}`}`,
          69,
        );
      }
      const f = readServiceFile(dataDir);
      return f && f.pid === pid && (await answers(f, "/health/live")) === 200 ? f : null;
    },
    async () => `see ${logFile}`,
  );
  return { file, started: true, logFile };
}

/** Waits for /health/ready to answer 200 (the sync loop is running and the schema is current). */
export async function ready(f: ServiceFile, timeoutMs: number): Promise<void> {
  await within(
    timeoutMs,
    "the service's readiness",
    async () => (await answers(f, "/health/ready")) === 200,
    async () => {
      const res = await fetch(`${serviceBase(f)}/health/ready`, { signal: AbortSignal.timeout(2_000) });
      const body = (await res.json()) as { problems?: string[] };
      return `not ready: ${(body.problems ?? []).join(", ") || `HTTP ${res.status}`}`;
    },
  );
}
