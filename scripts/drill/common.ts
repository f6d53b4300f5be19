// What the production drills (`npm run drill:<name>`, docs/reliability.md) share: databases of their
// own on a real PostgreSQL server, the service's settings (activated through the validated path) and
// runtime role, the environment and secrets of its replicas, the emulated portal, waiting for the
// work to settle, a watch for duplicate Contacts, the App's writes, the cleanup of everything a drill
// created, and the checker that prints every invariant it verified. The drill's own PostgreSQL
// clusters are in cluster.ts, the replicas as processes in process.ts, an earlier release in release.ts.
import { randomBytes, randomInt, randomUUID } from "node:crypto";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { withDatabase } from "../../src/db/url.js";
import type { Emulator } from "../../tools/emulator/server.js";
import { phoneKey } from "../../tools/emulator/store.js";
import { openWork } from "../chaos/checks.js";

/** The server the drills create their databases on (trust or a password in the URL). */
export function serverUrl(): string {
  return (
    process.env.DRILL_DATABASE_URL ??
    process.env.TEST_DATABASE_URL ??
    "postgres://postgres@127.0.0.1:5432/postgres"
  );
}

export const MEMBER_ID = "drill-member-0001";
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
export const token = (prefix: string) => `${prefix}-${randomBytes(24).toString("hex")}`;

/** Prints a line with the drill's name and the seconds since it started. */
export function sayer(name: string): (line: string) => void {
  const started = Date.now();
  return (line) =>
    process.stdout.write(`[${name} +${((Date.now() - started) / 1000).toFixed(1)}s] ${line}\n`);
}

export async function withAdmin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: withDatabase(serverUrl(), "postgres") });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** A new empty database on the server; returns its superuser URL. */
export async function createDatabase(name: string): Promise<string> {
  await withAdmin((c) => c.query(`create database ${name}`));
  return withDatabase(serverUrl(), name);
}

export async function dropDatabase(name: string): Promise<void> {
  await withAdmin((c) => c.query(`drop database if exists ${name} with (force)`)).catch(() => undefined);
}

export async function waitUntil(probe: () => Promise<boolean>, boundMs: number): Promise<boolean> {
  const end = Date.now() + boundMs;
  while (Date.now() < end) {
    if (await probe().catch(() => false)) return true;
    await sleep(250);
  }
  return false;
}

/**
 * Activates a settings version through the validated path (propose, validate, activate), proposed and
 * activated by `by`; a version that does not validate throws "<by> settings refused".
 */
export async function activateSettings(pool: pg.Pool, changes: Record<string, unknown>, by = "drill") {
  const { rows } = await pool.query<{ v: number }>("select bitrix_sync.propose_settings($1, $2) as v", [
    JSON.stringify(changes),
    by,
  ]);
  const v = rows[0]?.v;
  const { rows: errs } = await pool.query<{ e: string[] }>(
    "select bitrix_sync.validate_settings_version($1) as e",
    [v],
  );
  if ((errs[0]?.e ?? []).length > 0) throw new Error(`${by} settings refused: ${JSON.stringify(errs[0]?.e)}`);
  await pool.query("select bitrix_sync.activate_settings_version($1, $2)", [v, by]);
}

/** The drills' hot settings: short polls, leases and retries, so a drill takes minutes, not hours. */
export const DRILL_SETTINGS: Record<string, unknown> = {
  "worker.poll_interval_ms": 500,
  "batch.max_wait_ms": 50,
  "lease.ttl_sec": 5,
  "retry.base_ms": 100,
  "retry.max_ms": 2000,
  "reconcile.lease_sec": 60,
  "reconcile.contacts_interval_sec": 60,
  "reconcile.overlap_sec": 10,
};

/**
 * Cutover, settings and the runtime role's LOGIN on a migrated database; returns the runtime role's
 * URL (roles are cluster-wide: the password is set for this run; on a trust server it is not asked).
 */
