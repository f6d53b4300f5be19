// `npm run db:migrate`: applies graphile-worker's schema and the committed migrations as the owner
// role (DDL, roles, grants). The service itself then runs as bitrix_sync_user with
// BITRIX_SYNC_MIGRATE_ON_START=false. Connection: MIGRATION_DATABASE_URL, or the file named by
// MIGRATION_DATABASE_URL_FILE (a secret file, as in deploy/compose.yaml). Never logged.
import { readFileSync } from "node:fs";
import { migrateDatabase } from "../src/db/migrate.js";
import { redactUrl } from "../src/db/url.js";

const file = process.env.MIGRATION_DATABASE_URL_FILE;
let url = process.env.MIGRATION_DATABASE_URL;
if (!url && file) {
  try {
    url = readFileSync(file, "utf8").replace(/\r?\n$/, "");
  } catch (e) {
    console.error(
      `cannot read MIGRATION_DATABASE_URL_FILE (${(e as NodeJS.ErrnoException).code ?? "error"})`,
    );
    process.exit(66);
  }
}
if (!url) {
  console.error(
    "set MIGRATION_DATABASE_URL (or MIGRATION_DATABASE_URL_FILE) to a connection string of the schema owner",
  );
  process.exit(64);
}
console.log(`migrating ${redactUrl(url)}`);
await migrateDatabase(url, { info: (_o, msg) => console.log(msg ?? "") });
console.log("done");
