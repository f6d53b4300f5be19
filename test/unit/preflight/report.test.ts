// Preflight's verdict and its text: exit codes by precedence, the stub-era names of §12.2, and one
// line per check with its hint.
import test from "ava";
import { checkStubEra, STUB_ERA_VARIABLE } from "../../../src/preflight/config.js";
import { type Drift, describeDrift, grantsVerdict } from "../../../src/preflight/database.js";
import { check, exitCode, formatReport, notChecked } from "../../../src/preflight/index.js";
import { serviceMethods } from "../../../src/preflight/portal.js";

test("exit 0 with only ok and warnings, 1 with a failure, 2 when anything was not checked", (t) => {
  const ok = check("config.a", "ok", "fine");
  const warn = check("config.b", "warn", "hm", "look");
  const fail = check("config.c", "fail", "wrong", "fix");
  const unknown = notChecked("database.d", "unreachable");
  t.is(exitCode([ok, warn]), 0);
  t.is(exitCode([ok, fail]), 1);
  t.is(exitCode([ok, unknown]), 2);
  t.is(exitCode([fail, unknown]), 2);
  t.is(unknown.group, "database");
});

test("one line per check, its hint on the same line, then a summary", (t) => {
  const text = formatReport({
    results: [check("config.a", "ok", "fine"), check("portal.bb", "fail", "wrong", "fix it")],
    exitCode: 1,
  });
  const lines = text.trimEnd().split("\n");
  t.is(lines.length, 3);
  t.regex(lines[0] as string, /^ok +config\.a +fine$/);
  t.regex(lines[1] as string, /^FAIL +portal\.bb +wrong -- hint: fix it$/);
  t.is(lines[2], "preflight: 1 ok, 0 warning(s), 1 failed, 0 not checked; exit 1");
});

test("the stub-era variables of §12.2 are recognised, the current ones are not", (t) => {
  for (const v of [
    "BITRIX_SYNC_CRM_BASE_URL",
    "BITRIX_SYNC_CRM_MAX_CONCURRENCY",
    "CONTACT_SYNC_INTERVAL_SEC",
    "BITRIX_SYNC_CONTACT_RECONCILE_INTERVAL_SEC",
  ]) {
    t.true(STUB_ERA_VARIABLE.test(v), v);
  }
  for (const v of [
    "BITRIX_SYNC_HTTP_TIMEOUT_SEC",
    "BITRIX_SYNC_CONTACT_USER_ID_FIELD",
    "BITRIX_SYNC_CRM_REST_WEBHOOK_URL",
  ]) {
    t.false(STUB_ERA_VARIABLE.test(v), v);
  }
  t.is(checkStubEra({ PATH: "/bin" }).status, "ok");
  t.is(checkStubEra({ BITRIX_SYNC_CRM_BASE_URL: "https://x" }).status, "fail");
});

test("the methods asked about are the catalogue's and batch", (t) => {
  const m = serviceMethods();
  t.true(m.includes("batch"));
  t.true(m.includes("crm.duplicate.findbycomm"));
  t.true(m.includes("crm.contact.userfield.list"));
  t.deepEqual(m, [...m].sort());
});

test("database.grants names each difference in words and hints at the repair that fits it", (t) => {
  const row = (r: Partial<Drift>): Drift => ({
    object_type: "table",
    object_name: "bitrix_sync.crm_commands",
    role: "han_app_user",
    privilege: "SELECT",
    column_name: null,
    problem: "extra",
    ...r,
  });
  t.is(grantsVerdict([]).status, "ok");
  const project = grantsVerdict([row({})]);
  t.is(project.status, "fail");
  t.regex(project.detail, /extra SELECT on table bitrix_sync\.crm_commands for han_app_user/);
  t.regex(project.hint ?? "", /sql\/grants\.sql/);
  t.notRegex(project.hint ?? "", /membership/);

  const other = grantsVerdict([row({ role: "reporting", privilege: "UPDATE", column_name: "status" })]);
  t.regex(other.detail, /extra UPDATE \(status\) on table bitrix_sync\.crm_commands for reporting/);
  t.regex(other.hint ?? "", /REVOKE \.\.\. FROM <role>/);
  t.notRegex(other.hint ?? "", /grants\.sql/, "re-applying the catalogue does not touch other roles");

  const members = grantsVerdict([
    row({
      object_type: "role",
      object_name: "bitrix_sync_admin",
      role: "app_login",
      privilege: "MEMBER",
      problem: "conflicting_membership",
    }),
    row({
      object_type: "role",
      object_name: "bitrix_sync_admin",
      role: "ops",
      privilege: "MEMBER WITH ADMIN OPTION",
      problem: "extra_membership",
    }),
    row({
      object_type: "role",
      object_name: "pg_read_all_data",
      role: "bitrix_sync_user",
      privilege: "MEMBER",
      problem: "extra_membership",
    }),
  ]);
  t.is(
    members.detail,
    "3 difference(s) from the privilege catalogue: conflicting_membership app_login holds bitrix_sync_admin and another project role; extra_membership ops is a member of bitrix_sync_admin with admin option; extra_membership bitrix_sync_user is a member of pg_read_all_data",
  );
  t.regex(members.hint ?? "", /REVOKE <role> FROM <member>/);
  t.is(
    describeDrift(row({ problem: "missing", role: "bitrix_sync_admin" })),
    "missing SELECT on table bitrix_sync.crm_commands for bitrix_sync_admin",
  );
});
