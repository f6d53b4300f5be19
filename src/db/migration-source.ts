// The migration builder's model (scripts/build-migrations.ts, docs/migrations.md). Migrations are
// written in migrations/src/ with `-- #include sql/<file>.sql` lines; graphile-migrate 1.4.1 has no
// include, so a migration is expanded once, when it is first built, into migrations/committed/
// with graphile-migrate's `--! Previous` / `--! Hash` chain. From then on the committed file is
// history: it is never expanded again (deployed databases have applied it and verify its hash), so
// a later change of a sql/ file ships as a new migration that includes the file again.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { projectRoot } from "./migrate.js";
import { extractSummary, stripSummary } from "./migration-summary.js";

const require = createRequire(import.meta.url);
// graphile-migrate's own parser and hash, so the chain is checked exactly as `migrate` checks it.
const gmHash = require("graphile-migrate/dist/hash") as {
  calculateHash(body: string, previousHash: string | null): string;
};
const gmMigration = require("graphile-migrate/dist/migration") as {
  parseMigrationText(
    fullPath: string,
    contents: string,
    strict?: boolean,
  ): { headers: Record<string, string | null>; body: string };
};

// graphile-migrate's `commit` writes 000007.sql or 000007-message.sql; the builder writes the latter.
const FILENAME = /^\d{6}(-[a-z0-9-]+)?\.sql$/;
const INCLUDE = /^-- #include (sql\/[a-z0-9_]+\.sql)$/gm;
const INCLUDED_BLOCK = /^-- >>> (sql\/[a-z0-9_]+\.sql) \(included\)\n([\s\S]*?)\n-- <<< \1$/gm;

/**
 * The last migration built without a generated summary. 000001–000027 were released before the
 * builder wrote summaries and are frozen byte for byte; every later migration opens with one
 * (src/db/migration-summary.ts).
 */
const LAST_WITHOUT_SUMMARY = 27;

/** True for a migration file whose committed form must open with a generated summary. */
export function needsSummary(filename: string): boolean {
  return Number(filename.slice(0, 6)) > LAST_WITHOUT_SUMMARY;
}

/** A migration file of migrations/committed/, as graphile-migrate reads it. */
export interface CommittedMigration {
  filename: string;
  previous: string | null;
  hash: string;
  message: string | null;
  body: string;
  text: string;
  /** sql/ file -> the text this migration applied (the block between its include markers). */
  includes: Map<string, string>;
}

/** A migration of migrations/src/ that has no committed file yet, expanded with today's sql/. */
export interface PendingMigration {
  filename: string;
  /** The expanded source, without a summary: what the migration runs. */
  body: string;
  /** Hash and text as committed without a summary (the builder adds one and hashes again). */
  hash: string;
  text: string;
  includes: string[];
}

/** Something a DBA or developer has to fix; `file` names the file to look at. */
export interface Problem {
  file: string;
  message: string;
}

export interface MigrationPlan {
  committed: CommittedMigration[];
  pending: PendingMigration[];
  problems: Problem[];
}

function list(dir: string): string[] {
  return existsSync(dir)
    ? readdirSync(dir)
        .filter((f) => f.endsWith(".sql"))
        .sort()
    : [];
}

function expandIncludes(root: string, text: string): { text: string; includes: string[] } {
  const includes: string[] = [];
  const expanded = text.replace(INCLUDE, (_line, rel: string) => {
    includes.push(rel);
    const body = readFileSync(join(root, rel), "utf8").trim();
    return `-- >>> ${rel} (included)\n${body}\n-- <<< ${rel}`;
  });
  return { text: expanded, includes };
}

/** The committed body with each included block folded back into its include line. */
function foldIncludes(body: string): string {
  return body.replace(INCLUDED_BLOCK, (_block, rel: string) => `-- #include ${rel}`);
}

/** A committed migration's text: graphile-migrate's header lines, a blank line, the body. */
export function serialize(filename: string, body: string, previous: string | null): string {
  const hash = gmHash.calculateHash(body, previous);
  const message = filename.replace(/^\d{6}-/, "").replace(/\.sql$/, "");
  const header = [`--! Previous: ${previous ?? "-"}`, `--! Hash: ${hash}`, `--! Message: ${message}`];
  return `${header.join("\n")}\n\n${body}`;
}

