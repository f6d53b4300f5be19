// The Dockerfile's properties, checked without a Docker engine (none runs here): pinned bases, a
// production-only dependency install, a non-root user, root-owned files, the start command of
// `npm start`, a HEALTHCHECK on /health/live and no secret in the image (§16).
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import test from "ava";
import { OPTIONAL_SECRET_NAMES, SECRET_NAMES } from "../../../src/config/secrets.js";
import { projectRoot } from "../../../src/local/project-root.js";
import { imageNodeVersion, readDockerfile, type Stage } from "../../helpers/dockerfile.js";

const { globalArgs, stages } = readDockerfile();
const runtime = stages.at(-1) as Stage;
const pkg = JSON.parse(readFileSync(join(projectRoot, "package.json"), "utf8")) as {
  scripts: Record<string, string>;
};
const of = (stage: Stage, op: string) => stage.instructions.filter((i) => i.op === op);

test("multi-stage, every base image pinned to a version and by digest", (t) => {
  t.true(stages.length >= 2);
  t.is(runtime.name, "runtime");
  for (const s of stages) {
    t.regex(
      s.image,
      /^[a-z0-9./-]+:\d+\.\d+\.\d+-[a-z0-9.-]+@sha256:[0-9a-f]{64}$/,
      `${s.image} is not pinned by version and digest`,
    );
  }
  t.deepEqual(Object.keys(globalArgs), ["NODE_IMAGE"]);
});

test("the runtime is Node 24 LTS on Debian bookworm, pinned by the digest of its index", (t) => {
  t.regex(globalArgs.NODE_IMAGE ?? "", /^node:24\.\d+\.\d+-bookworm-slim@sha256:[0-9a-f]{64}$/);
  for (const s of stages)
    t.is(s.image, globalArgs.NODE_IMAGE as string, `${s.name ?? "a stage"} builds on NODE_IMAGE`);
});

test("the tests' Node 24 is the image's exact version, and package.json's engines admit it", (t) => {
  const image = imageNodeVersion();
  const script = readFileSync(join(projectRoot, "scripts", "node24.sh"), "utf8");
  t.is(/^version=(\S+)$/m.exec(script)?.[1], image, "scripts/node24.sh installs the image's version");
  t.regex(script, /^integrity=sha512-[A-Za-z0-9+/]+=*$/m, "and checks it against a pinned integrity");
  // engines: caret ranges only (`^20.18.1 || ^24.21.0`): development on 20, the image on 24.
  const engines = (pkg as unknown as { engines: { node: string } }).engines.node;
  const ranges = engines.split("||").map((r) => r.trim());
  for (const r of ranges) t.regex(r, /^\^\d+\.\d+\.\d+$/, engines);
  const [major, minor, patch] = image.split(".").map(Number) as [number, number, number];
  const admits = ranges.some((r) => {
    const [M, m, p] = r.slice(1).split(".").map(Number) as [number, number, number];
    return M === major && (minor > m || (minor === m && patch >= p));
  });
  t.true(admits, `${engines} admits the image's ${image}`);
  t.true(
    ranges.some((r) => r.startsWith("^20.")),
    "development on Node 20 stays supported",
  );
});

test("the install runs no package's install script, and no production package needs one", (t) => {
  const deps = stages.find((s) => of(s, "RUN").some((r) => /\bnpm ci\b/.test(r.args))) as Stage;
  const install = of(deps, "RUN").find((r) => /\bnpm ci\b/.test(r.args))?.args ?? "";
  t.regex(install, /--ignore-scripts\b/);
  // Production packages with an install script, and why the image does without it. Anything new
  // here needs a look: does the service still start without its script?
  const notNeeded: Record<string, string> = {
    "node_modules/esbuild": "tsx loads esbuild's platform binary package directly (STACK.md)",
  };
  const lock = JSON.parse(readFileSync(join(projectRoot, "package-lock.json"), "utf8")) as {
    packages: Record<string, { dev?: boolean; hasInstallScript?: boolean }>;
  };
  const production = Object.entries(lock.packages)
    .filter(([, p]) => p.hasInstallScript && !p.dev)
    .map(([name]) => name);
  t.deepEqual(production.sort(), Object.keys(notNeeded).sort());
});

test("the emulator and the demo (tools/) stay out of the image's context", (t) => {
  const lines = readFileSync(join(projectRoot, ".dockerignore"), "utf8").split("\n");
  t.is(
    lines.find((l) => l !== "" && !l.startsWith("#")),
    "**",
    "everything is left out first",
  );
  t.deepEqual(
    lines.filter((l) => l.startsWith("!tools")),
    [],
    "nothing of tools/ is let back in",
  );
});

