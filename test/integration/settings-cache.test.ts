// The settings cache parses each active version once with the one schema. A version the schema
// refuses (the catalogue was changed ahead of the code) never takes effect: the last good version
// stays in use, the refusal is logged once, and readiness and status show it.
import { Writable } from "node:stream";
import test from "ava";
import { loadConfig } from "../../src/config/env.js";
import { HealthState } from "../../src/health/state.js";
import { createApp } from "../../src/http/app.js";
import { createLogger } from "../../src/observability/logger.js";
import { createSettingsCache, SettingsError } from "../../src/settings-cache.js";
import { classifyStartupError, EXIT } from "../../src/startup/errors.js";
import { createMemoryLimiter } from "../helpers/memory-limiter.js";
import { setSettings } from "../helpers/settings.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

function capture() {
  const lines: string[] = [];
  const log = createLogger({
    destination: new Writable({
      write(chunk, _enc, cb) {
        lines.push(String(chunk));
        cb();
      },
    }),
  });
  return { lines, log };
}

test.serial(
  "a version that does not parse never takes effect; the last good one stays, visibly",
  async (t) => {
    const { lines, log } = capture();
    const cache = await createSettingsCache(db.pool, { log, intervalMs: 3_600_000 });
    t.teardown(() => cache.stop());
    const first = cache.get();
    t.is(cache.version(), 1);
    t.is(first.batch.size, 20);
    await cache.refresh();
    t.is(cache.get(), first, "the same object while the version is the same");

    const good = await setSettings(db, { "batch.size": 30 });
    await cache.refresh();
    t.is(cache.version(), good);
    t.is(cache.get().batch.size, 30);
    t.is(cache.problem(), null);

    // A DBA widens the catalogue before the service knows the new bound: the database validates
    // batch.size = 80, the service's schema (the portal's maximum, 50) does not.
    await db.pool.query("update bitrix_sync.settings set max_value = 100 where key = 'batch.size'");
    t.teardown(() =>
      db.pool
        .query("update bitrix_sync.settings set max_value = 50 where key = 'batch.size'")
        .then(() => undefined),
    );
    const bad = await setSettings(db, { "batch.size": 80 });
    await cache.refresh();
    await cache.refresh();
    t.is(cache.version(), good, "still on the last good version");
    t.is(cache.get().batch.size, 30);
    t.deepEqual(cache.problem(), { code: "settings_unparsable", version: bad });
    const logged = lines.filter((l) => l.includes('"settings.unparsable"'));
    t.is(logged.length, 1, "logged once, not on every refresh");
    t.regex(logged[0] ?? "", /batch\.size/);

    const app = createApp({
      pool: db.pool,
      log,
      status: {
        config: loadConfig({
          SECRETS_SOURCE: "env",
          BITRIX_SYNC_SERVICE_TOKEN: "settings-cache-token-1-0123456789abcdef",
        }),
        health: Object.assign(new HealthState(), { loopBeatAt: Date.now() }),
        limiter: createMemoryLimiter({ settings: () => cache.get().limiter }),
        settings: cache,
      },
    });
    const ready = await app.request("/health/ready");
    t.is(ready.status, 200);
    t.like(await ready.json(), { status: "degraded", problems: ["settings_unparsable"] });
    const status = await app.request("/internal/sync/v1/status", {
      headers: { authorization: "Bearer settings-cache-token-1-0123456789abcdef" },
    });
    t.like(await status.json(), { settings_version: good, settings_refused_version: bad });

    const fixed = await setSettings(db, { "batch.size": 40 });
    await cache.refresh();
    t.is(cache.version(), fixed);
    t.is(cache.get().batch.size, 40);
    t.is(cache.problem(), null);
  },
);

test.serial("with no good version to fall back on, the cache refuses to start and says why", async (t) => {
  await db.pool.query("update bitrix_sync.settings set max_value = 100 where key = 'batch.size'");
  t.teardown(() =>
    db.pool
      .query("update bitrix_sync.settings set max_value = 50 where key = 'batch.size'")
      .then(() => undefined),
  );
  const v = await setSettings(db, { "batch.size": 80 });
  const err = await t.throwsAsync(() => createSettingsCache(db.pool), { instanceOf: SettingsError });
  t.is(err?.message, `settings version ${v} does not parse: batch.size: Too big: expected number to be <=50`);
  // At startup it is a failure a person can act on (exit 78), not an unexplained crash; the line
  // names the key, never the value.
  const startup = classifyStartupError(err);
  t.is(startup?.reason, "settings_invalid");
  t.is(startup?.exitCode, EXIT.config);
  t.regex(startup?.lines[0] ?? "", /batch\.size: Too big.*rollback_settings/);
  t.false((startup?.lines[0] ?? "").includes("80"), "the refused value is not shown");
});
