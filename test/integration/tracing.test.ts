// Traces (issue 12, docs/observability.md): the real service process exporting OTLP/HTTP to a
// receiver written here. One App->CRM sync and one robot webhook give the span trees the docs
// describe, linked across the durable queue; a command resent by another process after a crash is
// still traced under the step that issued it; a forced reconciliation run is a trace of its own; a
// collector that hangs neither slows nor breaks the service; and nothing personal or secret is in
// any exported byte or log line.
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import test, { type ExecutionContext } from "ava";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { projectRoot } from "../../src/local/project-root.js";
import { type Emulator, startEmulator } from "../../tools/emulator/server.js";
import { TEST_CONTACT_TOKEN, TEST_MEMBER_ID, waitFor } from "../helpers/e2e.js";
import { randomPhone } from "../helpers/factories.js";
import { type ExportedSpan, startOtlpReceiver } from "../helpers/otlp-receiver.js";
import { type ServiceProcess, serviceEnv, startService } from "../helpers/service-process.js";
import { setSettings } from "../helpers/settings.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

const SERVICE_VERSION_IN_PACKAGE_JSON = (
  JSON.parse(readFileSync(join(projectRoot, "package.json"), "utf8")) as { version: string }
).version;

/** A commit as the image's build argument would carry it. */
const IMAGE_REVISION = "89abcdef0123456789abcdef0123456789abcdef";

let db: TestDb;
let emulator: Emulator;
test.before(async () => {
  db = await createTestDb();
  await setSettings(db, {
    "worker.poll_interval_ms": 300,
    "batch.max_wait_ms": 20,
    "lease.ttl_sec": 5,
    "limiter.refill_per_sec": 20,
    "limiter.burst": 10,
    "retry.base_ms": 50,
    "retry.max_ms": 500,
  });
  // Contact IDs no other number in a trace could be mistaken for.
  emulator = await startEmulator({ fields: SANDBOX_FIELDS, firstIds: { contact: 73_951_846 } });
});
test.after.always(async () => {
  await emulator?.close();
  await db?.drop();
});

interface Person {
  id: string;
  phone: string;
  name: string;
  email: string;
}

/** A user as the App writes one: identity and profile in one transaction, with a name and e-mail. */
async function appUser(tag: string): Promise<Person> {
  const p: Person = {
    id: randomUUID(),
    phone: randomPhone(),
    name: `Zinaida ${tag}-Tracecheck`,
    email: `zinaida.${tag.toLowerCase()}@tracecheck.example`,
  };
  const c = await db.pool.connect();
  try {
    await c.query("begin");
    await c.query(
      "insert into han_app.user_identity (id, phone_number, record_status) values ($1, $2, 'active')",
      [p.id, p.phone],
    );
    await c.query(
      "insert into han_app.client_profile (user_id, full_name, email, record_status) values ($1, $2, $3, 'active')",
      [p.id, p.name, p.email],
    );
    await c.query("commit");
  } finally {
    c.release();
  }
  return p;
}

async function workflowDone(userId: string, timeoutMs = 20_000) {
  return await waitFor(
    async () => {
      const { rows } = await db.pool.query<{ id: string; state: string; trace_context: string | null }>(
        "select id, state, trace_context from bitrix_sync.workflow_instances where user_id = $1 and state = 'succeeded'",
        [userId],
      );
      return rows[0];
    },
    timeoutMs,
    "the user's workflow to succeed",
  );
}

async function contactOf(userId: string): Promise<number> {
  const { rows } = await db.pool.query<{ external_id: string }>(
    "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
    [userId],
  );
  return Number(rows[0]?.external_id);
}

function listeningPort(svc: ServiceProcess): Promise<number> {
  return waitFor(
    async () => {
      for (const line of svc.output.join("").split("\n")) {
        if (!line.includes('"http.listening"')) continue;
        return (JSON.parse(line) as { port: number }).port;
      }
      return null;
    },
    60_000,
    "the service to listen",
  );
}

