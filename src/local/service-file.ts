// The file through which a running sandbox service says where it is: its pid, its HTTP port and the
// sandbox portal's REST endpoint, plus the tokens it generated because none were configured.
// `npm run demo`, `npm run stop` and the port-in-use message read it. Mode 0600: the sandbox webhook
// URL and tokens open nothing outside this machine, but they are still not for printing.
import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export interface ServiceFile {
  pid: number;
  startedAt: string;
  /** Where a process on this machine reaches the HTTP listener. */
  http: { host: string; port: number };
  sandbox: {
    /** The sandbox portal's webhook URL (the emulator on loopback). */
    crmWebhookUrl: string;
    /** Present when the service generated the Contact receiver token (none was configured). */
    contactReceiverToken?: string;
    /** Present when the service generated the status endpoint's token (none was configured). */
    serviceToken?: string;
  };
}

function serviceFilePath(dataDir: string): string {
  return join(dataDir, "service.json");
}

/** A wildcard listen address is reached through loopback. */
export function connectHost(listenHost: string): string {
  if (listenHost === "0.0.0.0" || listenHost === "") return "127.0.0.1";
  if (listenHost === "::") return "::1";
  return listenHost;
}

export function writeServiceFile(dataDir: string, content: ServiceFile): void {
  mkdirSync(dataDir, { recursive: true });
  const file = serviceFilePath(dataDir);
  const tmp = `${file}.${randomBytes(4).toString("hex")}.tmp`;
  writeFileSync(tmp, JSON.stringify(content, null, 2), { mode: 0o600 });
  renameSync(tmp, file);
}

export function readServiceFile(dataDir: string): ServiceFile | null {
  try {
    return JSON.parse(readFileSync(serviceFilePath(dataDir), "utf8")) as ServiceFile;
  } catch {
    return null;
  }
}

/** Removes the file if it is this process's (a newer service may have replaced it). */
export function removeOwnServiceFile(dataDir: string): void {
  if (readServiceFile(dataDir)?.pid === process.pid) rmSync(serviceFilePath(dataDir), { force: true });
}

/** True when a process with this pid exists (signal 0 checks without sending anything). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** The service file of a service whose process still exists, or null. */
export function runningService(dataDir: string): ServiceFile | null {
  const f = readServiceFile(dataDir);
  return f && processAlive(f.pid) ? f : null;
}
