// `npm run db:build` and `npm run db:check` (docs/migrations.md, migrations/README.md).
//
//   db:build  verifies migrations/committed/ (hash chain, frozen sources) and writes the migrations
//             of migrations/src/ that have no committed file yet, expanded with today's sql/ and
//             opened by a generated summary of what each changes; then rewrites migrations/schema.sql.
//             It never rewrites a committed file.
//   db:check  the same verification, and fails when a migration is not built yet, a summary does not
//             match what its migration changes, migrations/schema.sql is not what the chain leaves,
//             or sql/ holds something no migration applied yet.
//
// Verified from the files: the released migrations (migrations/released.sha256), the hash chain, the
// frozen sources, the layout of sql/ (src/db/migration-layout.ts). The summaries, the dump and the
// sql/ drift come from applying the chain to a scratch database: TEST_DATABASE_URL's server, else an
// embedded PostgreSQL (src/db/scratch.ts); the dump needs pg_dump 15. The sql/ drift: on top of the
// chain, every sql/ file in sql/manifest.txt order; any change of the catalogue is something sql/
// holds that no migration applied yet, named with the files that define it.
// `--root DIR` works on another tree (the builder's tests use a copy in a temporary folder).
// Both exit 1 with one line per problem, naming the file and what to do.
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { applyChain, firstDifference } from "../src/db/migration-chain.js";
import { planMigrations, serialize } from "../src/db/migration-source.js";
import { extractSummary } from "../src/db/migration-summary.js";
import { SCHEMA_DUMP_FILE } from "../src/db/schema-dump.js";
import { startScratchServer } from "../src/db/scratch.js";
import { projectRoot } from "../src/local/project-root.js";

const check = process.argv.includes("--check");
const rootArg = process.argv.indexOf("--root");
const root = rootArg > 0 ? (process.argv[rootArg + 1] ?? projectRoot) : projectRoot;

async function main(): Promise<boolean> {
  const plan = planMigrations(root);
  // A broken chain or an edited source is reported before anything is written or applied.
  const chainProblems = plan.problems.filter((p) => p.file.startsWith("migrations/"));
  const layoutProblems = plan.problems.filter((p) => !p.file.startsWith("migrations/"));
  for (const p of chainProblems) console.error(`${p.file}: ${p.message}`);
  if (chainProblems.length > 0) return false;
  // A layout problem (a file the manifest misses, a layer used upwards) is reported; the chain is
  // still applied, so the summaries and the dump are checked or written all the same.
  for (const p of layoutProblems) console.error(`${p.file}: ${p.message}`);
  let ok = layoutProblems.length === 0;
  if (check) {
    for (const m of plan.pending) {
      console.error(`migrations/src/${m.filename}: not built yet; run npm run db:build`);
      ok = false;
    }
  }

  const server = await startScratchServer();
  let chain: Awaited<ReturnType<typeof applyChain>>;
  try {
    chain = await applyChain(server, plan, {
      withPending: !check,
      dump: true,
      sqlDrift: layoutProblems.length === 0 ? { root } : undefined,
    });
  } finally {
    await server.stop();
  }
  for (const p of chain.problems) console.error(`${p.file}: ${p.message}`);
  if (chain.problems.length > 0) return false;
  for (const p of chain.drift) console.error(`${p.file}: ${p.message}`);
  if (chain.drift.length > 0) ok = false;

  // The committed summaries must be what the builder writes today.
  for (const m of plan.committed) {
    const want = chain.summaries.get(m.filename);
    if (want === undefined) continue;
    const have = extractSummary(m.body);
    if (have !== want) {
      console.error(
        `migrations/committed/${m.filename}: its summary is not what the migration changes (${firstDifference(have ?? "", want)}); the summary is generated: while the migration is unreleased, delete the committed file and run npm run db:build`,
      );
      ok = false;
    }
  }

  if (!check) {
    // Chained on the last committed hash; each summary changes the hash the next one links to.
    let previous = plan.committed.at(-1)?.hash ?? null;
    for (const m of plan.pending) {
      const summary = chain.summaries.get(m.filename) as string;
      const text = serialize(m.filename, `${summary}\n\n${m.body}`, previous);
      writeFileSync(join(root, "migrations", "committed", m.filename), text);
      console.log(`wrote migrations/committed/${m.filename}`);
      previous = /^--! Hash: (\S+)$/m.exec(text)?.[1] ?? null;
    }
  }

  const dumpPath = join(root, SCHEMA_DUMP_FILE);
  const have = existsSync(dumpPath) ? readFileSync(dumpPath, "utf8") : null;
  if (chain.schema !== null && have !== chain.schema) {
    if (check) {
      console.error(
        `${SCHEMA_DUMP_FILE}: ${have === null ? "missing" : `is not the schema the migrations leave (${firstDifference(have, chain.schema)})`}; run npm run db:dump and commit it`,
      );
      ok = false;
    } else {
      writeFileSync(dumpPath, chain.schema);
      console.log(`wrote ${SCHEMA_DUMP_FILE}`);
    }
  }

  if (check && ok)
    console.log(
      `db:check: ${plan.committed.length} committed migrations, their sources, summaries, sql/ and ${SCHEMA_DUMP_FILE} agree (applied on ${server.origin})`,
    );
  if (!check && plan.pending.length === 0 && ok)
    console.log("nothing to build: migrations/committed is up to date");
  return ok;
}

try {
  process.exitCode = (await main()) ? 0 : 1;
} catch (e) {
  console.error(`db:${check ? "check" : "build"}: ${(e as Error).message}`);
  process.exitCode = 1;
}
