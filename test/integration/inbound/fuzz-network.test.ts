// The short version of `npm run fuzz:receiver` (test/helpers/fuzz-receiver.ts): 2 000 generated
// requests over real HTTP against the real service process, with slow, huge, broken and stalled
// bodies among them. Goals: no row for malformed input, no 5xx, no valid request lost or refused.
import test from "ava";
import { formatReport, missedGoals, runReceiverFuzz } from "../../helpers/fuzz-receiver.js";

const REQUESTS = Number(process.env.RECEIVER_NETWORK_FUZZ_REQUESTS ?? 2_000);

test("network fuzz: no row for malformed input, no 5xx, no valid request lost", async (t) => {
  t.timeout(180_000);
  const report = await runReceiverFuzz({ requests: REQUESTS, connections: 8, stalled: 2 });
  t.log(formatReport(report));
  t.deepEqual(
    missedGoals(report),
    [],
    `replay with: npm run fuzz:receiver -- --requests ${REQUESTS} --seed ${report.seed}`,
  );
  t.is(report.requests, REQUESTS);
  t.true(report.valid > REQUESTS / 10, "a fair share of valid requests");
  for (const transport of ["keepalive", "slow", "huge", "framing", "stalled"]) {
    t.true((report.byTransport[transport] ?? 0) > 0, `some requests went ${transport}`);
  }
  // A stalled body is cut off at the request timeout (408 or a closed socket), unless the request
  // was refused before its body mattered (a wrong token or path: 4xx at once). Nothing hangs.
  const stalled = Object.entries(report.stalledOutcomes);
  t.is(
    stalled.reduce((n, [, c]) => n + c, 0),
    2,
    "both stalled requests ended",
  );
  for (const [outcome] of stalled) {
    t.true(outcome === "closed" || (Number(outcome) >= 400 && Number(outcome) < 500), `stalled: ${outcome}`);
  }
});
