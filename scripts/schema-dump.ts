// `npm run db:dump`: rewrites migrations/schema.sql, the normalised pg_dump of the schema that the
// committed migrations leave (src/db/schema-dump.ts). `-- --check` only compares (what
// `npm run db:check` does too). The chain is applied to a scratch database: TEST_DATABASE_URL's
// server, else an embedded PostgreSQL. `--root DIR` works on another tree.
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { applyChain, firstDifference } from "../src/db/migration-chain.js";
import { planMigrations } from "../src/db/migration-source.js";
import { SCHEMA_DUMP_FILE } from "../src/db/schema-dump.js";
import { startScratchServer } from "../src/db/scratch.js";
import { projectRoot } from "../src/local/project-root.js";

const check = process.argv.includes("--check");
const rootArg = process.argv.indexOf("--root");
const root = rootArg > 0 ? (process.argv[rootArg + 1] ?? projectRoot) : projectRoot;

async function main(): Promise<boolean> {
  const plan = planMigrations(root);
  const chainProblems = plan.problems.filter((p) => p.file.startsWith("migrations/"));
  for (const p of chainProblems) console.error(`${p.file}: ${p.message}`);
  if (chainProblems.length > 0) return false;
  const server = await startScratchServer();
  let chain: Awaited<ReturnType<typeof applyChain>>;
  try {
    chain = await applyChain(server, plan, { withPending: false, dump: true });
  } finally {
    await server.stop();
  }
  for (const p of chain.problems) console.error(`${p.file}: ${p.message}`);
  if (chain.schema === null) return false;
  const path = join(root, SCHEMA_DUMP_FILE);
  const have = existsSync(path) ? readFileSync(path, "utf8") : null;
  if (have === chain.schema) {
    console.log(`${SCHEMA_DUMP_FILE} is up to date (${server.origin})`);
    return true;
  }
  if (check) {
    console.error(
      `${SCHEMA_DUMP_FILE}: ${have === null ? "missing" : `is not the schema the migrations leave (${firstDifference(have, chain.schema)})`}; run npm run db:dump and commit it`,
    );
    return false;
  }
  writeFileSync(path, chain.schema);
  console.log(`wrote ${SCHEMA_DUMP_FILE} (${server.origin})`);
  return true;
}

try {
  process.exitCode = (await main()) ? 0 : 1;
} catch (e) {
  console.error(`db:dump: ${(e as Error).message}`);
  process.exitCode = 1;
}