/** The Contact robot's POST, as Bitrix24 sends it. */
async function robot(port: number, contactId: number): Promise<number> {
  const body = new URLSearchParams([
    ["document_id[0]", "crm"],
    ["document_id[1]", "CCrmDocumentContact"],
    ["document_id[2]", `CONTACT_${contactId}`],
    ["auth[domain]", emulator.host],
    ["auth[client_endpoint]", `https://${emulator.host}/rest/`],
    ["auth[server_endpoint]", "https://oauth.bitrix24.tech/rest/"],
    ["auth[member_id]", TEST_MEMBER_ID],
  ]);
  const res = await fetch(
    `http://127.0.0.1:${port}/bitrix/sync/webhook/contact?token=${TEST_CONTACT_TOKEN}&ID=${contactId}`,
    { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body },
  );
  await res.arrayBuffer();
  return res.status;
}

async function stop(svc: ServiceProcess): Promise<{ code: number | null; ms: number }> {
  const started = Date.now();
  svc.child.kill("SIGTERM");
  const code = await svc.exited;
  return { code, ms: Date.now() - started };
}

function parseTraceparent(tp: string | null): { traceId: string; spanId: string } {
  const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(tp ?? "");
  if (!m) throw new Error(`not a sampled traceparent: ${tp}`);
  return { traceId: m[1] as string, spanId: m[2] as string };
}

const named = (spans: ExportedSpan[], name: string) => spans.filter((s) => s.name === name);
const byId = (spans: ExportedSpan[], spanId: string) => spans.find((s) => s.spanId === spanId);

/** The batch span that links to `target`, and its HTTP child. */
function batchOf(t: ExecutionContext, spans: ExportedSpan[], target: ExportedSpan) {
  const batch = named(spans, "bitrix_sync.crm.batch").find((b) =>
    b.links.some((l) => l.traceId === target.traceId && l.spanId === target.spanId),
  );
  if (!batch) return t.fail(`no batch links to ${target.name} ${target.spanId}`);
  t.not(batch.traceId, target.traceId, "the batch runs in a trace of its own");
  const http = spans.find((s) => s.name === "bitrix_sync.crm.http" && s.parentSpanId === batch.spanId);
  t.truthy(http, "the batch's HTTP call is its child");
  t.is(http?.kind, 3, "client span");
  t.is(http?.attributes["http.response.status_code"], 200);
  t.is(http?.attributes["server.address"], emulator.host.split(":")[0]);
  t.is(http?.attributes["bitrix_sync.crm.method"], "batch");
  return batch;
}

/** Nothing personal or secret in `text`. A number counts only on its own, not inside a longer one. */
function assertClean(t: ExecutionContext, text: string, what: string, secrets: Record<string, string>) {
  for (const [label, value] of Object.entries(secrets)) {
    const found = /^\d+$/.test(value)
      ? new RegExp(`(?<![0-9])${value}(?![0-9])`).test(text)
      : text.includes(value);
    t.false(found, `${what} carries the ${label}`);
  }
}

function secretsOf(people: Person[], contactIds: number[]): Record<string, string> {
  const out: Record<string, string> = {
    "receiver token": TEST_CONTACT_TOKEN,
    "CRM webhook URL": emulator.url,
    "CRM webhook path": new URL(emulator.url).pathname,
    "portal member id": TEST_MEMBER_ID,
  };
  for (const [i, p] of people.entries()) {
    out[`phone ${i}`] = p.phone;
    out[`phone digits ${i}`] = p.phone.slice(1);
    out[`name ${i}`] = p.name;
    out[`e-mail ${i}`] = p.email;
    out[`user id ${i}`] = p.id;
  }
  for (const id of contactIds) out[`Contact ID ${id}`] = String(id);
  return out;
}

