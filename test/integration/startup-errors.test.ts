// Startup errors of the real service process (`node --import tsx src/main.ts`): each failing
// condition prints one line on stderr naming the cause and the fix, exits with its own code
// (docs/operations.md), and no secret reaches the output. The cases run one at a time: each starts
// a process that compiles the service, and eight at once on a busy 2-core machine outran any bound.
import { randomBytes } from "node:crypto";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import pg from "pg";
import { freePort } from "../../src/db/embedded.js";
import { releaseSchema } from "../../src/db/schema-window.js";
import { withDatabase } from "../../src/db/url.js";
import { EXIT, LINE_PREFIX } from "../../src/startup/errors.js";
import { prepareSandboxDatabase } from "../../src/startup/sandbox-database.js";
import { makeUser, randomPhone } from "../helpers/factories.js";
import { cleanEnv, type ProcessResult, runService } from "../helpers/run-process.js";
import { createEmptyDb, createTestDb, serverUrl } from "../helpers/testdb.js";

const DB_PASSWORD = "pw-Qx7vLm2Rk9";
const DB_USER = "svc_user_m4k2";
const WEBHOOK_SECRET = "whsecret8f3k2m9q";
const TOKEN = "tok-alert-5b9e1c7d3a0f2e4c6b8a1d3f5e7c";

const dirs: string[] = [];
test.after.always(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "bitrix-sync-startup-"));
  chmodSync(d, 0o755);
  dirs.push(d);
  return d;
}

/** Asserts the exit code, one startup line on stderr matching `line`, and no secret anywhere. */
function assertFailure(t: import("ava").ExecutionContext, r: ProcessResult, code: number, line: RegExp) {
  t.false(r.timedOut, "the process stopped by itself");
  t.is(r.code, code, r.stderr);
  const lines = r.stderr.split("\n").filter((l) => l.startsWith(LINE_PREFIX));
  t.is(lines.length, 1, r.stderr);
  t.regex(lines[0] ?? "", line);
  const all = r.stdout + r.stderr;
  for (const secret of [DB_PASSWORD, DB_USER, WEBHOOK_SECRET, TOKEN]) t.false(all.includes(secret), secret);
  t.false(all.includes("    at "), "no stack trace");
}

test.serial("a taken HTTP port names the port and PORT=, exits 75, and touches no database", async (t) => {
  const holder: Server = createServer();
  await new Promise<void>((resolve) => holder.listen(0, "127.0.0.1", () => resolve()));
  const port = (holder.address() as { port: number }).port;
  try {
    const r = await runService(
      cleanEnv({
        SECRETS_SOURCE: "env",
        HOST: "127.0.0.1",
        PORT: String(port),
        BITRIX_SYNC_DATA_DIR: tempDir(),
        // Never reached: the port is checked first. (Sandbox mode on a configured database needs
        // BITRIX_SYNC_SANDBOX=true.)
        BITRIX_SYNC_SANDBOX: "true",
        BITRIX_SYNC_DATABASE_URL: `postgres://${DB_USER}:${DB_PASSWORD}@127.0.0.1:1/app`,
      }),
    );
    assertFailure(
      t,
      r,
      EXIT.portInUse,
      new RegExp(`port ${port} on 127\\.0\\.0\\.1 is already in use; another process listens there.*PORT=`),
    );
    t.false(r.stdout.includes("db.target"), "no database was selected");
  } finally {
    holder.close();
  }
});

test.serial("an unreachable database names host:port without credentials and exits 69", async (t) => {
  const closed = await freePort();
  const r = await runService(
    cleanEnv({
      SECRETS_SOURCE: "env",
      PORT: "0",
      BITRIX_SYNC_DATA_DIR: tempDir(),
      BITRIX_SYNC_SANDBOX: "true",
      BITRIX_SYNC_DATABASE_URL: `postgres://${DB_USER}:${DB_PASSWORD}@127.0.0.1:${closed}/app`,
    }),
  );
  assertFailure(
    t,
    r,
    EXIT.unavailable,
    new RegExp(
      `the database at 127\\.0\\.0\\.1:${closed} is unreachable \\(connection refused.*BITRIX_SYNC_DATABASE_URL`,
    ),
  );
});

