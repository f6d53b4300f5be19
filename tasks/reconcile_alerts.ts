// graphile-worker task (crontab, every minute): polls open business alerts when
// alerts.reconcile_interval_sec has passed since the last run (§10.3).
import type { Task } from "graphile-worker";
import { z } from "zod";
import { reconcileAlerts } from "../src/reconciliation/alerts.js";
import { loopSettings, runtime } from "../src/runtime.js";

const Payload = z.object({ force: z.boolean().optional() }).passthrough();

const task: Task = async (payload) => {
  const p = Payload.parse(payload ?? {});
  const r = await runtime();
  if (!r.config.processing || r.stopping.aborted) return;
  const s = r.settings.get();
  const interval =
    typeof s["alerts.reconcile_interval_sec"] === "number"
      ? (s["alerts.reconcile_interval_sec"] as number)
      : 3600;
  await reconcileAlerts(r.engine, loopSettings(r).alerts(), interval, { force: p.force === true });
};

export default task;