test.serial(
  "one App->CRM sync and one robot webhook export their span trees, linked across the queue",
  async (t) => {
    const otlp = await startOtlpReceiver();
    const svc = startService(
      serviceEnv(db.url, emulator, {
        OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
        LOG_LEVEL: "debug",
        // The image runs node directly; a wrapper's npm would set its own package's version here.
        npm_package_version: "0.0.0-another-package",
        // The image's build argument (Dockerfile): the commit it was built from.
        BITRIX_SYNC_REVISION: IMAGE_REVISION,
      }),
    );
    try {
      const port = await listeningPort(svc);
      const person = await appUser("Alpha");
      const wf = await workflowDone(person.id);
      const contactId = await contactOf(person.id);
      t.true(contactId >= 73_951_846, "the Contact was created on the emulator");

      // A manager renames the Contact in the CRM; the robot calls the receiver.
      const contact = emulator.store.contacts.get(contactId);
      if (!contact) throw new Error("no Contact");
      const crmName = "Zinovia Crmrenamed";
      contact.name = crmName;
      emulator.store.touch(contact);
      t.is(await robot(port, contactId), 200);
      const inbox = await waitFor(async () => {
        const { rows } = await db.pool.query<{ status: string; outcome: string; trace_context: string }>(
          "select status, outcome, trace_context from bitrix_sync.webhook_inbox where entity_id = $1",
          [String(contactId)],
        );
        return rows[0]?.status === "processed" ? rows[0] : null;
      });
      t.is(inbox.outcome, "applied");
      // An operator's forced reconciliation run: a trace of its own. A scheduled run may already have
      // finished before the rename; wait for one that started after the forced job was queued.
      const { rows: queued } = await db.pool.query<{ at: Date }>(
        `select now() as at from graphile_worker.add_job('reconcile_contacts', '{"force": true}'::json)`,
      );
      await waitFor(async () => {
        const { rows } = await db.pool.query(
          `select 1 from bitrix_sync.reconciliation_cursors
            where job_type = 'contacts' and last_run_status = 'succeeded' and last_run_started_at >= $1`,
          [queued[0]?.at],
        );
        return rows.length > 0;
      });

      const { code } = await stop(svc);
      t.is(code, 0);
      const spans = otlp.spans;
      t.is(spans[0]?.resource["service.name"], "bitrix-sync");
      t.is(spans[0]?.resource["service.version"], SERVICE_VERSION_IN_PACKAGE_JSON);
      // Every span's resource names the build, so a trace ties to the commit that made it.
      t.deepEqual([...new Set(spans.map((s) => s.resource["vcs.ref.head.revision"]))], [IMAGE_REVISION]);

      // App -> CRM: intake (root) -> steps -> command sends <- batch -> HTTP.
      const wfCtx = parseTraceparent(wf.trace_context);
      const intake = byId(spans, wfCtx.spanId);
      if (!intake) return t.fail("the workflow's stored context is not an exported span");
      t.is(intake.name, "bitrix_sync.intake");
      t.is(intake.parentSpanId, "", "the intake starts the trace");
      t.is(intake.attributes["bitrix_sync.intent.type"], "contact.map_or_create");
      t.is(intake.attributes["bitrix_sync.intake.action"], "started");
      t.is(intake.attributes["bitrix_sync.workflow.id"], wf.id);
      const wait = named(spans, "bitrix_sync.queue.wait").find((s) => s.parentSpanId === intake.spanId);
      t.truthy(wait, "the trigger-to-intake hop is the intake's child");
      t.is(wait?.startNs, intake.startNs, "both begin at the App's commit (sync_queue.created_at)");
      t.true((wait?.endNs ?? 0n) >= (wait?.startNs ?? 1n));

      const steps = named(spans, "bitrix_sync.workflow.step").filter((s) => s.traceId === wfCtx.traceId);
      t.true(steps.length >= 2, "several steps");
      for (const s of steps) {
        t.is(s.parentSpanId, intake.spanId, "every step is a child of the intake");
        t.is(s.attributes["bitrix_sync.workflow.id"], wf.id);
        t.is(s.attributes["bitrix_sync.workflow.type"], "contact.map_or_create");
      }
      t.true(
        steps.some((s) => s.attributes["bitrix_sync.workflow.event"] === "succeed"),
        "a step finished it",
      );

      const { rows: commands } = await db.pool.query<{
        id: string;
        command_type: string;
        trace_context: string;
      }>(
        "select id::text, command_type, trace_context from bitrix_sync.crm_commands where workflow_id = $1 order by id",
        [wf.id],
      );
      t.true(commands.length >= 2, "a search and a create at least");
      for (const cmd of commands) {
        // The command was stored with the span of the step that issued it...
        const issued = parseTraceparent(cmd.trace_context);
        t.is(issued.traceId, wfCtx.traceId);
        const step = byId(steps, issued.spanId);
        t.is(step?.attributes["bitrix_sync.command.type"], cmd.command_type, "issued by this step");
        // ...and its send is that step's child, linked from the batch that carried it.
        const send = named(spans, "bitrix_sync.crm.command").find(
          (s) => s.attributes["bitrix_sync.command.id"] === cmd.id,
        );
        if (!send) return t.fail(`no span for the send of command ${cmd.id}`);
        t.is(send.traceId, wfCtx.traceId);
        t.is(send.parentSpanId, issued.spanId);
        t.is(send.attributes["bitrix_sync.command.type"], cmd.command_type);
        t.is(send.attributes["bitrix_sync.outcome"], "ok");
        const batch = batchOf(t, spans, send);
        t.is(batch?.attributes["bitrix_sync.batch.id"], send.attributes["bitrix_sync.batch.id"]);
      }

      // Robot webhook: receiver request (root) -> inbox write; processing under the write <- batch.
      const written = parseTraceparent(inbox.trace_context);
      const write = byId(spans, written.spanId);
      t.is(write?.name, "bitrix_sync.inbox.write");
      const request = write ? byId(spans, write.parentSpanId) : undefined;
      t.is(request?.name, "bitrix_sync.webhook.receive");
      t.is(request?.parentSpanId, "", "a robot's request starts a trace");
      t.is(request?.kind, 2, "server span");
      t.is(request?.attributes["http.route"], "/bitrix/sync/webhook/contact");
      t.is(request?.attributes["http.request.method"], "POST");
      t.is(request?.attributes["http.response.status_code"], 200);
      const process = named(spans, "bitrix_sync.inbox.process").find(
        (s) => s.parentSpanId === written.spanId,
      );
      if (!process) return t.fail("the processing is not the inbox write's child");
      t.is(process.traceId, written.traceId);
      t.is(process.attributes["bitrix_sync.outcome"], "applied");
      batchOf(t, spans, process);

      // Reconciliation: a root span; its CRM batches and their HTTP calls are its children.
      // The forced run: the last contacts run (an earlier scheduled one may have scanned nothing yet).
      const run = named(spans, "bitrix_sync.reconcile.run")
        .filter((s) => s.attributes["bitrix_sync.reconcile.job"] === "contacts")
        .at(-1);
      if (!run) return t.fail("no reconciliation run span");
      t.is(run.parentSpanId, "");
      t.is(run.attributes["bitrix_sync.outcome"], "succeeded");
      t.true(Number(run.attributes["bitrix_sync.reconcile.scanned"]) >= 1, "the renamed Contact was scanned");
      const listed = spans.filter((s) => s.name === "bitrix_sync.crm.batch" && s.parentSpanId === run.spanId);
      t.true(listed.length >= 1);
      t.true(
        listed.every((b) =>
          spans.some((s) => s.name === "bitrix_sync.crm.http" && s.parentSpanId === b.spanId),
        ),
      );

      // Nothing personal or secret in any exported byte, nor in any span name or attribute.
      const exported = Buffer.concat(otlp.bodies).toString("utf8");
      const secrets = {
        ...secretsOf([person], [contactId]),
        "CRM-side name": crmName,
      };
      assertClean(t, exported, "the OTLP export", secrets);

      // Logs: inside a span a line carries its trace_id and span_id, and the IDs that exist there.
      const lines = svc.output
        .join("")
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      const exportedIds = new Set(spans.map((s) => `${s.traceId}/${s.spanId}`));
      const inSpan = (event: string) => lines.filter((l) => l.event === event);
      for (const event of [
        "workflow.step",
        "pump.settled",
        "crm.batch",
        "webhook.processed",
        "receiver.accepted",
      ]) {
        const found = inSpan(event);
        t.true(found.length > 0, `a ${event} line was written`);
        for (const l of found) {
          t.true(
            exportedIds.has(`${l.trace_id}/${l.span_id}`),
            `${event} carries the ids of an exported span`,
          );
        }
      }
      for (const l of inSpan("workflow.step")) {
        t.is(l.workflowId, wf.id);
        t.is(typeof l.correlationId, "string");
      }
      for (const l of inSpan("pump.settled")) {
        t.true(commands.some((c) => c.id === l.commandId));
        t.is(l.workflowId, wf.id);
      }
      for (const l of inSpan("receiver.accepted")) t.regex(String(l.requestId), /^[0-9a-f-]{36}$/);
      t.true(inSpan("webhook.processed").every((l) => typeof l.inboxId === "string"));
      assertClean(t, svc.output.join(""), "the service's log", secrets);
    } finally {
      if (svc.child.exitCode === null) svc.child.kill("SIGKILL");
      await otlp.close();
    }
  },
);