/** A secrets folder for a production-like start, with `omit` left out. */
function secretsDir(omit: string): string {
  const d = tempDir();
  const files: Record<string, string> = {
    BITRIX_SYNC_DATABASE_URL: `postgres://${DB_USER}:${DB_PASSWORD}@127.0.0.1:1/app\n`,
    BITRIX_SYNC_CRM_REST_WEBHOOK_URL: `https://portal.bitrix24.test/rest/1/${WEBHOOK_SECRET}/\n`,
    BITRIX_SYNC_ALERT_RECEIVER_TOKEN: TOKEN,
    BITRIX_SYNC_CONTACT_RECEIVER_TOKEN: `${TOKEN}-contact`,
    BITRIX_SYNC_SERVICE_TOKEN: `${TOKEN}-service`,
    BITRIX_SYNC_HASH_KEY: `${TOKEN}-hash-key`,
  };
  for (const [name, value] of Object.entries(files)) if (name !== omit) writeFileSync(join(d, name), value);
  return d;
}

const PRODUCTION = {
  BITRIX_SYNC_ENABLED: "true",
  BITRIX_SYNC_PORTAL_HOST: "portal.bitrix24.test",
  BITRIX_SYNC_PORTAL_MEMBER_ID: "member-1",
  BITRIX_SYNC_CONTACT_USER_ID_FIELD: "UF_CRM_1",
  BITRIX_SYNC_CONTACT_REGISTERED_FIELD: "UF_CRM_2",
  BITRIX_SYNC_CONTACT_CITIZENSHIP_FIELD: "UF_CRM_3",
  PORT: "0",
};

test.serial(
  "a database that takes no writes (a fenced primary, a standby) is named and exits 69",
  async (t) => {
    const db = await createTestDb({ cutover: false });
    const name = new URL(db.url).pathname.slice(1);
    await db.pool.query(`alter database ${name} set default_transaction_read_only = on`);
    try {
      const dir = secretsDir("none");
      writeFileSync(join(dir, "BITRIX_SYNC_DATABASE_URL"), `${db.url}\n`);
      const r = await runService(
        cleanEnv({
          ...PRODUCTION,
          BITRIX_SYNC_SECRETS_DIR: dir,
          BITRIX_SYNC_DATA_DIR: tempDir(),
          BITRIX_SYNC_MIGRATE_ON_START: "false",
        }),
      );
      const at = new URL(db.url).host.replace(/\./g, "\\.");
      assertFailure(
        t,
        r,
        EXIT.unavailable,
        new RegExp(`the database at ${at} takes no writes .*SQLSTATE 25006`),
      );
    } finally {
      // A pool connection opened after the ALTER is read-only itself: the reset runs in a
      // transaction that asks for writes (a CI run met such a connection under load).
      await db.pool.query(
        `begin read write; alter database ${name} reset default_transaction_read_only; commit`,
      );
      await db.drop();
    }
  },
);

test.serial(
  "a schema outside the compatibility window stops the start with the window named, exit 76",
  async (t) => {
    const own = releaseSchema().number;
    // A newer release's contract step: releases whose schema is before 999998 cannot run here.
    const contracted = await createTestDb({ cutover: false });
    await contracted.pool.query(
      `insert into bitrix_sync.schema_contract_steps (migration, oldest_release_schema, what)
       values ('999999', '999998', 'drops what releases before 999998 read (a test)')`,
    );
    // A database nobody migrated, and the service not asked to migrate it.
    const empty = await createEmptyDb();
    try {
      const at = new URL(contracted.url).host.replace(/\./g, "\\.");
      for (const [url, line] of [
        [
          contracted.url,
          new RegExp(
            `the database at ${at} has schema ${own}, outside the window: this release runs on schema ${own} \\(${own}-[a-z-]+\\) and every later schema whose contract floor is at most ${own}, and contract step 999999 needs a release whose schema is 999998 or later: run a newer release, or restore a backup taken before 999999`,
          ),
        ],
        [
          empty.url,
          new RegExp(
            `the database at ${at} has no migration applied, and this release runs on schema ${own} .*npm run db:migrate`,
          ),
        ],
      ] as const) {
        const dir = secretsDir("none");
        writeFileSync(join(dir, "BITRIX_SYNC_DATABASE_URL"), `${url}\n`);
        const r = await runService(
          cleanEnv({
            ...PRODUCTION,
            BITRIX_SYNC_SECRETS_DIR: dir,
            BITRIX_SYNC_DATA_DIR: tempDir(),
            BITRIX_SYNC_MIGRATE_ON_START: "false",
          }),
        );
        assertFailure(t, r, EXIT.schemaOutsideWindow, line);
        t.regex(r.stdout, /"cause":"schema_outside_window"/);
      }
    } finally {
      await contracted.drop();
      await empty.drop();
    }
  },
);

