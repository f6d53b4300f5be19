// `npm run render:nginx -- --out <file> [--env-file <file>] [--published <file>] [--check]`: renders
// the public nginx server block from the service's configuration (src/config/nginx.ts). With
// --env-file the file alone is the configuration (reproducible from a reviewed file); without it,
// the process environment is.
//
// Before it writes, it shows how the allow-list changes: against the allow-list of the file it
// replaces (--out, when it exists), or with --published against BITRIX_WEBHOOK_ALLOWED_CIDRS. With
// --published <file> the allow-list is that file's, Bitrix24's published list of its outbound
// addresses as the operator downloaded it (src/config/published-networks.ts), and the line to put
// into the reviewed configuration is printed. --check only shows the difference and writes nothing.
//
// Exit codes: 0 written (or, with --check, no difference), 1 with --check: the allow-list would
// change, 64 usage, 66 a file that cannot be read, 78 invalid configuration or list (like the service).
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { parseArgs, parseEnv } from "node:util";
import { parseCidrList } from "../src/config/cidr.js";
import { ConfigError } from "../src/config/env.js";
import { renderNginxFromEnv } from "../src/config/nginx.js";
import {
  formatNetworkDiff,
  networkDiff,
  parsePublishedNetworks,
  renderedAllowList,
} from "../src/config/published-networks.js";

const USAGE =
  "usage: npm run render:nginx -- --out <file> [--env-file <file>] [--published <file>] [--check]\n" +
  "       (--check needs --out or --published)";

let args: { out?: string; "env-file"?: string; published?: string; check?: boolean };
try {
  args = parseArgs({
    options: {
      out: { type: "string" },
      "env-file": { type: "string" },
      published: { type: "string" },
      check: { type: "boolean" },
    },
    allowPositionals: false,
  }).values;
} catch (e) {
  console.error((e as Error).message);
  args = {};
}
if (!args.out && !(args.check && args.published)) {
  console.error(USAGE);
  process.exit(64);
}

function read(file: string, what: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch (e) {
    console.error(`${what} ${file}: ${(e as NodeJS.ErrnoException).code ?? "cannot be read"}`);
    process.exit(66);
  }
}

const env: NodeJS.ProcessEnv = args["env-file"]
  ? parseEnv(read(args["env-file"], "env file"))
  : { ...process.env };

function render(e: NodeJS.ProcessEnv): ReturnType<typeof renderNginxFromEnv> {
  try {
    return renderNginxFromEnv(e);
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(78);
    }
    throw err;
  }
}

let rendered: ReturnType<typeof renderNginxFromEnv>;
let diffLines: string[] = [];
let differs = false;
if (args.published) {
  // Against the reviewed configuration's list, which may be empty on a first setup.
  const was = parseCidrList(env.BITRIX_WEBHOOK_ALLOWED_CIDRS, { limitWidth: true });
  if (!was.ok) {
    console.error(`BITRIX_WEBHOOK_ALLOWED_CIDRS: ${was.problems.join("; ")}`);
    process.exit(78);
  }
  const list = parsePublishedNetworks(read(args.published, "published list"));
  if (!list.ok) {
    console.error(`${args.published}: ${list.problems.join("; ")}`);
    process.exit(78);
  }
  const value = list.cidrs.map((c) => c.text).join(",");
  rendered = render({ ...env, BITRIX_WEBHOOK_ALLOWED_CIDRS: value });
  const d = networkDiff(was.cidrs, rendered.settings.allowed);
  differs = d.added.length + d.removed.length > 0;
  diffLines = formatNetworkDiff(d, "BITRIX_WEBHOOK_ALLOWED_CIDRS", args.published);
  if (list.repeated > 0) {
    diffLines.push(`  (${list.repeated} repeated entr${list.repeated === 1 ? "y" : "ies"} kept once)`);
  }
  if (differs) {
    diffLines.push(
      "Confirm the new networks are Bitrix24's through an agreed channel, then record this in the reviewed configuration:",
      `BITRIX_WEBHOOK_ALLOWED_CIDRS=${value}`,
    );
  }
} else {
  rendered = render(env);
  // Against what the file to replace admits now.
  if (args.out && existsSync(args.out)) {
    const d = networkDiff(renderedAllowList(read(args.out, "rendered file")), rendered.settings.allowed);
    differs = d.added.length + d.removed.length > 0;
    diffLines = formatNetworkDiff(d, args.out, "BITRIX_WEBHOOK_ALLOWED_CIDRS");
  } else if (args.out) {
    differs = true;
    diffLines = [
      `allow-list: ${args.out} does not exist yet; it would admit ${rendered.settings.allowed.length} network(s)`,
    ];
  }
}
for (const l of diffLines) console.log(l);

if (args.check) {
  console.log(differs ? "check: the allow-list would change; nothing written" : "check: nothing written");
  process.exit(differs ? 1 : 0);
}

// Write beside the target and rename, so a running nginx never reloads half a file.
const out = args.out as string;
const tmp = join(dirname(out), `.${basename(out)}.${process.pid}.tmp`);
writeFileSync(tmp, rendered.text, { mode: 0o644 });
renameSync(tmp, out);
const s = rendered.settings;
console.log(
  `rendered ${out}: server ${s.serverName}, upstream ${s.upstream}, ${s.allowed.length} allowed network(s)` +
    (rendered.receiversEnabledBy
      ? ` (receivers enabled: ${rendered.receiversEnabledBy})`
      : " (receivers off)"),
);
