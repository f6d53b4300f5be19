// The layout of sql/ (sql/README.md): a folder per family, every file in sql/manifest.txt, none over
// 300 lines, each function's privilege decision beside it, and layers that only use the folders
// listed before them. The same rules run in npm run db:check; here on the project's tree and on
// small trees made to break one rule each.
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import test from "ava";
import {
  crossFileCalls,
  layerProblems,
  layoutProblems,
  MAX_FILE_LINES,
  migrationChangedLines,
  readManifest,
  readSqlFiles,
  splitStatements,
  sqlFiles,
} from "../../../src/db/migration-layout.js";
import { projectRoot } from "../../../src/local/project-root.js";

/** A tree with only sql/ (and its manifest) written from `files`; removed after the test. */
function tree(t: { teardown(fn: () => void): void }, files: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), "bitrix-sync-layout-"));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, rel)), { recursive: true });
    writeFileSync(join(root, rel), text);
  }
  return root;
}

const fn = (name: string, body = "select 1") =>
  `create or replace function bitrix_sync.${name}() returns int language sql set search_path = pg_catalog, pg_temp as $$\n  ${body}\n$$;\ncomment on function bitrix_sync.${name}() is 'x';\n${decision(name)}\n`;
const decision = (name: string) =>
  `insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values\n  ('function', 'bitrix_sync.${name}()', array[]::text[], array[]::text[], array[]::text[], 'x')\non conflict (object_type, object_name) do update\n  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;`;

test("the project's sql/ keeps every rule: manifest, sizes, decisions beside their objects, layers", (t) => {
  t.deepEqual(layoutProblems(), []);
  const files = readSqlFiles();
  t.true(files.length >= 60, `only ${files.length} files in the manifest`);
  t.deepEqual(sqlFiles(), [...readManifest()].sort(), "the manifest lists exactly the files of sql/");
  for (const f of files) t.true(f.text.split("\n").length - 1 <= MAX_FILE_LINES, f.path);
  // The checker sees the calls between folders it judges (so an empty answer above means something).
  const calls = crossFileCalls(files);
  t.true(
    calls.some((c) => c.from.startsWith("sql/metrics/") && c.to.startsWith("sql/status/")),
    "metrics_snapshot reads the status views",
  );
  t.true(calls.length > 100, `only ${calls.length} calls between files found`);
  t.true(
    readFileSync(join(projectRoot, "sql", "README.md"), "utf8").includes("manifest.txt"),
    "sql/README.md says how the layers work",
  );
});

test("a lower layer that uses a function of a higher one is refused, naming both files and the function", (t) => {
  const root = tree(t, {
    "sql/manifest.txt": "low/a.sql\nhigh/b.sql\n",
    "sql/low/a.sql": fn("low_fn", "select bitrix_sync.high_fn()"),
    "sql/high/b.sql": fn("high_fn"),
  });
  const problems = layoutProblems(root);
  t.true(
    problems.some(
      (p) =>
        p.file === "sql/low/a.sql" &&
        p.message.includes(
          "function bitrix_sync.low_fn uses bitrix_sync.high_fn of sql/high/b.sql, a higher layer",
        ),
    ),
    JSON.stringify(problems),
  );
  // The other way round is the layering.
  const ok = tree(t, {
    "sql/manifest.txt": "high/b.sql\nlow/a.sql\n",
    "sql/low/a.sql": fn("low_fn", "select bitrix_sync.high_fn()"),
    "sql/high/b.sql": fn("high_fn"),
  });
  t.deepEqual(layoutProblems(ok), []);
});

test("folders that use each other are a cycle, named with the calls that make it", (t) => {
  const files = [
    { path: "sql/a/x.sql", text: fn("a_fn", "select bitrix_sync.b_fn()") },
    { path: "sql/b/y.sql", text: fn("b_fn", "select bitrix_sync.a_fn()") },
  ];
  const problems = layerProblems(files);
  const cycle = problems.find((p) => p.message.includes("use each other"));
  t.truthy(cycle, JSON.stringify(problems));
  t.regex(cycle?.message ?? "", /sql\/a\/x\.sql -> sql\/b\/y\.sql \(bitrix_sync\.b_fn\)/);
  t.regex(cycle?.message ?? "", /sql\/b\/y\.sql -> sql\/a\/x\.sql \(bitrix_sync\.a_fn\)/);
  // Calls inside one folder, comments and strings are no uses between layers.
  t.deepEqual(
    layerProblems([
      { path: "sql/a/x.sql", text: fn("a_fn", "select bitrix_sync.a_other() -- bitrix_sync.b_fn()") },
      { path: "sql/a/z.sql", text: fn("a_other", "select 'bitrix_sync.b_fn()'") },
      { path: "sql/b/y.sql", text: fn("b_fn", "select bitrix_sync.a_fn()") },
    ]),
    [],
  );
});

