// Expands migrations/src/*.sql (with `-- #include sql/<file>.sql` lines) into graphile-migrate's
// committed format. See scripts/build-migrations.ts.
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { migrationsFolder, projectRoot } from "./migrate.js";

export interface BuiltMigration {
  filename: string;
  hash: string;
  text: string;
}

/** graphile-migrate's hash: sha1 over the previous hash, a newline and the trimmed body. */
function hashBody(body: string, previous: string | null): string {
  const digest = createHash("sha1")
    .update(`${`${previous ?? ""}\n${body.trim()}`.trim()}\n`)
    .digest("hex");
  return `sha1:${digest}`;
}

function expandIncludes(text: string): string {
  return text.replace(/^-- #include (\S+)$/gm, (_line, rel: string) => {
    const body = readFileSync(join(projectRoot, rel), "utf8").trim();
    return `-- >>> ${rel} (included)\n${body}\n-- <<< ${rel}`;
  });
}

/** Every migration of migrations/src, expanded, in order, with its header chain. */
export function expandMigrations(): BuiltMigration[] {
  const srcDir = join(migrationsFolder, "src");
  const files = readdirSync(srcDir)
    .filter((f) => /^\d{6}-[a-z0-9-]+\.sql$/.test(f))
    .sort();
  let previous: string | null = null;
  const out: BuiltMigration[] = [];
  for (const f of files) {
    const body = `${expandIncludes(readFileSync(join(srcDir, f), "utf8")).trim()}\n`;
    const hash = hashBody(body, previous);
    const message = f.replace(/^\d{6}-/, "").replace(/\.sql$/, "");
    const header = [`--! Previous: ${previous ?? "-"}`, `--! Hash: ${hash}`, `--! Message: ${message}`];
    out.push({ filename: f, hash, text: `${header.join("\n")}\n\n${body}` });
    previous = hash;
  }
  return out;
}
