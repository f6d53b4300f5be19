// An earlier release of the project as a runnable checkout: `git archive <sha>` unpacked under
// .drill-cache/<sha> (gitignored) with its own `npm ci`, kept for the next run. And the check of the
// frozen migrations: every migration the earlier release committed is in this one byte for byte.
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { projectRoot } from "../../src/db/migrate.js";

const run = promisify(execFile);

export async function resolveRef(ref: string): Promise<string> {
  const { stdout } = await run("git", ["rev-parse", "--verify", `${ref}^{commit}`], { cwd: projectRoot });
  return stdout.trim();
}

export const CACHE_DIR = process.env.DRILL_CACHE_DIR ?? join(projectRoot, ".drill-cache");

/**
 * The checkout of `sha`, installed: from the cache when an earlier run left it complete (the
 * `.installed` marker), otherwise unpacked and installed now (`npm ci`, about half a minute).
 */
export async function releaseCheckout(
  sha: string,
  say: (line: string) => void,
): Promise<{ dir: string; cached: boolean; ms: number }> {
  const t0 = Date.now();
  const dir = join(CACHE_DIR, sha);
  if (existsSync(join(dir, ".installed"))) return { dir, cached: true, ms: Date.now() - t0 };
  mkdirSync(CACHE_DIR, { recursive: true });
  const tmp = `${dir}.${process.pid}.tmp`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  say(`unpacking ${sha.slice(0, 12)} (git archive) into ${tmp}`);
  await run("sh", ["-c", `git archive --format=tar ${sha} | tar -x -C "${tmp}"`], {
    cwd: projectRoot,
    maxBuffer: 1 << 26,
  });
  say("npm ci of the earlier release");
  await run("npm", ["ci", "--no-audit", "--no-fund"], { cwd: tmp, maxBuffer: 1 << 26 });
  writeFileSync(join(tmp, ".installed"), `${new Date().toISOString()}\n`);
  rmSync(dir, { recursive: true, force: true });
  try {
    renameSync(tmp, dir);
  } catch {
    // Another run installed it meanwhile.
    rmSync(tmp, { recursive: true, force: true });
  }
  return { dir, cached: false, ms: Date.now() - t0 };
}

/**
 * Every committed migration of `sha` compared with this checkout's file of the same name, byte for
 * byte: a released migration is never edited, renamed or removed. Returns the violations and how
 * many files were compared.
 */
export async function frozenMigrations(sha: string): Promise<{ compared: string[]; violations: string[] }> {
  const { stdout } = await run("git", ["ls-tree", "--name-only", sha, "migrations/committed/"], {
    cwd: projectRoot,
  });
  const theirs = stdout
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l.endsWith(".sql"));
  const here = new Set(readdirSync(join(projectRoot, "migrations", "committed")));
  const violations: string[] = [];
  const compared: string[] = [];
  for (const path of theirs) {
    const name = path.split("/").at(-1) as string;
    if (!here.has(name)) {
      violations.push(`${name} of the earlier release is missing here`);
      continue;
    }
    const { stdout: old } = await run("git", ["show", `${sha}:${path}`], {
      cwd: projectRoot,
      encoding: "buffer",
      maxBuffer: 1 << 26,
    });
    const now = readFileSync(join(projectRoot, "migrations", "committed", name));
    if (!Buffer.from(old).equals(now)) violations.push(`${name} differs from the earlier release's`);
    compared.push(name);
  }
  return { compared, violations };
}

/** The `--! Hash:` of the newest committed migration of a checkout. */
export function newestHash(dir: string): string {
  const folder = join(dir, "migrations", "committed");
  const last = readdirSync(folder)
    .filter((f) => f.endsWith(".sql"))
    .sort()
    .at(-1);
  if (!last) throw new Error(`no committed migration in ${folder}`);
  const m = /^--! Hash: (\S+)$/m.exec(readFileSync(join(folder, last), "utf8"));
  if (!m?.[1]) throw new Error(`${last} has no hash header`);
  return m[1];
}
