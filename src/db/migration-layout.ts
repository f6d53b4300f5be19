// The layout of sql/ (sql/README.md): a folder per table or operation family, applied in the order of
// sql/manifest.txt, which is also the order of the layers: a folder's functions and views may use
// those of its own folder and of the folders listed before it, never of one listed after it. The
// migration builder applies the files in this order on top of the committed chain to find what sql/
// holds that no migration applied yet (src/db/migration-chain.ts); test/unit/migrations/layout.test.ts
// and npm run db:check hold the tree to the rules below.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, sep } from "node:path";
import { projectRoot } from "../local/project-root.js";

/** The list of sql/ files in the order they are applied, lowest layer first. */
export const MANIFEST_FILE = "sql/manifest.txt";

/** No sql/ file is longer than this: a file is a screenful or two of one concern. */
export const MAX_FILE_LINES = 300;

/** Something a DBA or developer has to fix; `file` names the file to look at. */
export interface Problem {
  file: string;
  message: string;
}

/** One SQL statement of a file and the offset where it starts. */
export interface Statement {
  text: string;
  start: number;
}

/**
 * The statements of `text`, each without the comments and blank lines around it, split at `;`
 * outside string literals, quoted identifiers, comments and dollar-quoted bodies.
 */
export function splitStatements(text: string): Statement[] {
  const out: Statement[] = [];
  const n = text.length;
  let i = 0;
  let start = -1;
  while (i < n) {
    const c = text[i] as string;
    if (c === "-" && text[i + 1] === "-") {
      const e = text.indexOf("\n", i);
      i = e < 0 ? n : e + 1;
      continue;
    }
    if (c === "/" && text[i + 1] === "*") {
      const e = text.indexOf("*/", i + 2);
      i = e < 0 ? n : e + 2;
      continue;
    }
    if (start < 0) {
      if (/\s/.test(c)) {
        i++;
        continue;
      }
      start = i;
    }
    if (c === "'" || c === '"') {
      // '' (or "") inside a literal is the quote itself: the scan just goes on past it.
      const e = text.indexOf(c, i + 1);
      i = e < 0 ? n : e + 1;
      continue;
    }
    if (c === "$") {
      const tag = /^\$(?:[A-Za-z_][A-Za-z_0-9]*)?\$/.exec(text.slice(i, i + 64))?.[0];
      if (tag) {
        const e = text.indexOf(tag, i + tag.length);
        i = e < 0 ? n : e + tag.length;
        continue;
      }
    }
    i++;
    if (c === ";") {
      out.push({ text: text.slice(start, i), start });
      start = -1;
    }
  }
  if (start >= 0 && text.slice(start).trim()) out.push({ text: text.slice(start).trimEnd(), start });
  return out;
}

/**
 * The lines of `body` (a migration's statements) that change what the migrations before it
 * (`previous`, their bodies in order) applied: a statement counts unless one of them applied it
 * verbatim, and a changed definition counts both versions (its lines, and those of the newest earlier
 * `create` statement that opened with the same first line, e.g. `create or replace function x(...)`). So a
 * file re-included unchanged counts nothing, wherever it moved, and nothing depends on git history.
 */
export function migrationChangedLines(previous: string[], body: string): number {
  const applied = new Set<string>();
  const newestByHead = new Map<string, string>();
  const head = (s: string) => (s.split("\n")[0] as string).trim();
  for (const b of previous)
    for (const st of splitStatements(b)) {
      const text = st.text.trim();
      applied.add(text);
      newestByHead.set(head(text), text);
    }
  let lines = 0;
  for (const st of splitStatements(body)) {
    const text = st.text.trim();
    if (applied.has(text)) continue;
    lines += text.split("\n").length;
    const before = /^create /i.test(head(text)) ? newestByHead.get(head(text)) : undefined;
    if (before !== undefined) lines += before.split("\n").length;
  }
  return lines;
}

