// `npm run bench:search-path`: what a pinned search_path (`SET search_path = pg_catalog, pg_temp` on
// the function) costs the SQL-language functions that sit on a hot path. PostgreSQL never inlines a
// SQL function that carries a SET clause: its body is then planned and run on its own, per call or
// per statement, instead of becoming part of the calling statement's (cached) plan. Migration 000028
// leaves the functions where this costs unpinned, with every operator and name qualified.
//
// One backend, one freshly migrated database of its own (created and dropped here) on
// TEST_DATABASE_URL's server or, without it, on an embedded PostgreSQL. For each call site below, the
// same statement runs BENCH_CALLS times with the functions it uses as they are and with their
// search_path pinned (ALTER FUNCTION ... SET / RESET, so the bodies are the same), alternating, three
// passes each; it prints the backend's CPU time per call (from /proc; wall time when the server's
// /proc is not readable here), median of the passes, and the difference.
//
// Knobs: BENCH_CALLS (default 4000; the PL/pgSQL loops run ten times as many).
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { startEmbedded } from "../src/db/embedded.js";
import { migrateDatabase } from "../src/db/migrate.js";
import { withDatabase } from "../src/db/url.js";

const CALLS = Number(process.env.BENCH_CALLS ?? 4000);
// PL/pgSQL loops cost a few microseconds an iteration: more of them, for the /proc clock's 10 ms ticks.
const LOOP_CALLS = CALLS * 10;

interface CallSite {
  name: string;
  /** The functions (regprocedure) whose search_path is toggled. */
  functions: string[];
  /** How many calls one run makes. */
  calls: number;
  /** One run: `calls` calls. */
  run(c: pg.Client): Promise<void>;
}

/** `n` round trips of one statement, each its own transaction (as the service sends them). */
function clientCalls(sql: string, params: unknown[], n: number) {
  return async (c: pg.Client) => {
    for (let i = 0; i < n; i++) await c.query(sql, params);
  };
}

/** A PL/pgSQL loop of `n` iterations in one rolled-back transaction (plans cached as in a function). */
function plpgsqlLoop(declare: string, body: string, n: number) {
  return async (c: pg.Client) => {
    await c.query("begin");
    try {
      await c.query(
        `do $bench$ declare ${declare} begin for i in 1..${n} loop ${body} end loop; end $bench$`,
      );
    } finally {
      await c.query("rollback");
    }
  };
}

const TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

const sites: CallSite[] = [
  {
    name: "accept_webhooks, 500 events a call (_trace_context per event)",
    functions: ["bitrix_sync._trace_context(text)"],
    calls: Math.max(1, Math.round(CALLS / 500)) * 500,
    run: async (c) => {
      for (let k = 0; k < Math.max(1, Math.round(CALLS / 500)); k++) {
        await c.query("begin");
        try {
          await c.query(
            `select count(*) from bitrix_sync.accept_webhooks(
               array_fill('contact'::text, array[500]), array_fill(3, array[500]),
               (select array_agg((1000 + i)::text) from generate_series(1, 500) i),
               array_fill(null::inet, array[500]), array_fill($1::text, array[500]))`,
            [TRACE],
          );
        } finally {
          await c.query("rollback");
        }
      }
    },
  },
  {
    name: "INSERT of a workflow in PL/pgSQL (deadline_at default _retry_deadline(now()))",
    functions: ["bitrix_sync._retry_deadline(timestamp with time zone)"],
    calls: LOOP_CALLS,
    run: plpgsqlLoop(
      "",
      `insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id)
       values ('contact.update', 'contact.update', gen_random_uuid());`,
      LOOP_CALLS,
    ),
  },
  {
    name: "a workflow's retry horizon in PL/pgSQL (_retry_deadline(_workflow_first_attempt(row)))",
    functions: [
      "bitrix_sync._retry_deadline(timestamp with time zone)",
      "bitrix_sync._workflow_first_attempt(bitrix_sync.workflow_instances)",
    ],
    calls: LOOP_CALLS,
    run: plpgsqlLoop(
      "r bitrix_sync.workflow_instances; d timestamptz;",
      "r.created_at := now(); d := bitrix_sync._retry_deadline(bitrix_sync._workflow_first_attempt(r));",
      LOOP_CALLS,
    ),
  },
  {
    name: "a command's retry horizon in PL/pgSQL (_retry_deadline(_command_first_attempt(row)))",
    functions: [
      "bitrix_sync._retry_deadline(timestamp with time zone)",
      "bitrix_sync._command_first_attempt(bitrix_sync.crm_commands)",
    ],
    calls: LOOP_CALLS,
    run: plpgsqlLoop(
      "r bitrix_sync.crm_commands; d timestamptz;",
      "r.created_at := now(); d := bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(r));",
      LOOP_CALLS,
    ),
  },
  {
    name: "claim_commands' write test in PL/pgSQL (_is_write_command)",
    functions: ["bitrix_sync._is_write_command(text)"],
    calls: LOOP_CALLS,
    run: plpgsqlLoop(
      "n integer := 0; t text := 'contact.add';",
      "if bitrix_sync._is_write_command(t) then n := n + 1; end if;",
      LOOP_CALLS,
    ),
  },
  {
    name: "alerts_to_look_up(20) from the client (the alert lane, every round)",
    functions: ["bitrix_sync.alerts_to_look_up(integer)", "bitrix_sync._alert_add_unsafe(bigint)"],
    calls: CALLS,
    run: clientCalls(
      "select alert_id, alert_number, alert_type, fingerprint from bitrix_sync.alerts_to_look_up($1)",
      [20],
      CALLS,
    ),
  },
  {
    name: "blocked_crm_methods(bucket) from the client (the pump, every batch)",
    functions: ["bitrix_sync.blocked_crm_methods(text)"],
    calls: CALLS,
    run: clientCalls(
      "select method, blocked_until from bitrix_sync.blocked_crm_methods($1)",
      ["portal"],
      CALLS,
    ),
  },
  {
    name: "claim_workflows on an empty backlog from the client (cutover_performed)",
    functions: ["bitrix_sync.cutover_performed()"],
    calls: CALLS,
    run: clientCalls(
      "select * from bitrix_sync.claim_workflows($1, 10, interval '60 seconds')",
      ["bench"],
      CALLS,
    ),
  },
  {
    name: "active_mapping_for_contact from the client (the webhooks lane, per Contact)",
    functions: ["bitrix_sync.active_mapping_for_contact(text)"],
    calls: CALLS,
    run: clientCalls("select * from bitrix_sync.active_mapping_for_contact($1)", ["4711"], CALLS),
  },
];

