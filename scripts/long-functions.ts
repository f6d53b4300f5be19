// `node --import tsx scripts/long-functions.ts [limit] [dir]`: lists the functions of src/ (or dir)
// longer than limit lines (default 80), longest first, read with the TypeScript compiler's parser.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import ts from "typescript";
import { projectRoot } from "../src/local/project-root.js";

const limit = Number(process.argv[2] ?? 80);
const root = join(projectRoot, process.argv[3] ?? "src");

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? sources(p) : p.endsWith(".ts") ? [p] : [];
  });
}

function nameOf(node: ts.Node): string {
  if ((ts.isFunctionDeclaration(node) || ts.isMethodDeclaration(node)) && node.name)
    return node.name.getText();
  const parent = node.parent;
  if (parent && ts.isVariableDeclaration(parent)) return parent.name.getText();
  if (parent && ts.isPropertyAssignment(parent)) return parent.name.getText();
  if (ts.isConstructorDeclaration(node)) return "constructor";
  return "(anonymous)";
}

const long: { where: string; name: string; lines: number }[] = [];
for (const file of sources(root)) {
  const sf = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true);
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && "body" in node && node.body) {
      const start = sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1;
      const end = sf.getLineAndCharacterOfPosition(node.getEnd()).line + 1;
      if (end - start + 1 > limit) {
        long.push({
          where: `${relative(projectRoot, file)}:${start}`,
          name: nameOf(node),
          lines: end - start + 1,
        });
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
}
for (const f of long.sort((a, b) => b.lines - a.lines))
  console.log(`${String(f.lines).padStart(4)}  ${f.name}  ${f.where}`);
console.log(`${long.length} function(s) over ${limit} lines`);
