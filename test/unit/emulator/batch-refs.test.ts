// The portal core's batch references (tools/emulator/batch-refs.ts), as a table of what the core does
// with a value or a key given the replies of the commands before it.
import test from "ava";
import {
  type BatchResults,
  keysCacheOf,
  newBatchResults,
  phpNumberString,
  recordReply,
  resolveElement,
  resolveParams,
} from "../../../tools/emulator/batch-refs.js";

const TIME_C0 = { start: 1723727109.430573, finish: 1723727109.5, duration: 0.069427 };

/** A batch after c0 (crm.contact.list of one Contact) and c1 (crm.contact.add → 42) ran. */
function afterTwo(): BatchResults {
  const r = newBatchResults();
  recordReply(r, "c0", {
    result: [{ ID: "7", NAME: "Anna", PHONE: [{ ID: "3", VALUE: "+79990000001", VALUE_TYPE: "MOBILE" }] }],
    total: 1,
    time: TIME_C0,
  });
  recordReply(r, "c1", { result: 42, time: { start: 1723727110 } });
  return r;
}

/** The same, then c2 failed (a legacy error with an empty code). */
function withError(): BatchResults {
  const r = afterTwo();
  recordReply(r, "c2", { error: "", error_description: "Contact is not found" });
  return r;
}

const cases: Array<{ what: string; value: unknown; results: () => BatchResults; want: unknown }> = [
  {
    what: "exact $result[c0] is the whole result of c0",
    value: "$result[c0]",
    results: afterTwo,
    want: [{ ID: "7", NAME: "Anna", PHONE: [{ ID: "3", VALUE: "+79990000001", VALUE_TYPE: "MOBILE" }] }],
  },
  { what: "exact $result[c1] is a number", value: "$result[c1]", results: afterTwo, want: 42 },
  {
    what: "a walk into a list: $result[c0][0][ID]",
    value: "$result[c0][0][ID]",
    results: afterTwo,
    want: "7",
  },
  {
    what: "inside a longer value a string is spliced in",
    value: "Ivan $result[c0][0][PHONE][0][VALUE]",
    results: afterTwo,
    want: "Ivan +79990000001",
  },
  {
    what: "inside a longer value a number is spliced in as text",
    value: "id=$result[c1]",
    results: afterTwo,
    want: "id=42",
  },
  {
    what: "inside a longer value a non-string target leaves the value alone",
    value: "Ivan $result[c0]",
    results: afterTwo,
    want: "Ivan $result[c0]",
  },
  {
    what: "a missing first key, exact: the walk stops at the whole result map",
    value: "$result[c9]",
    results: afterTwo,
    want: {
      c0: [{ ID: "7", NAME: "Anna", PHONE: [{ ID: "3", VALUE: "+79990000001", VALUE_TYPE: "MOBILE" }] }],
      c1: 42,
    },
  },
  {
    what: "a missing later key stops the walk where it was",
    value: "$result[c0][0][NOPE][x]",
    results: afterTwo,
    want: { ID: "7", NAME: "Anna", PHONE: [{ ID: "3", VALUE: "+79990000001", VALUE_TYPE: "MOBILE" }] },
  },
  {
    what: "the word matches in any case but the lookup does not: $RESULT[c0] exact is null",
    value: "$RESULT[c0]",
    results: afterTwo,
    want: null,
  },
  { what: "$Result[c0] exact is null too", value: "$Result[c0]", results: afterTwo, want: null },
  {
    what: "$RESULT[c0] inside a longer value is left alone",
    value: "x $RESULT[c0]",
    results: afterTwo,
    want: "x $RESULT[c0]",
  },
  { what: "$total[c0]", value: "$total[c0]", results: afterTwo, want: 1 },
  {
    what: "$next[c0] of a command without next: the walk stops at the (empty) next map",
    value: "$next[c0]",
    results: afterTwo,
    want: {},
  },
  {
    what: "$time[c0][start] exact keeps the float",
    value: "$time[c0][start]",
    results: afterTwo,
    want: 1723727109.430573,
  },
  {
    what: "$time[c0][start] in a longer value is PHP's (string) of a float: 14 digits",
    value: "at $time[c0][start]",
    results: afterTwo,
    want: "at 1723727109.4306",
  },
  {
    what: "$error[c2] is the whole error array",
    value: "$error[c2]",
    results: withError,
    want: { error: "", error_description: "Contact is not found" },
  },
  {
    what: "$error[c2][error_description] in a longer value",
    value: "why: $error[c2][error_description]",
    results: withError,
    want: "why: Contact is not found",
  },
  {
    what: "$error_description[c2] matches the word error first (alternatives in order), then walks [c2]",
    value: "$error_description[c2]",
    results: withError,
    want: { error: "", error_description: "Contact is not found" },
  },
  {
    what: "two references in one value, each spliced in",
    value: "$result[c0][0][NAME] $result[c1]",
    results: afterTwo,
    want: "Anna 42",
  },
  {
    what: "without whitespace a match runs on: one reference with a longer path",
    value: "$result[c0][0][NAME]$result[c1]",
    results: afterTwo,
    // The path is [c0][0][NAME][c1]: NAME is "Anna", which has no offset c1, so the walk stops there.
    want: "Anna",
  },
  {
    what: "every occurrence of the match text is replaced",
    value: "$result[c1] and $result[c1]",
    results: afterTwo,
    want: "42 and 42",
  },
  {
    what: "a word without a [segment] is not a reference",
    value: "$result",
    results: afterTwo,
    want: "$result",
  },
  {
    what: "JavaScript's own properties are not PHP keys",
    value: "$result[c0][length]",
    results: afterTwo,
    want: [{ ID: "7", NAME: "Anna", PHONE: [{ ID: "3", VALUE: "+79990000001", VALUE_TYPE: "MOBILE" }] }],
  },
  {
    what: "a string offset walks one byte",
    value: "$result[c0][0][NAME][0]",
    results: afterTwo,
    want: "A",
  },
  {
    what: "percent-encoding is text here: the core decodes once, before",
    value: "%24result%5Bc0%5D",
    results: afterTwo,
    want: "%24result%5Bc0%5D",
  },
  {
    what: "before any command, $result[c0] exact is the empty result map",
    value: "$result[c0]",
    results: newBatchResults,
    want: {},
  },
  { what: "other words are not references", value: "$price[c0]", results: afterTwo, want: "$price[c0]" },
];

