// The service's version, as logs (`version`) and traces (`service.version`) report it. Read from
// package.json, which the image carries: npm_package_version is set only when npm starts the process
// (the image runs `node` directly) and names whichever package npm ran, not necessarily this one.
import { readFileSync } from "node:fs";

/** The `version` of this project's package.json. */
export const SERVICE_VERSION: string = (
  JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string }
).version;
