// `npm run db:migrate`: applies graphile-worker's schema and the committed migrations as the owner
// role (DDL, roles, grants). The service itself then runs as bitrix_sync_user with
// BITRIX_SYNC_MIGRATE_ON_START=false. Connection: MIGRATION_DATABASE_URL (never logged).
import { migrateDatabase } from "../src/db/migrate.js";
import { redactUrl } from "../src/db/url.js";

const url = process.env.MIGRATION_DATABASE_URL;
if (!url) {
  console.error("set MIGRATION_DATABASE_URL to a connection string of the schema owner");
  process.exit(64);
}
console.log(`migrating ${redactUrl(url)}`);
await migrateDatabase(url, { info: (_o, msg) => console.log(msg ?? "") });
console.log("done");