/** A statement with its comments and string literals blanked out: what is left names objects. */
function codeOnly(stmt: string): string {
  return stmt.replace(/--[^\n]*|'(?:[^']|'')*'/g, " ");
}

/** Every .sql file under sql/ of `root`, as `sql/<path>`, sorted. */
export function sqlFiles(root: string = projectRoot): string[] {
  const dir = join(root, "sql");
  if (!existsSync(dir)) return [];
  return (readdirSync(dir, { recursive: true }) as string[])
    .filter((f) => f.endsWith(".sql"))
    .map((f) => `sql/${f.split(sep).join("/")}`)
    .sort();
}

/** The manifest's entries as `sql/<path>`, in order; blank lines and `#` comments are skipped. */
export function readManifest(root: string = projectRoot): string[] {
  const path = join(root, MANIFEST_FILE);
  if (!existsSync(path)) return [];
  return readFileSync(path, "utf8")
    .split("\n")
    .map((l) => l.replace(/#.*/, "").trim())
    .filter((l) => l !== "")
    .map((l) => `sql/${l}`);
}

/**
 * The sql/ files in the order a migration run applies them, lowest layer first (sql/manifest.txt):
 * applying them in this order on a migrated database must change nothing (npm run db:check,
 * test/integration/migrations-drift.test.ts).
 */
export function sqlApplyOrder(root: string = projectRoot): string[] {
  return readManifest(root);
}

/** The folder (layer) of a sql/ file, or null for a file at the top of sql/. */
export function folderOf(rel: string): string | null {
  const parts = rel.split("/");
  return parts.length > 2 ? (parts[1] as string) : null;
}

const QUALIFIED = /\b(bitrix_sync|han_app)\.([a-z_][a-z0-9_]*)\b/gi;

/** What one statement defines: `function s.f`, `view s.v`, `trigger t on s.r`, `type s.t`, `index s.i`. */
function defines(stmt: string): string | null {
  const s = codeOnly(stmt).replace(/\s+/g, " ").trim().toLowerCase();
  let m = /^create (?:or replace )?(function|procedure|view) ([a-z_]+\.[a-z0-9_]+)/.exec(s);
  if (m) return `${m[1] === "procedure" ? "function" : m[1]} ${m[2]}`;
  m = /^create (?:constraint )?trigger ([a-z0-9_]+) .*? on ([a-z_]+\.[a-z0-9_]+)/.exec(s);
  if (m) return `trigger ${m[1]} on ${m[2]}`;
  m = /^create type ([a-z_]+\.[a-z0-9_]+)/.exec(s);
  if (m) return `type ${m[1]}`;
  m = /^create (?:unique )?index (?:concurrently )?(?:if not exists )?([a-z0-9_]+) on ([a-z_]+)\./.exec(s);
  if (m) return `index ${m[2]}.${m[1]}`;
  return null;
}

/** The names a statement writes into one of the catalogues kept as rows (settings, privilege decisions). */
function catalogueRows(stmt: string): string[] {
  const head = /^\s*insert\s+into\s+bitrix_sync\.(settings|privilege_decisions)\b/i.exec(stmt)?.[1];
  if (!head) return [];
  const body = stmt.replace(/--[^\n]*/g, "");
  if (head === "settings")
    return [...body.matchAll(/\(\s*'([a-z0-9_.]+)'\s*,/g)].map((m) => `setting ${m[1]}`);
  return [...body.matchAll(/\(\s*'([a-z]+)'\s*,\s*'([^']+)'/g)].map(
    (m) => `decision ${m[1]} ${(m[2] as string).replace(/\(.*$/, "")}`,
  );
}

/** One sql/ file read for the layout rules. */
export interface SqlFile {
  path: string;
  text: string;
}

/** The files of the manifest (those that exist), read. */
export function readSqlFiles(root: string = projectRoot): SqlFile[] {
  return readManifest(root)
    .filter((rel) => existsSync(join(root, rel)))
    .map((rel) => ({ path: rel, text: readFileSync(join(root, rel), "utf8") }));
}

/**
 * For each file, the names it defines or fills: `function s.f`, `view s.v`, `trigger t on s.r`,
 * `type s.t`, `index s.i`, `setting key` and `decision type name` (a row of the privilege catalogue;
 * functions by name, without their arguments).
 */
export function definitionIndex(files: SqlFile[]): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  for (const f of files) {
    const names = new Set<string>();
    for (const st of splitStatements(f.text)) {
      const d = defines(st.text);
      if (d) names.add(d);
      for (const r of catalogueRows(st.text)) names.add(r);
    }
    out.set(f.path, names);
  }
  return out;
}

/** A use of a function or view of another file. */
export interface Call {
  from: string;
  /** What the calling statement defines (`function bitrix_sync.x`), or `statement` for others. */
  caller: string;
  to: string;
  callee: string;
}

/** Calls from each file's statements (bodies included) to the functions and views other files define. */
export function crossFileCalls(files: SqlFile[]): Call[] {
  const definedIn = new Map<string, string>();
  for (const [path, names] of definitionIndex(files))
    for (const n of names) {
      const m = /^(?:function|view) (.+)$/.exec(n);
      if (m) definedIn.set(m[1] as string, path);
    }
  const out: Call[] = [];
  const seen = new Set<string>();
  for (const f of files) {
    for (const st of splitStatements(f.text)) {
      const caller = defines(st.text) ?? "statement";
      for (const m of codeOnly(st.text).matchAll(QUALIFIED)) {
        const callee = `${(m[1] as string).toLowerCase()}.${(m[2] as string).toLowerCase()}`;
        const to = definedIn.get(callee);
        if (!to || to === f.path) continue;
        const key = `${f.path} ${caller} ${callee}`;
        if (seen.has(key)) continue;
        seen.add(key);
        out.push({ from: f.path, caller, to, callee });
      }
    }
  }
  return out;
}

/** Problems of the layers: a folder using a later folder's functions, folders that use each other. */
export function layerProblems(files: SqlFile[]): Problem[] {
  const problems: Problem[] = [];
  const folders: string[] = [];
  for (const f of files) {
    const folder = folderOf(f.path);
    if (folder && !folders.includes(folder)) folders.push(folder);
  }
  const calls = crossFileCalls(files).filter((c) => folderOf(c.from) && folderOf(c.to));
  const layer = (p: string) => folders.indexOf(folderOf(p) as string);
  for (const c of calls) {
    if (layer(c.to) > layer(c.from))
      problems.push({
        file: c.from,
        message: `${c.caller} uses ${c.callee} of ${c.to}, a higher layer (${folderOf(c.to)}/ comes after ${folderOf(c.from)}/ in ${MANIFEST_FILE}): a layer uses only its own folder and the folders before it; move the callee down or the caller up (sql/README.md)`,
      });
  }
  // Folders that use each other, directly or round a loop (Tarjan's strongly connected components).
  const edges = new Map<string, Set<string>>();
  for (const c of calls) {
    const a = folderOf(c.from) as string;
    const b = folderOf(c.to) as string;
    if (a !== b) edges.set(a, (edges.get(a) ?? new Set()).add(b));
  }
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const visit = (v: string) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    onStack.add(v);
    for (const w of edges.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v) as number, idx.get(w) as number));
    }
    if (low.get(v) === idx.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop() as string;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1) {
        const inside = calls
          .filter(
            (c) =>
              component.includes(folderOf(c.from) as string) &&
              component.includes(folderOf(c.to) as string) &&
              folderOf(c.from) !== folderOf(c.to),
          )
          .map((c) => `${c.from} -> ${c.to} (${c.callee})`);
        problems.push({
          file: `sql/${component.sort()[0]}/`,
          message: `the folders ${component
            .sort()
            .map((x) => `${x}/`)
            .join(
              ", ",
            )} use each other: ${inside.join("; ")}; a cycle between folders is not a layering (sql/README.md)`,
        });
      }
    }
  };
  for (const v of folders) if (!idx.has(v)) visit(v);
  return problems;
}

