// `npm run docs:openapi`: writes docs/openapi.json from the routes' schemas (src/http/openapi.ts).
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { openApiText } from "../src/http/openapi.js";
import { projectRoot } from "../src/local/project-root.js";

const version = (JSON.parse(readFileSync(join(projectRoot, "package.json"), "utf8")) as { version: string })
  .version;
const out = join(projectRoot, "docs", "openapi.json");
writeFileSync(out, openApiText(version));
console.log(`wrote ${out}`);
