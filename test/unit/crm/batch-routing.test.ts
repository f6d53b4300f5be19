// Which commands may travel inside a batch (src/crm/batch.ts, reinterpretedInBatch): none whose
// parameters, as built, hold text the portal's core would read as a batch reference.
import test from "ava";
import { SANDBOX_FIELDS } from "../../../src/config/env.js";
import { reinterpretedInBatch } from "../../../src/crm/batch.js";
import { buildRequest, type CrmCommand } from "../../../src/crm/catalogue.js";
import { parsePhpQuery, toPhpQuery } from "../../../src/crm/php-query.js";

const ctx = { fields: SANDBOX_FIELDS };
const UID = "0b7e7dbd-4fcb-4b38-8d56-1f7c0d1f6b0e";

function add(name: string | null, email: string | null = null): CrmCommand {
  return {
    type: "contact.add",
    params: { phone: "+79991234567", userId: UID, registered: true, name, email },
  };
}

const direct: Array<[string, string | null, string | null]> = [
  ["exact $result[c0]", "$result[c0]", null],
  ["a walk", "$result[c1][0][ID]", null],
  ["inside a longer name", "Ivan $result[c2][0][PHONE][0][VALUE]", null],
  ["$next", "$next[c0]", null],
  ["$error", "$error[c0]", null],
  ["$total", "$total[c1]", null],
  ["$time", "$time[c0][start]", null],
  ["upper case", "$RESULT[C0]", null],
  ["mixed case", "$Result[c0]", null],
  ["the word alone (broader than the core, which needs a [segment])", "Price $total", null],
  ["error_description starts with error", "$error_description[c0]", null],
  ["in the e-mail only", "Anna", "$result[c0]@example.org"],
  ["a tab before it", "Anna\t$result[c0]", null],
];

for (const [what, name, email] of direct) {
  test(`goes direct: ${what}`, (t) => {
    t.true(reinterpretedInBatch(buildRequest(add(name, email), ctx).params));
  });
}

const batched: Array<[string, string | null]> = [
  ["an ordinary name", "Anna Petrova"],
  ["no name", null],
  ["a dollar without a word", "US$ 100 $ $$ $[x]"],
  ["a word without the dollar", "result[c0] next total time error"],
  // parse_str decodes once: the core then sees %24, not $, and resolves nothing.
  ["percent-encoded", "%24result%5Bc0%5D"],
  ["a look-alike dollar (fullwidth)", "＄result[c0]"],
];

for (const [what, name] of batched) {
  test(`stays in the batch: ${what}`, (t) => {
    const { params } = buildRequest(add(name), ctx);
    t.false(reinterpretedInBatch(params));
    // What the batch line carries decodes back to exactly the App's value.
    t.is((parsePhpQuery(toPhpQuery(params)).fields as Record<string, unknown>).NAME, name ?? undefined);
  });
}

test("every depth and every kind of value is looked at; numbers and booleans never match", (t) => {
  t.true(reinterpretedInBatch({ a: { b: [{ c: "x $TIME[k]" }] } }));
  t.true(reinterpretedInBatch(["$next[0]"]));
  t.false(reinterpretedInBatch({ a: 1, b: true, c: null, d: undefined, e: [], f: {} }));
});

test("a key holding $ at all goes direct (the core resolves keys against no words)", (t) => {
  t.true(reinterpretedInBatch({ fields: { "$anything[x]": "v" } }));
  t.true(reinterpretedInBatch({ a$: 1 }));
  t.false(reinterpretedInBatch({ fields: { UF_CRM_1: "v" } }));
});

test("alert fields are looked at like Contact fields", (t) => {
  const cmd: CrmCommand = {
    type: "alert.add",
    params: { entityTypeId: 1040, fields: { title: "Duplicates of $result[c0]", ufCrm14_1001: 7 } },
  };
  t.true(reinterpretedInBatch(buildRequest(cmd, ctx).params));
});

test("the catalogue's own parameters never go direct", (t) => {
  const plain: CrmCommand[] = [
    { type: "contact.find_by_phone", params: { phones: ["+79991234567"] } },
    { type: "contact.find_by_user_id", params: { userId: UID } },
    { type: "contact.read", params: { ids: [1, 2] } },
    { type: "contact.update", params: { id: 5, userId: UID, registered: false } },
    { type: "contact.list_changed", params: { updatedSince: "2026-01-01T00:00:00+03:00", start: 50 } },
    { type: "citizenship.list", params: {} },
    { type: "alert.list", params: { entityTypeId: 1040, ids: [1] } },
  ];
  for (const c of plain) t.false(reinterpretedInBatch(buildRequest(c, ctx).params), c.type);
});
