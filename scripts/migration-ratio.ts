// `npm run db:ratio` (also run by .ci/run): does each new migration carry what changed, and not the
// files around it? For every migration after the last released one (migrations/released.sha256) it
// prints the migration's lines against the lines of sql/ that changed since the migration before it:
// from the commit that last wrote the previous migration (a migration is rebuilt until it is
// released) to the commit that last wrote this one, or the working tree while it has changes there.
// A line of sql/ counts as changed when the statement holding it is not in the other tree, wherever
// the file: moving or splitting files changes nothing, a changed function body changes its
// statement. Aim at 3 or less; it prints, it never fails. In a fresh clone CI has the history.
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { changedStatementLines, sqlFiles } from "../src/db/migration-layout.js";
import { lastReleased, RELEASED_FILE } from "../src/db/migration-source.js";
import { projectRoot } from "../src/local/project-root.js";

const AIM = 3;

function git(...args: string[]): string {
  return execFileSync("git", args, { cwd: projectRoot, encoding: "utf8", maxBuffer: 64 << 20 });
}

/** The commit that last wrote `path`, or null while it is not committed or has changes in the tree. */
function writtenIn(path: string): string | null {
  if (git("status", "--porcelain", "--", path).trim() !== "") return null;
  return git("log", "-1", "--format=%H", "--", path).trim() || null;
}

/** The text of every sql/ file at `commit` (null: the working tree). */
function sqlTexts(commit: string | null): string[] {
  const texts =
    commit === null
      ? sqlFiles(projectRoot).map((rel) => readFileSync(join(projectRoot, rel), "utf8"))
      : git("ls-tree", "-r", "--name-only", commit, "--", "sql")
          .split("\n")
          .filter((p) => p.endsWith(".sql"))
          .map((p) => git("show", `${commit}:${p}`));
  return texts;
}

/** Lines of sql/ as git diff counts them (added + deleted), for comparison; files moved count whole. */
function gitDiffLines(base: string, head: string | null): number {
  const out = git("diff", "--numstat", base, ...(head ? [head] : []), "--", "sql");
  return out
    .split("\n")
    .map((l) => l.split("\t"))
    .reduce((sum, [a, d]) => sum + (Number(a) || 0) + (Number(d) || 0), 0);
}

function main(): void {
  const last = lastReleased(projectRoot);
  if (!last) {
    console.log(`db:ratio: ${RELEASED_FILE} lists no released migration; nothing to measure`);
    return;
  }
  const dir = join(projectRoot, "migrations", "committed");
  const all = existsSync(dir)
    ? readdirSync(dir)
        .filter((f) => f.endsWith(".sql"))
        .sort()
    : [];
  const fresh = all.filter((f) => f > last);
  if (fresh.length === 0) {
    console.log(`db:ratio: no migration after ${last.slice(0, 6)}, the last released one`);
    return;
  }
  try {
    git("rev-parse", "--git-dir");
  } catch {
    console.log("db:ratio: no git history here; it needs the commits that added the migrations");
    return;
  }
  if (git("rev-parse", "--is-shallow-repository").trim() === "true") {
    console.log(
      "db:ratio: a shallow clone lacks the commits that wrote the migrations; fetch the history (git fetch --unshallow)",
    );
    return;
  }
  console.log(
    `db:ratio: each migration after ${last.slice(0, 6)} against the sql/ lines it changed (aim <= ${AIM})`,
  );
  for (const name of fresh) {
    const previous = all[all.indexOf(name) - 1] as string;
    const base = writtenIn(`migrations/committed/${previous}`);
    const head = writtenIn(`migrations/committed/${name}`);
    const lines = readFileSync(join(dir, name), "utf8").split("\n").length - 1;
    if (!base) {
      console.log(
        `  ${name}: ${lines} lines; ${previous} is not committed yet, so there is nothing to compare with`,
      );
      continue;
    }
    const changed = changedStatementLines(sqlTexts(base), sqlTexts(head));
    const ratio = lines / Math.max(changed, 1);
    console.log(
      `  ${name}: ${lines} lines / ${changed} lines of sql/ changed = ${ratio.toFixed(2)}${ratio > AIM ? `, above ${AIM}: include the files that changed, not the files around them` : ""}` +
        ` (since ${base.slice(0, 10)}, to ${head ? head.slice(0, 10) : "the working tree"}; git diff counts ${gitDiffLines(base, head)} lines, moves included)`,
    );
  }
}

main();