for (const c of cases) {
  test(`value: ${c.what}`, (t) => {
    const r = c.results();
    t.deepEqual(resolveElement(c.value, r, keysCacheOf(r)), c.want);
  });
}

test("the result map's top keys are the words, in the core's order; a failure adds error_description", (t) => {
  t.is(keysCacheOf(afterTwo()), "result|next|total|time|error");
  t.is(keysCacheOf(withError()), "result|next|total|time|error|error_description");
});

test("keys are resolved with no words: one that is exactly a reference becomes the empty key", (t) => {
  const r = afterTwo();
  t.deepEqual(resolveParams({ fields: { "$result[c1]": "a", "x$result[c1]": "b", NAME: "c" } }, r), {
    fields: { "": "a", "x$result[c1]": "b", NAME: "c" },
  });
  t.deepEqual(resolveParams({ "$anything[x]": "v" }, r), { "": "v" });
});

test("params: values at every depth, lists included, and a value that becomes an array", (t) => {
  const r = afterTwo();
  t.deepEqual(
    resolveParams(
      {
        id: "$result[c1]",
        fields: {
          NAME: "$result[c0][0][NAME]",
          EMAIL: [{ VALUE: "$RESULT[c0]", VALUE_TYPE: "WORK" }],
          PHONE: [{ VALUE: "Ivan $result[c0][0][PHONE][0][VALUE]" }],
          COMMENTS: "$result[c0][0]",
        },
        plain: "no reference",
      },
      r,
    ),
    {
      id: 42,
      fields: {
        NAME: "Anna",
        EMAIL: [{ VALUE: null, VALUE_TYPE: "WORK" }],
        PHONE: [{ VALUE: "Ivan +79990000001" }],
        COMMENTS: {
          ID: "7",
          NAME: "Anna",
          PHONE: [{ ID: "3", VALUE: "+79990000001", VALUE_TYPE: "MOBILE" }],
        },
      },
      plain: "no reference",
    },
  );
});

test("a value taken from a reply is a copy: changing it does not change the recorded reply", (t) => {
  const r = afterTwo();
  const v = resolveElement("$result[c0]", r, keysCacheOf(r)) as Array<{ NAME: string }>;
  (v[0] as { NAME: string }).NAME = "changed";
  const recorded = (r.result as Record<string, unknown>).c0 as Array<{ NAME: string }>;
  t.is(recorded[0]?.NAME, "Anna");
});

test("PHP's (string) of numbers", (t) => {
  t.is(phpNumberString(42), "42");
  t.is(phpNumberString(0.5), "0.5");
  t.is(phpNumberString(1723727109.430573), "1723727109.4306");
  t.is(phpNumberString(1e25), "1.0E+25");
  t.is(phpNumberString(0.00001234), "1.234E-5");
  t.is(phpNumberString(0.0001), "0.0001");
});
