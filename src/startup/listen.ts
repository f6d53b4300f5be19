// The HTTP port at startup: checked before anything else starts (a second `npm start` must not
// touch the database or claim work), then bound for real with the same error handling, since another
// process can take the port in between.
import type { Server } from "node:http";
import { createServer } from "node:net";
import { EXIT, StartupError } from "./errors.js";

export interface PortHolder {
  /** A bitrix-sync service this machine's local state says is running on the port. */
  pid: number;
}

function shown(host: string, port: number): string {
  return host === "0.0.0.0" || host === "::" ? `port ${port}` : `port ${port} on ${host}`;
}

/** The startup error for a failed listen, or null when the failure is not one we can explain. */
export function listenStartupError(
  host: string,
  port: number,
  e: unknown,
  holder?: PortHolder | null,
): StartupError | null {
  const code = (e as { code?: unknown }).code;
  const next = port >= 65535 ? 8081 : port + 1;
  if (code === "EADDRINUSE") {
    const who = holder
      ? `bitrix-sync is already running there (pid ${holder.pid}): stop it with \`npm run stop\`, or`
      : "another process listens there: stop it, or";
    return new StartupError("port_in_use", EXIT.portInUse, [
      `${shown(host, port)} is already in use; ${who} choose another port with PORT=, e.g. PORT=${next} npm start`,
    ]);
  }
  if (code === "EACCES" || code === "EPERM") {
    return new StartupError("port_not_permitted", EXIT.noPermission, [
      `this process may not listen on ${shown(host, port)} (permission denied): choose a port above 1023 with PORT=, e.g. PORT=8080 npm start`,
    ]);
  }
  if (code === "EADDRNOTAVAIL") {
    return new StartupError("config_invalid", EXIT.config, [
      `invalid configuration: HOST=${host} is not an address of this machine: fix HOST (default 0.0.0.0), then start again.`,
    ]);
  }
  return null;
}

/** Throws the startup error when `host:port` cannot be bound now; port 0 always can. */
export async function assertPortFree(host: string, port: number, holder?: () => PortHolder | null) {
  if (port === 0) return;
  await new Promise<void>((resolve, reject) => {
    const probe = createServer();
    probe.once("error", (e) => reject(listenStartupError(host, port, e, holder?.()) ?? e));
    probe.listen({ host, port, exclusive: true }, () => probe.close(() => resolve()));
  });
}

/** Binds `server`; resolves with the port it listens on, or rejects with the startup error. */
export async function listen(
  server: Server,
  host: string,
  port: number,
  holder?: () => PortHolder | null,
): Promise<number> {
  return await new Promise<number>((resolve, reject) => {
    const onError = (e: Error) => reject(listenStartupError(host, port, e, holder?.()) ?? e);
    server.once("error", onError);
    server.listen(port, host, () => {
      server.off("error", onError);
      const addr = server.address();
      resolve(typeof addr === "object" && addr ? addr.port : port);
    });
  });
}