test.serial(
  "a command resent by another process after a crash is traced under the step that issued it",
  async (t) => {
    const otlp = await startOtlpReceiver();
    // Slow replies, so the first process dies with the phone search in flight.
    emulator.setLatency(1_500);
    const first = startService(serviceEnv(db.url, emulator, { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url }));
    let second: ServiceProcess | null = null;
    try {
      const person = await appUser("Bravo");
      const sent = await waitFor(async () => {
        const { rows } = await db.pool.query<{ id: string; trace_context: string }>(
          `select c.id::text, c.trace_context from bitrix_sync.crm_commands c
           join bitrix_sync.workflow_instances w on w.id = c.workflow_id
          where w.user_id = $1 and c.command_type = 'contact.find_by_phone' and c.status = 'in_flight'`,
          [person.id],
        );
        return rows[0];
      }, 45_000);
      first.child.kill("SIGKILL");
      await first.exited;
      const issued = parseTraceparent(sent.trace_context);

      emulator.setLatency(0);
      otlp.spans.length = 0;
      second = startService(serviceEnv(db.url, emulator, { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url }));
      const wf = await workflowDone(person.id, 30_000);
      t.is((await stop(second)).code, 0);

      const spans = otlp.spans;
      const resend = named(spans, "bitrix_sync.crm.command").find(
        (s) => s.attributes["bitrix_sync.command.id"] === sent.id,
      );
      if (!resend) return t.fail("the second process did not trace the resend");
      t.is(resend.traceId, issued.traceId, "the resend is in the intent's trace");
      t.is(resend.parentSpanId, issued.spanId, "under the step of the first process that issued it");
      batchOf(t, spans, resend);
      // The steps the second process ran belong to the same trace, under the stored intake span.
      const wfCtx = parseTraceparent(wf.trace_context);
      const laterSteps = named(spans, "bitrix_sync.workflow.step").filter(
        (s) => s.attributes["bitrix_sync.workflow.id"] === wf.id,
      );
      t.true(laterSteps.length > 0);
      for (const s of laterSteps) {
        t.is(s.traceId, wfCtx.traceId);
        t.is(s.parentSpanId, wfCtx.spanId);
      }
      assertClean(t, Buffer.concat(otlp.bodies).toString("utf8"), "the OTLP export", secretsOf([person], []));
    } finally {
      emulator.setLatency(0);
      for (const p of [first, second]) if (p && p.child.exitCode === null) p.child.kill("SIGKILL");
      await otlp.close();
    }
  },
);

