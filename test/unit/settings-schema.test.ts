// The one settings schema: catalogue keys become typed groups, values outside the catalogue's types
// and bounds are refused with the key named, and nothing is defaulted here.
import test from "ava";
import { parseSettings, settingKey, settingPath } from "../../src/settings-schema.js";
import { CATALOGUE_DEFAULTS } from "../helpers/settings.js";

const active = (changes: Record<string, unknown> = {}) => ({
  ...CATALOGUE_DEFAULTS,
  ...changes,
  _version: 7,
});

test("catalogue keys map to group.camelName and back", (t) => {
  t.deepEqual(settingPath("batch.max_wait_ms"), ["batch", "maxWaitMs"]);
  t.deepEqual(settingPath("alerts.stage_closed_without_resolution"), [
    "alerts",
    "stageClosedWithoutResolution",
  ]);
  t.is(settingKey(["limiter", "maxInFlight"]), "limiter.max_in_flight");
  for (const key of Object.keys(CATALOGUE_DEFAULTS)) t.is(settingKey(settingPath(key)), key);
});

test("the catalogue defaults parse into typed groups, with the version beside them", (t) => {
  const r = parseSettings(active());
  if (!r.ok) return t.fail(r.errors.join("; "));
  t.is(r.version, 7);
  t.deepEqual(r.settings.batch, { maxWaitMs: 200, size: 20 });
  t.deepEqual(r.settings.limiter, { burst: 5, maxInFlight: 2, refillPerSec: 2 });
  t.deepEqual(r.settings.retry, { baseMs: 1000, horizonSec: 86_400, maxMs: 300_000 });
  t.is(r.settings.reconcile.openedFilter, "Y");
  t.is(r.settings.alerts.entityTypeId, null);
  t.deepEqual(r.settings.alerts.fields, {});
});

test("a key the schema does not know yet is ignored (a catalogue ahead of this code)", (t) => {
  const r = parseSettings(active({ "batch.new_knob": 3, "future.group_key": "x" }));
  t.true(r.ok);
  if (r.ok) t.false("newKnob" in r.settings.batch);
});

test("nothing is defaulted: a missing key fails and names the key", (t) => {
  const { "lease.ttl_sec": _, ...rest } = CATALOGUE_DEFAULTS;
  const r = parseSettings({ ...rest, _version: 3 });
  t.false(r.ok);
  if (!r.ok) {
    t.is(r.version, 3);
    t.true(
      r.errors.some((e) => e.startsWith("lease.ttl_sec: ")),
      r.errors.join("; "),
    );
  }
  t.false(parseSettings(null).ok);
  t.false(parseSettings([]).ok);
});

test("types and bounds are the catalogue's; errors name the key and never echo the value", (t) => {
  const refused: Array<[string, unknown]> = [
    ["batch.size", 51],
    ["batch.size", 0],
    ["batch.size", 2.5],
    ["batch.size", "20"],
    ["batch.max_wait_ms", 0],
    ["retry.base_ms", 9],
    ["limiter.refill_per_sec", 0.001],
    ["reconcile.opened_filter", "yes"],
    ["reconcile.recovered_spike_ratio", 1.5],
    ["alerts.entity_type_id", 127],
    ["alerts.stage_new", ""],
    ["alerts.fields", [1, 2]],
    ["worker.poll_interval_ms", null],
  ];
  for (const [key, value] of refused) {
    const r = parseSettings(active({ [key]: value }));
    t.false(r.ok, `${key} = ${JSON.stringify(value)}`);
    if (!r.ok) {
      t.true(
        r.errors.some((e) => e.startsWith(`${key}: `)),
        r.errors.join("; "),
      );
      if (typeof value === "string" && value !== "") t.false(r.errors.join(" ").includes(value));
    }
  }
  const accepted: Array<[string, unknown]> = [
    ["batch.size", 50],
    ["batch.max_wait_ms", 1],
    ["limiter.refill_per_sec", 0.01],
    ["reconcile.opened_filter", "N"],
    ["alerts.entity_type_id", null],
    ["alerts.stage_new", "DT1040_7:NEW"],
    ["alerts.fields", { fingerprint: "ufCrm14_1" }],
  ];
  for (const [key, value] of accepted) t.true(parseSettings(active({ [key]: value })).ok, key);
});

test("the catalogue's cross-field rule: retry.base_ms must not exceed retry.max_ms", (t) => {
  const r = parseSettings(active({ "retry.base_ms": 500_000, "retry.max_ms": 1000 }));
  t.false(r.ok);
  if (!r.ok) t.deepEqual(r.errors, ["retry.base_ms: must not exceed retry.max_ms"]);
});
