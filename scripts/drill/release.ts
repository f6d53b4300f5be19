// An earlier release of the project as a runnable checkout: `git archive <sha>` unpacked under
// .drill-cache/<sha> (gitignored) with its own `npm ci`, kept for the next run. And the check of the
// frozen migrations: every migration the earlier release committed is in this one byte for byte.
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { projectRoot } from "../../src/local/project-root.js";

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

/** Runs a release's `npm run db:migrate` (its scripts/migrate.ts) against `url`. */
export async function migrateWith(
  dir: string,
  url: string,
): Promise<{ code: number | null; out: string; ms: number }> {
  const t0 = Date.now();
  const child = spawn(process.execPath, ["--import", "tsx", "scripts/migrate.ts"], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/tmp", MIGRATION_DATABASE_URL: url },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.on("data", (d: Buffer) => {
    out += d.toString("utf8");
  });
  child.stderr.on("data", (d: Buffer) => {
    out += d.toString("utf8");
  });
  const code = await new Promise<number | null>((resolve) => child.on("exit", (c) => resolve(c)));
  return { code, out, ms: Date.now() - t0 };
}

/**
 * The previous release: the newest commit whose migrations/committed/ holds exactly the released
 * migrations of migrations/released.sha256, byte for byte (this checkout's files of those names are
 * the released bytes: `npm run db:check` holds them to their SHA-256). Today 7ba6d95, the release
 * of 000035.
 */
export async function previousRelease(): Promise<string> {
  const names = readFileSync(join(projectRoot, "migrations", "released.sha256"), "utf8")
    .split("\n")
    .map((l) => l.trim().split(/\s+/)[1])
    .filter((p): p is string => p !== undefined && p !== "");
  const { stdout: blobs } = await run("git", ["hash-object", ...names], { cwd: projectRoot });
  const want = names
    .map((n, i) => `${blobs.split("\n")[i]} ${n}`)
    .sort()
    .join("\n");
  const { stdout: commits } = await run("git", ["rev-list", "HEAD", "--", "migrations/committed/"], {
    cwd: projectRoot,
    maxBuffer: 1 << 24,
  });
  for (const sha of commits.split("\n").filter((l) => l !== "")) {
    const { stdout } = await run("git", ["ls-tree", "-r", sha, "migrations/committed/"], {
      cwd: projectRoot,
    });
    const have = stdout
      .split("\n")
      .filter((l) => l !== "")
      .map((l) => {
        const [meta, path] = l.split("\t");
        return `${meta?.split(" ")[2]} ${path}`;
      })
      .sort()
      .join("\n");
    if (have === want) return sha;
  }
  throw new Error("no commit holds exactly the released migrations of migrations/released.sha256");
}