test.serial(
  "a collector that hangs neither slows nor breaks the service, and exporting resumes when it answers",
  async (t) => {
    const otlp = await startOtlpReceiver();
    otlp.setMode("hang");
    const svc = startService(serviceEnv(db.url, emulator, { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url }));
    try {
      const port = await listeningPort(svc);
      // Syncs and webhooks go on while every export hangs until its deadline.
      const down = await appUser("Charlie");
      await workflowDone(down.id);
      t.is(await robot(port, await contactOf(down.id)), 200);
      await waitFor(async () => otlp.requests() > 0, 20_000, "an export attempt");
      t.is((await fetch(`http://127.0.0.1:${port}/health/live`)).status, 200);

      // The collector recovers: later spans reach it.
      otlp.setMode("ok");
      const up = await appUser("Delta");
      const wf = await workflowDone(up.id);
      const intakeSpan = parseTraceparent(wf.trace_context).spanId;
      await waitFor(
        async () => otlp.spans.some((s) => s.spanId === intakeSpan),
        20_000,
        "spans after recovery",
      );

      // Shutdown stays within its bound whatever the collector does, with spans left to flush.
      otlp.setMode("hang");
      t.is(await robot(port, await contactOf(up.id)), 200);
      const { code, ms } = await stop(svc);
      t.is(code, 0, "exit 0: within the 30 s shutdown bound");
      t.true(ms < 25_000, `shutdown took ${ms} ms`);
      const log = svc.output.join("");
      t.true(log.includes('"tracing.flush_incomplete"'), "the last flush was cut off at its own bound");
      t.true(log.includes('"tracing.export_failed"'), "the failed exports were logged");
      assertClean(t, log, "the service's log", secretsOf([down, up], []));
    } finally {
      if (svc.child.exitCode === null) svc.child.kill("SIGKILL");
      await otlp.close();
    }
  },
);
