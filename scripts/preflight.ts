// `npm run preflight [-- --json] [-- --env-file <file>]`: the read-only checks before enabling sync
// (src/preflight). Reads the same environment and secret files as `npm start`; with --env-file the
// file alone is the environment (plus the process's PATH). Exit 0 all passed, 1 something failed,
// 2 something could not be checked, 64 usage.
import { readFileSync } from "node:fs";
import { parseArgs, parseEnv } from "node:util";
import { formatReport, runPreflight } from "../src/preflight/index.js";

let args: { json?: boolean; "env-file"?: string };
try {
  args = parseArgs({
    options: { json: { type: "boolean" }, "env-file": { type: "string" } },
    allowPositionals: false,
  }).values;
} catch (e) {
  console.error(`${(e as Error).message}\nusage: npm run preflight -- [--json] [--env-file <file>]`);
  process.exit(64);
}

const env = args["env-file"]
  ? { PATH: process.env.PATH, ...parseEnv(readFileSync(args["env-file"], "utf8")) }
  : process.env;
const report = await runPreflight(env);
process.stdout.write(args.json ? `${JSON.stringify(report, null, 2)}\n` : formatReport(report));
process.exitCode = report.exitCode;
