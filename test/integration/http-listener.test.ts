// The HTTP listener's limits (issue 10, finding 6) with real slow sockets on loopback: a client
// dribbling its headers or its body is cut off after the service's limits (src/http/server.ts), not
// Node's defaults of 60 and 300 s, and connections beyond the cap are closed as they arrive.
import type { Server } from "node:http";
import { type AddressInfo, connect, type Socket } from "node:net";
import test from "ava";
import { createHttpServer, SERVER_LIMITS } from "../../src/http/server.js";
import { captureLogger, encodeForm, makeApp, robotFields, TOKENS } from "../helpers/receiver.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

async function listening(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return (server.address() as AddressInfo).port;
}

async function close(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

interface Slow {
  socket: Socket;
  /** Resolves with the ms from connect to close, and what the server sent. */
  closed: Promise<{ ms: number; reply: string }>;
}

/** A client that sends `head`, then `drip` every 300 ms for as long as the socket is open. */
function slowClient(port: number, head: string, drip: string): Slow {
  const started = Date.now();
  const socket = connect(port, "127.0.0.1");
  let reply = "";
  socket.on("data", (d) => {
    reply += d.toString("latin1");
  });
  socket.on("error", () => undefined);
  socket.on("connect", () => socket.write(head));
  const timer = setInterval(() => {
    if (!socket.destroyed && socket.writable) socket.write(drip);
  }, 300);
  const closed = new Promise<{ ms: number; reply: string }>((resolve) => {
    socket.on("close", () => {
      clearInterval(timer);
      resolve({ ms: Date.now() - started, reply });
    });
  });
  return { socket, closed };
}

const CHECK_SLACK_MS = SERVER_LIMITS.checkIntervalMs + 2_000;

test("slow headers and slow bodies are cut off by the service's limits, not Node's defaults", async (t) => {
  t.timeout(60_000);
  const server = createHttpServer(makeApp(db.pool, captureLogger().log));
  const port = await listening(server);
  try {
    const path = `/bitrix/sync/webhook/contact?token=${TOKENS.contact}&ID=1`;
    const headers = Array.from({ length: 20 }, () =>
      slowClient(port, `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n`, "X-Slow: 1\r\n"),
    );
    const body = encodeForm(robotFields("contact", "1"));
    const bodies = Array.from({ length: 20 }, () =>
      slowClient(
        port,
        `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${body.length}\r\n\r\n`,
        "a",
      ),
    );
    const h = await Promise.all(headers.map((s) => s.closed));
    const b = await Promise.all(bodies.map((s) => s.closed));
    const worstHeaders = Math.max(...h.map((x) => x.ms));
    const worstBodies = Math.max(...b.map((x) => x.ms));
    t.log(`slow headers closed after ≤ ${worstHeaders} ms, slow bodies after ≤ ${worstBodies} ms`);
    t.true(worstHeaders <= SERVER_LIMITS.headersTimeoutMs + CHECK_SLACK_MS, `headers: ${worstHeaders} ms`);
    t.true(worstBodies <= SERVER_LIMITS.requestTimeoutMs + CHECK_SLACK_MS, `bodies: ${worstBodies} ms`);
    for (const x of [...h, ...b]) {
      t.true(x.reply === "" || x.reply.startsWith("HTTP/1.1 408"), "a 408 or nothing, never a 200");
    }
  } finally {
    await close(server);
  }
});

test("connections beyond the cap are closed as they arrive; the listener still serves", async (t) => {
  const server = createHttpServer(makeApp(db.pool, captureLogger().log), { limits: { maxConnections: 10 } });
  const port = await listening(server);
  const held: Slow[] = [];
  try {
    for (let i = 0; i < 15; i++) {
      held.push(slowClient(port, "GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n", "X-Slow: 1\r\n"));
      await new Promise((r) => setTimeout(r, 20));
    }
    const dropped = await Promise.all(
      held.map((s) =>
        Promise.race([
          s.closed.then(() => true),
          new Promise<boolean>((r) => setTimeout(() => r(false), 1_000)),
        ]),
      ),
    );
    t.is(dropped.filter(Boolean).length, 5, "the five beyond the cap are closed at once");
    t.deepEqual(dropped.slice(0, 10), Array(10).fill(false), "the first ten are still open");
  } finally {
    for (const s of held) s.socket.destroy();
  }
  // Once the slow ones are gone, a normal request gets through.
  await new Promise((r) => setTimeout(r, 100));
  const res = await fetch(`http://127.0.0.1:${port}/health/live`);
  t.is(res.status, 200);
  await close(server);
});