/** Reads and verifies migrations/committed/: names, headers, the hash chain, the frozen sources. */
function readCommitted(root: string, problems: Problem[]): CommittedMigration[] {
  const dir = join(root, "migrations", "committed");
  const srcDir = join(root, "migrations", "src");
  const out: CommittedMigration[] = [];
  let previous: string | null = null;
  for (const f of list(dir)) {
    const file = `migrations/committed/${f}`;
    if (!FILENAME.test(f)) {
      problems.push({ file, message: "not a migration file name (NNNNNN-words.sql)" });
      continue;
    }
    const text = readFileSync(join(dir, f), "utf8");
    let parsed: ReturnType<typeof gmMigration.parseMigrationText>;
    try {
      parsed = gmMigration.parseMigrationText(join(dir, f), text);
    } catch (e) {
      problems.push({ file, message: (e as Error).message });
      continue;
    }
    const { headers, body } = parsed;
    const prev = headers.Previous && headers.Previous !== "-" ? headers.Previous : null;
    const hash = headers.Hash ?? "";
    if (prev !== previous) {
      problems.push({
        file,
        message: `--! Previous is ${prev ?? "-"} but the migration before it has hash ${previous ?? "-"}: the chain is broken (a committed migration was edited, removed or renumbered)`,
      });
    }
    const expected = gmHash.calculateHash(body, prev);
    if (hash !== expected) {
      problems.push({
        file,
        message: `--! Hash does not match the body (${expected}): the committed migration was edited after it was built; restore it from version control`,
      });
    }
    const includes = new Map<string, string>();
    for (const m of body.matchAll(INCLUDED_BLOCK)) includes.set(m[1] as string, (m[2] as string).trim());
    // The source of a committed migration is frozen as well: with the included text taken from the
    // committed file itself, it must expand to exactly that file. A migration committed with
    // graphile-migrate's own `commit` (from current.sql) includes nothing and needs no source.
    const srcPath = join(srcDir, f);
    if (!existsSync(srcPath)) {
      if (includes.size > 0) {
        problems.push({
          file: `migrations/src/${f}`,
          message: "the source of this committed migration is missing",
        });
      }
    } else if (readFileSync(srcPath, "utf8").trim() !== foldIncludes(stripSummary(body)).trim()) {
      problems.push({
        file: `migrations/src/${f}`,
        message:
          "differs from the committed migration it was built into; committed migrations never change: restore this file and put the change in a new migration",
      });
    }
    const summary = extractSummary(body);
    if (needsSummary(f) && summary === null) {
      problems.push({
        file,
        message:
          "has no generated summary of what it changes (every migration after 000027 has one): it was not written by npm run db:build; while it is unreleased, delete it and run npm run db:build",
      });
    } else if (!needsSummary(f) && summary !== null) {
      problems.push({
        file,
        message: "migrations up to 000027 carry no generated summary; restore it from version control",
      });
    }
    out.push({ filename: f, previous: prev, hash, message: headers.Message ?? null, body, text, includes });
    previous = hash;
  }
  return out;
}

/** Expands the migrations of migrations/src/ that have no committed file yet, chained after the last. */
function expandPending(
  root: string,
  committed: CommittedMigration[],
  problems: Problem[],
): PendingMigration[] {
  const srcDir = join(root, "migrations", "src");
  const done = new Set(committed.map((m) => m.filename));
  const last = committed.at(-1);
  let previous = last?.hash ?? null;
  const out: PendingMigration[] = [];
  for (const f of list(srcDir)) {
    if (done.has(f)) continue;
    const file = `migrations/src/${f}`;
    if (!FILENAME.test(f)) {
      problems.push({ file, message: "not a migration file name (NNNNNN-words.sql)" });
      continue;
    }
    if (last && f.localeCompare(last.filename, "en") < 0) {
      problems.push({
        file,
        message: `is numbered before the last committed migration ${last.filename}; new migrations go after it`,
      });
      continue;
    }
    const { text, includes } = expandIncludes(root, readFileSync(join(srcDir, f), "utf8"));
    const body = `${text.trim()}\n`;
    const full = serialize(f, body, previous);
    const hash = gmHash.calculateHash(body, previous);
    out.push({ filename: f, body, hash, text: full, includes });
    previous = hash;
  }
  return out;
}

/**
 * Every sql/ file must be what the newest migration including it applied, unless a pending
 * migration includes it again (it will apply today's text). A file no migration includes is never
 * applied at all.
 */
function checkDrift(root: string, committed: CommittedMigration[], pending: PendingMigration[]): Problem[] {
  const problems: Problem[] = [];
  const pendingIncludes = new Set(pending.flatMap((p) => p.includes));
  for (const f of list(join(root, "sql"))) {
    const rel = `sql/${f}`;
    if (pendingIncludes.has(rel)) continue;
    const newest = [...committed].reverse().find((m) => m.includes.has(rel));
    if (!newest) {
      problems.push({
        file: rel,
        message: `no migration includes it, so no database has it; add \`-- #include ${rel}\` to a new migration in migrations/src/ and run npm run db:build`,
      });
      continue;
    }
    const current = readFileSync(join(root, rel), "utf8").trim();
    if (newest.includes.get(rel) !== current) {
      problems.push({
        file: rel,
        message: `differs from what migration ${newest.filename} applied, and no pending migration includes it; add a new migration in migrations/src/ with \`-- #include ${rel}\` and run npm run db:build`,
      });
    }
  }
  return problems;
}

/** The committed chain, the migrations still to build, and every problem found (none: all good). */
export function planMigrations(root: string = projectRoot): MigrationPlan {
  const problems: Problem[] = [];
  const committed = readCommitted(root, problems);
  const pending = expandPending(root, committed, problems);
  problems.push(...checkDrift(root, committed, pending));
  return { committed, pending, problems };
}

/**
 * The sql/ files in the order the migrations last applied them (each at its newest include):
 * re-applying them in this order on a migrated database must change nothing
 * (test/integration/migrations-drift.test.ts).
 */
export function sqlApplyOrder(root: string = projectRoot): string[] {
  const { committed, pending } = planMigrations(root);
  const order = [...committed.flatMap((m) => [...m.includes.keys()]), ...pending.flatMap((p) => p.includes)];
  return order.filter((rel, i) => order.lastIndexOf(rel) === i);
}