export async function prepareDatabase(
  url: string,
  settings: Record<string, unknown> = DRILL_SETTINGS,
): Promise<{ serviceUrl: string; password: string }> {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  try {
    await pool.query("select * from bitrix_sync.perform_cutover('drill')");
    await activateSettings(pool, settings);
  } finally {
    await pool.end();
  }
  return runtimeUrl(url);
}

/**
 * A passed write probe recorded for the emulator's portal, as on a deployment where `npm run
 * preflight -- --write` passed: readiness is then not degraded by crm_contract_unconfirmed.
 */
export async function confirmContract(db: pg.Pool | pg.Client, portalHost: string): Promise<void> {
  await db.query(
    "select bitrix_sync.record_crm_contract_probe($1, bitrix_sync.crm_contract_forms(), 'd0d0d0d0')",
    [portalHost],
  );
}

/** The runtime role's URL for a database; LOGIN granted as deployment does. */
export async function runtimeUrl(url: string): Promise<{ serviceUrl: string; password: string }> {
  const password = randomBytes(18).toString("base64url");
  await withAdmin((c) => c.query(`alter role bitrix_sync_user login password '${password}'`));
  const u = new URL(url);
  u.username = "bitrix_sync_user";
  u.password = password;
  return { serviceUrl: u.toString(), password };
}

/**
 * The replicas' environment for one database: secrets as files in `dir`/secrets-<tag>, as deployed,
 * and the data folder `dir`/data-<tag>. The receiver tokens are the same for every database of a run
 * (the portal's robots keep theirs).
 */
export function replicaEnv(
  dir: string,
  tag: string,
  databaseUrl: string,
  emulator: Emulator,
  tokens: { contact: string; alert: string; service: string; hash: string },
): Record<string, string> {
  const secretsDir = join(dir, `secrets-${tag}`);
  mkdirSync(secretsDir, { mode: 0o700, recursive: true });
  const secrets: Record<string, string> = {
    BITRIX_SYNC_DATABASE_URL: databaseUrl,
    BITRIX_SYNC_CRM_REST_WEBHOOK_URL: emulator.url,
    BITRIX_SYNC_CONTACT_RECEIVER_TOKEN: tokens.contact,
    BITRIX_SYNC_ALERT_RECEIVER_TOKEN: tokens.alert,
    BITRIX_SYNC_SERVICE_TOKEN: tokens.service,
    BITRIX_SYNC_HASH_KEY: tokens.hash,
  };
  for (const [k, v] of Object.entries(secrets)) writeFileSync(join(secretsDir, k), `${v}\n`, { mode: 0o600 });
  return {
    PATH: process.env.PATH ?? "",
    HOME: process.env.HOME ?? "/tmp",
    SECRETS_SOURCE: "file",
    BITRIX_SYNC_SECRETS_DIR: secretsDir,
    BITRIX_SYNC_ENABLED: "true",
    BITRIX_SYNC_PORTAL_HOST: emulator.host,
    BITRIX_SYNC_PORTAL_MEMBER_ID: MEMBER_ID,
    BITRIX_SYNC_CONTACT_USER_ID_FIELD: SANDBOX_FIELDS.userId,
    BITRIX_SYNC_CONTACT_REGISTERED_FIELD: SANDBOX_FIELDS.registered,
    BITRIX_SYNC_CONTACT_CITIZENSHIP_FIELD: SANDBOX_FIELDS.citizenship,
    BITRIX_SYNC_HTTP_TIMEOUT_SEC: "2",
    BITRIX_SYNC_MIGRATE_ON_START: "false",
    BITRIX_SYNC_DATA_DIR: join(dir, `data-${tag}`),
    PORT: "0",
    HOST: "127.0.0.1",
    LOG_LEVEL: "info",
  };
}

export function newTokens() {
  return { contact: token("contact"), alert: token("alert"), service: token("service"), hash: token("hash") };
}