/**
 * Everything wrong with the layout of sql/ under `root`: files missing from the manifest or listed
 * twice or not existing, a folder whose files are not listed together, a file over MAX_FILE_LINES,
 * an object defined in two files, and the layer problems.
 */
export function layoutProblems(root: string = projectRoot): Problem[] {
  const problems: Problem[] = [];
  const manifest = readManifest(root);
  if (manifest.length === 0) {
    problems.push({
      file: MANIFEST_FILE,
      message: "missing or empty: it lists every sql/ file in the order they are applied (sql/README.md)",
    });
    return problems;
  }
  const onDisk = new Set(sqlFiles(root));
  manifest.forEach((rel, i) => {
    if (manifest.indexOf(rel) !== i)
      problems.push({ file: MANIFEST_FILE, message: `lists ${rel} twice; list each file once` });
    if (!onDisk.has(rel))
      problems.push({
        file: MANIFEST_FILE,
        message: `lists ${rel}, which does not exist; remove the line or restore the file`,
      });
  });
  for (const rel of onDisk)
    if (!manifest.includes(rel))
      problems.push({
        file: rel,
        message: `is not listed in ${MANIFEST_FILE}, so no check applies it; add it in its folder's block, after what it uses`,
      });
  const order: string[] = [];
  for (const rel of manifest) {
    const folder = folderOf(rel);
    if (folder === null) continue;
    if (order.includes(folder) && order.at(-1) !== folder)
      problems.push({
        file: MANIFEST_FILE,
        message: `lists ${rel} apart from the other files of ${folder}/: a folder's files are listed together (the folder is one layer)`,
      });
    if (order.at(-1) !== folder) order.push(folder);
  }
  const files = readSqlFiles(root);
  for (const f of files) {
    const lines = f.text.endsWith("\n") ? f.text.split("\n").length - 1 : f.text.split("\n").length;
    if (lines > MAX_FILE_LINES)
      problems.push({
        file: f.path,
        message: `has ${lines} lines, more than ${MAX_FILE_LINES}: split it where a reader loses the thread (sql/README.md)`,
      });
  }
  const owner = new Map<string, string>();
  for (const [path, names] of definitionIndex(files))
    for (const n of names) {
      const other = owner.get(n);
      if (other && other !== path)
        problems.push({ file: path, message: `defines ${n} again (also in ${other}): one file per object` });
      else owner.set(n, path);
    }
  problems.push(...decisionProblems(files));
  problems.push(...layerProblems(files));
  return problems;
}

