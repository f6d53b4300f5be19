// The workflows lane steps a claim in groups, each group in one transaction (issue 14). A step that
// fails fails its group: the group is rolled back and every step runs again alone, so the others
// still advance and the failing one is retried as a lone step is.
import { randomUUID } from "node:crypto";
import { Writable } from "node:stream";
import test from "ava";
import type { ServiceContext } from "../../src/context.js";
import { createLogger } from "../../src/observability/logger.js";
import { stepGroups } from "../../src/observability/metrics.js";
import { runWorkflows } from "../../src/workflows/step-lane.js";
import { makeUser } from "../helpers/factories.js";
import { testSettings } from "../helpers/settings.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
  await db.pool.query("select bitrix_sync.perform_cutover('step-groups-test')");
  // A fault for one chosen workflow: its first command cannot be inserted.
  await db.pool.query("create table public.refuse_commands_of (workflow_id uuid primary key)");
  await db.pool.query(`
    create function public.refuse_command() returns trigger language plpgsql as $$
    begin
      if exists (select 1 from public.refuse_commands_of r where r.workflow_id = new.workflow_id) then
        raise exception 'refused by the test' using errcode = 'XX123';
      end if;
      return new;
    end $$`);
  await db.pool.query(
    "create trigger refuse_command before insert on bitrix_sync.crm_commands for each row execute function public.refuse_command()",
  );
});
test.after.always(async () => {
  await db?.drop();
});

function context(lines: string[]): ServiceContext {
  const destination = new Writable({
    write(chunk, _enc, done) {
      lines.push(String(chunk));
      done();
    },
  });
  return {
    pool: db.pool,
    log: createLogger({ level: "debug", destination }),
    settings: () => testSettings(),
    workerId: "step-groups-test",
    // The first step of a map_or_create only reads the App and issues a command: no CRM call.
    crm: undefined as never,
    dictionary: undefined as never,
  };
}

async function startWorkflows(n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const u = await makeUser(db.pool);
    const { rows } = await db.pool.query<{ workflow_id: string }>(
      "select workflow_id from bitrix_sync.start_or_join_workflow($1, 'contact.map_or_create', $2, $3)",
      [u.id, randomUUID(), `h${i}`.padEnd(64, "0")],
    );
    ids.push(rows[0]?.workflow_id as string);
  }
  return ids;
}

const groupsEnded = async (outcome: string) =>
  (await stepGroups.get()).values.find((v) => v.labels.outcome === outcome)?.value ?? 0;

async function states(ids: string[]) {
  const { rows } = await db.pool.query<{ id: string; state: string; code: string | null; commands: number }>(
    `select w.id, w.state, w.last_error_code as code,
            (select count(*)::int from bitrix_sync.crm_commands c where c.workflow_id = w.id) as commands
       from bitrix_sync.workflow_instances w where w.id = any($1::uuid[])`,
    [ids],
  );
  return new Map(rows.map((r) => [r.id, r]));
}

test.serial("a claim's steps run together: each workflow issues its command", async (t) => {
  const ids = await startWorkflows(6);
  const lines: string[] = [];
  const committedBefore = await groupsEnded("committed");
  t.is(await runWorkflows(context(lines)), 6);
  t.is(await groupsEnded("committed"), committedBefore + 1, "one group, committed");
  const after = await states(ids);
  for (const id of ids) {
    t.is(after.get(id)?.state, "waiting_crm");
    t.is(after.get(id)?.commands, 1);
  }
  t.false(lines.some((l) => l.includes("workflow.group_retried")));
  t.is(lines.filter((l) => l.includes('"event":"workflow.step"')).length, 6);
});

test.serial(
  "a step that fails fails its group; the others advance alone, the failing one is retried",
  async (t) => {
    const ids = await startWorkflows(6);
    const bad = ids[3] as string;
    await db.pool.query("insert into public.refuse_commands_of values ($1)", [bad]);
    const lines: string[] = [];
    t.is(await runWorkflows(context(lines)), 6);
    const after = await states(ids);
    for (const id of ids.filter((i) => i !== bad)) {
      t.is(after.get(id)?.state, "waiting_crm");
      t.is(after.get(id)?.commands, 1, "one command, not one per attempt");
    }
    t.is(after.get(bad)?.state, "waiting_retry");
    t.is(after.get(bad)?.code, "step_failed");
    t.is(after.get(bad)?.commands, 0);
    t.true(lines.some((l) => l.includes("workflow.group_retried")));
    const failed = lines.filter((l) => l.includes("workflow.step_failed"));
    t.is(failed.length, 1, "the failure is reported once, by the lone step");
    t.true(failed[0]?.includes(bad));
    t.false(failed[0]?.includes("refused by the test"), "the message of the error is not logged");
  },
);
