// §10.2's two judgements of a reconciliation run, as tables: which Contact it recovered without a
// webhook (source attribution and webhook times of contact_snapshots, and the inbox), and when the
// recovered Contacts are a spike (their count or their share, either one).
import test from "ava";
import {
  isRecoveredSpike,
  recoveredWithoutWebhook,
  type SnapshotSource,
} from "../../../src/inbound/reconcile.js";

const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 12, 0, s));
const snap = (o: Partial<SnapshotSource> = {}): SnapshotSource => ({
  crm_updated_at: at(0),
  last_applied_at: at(1),
  last_applied_source: "webhook",
  last_webhook_received_at: at(0),
  ...o,
});
const applied = (o: Partial<SnapshotSource> = {}) =>
  snap({ crm_updated_at: at(30), last_applied_at: at(40), last_applied_source: "reconciliation", ...o });

const cases: Array<
  [string, SnapshotSource | undefined, SnapshotSource | undefined, Date | null, Date | null, boolean]
> = [
  ["newer in the CRM, no robot call since the last apply", snap(), applied(), at(30), null, true],
  [
    "never applied before (no snapshot)",
    undefined,
    applied({ last_webhook_received_at: null }),
    at(30),
    null,
    true,
  ],
  [
    "created by the service, no CRM time yet",
    snap({ crm_updated_at: null, last_applied_source: "app_create" }),
    applied(),
    at(30),
    null,
    true,
  ],
  [
    "an edit in the second of the last read (same time, other values)",
    snap({ crm_updated_at: at(30) }),
    applied(),
    at(30),
    null,
    true,
  ],
  [
    "a robot call waits in the inbox, received after the last apply",
    snap(),
    applied(),
    at(30),
    at(20),
    false,
  ],
  ["an inbox event from before the last apply does not count", snap(), applied(), at(30), at(0), true],
  [
    "a robot call processed meanwhile (its time kept by the snapshot)",
    snap(),
    applied({ last_webhook_received_at: at(25) }),
    at(30),
    null,
    false,
  ],
  [
    "a webhook applied it after the run (source attribution)",
    snap(),
    applied({ last_applied_source: "webhook" }),
    at(30),
    null,
    false,
  ],
  [
    "the CRM time is older than the snapshot",
    snap({ crm_updated_at: at(50) }),
    applied(),
    at(30),
    null,
    false,
  ],
  ["no CRM time on a Contact the snapshot has one for", snap(), applied(), null, null, false],
];
for (const [name, before, after, crmAt, pending, expected] of cases) {
  test(`recovered without a webhook: ${name}`, (t) => {
    t.is(recoveredWithoutWebhook(before, after, crmAt, pending), expected);
  });
}

const S = { recoveredSpikeThreshold: 20, recoveredSpikeRatio: 0.2 };
const spikes: Array<[string, number, number, number | null, boolean]> = [
  ["nothing recovered", 0, 100, null, false],
  ["count at the threshold, first run (no baseline)", 20, 1000, null, true],
  ["count at the threshold and over twice the usual", 20, 1000, 9, true],
  ["count at the threshold but the usual for this portal, a small share", 20, 1000, 15, false],
  ["a quiet portal losing its only webhook: 1 of 1", 1, 1, 0, true],
  ["a share just over the ratio", 21, 100, 50, true],
  ["a share at the ratio is not over it", 20, 100, 50, false],
  ["below both", 3, 100, 1, false],
];
for (const [name, recovered, mapped, baseline, expected] of spikes) {
  test(`spike: ${name}`, (t) => {
    t.is(isRecoveredSpike(recovered, mapped, baseline, S), expected);
  });
}
