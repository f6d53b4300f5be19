// `npm run bench:path`: what one CRM command's SQL costs the server, in one backend, with nothing
// else running: the figure bench:engine's server CPU per command is made of, without the service,
// the emulator, the step lane's concurrency or the machine's other work moving it. Each cycle runs
// the engine's statements for a batch of workflows, as the service sends them: claim_workflows, the
// batch's issue in one call of issue_commands (the statement batcher's set form, since 000049),
// claim_commands, send_commands, complete_commands (which wakes the workflows for the next cycle).
// Each pass is run twice, alternately: once so, once with the issue as the grouped form sent it
// before 000049 (issue_command per workflow, in one statement), so the two compare in one run.
// Run as the runtime role (bitrix_sync_user), on a database of its own (createTestDb: the
// TEST_DATABASE_URL server, else an embedded one through `npm run bench:path`). The backend's CPU is
// read from /proc/<pid>/schedstat (nanoseconds), so the server must run on this machine.
// Environment: BENCH_BATCH (workflows per cycle, 50), BENCH_CYCLES (cycles per pass, 40),
// BENCH_PASSES (5; the median is printed), BENCH_HISTORY (finished workflows and commands already in
// the tables, 20 000: a running installation's indexes, not empty ones).
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { createTestDb } from "../test/helpers/testdb.js";

const BATCH = Number(process.env.BENCH_BATCH ?? 50);
const CYCLES = Number(process.env.BENCH_CYCLES ?? 40);
const PASSES = Number(process.env.BENCH_PASSES ?? 5);
const HISTORY = Number(process.env.BENCH_HISTORY ?? 20_000);
/** The issue as the step lane sends it (set: issue_commands, since 000049) and as it did before. */
type IssueForm = "set" | "single";
const FORMS: IssueForm[] = ["set", "single"];

function cpuNs(pid: number): number {
  return Number(readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ")[0]);
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
}

const db = await createTestDb();
const c = await db.pool.connect();
try {
  // History: finished workflows, each with a succeeded command, so the indexes are not empty ones.
  await c.query(
    `with w as (
       insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id)
       select 'contact.update', 'contact.update', gen_random_uuid() from generate_series(1, $1::integer)
       returning id)
     insert into bitrix_sync.crm_commands (workflow_id, command_type, params) select id, 'contact.read', '{}' from w`,
    [HISTORY],
  );
  await c.query(`alter table bitrix_sync.workflow_instances disable trigger user;
                 alter table bitrix_sync.crm_commands disable trigger user;
                 update bitrix_sync.workflow_instances set state = 'succeeded', finished_at = now();
                 update bitrix_sync.crm_commands set status = 'succeeded', completed_at = now();
                 alter table bitrix_sync.workflow_instances enable trigger user;
                 alter table bitrix_sync.crm_commands enable trigger user;`);
  await c.query("vacuum analyze bitrix_sync.workflow_instances");
  await c.query("vacuum analyze bitrix_sync.crm_commands");
  await c.query(
    `insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id)
     select 'contact.update', 'contact.update', gen_random_uuid() from generate_series(1, $1::integer)`,
    [BATCH],
  );
  await c.query("set role bitrix_sync_user");
  const pid = (await c.query<{ pid: number }>("select pg_backend_pid() as pid")).rows[0]?.pid as number;

  async function cycle(form: IssueForm): Promise<number> {
    const wfs = (
      await c.query<{ id: string; lease_token: string }>(
        "select id, lease_token from bitrix_sync.claim_workflows('path', $1, interval '60 seconds')",
        [BATCH],
      )
    ).rows;
    if (form === "set") {
      // What the step lane sends for a group's issues since 000049 (issue_command's set form).
      await c.query(
        `select count(*) from bitrix_sync.issue_commands($1::uuid[], $2::uuid[],
           array_fill('contact.read'::text, array[$3::integer]), array_fill('{"id": "1"}'::jsonb, array[$3::integer]),
           array_fill('read'::text, array[$3::integer]), array_fill(null::text, array[$3::integer]),
           array_fill('{"pass": 1}'::jsonb, array[$3::integer]))`,
        [wfs.map((w) => w.id), wfs.map((w) => w.lease_token), wfs.length],
      );
    } else {
      // The grouped form before 000049: issue_command once per workflow, in one statement.
      await c.query(
        `select bitrix_sync.issue_command(w, t, 'contact.read', jsonb_build_object('id', '1'), 'read', null,
                                          '{"pass": 1}')
           from unnest($1::uuid[], $2::uuid[]) as u(w, t)`,
        [wfs.map((w) => w.id), wfs.map((w) => w.lease_token)],
      );
    }
    const cmds = (
      await c.query<{ id: string; lease_token: string }>(
        "select id, lease_token from bitrix_sync.claim_commands('path', $1, interval '60 seconds')",
        [BATCH],
      )
    ).rows;
    await c.query("select bitrix_sync.send_commands($1::bigint[], $2::uuid[], gen_random_uuid(), null)", [
      cmds.map((x) => x.id),
      cmds.map((x) => x.lease_token),
    ]);
    await c.query("select bitrix_sync.complete_commands($1::bigint[], $2::uuid[], $3::jsonb[])", [
      cmds.map((x) => x.id),
      cmds.map((x) => x.lease_token),
      cmds.map(() => ({ ID: "1" })),
    ]);
    return cmds.length;
  }

  // Plans cached, as in a running service; then the two forms of the issue alternately, pass by pass.
  for (const form of FORMS) await cycle(form);
  const perCommand: Record<IssueForm, number[]> = { set: [], single: [] };
  const wall: Record<IssueForm, number[]> = { set: [], single: [] };
  for (let p = 0; p < PASSES; p++) {
    for (const form of FORMS) {
      const cpu0 = cpuNs(pid);
      const t0 = process.hrtime.bigint();
      let n = 0;
      for (let i = 0; i < CYCLES; i++) n += await cycle(form);
      wall[form].push(Number(process.hrtime.bigint() - t0) / 1e6 / n);
      perCommand[form].push((cpuNs(pid) - cpu0) / 1e6 / n);
    }
  }
  console.log(
    `bench:path — one backend as bitrix_sync_user, ${BATCH} workflows a cycle, ${CYCLES} cycles a pass, ${PASSES} passes, ` +
      `${HISTORY} finished workflows and commands beside; load average ${loadavg()
        .map((l) => l.toFixed(2))
        .join(" ")}`,
  );
  for (const form of FORMS) {
    const issue = form === "set" ? "issue_commands (one call a cycle)" : "issue_command per workflow";
    console.log(
      `  server CPU per command (claim_workflows, ${issue}, claim_commands, send_commands, complete_commands): ` +
        `median ${median(perCommand[form]).toFixed(3)} ms (passes ${perCommand[form].map((x) => x.toFixed(3)).join(", ")}); ` +
        `wall ${median(wall[form]).toFixed(3)} ms`,
    );
  }
} finally {
  c.release();
  await db.drop();
}
