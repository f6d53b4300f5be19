// `npm run db:ratio` (also run by .ci/run): does each new migration carry what changed, and not the
// files around it? For every migration after the last released one (migrations/released.sha256) it
// prints the migration's lines against the lines it changes: its statements that no migration before
// it applied verbatim, a changed definition counted in both versions (migrationChangedLines in
// src/db/migration-layout.ts). Read from the committed files alone, so rebuilding or renumbering a
// migration, or merging branches, does not move the figure. Aim at 3 or less; it prints, it never
// fails.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { migrationChangedLines } from "../src/db/migration-layout.js";
import { lastReleased, RELEASED_FILE } from "../src/db/migration-source.js";
import { stripSummary } from "../src/db/migration-summary.js";
import { projectRoot } from "../src/local/project-root.js";

const AIM = 3;

/** A committed migration's statements: without graphile-migrate's headers and the generated summary. */
function body(text: string): string {
  return stripSummary(text.replace(/^(--![^\n]*\n)+/, ""));
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
  console.log(
    `db:ratio: each migration after ${last.slice(0, 6)} against the lines it changes (aim <= ${AIM})`,
  );
  const bodies: string[] = [];
  for (const name of all) {
    const text = readFileSync(join(dir, name), "utf8");
    if (fresh.includes(name)) {
      const lines = text.split("\n").length - 1;
      const changed = migrationChangedLines(bodies, body(text));
      const ratio = lines / Math.max(changed, 1);
      console.log(
        `  ${name}: ${lines} lines / ${changed} lines changed = ${ratio.toFixed(2)}${ratio > AIM ? `, above ${AIM}: include the files that changed, not the files around them` : ""}`,
      );
    }
    bodies.push(body(text));
  }
}

main();