/**
 * Each function and view has its privilege decision in the file that defines it (right after its
 * COMMENT ON), so a migration that includes the file carries both; a decision stands nowhere else.
 */
export function decisionProblems(files: SqlFile[]): Problem[] {
  const problems: Problem[] = [];
  const index = definitionIndex(files);
  const decidedIn = new Map<string, string>();
  for (const [path, names] of index)
    for (const n of names) if (n.startsWith("decision ")) decidedIn.set(n.slice("decision ".length), path);
  for (const [path, names] of index)
    for (const n of names) {
      if (!/^(function|view) /.test(n)) continue;
      const where = decidedIn.get(n);
      if (where === path) continue;
      problems.push({
        file: path,
        message: where
          ? `defines ${n} but its privilege decision stands in ${where}: move the insert into bitrix_sync.privilege_decisions here, right after the COMMENT ON`
          : `defines ${n} without its privilege decision: add the insert into bitrix_sync.privilege_decisions right after its COMMENT ON (sql/README.md)`,
      });
    }
  for (const [what, path] of decidedIn) {
    if (!/^(function|view) /.test(what)) continue;
    if (![...index.values()].some((names) => names.has(what)))
      problems.push({
        file: path,
        message: `decides ${what}, which no sql/ file defines: delete the decision (and, in the migration that drops the object, its row)`,
      });
  }
  return problems;
}