test("production dependencies only, installed from the lock file in a build stage", (t) => {
  const deps = stages.find((s) => of(s, "RUN").some((r) => /\bnpm ci\b/.test(r.args)));
  t.truthy(deps);
  t.not(deps, runtime);
  const install = of(deps as Stage, "RUN").find((r) => /\bnpm ci\b/.test(r.args))?.args ?? "";
  t.regex(install, /--omit=dev\b/);
  t.regex(install, /--no-audit\b/);
  t.true(of(deps as Stage, "COPY").some((c) => c.args.includes("package-lock.json")));
  t.false(
    of(runtime, "RUN").some((r) => /\bnpm (ci|install|i)\b/.test(r.args)),
    "no install in the runtime stage",
  );
  t.true(of(runtime, "COPY").some((c) => c.args === `--from=${deps?.name} /app/node_modules ./node_modules`));
});

test("runs as an unprivileged numeric user; the files it runs stay root-owned", (t) => {
  const users = of(runtime, "USER");
  t.is(users.length, 1);
  const [uid, gid] = (users[0]?.args ?? "").split(":");
  t.regex(uid ?? "", /^[1-9]\d*$/);
  t.regex(gid ?? "", /^[1-9]\d*$/);
  t.is(runtime.instructions.at(-1)?.op, "CMD");
  const afterUser = runtime.instructions.slice(runtime.instructions.indexOf(users[0] as never) + 1);
  t.false(
    afterUser.some((i) => i.op === "RUN" || i.op === "COPY"),
    "nothing is written after USER",
  );
  t.false(
    stages.flatMap((s) => of(s, "COPY")).some((c) => /--chown|--chmod/.test(c.args)),
    "no COPY gives the runtime user ownership",
  );
});

test("the start command is package.json's start script, as the tests run it", (t) => {
  const cmd = of(runtime, "CMD");
  t.is(cmd.length, 1);
  t.deepEqual(cmd[0]?.exec, pkg.scripts.start?.split(/\s+/));
  t.is(of(runtime, "ENTRYPOINT").length, 0);
});

test("HEALTHCHECK calls /health/live with node and a script the image contains", (t) => {
  const hc = of(runtime, "HEALTHCHECK");
  t.is(hc.length, 1);
  const exec = hc[0]?.exec ?? [];
  t.is(exec[0], "node");
  const script = exec[1] as string;
  t.true(existsSync(join(projectRoot, script)));
  t.regex(readFileSync(join(projectRoot, script), "utf8"), /\/health\/live/);
  t.true(of(runtime, "COPY").some((c) => c.args.split(" ").includes(script)));
});

test("secrets are files under /run/han-chat/secrets, never in the image", (t) => {
  const env = of(runtime, "ENV")
    .map((e) => e.args)
    .join(" ");
  t.regex(env, /\bBITRIX_SYNC_SECRETS_DIR=\/run\/han-chat\/secrets\b/);
  t.regex(env, /\bBITRIX_SYNC_MIGRATE_ON_START=false\b/);
  t.regex(env, /\bTMPDIR=\/tmp\b/);
  const declared = stages.flatMap((s) => [...of(s, "ENV"), ...of(s, "ARG")]).map((i) => i.args);
  for (const name of [...SECRET_NAMES, ...OPTIONAL_SECRET_NAMES, "MIGRATION_DATABASE_URL"]) {
    t.false(
      declared.some((d) => new RegExp(`\\b${name}=`).test(d)),
      `${name} must not be set in the image`,
    );
  }
});

test("every file the image copies exists and is let through by .dockerignore", (t) => {
  const ignore = readFileSync(join(projectRoot, ".dockerignore"), "utf8")
    .split("\n")
    .filter((l) => l.startsWith("!"))
    .map((l) => l.slice(1).replace(/\/\*\*$/, ""));
  t.true(
    readFileSync(join(projectRoot, ".dockerignore"), "utf8").split("\n").includes("**"),
    "deny by default",
  );
  for (const c of stages.flatMap((s) => of(s, "COPY")).filter((c) => !c.args.startsWith("--from"))) {
    const sources = c.args.split(" ").slice(0, -1);
    for (const src of sources) {
      t.true(existsSync(join(projectRoot, src)), src);
      t.true(ignore.includes(src), `${src} is excluded by .dockerignore`);
    }
  }
});