/** CPU time (ms) a server backend has used, from /proc; null when the server is not on this machine. */
function backendCpuMs(pid: number): number | null {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
    return ((Number(f[11]) + Number(f[12])) * 1000) / 100; // utime + stime, in USER_HZ (100)
  } catch {
    return null;
  }
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
}

async function setPinned(c: pg.Client, fns: string[], pinned: boolean): Promise<void> {
  for (const f of fns)
    await c.query(
      pinned
        ? `alter function ${f} set search_path = pg_catalog, pg_temp`
        : `alter function ${f} reset search_path`,
    );
}

async function main(): Promise<number> {
  let serverUrl = process.env.TEST_DATABASE_URL;
  let stopEmbedded: (() => Promise<void>) | undefined;
  let dir: string | undefined;
  if (!serverUrl) {
    dir = mkdtempSync(join(tmpdir(), "bitrix-sync-bench-"));
    const srv = await startEmbedded({ dir, persistent: false });
    serverUrl = srv.url;
    stopEmbedded = srv.stop;
  }
  const dbName = `bs_bench_search_path_${randomBytes(4).toString("hex")}`;
  const admin = new pg.Client({ connectionString: withDatabase(serverUrl, "postgres") });
  await admin.connect();
  await admin.query(`create database ${dbName}`);
  const dbUrl = withDatabase(serverUrl, dbName);
  // The backend measured; a second connection toggles the pins, so the measured backend sees each
  // change as a catalogue invalidation, as a session of the service would after a migration.
  const c = new pg.Client({ connectionString: dbUrl });
  const ddl = new pg.Client({ connectionString: dbUrl });
  try {
    await migrateDatabase(dbUrl);
    await c.connect();
    await ddl.connect();
    await c.query("select * from bitrix_sync.perform_cutover('bench')");
    const pid = (await c.query<{ p: number }>("select pg_backend_pid() as p")).rows[0]?.p as number;
    const cpu = backendCpuMs(pid) !== null;
    const version = (await c.query<{ v: string }>("select current_setting('server_version') as v")).rows[0]
      ?.v;
    console.log(
      `search_path bench: PostgreSQL ${version}, ${CALLS} calls a run, ${cpu ? "backend CPU time" : "wall time"} per call, ` +
        `median of 3 passes; load ${loadavg()[0]?.toFixed(2)}`,
    );
    for (const site of sites) {
      const got: Record<"as is" | "pinned", number[]> = { "as is": [], pinned: [] };
      const was = (
        await ddl.query<{ f: string; pinned: boolean }>(
          `select p.oid::regprocedure::text as f,
                  exists (select 1 from unnest(p.proconfig) s where s like 'search_path=%') as pinned
             from pg_proc p where p.oid = any ($1::regprocedure[])`,
          [site.functions],
        )
      ).rows;
      const state = was.map(
        (w) => `${w.f.replace(/^bitrix_sync\./, "")}: ${w.pinned ? "pinned" : "not pinned"}`,
      );
      // Warm-up (caches, plans), not counted.
      await site.run(c);
      for (let pass = 0; pass < 3; pass++) {
        for (const pinned of pass % 2 === 0 ? [false, true] : [true, false]) {
          await setPinned(ddl, site.functions, pinned);
          await site.run(c); // the first run after the change re-plans; not counted
          const w0 = performance.now();
          const c0 = cpu ? (backendCpuMs(pid) as number) : 0;
          await site.run(c);
          const ms = cpu ? (backendCpuMs(pid) as number) - c0 : performance.now() - w0;
          got[pinned ? "pinned" : "as is"].push((ms * 1000) / site.calls);
        }
      }
      // Back to what the migrations left.
      for (const w of was) await setPinned(ddl, [w.f], w.pinned);
      const a = median(got["as is"]);
      const p = median(got.pinned);
      console.log(`  ${site.name}`);
      console.log(
        `    unpinned ${a.toFixed(1)} µs, pinned ${p.toFixed(1)} µs per call: pinning adds ${(p - a).toFixed(1)} µs (${state.join("; ")})`,
      );
    }
    console.log(
      `  load now ${loadavg()
        .map((x) => x.toFixed(2))
        .join(" ")}`,
    );
    return 0;
  } finally {
    await c.end().catch(() => undefined);
    await ddl.end().catch(() => undefined);
    await admin.query(`drop database if exists ${dbName} with (force)`);
    await admin.end();
    await stopEmbedded?.();
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
}

process.exitCode = await main();
