// The table that joins the four workflows to the step core: the first step of a pass by the intent
// it executes, and what to do with a command's outcome by the step that waits for it. Step names are
// unique across workflows (a contact.update without a link runs map_or_create's steps).
import type pg from "pg";
import type { RetrySettings } from "../../crm/backoff.js";
import type { WorkflowRow } from "../types.js";
import { type AfterStep, Step, type StepResult, type StepTable, sharedSteps } from "./core.js";
import { createRecoverySteps } from "./create-recovery.js";
import { deactivateSteps, startDeactivate } from "./deactivate.js";
import { mapOrCreateSteps, startMapOrCreate } from "./map-or-create.js";
import { rebindSteps, startRebind } from "./rebind.js";
import { startUpdate, updateSteps } from "./update.js";

/** Joins the workflows' step tables; a name used twice is a programming error, refused at load. */
function joinSteps(...tables: ReadonlyArray<Readonly<Record<string, AfterStep>>>): Record<string, AfterStep> {
  const out: Record<string, AfterStep> = {};
  for (const t of tables) {
    for (const [name, after] of Object.entries(t)) {
      if (Object.hasOwn(out, name) || name === "start") throw new Error(`step name used twice: ${name}`);
      out[name] = after;
    }
  }
  return out;
}

export const STEP_TABLE: StepTable = {
  start: {
    "contact.map_or_create": startMapOrCreate,
    "contact.update": startUpdate,
    "contact.deactivate": startDeactivate,
    "contact.rebind": startRebind,
  },
  after: joinSteps(
    sharedSteps,
    mapOrCreateSteps,
    createRecoverySteps,
    updateSteps,
    deactivateSteps,
    rebindSteps,
  ),
};

/**
 * Runs one step of `wf` in `tx` (the caller holds the workflow's lease and commits). `retry` is the
 * backoff an unanswered write waits by (settings retry.base_ms, retry.max_ms).
 */
export async function runStep(
  tx: pg.PoolClient,
  wf: WorkflowRow,
  retry: Pick<RetrySettings, "baseMs" | "maxMs">,
): Promise<StepResult> {
  return await new Step(tx, wf, STEP_TABLE, retry).run();
}
