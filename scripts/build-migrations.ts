// graphile-migrate 1.4.1 has no `--!include`, so migrations are written in migrations/src/ with lines
// `-- #include sql/<file>.sql` and this script expands them into migrations/committed/ with the
// `--! Previous` / `--! Hash` chain graphile-migrate verifies. Committed files that already exist
// must not change (they may be deployed): the script refuses unless --rewrite is given, which is
// only for migrations that never left a development machine.
//
//   node --import tsx scripts/build-migrations.ts          write new committed files
//   node --import tsx scripts/build-migrations.ts --check  exit 1 if committed/ is out of date
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { migrationsFolder } from "../src/db/migrate.js";
import { expandMigrations } from "../src/db/migration-source.js";

const check = process.argv.includes("--check");
const rewrite = process.argv.includes("--rewrite");
const committedDir = join(migrationsFolder, "committed");
let problems = 0;
for (const m of expandMigrations()) {
  const target = join(committedDir, m.filename);
  const existing = existsSync(target) ? readFileSync(target, "utf8") : null;
  if (existing === m.text) continue;
  if (check) {
    console.error(`${m.filename}: committed file differs from migrations/src (run npm run db:build)`);
    problems++;
  } else if (existing !== null && !rewrite) {
    console.error(`${m.filename}: committed already; refusing to change it. Add a new migration instead.`);
    problems++;
  } else {
    writeFileSync(target, m.text);
    console.log(`wrote ${m.filename}`);
  }
}
const known = new Set(expandMigrations().map((m) => m.filename));
for (const f of readdirSync(committedDir).filter((f) => f.endsWith(".sql"))) {
  if (!known.has(f)) {
    console.error(`${f}: committed file without a source in migrations/src`);
    problems++;
  }
}
process.exitCode = problems > 0 ? 1 : 0;
