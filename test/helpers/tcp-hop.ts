// A TCP hop in front of PostgreSQL for the tests that take the database away from a process
// (sigterm-drain.test.ts, job-bookkeeping.test.ts), and the port the failover drill moves from the
// old primary to the promoted standby (scripts/drill-failover.ts), as a managed service's DNS name.
import { createServer, type Server, type Socket, connect as tcpConnect } from "node:net";

/**
 * A TCP hop between a process and PostgreSQL (loopback only). `blackhole()` stops forwarding while
 * the connections stay open, as when a network partition or a frozen server leaves the process
 * waiting; `close()` ends every connection through it and refuses new ones, as a restart does.
 */
export async function startTcpHop(first: { host: string; port: number }) {
  let target = first;
  const sockets = new Set<Socket>();
  let holed = false;
  const server: Server = createServer((client) => {
    sockets.add(client);
    client.on("error", () => undefined);
    client.on("close", () => sockets.delete(client));
    if (holed) return; // accepted, never forwarded
    const upstream = tcpConnect(target.port, target.host);
    sockets.add(upstream);
    upstream.on("error", () => client.destroy());
    upstream.on("close", () => sockets.delete(upstream));
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  return {
    port,
    /** From now on nothing goes through, in either direction, and nothing is closed. */
    blackhole() {
      holed = true;
      for (const s of sockets) {
        s.unpipe();
        s.pause();
      }
    },
    /**
     * New connections go to `next` from now on; the open ones are ended, as when the old server goes
     * away behind a switched name (a client reconnects and lands on the new one).
     */
    retarget(next: { host: string; port: number }) {
      target = next;
      holed = false;
      for (const s of sockets) s.destroy();
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
