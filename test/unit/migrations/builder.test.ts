// The migration builder as a DBA meets it after a release (docs/migrations.md): committed
// migrations are frozen (migrations/released.sha256 lists the released ones), a sql/ change ships in
// a new migration, and db:check names what is wrong.
import { execFile } from "node:child_process";
import {
  appendFileSync,
  cpSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import test from "ava";
import { lastReleased, planMigrations, serialize } from "../../../src/db/migration-source.js";
import { projectRoot } from "../../../src/local/project-root.js";

const run = promisify(execFile);

/** A copy of migrations/ and sql/ to play the DBA in; removed after the test. */
function sandboxTree(t: { teardown(fn: () => void): void }): string {
  const root = mkdtempSync(join(tmpdir(), "bitrix-sync-migrations-"));
  cpSync(join(projectRoot, "migrations"), join(root, "migrations"), { recursive: true });
  cpSync(join(projectRoot, "sql"), join(root, "sql"), { recursive: true });
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  return root;
}

function committedFiles(root: string): Map<string, string> {
  const dir = join(root, "migrations", "committed");
  return new Map(readdirSync(dir).map((f) => [f, readFileSync(join(dir, f), "utf8")]));
}

function nextNumber(root: string): string {
  const last = [...committedFiles(root).keys()].sort().at(-1) ?? "000000";
  return String(Number(last.slice(0, 6)) + 1).padStart(6, "0");
}

/** Runs the real script (npm run db:build / db:check) on `root`. */
async function builder(root: string, ...args: string[]): Promise<{ code: number; out: string }> {
  try {
    const r = await run(
      process.execPath,
      ["--import", "tsx", join(projectRoot, "scripts", "build-migrations.ts"), "--root", root, ...args],
      { cwd: projectRoot },
    );
    return { code: 0, out: r.stdout + r.stderr };
  } catch (e) {
    const x = e as { code: number; stdout: string; stderr: string };
    return { code: x.code, out: x.stdout + x.stderr };
  }
}

test("the project's own migrations: a valid chain, nothing pending, sql/ laid out by its rules", (t) => {
  const plan = planMigrations();
  t.deepEqual(plan.problems, []);
  t.deepEqual(plan.pending, []);
  t.true(plan.committed.length >= 6);
});

test("an edited committed migration breaks the hash chain and is reported, not rebuilt", async (t) => {
  const root = sandboxTree(t);
  const file = join(root, "migrations", "committed", "000003-contract.sql");
  writeFileSync(file, readFileSync(file, "utf8").replace("drop index if exists", "drop index  if exists"));
  const plan = planMigrations(root);
  t.true(
    plan.problems.some(
      (p) => p.file === "migrations/committed/000003-contract.sql" && /Hash does not match/.test(p.message),
    ),
  );
  const r = await builder(root);
  t.is(r.code, 1);
  t.regex(r.out, /000003-contract\.sql: --! Hash does not match the body/);
});

test("a removed or renumbered committed migration breaks the Previous link", (t) => {
  const root = sandboxTree(t);
  rmSync(join(root, "migrations", "committed", "000004-crm-client.sql"));
  rmSync(join(root, "migrations", "src", "000004-crm-client.sql"));
  const plan = planMigrations(root);
  t.true(
    plan.problems.some(
      (p) => p.file === "migrations/committed/000005-receivers.sql" && /chain is broken/.test(p.message),
    ),
  );
});

test("the source of a committed migration is frozen too", (t) => {
  const root = sandboxTree(t);
  appendFileSync(join(root, "migrations", "src", "000003-contract.sql"), "\nselect 1;\n");
  const plan = planMigrations(root);
  t.true(
    plan.problems.some(
      (p) =>
        p.file === "migrations/src/000003-contract.sql" &&
        /differs from the committed migration/.test(p.message),
    ),
  );
});

test("a new migration numbered before the last committed one is refused", (t) => {
  const root = sandboxTree(t);
  writeFileSync(join(root, "migrations", "src", "000004-sneaky.sql"), "select 1;\n");
  const plan = planMigrations(root);
  t.true(
    plan.problems.some(
      (p) => p.file === "migrations/src/000004-sneaky.sql" && /numbered before/.test(p.message),
    ),
  );
  t.deepEqual(plan.pending, []);
});

test("a sql/ file the manifest does not list is reported: no check would apply it", (t) => {
  const root = sandboxTree(t);
  writeFileSync(join(root, "sql", "common", "orphan.sql"), "select 1;\n");
  const plan = planMigrations(root);
  t.true(
    plan.problems.some(
      (p) => p.file === "sql/common/orphan.sql" && /is not listed in sql\/manifest\.txt/.test(p.message),
    ),
  );
});

test("the frozen sources are checked from the committed text: released migrations include files sql/ no longer has", (t) => {
  const root = sandboxTree(t);
  const plan = planMigrations(root);
  // 000028 included sql/commands.sql, which today is a folder of smaller files.
  const m28 = plan.committed.find((m) => m.filename.startsWith("000028"));
  t.true(m28?.includes.has("sql/commands.sql"));
  t.false(existsSync(join(root, "sql", "commands.sql")));
  // Without any sql/ at all, the chain and every source still verify.
  rmSync(join(root, "sql"), { recursive: true, force: true });
  const bare = planMigrations(root);
  t.deepEqual(
    bare.problems.filter((p) => p.file.startsWith("migrations/")),
    [],
  );
  t.true(bare.committed.length >= 32);
  // And an edited source is still caught.
  appendFileSync(join(root, "migrations", "src", m28?.filename ?? ""), "\n-- #include sql/commands.sql\n");
  t.true(
    planMigrations(root).problems.some(
      (p) =>
        p.file === `migrations/src/${m28?.filename}` &&
        /differs from the committed migration/.test(p.message),
    ),
  );
});

test("a new migration includes files of the folders, expanded between markers", (t) => {
  const root = sandboxTree(t);
  const name = `${nextNumber(root)}-small.sql`;
  writeFileSync(
    join(root, "migrations", "src", name),
    "set local lock_timeout = '10s';\n-- #include sql/cutover/cutover.sql\nselect bitrix_sync.apply_privileges();\n",
  );
  const plan = planMigrations(root);
  t.deepEqual(plan.problems, []);
  t.deepEqual(plan.pending[0]?.includes, ["sql/cutover/cutover.sql"]);
  t.regex(
    plan.pending[0]?.body ?? "",
    /^-- >>> sql\/cutover\/cutover\.sql \(included\)\n-- Cutover[\s\S]*\n-- <<< sql\/cutover\/cutover\.sql\nselect bitrix_sync\.apply_privileges\(\);$/m,
  );
});

test("migrations/released.sha256 is the list of released migrations: one changed or missing is refused with the fix", (t) => {
  const root = sandboxTree(t);
  const released = readFileSync(join(root, "migrations", "released.sha256"), "utf8");
  t.regex(released, /^[0-9a-f]{64} {2}migrations\/committed\/000035-[a-z-]+\.sql$/m);
  t.notRegex(released, /000036/);
  t.is(lastReleased(root)?.slice(0, 6), "000035");
  // The same bytes as graphile-migrate's chain: a comment changed is a new hash for the file.
  const file = join(root, "migrations", "committed", "000012-trace-context.sql");
  writeFileSync(file, `${readFileSync(file, "utf8")}\n`);
  rmSync(join(root, "migrations", "committed", "000013-least-privilege.sql"));
  const problems = planMigrations(root).problems;
  t.true(
    problems.some(
      (p) =>
        p.file === "migrations/committed/000012-trace-context.sql" &&
        /is released \(migrations\/released\.sha256\) but its bytes changed.*git checkout <release> --/.test(
          p.message,
        ),
    ),
    JSON.stringify(problems),
  );
  t.true(
    problems.some(
      (p) =>
        p.file === "migrations/committed/000013-least-privilege.sql" &&
        /is released .* but missing/.test(p.message),
    ),
  );
  rmSync(join(root, "migrations", "released.sha256"));
  t.true(planMigrations(root).problems.some((p) => p.file === "migrations/released.sha256"));
});

test("a migration after 000027 without its generated summary is refused: only db:build writes one", (t) => {
  const root = sandboxTree(t);
  const plan = planMigrations(root);
  const last = plan.committed.at(-1);
  if (!last) throw new Error("no committed migration");
  const name = `${nextNumber(root)}-by-hand.sql`;
  // Hash and chain are right; only the summary is missing.
  writeFileSync(join(root, "migrations", "committed", name), serialize(name, "select 1;\n", last.hash));
  t.true(
    planMigrations(root).problems.some(
      (p) => p.file === `migrations/committed/${name}` && /has no generated summary/.test(p.message),
    ),
  );
});
