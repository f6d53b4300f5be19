import test from "ava";
import { LoopHandover } from "../../../src/worker/loop-handover.js";

const BUDGET = 55_000;

test("one loop per process: a job while the loop has time returns at once", (t) => {
  const h = new LoopHandover(3_000);
  t.true(h.starts(0));
  h.start(0, BUDGET);
  t.false(h.starts(1_000), "the cron minute's job");
  t.false(h.starts(BUDGET - 6_001), "just before the hand-over window");
});

test("in its last seconds one successor starts, a third job returns, and the successor carries on", (t) => {
  const h = new LoopHandover(3_000);
  const first = h.start(0, BUDGET);
  t.true(h.starts(BUDGET - 3_000), "the hand-over job");
  const second = h.start(BUDGET - 3_000, BUDGET);
  t.false(h.starts(BUDGET - 2_000), "a third job while both run");
  t.false(h.end(first), "the successor still runs: nothing to enqueue");
  t.false(h.starts(BUDGET), "the successor has its whole budget");
  t.true(h.end(second), "nothing runs after the successor: enqueue one");
  t.true(h.starts(2 * BUDGET));
});

test("a successor that ends first leaves the current loop alone, without a successor", (t) => {
  const h = new LoopHandover(3_000);
  const first = h.start(0, BUDGET);
  const second = h.start(BUDGET - 3_000, 5_000);
  t.false(h.end(second));
  t.true(h.starts(BUDGET - 1_000), "in its last seconds without a successor, another may start");
  t.true(h.end(first));
});
