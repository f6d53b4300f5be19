// The build a signal comes from (§15): every log line, the trace resource, /health/ready,
// /internal/sync/v1/status and the bitrix_sync_build_info gauge carry the version and the revision.
// Both are decided once, when this module loads (at startup), never per request:
// - version: BITRIX_SYNC_VERSION (a build argument of the image, e.g. its tag), else the `version`
//   of package.json, which the image carries. (npm_package_version is set only when npm starts the
//   process, and names whichever package npm ran.)
// - revision: BITRIX_SYNC_REVISION (a build argument of the image: the git commit it was built
//   from), else `git rev-parse HEAD` of the checkout when the service runs from a git tree, else
//   `unknown` (the image has neither .git nor git).
// A value that does not look like a version or a revision is replaced by `unknown`: both go into
// metric labels and must never carry anything else.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

/** A version, tag or commit: letters, digits and `.`, `_`, `+`, `-`, at most 64 characters. */
const BUILD_VALUE = /^[0-9A-Za-z][0-9A-Za-z._+-]{0,63}$/;

/** The value itself when it looks like a version or a revision, else `unknown`. */
export function buildValue(value: string | undefined | null): string {
  const v = value?.trim();
  return v && BUILD_VALUE.test(v) ? v : "unknown";
}

const packageVersion = (
  JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string }
).version;

/** The commit of the checkout this file lives in, or null (no git, not a git tree, git too slow). */
export function gitRevision(dir: string = fileURLToPath(new URL("..", import.meta.url))): string | null {
  try {
    const out = execFileSync("git", ["rev-parse", "HEAD"], {
      cwd: dir,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
      timeout: 2_000,
    }).trim();
    return /^[0-9a-f]{40,64}$/.test(out) ? out : null;
  } catch {
    return null;
  }
}

/** The revision from the environment, else the checkout, else `unknown`. */
export function resolveRevision(
  env: NodeJS.ProcessEnv = process.env,
  git: () => string | null = gitRevision,
) {
  const fromEnv = env.BITRIX_SYNC_REVISION?.trim();
  if (fromEnv) return buildValue(fromEnv);
  return buildValue(git());
}

/** The version from the environment, else package.json's. */
export function resolveVersion(env: NodeJS.ProcessEnv = process.env): string {
  const fromEnv = env.BITRIX_SYNC_VERSION?.trim();
  return buildValue(fromEnv || packageVersion);
}

/** The service's version, as logs (`version`) and traces (`service.version`) report it. */
export const SERVICE_VERSION: string = resolveVersion();

/** The commit (or image revision) the running code was built from; `unknown` when nobody said. */
export const SERVICE_REVISION: string = resolveRevision();

/** Both, as /health/ready and the status document show them. */
export const BUILD = Object.freeze({ version: SERVICE_VERSION, revision: SERVICE_REVISION });
