// BITRIX_SYNC_APP_TABLE_HOOKS and what preflight and readiness make of app_table_hooks()'s rows
// (src/app-tables.ts): the allow-list's form, which kinds it may name, and what is left unknown.
import test from "ava";
import {
  type AppTableHook,
  describeHook,
  hookKey,
  parseHookList,
  unknownHooks,
} from "../../src/app-tables.js";
import { EnvSchema } from "../../src/config/env.js";

test("the allow-list is comma-separated kind:table:name; blanks and repeats go", (t) => {
  t.deepEqual(parseHookList(undefined), { ok: true, keys: [] });
  t.deepEqual(parseHookList(" "), { ok: true, keys: [] });
  t.deepEqual(
    parseHookList(
      "trigger:client_profile:set_updated_at, index:user_identity:phone_lower_idx,,trigger:client_profile:set_updated_at",
    ),
    { ok: true, keys: ["trigger:client_profile:set_updated_at", "index:user_identity:phone_lower_idx"] },
  );
});

test("row security, policies, relations, children and owners cannot be allowed; other tables neither", (t) => {
  for (const bad of [
    "policy:client_profile:p",
    "row_security:client_profile:forced",
    "relation:client_profile:client_profile",
    "child:user_identity:han_app.x",
    "owner:sync_queue:sync_queue",
    "trigger:sync_queue:x",
    "trigger:client_profile",
    "trigger:client_profile:a b",
  ]) {
    const r = parseHookList(bad);
    t.false(r.ok, bad);
  }
  const parsed = EnvSchema.safeParse({ BITRIX_SYNC_APP_TABLE_HOOKS: "policy:client_profile:p" });
  t.false(parsed.success);
  t.regex(JSON.stringify(parsed.error?.issues), /kind:table:name/);
});

test("what the list does not name is unknown, and is described without the schema's noise", (t) => {
  const rows: AppTableHook[] = [
    {
      relation: "client_profile",
      kind: "trigger",
      name: "set_updated_at",
      detail: "han_app.set_updated_at()",
    },
    { relation: "client_profile", kind: "trigger", name: "evil", detail: "han_app.evil()" },
    {
      relation: "client_profile",
      kind: "row_security",
      name: "forced",
      detail: "ALTER TABLE ... ENABLE ROW LEVEL SECURITY",
    },
    { relation: "client_profile", kind: "relation", name: "client_profile", detail: "relkind v" },
  ];
  const unknown = unknownHooks(rows, ["trigger:client_profile:set_updated_at"]);
  t.deepEqual(unknown.map(hookKey), [
    "trigger:client_profile:evil",
    "row_security:client_profile:forced",
    "relation:client_profile:client_profile",
  ]);
  t.is(describeHook(unknown[0] as AppTableHook), "trigger client_profile.evil (han_app.evil())");
  t.is(describeHook(unknown[2] as AppTableHook), "relation client_profile (relkind v)");
});