test("a file the manifest misses, one it lists twice or lacks, a folder listed apart, a long file, a second definition", (t) => {
  const long = `${fn("long_fn")}${"-- a line\n".repeat(MAX_FILE_LINES)}`;
  const root = tree(t, {
    "sql/manifest.txt": "a/x.sql\nb/y.sql\na/long.sql\na/x.sql\na/gone.sql\n",
    "sql/a/x.sql": fn("a_fn"),
    "sql/a/long.sql": long,
    "sql/b/y.sql": fn("a_fn"),
    "sql/b/orphan.sql": "select 1;\n",
  });
  const messages = layoutProblems(root).map((p) => `${p.file}: ${p.message}`);
  const has = (re: RegExp) =>
    t.true(
      messages.some((m) => re.test(m)),
      `${re}\n${messages.join("\n")}`,
    );
  has(/^sql\/b\/orphan\.sql: is not listed in sql\/manifest\.txt/);
  has(/^sql\/manifest\.txt: lists sql\/a\/x\.sql twice/);
  has(/^sql\/manifest\.txt: lists sql\/a\/gone\.sql, which does not exist/);
  has(/^sql\/manifest\.txt: lists sql\/a\/long\.sql apart from the other files of a\//);
  has(new RegExp(`^sql/a/long\\.sql: has \\d+ lines, more than ${MAX_FILE_LINES}`));
  has(/^sql\/b\/y\.sql: defines function bitrix_sync\.a_fn again \(also in sql\/a\/x\.sql\)/);
});

test("a function without its privilege decision beside it, or a decision of nothing, is named", (t) => {
  const bare = fn("bare").replace(/insert into[\s\S]*$/, "");
  const root = tree(t, {
    "sql/manifest.txt": "a/x.sql\na/y.sql\n",
    "sql/a/x.sql": bare,
    "sql/a/y.sql": `${decision("bare")}\n${decision("gone")}\n`,
  });
  const messages = layoutProblems(root).map((p) => `${p.file}: ${p.message}`);
  t.true(
    messages.some((m) =>
      m.startsWith(
        "sql/a/x.sql: defines function bitrix_sync.bare but its privilege decision stands in sql/a/y.sql",
      ),
    ),
    messages.join("\n"),
  );
  t.true(
    messages.some((m) =>
      m.startsWith("sql/a/y.sql: decides function bitrix_sync.gone, which no sql/ file defines"),
    ),
    messages.join("\n"),
  );
});

test("statements are split at semicolons outside strings, comments and dollar-quoted bodies", (t) => {
  const text = [
    "-- a comment; with a semicolon",
    "create function f() returns text language plpgsql as $body$",
    "begin return 'a;b' || $$c;d$$; end",
    "$body$;",
    "comment on function f() is 'it''s; fine';",
    "/* block; comment */ select 1;",
  ].join("\n");
  t.deepEqual(
    splitStatements(text).map((s) => s.text),
    [
      "create function f() returns text language plpgsql as $body$\nbegin return 'a;b' || $$c;d$$; end\n$body$;",
      "comment on function f() is 'it''s; fine';",
      "select 1;",
    ],
  );
});

test("the project's own tree copied without its manifest is refused with the fix", (t) => {
  const root = mkdtempSync(join(tmpdir(), "bitrix-sync-layout-"));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  cpSync(join(projectRoot, "sql"), join(root, "sql"), { recursive: true });
  rmSync(join(root, "sql", "manifest.txt"));
  t.deepEqual(
    layoutProblems(root).map((p) => p.file),
    ["sql/manifest.txt"],
  );
});

test("db:ratio's measure: what an earlier migration applied verbatim is no change, a changed body counts both versions", (t) => {
  const a = `-- file a\n${fn("one")}\n${fn("two")}`;
  const b = `-- file b\n${fn("three")}`;
  // Re-included unchanged, in another order and with other comments around it: nothing changed.
  t.is(migrationChangedLines([a, b], `-- again\n${fn("three")}\n-- moved\n${fn("two")}`), 0);
  // three()'s body changes: its create statement (3 lines) counts in both versions; its comment and
  // decision, the same as before, do not.
  const three2 = fn("three", "select 2");
  t.is(migrationChangedLines([a, b], three2), 6);
  // After that migration, the older body re-applied is a change again (against the newest one).
  t.is(migrationChangedLines([a, b, three2], fn("three", "select 3")), 6);
  // A new function with its comment and decision: every line of it, and nothing of an older one.
  t.is(migrationChangedLines([a, b], fn("four")), fn("four").trim().split("\n").length);
  // Nothing before it: everything.
  t.is(migrationChangedLines([], a), fn("one").trim().split("\n").length * 2);
});
