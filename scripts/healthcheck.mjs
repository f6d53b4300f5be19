// The container's HEALTHCHECK (Dockerfile): GET /health/live on the service's own listener. Plain
// JavaScript run by node, the one tool the image is sure to have, without tsx's start-up cost.
// Exit 0 when the process answers 200, 1 otherwise (no answer within 3 s, refused, other status).
const port = Number(process.env.PORT || 8080);
const bound = process.env.HOST;
// A wildcard listener answers on loopback; a specific address only on itself.
const host = !bound || bound === "0.0.0.0" || bound === "::" ? "127.0.0.1" : bound;
const url = new URL(`http://${host.includes(":") ? `[${host}]` : host}:${port}/health/live`);
try {
  const res = await fetch(url, { signal: AbortSignal.timeout(3000), redirect: "manual" });
  process.exit(res.status === 200 ? 0 : 1);
} catch {
  process.exit(1);
}
