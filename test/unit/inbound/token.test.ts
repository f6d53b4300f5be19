import test from "ava";
import { secretMatcher } from "../../../src/inbound/token.js";

test("the current and the previous token both match; nothing else does", (t) => {
  const m = secretMatcher(["current-token", "previous-token"]);
  t.true(m("current-token"));
  t.true(m("previous-token"));
  for (const bad of [
    "",
    "current-toke",
    "current-token ",
    "CURRENT-TOKEN",
    "previous-tokenx",
    "x".repeat(5000),
  ]) {
    t.false(m(bad), JSON.stringify(bad.slice(0, 20)));
  }
});

test("absent or empty secrets never match, not even an empty candidate", (t) => {
  const m = secretMatcher([undefined, ""]);
  t.false(m(""));
  t.false(m("anything"));
});

test("without a previous token only the current one matches", (t) => {
  const m = secretMatcher(["current-token", undefined]);
  t.true(m("current-token"));
  t.false(m("previous-token"));
});

test("secrets of different lengths compare without throwing (both sides are hashed)", (t) => {
  const m = secretMatcher(["a"]);
  t.notThrows(() => m("a much longer candidate than the secret"));
  t.true(m("a"));
});
