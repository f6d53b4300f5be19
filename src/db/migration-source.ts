// The migration builder's model (scripts/build-migrations.ts, docs/migrations.md). Migrations are
// written in migrations/src/ with `-- #include sql/<path>.sql` lines; graphile-migrate 1.4.1 has no
// include, so a migration is expanded once, when it is first built, into migrations/committed/
// with graphile-migrate's `--! Previous` / `--! Hash` chain. From then on the committed file is
// history: it is never expanded again (deployed databases have applied it and verify its hash), so
// a later change of a sql/ file ships as a new migration that includes that file.
//
// Whether sql/ holds something no migration applied yet is not decided here from the text (files
// move and split): the builder applies the chain and then sql/ to a scratch database and compares
// the catalogues (src/db/migration-chain.ts). Here: the chain, the frozen sources, the list of
// released migrations (migrations/released.sha256) and the layout of sql/ (src/db/migration-layout.ts).
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { projectRoot } from "../local/project-root.js";
import { layoutProblems, type Problem } from "./migration-layout.js";
import { extractSummary, stripSummary } from "./migration-summary.js";

export { type Problem, sqlApplyOrder } from "./migration-layout.js";

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
// A path under sql/, folders included (sql/commands/claim.sql); released migrations name top-level
// files only (sql/commands.sql), which may no longer exist: their text is in the committed file.
const INCLUDE = /^-- #include (sql\/(?:[a-z0-9_]+\/)*[a-z0-9_]+\.sql)$/gm;
const INCLUDED_BLOCK =
  /^-- >>> (sql\/(?:[a-z0-9_]+\/)*[a-z0-9_]+\.sql) \(included\)\n([\s\S]*?)\n-- <<< \1$/gm;

/** The released migrations and their SHA-256, in `sha256sum` format (paths from the repository root). */
export const RELEASED_FILE = "migrations/released.sha256";

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

/** The released migrations as listed in migrations/released.sha256: path (from the root) and hash. */
export function releasedMigrations(root: string = projectRoot): { path: string; sha256: string }[] {
  const file = join(root, RELEASED_FILE);
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8")
    .split("\n")
    .map((l) => /^([0-9a-f]{64}) [ *](\S+)$/.exec(l.trim()))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => ({ sha256: m[1] as string, path: m[2] as string }));
}

/** The file name of the newest released migration (migrations/released.sha256), or null. */
export function lastReleased(root: string = projectRoot): string | null {
  const names = releasedMigrations(root)
    .map((r) => r.path.split("/").at(-1) as string)
    .sort();
  return names.at(-1) ?? null;
}

/** A released migration that is missing or whose bytes changed; the list itself missing. */
function checkReleased(root: string): Problem[] {
  const released = releasedMigrations(root);
  if (released.length === 0)
    return [
      {
        file: RELEASED_FILE,
        message:
          "missing or empty: it lists the released migrations with their SHA-256 (sha256sum format); restore it from version control",
      },
    ];
  const problems: Problem[] = [];
  for (const r of released) {
    const path = join(root, r.path);
    if (!existsSync(path)) {
      problems.push({
        file: r.path,
        message: `is released (${RELEASED_FILE}) but missing: databases have applied it; restore it from version control (git checkout <release> -- ${r.path})`,
      });
      continue;
    }
    const have = createHash("sha256").update(readFileSync(path)).digest("hex");
    if (have !== r.sha256)
      problems.push({
        file: r.path,
        message: `is released (${RELEASED_FILE}) but its bytes changed (sha256 ${have.slice(0, 12)}, released ${r.sha256.slice(0, 12)}): restore it (git checkout <release> -- ${r.path}) and put the change in a new migration`,
      });
  }
  return problems;
}

/** The committed chain, the migrations still to build, and every problem found (none: all good). */
export function planMigrations(root: string = projectRoot): MigrationPlan {
  const problems: Problem[] = checkReleased(root);
  const committed = readCommitted(root, problems);
  const pending = expandPending(root, committed, problems);
  problems.push(...layoutProblems(root));
  return { committed, pending, problems };
}
