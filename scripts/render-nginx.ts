// `npm run render:nginx -- --out <file> [--env-file <file>]`: renders the public nginx server block
// from the service's configuration (src/config/nginx.ts). With --env-file the file alone is the
// configuration (reproducible from a reviewed file); without it, the process environment is.
// Exit codes: 0 written, 64 usage, 78 invalid configuration (like the service).
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { parseArgs, parseEnv } from "node:util";
import { ConfigError } from "../src/config/env.js";
import { renderNginxFromEnv } from "../src/config/nginx.js";

let args: { out?: string; "env-file"?: string };
try {
  args = parseArgs({
    options: { out: { type: "string" }, "env-file": { type: "string" } },
    allowPositionals: false,
  }).values;
} catch (e) {
  console.error((e as Error).message);
  args = {};
}
if (!args.out) {
  console.error("usage: npm run render:nginx -- --out <file> [--env-file <file>]");
  process.exit(64);
}

const env = args["env-file"] ? parseEnv(readFileSync(args["env-file"], "utf8")) : process.env;
let rendered: ReturnType<typeof renderNginxFromEnv>;
try {
  rendered = renderNginxFromEnv(env);
} catch (e) {
  if (e instanceof ConfigError) {
    console.error(e.message);
    process.exit(78);
  }
  throw e;
}

// Write beside the target and rename, so a running nginx never reloads half a file.
const tmp = join(dirname(args.out), `.${basename(args.out)}.${process.pid}.tmp`);
writeFileSync(tmp, rendered.text, { mode: 0o644 });
renameSync(tmp, args.out);
const s = rendered.settings;
console.log(
  `rendered ${args.out}: server ${s.serverName}, upstream ${s.upstream}, ${s.allowed.length} allowed network(s)` +
    (rendered.receiversEnabledBy
      ? ` (receivers enabled: ${rendered.receiversEnabledBy})`
      : " (receivers off)"),
);
