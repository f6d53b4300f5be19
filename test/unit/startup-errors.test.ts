// The startup error lines that the process tests cannot provoke cheaply: a database refusing the
// credentials, a missing database, a timeout, a user without DDL rights. Each names host:port and
// the fix, never the user name or the password.
import test from "ava";
import { databaseAddress } from "../../src/db/url.js";
import { databaseStartupError, migrationStartupError } from "../../src/startup/database.js";
import { EXIT } from "../../src/startup/errors.js";
import { listenStartupError } from "../../src/startup/listen.js";

const URL_WITH_SECRETS = "postgres://app_owner_x1:S3cr3t%40pw@db.internal.test:6432/appdb?sslmode=require";
const pgError = (code: string) =>
  Object.assign(new Error(`password authentication failed for user "app_owner_x1"`), { code });

function clean(t: import("ava").ExecutionContext, line: string) {
  for (const s of ["app_owner_x1", "S3cr3t", "sslmode"]) t.false(line.includes(s), s);
}

test("databaseAddress shows host:port only, for every URL shape", (t) => {
  t.is(databaseAddress(URL_WITH_SECRETS), "db.internal.test:6432");
  t.is(databaseAddress("postgres://u:p@127.0.0.1/app"), "127.0.0.1:5432");
  t.is(databaseAddress("postgres://u:p@[::1]:5433/app"), "[::1]:5433");
  t.is(
    databaseAddress("postgres:///app?host=/var/run/postgresql"),
    "the socket in /var/run/postgresql (port 5432)",
  );
  t.is(databaseAddress("not a url with secret S3cr3t"), "<unparseable database URL>");
});

test("refused credentials and a missing database are configuration errors (78)", (t) => {
  for (const code of ["28P01", "28000"]) {
    const e = databaseStartupError(URL_WITH_SECRETS, pgError(code), 10_000);
    t.is(e.exitCode, EXIT.config);
    t.regex(
      e.lines[0] ?? "",
      /db\.internal\.test:6432 refused the user name or password in BITRIX_SYNC_DATABASE_URL/,
    );
    clean(t, e.message);
  }
  const missing = databaseStartupError(URL_WITH_SECRETS, pgError("3D000"), 10_000);
  t.is(missing.exitCode, EXIT.config);
  t.regex(missing.message, /does not exist on db\.internal\.test:6432/);
  clean(t, missing.message);
});

test("a silent or unknown host is unreachable (69), with the reason", (t) => {
  const timeout = databaseStartupError(URL_WITH_SECRETS, new Error("timeout expired"), 5_000);
  t.is(timeout.exitCode, EXIT.unavailable);
  t.regex(timeout.message, /db\.internal\.test:6432 is unreachable \(no answer within 5 s\)/);
  const dns = databaseStartupError(
    URL_WITH_SECRETS,
    Object.assign(new Error("x"), { code: "ENOTFOUND" }),
    5_000,
  );
  t.regex(dns.message, /\(the host name does not resolve\)/);
  clean(t, timeout.message + dns.message);
});

test("a user without DDL rights is told to migrate as the owner (78); other migration errors stay unexplained", (t) => {
  const e = migrationStartupError(URL_WITH_SECRETS, pgError("42501"));
  t.is(e?.exitCode, EXIT.config);
  t.regex(e?.message ?? "", /npm run db:migrate.*BITRIX_SYNC_MIGRATE_ON_START=false/);
  clean(t, e?.message ?? "");
  t.is(migrationStartupError(URL_WITH_SECRETS, pgError("42P01")), null);
  t.is(migrationStartupError(URL_WITH_SECRETS, pgError("ECONNREFUSED"))?.exitCode, EXIT.unavailable);
});

test("listen errors: a privileged port (77), an address not on this machine (78), anything else unexplained", (t) => {
  const code = (c: string) => Object.assign(new Error(c), { code: c });
  t.is(listenStartupError("0.0.0.0", 80, code("EACCES"))?.exitCode, EXIT.noPermission);
  t.regex(listenStartupError("0.0.0.0", 80, code("EACCES"))?.message ?? "", /port 80 \(permission denied\)/);
  t.is(listenStartupError("10.9.9.9", 8080, code("EADDRNOTAVAIL"))?.exitCode, EXIT.config);
  t.is(listenStartupError("0.0.0.0", 8080, code("EMFILE")), null);
  t.regex(
    listenStartupError("0.0.0.0", 8080, code("EADDRINUSE"), { pid: 42 })?.message ?? "",
    /port 8080 is already in use; bitrix-sync is already running there \(pid 42\): stop it with `npm run stop`/,
  );
});
