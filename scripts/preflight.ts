// `npm run preflight [-- --json] [-- --env-file <file>] [-- --write [--probe-name <n>] [--probe-phone <p>]]`:
// the read-only checks before enabling sync (src/preflight), and with --write the contract probe
// against the configured portal, which creates throw-away Contacts and deletes them again
// (src/preflight/probe.ts). Reads the same environment and secret files as `npm start`; with
// --env-file the file alone is the environment (plus the process's PATH). Exit 0 all passed, 1
// something failed, 2 something could not be checked, 64 usage. SIGINT during the probe stops it
// and still deletes what it made.
import { readFileSync } from "node:fs";
import { parseArgs, parseEnv } from "node:util";
import {
  formatReport,
  type ProbeOptions,
  probeOptionsProblem,
  runPreflight,
} from "../src/preflight/index.js";

const USAGE =
  "usage: npm run preflight -- [--json] [--env-file <file>] [--write [--probe-name <name>] [--probe-phone <+70XXXXXXXXX>]]";

let args: {
  json?: boolean;
  "env-file"?: string;
  write?: boolean;
  "probe-name"?: string;
  "probe-phone"?: string;
};
try {
  args = parseArgs({
    options: {
      json: { type: "boolean" },
      "env-file": { type: "string" },
      write: { type: "boolean" },
      "probe-name": { type: "string" },
      "probe-phone": { type: "string" },
    },
    allowPositionals: false,
  }).values;
} catch (e) {
  console.error(`${(e as Error).message}\n${USAGE}`);
  process.exit(64);
}

const env = args["env-file"]
  ? { PATH: process.env.PATH, ...parseEnv(readFileSync(args["env-file"], "utf8")) }
  : process.env;

let write: ProbeOptions | undefined;
if (args.write) {
  const stop = new AbortController();
  write = { signal: stop.signal };
  const name = args["probe-name"] ?? env.BITRIX_SYNC_PROBE_NAME;
  const phone = args["probe-phone"] ?? env.BITRIX_SYNC_PROBE_PHONE;
  if (name !== undefined) write.name = name;
  if (phone !== undefined) write.phone = phone;
  const problem = probeOptionsProblem(write);
  if (problem) {
    console.error(`${problem}\n${USAGE}`);
    process.exit(64);
  }
  process.on("SIGINT", () => {
    if (!stop.signal.aborted) {
      console.error("preflight: interrupted; deleting what the probe made before exiting");
      stop.abort();
    } else {
      console.error("preflight: still deleting what the probe made; the report names anything left");
    }
  });
} else if (args["probe-name"] !== undefined || args["probe-phone"] !== undefined) {
  console.error(`--probe-name and --probe-phone need --write\n${USAGE}`);
  process.exit(64);
}

const report = await runPreflight(env, write ? { write } : {});
process.stdout.write(args.json ? `${JSON.stringify(report, null, 2)}\n` : formatReport(report));
process.exitCode = report.exitCode;