test.serial("a missing secret file names the secret and the file, and exits 66", async (t) => {
  const dir = secretsDir("BITRIX_SYNC_CONTACT_RECEIVER_TOKEN");
  const r = await runService(
    cleanEnv({ ...PRODUCTION, BITRIX_SYNC_SECRETS_DIR: dir, BITRIX_SYNC_DATA_DIR: tempDir() }),
  );
  assertFailure(
    t,
    r,
    EXIT.secretMissing,
    new RegExp(
      `secret BITRIX_SYNC_CONTACT_RECEIVER_TOKEN is required when BITRIX_SYNC_ENABLED=true, but the file ${dir}/BITRIX_SYNC_CONTACT_RECEIVER_TOKEN is missing`,
    ),
  );
});

// Serial, so it adds no process to those the other tests of this file start at once against their
// 20 s deadlines.
test.serial("a token that breaks the rules is named, never shown, and exits 78", async (t) => {
  const dir = secretsDir("none");
  const weak = "tok-weak-4e1a";
  writeFileSync(join(dir, "BITRIX_SYNC_SERVICE_TOKEN"), `${weak}\n`);
  const r = await runService(
    cleanEnv({ ...PRODUCTION, BITRIX_SYNC_SECRETS_DIR: dir, BITRIX_SYNC_DATA_DIR: tempDir() }),
  );
  assertFailure(
    t,
    r,
    EXIT.config,
    /^bitrix-sync: cannot start: invalid configuration: BITRIX_SYNC_SERVICE_TOKEN: must be 32 to 512 characters long: generate one with `openssl rand -hex 32`\. Fix it and start again\.$/,
  );
  t.false((r.stdout + r.stderr).includes(weak));
});

test.serial("an unreadable secret file names the secret and exits 66", async (t) => {
  const dir = secretsDir("BITRIX_SYNC_DATABASE_URL");
  // A folder where the file should be cannot be read by anyone, root included.
  mkdirSync(join(dir, "BITRIX_SYNC_DATABASE_URL"));
  const r = await runService(
    cleanEnv({ ...PRODUCTION, BITRIX_SYNC_SECRETS_DIR: dir, BITRIX_SYNC_DATA_DIR: tempDir() }),
  );
  assertFailure(
    t,
    r,
    EXIT.secretMissing,
    /secret BITRIX_SYNC_DATABASE_URL: the file .*\/BITRIX_SYNC_DATABASE_URL is a folder, not a file/,
  );
});

test.serial("a secret file without read permission names the secret and exits 66", async (t) => {
  const dir = secretsDir("none");
  chmodSync(join(dir, "BITRIX_SYNC_ALERT_RECEIVER_TOKEN"), 0o000);
  // Root reads any file: run as an unprivileged user then (nobody, 65534).
  const as = process.getuid?.() === 0 ? { uid: 65534, gid: 65534 } : undefined;
  const r = await runService(
    cleanEnv({ ...PRODUCTION, BITRIX_SYNC_SECRETS_DIR: dir, BITRIX_SYNC_DATA_DIR: tempDir() }),
    { as },
  );
  assertFailure(
    t,
    r,
    EXIT.secretMissing,
    /secret BITRIX_SYNC_ALERT_RECEIVER_TOKEN: the file .* is not readable by this process \(permission denied\)/,
  );
});

test.serial("a secrets folder that does not exist is named, and exits 66", async (t) => {
  const dir = join(tempDir(), "no-such-folder");
  const r = await runService(
    cleanEnv({ ...PRODUCTION, BITRIX_SYNC_SECRETS_DIR: dir, BITRIX_SYNC_DATA_DIR: tempDir() }),
  );
  assertFailure(
    t,
    r,
    EXIT.secretMissing,
    new RegExp(`BITRIX_SYNC_SECRETS_DIR: the folder ${dir} does not exist`),
  );
});

test.serial("an invalid variable is named and exits 78", async (t) => {
  const r = await runService(
    cleanEnv({
      SECRETS_SOURCE: "env",
      PORT: "eighty",
      BITRIX_SYNC_DATABASE_URL: `postgres://${DB_USER}:${DB_PASSWORD}@127.0.0.1:1/app`,
      BITRIX_SYNC_DATA_DIR: tempDir(),
    }),
  );
  assertFailure(
    t,
    r,
    EXIT.config,
    /^bitrix-sync: cannot start: invalid configuration: PORT: .*Fix it and start again\.$/,
  );
});