/** Waits until no machine has open work; false after `boundMs`. */
export async function settle(pool: pg.Pool, boundMs: number): Promise<boolean> {
  return await waitUntil(async () => Object.values(await openWork(pool)).every((n) => n === 0), boundMs);
}

/**
 * Watches the portal for duplicate Contacts at every moment of a drill, not only at its end: two
 * Contacts carrying one user id, or one phone number on two Contacts (every phone of a drill is new,
 * so a second Contact with it is one the service created twice). Contacts in `shared` (a rebind's pair, the CRM team's duplicates) are left out.
 */
export class DuplicateWatch {
  readonly seen = new Map<string, string>();
  samples = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly emulator: Emulator,
    private readonly userIdField: string,
    private readonly shared: ReadonlySet<number> = new Set(),
  ) {}

  start(everyMs = 250) {
    this.timer = setInterval(() => this.sample(), everyMs);
  }

  stop() {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.sample();
  }

  sample() {
    this.samples++;
    const byUser = new Map<string, number[]>();
    const byPhone = new Map<string, number[]>();
    for (const c of this.emulator.store.contacts.values()) {
      // A rebind's pair carries the user id on both Contacts for a moment, by design.
      if (this.shared.has(c.id)) continue;
      const u = c.uf[this.userIdField];
      if (typeof u === "string" && u !== "") byUser.set(u, [...(byUser.get(u) ?? []), c.id]);
      for (const p of new Set(c.phones.map((x) => phoneKey(x.value))))
        byPhone.set(p, [...(byPhone.get(p) ?? []), c.id]);
    }
    for (const [u, ids] of byUser)
      if (ids.length > 1) this.note(`user:${u}`, `user ${u} carried by Contacts ${ids.join(", ")}`);
    for (const ids of byPhone.values())
      if (ids.length > 1) this.note(`phone:${ids.join(",")}`, `one phone on Contacts ${ids.join(", ")}`);
  }

  private note(key: string, what: string) {
    if (!this.seen.has(key)) this.seen.set(key, `${new Date().toISOString().slice(11, 23)} ${what}`);
  }
}

/**
 * Records named invariants, prints each as it is checked (with the violations it found), and counts
 * the violations: a drill exits 1 on one.
 */
export class Checker {
  readonly results: { name: string; ok: boolean; detail: string[] }[] = [];

  check(name: string, violations: string[] | boolean, detail?: string): boolean {
    const list =
      typeof violations === "boolean" ? (violations ? [] : [detail ?? "does not hold"]) : violations;
    const ok = list.length === 0;
    this.results.push({ name, ok, detail: list });
    process.stdout.write(`  ${ok ? "ok  " : "FAIL"}  ${name}${ok && detail ? ` (${detail})` : ""}\n`);
    for (const d of list.slice(0, 20)) process.stdout.write(`         - ${d}\n`);
    if (list.length > 20) process.stdout.write(`         ... and ${list.length - 20} more\n`);
    return ok;
  }

  get violations(): number {
    return this.results.filter((r) => !r.ok).length;
  }
}

/**
 * The violations of chaos/checks.ts's checkInvariants, split by the invariant they break, so the
 * checker prints each invariant by name.
 */
export const INVARIANT_GROUPS: [string, RegExp][] = [
  ["every active user has exactly one active link", /active mappings|is mapped to Contact/],
  [
    "every active user's Contact carries its user id, its phone and the active flag",
    /of (active )?user .* (does not carry|not flagged active)/,
  ],
  ["every active user's CRM-master fields equal its Contact's", /App (full_name|email|citizenship) differs/],
  ["no inactive user keeps an active link or a Contact flagged active", /^inactive user/],
  ["no Contact serves two active users", /serves \d+ active users/],
  ["one Contact per user id, no phone on two Contacts", /has \d+ Contacts|one phone on/],
  ["numbers a manager added are kept", /lost a phone number a manager added/],
  ["every business alert mirrored once", /^alert /],
  [
    "every intent settled: nothing open, leased, dead-lettered or failed",
    /rows not settled|dead_letter|workflow (failed|waiting_manual)|rebind request|still hold a lease|technical dead letters/,
  ],
];

