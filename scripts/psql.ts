// `npm run psql [-- <psql arguments>]`: psql on the database the service uses, the configured
// BITRIX_SYNC_DATABASE_URL secret or else the embedded server in the local data folder. The password
// goes to psql through PGPASSWORD, never on the command line or the screen.
// Exit codes: psql's own; 69 when the database or psql itself is not there; 66/78 as `npm start`.
import { spawn } from "node:child_process";
import { type Config, parseEnv } from "../src/config/env.js";
import { loadSecrets } from "../src/config/secrets.js";
import { embeddedAnswers, embeddedUrl } from "../src/db/embedded.js";
import { databaseTarget } from "../src/db/target.js";
import { databaseAddress } from "../src/db/url.js";
import { classifyStartupError, EXIT } from "../src/startup/errors.js";

function fail(line: string, code: number): never {
  console.error(`psql: ${line}`);
  process.exit(code);
}

async function connectionString(): Promise<string> {
  // The variables and secrets only, not the service's whole configuration: psql runs no sync, so
  // the rules of sandbox mode and of an enabled service do not apply to it.
  let config: Pick<Config, "env" | "secrets">;
  try {
    const env = parseEnv();
    config = {
      env,
      secrets: loadSecrets({ ...process.env, SECRETS_SOURCE: env.SECRETS_SOURCE === "env" ? "env" : "file" }),
    };
  } catch (e) {
    const known = classifyStartupError(e);
    if (!known) throw e;
    fail(known.lines.join("; "), known.exitCode);
  }
  const target = databaseTarget(config);
  if (target.kind === "configured") return target.url;
  if (!target.meta) {
    fail(
      `there is no embedded database in ${target.dir} yet: start the service once with npm start (or npm run demo), then run this again.`,
      EXIT.unavailable,
    );
  }
  if (!(await embeddedAnswers(target.meta))) {
    fail(
      `the embedded database in ${target.dir} is not running; it runs while the service does: start it with npm start (or npm run demo) in another terminal, then run this again.`,
      EXIT.unavailable,
    );
  }
  return embeddedUrl(target.meta);
}

const url = new URL(await connectionString());
const password = decodeURIComponent(url.password);
url.password = "";
const env = { ...process.env, PGPASSWORD: password, PGAPPNAME: "bitrix-sync-psql" };
const child = spawn("psql", [`--dbname=${url.toString()}`, ...process.argv.slice(2)], {
  stdio: "inherit",
  env,
});
// psql handles Ctrl-C itself (it cancels the running query); this process only waits for it.
process.on("SIGINT", () => undefined);
child.on("error", (e) => {
  if ((e as NodeJS.ErrnoException).code === "ENOENT") {
    fail(
      "the psql client is not installed: install it (Debian: apt-get install postgresql-client), then run this again.",
      EXIT.unavailable,
    );
  }
  fail(
    `psql could not be started (${(e as NodeJS.ErrnoException).code ?? e.name}) for ${databaseAddress(url.toString())}`,
    1,
  );
});
child.on("exit", (code, signal) => process.exit(code ?? (signal ? 128 : 1)));
