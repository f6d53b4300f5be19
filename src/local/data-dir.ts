// Local state of `npm start` on a developer's machine: the embedded PostgreSQL and the file through
// which a running sandbox service tells `npm run demo`, `npm run psql` and `npm run stop` where it is.
// BITRIX_SYNC_DATA_DIR moves all of it (tests use a folder of their own so a developer's is untouched).
import { join, resolve } from "node:path";
import { projectRoot } from "../local/project-root.js";

/** The local state folder: BITRIX_SYNC_DATA_DIR (relative to the project) or `.data`. */
export function dataDir(env: { BITRIX_SYNC_DATA_DIR?: string | undefined }): string {
  return resolve(projectRoot, env.BITRIX_SYNC_DATA_DIR ?? ".data");
}

/** The embedded PostgreSQL's folder (its data and embedded.json) inside the local state folder. */
export function embeddedDir(env: { BITRIX_SYNC_DATA_DIR?: string | undefined }): string {
  return join(dataDir(env), "pg");
}
