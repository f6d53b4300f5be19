// The migration chain applied to a scratch database (src/db/scratch.ts), for what the builder cannot
// see in the files alone: each new migration's summary (the catalogue before and after it), the
// schema dump the whole chain leaves (migrations/schema.sql), and whether sql/ holds something no
// migration applied yet (every sql/ file applied on top, in the manifest's order, changes nothing).
// Used by `npm run db:build`, `npm run db:check` and `npm run db:dump` (scripts/build-migrations.ts,
// scripts/schema-dump.ts).
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Logger as GraphileLogger } from "@graphile/logger";
import { migrate as gmMigrate } from "graphile-migrate";
import pg from "pg";
import { type Catalogue, type CatalogueEntry, readCatalogue } from "./catalogue.js";
import { MIGRATION_SETTINGS, migrateDatabase, releaseMigratePools, WORKER_GRANTS_FILE } from "./migrate.js";
import {
  definitionIndex,
  MANIFEST_FILE,
  readSqlFiles,
  type SqlFile,
  sqlApplyOrder,
} from "./migration-layout.js";
import { type MigrationPlan, needsSummary, type Problem, serialize } from "./migration-source.js";
import { diffCatalogues, renderChange, renderSummary, stripSummary } from "./migration-summary.js";
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
  /** With `sqlDrift`: what applying sql/ on top of the chain would change, by file (none: in step). */
  drift: Problem[];
}