// As root, PostgreSQL runs as the `postgres` system user, which cannot enter a 0700 folder of root's.
(process.getuid?.() === 0 ? test : test.skip)(
  "an embedded PostgreSQL that cannot start names its folder and the fix, and exits 69",
  async (t) => {
    const data = tempDir();
    chmodSync(data, 0o700);
    const r = await runService(cleanEnv({ SECRETS_SOURCE: "env", PORT: "0", BITRIX_SYNC_DATA_DIR: data }));
    assertFailure(
      t,
      r,
      EXIT.unavailable,
      new RegExp(`the embedded PostgreSQL in ${data}/pg did not start \\(.*Permission denied\\).*chmod 755`),
    );
  },
);

// Sandbox mode fails closed (src/config/env.ts, src/startup/sandbox-database.ts): the deployment's
// database, its webhook secret file gone, must not be processed against the emulator.
test.serial(
  "a configured database without the webhook secret file names the secret, exits 66, and processes nothing",
  async (t) => {
    const db = await createTestDb({ cutover: false });
    try {
      const user = await makeUser(db.pool, { phone: randomPhone() });
      const dir = secretsDir("BITRIX_SYNC_CRM_REST_WEBHOOK_URL");
      writeFileSync(join(dir, "BITRIX_SYNC_DATABASE_URL"), `${db.url}\n`);
      const r = await runService(
        cleanEnv({ BITRIX_SYNC_SECRETS_DIR: dir, BITRIX_SYNC_DATA_DIR: tempDir(), PORT: "0" }),
        { timeoutMs: 30_000 },
      );
      assertFailure(
        t,
        r,
        EXIT.secretMissing,
        new RegExp(
          `^bitrix-sync: cannot start: secret BITRIX_SYNC_CRM_REST_WEBHOOK_URL is missing \\(the file ${dir}/BITRIX_SYNC_CRM_REST_WEBHOOK_URL\\) while BITRIX_SYNC_DATABASE_URL names a database: sandbox mode runs only on the embedded database`,
        ),
      );
      const left = await db.pool.query<{ cutovers: number; workflows: number; mappings: number }>(
        `select (select count(*)::int from bitrix_sync.cutover) as cutovers,
                (select count(*)::int from bitrix_sync.workflow_instances where user_id = $1) as workflows,
                (select count(*)::int from bitrix_sync.entity_external_mapping) as mappings`,
        [user.id],
      );
      t.deepEqual(left.rows[0], { cutovers: 0, workflows: 0, mappings: 0 });
    } finally {
      await db.drop();
    }
  },
);

test.serial(
  "BITRIX_SYNC_SANDBOX=true on a database the sandbox did not create is refused, exit 78",
  async (t) => {
    const db = await createTestDb({ cutover: false });
    try {
      const r = await runService(
        cleanEnv({
          SECRETS_SOURCE: "env",
          BITRIX_SYNC_SANDBOX: "true",
          BITRIX_SYNC_DATABASE_URL: db.url,
          BITRIX_SYNC_DATA_DIR: tempDir(),
          PORT: "0",
        }),
        { timeoutMs: 30_000 },
      );
      assertFailure(
        t,
        r,
        EXIT.config,
        /^bitrix-sync: cannot start: BITRIX_SYNC_SANDBOX=true but the database named in BITRIX_SYNC_DATABASE_URL at \S+ was not created by the sandbox/,
      );
      const { rows } = await db.pool.query<{ n: number }>(
        "select count(*)::int as n from bitrix_sync.cutover",
      );
      t.is(rows[0]?.n, 0, "no sandbox cutover");
    } finally {
      await db.drop();
    }
  },
);

test.serial("a real portal on a database the sandbox created is refused, exit 78", async (t) => {
  const name = `bs_sbx_${randomBytes(6).toString("hex")}`;
  const url = withDatabase(serverUrl(), name);
  try {
    t.deepEqual(await prepareSandboxDatabase(url), { created: true });
    t.deepEqual(await prepareSandboxDatabase(url), { created: false }, "its mark is recognised");
    const dir = secretsDir("none");
    writeFileSync(join(dir, "BITRIX_SYNC_DATABASE_URL"), `${url}\n`);
    const r = await runService(
      cleanEnv({ ...PRODUCTION, BITRIX_SYNC_SECRETS_DIR: dir, BITRIX_SYNC_DATA_DIR: tempDir() }),
      { timeoutMs: 30_000 },
    );
    assertFailure(
      t,
      r,
      EXIT.config,
      /^bitrix-sync: cannot start: the database named in BITRIX_SYNC_DATABASE_URL at \S+ was created by the sandbox/,
    );
  } finally {
    const admin = new pg.Client({ connectionString: withDatabase(serverUrl(), "postgres") });
    await admin.connect();
    await admin.query(`drop database if exists ${name} with (force)`).finally(() => admin.end());
  }
});
