// The chaos suite's invariant checks (scripts/chaos/checks.ts) on a settled, empty installation and
// an emulator holding a linked Contact: a phone number a manager added and the service later removed
// is reported; one still on its Contact is not.
import test from "ava";
import { checkInvariants } from "../../scripts/chaos/checks.js";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { type Emulator, startEmulator } from "../../src/emulator/server.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
let emulator: Emulator;

test.before(async () => {
  db = await createTestDb();
  emulator = await startEmulator({ fields: SANDBOX_FIELDS });
});

test.after.always(async () => {
  await emulator?.close();
  await db?.drop();
});

test("a number a manager added must still be on its Contact", async (t) => {
  const contact = emulator.store.createContact({
    name: "Chaos Checkova",
    phones: [
      { valueType: "MOBILE", value: "+79990000001" },
      { valueType: "WORK", value: "+7 999 000-00-02" },
    ],
  });
  const kept = await checkInvariants(
    db.pool,
    emulator,
    SANDBOX_FIELDS,
    new Set(),
    new Map([[contact.id, new Set(["+79990000002"])]]),
  );
  t.deepEqual(kept.violations, [], "the number is there, written another way");

  contact.phones = contact.phones.filter((p) => p.valueType !== "WORK");
  const lost = await checkInvariants(
    db.pool,
    emulator,
    SANDBOX_FIELDS,
    new Set(),
    new Map([[contact.id, new Set(["+79990000002"])]]),
  );
  t.deepEqual(lost.violations, [`Contact ${contact.id} lost a phone number a manager added`]);
  t.false(lost.violations.join(" ").includes("79990000002"), "the report names no number");
});
