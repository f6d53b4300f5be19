import test from "ava";
import { READ_STEPS } from "../../../src/workflows/decide/pass.js";
import { STEP_TABLE } from "../../../src/workflows/step/dispatch.js";

// Step names are persisted in workflow_instances.current_step: a rename strands running workflows.
test("every persisted step name has exactly one handler", (t) => {
  t.deepEqual(Object.keys(STEP_TABLE.after).sort(), [
    "claim_contact",
    "create_contact",
    "deactivate_contact",
    "final_read",
    "find_by_phone",
    "manual_link_read",
    "read_candidates",
    "read_for_update",
    "read_mapped",
    "read_previous",
    "rebind_check_previous",
    "rebind_clear_previous",
    "rebind_read",
    "rebind_recheck_previous",
    "rebind_target",
    "recover_find",
    "recover_read",
    "recover_search",
    "reread_for_update",
    "resend_write",
    "restore_flag",
    "update_contact",
  ]);
});

test("every workflow type has a first step", (t) => {
  t.deepEqual(Object.keys(STEP_TABLE.start).sort(), [
    "contact.deactivate",
    "contact.map_or_create",
    "contact.rebind",
    "contact.update",
  ]);
});

test("every read step but start and manual has a handler", (t) => {
  for (const step of READ_STEPS) {
    if (step === "start" || step === "manual") continue;
    t.true(Object.hasOwn(STEP_TABLE.after, step), step);
  }
});
