// `npm run fuzz:receiver`: the receivers' fuzz run over real HTTP against the real service on
// loopback (test/helpers/fuzz-receiver.ts). Prints the counts and exits 1 when a goal is missed:
// rows written for malformed input, 5xx answers, valid requests lost or refused, duplicate rows.
//
//   npm run fuzz:receiver                      # 100 000 requests, a random seed
//   npm run fuzz:receiver -- --requests 2000 --seed 42
//
// Needs a PostgreSQL: TEST_DATABASE_URL, or an embedded one (scripts/with-test-db.ts provides it).
import { parseArgs } from "node:util";
import { formatReport, missedGoals, runReceiverFuzz } from "../test/helpers/fuzz-receiver.js";

const { values } = parseArgs({
  options: {
    requests: { type: "string", default: process.env.FUZZ_REQUESTS ?? "100000" },
    seed: { type: "string" },
    connections: { type: "string", default: "16" },
    stalled: { type: "string", default: "20" },
  },
});

const report = await runReceiverFuzz({
  requests: Number(values.requests),
  ...(values.seed !== undefined ? { seed: Number(values.seed) } : {}),
  connections: Number(values.connections),
  stalled: Number(values.stalled),
  progress: (line) => console.error(`fuzz: ${line}`),
});
console.log(formatReport(report));
const missed = missedGoals(report);
if (missed.length > 0) {
  console.error(`fuzz: goals missed: ${missed.join(", ")} (replay with --seed ${report.seed})`);
  process.exit(1);
}