export function byInvariant(violations: string[]): Map<string, string[]> {
  const out = new Map<string, string[]>(INVARIANT_GROUPS.map(([n]) => [n, []]));
  for (const v of violations) {
    const g = INVARIANT_GROUPS.find(([, re]) => re.test(v));
    const name = g?.[0] ?? "other";
    out.set(name, [...(out.get(name) ?? []), v]);
  }
  return out;
}

const sayCleanup = sayer("cleanup");

/**
 * Everything a drill created, undone in reverse order at the end, on failure and on SIGINT/SIGTERM;
 * `sync` parts also on a sudden exit of the drill.
 */
export class Cleanup {
  private readonly steps: { what: string; run: () => Promise<void> | void; sync?: () => void }[] = [];
  private done = false;

  constructor() {
    process.on("exit", () => {
      if (this.done) return;
      for (const s of [...this.steps].reverse()) {
        try {
          s.sync?.();
        } catch {
          // best effort on the way out
        }
      }
    });
    for (const sig of ["SIGINT", "SIGTERM"] as const) {
      process.once(sig, () => {
        sayCleanup(`${sig}: removing what the drill created`);
        void this.run().finally(() => process.exit(130));
      });
    }
  }

  add(what: string, run: () => Promise<void> | void, sync?: () => void): void {
    this.steps.push({ what, run, ...(sync ? { sync } : {}) });
  }

  async run(): Promise<string[]> {
    const failed: string[] = [];
    while (this.steps.length > 0) {
      const s = this.steps.pop();
      if (!s) break;
      try {
        await s.run();
      } catch (e) {
        failed.push(`${s.what}: ${e instanceof Error ? e.message : String(e)}`);
        try {
          s.sync?.();
        } catch {
          // reported above
        }
      }
    }
    this.done = true;
    return failed;
  }
}

/** Removes a folder (and the drill's server logs beside it). */
export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/** A valid Russian phone no other user of the drill has had. */
export function newPhone(taken: Set<string>): string {
  for (;;) {
    const p = `+79${String(randomInt(0, 1_000_000_000)).padStart(9, "0")}`;
    if (!taken.has(p)) {
      taken.add(p);
      return p;
    }
  }
}

/** One App transaction as han_app_user (the App's role), so the App's trigger records the intent. */
async function appTx(pool: pg.Pool, fn: (c: pg.PoolClient) => Promise<void>): Promise<boolean> {
  let c: pg.PoolClient | null = null;
  try {
    c = await pool.connect();
    c.on("error", () => undefined);
    await c.query("begin");
    await c.query("set local role han_app_user");
    await fn(c);
    await c.query("commit");
    return true;
  } catch {
    await c?.query("rollback").catch(() => undefined);
    return false;
  } finally {
    c?.release(true);
  }
}

/** A user signs up in the App (identity and profile in one statement); false when the App's write failed. */
export function signUp(pool: pg.Pool, id: string, phone: string, name: string): Promise<boolean> {
  return appTx(pool, async (c) => {
    await c.query(
      `with u as (insert into han_app.user_identity (id, phone_number, record_status) values ($1, $2, 'active') returning id)
       insert into han_app.client_profile (id, user_id, full_name, record_status) select $3, id, $4, 'active' from u`,
      [id, phone, randomUUID(), name],
    );
  });
}

/** A user changes the phone in the App; false when the App's write failed. */
export function changePhone(pool: pg.Pool, id: string, phone: string): Promise<boolean> {
  return appTx(pool, async (c) => {
    await c.query("update han_app.user_identity set phone_number = $2, updated_at = now() where id = $1", [
      id,
      phone,
    ]);
  });
}
