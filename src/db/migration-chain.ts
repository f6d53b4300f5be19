// The migration chain applied to a scratch database (src/db/scratch.ts), for what the builder cannot
// see in the files alone: each new migration's summary (the catalogue before and after it) and the
// schema dump the whole chain leaves (migrations/schema.sql). Used by `npm run db:build`,
// `npm run db:check` and `npm run db:dump` (scripts/build-migrations.ts, scripts/schema-dump.ts).
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Logger as GraphileLogger } from "@graphile/logger";
import { migrate as gmMigrate } from "graphile-migrate";
import pg from "pg";
import { readCatalogue } from "./catalogue.js";
import { migrateDatabase, releaseMigratePools, WORKER_GRANTS_FILE } from "./migrate.js";
import { type MigrationPlan, needsSummary, type Problem, serialize } from "./migration-source.js";
import { diffCatalogues, renderSummary, stripSummary } from "./migration-summary.js";
import { dumpSchema } from "./schema-dump.js";
import { type ScratchServer, withScratchDatabase } from "./scratch.js";
import { withSearchPath } from "./search-path.js";

export interface ChainResult {
  /** Migration file name -> its summary, generated, for every migration after 000027 that applied. */
  summaries: Map<string, string>;
  /** The normalised schema dump after the whole chain; null when not asked for or a migration failed. */
  schema: string | null;
  /** A migration that does not apply on the chain before it. */
  problems: Problem[];
}

const quiet = new GraphileLogger(() => () => undefined);

function range(first: string | undefined, last: string | undefined): string {
  if (!first || !last) return "(none)";
  const a = first.slice(0, 6);
  const b = last.slice(0, 6);
  return a === b ? a : `${a}-${b}`;
}

/**
 * Applies the committed migrations (and, with `withPending`, the pending ones) of `plan` to a new
 * database on `server`, one graphile-migrate run per migration from 000028 on, reading the catalogue
 * around each. The database is dropped afterwards.
 */
export async function applyChain(
  server: ScratchServer,
  plan: MigrationPlan,
  opts: { withPending: boolean; dump: boolean },
): Promise<ChainResult> {
  const base = plan.committed.filter((m) => !needsSummary(m.filename));
  const later = [
    ...plan.committed
      .filter((m) => needsSummary(m.filename))
      .map((m) => ({
        filename: m.filename,
        body: stripSummary(m.body),
        file: `migrations/committed/${m.filename}`,
      })),
    ...(opts.withPending
      ? plan.pending.map((m) => ({
          filename: m.filename,
          body: m.body,
          file: `migrations/src/${m.filename}`,
        }))
      : []),
  ];
  const folder = mkdtempSync(join(tmpdir(), "bitrix-sync-chain-"));
  const committedDir = join(folder, "committed");
  mkdirSync(committedDir);
  const result: ChainResult = { summaries: new Map(), schema: null, problems: [] };
  try {
    await withScratchDatabase(server, async (url) => {
      // The released chain as it is (its own hashes), then graphile-worker's grants as every
      // migration run ends (docs/migrations.md): the state a new migration meets in production.
      for (const m of base) writeFileSync(join(committedDir, m.filename), m.text);
      await migrateDatabase(url, undefined, folder);
      const client = new pg.Client({ connectionString: withSearchPath(url) });
      await client.connect();
      try {
        let previous = base.at(-1)?.hash ?? null;
        let lastName = base.at(-1)?.filename;
        for (const m of later) {
          const before = await readCatalogue(client);
          // Chained on the scratch copy's own hashes: the summary is a comment, the SQL is the same.
          const text = serialize(m.filename, m.body, previous);
          writeFileSync(join(committedDir, m.filename), text);
          try {
            await gmMigrate({ connectionString: url, migrationsFolder: folder, logger: quiet });
          } catch (e) {
            result.problems.push({
              file: m.file,
              message: `does not apply on migrations ${range(plan.committed[0]?.filename, lastName)}: ${(e as Error).message}`,
            });
            return;
          } finally {
            releaseMigratePools();
          }
          const after = await readCatalogue(client);
          result.summaries.set(
            m.filename,
            renderSummary(diffCatalogues(before, after), range(plan.committed[0]?.filename, lastName)),
          );
          previous = /^--! Hash: (\S+)$/m.exec(text)?.[1] ?? null;
          lastName = m.filename;
        }
        if (later.length > 0) await client.query(readFileSync(WORKER_GRANTS_FILE, "utf8"));
      } finally {
        await client.end();
      }
      if (opts.dump) result.schema = await dumpSchema(url);
    });
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
  return result;
}

/** Where two texts first differ, for a one-line message: the line number and both lines, shortened. */
export function firstDifference(have: string, want: string): string {
  const a = have.split("\n");
  const b = want.split("\n");
  const n = Math.max(a.length, b.length);
  const cut = (s: string | undefined) =>
    s === undefined ? "(end of file)" : JSON.stringify(s.length > 80 ? `${s.slice(0, 79)}…` : s);
  for (let i = 0; i < n; i++)
    if (a[i] !== b[i]) return `first difference at line ${i + 1}: has ${cut(a[i])}, expected ${cut(b[i])}`;
  return "no difference";
}
