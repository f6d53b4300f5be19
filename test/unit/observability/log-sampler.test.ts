import test from "ava";
import { LogSampler } from "../../../src/observability/log-sampler.js";

test("the first N lines per key and window are written, the rest counted and reported once", (t) => {
  const reports: Array<[string, number]> = [];
  const s = new LogSampler({ perWindow: 3, windowMs: 1_000, onSuppressed: (k, n) => reports.push([k, n]) });
  const at = 1_000_000;
  const admitted = Array.from({ length: 10 }, (_, i) => s.admit("a", at + i));
  t.deepEqual(admitted, [true, true, true, false, false, false, false, false, false, false]);
  t.true(s.admit("b", at + 10), "another key has its own window");
  t.deepEqual(reports, []);
  // The next window: the count of the last one is reported, lines are written again.
  t.true(s.admit("a", at + 1_000));
  t.deepEqual(reports, [["a", 7]]);
  s.flush();
  t.deepEqual(reports, [["a", 7]], "nothing left out since: nothing more reported");
});

test("a window with left-out lines is reported at its end even if no line follows", async (t) => {
  const reports: Array<[string, number]> = [];
  const s = new LogSampler({ perWindow: 1, windowMs: 100, onSuppressed: (k, n) => reports.push([k, n]) });
  s.admit("x");
  s.admit("x");
  s.admit("x");
  await new Promise((r) => setTimeout(r, 250));
  t.deepEqual(reports, [["x", 2]]);
});
