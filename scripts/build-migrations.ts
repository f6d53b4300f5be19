// `npm run db:build` and `npm run db:check` (docs/migrations.md).
//
//   db:build  verifies migrations/committed/ (hash chain, frozen sources) and writes the migrations
//             of migrations/src/ that have no committed file yet, expanded with today's sql/.
//             It never rewrites a committed file.
//   db:check  the same verification, and fails when a migration is not built yet or a sql/ file
//             differs from what the newest migration including it applied.
//
// Both exit 1 with one line per problem, naming the file and what to do.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { projectRoot } from "../src/db/migrate.js";
import { planMigrations } from "../src/db/migration-source.js";

const check = process.argv.includes("--check");
const rootArg = process.argv.indexOf("--root");
const root = rootArg > 0 ? (process.argv[rootArg + 1] ?? projectRoot) : projectRoot;

const plan = planMigrations(root);
// A broken chain or an edited source is reported before anything is written.
const chainProblems = plan.problems.filter((p) => p.file.startsWith("migrations/"));
const driftProblems = plan.problems.filter((p) => !p.file.startsWith("migrations/"));
let failed = chainProblems.length > 0;
for (const p of chainProblems) console.error(`${p.file}: ${p.message}`);

if (check) {
  for (const m of plan.pending) {
    console.error(`migrations/src/${m.filename}: not built yet; run npm run db:build`);
    failed = true;
  }
  for (const p of driftProblems) console.error(`${p.file}: ${p.message}`);
  if (driftProblems.length > 0) failed = true;
} else if (!failed) {
  for (const m of plan.pending) {
    writeFileSync(join(root, "migrations", "committed", m.filename), m.text);
    console.log(`wrote migrations/committed/${m.filename}`);
  }
  // Building applied the pending includes; what is left is a sql/ change no migration carries.
  const after = planMigrations(root);
  for (const p of after.problems) console.error(`${p.file}: ${p.message}`);
  if (after.problems.length > 0) failed = true;
  if (plan.pending.length === 0 && !failed)
    console.log("nothing to build: migrations/committed is up to date");
}
process.exitCode = failed ? 1 : 0;