/** The catalogues kept as rows whose content the sql/ drift check compares (a count hides an edit). */
export const ROW_CATALOGUES = ["bitrix_sync.settings", "bitrix_sync.privilege_decisions"] as const;

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
  opts: { withPending: boolean; dump: boolean; sqlDrift?: { root: string } },
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
  const result: ChainResult = { summaries: new Map(), schema: null, problems: [], drift: [] };
  try {
    await withScratchDatabase(server, async (url) => {
      // The released chain as it is (its own hashes), then graphile-worker's grants as every
      // migration run ends (docs/migrations.md): the state a new migration meets in production.
      for (const m of base) writeFileSync(join(committedDir, m.filename), m.text);
      await migrateDatabase(url, undefined, folder);
      const client = new pg.Client({ connectionString: withSearchPath(url) });
      await client.connect();
      // The catalogue reads are planned as expensive: jit off, or a jit-on server compiles them.
      await client.query("set jit = off");
      try {
        let previous = base.at(-1)?.hash ?? null;
        let lastName = base.at(-1)?.filename;
        for (const m of later) {
          const before = await readCatalogue(client);
          // Chained on the scratch copy's own hashes: the summary is a comment, the SQL is the same.
          const text = serialize(m.filename, m.body, previous);
          writeFileSync(join(committedDir, m.filename), text);
          try {
            // With the settings migrateDatabase applies it with in production.
            await gmMigrate({
              connectionString: url,
              migrationsFolder: folder,
              logger: quiet,
              pgSettings: MIGRATION_SETTINGS,
            });
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
      if (opts.sqlDrift) result.drift = await sqlDrift(url, opts.sqlDrift.root);
    });
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
  return result;
}

/**
 * What sql/ holds that the database `url` (the chain applied) does not: every file of the manifest
 * applied in order, inside a transaction that is rolled back, and the catalogues before and after
 * compared (row catalogues by content). Each difference is named with the sql/ files that define the
 * object. Also: a function, view or trigger of the project's schemas that no sql/ file defines.
 */
async function sqlDrift(url: string, root: string): Promise<Problem[]> {
  const files = readSqlFiles(root);
  const index = definitionIndex(files);
  const client = new pg.Client({ connectionString: withSearchPath(url) });
  await client.connect();
  await client.query("set jit = off");
  const problems: Problem[] = [];
  try {
    const before = await readCatalogue(client, { rowsOf: ROW_CATALOGUES });
    await client.query("begin");
    let after: Catalogue | null = null;
    try {
      for (const rel of sqlApplyOrder(root)) {
        const f = files.find((x) => x.path === rel);
        if (!f) continue;
        try {
          await client.query(f.text);
        } catch (e) {
          problems.push({
            file: rel,
            message: `does not apply on top of the committed migrations (in ${MANIFEST_FILE} order): ${(e as Error).message}`,
          });
          return problems;
        }
      }
      after = await readCatalogue(client, { rowsOf: ROW_CATALOGUES });
    } finally {
      await client.query("rollback");
    }
    const counted = new Set<string>(ROW_CATALOGUES);
    for (const c of diffCatalogues(before, after)) {
      const e = (c.after ?? c.before) as CatalogueEntry;
      if (e.kind === "rows" && counted.has(e.name)) continue;
      const where = filesFor(e, files, index);
      const what =
        e.kind === "row" && c.before && c.after ? rowChange(c.before, c.after) : renderChange(c)[0]?.trim();
      const verb = { creates: "adds", replaces: "changes", drops: "removes" }[c.verb];
      for (const file of where.length > 0 ? where : ["sql/"])
        problems.push({
          file,
          message: `${verb} what no migration applied yet: ${what}; add a migration in migrations/src/ that includes ${file === "sql/" ? "the files that define it" : `this file (-- #include ${file})`} and ends with select bitrix_sync.apply_privileges(), then run npm run db:build`,
        });
    }
    for (const e of before.values()) {
      if (!["function", "view", "trigger"].includes(e.kind)) continue;
      if (!/^(?:\S+ on )?(?:bitrix_sync|han_app)\./.test(e.name)) continue;
      if (filesFor(e, files, index).length > 0) continue;
      problems.push({
        file: "sql/",
        message: `no sql/ file defines ${e.kind} ${e.name}, which the migrations create: sql/ shows every function, view and trigger as it is today; add it to the file of its family (or drop it in a migration)`,
      });
    }
  } finally {
    await client.end();
  }
  return problems;
}

/** A catalogue row that changed, as its fields before and after: `row T key: field "a" -> "b"`. */
function rowChange(before: CatalogueEntry, after: CatalogueEntry): string {
  const a = JSON.parse(before.def) as Record<string, unknown>;
  const b = JSON.parse(after.def) as Record<string, unknown>;
  const fields = [...new Set([...Object.keys(a), ...Object.keys(b)])].filter(
    (k) => JSON.stringify(a[k]) !== JSON.stringify(b[k]),
  );
  return `row ${after.name}: ${fields.map((k) => `${k} ${JSON.stringify(a[k])} -> ${JSON.stringify(b[k])}`).join(", ")}`;
}

/** The object names a catalogue entry is about, in the terms of definitionIndex(). */
function namesOf(e: CatalogueEntry): string[] {
  const bare = (s: string) => s.replace(/\(.*$/, "").toLowerCase();
  switch (e.kind) {
    case "function":
    case "view":
    case "type":
    case "index":
      return [`${e.kind} ${bare(e.name)}`];
    case "trigger":
      return [`trigger ${e.name.toLowerCase()}`];
    case "row": {
      const [table, ...key] = e.name.split(" ");
      if (table === "bitrix_sync.settings") return [`setting ${key.join(" ")}`];
      return [`decision ${key[0]} ${bare(key.slice(1).join(" "))}`];
    }
    case "grant": {
      const m = /^(\w+) (.+) to \S+$/.exec(e.name);
      if (!m) return [];
      const kind = m[1] as string;
      const name = bare(m[2] as string);
      if (kind === "column") return [`decision table ${name.replace(/\.[^.]+$/, "")}`];
      return [`decision ${kind} ${name}`, `${kind === "procedure" ? "function" : kind} ${name}`];
    }
    case "comment": {
      const m = /^(function|view|type|index|trigger|table column|table|schema|sequence) (.+)$/.exec(e.name);
      if (!m) return [];
      if (m[1] === "trigger") return [`trigger ${(m[2] as string).toLowerCase()}`];
      if (m[1] === "table column") return [];
      return [`${m[1]} ${bare(m[2] as string)}`];
    }
    default:
      return [];
  }
}

/** The sql/ files that define or decide what `e` is about, else those that name it at all. */
function filesFor(e: CatalogueEntry, files: SqlFile[], index: Map<string, Set<string>>): string[] {
  const names = namesOf(e);
  const hits = files.filter((f) => names.some((n) => index.get(f.path)?.has(n))).map((f) => f.path);
  if (hits.length > 0) return hits;
  const word = /(?:^|[ .])([a-z_][a-z0-9_]*)(?:\(|$| on )/i.exec(e.name)?.[1];
  if (!word) return [];
  const re = new RegExp(`\\b${word}\\b`);
  return files.filter((f) => re.test(f.text)).map((f) => f.path);
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
