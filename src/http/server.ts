// The HTTP listener and its limits. Node's defaults let a slow client hold a socket for minutes (60 s
// for the headers, 300 s for the whole request), and a review held 200 sockets that way. Behind
// nginx a robot's request arrives whole in milliseconds, so these limits only ever end clients
// that are slow on purpose or broken. docs/operations.md lists them.
import type { Server } from "node:http";
import { createAdaptorServer } from "@hono/node-server";
import type { Hono } from "hono";

export interface ServerLimits {
  /** The request line and all headers must arrive within this (408 otherwise). */
  headersTimeoutMs: number;
  /** The whole request, body included, must arrive within this (408 otherwise). */
  requestTimeoutMs: number;
  /**
   * An idle keep-alive connection is closed after this. Longer than nginx's upstream
   * keepalive_timeout (src/config/nginx.ts), so nginx, not the service, closes an idle connection
   * and never sends a request on one the service is closing.
   */
  keepAliveTimeoutMs: number;
  /** A socket with no traffic either way for this long is closed (e.g. a client that stops reading). */
  socketIdleMs: number;
  /** How often Node checks the two timeouts above; its default of 30 s would stretch them. */
  checkIntervalMs: number;
  /** Connections beyond this are closed as they arrive. */
  maxConnections: number;
}

export const SERVER_LIMITS: ServerLimits = {
  headersTimeoutMs: 5_000,
  requestTimeoutMs: 10_000,
  keepAliveTimeoutMs: 10_000,
  socketIdleMs: 30_000,
  checkIntervalMs: 1_000,
  maxConnections: 512,
};

/** The service's HTTP server for `app`, with the limits applied; not yet listening. */
export function createHttpServer(
  app: Pick<Hono, "fetch">,
  opts: { hostname?: string; limits?: Partial<ServerLimits> } = {},
): Server {
  const l = { ...SERVER_LIMITS, ...opts.limits };
  const server = createAdaptorServer({
    fetch: app.fetch,
    hostname: opts.hostname,
    serverOptions: {
      headersTimeout: l.headersTimeoutMs,
      requestTimeout: l.requestTimeoutMs,
      keepAliveTimeout: l.keepAliveTimeoutMs,
      connectionsCheckingInterval: l.checkIntervalMs,
    },
  }) as Server;
  server.maxConnections = l.maxConnections;
  server.timeout = l.socketIdleMs;
  return server;
}
